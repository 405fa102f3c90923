"""Where each step's GPU time went, on the GPU's clock: busy parts, and every idle stretch by its cause.

The steps are GPU windows (:mod:`nsight_core.analysis.projection`), cut where GPU work starts and ends into
pieces. A busy piece is ``compute`` (a kernel or graph other than NCCL ran), else ``exposed_comm`` (only
NCCL), else ``exposed_copy`` (only copies or memsets). An idle piece ends where some GPU work starts; what
held that work up is the idle piece's cause, as on a critical path:

- the work was queued (its launch call returned) before the GPU went idle: the GPU waited on another stream,
  an event or a copy (``stream_wait``), or, for a gap shorter than QUEUED_GAP_NS, on its own scheduling
  (``launch_gap``);
- else the host was late to launch it. If the host sat in a synchronising call when the queue drained (the
  call began before the GPU went idle and returned after), the sync caused the stretch, up to as long as the host
  had waited in it for queued work (without the sync, its next work would have overlapped that much GPU work):
  that is ``sync_wait``, kept with the call's name and with what the host did next (a range such as `log`,
  a call, untraced time); so are the later stretches of the step while the host catches up, up to that wait in
  all (:func:`_with_blame`). The rest of the stretch, and every stretch no sync caused, goes to what the host
  did: a user NVTX range (``gpu_idle``, by the range's name: data loading, logging), a CUDA call (``launch_gap``,
  by the call), the framework's time on its way to one (``launch_gap``, ``dispatch`` by the call it led to), an
  OS-runtime call (``gpu_idle``), or untraced time (``gpu_idle``: host work no range or call marks). From the
  launch call to the work's start is the launch's own latency (``launch_gap``).

The parts add up to each window, so no share exceeds the step. Columnar: one sweep over the GPU work's
edges, as-of joins for the work that ends each idle piece, its launch and the sync before it, and
cumulative coverage for the host's ranges (a handful of range names at most, each one pass).
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

QUEUED_GAP_NS = 20_000
"""An idle gap before already-queued work shorter than this (20 µs) is the GPU's own scheduling, not a wait."""
DISPATCH_GAP_NS = 500_000
"""Host time between two CUDA calls shorter than this (0.5 ms) is dispatch: the framework's own
Python and C++ between launches. A longer stretch without a CUDA call is the user's host work (a sleep, a
decode), untraced unless a range marks it."""
TOP_RANGES = 8
"""Host ranges named in the budget; the others are summed as OTHER_RANGES."""
OTHER_RANGES = "(other ranges)"
TOTAL_COLUMNS = {"step": pl.Int64, "part": pl.String, "cpu_kind": pl.String, "cpu_name": pl.String,
                 "total_ns": pl.Int64}


WorkBetween = Callable[[int, int], pl.DataFrame]
"""The launched GPU work that ran between LO and HI: at least every piece that ends after LO and starts by HI (a
piece that ended by LO may be there too), by start, with start_ns, end_ns, kind, comm, launch_ns, launch_end_ns and
launch_name (:func:`nsight_core.analysis.projection.launched`)."""


def step_syncs(blocking: pl.DataFrame, thread: int | None) -> pl.DataFrame:
    """BLOCKING's calls on the steps' THREAD (all where it is unknown), by start: the syncs the budget blames."""
    return (blocking.filter(pl.col("thread") == thread) if thread is not None else blocking).sort("start_ns")


def budget_in_batches(windows: pl.DataFrame, cuts: list[tuple[int, int]], between: WorkBetween,
                      calls: pl.DataFrame, host: Host, stretches: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`gpu_budget`'s totals and idle stretches, WINDOWS budgeted a batch (CUTS: :func:`batches`) at a time:
    steps are local in time, so every lookup a piece makes lies within its batch's time, with the next work after it
    and the last sync before it. BETWEEN: the GPU work of a batch's time; CALLS: :func:`step_syncs`; HOST: what the
    steps' thread was in. STRETCHES: whether to keep the idle stretches (else none: every step of a large capture
    has thousands, 258 MB for 160,000 steps of one fixture, and only the steps a page draws need theirs).

    BETWEEN says where the work comes from (analysis/every_budget.py: a filtered scan of each batch's time)."""
    call_starts = calls["start_ns"]

    def budget_of(cut: tuple[int, int]) -> tuple[pl.DataFrame, pl.DataFrame]:
        batch = windows.slice(*cut)
        lo, hi = batch.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
        # Its work, with what still ran at LO (HI is the next window's first work, or the end of the last's); its
        # syncs, from the last begun by LO (one may hold the host as the GPU drains).
        since = max(int(call_starts.search_sorted(lo, side="right")) - 1, 0)
        until = int(call_starts.search_sorted(hi, side="right"))
        return _batch_budget(batch, between(lo, hi), calls.slice(since, until - since), host.at(lo, hi), lo, hi,
                             stretches)

    done = [budget_of(cut) for cut in cuts]
    totals, idle = [part for part, _ in done], [stretches for _, stretches in done]
    return (pl.concat(totals).cast(TOTAL_COLUMNS).sort(  # type: ignore[arg-type]
        "step", "part", "cpu_kind", "cpu_name", nulls_last=True) if totals else pl.DataFrame(schema=TOTAL_COLUMNS),
            pl.concat(idle) if idle else pl.DataFrame(schema=IDLE_COLUMNS))


IDLE_COLUMNS = {"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "part": pl.String,
                "cpu_kind": pl.String, "cpu_name": pl.String}


def _batch_budget(windows: pl.DataFrame, work: pl.DataFrame, syncs: pl.DataFrame, host: Host, lo: int,
                  hi: int, stretches: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """WINDOWS (from LO to HI) cut into parts and idle causes: the sums per step, part and CPU activity (step,
    part, cpu_kind, cpu_name, total_ns), and each idle stretch with its largest cause (IDLE_COLUMNS). WORK: the GPU
    work that ran between LO and HI; SYNCS: the steps' thread's synchronising calls, from the last that began by
    LO."""
    # Only the columns the timeline needs are copied (the launches' text is not).
    pieces = _pieces(windows, work.select("start_ns", "end_ns", "kind", "comm").filter(
        (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)), lo, hi)
    idle_state = pl.col("state") == STATES.index("idle")
    busy = pieces.filter(~idle_state).group_by("step", "state").agg(pl.col("ns").sum())
    idle = pieces.filter(idle_state).drop("state")
    del pieces  # each batch's temporaries let go as soon as they are used: they bound the budget's memory
    none = pl.lit(None, pl.String)
    busy_rows = busy.select("step", pl.col("state").replace_strict(range(len(STATES)), STATES,
                                                                   return_dtype=pl.String).alias("part"),
                            none.alias("cpu_kind"), none.alias("cpu_name"), pl.col("ns").alias("total_ns"))
    causes = _Causes.of(_with_blame(_with_cause(idle, work, syncs), syncs, windows), host)
    del idle
    return (pl.concat([busy_rows.filter(pl.col("total_ns") > 0), causes.totals()]),
            causes.largest() if stretches else pl.DataFrame(schema=IDLE_COLUMNS))


STATES = ("compute", "exposed_comm", "exposed_copy", "idle")
"""What the GPU did in a piece of its timeline (:func:`_pieces`' state indexes it): the first that holds."""


LAYER_BITS = 21
"""Each GPU layer's count of running work in its own 21 bits of one integer (:func:`_pieces`): up to two million
pieces of work of one layer at once."""


def _pieces(windows: pl.DataFrame, work: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """The GPU timeline between LO and HI cut at every edge of WORK and of WINDOWS: step, start_ns, ns, state
    (an index into STATES: a code, not its text, on each of the hundreds of thousands of pieces).

    The three layers' counts (compute, communication, copies) are one integer, each layer a field of LAYER_BITS:
    one cumulative sum of the edges' steps counts them all, where three columns cost three sums and the sort
    moved them all."""
    copy = pl.col("kind").is_in(["copy", "memset"])
    step = (pl.when(copy).then(1 << (2 * LAYER_BITS)).when(pl.col("comm")).then(1 << LAYER_BITS).otherwise(1)
            .cast(pl.Int64))
    edges = pl.concat([
        work.select(pl.col("start_ns").clip(lo, hi).alias("t"), step.alias("d")),
        work.select(pl.col("end_ns").clip(lo, hi).alias("t"), (-step).alias("d")),
        windows.select(pl.col("start_ns").alias("t"), pl.lit(0, pl.Int64).alias("d")),
        pl.DataFrame({"t": [hi], "d": [0]}, schema={"t": pl.Int64, "d": pl.Int64}),
    ]).sort("t")
    # After a sort, one cumulative sum; the counts after all edges at one time are its last row's (exact there:
    # each layer's count is then what runs, between 0 and 2**LAYER_BITS).
    counts = edges.select("t", pl.col("d").cum_sum()).filter(pl.col("t") != pl.col("t").shift(-1).fill_null(-1))
    running = [(pl.col("d") // (1 << (LAYER_BITS * index))) % (1 << LAYER_BITS) > 0 for index in range(3)]
    state = (pl.when(running[0]).then(0).when(running[1]).then(1).when(running[2]).then(2).otherwise(3)
             .cast(pl.UInt8))
    pieces = counts.select(pl.col("t").alias("start_ns"), (pl.col("t").shift(-1) - pl.col("t")).alias("ns"),
                           state.alias("state")).filter(pl.col("ns") > 0)
    located = pieces.join_asof(windows.select("step", pl.col("start_ns").alias("_w"), pl.col("end_ns").alias("_we")),
                               left_on="start_ns", right_on="_w", strategy="backward")
    return located.filter(pl.col("start_ns") < pl.col("_we")).drop("_w", "_we")


def _with_cause(idle: pl.DataFrame, work: pl.DataFrame, syncs: pl.DataFrame) -> pl.DataFrame:
    """IDLE pieces with the work that ends each (its launch call) and the sync the host sat in when it began (SYNCS:
    the steps' thread's synchronising calls, by start): step, a, b, launch_ns, launch_end_ns, launch_name, sync_name,
    sync_end_ns."""
    # The pieces follow each other in time: by start, and so by end (no sort).
    pieces = idle.select("step", pl.col("start_ns").alias("a"),
                         (pl.col("start_ns") + pl.col("ns")).set_sorted().alias("b"))
    nxt = work.select(pl.col("start_ns").alias("b"), "launch_ns", "launch_end_ns", "launch_name").sort("b")
    pieces = pieces.join_asof(nxt, on="b", strategy="forward")
    syncs = syncs.select(pl.col("start_ns").alias("_sync_start"), pl.col("end_ns").alias("sync_end_ns"),
                         pl.col("name").alias("sync_name")).sort("_sync_start")
    # Between a piece's start and end, so in the pieces' order too (no sort: the stretches stay by start).
    late_end = pl.min_horizontal(pl.max_horizontal("launch_ns", "a"), "b").fill_null(pl.col("b")).set_sorted()
    pieces = pieces.with_columns(late_end.alias("late_end")).join_asof(syncs, left_on="late_end",
                                                                        right_on="_sync_start", strategy="backward")
    # The sync drained the queue when the host sat in it as the GPU went idle; one begun after is no cause.
    drained = (pl.col("_sync_start") <= pl.col("a")) & (pl.col("sync_end_ns") >= pl.col("a"))
    return pieces.with_columns(pl.when(drained).then(pl.col("sync_name")).alias("sync_name"),
                               pl.when(drained).then(pl.col("sync_end_ns").clip(upper_bound=pl.col("late_end")))
                               .alias("sync_end_ns"),
                               (pl.col("a") - pl.col("_sync_start")).alias("sync_waited_ns")).drop("_sync_start")


def _with_blame(pieces: pl.DataFrame, syncs: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """PIECES (:func:`_with_cause`) with ``blame_ns``: how much of each piece's late part (from its start to its
    launch) a sync of its step is to blame for. A sync holds the host for as long as it waits for queued work (W:
    from its start to when the GPU went idle, or its end); the host is then W late for all that follows, so the idle
    time of the step after it, up to W in all, is the sync's: the stretch it drained, and the launch gaps after it
    while the host catches up (a tail of small launches after `h[h > 0]`). Without the sync, that much of the host's
    later work would have overlapped the GPU's. SYNCS: the steps' thread's synchronising calls, by start; the
    stretch a sync drained is its own whatever the step, the later ones of the step it began in (after WINDOWS'
    cpu_start_ns)."""
    syncs = syncs.select(pl.col("start_ns").alias("_s_start"), pl.col("end_ns").alias("_s_end")).sort("_s_start")
    starts = windows.select("step", pl.col("cpu_start_ns").alias("_cpu_start"))
    located = (pieces.join(starts, on="step", how="left", maintain_order="left")
               .join_asof(syncs, left_on="a", right_on="_s_start", strategy="backward"))
    drained = pl.col("_s_end") >= pl.col("a")  # the host sat in it as the GPU went idle: its cause, whatever the step
    key = pl.when((pl.col("_s_start") >= pl.col("_cpu_start")) | drained).then(pl.col("_s_start"))
    late = pl.col("launch_end_ns").is_not_null() & (pl.col("launch_end_ns") > pl.col("a"))
    late_ns = pl.when(late).then(pl.col("late_end") - pl.col("a")).otherwise(0)
    # The GPU ran out of queued work at the first late piece (a gap between queued kernels is no drain).
    drained_at = pl.col("a").filter(late).min().over(key)
    waited = (pl.min_horizontal("_s_end", drained_at) - pl.col("_s_start")).clip(lower_bound=0)
    through = late_ns.cum_sum().over(key)
    blame = pl.min_horizontal(through, waited) - pl.min_horizontal(through - late_ns, waited)
    return located.with_columns(pl.when(key.is_not_null()).then(blame).otherwise(0).alias("blame_ns")).drop(
        "_cpu_start", "_s_start", "_s_end")


class Host:
    """What the steps' thread was in, as interval sets whose coverage of any span is two as-of lookups.

    With CALLS (:class:`HostCalls`), the host's time outside its ranges is named by the thread's calls, a batch of time
    at a time (:meth:`at`): each CUDA call (``cuda_api``), the framework's time before it (``dispatch``, named by the
    call it led to), each OS-runtime call (``osrt``), else ``untraced``. Without, by when any thread dispatched."""

    def __init__(self, steps: pl.DataFrame, ranges: dict[str, pl.DataFrame], dispatch: pl.DataFrame,
                 calls: HostCalls | None = None, tiling: pl.DataFrame | None = None) -> None:
        self.steps = _cumulative(steps)
        self.ranges = {name: _cumulative(frame) for name, frame in ranges.items()}
        self.dispatch = _cumulative(dispatch)
        self.calls = calls
        self.tiling = tiling
        """The batch's calls and the time before them (:meth:`HostCalls.tiling`), where :meth:`at` made it."""

    @classmethod
    def of(cls, windows: pl.DataFrame, user: pl.DataFrame, dispatch: pl.DataFrame,
           calls: HostCalls | None = None) -> Host:
        """The steps of WINDOWS (their ranges), the USER ranges (:func:`outermost_user_ranges`) named by TOP_RANGES
        names, and when the host DISPATCHED (:func:`dispatch_runs`) or, with CALLS, what the thread's calls were."""
        steps = windows.select(pl.col("cpu_start_ns").alias("start_ns"), pl.col("cpu_end_ns").alias("end_ns"))
        top = (user.group_by("name").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("t"))
               .sort(["t", "name"], descending=[True, False]).head(TOP_RANGES)["name"])
        named = user.with_columns(pl.when(pl.col("name").is_in(top.implode())).then(pl.col("name"))
                                  .otherwise(pl.lit(OTHER_RANGES)).alias("name"))
        return cls(steps, {name: frame.drop("name") for (name,), frame in named.group_by("name")}, dispatch, calls)

    def at(self, lo: int, hi: int) -> Host:
        """This host with the calls of the time from LO to HI read (what :meth:`split` of spans in it names)."""
        if self.calls is None:
            return self
        host = Host.__new__(Host)
        host.steps, host.ranges, host.dispatch, host.calls = self.steps, self.ranges, self.dispatch, self.calls
        masks = [frame.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)).select("start_ns", "end_ns")
                 for frame in self.ranges.values()]
        host.tiling = self.calls.tiling(lo, hi, pl.concat(masks) if masks else None)
        return host

    def activities(self) -> list[tuple[str, str, str]]:
        """What the host can have done in a span, in the order :meth:`split` gives it: cpu_kind, cpu_name and the
        part of a span no sync caused (user ranges, OS calls and untraced time idle the GPU; CUDA calls and the
        framework's time between them are launch gaps)."""
        named = self.calls.labels() if self.calls is not None else [("dispatch", "", "launch_gap")]
        return [*(("nvtx", name, "gpu_idle") for name in self.ranges), *named, ("untraced", "", "gpu_idle")]

    def split(self, q0: pl.Series, q1: pl.Series) -> list[pl.Series]:
        """How much of each span from Q0 to Q1 the host spent in each of :meth:`activities`."""
        in_steps, dispatching, *covered = _covered([self.steps, self.dispatch, *self.ranges.values()], q0, q1)
        in_ranges_inside = pl.zeros(q0.len(), pl.Int64, eager=True)
        in_ranges_outside = pl.zeros(q0.len(), pl.Int64, eager=True)
        for ranges, in_range in zip(self.ranges.values(), covered, strict=True):
            inside = _inside(ranges, self.steps)
            in_ranges_inside += in_range * inside
            in_ranges_outside += in_range * (1 - inside)
        if self.calls is not None:
            named = _coded_cover(self.tiling, len(self.calls.labels()), q0, q1)
            untraced = (q1 - q0 - in_ranges_inside - in_ranges_outside - sum(named, pl.zeros(q0.len(), pl.Int64,
                                                                                             eager=True)))
            return [*covered, *named, untraced.clip(lower_bound=0)]
        dispatch = pl.select(pl.min_horizontal(pl.lit(dispatching), pl.lit((in_steps - in_ranges_inside)
                                                                           .clip(lower_bound=0)))).to_series()
        untraced = (q1 - q0 - in_ranges_inside - in_ranges_outside - dispatch).clip(lower_bound=0)
        return [*covered, dispatch, untraced]


TOP_CALLS = 8
"""CUDA calls (and OS-runtime calls) of the steps' thread named in the budget, by their time over the capture; the
others are summed as OTHER_CALLS."""
OTHER_CALLS = "(other calls)"
CallsBetween = Callable[[int, int], tuple[pl.DataFrame, pl.DataFrame]]
"""The steps' thread's CUDA calls and OS-runtime calls (start_ns, end_ns, name, by start) that end after LO and start
before HI (analysis/every_budget.py: a filtered scan of that time)."""


class HostCalls:
    """The steps' thread's calls as the host's budget names them: the TOP_CALLS CUDA calls (NAMES, the rest
    OTHER_CALLS) and OS-runtime calls (OSRT), each a code, and where they are read (BETWEEN). The names are the
    capture's, chosen once, so that every batch of steps names its time alike."""

    def __init__(self, names: list[str], osrt: list[str], between: CallsBetween) -> None:
        self.names = [*names, OTHER_CALLS]
        self.osrt = [*osrt, OTHER_CALLS] if osrt else []
        self.between = between

    def labels(self) -> list[tuple[str, str, str]]:
        """cpu_kind, cpu_name and part of each code: in each CUDA call, before each (the framework's time that led
        to it), in each OS-runtime call."""
        return [*(("cuda_api", name, "launch_gap") for name in self.names),
                *(("dispatch", name, "launch_gap") for name in self.names),
                *(("osrt", name, "gpu_idle") for name in self.osrt)]

    def _code(self, names: pl.Expr, known: list[str], offset: int) -> pl.Expr:
        other = len(known) - 1
        return (names.replace_strict(known[:-1], range(offset, offset + other), default=offset + other)
                .cast(pl.UInt32))

    def tiling(self, lo: int, hi: int, mask: pl.DataFrame | None) -> pl.DataFrame:
        """The thread's time from LO to HI cut into pieces, one code each (start_ns, end_ns, _code, by start; the
        codes index :meth:`labels`): a CUDA call, else an OS-runtime call, else the framework's time before a CUDA
        call that follows within DISPATCH_GAP_NS of the call before it; none inside MASK (the user ranges, which name
        their time themselves). Queries (QUERY_CALLS: the name of a kernel, whether a stream captures) are the
        framework's bookkeeping on its way to the call they precede, and count as time before it. The calls are read
        from DISPATCH_GAP_NS before LO (the gap before the first) to as long after HI (the call a query leads to)."""
        cuda, osrt = self.between(lo - DISPATCH_GAP_NS, hi + DISPATCH_GAP_NS)
        cuda = _unnested(cuda)
        count = len(self.names)
        name = pl.col("name")
        gap = pl.col("start_ns") - pl.col("end_ns").shift(1)
        chain = (gap >= DISPATCH_GAP_NS).fill_null(True).cum_sum()
        query = name.str.contains(QUERY_CALLS)
        # The call each leads to: the next one that is no query, in its chain of calls (else itself).
        lead = pl.when(~query).then(name).backward_fill().over(chain).fill_null(name)
        cuda = cuda.with_columns(query.alias("_query"), lead.alias("_lead"))
        calls = cuda.filter(~pl.col("_query")).select("start_ns", "end_ns",
                                                      self._code(name, self.names, 0).alias("_code"))
        before = pl.concat([
            cuda.select(pl.col("end_ns").shift(1).alias("start_ns"), pl.col("start_ns").alias("end_ns"),
                        self._code(pl.col("_lead"), self.names, count).alias("_code")).filter(
                (pl.col("end_ns") > pl.col("start_ns")) & (pl.col("end_ns") - pl.col("start_ns") < DISPATCH_GAP_NS)),
            cuda.filter(pl.col("_query")).select("start_ns", "end_ns",
                                                 self._code(pl.col("_lead"), self.names, count).alias("_code"))])
        layers = [] if mask is None else [_unnested(mask).select("start_ns", "end_ns",
                                                                 pl.lit(MASKED, pl.UInt32).alias("_code"))]
        layers.append(calls)
        if self.osrt:
            layers.append(_unnested(osrt).select("start_ns", "end_ns",
                                                 self._code(name, self.osrt, 2 * count).alias("_code")))
        layers.append(before.sort("start_ns"))
        painted = _painted(layers, lo, hi)
        return painted.filter(pl.col("_code") != MASKED)


QUERY_CALLS = (r"(?i)GetName|IsCapturing|GetCaptureInfo|GetDevice$|GetDevice_|GetLastError|PeekAtLastError|"
               r"GetAttribute|GetProperties|DriverGetVersion|RuntimeGetVersion|FuncGetAttributes|GetFuncBySymbol|"
               r"KernelGetFunction|LibraryGetKernel")
"""CUDA calls that ask, set up nothing and wait for nothing (cuKernelGetName after each launch, cudaStreamIsCapturing
before a copy): the framework's bookkeeping, named by the call they lead to."""


MASKED = 2**32 - 1
"""The code of time a higher layer (a user range) names: left out of the calls' tiling."""


def _unnested(intervals: pl.DataFrame) -> pl.DataFrame:
    """INTERVALS by start, each starting no earlier than every one before it ended (a call inside another, as the
    driver's inside the runtime's, keeps only what lies after it), none empty: one layer of :func:`_painted`."""
    ordered = intervals if intervals["start_ns"].is_sorted() else intervals.sort("start_ns", maintain_order=True)
    reach = pl.col("end_ns").cum_max().shift(1)
    return ordered.with_columns(pl.max_horizontal("start_ns", reach).alias("start_ns")).filter(
        pl.col("end_ns") > pl.col("start_ns"))


def _painted(layers: list[pl.DataFrame], lo: int, hi: int) -> pl.DataFrame:
    """LAYERS (start_ns, end_ns, _code; none overlapping within a layer) painted over each other, the first on top,
    from LO to HI: the pieces between consecutive edges with the code of the first layer that covers each (start_ns,
    end_ns, _code, by start; uncovered time left out)."""
    edges = pl.concat([frame.select(pl.col(column).clip(lo, hi).alias("t")) for frame in layers
                       for column in ("start_ns", "end_ns")]).unique().sort("t")
    pieces = edges.select(pl.col("t").alias("start_ns"), pl.col("t").shift(-1).alias("end_ns")).drop_nulls()
    codes = []
    for index, layer in enumerate(layers):
        found = pieces.join_asof(layer.select(pl.col("start_ns").alias("_s"), pl.col("end_ns").alias(f"_e{index}"),
                                              pl.col("_code").alias(f"_k{index}")),
                                 left_on="start_ns", right_on="_s", strategy="backward")
        codes.append(pl.when(pl.col("start_ns") < found[f"_e{index}"]).then(found[f"_k{index}"]))
    return pieces.with_columns(pl.coalesce(codes).alias("_code")).drop_nulls("_code")


def _coded_cover(tiling: pl.DataFrame | None, count: int, q0: pl.Series, q1: pl.Series) -> list[pl.Series]:
    """How much of each span from Q0 to Q1 TILING's pieces of each of COUNT codes cover (each span in order, as
    :func:`_covered`'s): per code, the length of its pieces before each point is a column, so that two as-of
    lookups give every code's coverage."""
    if tiling is None or not tiling.height:
        return [pl.zeros(q0.len(), pl.Int64, eager=True) for _ in range(count)]
    length = pl.col("end_ns") - pl.col("start_ns")
    mine = [pl.when(pl.col("_code") == code).then(length).otherwise(0) for code in range(count)]
    cumulative = tiling.select("start_ns", "end_ns", "_code",
                               *((value.cum_sum() - value).alias(f"_b{code}") for code, value in enumerate(mine)))
    inside = pl.min_horizontal("t", "end_ns") - pl.col("start_ns")

    def before(points: pl.Series) -> pl.DataFrame:
        found = pl.DataFrame({"t": points}).join_asof(cumulative, left_on="t", right_on="start_ns",
                                                      strategy="backward")
        return found.select((pl.col(f"_b{code}") + pl.when(pl.col("_code") == code).then(inside).otherwise(0))
                            .fill_null(0).alias(f"_b{code}") for code in range(count))

    ends, starts = before(q1), before(q0)
    return [ends[f"_b{code}"] - starts[f"_b{code}"] for code in range(count)]


def outermost_user_ranges(windows: pl.DataFrame, reach: int, ranges: pl.DataFrame) -> tuple[int, pl.DataFrame]:
    """The latest end of the user ranges so far, and the user ranges among RANGES (start_ns, end_ns, name: the steps'
    thread's NVTX ranges that are not steps): those that hold no step of WINDOWS (a region, an epoch), the outermost
    of those nesting. REACH: that end of the user ranges before RANGES (a fold step over windows of start time)."""
    starts = windows["cpu_start_ns"]
    holds_step = (pl.lit(starts).search_sorted(pl.col("end_ns"), side="left")
                  > pl.lit(starts).search_sorted(pl.col("start_ns"), side="left"))
    user = ranges.sort("start_ns").filter(~holds_step)
    before = pl.max_horizontal(pl.col("end_ns").cum_max().shift(1).fill_null(-1), pl.lit(reach))
    latest = user.select(pl.col("end_ns").max()).item()
    return max(reach, latest if latest is not None else -1), user.filter(pl.col("start_ns") >= before)


def dispatch_runs(cuda_api: pl.DataFrame) -> pl.DataFrame:
    """The CUDA calls of all threads merged across gaps shorter than DISPATCH_GAP_NS: when the host dispatched.

    Runs are calls too: the runs of consecutive windows of calls (by start), merged again, are the runs of all of
    them (each run ends at the latest end of the calls up to its last), which a streamed capture relies on."""
    calls = cuda_api.select("start_ns", "end_ns")  # in start order already, as the Trace reads them: no sort
    calls = (calls if calls["start_ns"].is_sorted() else calls.sort("start_ns")).with_columns(
        pl.col("end_ns").cum_max())
    # By start, a run begins where a call starts a gap after all before it ended, and ends where the next begins.
    begins = (pl.col("start_ns") - pl.col("end_ns").shift(1) > DISPATCH_GAP_NS).fill_null(True)
    return calls.select(pl.col("start_ns").filter(begins), pl.col("end_ns").filter(begins.shift(-1).fill_null(True)))


def _cumulative(intervals: pl.DataFrame) -> pl.DataFrame:
    """Non-overlapping INTERVALS by start with the summed length before each: what :func:`_covered` looks up."""
    ordered = intervals.select("start_ns", "end_ns").sort("start_ns")
    length = pl.col("end_ns") - pl.col("start_ns")
    return ordered.with_columns((length.cum_sum() - length).alias("_before"))


def _covered(cumulatives: list[pl.DataFrame], q0: pl.Series, q1: pl.Series) -> list[pl.Series]:
    """How much of each span from Q0 to Q1 each of CUMULATIVES' interval sets covers: what lies before the span's
    end less what lies before its start.

    Q0 and Q1 each in order: the spans are taken from the idle pieces (each span within its piece, the pieces in
    time order) or are non-overlapping ranges by start, so each end is looked up where it is, with no sort and no
    scatter back (they took a third of the time). Polars' as-of join checks that order (an error, never a wrong
    number)."""
    value = (pl.col("_before") + (pl.min_horizontal("t", "end_ns") - pl.col("start_ns"))).fill_null(0)
    starts, ends = pl.DataFrame({"t": q0}), pl.DataFrame({"t": q1})

    def before(points: pl.DataFrame, cumulative: pl.DataFrame) -> pl.Series:
        return points.join_asof(cumulative, left_on="t", right_on="start_ns", strategy="backward").select(
            value).to_series()
    return [before(ends, cumulative) - before(starts, cumulative) for cumulative in cumulatives]


def _inside(ranges: pl.DataFrame, steps: pl.DataFrame) -> pl.Series:
    """1 where a range lies inside a step, else 0: per range set, the share of its time that does (0 or 1 each)."""
    total = int((ranges["end_ns"] - ranges["start_ns"]).sum())
    if not total or not steps.height:
        return pl.Series([0], dtype=pl.Int64)
    within = _covered([steps], ranges["start_ns"], ranges["end_ns"])[0].sum()
    return pl.Series([1 if within * 2 >= total else 0], dtype=pl.Int64)


class _Causes:
    """The causes of the idle pieces (:func:`_with_cause`), a column each, one row per piece: step, a, b, the
    columns that name a cause (launch_name, sync_name, short) and the candidates' nanoseconds (_c0, _c1, ...; 0
    where a cause does not apply). Each nanosecond of a piece is in exactly one cause.

    A column per cause, not a row per piece and cause: the sums per step are a group-by on the step (and on the
    name where a cause has one), and a piece's largest cause a horizontal maximum, where rows of text keys cost a
    sort and a group-by by four columns (on a 200,000-kernel capture, a third of the budget's time)."""

    def __init__(self, frame: pl.DataFrame, candidates: list[tuple[Label, Label, Label]],
                 named: dict[int, str]) -> None:
        self.frame = frame
        self.candidates = candidates
        """(part, cpu_kind, cpu_name) of each _c<i>, in the order that breaks ties (the first of equal causes): a
        value, or an expression where it varies by stretch."""
        self.named = named
        """The candidates whose name is a column of FRAME (launch_name, sync_name), by index."""

    @classmethod
    def of(cls, idle: pl.DataFrame, host: Host) -> _Causes:
        """The causes of IDLE's pieces: untraced work, queued work (a launch gap or a stream wait), the launch's
        latency, the sync, then what the HOST did after the sync's blame and before the launch."""
        untraced = pl.col("launch_ns").is_null()
        queued = ~untraced & (pl.col("launch_end_ns") <= pl.col("a"))
        late = ~untraced & (pl.col("launch_end_ns") > pl.col("a"))
        synced = late & (pl.col("blame_ns") > 0)
        # A sync is to blame for as long as the host had waited in it for queued work (:func:`_with_blame`): without
        # it, the host's later work would have overlapped that much GPU work. The rest of the stretch is the host's.
        blamed_end = pl.col("a") + pl.col("blame_ns")
        call_end = pl.min_horizontal(pl.col("sync_end_ns").fill_null(pl.col("a")), blamed_end)
        gap = pl.col("b") - pl.col("a")
        zero = pl.lit(0, pl.Int64)
        frame = idle.select(
            "step", "a", "b", "launch_name", "sync_name", (gap < QUEUED_GAP_NS).alias("short"),
            pl.when(untraced).then(gap).otherwise(zero).alias("_c0"),
            pl.when(queued).then(gap).otherwise(zero).alias("_c1"),
            pl.when(late).then(pl.col("b") - pl.col("late_end")).otherwise(zero).alias("_c2"),
            pl.when(synced).then(call_end - pl.col("a")).otherwise(zero).alias("_c3"),
            # The host's spans: from the call's end to the end of the sync's blame (_q0 to _q1), and from there, or
            # the stretch's start, to the launch (_q1 to _q2); empty where they do not apply.
            pl.when(synced).then(call_end).otherwise(pl.col("a")).alias("_q0"),
            pl.when(synced).then(blamed_end).otherwise(pl.col("a")).alias("_q1"),
            pl.when(late).then(pl.col("late_end")).otherwise(pl.col("a")).alias("_q2"))
        # The spans after a sync's blame only where one was to blame (few stretches), the rest 0.
        blamed = frame.select(pl.col("_q1") > pl.col("_q0")).to_series().arg_true()
        after_sync = [pl.zeros(frame.height, pl.Int64, eager=True).scatter(blamed, values) for values in
                      host.split(frame["_q0"].gather(blamed), frame["_q1"].gather(blamed))] if blamed.len() else \
            [pl.zeros(frame.height, pl.Int64, eager=True)] * len(host.activities())
        after_launch = host.split(frame["_q1"], frame["_q2"])
        host_causes = [column for pair in zip(after_sync, after_launch, strict=True) for column in pair]
        candidates: list[tuple[Label, Label, Label]] = [
            ("gpu_idle", "untraced", ""),
            (pl.when("short").then(pl.lit("launch_gap")).otherwise(pl.lit("stream_wait")), None, None),
            ("launch_gap", "dispatch", pl.col("launch_name")),
            ("sync_wait", "cuda_api", pl.col("sync_name"))]
        for kind, name, part in host.activities():
            candidates += [("sync_wait", kind, name), (part, kind, name)]
        columns = [f"_c{index}" for index in range(4, len(candidates))]
        frame = frame.drop("_q0", "_q1", "_q2").with_columns(
            values.alias(column) for column, values in zip(columns, host_causes, strict=True))
        return cls(frame, candidates, {2: "launch_name", 3: "sync_name"})

    def totals(self) -> pl.DataFrame:
        """The causes summed per step, part, cpu_kind and cpu_name (TOTAL_COLUMNS), none of 0 ns."""
        columns = [f"_c{index}" for index in range(len(self.candidates))]
        keyed = {index: ["step", key] for index, key in self.named.items()}
        keyed[1] = ["step", "short"]  # queued: a launch gap or a stream wait, by its length
        plain = [index for index in range(len(columns)) if index not in keyed]
        # The causes named alike for every stretch: summed per step, a row per step and cause, labelled by a join.
        labels = pl.DataFrame([[columns[index] for index in plain],
                               *([self.candidates[index][position] for index in plain] for position in range(3))],
                              schema={"_cause": pl.String, "part": pl.String, "cpu_kind": pl.String,
                                      "cpu_name": pl.String}, orient="col")
        sums = [self.frame.group_by("step").agg(pl.col(columns[index]).sum() for index in plain)
                .unpivot(index="step", variable_name="_cause", value_name="total_ns")
                .join(labels, on="_cause").select("step", "part", "cpu_kind", "cpu_name", "total_ns")]
        for index, keys in keyed.items():  # the causes named by the stretch: summed per step and name
            part, kind, name = (_expr(label) for label in self.candidates[index])
            sums.append(self.frame.filter(pl.col(columns[index]) > 0).group_by(keys).agg(pl.col(columns[index]).sum())
                        .select("step", part.alias("part"), kind.alias("cpu_kind"), name.alias("cpu_name"),
                                pl.col(columns[index]).alias("total_ns")))
        # Two causes may share a key (the untraced stretches and the host's untraced time: gpu_idle, untraced).
        return (pl.concat(sums).group_by("step", "part", "cpu_kind", "cpu_name").agg(pl.col("total_ns").sum())
                .filter(pl.col("total_ns") > 0))

    def largest(self) -> pl.DataFrame:
        """Each idle piece with its largest cause (IDLE_COLUMNS), by start; ties go to the cause made first."""
        count = len(self.candidates)
        most = pl.col("_most")
        # The first cause at the maximum: the largest of count - index over those at it (one pass each, no chain).
        which = count - pl.max_horizontal((pl.col(f"_c{index}") == most).cast(pl.UInt32) * (count - index)
                                          for index in range(count))
        chosen = (self.frame.with_columns(pl.max_horizontal(f"_c{index}" for index in range(count)).alias("_most"))
                  .filter(most > 0).select("step", "a", "b", "short", *self.named.values(), which.alias("_which")))
        # Each cause's part, kind and name looked up by its index, the few that vary by stretch put in after.
        labels = []
        for position in range(3):
            values = [None if isinstance(candidate[position], pl.Expr) else candidate[position]
                      for candidate in self.candidates]
            label = pl.lit(pl.Series(values, dtype=pl.String)).gather(pl.col("_which"))
            for index, candidate in enumerate(self.candidates):
                if isinstance(candidate[position], pl.Expr):
                    label = pl.when(pl.col("_which") == index).then(candidate[position]).otherwise(label)
            labels.append(label)
        part, kind, name = labels
        return chosen.select("step", pl.col("a").alias("start_ns"), pl.col("b").alias("end_ns"),
                                       part.alias("part"), kind.alias("cpu_kind"), name.alias("cpu_name"))


Label = str | None | pl.Expr
"""A cause's part, cpu_kind or cpu_name: the same for every stretch, or an expression of the stretch's columns."""


def _expr(label: Label) -> pl.Expr:
    return label if isinstance(label, pl.Expr) else pl.lit(label, pl.String)
