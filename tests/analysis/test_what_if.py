"""The GPU's timeline replayed with FP32 GEMMs faster (analysis/what_if.py): time is won only where something
waited for them. Timelines in µs: (start, end, launch call's start, its end, speedup)."""

from __future__ import annotations

import polars as pl
import pytest

from nsight_core.analysis.what_if import WORK_COLUMNS, Replay

US = 1_000
NO_SYNCS = pl.DataFrame(schema={"start_ns": pl.Int64, "end_ns": pl.Int64})


def _work(*pieces: tuple[int, int, int | None, int | None, float]) -> pl.DataFrame:
    return pl.DataFrame([tuple(None if v is None else v * US if i < 4 else v for i, v in enumerate(piece))
                         for piece in pieces], schema=WORK_COLUMNS, orient="row")


def saved_ns(work: pl.DataFrame, syncs: pl.DataFrame) -> float:
    """What the replay of WORK wins, in one window and in windows of each piece alone: the same."""
    whole, alone = Replay(syncs), Replay(syncs)
    whole.add(work)
    for piece in work.sort("start_ns").iter_slices(1):
        alone.add(piece)
    assert alone.saved_ns() == pytest.approx(whole.saved_ns())
    return whole.saved_ns()


def _syncs(*spans: tuple[int, int]) -> pl.DataFrame:
    return pl.DataFrame([(a * US, b * US) for a, b in spans], schema=NO_SYNCS.schema, orient="row")


def test_a_queue_of_gemms_wins_what_each_gemm_wins() -> None:
    """The host launched everything up front: the GPU ran back to back, so the loop ends sooner by every gain."""
    work = _work((10, 110, 0, 2, 4.0), (111, 211, 2, 4, 4.0), (212, 262, 4, 6, 1.0), (263, 363, 6, 8, 4.0))
    assert saved_ns(work, NO_SYNCS) == pytest.approx(3 * 75 * US)


def test_gemms_the_host_launched_just_in_time_win_nothing() -> None:
    """Each kernel started as its launch returned, after the one before had ended: a faster GEMM leaves a longer gap
    (the last one's own gain excepted, which ends the loop)."""
    work = _work((10, 110, 0, 10, 4.0), (130, 230, 120, 130, 4.0), (250, 260, 240, 250, 1.0))
    assert saved_ns(work, NO_SYNCS) == pytest.approx(0.0)


def test_a_kernel_queued_briefly_passes_on_no_more_than_it_waited() -> None:
    """The second kernel was launched 20 µs before the GEMM ended: the GEMM wins 75 µs, the loop only 20."""
    work = _work((0, 100, None, None, 4.0), (101, 111, 70, 80, 1.0))
    assert saved_ns(work, NO_SYNCS) == pytest.approx(20 * US)


def test_a_sync_passes_on_no_more_than_the_host_waited_in_it() -> None:
    """Two steps, each GEMMs then a sync: the first sync waited 31 µs, the second 200; after each the host launches
    again, so each sync returns sooner by its wait where the GEMMs won more, else by what they won."""
    work = _work((10, 110, 0, 5, 4.0), (111, 211, 5, 9, 4.0),  # the host syncs at 181, waits until 212
                 (300, 500, 290, 295, 4.0))  # then launches; syncs at 300, waits until 500
    assert saved_ns(work, _syncs((181, 212), (300, 500))) == pytest.approx((31 + 150) * US)


def test_work_on_another_stream_that_waited_for_a_gemm_passes_its_gain_on() -> None:
    """A kernel launched long before, started right after a GEMM on another stream ended (an event): it moves up."""
    work = _work((0, 100, None, None, 2.0), (102, 152, 1, 3, 1.0))
    assert saved_ns(work, NO_SYNCS) == pytest.approx(50 * US)


def test_nothing_faster_wins_nothing() -> None:
    work = _work((0, 100, None, None, 1.0), (101, 151, 1, 3, 1.0), (300, 310, 200, 290, 1.0))
    assert saved_ns(work, _syncs((160, 170))) == 0.0


def test_work_beside_a_gemm_on_another_stream_bounds_what_it_wins() -> None:
    """A GEMM and a kernel of about its length on another stream, run side by side: the loop waits for both, so a
    faster GEMM wins only the microsecond by which it ended last."""
    work = _work((0, 100, None, None, 4.0), (1, 99, None, None, 1.0))
    assert saved_ns(work, NO_SYNCS) == pytest.approx(1 * US)
