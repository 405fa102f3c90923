"""The GPU's timeline replayed with some of its work faster: how much sooner the host would get on.

A kernel made faster saves time only where something waited for it: work queued behind it (on its stream, or on
another stream through an event), or the host blocked in a sync. In a loop the host bounds, each kernel starts when
it is launched, so a faster GEMM leaves a longer gap and the step takes as long.

Each piece of work is taken to have waited on the piece that ended last before it started, on any stream (its own
stream's, another's it waited for through an event, or one whose SMs it needed), when it was launched before that
end; otherwise it waited on its launch and stays where it ran. A piece that waited ends sooner by its own gain plus
the sooner end of the piece it waited on, up to how long it was queued: ``gain + min(sooner, queued)``. Such maps
compose, so each piece's is found by pointer jumping: a logarithmic number of columnar passes, no loop over events.
The timeline is cut at each of the steps' syncs: the host's work after one shifts as a whole by what the sync
returned sooner, at most the time it waited, and the cuts' savings add up. Work is replayed a window of start time
at a time (:class:`Replay`), each carrying on from the pieces of the ones before that later work may have waited on:
the answer does not depend on the windows."""

from __future__ import annotations

import polars as pl

WORK_COLUMNS = pl.Schema({"start_ns": pl.Int64, "end_ns": pl.Int64, "launch_ns": pl.Int64,
                          "launch_end_ns": pl.Int64, "speedup": pl.Float64})
"""A replay's work: its span, its launching call's span (null: none traced) and how many times faster it would run."""


CARRIED = pl.Schema({"end_ns": pl.Int64, "_segment": pl.UInt32, "_sooner": pl.Int64})
"""What a window leaves the next: pieces that later work may have waited on, with how much sooner they end (whole
nanoseconds, so that sums do not depend on the windows' order of adding)."""


class Replay:
    """The replay of one capture's work (:meth:`add`, windows by start time, in order), given the steps' thread's
    SYNCS (start_ns, end_ns; by start, none overlapping): :meth:`saved_ns` is what the host would win."""

    def __init__(self, syncs: pl.DataFrame) -> None:
        self._ends = syncs["end_ns"].cast(pl.Int64)
        self._waits = (syncs["end_ns"] - syncs["start_ns"]).cast(pl.Int64)
        self._carried = pl.DataFrame(schema=CARRIED)
        self._tails: list[pl.DataFrame] = []

    def add(self, work: pl.DataFrame) -> None:
        """Replay WORK (WORK_COLUMNS), the next window's: pieces that start no sooner than the last window's."""
        if not work.height:
            return
        pieces = self._sooner(work)
        self._tails.append(pieces.group_by("_segment").agg(
            pl.col("end_ns").max(), (pl.col("end_ns") - pl.col("_sooner")).max().alias("_replayed_end")))
        # Later work starts after this window's last start: of the pieces ended by then, only the last can be waited
        # on, and those still running.
        both = pl.concat([self._carried, pieces])
        ended = both.filter(pl.col("end_ns") <= work["start_ns"].max())["end_ns"].max()
        self._carried = both.filter(pl.col("end_ns") >= ended) if ended is not None else both

    def saved_ns(self) -> float:
        """What the work added so far would win the host: per cut, how much sooner its work is all done, at most
        what the sync that ends the cut waited."""
        if not self._tails:
            return 0.0
        last = (pl.concat(self._tails).group_by("_segment").agg(pl.col("end_ns", "_replayed_end").max())
                .select("_segment", (pl.col("end_ns") - pl.col("_replayed_end")).clip(0).alias("_sooner")))
        if not self._ends.len():
            return float(last["_sooner"].sum())
        wait = pl.lit(self._waits).gather(pl.col("_segment").clip(upper_bound=self._ends.len() - 1))
        capped = pl.when(pl.col("_segment") < self._ends.len()).then(pl.min_horizontal("_sooner", wait))
        return float(last.select(capped.otherwise("_sooner").sum()).item())

    def _sooner(self, work: pl.DataFrame) -> pl.DataFrame:
        """WORK's pieces (end_ns, _segment) with how much sooner each would end (_sooner)."""
        segment = pl.lit(self._ends).search_sorted(pl.coalesce("launch_ns", "start_ns"), side="right")
        gain = ((pl.col("end_ns") - pl.col("start_ns")) * (1 - 1 / pl.col("speedup"))).round().cast(pl.Int64)
        # The carried pieces first, as pieces that wait on nothing and win what they were found to.
        carried = self._carried.height
        nodes = pl.concat([
            self._carried.select(pl.col("end_ns").alias("start_ns"), "end_ns", pl.lit(None, pl.Int64).alias(
                "launch_end_ns"), "_segment", pl.col("_sooner").alias("_gain")),
            work.sort("start_ns").select("start_ns", "end_ns", "launch_end_ns", segment.cast(pl.UInt32)
                                         .alias("_segment"), gain.alias("_gain"))]).with_row_index("_id")
        by_end = nodes.select("_id", "end_ns").sort("end_ns")
        # The piece that ended last before each one started: what it waited on, when it was queued behind it.
        at = pl.lit(by_end["end_ns"]).search_sorted(pl.col("start_ns"), side="right").cast(pl.Int64) - 1
        ahead = pl.when(at >= 0).then(pl.lit(by_end["_id"]).gather(at.clip(lower_bound=0)))
        nodes = nodes.with_columns(ahead.alias("_parent")).with_columns(
            pl.col("end_ns").gather(pl.col("_parent").fill_null(0)).alias("_ahead_end"),
            pl.col("_segment").gather(pl.col("_parent").fill_null(0)).alias("_ahead_segment"))
        queued = ((pl.col("_id") >= carried) & pl.col("_parent").is_not_null()
                  & (pl.col("_ahead_segment") == pl.col("_segment"))
                  & (pl.col("launch_end_ns") <= pl.col("_ahead_end"))).fill_null(False)
        # Each piece's map from the sooner end of what it waited on to its own: gain + min(sooner, slack).
        maps = nodes.select("end_ns", "_segment", "_gain",
                            pl.when(queued).then(pl.col("_ahead_end") - pl.col("launch_end_ns")).otherwise(0)
                            .alias("_slack"),
                            pl.when(queued).then(pl.col("_parent")).alias("_parent"))
        while maps["_parent"].is_not_null().any():
            parent = pl.col("_parent").fill_null(0)
            linked = pl.col("_parent").is_not_null()
            maps = maps.with_columns(
                pl.when(linked).then(pl.col("_gain") + pl.col("_gain").gather(parent)).otherwise(pl.col("_gain")),
                pl.when(linked).then(pl.min_horizontal(pl.col("_slack").gather(parent),
                                                       pl.col("_slack") - pl.col("_gain").gather(parent)))
                .otherwise(pl.col("_slack")),
                pl.when(linked).then(pl.col("_parent").gather(parent)).alias("_parent"))
        sooner = (pl.col("_gain") + pl.min_horizontal("_slack", 0)).clip(0)
        return maps.slice(carried).select("end_ns", "_segment", sooner.alias("_sooner")).cast(CARRIED)
