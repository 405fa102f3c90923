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
  dispatch, untraced time). The rest of the stretch, and every stretch no sync caused, goes to what the host
  did: a user NVTX range (``gpu_idle``, by the range's name: data loading, logging), dispatch (``launch_gap``:
  CUDA calls and the framework's time between them, inside the step outside any user range), or untraced time
  (``gpu_idle``: host work no range marks). From the launch call to the work's start is the launch's own
  latency (``launch_gap``).

The parts add up to each window, so no share exceeds the step. Columnar: one sweep over the GPU work's
edges, as-of joins for the work that ends each idle piece, its launch and the sync before it, and
cumulative coverage for the host's ranges (a handful of range names at most, each one pass).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import polars as pl

QUEUED_GAP_NS = 20_000
"""An idle gap before already-queued work shorter than this (20 µs) is the GPU's own scheduling, not a wait."""
DISPATCH_GAP_NS = 500_000
"""Host time between two CUDA calls (any thread) shorter than this (0.5 ms) is dispatch: the framework's own
Python and C++ between launches. A longer stretch without a CUDA call is the user's host work (a sleep, a
decode), untraced unless a range marks it."""
TOP_RANGES = 8
"""Host ranges named in the budget; the others are summed as OTHER_RANGES."""
OTHER_RANGES = "(other ranges)"
TOTAL_COLUMNS = {"step": pl.Int64, "a": pl.Int64, "b": pl.Int64, "part": pl.String, "cpu_kind": pl.String,
                 "cpu_name": pl.String, "total_ns": pl.Int64}


BATCH_WORK = 65_536
"""GPU work per batch of steps: the budget's temporaries (a few rows per piece of the timeline) stay this size, not
the capture's (a 200,000-kernel capture's peak fell by a third)."""
BATCHES_AT_ONCE = 2


def gpu_budget(windows: pl.DataFrame, work: pl.DataFrame, blocking: pl.DataFrame, nvtx: pl.DataFrame,
               family_mask: pl.Series, thread: int | None, cuda_api: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The GPU budget of WINDOWS summed per step, part and CPU activity (step, part, cpu_kind, cpu_name, total_ns;
    cpu_kind null where the GPU ran or waited on itself), and each GPU idle stretch with the cause that holds most of
    it (step, start_ns, end_ns, part, cpu_kind, cpu_name: what a step view shades and labels).

    WINDOWS: step, start_ns, end_ns (contiguous GPU windows, by start) and cpu_start_ns, cpu_end_ns (the step ranges).
    WORK: :func:`nsight_core.analysis.projection.launched` GPU work (with launch_name), by start. BLOCKING:
    synchronising calls (:func:`nsight_core.analysis.budget.sync_calls`). NVTX: all ranges; FAMILY_MASK marks the
    step family's. THREAD: the steps' CPU thread. CUDA_API: every thread's calls (dispatch, :func:`_dispatch_runs`).

    Steps are local in time, so they are budgeted a batch at a time (BATCH_WORK pieces of work each): every
    lookup a piece makes lies within its batch's time, with the next work after it and the last sync before it.
    """
    host = _Host.of(nvtx, family_mask, windows, thread, cuda_api)
    calls = (blocking.filter(pl.col("thread") == thread) if thread is not None else blocking).sort("start_ns")
    work_starts, call_starts = work["start_ns"], calls["start_ns"]
    reach = work["end_ns"].cum_max()  # by start: all work before the first whose reach passes t ends by t
    firsts = work_starts.search_sorted(windows["start_ns"], side="left")
    cuts = []  # (first window, windows): each batch's windows
    begin = 0
    while begin < windows.height:
        end = max(int(firsts.search_sorted(int(firsts[begin]) + BATCH_WORK, side="left")), begin + 1)
        cuts.append((begin, end - begin))
        begin = end

    def budget_of(cut: tuple[int, int]) -> tuple[pl.DataFrame, pl.DataFrame]:
        batch = windows.slice(*cut)
        lo, hi = batch.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
        # Its work, with what still ran at LO (HI is the next window's first work, or the end of the last's); its
        # syncs, from the last begun by LO (one may hold the host as the GPU drains).
        first = int(reach.search_sorted(lo, side="right"))
        last = int(work_starts.search_sorted(hi, side="right"))
        since = max(int(call_starts.search_sorted(lo, side="right")) - 1, 0)
        until = int(call_starts.search_sorted(hi, side="right"))
        rows = _cause_rows(batch, work.slice(first, last - first), calls.slice(since, until - since), host, lo, hi)
        # Summed by the streaming engine: a quarter faster than in memory, without its copy of the text keys.
        summed = (rows.lazy().group_by("step", "part", "cpu_kind", "cpu_name").agg(pl.col("total_ns").sum())
                  .collect(engine="streaming"))
        return summed, _largest_causes(rows)

    # Two batches at a time: Polars computes without the GIL, and most of a batch's passes use one core.
    with ThreadPoolExecutor(max_workers=BATCHES_AT_ONCE, thread_name_prefix="nsight-budget") as pool:
        done = list(pool.map(budget_of, cuts))
    totals, idle = [part for part, _ in done], [stretches for _, stretches in done]
    total_columns = pl.Schema({name: TOTAL_COLUMNS[name] for name in ("step", "part", "cpu_kind", "cpu_name",
                                                                       "total_ns")})
    return (pl.concat(totals).cast(total_columns).sort("step", "part", "cpu_kind", "cpu_name", nulls_last=True)
            if totals else pl.DataFrame(schema=total_columns),
            pl.concat(idle) if idle else _largest_causes(pl.DataFrame(schema=TOTAL_COLUMNS)))


def _largest_causes(rows: pl.DataFrame) -> pl.DataFrame:
    """Each idle stretch of :func:`_cause_rows`' ROWS with its largest cause: step, start_ns, end_ns, part, cpu_kind,
    cpu_name.

    A stretch's rows name distinct causes (:func:`_idle_rows` gives each cause of a piece one row), so the largest
    row is its cause: a stable sort by start and size (ties: the row made first) and each start's first row, with no
    grouping by the text columns (12x faster on 200,000 stretches)."""
    return (rows.filter(pl.col("a").is_not_null())
            .sort("a", "total_ns", descending=[False, True], maintain_order=True)
            .filter(pl.col("a") != pl.col("a").shift(1).fill_null(-1))
            .select("step", pl.col("a").alias("start_ns"), pl.col("b").alias("end_ns"), "part", "cpu_kind", "cpu_name"))


def _cause_rows(windows: pl.DataFrame, work: pl.DataFrame, syncs: pl.DataFrame, host: _Host, lo: int,
                hi: int) -> pl.DataFrame:
    """WINDOWS (from LO to HI) cut into parts and idle causes, before they are summed: step, a, b (the idle piece;
    null for busy time), part, cpu_kind, cpu_name, total_ns. WORK: the GPU work that ran between LO and HI;
    SYNCS: the steps' thread's synchronising calls, from the last that began by LO."""
    pieces = _pieces(windows, work.filter((pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)), lo, hi)
    idle_state = pl.col("state") == STATES.index("idle")
    busy = pieces.filter(~idle_state).group_by("step", "state").agg(pl.col("ns").sum())
    none = pl.lit(None, pl.Int64)
    busy_rows = busy.select("step", none.alias("a"), none.alias("b"),
                            pl.col("state").replace_strict(range(len(STATES)), STATES, return_dtype=pl.String)
                            .alias("part"),
                            pl.lit(None, pl.String).alias("cpu_kind"), pl.lit(None, pl.String).alias("cpu_name"),
                            pl.col("ns").alias("total_ns"))
    idle = _with_cause(pieces.filter(idle_state), work, syncs)
    rows = [busy_rows, *_idle_rows(idle, host)]
    # Each frame filtered before they are joined: 3x faster than one filter of the whole (Polars 2.1).
    return pl.concat([frame.cast(TOTAL_COLUMNS).filter(pl.col("total_ns") > 0)  # type: ignore[arg-type]
                      for frame in rows])


STATES = ("compute", "exposed_comm", "exposed_copy", "idle")
"""What the GPU did in a piece of its timeline (:func:`_pieces`' state indexes it): the first that holds."""


def _pieces(windows: pl.DataFrame, work: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """The GPU timeline between LO and HI cut at every edge of WORK and of WINDOWS: step, start_ns, ns, state
    (an index into STATES: a code, not its text, on each of the hundreds of thousands of pieces)."""
    copy = pl.col("kind").is_in(["copy", "memset"])
    layers = {"l0": ~copy & ~pl.col("comm"), "l1": ~copy & pl.col("comm"), "l2": copy}
    edges = pl.concat([
        work.select(pl.col("start_ns").clip(lo, hi).alias("t"), *(test.cast(pl.Int32).alias(name)
                                                                  for name, test in layers.items())),
        work.select(pl.col("end_ns").clip(lo, hi).alias("t"), *(-test.cast(pl.Int32).alias(name)
                                                               for name, test in layers.items())),
        windows.select(pl.col("start_ns").alias("t"), *(pl.lit(0, pl.Int32).alias(name) for name in layers)),
        pl.DataFrame({"t": [hi], **{name: [0] for name in layers}}, schema={"t": pl.Int64, **dict.fromkeys(layers,
                                                                                                        pl.Int32)}),
    ], how="vertical_relaxed").sort("t")
    # After a sort, one cumulative sum per layer; the state after all edges at one time is its last row's.
    counts = edges.with_columns(pl.col(*layers).cum_sum()).filter(pl.col("t") != pl.col("t").shift(-1).fill_null(-1))
    state = (pl.when(pl.col("l0") > 0).then(0).when(pl.col("l1") > 0).then(1).when(pl.col("l2") > 0).then(2)
             .otherwise(3).cast(pl.UInt8))
    pieces = counts.select(pl.col("t").alias("start_ns"), (pl.col("t").shift(-1) - pl.col("t")).alias("ns"),
                           state.alias("state")).filter(pl.col("ns") > 0)
    located = pieces.join_asof(windows.select("step", pl.col("start_ns").alias("_w"), pl.col("end_ns").alias("_we")),
                               left_on="start_ns", right_on="_w", strategy="backward")
    return located.filter(pl.col("start_ns") < pl.col("_we")).drop("_w", "_we")


def _with_cause(idle: pl.DataFrame, work: pl.DataFrame, syncs: pl.DataFrame) -> pl.DataFrame:
    """IDLE pieces with the work that ends each (its launch call) and the sync the host sat in when it began (SYNCS:
    the steps' thread's synchronising calls, by start): step, a, b, launch_ns, launch_end_ns, launch_name, sync_name,
    sync_end_ns."""
    pieces = idle.select("step", pl.col("start_ns").alias("a"), (pl.col("start_ns") + pl.col("ns")).alias("b"))
    nxt = work.select(pl.col("start_ns").alias("b"), "launch_ns", "launch_end_ns", "launch_name").sort("b")
    pieces = pieces.sort("b").join_asof(nxt, on="b", strategy="forward")
    syncs = syncs.select(pl.col("start_ns").alias("_sync_start"), pl.col("end_ns").alias("sync_end_ns"),
                         pl.col("name").alias("sync_name")).sort("_sync_start")
    late_end = pl.min_horizontal(pl.max_horizontal("launch_ns", "a"), "b")
    pieces = (pieces.with_columns(late_end.fill_null(pl.col("b")).alias("late_end")).sort("late_end")
              .join_asof(syncs, left_on="late_end", right_on="_sync_start", strategy="backward"))
    # The sync drained the queue when the host sat in it as the GPU went idle; one begun after is no cause.
    drained = (pl.col("_sync_start") <= pl.col("a")) & (pl.col("sync_end_ns") >= pl.col("a"))
    return pieces.with_columns(pl.when(drained).then(pl.col("sync_name")).alias("sync_name"),
                               pl.when(drained).then(pl.col("sync_end_ns").clip(upper_bound=pl.col("late_end")))
                               .alias("sync_end_ns"),
                               (pl.col("a") - pl.col("_sync_start")).alias("sync_waited_ns")).drop("_sync_start")


class _Host:
    """What the steps' thread was in, as interval sets whose coverage of any span is two as-of lookups."""

    def __init__(self, steps: pl.DataFrame, ranges: dict[str, pl.DataFrame], dispatch: pl.DataFrame) -> None:
        self.steps = _cumulative(steps)
        self.ranges = {name: _cumulative(frame) for name, frame in ranges.items()}
        self.dispatch = _cumulative(dispatch)

    @classmethod
    def of(cls, nvtx: pl.DataFrame, family_mask: pl.Series, windows: pl.DataFrame, thread: int | None,
           cuda_api: pl.DataFrame) -> _Host:
        """User ranges: the thread's NVTX ranges that are not steps and hold no step (a region, an epoch), the
        outermost of those nesting, named by TOP_RANGES names."""
        steps = windows.select(pl.col("cpu_start_ns").alias("start_ns"), pl.col("cpu_end_ns").alias("end_ns"))
        on_thread = (nvtx.filter(~family_mask & (pl.col("thread") == thread)) if thread is not None
                     else nvtx.clear()).select("start_ns", "end_ns", "name").sort("start_ns")
        starts = steps["start_ns"]
        holds_step = (pl.lit(starts).search_sorted(pl.col("end_ns"), side="left")
                      > pl.lit(starts).search_sorted(pl.col("start_ns"), side="left"))
        user = on_thread.filter(~holds_step)
        outermost = user.filter(pl.col("start_ns") >= pl.col("end_ns").cum_max().shift(1).fill_null(-1))
        top = (outermost.group_by("name").agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("t"))
               .sort(["t", "name"], descending=[True, False]).head(TOP_RANGES)["name"])
        named = outermost.with_columns(pl.when(pl.col("name").is_in(top.implode())).then(pl.col("name"))
                                       .otherwise(pl.lit(OTHER_RANGES)).alias("name"))
        return cls(steps, {name: frame.drop("name") for (name,), frame in named.group_by("name")},
                   _dispatch_runs(cuda_api))

    def split(self, spans: pl.DataFrame) -> list[pl.DataFrame]:
        """SPANS (step, a, b: the idle piece; q0, q1: the host's span of it; the parts for ranges, dispatch and
        untraced time) as frames of rows of step, a, b, part, cpu_kind, cpu_name, total_ns: one per host activity."""
        in_steps = _covered(self.steps, spans)
        rows = []
        in_ranges_inside = pl.zeros(spans.height, pl.Int64, eager=True)
        in_ranges_outside = pl.zeros(spans.height, pl.Int64, eager=True)
        for name, ranges in self.ranges.items():
            covered = _covered(ranges, spans)
            inside = _inside(ranges, self.steps)
            rows.append(_host_rows(spans, "ranges_part", "nvtx", name, covered))
            in_ranges_inside += covered * inside
            in_ranges_outside += covered * (1 - inside)
        length = spans.select(pl.col("q1") - pl.col("q0")).to_series()
        dispatching = _covered(self.dispatch, spans)
        dispatch = pl.select(pl.min_horizontal(pl.lit(dispatching), pl.lit((in_steps - in_ranges_inside)
                                                                           .clip(lower_bound=0)))).to_series()
        untraced = (length - in_ranges_inside - in_ranges_outside - dispatch).clip(lower_bound=0)
        rows.append(_host_rows(spans, "dispatch_part", "dispatch", "", dispatch))
        rows.append(_host_rows(spans, "untraced_part", "untraced", "", untraced))
        return rows


def _host_rows(spans: pl.DataFrame, part: str, kind: str, name: str, values: pl.Series) -> pl.DataFrame:
    """SPANS' rows of one host activity: its part (from column PART), KIND, NAME and VALUES ns each."""
    return spans.select("step", "a", "b", pl.col(part).alias("part"), pl.lit(kind).alias("cpu_kind"),
                        pl.lit(name).alias("cpu_name"), pl.lit(values).alias("total_ns"))


def _dispatch_runs(cuda_api: pl.DataFrame) -> pl.DataFrame:
    """The CUDA calls of all threads merged across gaps shorter than DISPATCH_GAP_NS: when the host dispatched."""
    calls = cuda_api.select("start_ns", "end_ns").sort("start_ns").with_columns(pl.col("end_ns").cum_max())
    # By start, a run begins where a call starts a gap after all before it ended, and ends where the next begins.
    begins = (pl.col("start_ns") - pl.col("end_ns").shift(1) > DISPATCH_GAP_NS).fill_null(True)
    return calls.select(pl.col("start_ns").filter(begins), pl.col("end_ns").filter(begins.shift(-1).fill_null(True)))


def _cumulative(intervals: pl.DataFrame) -> pl.DataFrame:
    """Non-overlapping INTERVALS by start with the summed length before each: what :func:`_covered` looks up."""
    ordered = intervals.select("start_ns", "end_ns").sort("start_ns")
    length = pl.col("end_ns") - pl.col("start_ns")
    return ordered.with_columns((length.cum_sum() - length).alias("_before"))


def _coverage_at(cumulative: pl.DataFrame, points: pl.Series) -> pl.Series:
    """How much of CUMULATIVE's intervals lies before each of POINTS."""
    frame = pl.DataFrame({"t": points}).with_row_index("_row")
    found = frame.sort("t").join_asof(cumulative, left_on="t", right_on="start_ns", strategy="backward")
    value = (pl.col("_before") + (pl.min_horizontal("t", "end_ns") - pl.col("start_ns"))).fill_null(0)
    return found.select("_row", value.alias("c")).sort("_row")["c"]


def _covered(cumulative: pl.DataFrame, spans: pl.DataFrame) -> pl.Series:
    """How much of each of SPANS (q0, q1) CUMULATIVE's intervals cover."""
    return _coverage_at(cumulative, spans["q1"]) - _coverage_at(cumulative, spans["q0"])


def _inside(ranges: pl.DataFrame, steps: pl.DataFrame) -> pl.Series:
    """1 where a range lies inside a step, else 0: per range set, the share of its time that does (0 or 1 each)."""
    total = int((ranges["end_ns"] - ranges["start_ns"]).sum())
    if not total or not steps.height:
        return pl.Series([0], dtype=pl.Int64)
    within = _covered(steps, ranges.select(pl.col("start_ns").alias("q0"), pl.col("end_ns").alias("q1"))).sum()
    return pl.Series([1 if within * 2 >= total else 0], dtype=pl.Int64)


_HOST_PARTS = (pl.lit("gpu_idle").alias("ranges_part"), pl.lit("launch_gap").alias("dispatch_part"),
               pl.lit("gpu_idle").alias("untraced_part"))
"""Where host time that no sync caused goes: user ranges and untraced time idle the GPU, dispatch is launch gaps."""


def _idle_rows(idle: pl.DataFrame, host: _Host) -> list[pl.DataFrame]:
    """The idle pieces (:func:`_with_cause`) as budget rows, each nanosecond in exactly one."""
    none = pl.lit(None, pl.String)
    untraced = idle.filter(pl.col("launch_ns").is_null())
    traced = idle.filter(pl.col("launch_ns").is_not_null())
    queued = traced.filter(pl.col("launch_end_ns") <= pl.col("a"))
    late = traced.filter(pl.col("launch_end_ns") > pl.col("a"))
    rows = [
        untraced.select("step", "a", "b", pl.lit("gpu_idle").alias("part"), pl.lit("untraced").alias("cpu_kind"),
                        pl.lit("").alias("cpu_name"), (pl.col("b") - pl.col("a")).alias("total_ns")),
        queued.select("step", "a", "b", pl.when(pl.col("b") - pl.col("a") < QUEUED_GAP_NS).then(pl.lit("launch_gap"))
                      .otherwise(pl.lit("stream_wait")).alias("part"), none.alias("cpu_kind"), none.alias("cpu_name"),
                      (pl.col("b") - pl.col("a")).alias("total_ns")),
        late.select("step", "a", "b", pl.lit("launch_gap").alias("part"), pl.lit("dispatch").alias("cpu_kind"),
                    pl.col("launch_name").alias("cpu_name"), (pl.col("b") - pl.col("late_end")).alias("total_ns")),
    ]
    # A sync is to blame for as long as the host had waited in it for queued work before the drain: without
    # it, the host's next work would have overlapped that much GPU work. The rest of the stretch is the host's.
    synced = late.filter(pl.col("sync_name").is_not_null()).with_columns(
        pl.min_horizontal("late_end", pl.col("a") + pl.col("sync_waited_ns")).alias("blamed_end"))
    call_end = pl.min_horizontal("sync_end_ns", "blamed_end")
    rows.append(synced.select("step", "a", "b", pl.lit("sync_wait").alias("part"), pl.lit("cuda_api").alias("cpu_kind"),
                              pl.col("sync_name").alias("cpu_name"), (call_end - pl.col("a")).alias("total_ns")))
    spans = [
        synced.select("step", "a", "b", call_end.alias("q0"), pl.col("blamed_end").alias("q1"),
                      *(pl.lit("sync_wait").alias(f"{kind}_part") for kind in ("ranges", "dispatch", "untraced"))),
        synced.select("step", "a", "b", pl.col("blamed_end").alias("q0"), pl.col("late_end").alias("q1"), *_HOST_PARTS),
        late.filter(pl.col("sync_name").is_null()).select(
            "step", "a", "b", pl.col("a").alias("q0"), pl.col("late_end").alias("q1"), *_HOST_PARTS),
    ]
    return [*rows, *host.split(pl.concat(spans))]
