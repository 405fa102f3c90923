"""Where each step's GPU time went, on the GPU's clock: busy parts, and every idle stretch by its cause; the parts add
up to each window. The steps are GPU windows (analysis/projection.py), cut where GPU work starts and ends into pieces:
``compute`` (a kernel or graph other than NCCL ran), else ``exposed_comm`` (only NCCL), else ``exposed_copy``. An idle
piece ends where some GPU work starts; what held that work up is its cause, as on a critical path:

- the work was queued before the GPU went idle: the GPU waited on another stream, an event or a copy
  (``stream_wait``), or, for a gap shorter than QUEUED_GAP_NS, on its own scheduling (``launch_gap``);
- else the host was late to launch it. A synchronising call the host sat in when the queue drained caused the
  stretch, up to as long as the host had waited in it for queued work (``sync_wait``, with the call's name), and so
  the step's later stretches while the host catches up, up to that wait in all (:func:`_with_blame`). The rest goes
  to what the host did (analysis/host_time.py): a user NVTX range (``gpu_idle``), a CUDA call or the framework's
  dispatch before one (``launch_gap``), an OS-runtime call or untraced time (``gpu_idle``). From the launch call to
  the work's start is the launch's latency (``launch_gap``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import polars as pl

from nsight_core.analysis.windows import in_steps
from nsight_core.trace.schema import pid_of

if TYPE_CHECKING:  # host_time reads QUERY_CALLS from here
    from nsight_core.analysis.host_time import Host

QUEUED_GAP_NS = 20_000
"""An idle gap before already-queued work shorter than this (20 µs) is the GPU's own scheduling, not a wait."""
TOTAL_COLUMNS = {"step": pl.Int64, "part": pl.String, "cpu_kind": pl.String, "cpu_name": pl.String,
                 "total_ns": pl.Int64}
IDLE_COLUMNS = {"step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "part": pl.String, "cpu_kind": pl.String,
                "cpu_name": pl.String}
STATES = ("compute", "exposed_comm", "exposed_copy", "idle")
"""What the GPU did in a piece of its timeline (:func:`_pieces`' state indexes it): the first that holds."""
LAYER_BITS = 21
"""Each GPU layer's count of running work in its own bits of one integer (:func:`_pieces`): up to 2**21 at once."""
QUERY_CALLS = (r"(?i)GetName|IsCapturing|GetCaptureInfo|GetDevice$|GetDevice_|GetLastError|PeekAtLastError|"
               r"GetAttribute|GetProperties|DriverGetVersion|RuntimeGetVersion|FuncGetAttributes|GetFuncBySymbol|"
               r"KernelGetFunction|LibraryGetKernel")
"""CUDA calls that ask, set up nothing and wait for nothing (cuKernelGetName after each launch, cudaStreamIsCapturing
before a copy): the framework's bookkeeping, named by the call they lead to."""
Label = str | None | pl.Expr
"""A cause's part, cpu_kind or cpu_name: the same for every stretch, or an expression of the stretch's columns."""
WorkBetween = Callable[[int, int], pl.DataFrame]
"""Launched GPU work between LO and HI, by start: every piece ending after LO and starting by HI (some ended by LO,
maybe), with start_ns, end_ns, kind, comm, launch_ns, launch_end_ns, launch_name (:func:`projection.launched`)."""


def step_syncs(blocking: pl.DataFrame, thread: int | None) -> pl.DataFrame:
    """BLOCKING's calls on the steps' THREAD (all where it is unknown), by start: the syncs the budget blames."""
    return (blocking.filter(pl.col("thread") == thread) if thread is not None else blocking).sort("start_ns")


def budget_in_batches(windows: pl.DataFrame, cuts: list[tuple[int, int]], between: WorkBetween,
                      calls: pl.DataFrame, host: Host, stretches: bool = True) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The budget's totals and idle stretches of WINDOWS, a batch (CUTS: :func:`batches`) at a time: steps are local
    in time. BETWEEN: the GPU work of a batch's time; CALLS: :func:`step_syncs`; HOST: what the steps' thread was in.
    STRETCHES: whether to keep the idle stretches, thousands a step, which only the steps a page draws need."""
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


def _batch_budget(windows: pl.DataFrame, work: pl.DataFrame, syncs: pl.DataFrame, host: Host, lo: int,
                  hi: int, stretches: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """WINDOWS (LO to HI) in parts and causes: the sums (TOTAL_COLUMNS), each idle stretch's largest (IDLE_COLUMNS)."""
    # Only the columns the timeline needs are copied (the launches' text is not).
    pieces = _pieces(windows, work.select("start_ns", "end_ns", "kind", "comm").filter(
        (pl.col("end_ns") > lo) & (pl.col("start_ns") < hi)), lo, hi)
    idle_state = pl.col("state") == STATES.index("idle")
    busy = pieces.filter(~idle_state).group_by("step", "state").agg(pl.col("ns").sum())
    idle = pieces.filter(idle_state).drop("state")
    del pieces  # let go once used: a batch's temporaries bound the budget's memory
    part = pl.col("state").replace_strict(range(len(STATES)), STATES, return_dtype=pl.String).alias("part")
    none = pl.lit(None, pl.String)
    busy = busy.select("step", part, none.alias("cpu_kind"), none.alias("cpu_name"), pl.col("ns").alias("total_ns"))
    causes = _Causes.of(_with_blame(_with_cause(idle, work, syncs), syncs, windows), host)
    del idle
    return (pl.concat([busy.filter(pl.col("total_ns") > 0), causes.totals()]),
            causes.largest() if stretches else pl.DataFrame(schema=IDLE_COLUMNS))


def _pieces(windows: pl.DataFrame, work: pl.DataFrame, lo: int, hi: int) -> pl.DataFrame:
    """The GPU timeline from LO to HI cut at every edge of WORK and WINDOWS: step, start_ns, ns, state (into STATES)."""
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
    state = pl.when(running[0]).then(0).when(running[1]).then(1).when(running[2]).then(2).otherwise(3).cast(pl.UInt8)
    pieces = counts.select(pl.col("t").alias("start_ns"), (pl.col("t").shift(-1) - pl.col("t")).alias("ns"),
                           state.alias("state")).filter(pl.col("ns") > 0)
    return in_steps(pieces, windows)


def _with_cause(idle: pl.DataFrame, work: pl.DataFrame, syncs: pl.DataFrame) -> pl.DataFrame:
    """IDLE pieces with the work that ends each (its launch call) and the sync the host sat in when it began (SYNCS,
    by start): step, a, b, launch_ns, launch_end_ns, launch_name, launch_thread, sync_name, sync_end_ns."""
    # The pieces follow each other in time: by start, and so by end (no sort).
    pieces = idle.select("step", a=pl.col("start_ns"), b=(pl.col("start_ns") + pl.col("ns")).set_sorted())
    nxt = work.select(pl.col("start_ns").alias("b"), "launch_ns", "launch_end_ns", "launch_name",
                      pl.col("thread").alias("launch_thread")).sort("b")
    pieces = pieces.join_asof(nxt, on="b", strategy="forward")
    syncs = syncs.select(_sync_start=pl.col("start_ns"), sync_end_ns=pl.col("end_ns"), sync_name=pl.col("name"))
    syncs = syncs.sort("_sync_start")
    # Between a piece's start and end, so in the pieces' order too (no sort: the stretches stay by start).
    late_end = pl.min_horizontal(pl.max_horizontal("launch_ns", "a"), "b").fill_null(pl.col("b")).set_sorted()
    pieces = pieces.with_columns(late_end.alias("late_end")).join_asof(syncs, left_on="late_end",
                                                                        right_on="_sync_start", strategy="backward")
    # The sync drained the queue when the host sat in it as the GPU went idle; one begun after is no cause.
    drained = (pl.col("_sync_start") <= pl.col("a")) & (pl.col("sync_end_ns") >= pl.col("a"))
    return pieces.with_columns(pl.when(drained).then(pl.col("sync_name")).alias("sync_name"),
                               pl.when(drained).then(pl.col("sync_end_ns").clip(upper_bound=pl.col("late_end")))
                               .alias("sync_end_ns")).drop("_sync_start")


def _with_blame(pieces: pl.DataFrame, syncs: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """PIECES (:func:`_with_cause`) with ``blame_ns``: how much of each late piece a sync of its step is to blame for,
    up to its wait for queued work in all. SYNCS: the steps' thread's synchronising calls, by start; the stretch a sync
    drained is its own whatever the step, the later ones of the step it began in (after WINDOWS' cpu_start_ns)."""
    syncs = syncs.select(pl.col("start_ns").alias("_s_start"), pl.col("end_ns").alias("_s_end")).sort("_s_start")
    starts = windows.select("step", pl.col("cpu_start_ns").alias("_cpu_start"))
    located = (pieces.join(starts, on="step", how="left", maintain_order="left")
               .join_asof(syncs, left_on="a", right_on="_s_start", strategy="backward"))
    drained = pl.col("_s_end") >= pl.col("a")  # the host sat in it as the GPU went idle: its cause, whatever the step
    key = pl.when((pl.col("_s_start") >= pl.col("_cpu_start")) | drained).then(pl.col("_s_start"))
    late = pl.col("launch_end_ns").is_not_null() & (pl.col("launch_end_ns") > pl.col("a"))
    # A late piece's whole length, the launch's latency too: queued behind the work the sync waited for, the work
    # would have started with no gap at all.
    late_ns = pl.when(late).then(pl.col("b") - pl.col("a")).otherwise(0)
    # The GPU ran out of queued work at the first late piece (a gap between queued kernels is no drain).
    drained_at = pl.col("a").filter(late).min().over(key)
    waited = (pl.min_horizontal("_s_end", drained_at) - pl.col("_s_start")).clip(lower_bound=0)
    through = late_ns.cum_sum().over(key)
    blame = pl.min_horizontal(through, waited) - pl.min_horizontal(through - late_ns, waited)
    return located.with_columns(pl.when(key.is_not_null()).then(blame).otherwise(0).alias("blame_ns")).drop(
        "_cpu_start", "_s_start", "_s_end")


class _Causes(NamedTuple):
    """The causes of the idle pieces (:func:`_with_cause`), a row each: step, a, b, the columns that name a cause
    (launch_name, sync_name, short) and each candidate's nanoseconds (_c0, _c1, ...), each nanosecond in exactly one.
    A column per cause: the sums per step are a group-by, a piece's largest cause a horizontal maximum."""

    frame: pl.DataFrame
    candidates: list[tuple[Label, Label, Label]]
    """(part, cpu_kind, cpu_name) of each _c<i>, a value or an expression of the stretch, in tie-breaking order."""
    named: dict[int, str]
    """The candidates whose name is a column of FRAME (launch_name, sync_name), by index."""

    @classmethod
    def of(cls, idle: pl.DataFrame, host: Host) -> _Causes:
        """The causes of IDLE's pieces (:func:`_with_blame`), HOST's activities among them."""
        untraced = pl.col("launch_ns").is_null()
        queued = ~untraced & (pl.col("launch_end_ns") <= pl.col("a"))
        late = ~untraced & (pl.col("launch_end_ns") > pl.col("a"))
        synced = late & (pl.col("blame_ns") > 0)
        # A sync is to blame for its blame_ns (:func:`_with_blame`); the rest of the stretch is the host's.
        blamed_end = pl.col("a") + pl.col("blame_ns")
        call_end = pl.min_horizontal(pl.col("sync_end_ns").fill_null(pl.col("a")), blamed_end)
        gap = pl.col("b") - pl.col("a")
        zero = pl.lit(0, pl.Int64)
        frame = idle.select(
            "step", "a", "b", "launch_name", "launch_thread", "sync_name", (gap < QUEUED_GAP_NS).alias("short"),
            pl.when(untraced).then(gap).otherwise(zero).alias("_c0"),
            pl.when(queued).then(gap).otherwise(zero).alias("_c1"),
            pl.when(late).then(pl.col("b") - pl.max_horizontal("late_end", blamed_end)).otherwise(zero).alias("_c2"),
            pl.when(synced).then(call_end - pl.col("a")).otherwise(zero).alias("_c3"),
            # The host's spans: from the call's end to the end of the sync's blame (_q0 to _q1), and from there, or
            # the stretch's start, to the launch (_q1 to _q2); empty where they do not apply.
            pl.when(synced).then(call_end).otherwise(pl.col("a")).alias("_q0"),
            pl.when(synced).then(blamed_end).otherwise(pl.col("a")).alias("_q1"),
            pl.when(late).then(pl.max_horizontal("late_end", blamed_end)).otherwise(pl.col("a")).alias("_q2"))
        # The spans after a sync's blame only where one was to blame (few stretches), the rest 0.
        blamed = frame.select(pl.col("_q1") > pl.col("_q0")).to_series().arg_true()
        after_sync = [pl.zeros(frame.height, pl.Int64, eager=True).scatter(blamed, values) for values in
                      host.split(frame["_q0"].gather(blamed), frame["_q1"].gather(blamed))] if blamed.len() else \
            [pl.zeros(frame.height, pl.Int64, eager=True)] * len(host.activities())
        after_launch = host.split(frame["_q1"], frame["_q2"])
        # Untraced time on the steps' thread (split's last column) before work another thread of its process
        # launched (loss.backward() waiting while autograd's engine launches the backward pass): that thread's
        # dispatch, named by its call.
        thread = pl.lit(host.calls.thread)
        other = frame.select(((pl.col("launch_thread") != thread)
                              & (pid_of(pl.col("launch_thread")) == pid_of(thread))).fill_null(False))
        elsewhere = after_launch[-1].zip_with(other.to_series(), pl.zeros(frame.height, pl.Int64, eager=True))
        after_launch[-1] = after_launch[-1] - elsewhere
        host_causes = [*(column for pair in zip(after_sync, after_launch, strict=True) for column in pair), elsewhere]
        candidates: list[tuple[Label, Label, Label]] = [
            ("gpu_idle", "untraced", ""),
            (pl.when("short").then(pl.lit("launch_gap")).otherwise(pl.lit("stream_wait")), None, None),
            ("launch_gap", "dispatch", pl.col("launch_name")),
            ("sync_wait", "cuda_api", pl.col("sync_name"))]
        for kind, name, part in host.activities():
            candidates += [("sync_wait", kind, name), (part, kind, name)]
        candidates.append(("gpu_idle", "other_threads", pl.col("launch_name")))
        frame = frame.drop("_q0", "_q1", "_q2", "launch_thread").with_columns(
            values.alias(f"_c{index}") for index, values in enumerate(host_causes, start=4))
        return cls(frame, candidates, {2: "launch_name", 3: "sync_name", len(candidates) - 1: "launch_name"})

    def totals(self) -> pl.DataFrame:
        """The causes summed per step, part, cpu_kind and cpu_name (TOTAL_COLUMNS), none of 0 ns."""
        columns = [f"_c{index}" for index in range(len(self.candidates))]
        keyed = {index: ["step", key] for index, key in self.named.items()}
        keyed[1] = ["step", "short"]  # queued: a launch gap or a stream wait, by its length
        plain = [index for index in range(len(columns)) if index not in keyed]
        # The causes named alike for every stretch: summed per step, a row per step and cause, labelled by a join.
        labels = pl.DataFrame([(columns[index], *self.candidates[index]) for index in plain], orient="row",
                              schema=dict.fromkeys(["_cause", "part", "cpu_kind", "cpu_name"], pl.String))
        sums = [self.frame.group_by("step").agg(pl.col(columns[index]).sum() for index in plain)
                .unpivot(index="step", variable_name="_cause", value_name="total_ns")
                .join(labels, on="_cause").select("step", "part", "cpu_kind", "cpu_name", "total_ns")]
        for index, keys in keyed.items():  # the causes named by the stretch: summed per step and name
            part, kind, name = (label if isinstance(label, pl.Expr) else pl.lit(label, pl.String)
                                for label in self.candidates[index])
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
                  .filter(most > 0).select("step", "a", "b", "short", *dict.fromkeys(self.named.values()),
                                            which.alias("_which")))
        # Each cause's part, kind and name looked up by its index, the few that vary by stretch put in after.
        labels = {}
        for position, column in enumerate(("part", "cpu_kind", "cpu_name")):
            values = [None if isinstance(candidate[position], pl.Expr) else candidate[position]
                      for candidate in self.candidates]
            label = pl.lit(pl.Series(values, dtype=pl.String)).gather(pl.col("_which"))
            for index, candidate in enumerate(self.candidates):
                if isinstance(candidate[position], pl.Expr):
                    label = pl.when(pl.col("_which") == index).then(candidate[position]).otherwise(label)
            labels[column] = label
        return chosen.select("step", pl.col("a").alias("start_ns"), pl.col("b").alias("end_ns"), **labels)
