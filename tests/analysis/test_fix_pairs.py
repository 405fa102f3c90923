"""Savings checked against real fixes: H200 recordings of each problem beside its fixed twin.

tests/fixtures/h200-fix-pairs (nsys 2023.4.4) and h200-fix-pairs-2025 (nsys 2025.3, read from its SQLite
exports) hold, per case, the problem and its fixes recorded as regions, and truth.json with each variant's step
time measured without collection in the same process (median of 3 runs; bench/gpu/fix_pairs.py). The real
saving of a fix is the difference of the unprofiled step times; a finding's saving is the prediction.
"""

from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import polars as pl
import pytest
from fixture_sets import unpacked
from shared_runs import computed_once

import nsight_core
from nsight_core.analysis.finding_model import REPORT_SHARE
from nsight_core.analysis.overhead import HOST_SPEED_CHANGED, per_call_ns
from nsight_core.analysis.steps import NvtxGpuSteps
from nsight_core.render.findings import budget_lines, finding_suggestion, finding_title, overhead_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RECORDINGS = {"2023.4.4": FIXTURES / "h200-fix-pairs", "2025.3": FIXTURES / "h200-fix-pairs-2025"}
TOLERANCE = 0.30
"""A prediction (step time or saving) lands within 30 % of the measured value..."""
NEAR_ZERO_OF_STEP = 0.03
"""...or, for a saving close to nothing (a sync in a device-bound loop), within 3 % of the step."""


class Pair(NamedTuple):
    case: str
    fixed: str
    causes: tuple[str, ...]
    """The finding kinds the fix removes; their savings add up to the prediction."""
    residual: bool = False
    """The fix leaves part of the cause: its twin may still warn, with under a tenth of the problem's saving."""


PAIRS = [
    Pair("host_load", "fixed", ("host_work",)),
    # 4 loader workers still leave ~0.5 ms a step waiting on data (the twin's unprofiled runs spread 3.0-5.7 ms).
    Pair("dataloader", "fixed", ("host_work",), residual=True),
    Pair("sync_log", "fixed", ("sync_wait",)),
    Pair("graph", "fixed", ("launch_bound",)),
    Pair("pageable", "fixed", ("pageable_copy",)),
    Pair("two", "fix_load", ("host_work",)),
    Pair("two", "fix_copy", ("pageable_copy",)),
    Pair("two", "fixed", ("host_work", "pageable_copy")),
    Pair("gpu_bound", "fixed", ("sync_wait",)),
]


@functools.cache
def _truth(version: str) -> dict[str, dict[str, dict[str, object]]]:
    cases = json.loads((RECORDINGS[version] / "truth.json").read_text())["cases"]
    return {case: found["variants"] for case, found in cases.items()}


@functools.cache
def _recorded(folder: Path, region: str) -> nsight_core.Analysis:
    """The analysis of REGION in FOLDER: its SQLite export where there is one (nsys 2025.3's), else its report."""
    export = folder / f"{region}.sqlite"
    capture = export if export.exists() else folder / f"{region}.nsys-rep"
    return computed_once(f"analysis-{folder.name}-{region}",
                         lambda: nsight_core.analyze(nsight_core.load_trace(capture)))


def _analysis(version: str, region: str) -> nsight_core.Analysis:
    return _recorded(RECORDINGS[version], region)


def _step_ms(version: str, case: str, variant: str) -> float:
    return float(_truth(version)[case][variant]["step_ms"])  # type: ignore[arg-type]


def _saving_ms(analysis: nsight_core.Analysis, causes: tuple[str, ...]) -> float:
    return sum(f.saving.per_step_ns for f in analysis.findings
               if f.kind in causes and f.saving is not None and f.saving.per_step_ns is not None) / 1e6


def _lost_data(version: str, case: str, variant: str) -> bool:
    """nsys 2023.4.4 records no GPU work for CUDA-graph replays (their cudaGraphLaunch calls only): lost data."""
    return version.startswith("2023.4.4") and variant == "fixed" and case in ("graph", "train_graph")


VARIANTS = [(version, case, variant) for version in RECORDINGS for case, variants in _truth(version).items()
            for variant in variants if not _lost_data(version, case, variant)]


@pytest.mark.parametrize(("version", "case", "variant"), VARIANTS, ids=lambda v: str(v))
def test_the_step_without_the_profiler_is_the_unprofiled_step(version: str, case: str, variant: str) -> None:
    truth = _truth(version)[case][variant]
    analysis = _analysis(version, str(truth["region"]))
    assert isinstance(analysis.steps, NvtxGpuSteps) and analysis.overhead is not None
    p50_ms = analysis.steps.estimated_p50_ns / 1e6
    runs = [float(run) for run in truth["runs_ms"]]  # type: ignore[attr-defined]
    real = float(truth["step_ms"])  # type: ignore[arg-type]
    assert abs(p50_ms - real) <= TOLERANCE * real or min(runs) <= p50_ms <= max(runs), (p50_ms, runs)


@pytest.mark.parametrize("version", list(RECORDINGS))
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p.case}-{p.fixed}")
def test_the_top_finding_names_the_cause_and_its_saving_is_the_real_one(version: str, pair: Pair) -> None:
    problem = _analysis(version, f"{pair.case}-problem")
    top = problem.findings[0]
    assert top.kind in pair.causes or (pair.case == "two" and top.kind in {"host_work", "pageable_copy"}), \
        [f.kind for f in problem.findings]
    predicted = _saving_ms(problem, pair.causes)
    step = _step_ms(version, pair.case, "problem")
    real = step - _step_ms(version, pair.case, pair.fixed)
    assert abs(predicted - real) <= max(TOLERANCE * abs(real), NEAR_ZERO_OF_STEP * step), (predicted, real)


@pytest.mark.parametrize("version", list(RECORDINGS))
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p.case}-{p.fixed}")
def test_the_fixed_twin_has_no_warning_for_that_cause(version: str, pair: Pair) -> None:
    if _lost_data(version, pair.case, pair.fixed):
        pytest.skip("nsys 2023.4.4 recorded no GPU work for the graph twin (its trace is incomplete)")
    fixed = _analysis(version, f"{pair.case}-{pair.fixed}")
    left = [f for f in fixed.findings if f.kind in pair.causes and f.severity != "info"]
    if pair.residual:
        assert _saving_ms(fixed, pair.causes) < 0.1 * _saving_ms(_analysis(version, f"{pair.case}-problem"),
                                                                 pair.causes)
    else:
        assert left == [], [(f.kind, f.severity) for f in left]


@pytest.mark.parametrize(("version", "case", "variant"), VARIANTS, ids=lambda v: str(v))
def test_no_share_exceeds_the_step(version: str, case: str, variant: str) -> None:
    analysis = _analysis(version, str(_truth(version)[case][variant]["region"]))
    budget = analysis.budget
    assert sum(part.total_ns for part in budget.parts) == budget.wall_ns
    assert all(0 <= part.fraction <= 1 for part in budget.parts)
    savings = [f.saving.step_fraction for f in analysis.findings
               if f.saving is not None and f.saving.step_fraction is not None]
    assert all(share <= 1 for share in savings), savings


@pytest.mark.parametrize("version", list(RECORDINGS))
def test_single_precision_matmuls_are_named_with_the_tensor_core_saving(version: str) -> None:
    problem = _analysis(version, "tf32-problem")
    assert problem.findings[0].kind == "fp32_matmul" and problem.findings[0].saving is not None
    assert isinstance(problem.steps, NvtxGpuSteps) and problem.steps.bound == "device"
    assert "fp32_matmul" not in {f.kind for f in _analysis(version, "tf32-fixed").findings}


V2 = {"2023.4.4": FIXTURES / "h200-fix-pairs-v2", "2025.3": unpacked("h200-fix-pairs-v2-2025")}
"""The second set of fix pairs (tests/fixtures/README.md): the same harness, more causes."""


CAUSES = {"2023.4.4": FIXTURES / "h200-causes", "2025.3": unpacked("h200-causes-2025")}
"""The third set: allocator churn, a masked index and a Python `if` on a tensor, the last two before a tail of
small launches."""


H100 = {"2025.3-h100": unpacked("h100-fix-pairs-2025")}
"""The fourth: cases of the first three recorded on an H100 with nsys 2025.3 (a GPU and host of another kind), each
region with the tracing cost it measured as it started."""
CALIBRATED = {"2023.4.4-calibrated": unpacked("h200-calibrated"), "2025.3-calibrated": unpacked("h200-calibrated-2025")}
"""The fifth: the cases UNEXPLAINED names (and per_param, alloc_churn) recorded again on the H200 with both nsys
versions, each region with the tracing cost it measured as it started."""
DEEP = {"2023.4.4-deep": unpacked("h200-deep-causes"), "2025.3-deep": unpacked("h200-deep-causes-2025")}
"""The sixth: the third set's causes and list_tensor in steps the GPU bounds once they are fixed (nine GEMMs before the
value the host waits for; the allocator's loop at batch 32768), recorded as the fifth."""
H100_DEEP = {"2023.4.4-h100-deep": unpacked("h100-deep-causes"), "2025.3-h100-deep": unpacked("h100-deep-causes-2025")}
"""The seventh: the allocator's loop at batch 32768 on an H100, both nsys versions."""
SPIN = {"2023.4.4-h100-spin": unpacked("h100-spin-causes"), "2025.3-h100-spin": unpacked("h100-spin-causes-2025")}
"""The eighth: the hidden syncs and the pageable copy after a spin kernel of fixed cycles instead of GEMMs, on an H100,
both nsys versions: GPU work whose time does not move with the clocks a fix changes."""
H100_ALL = {"2023.4.4-h100-all": unpacked("h100-pairs"), "2025.3-h100-all": unpacked("h100-pairs-2025")}
"""The ninth: the second and third sets' fifteen cases on an H100 with both nsys versions, each region with the
tracing cost it measured as it started."""
H100_ADAM = {"2023.4.4-h100-adam": unpacked("h100-deep-adam"), "2025.3-h100-adam": unpacked("h100-deep-adam-2025")}
"""The tenth: a 96-layer MLP's training step with Adam per parameter (about 1,500 launches a step on the step's
thread, 680 on autograd's) | foreach (its fixed twin still launches about 800 kernels a step), on an H100 with both
nsys versions: the shape of a larger model, host-bound either way."""

TRAIN_GRAPH = {"2023.4.4-train-graph": unpacked("h200-train-graph"),
               "2025.3-train-graph": unpacked("h200-train-graph-2025")}
"""The eleventh: small_step's training step without empty_cache, eager (about 1.7-2.4 ms on the H200) | forward,
backward and SGD captured as one CUDA graph (0.18 ms), both nsys versions: the fix removes the step's thread's launch
gaps and the backward pass autograd's thread dispatches alike."""

PRECISION = {"2023.4.4-h100-precision": unpacked("h100-precision"),
             "2025.3-h100-precision": unpacked("h100-precision-2025")}
"""The twelfth: convolution-bound training steps (six 3x3 convolutions of 128 channels, cuDNN's FFT, Winograd and
implicit-GEMM kernels) in FP32 | TF32 and | bf16 autocast, and TF32 convolutions or GEMMs | bf16 autocast, on an H100
with both nsys versions."""
HOST_SPEED = {"2023.4.4-h100-host-speed": unpacked("h100-host-speed"),
              "2025.3-h100-host-speed": unpacked("h100-host-speed-2025")}
"""The thirteenth: eight cases of the sets above on an H100 with both nsys versions, each region with the host's own
speed measured across its start (HOST_SPEED_MARK) and the truth with four kinds of host work timed just before the
region and inside it (`probe`: fix_pairs.py --probe)."""


def _v2(version: str, region: str) -> nsight_core.Analysis:
    return _recorded(V2[version], region)


def _recorded_step_ms(folder: Path, case: str, variant: str) -> float:
    cases = json.loads((folder / "truth.json").read_text())["cases"]
    return float(cases[case]["variants"][variant]["step_ms"])


@pytest.mark.parametrize(("folder", "case", "metric"), [
    *(pytest.param(recordings[version], case, f"{switch}_saving_per_step", id=f"{case}-{version}")
      for recordings, cases in ((V2, ("tf32", "bf16")), (H100_ALL, ("tf32", "bf16")),
                                (PRECISION, ("conv_tf32", "conv_bf16")))
      for version in recordings for case in cases for switch in ("tf32", "bf16") if case.endswith(switch))])
def test_the_tensor_core_saving_of_fp32_matmuls_is_the_real_one(folder: Path, case: str, metric: str) -> None:
    """FP32 GEMMs, and convolutions (cuDNN's FP32 implicit GEMMs), against TF32 allowed and against bf16 autocast:
    the saving predicted from the GPU's peak rates (an H200's or an H100's) lands within 30 % of the unprofiled
    difference, and the fixed twin has no FP32 matmul left."""
    finding = next(f for f in _recorded(folder, f"{case}-problem").findings if f.kind == "fp32_matmul")
    predicted = next(e.value for e in finding.evidence if e.metric == metric) / 1e6
    real = _recorded_step_ms(folder, case, "problem") - _recorded_step_ms(folder, case, "fixed")
    assert abs(predicted - real) <= TOLERANCE * real, (predicted, real)
    assert finding.severity == "warning", "a precision is the user's trade-off: never critical"
    assert "fp32_matmul" not in {f.kind for f in _recorded(folder, f"{case}-fixed").findings}


HOST_BOUND_FP32 = [pytest.param(recordings[version], region, id=f"{region}-{version}")
                   for recordings, regions in ((RECORDINGS, ("graph-problem",)),
                                               (V2, ("graph-problem", "small_step-fixed")),
                                               (H100_ALL, ("graph-problem", "small_step-fixed")))
                   for version in recordings for region in regions]


@pytest.mark.parametrize(("folder", "region"), HOST_BOUND_FP32)
def test_fp32_gemms_in_a_step_the_host_bounds_are_no_warning(folder: Path, region: str) -> None:
    """A small FP32 MLP whose host launches each kernel as the GPU gets to it: faster GEMMs would only lengthen the
    gaps, so TF32 and bf16 are claimed to save (almost) nothing, the finding is info and its advice says why."""
    analysis = _recorded(folder, region)
    assert isinstance(analysis.steps, NvtxGpuSteps) and analysis.steps.bound == "host"
    finding = next(f for f in analysis.findings if f.kind == "fp32_matmul")
    saved = [e.value for e in finding.evidence if e.metric in ("tf32_saving_per_step", "bf16_saving_per_step")]
    assert finding.severity == "info" and len(saved) == 2
    assert all(value <= REPORT_SHARE * analysis.steps.estimated_p50_ns for value in saved), saved
    assert finding.subject == "host_bound" and "Nothing to win yet" in finding_suggestion(finding)


@pytest.mark.parametrize("version", list(RECORDINGS))
def test_a_device_bound_loop_without_syncs_is_said_to_be_one(version: str) -> None:
    analysis = _analysis(version, "gpu_bound-fixed")
    assert isinstance(analysis.steps, NvtxGpuSteps) and analysis.steps.bound == "device"
    assert analysis.steps.cpu_p50_ns < 0.3 * analysis.steps.family.p50_ns, "the host ran ahead of the GPU"
    assert [f.kind for f in analysis.findings if f.severity != "info"] == []
    assert any(f.kind == "device_bound" for f in analysis.findings)


@pytest.mark.parametrize("version", list(RECORDINGS))
def test_the_sync_finding_names_the_call_its_range_and_what_the_host_did_next(version: str) -> None:
    """`.item()` every step, then 2 ms of logging in a `log` range: the sync is blamed, with the log after it."""
    finding = next(f for f in _analysis(version, "sync_log-problem").findings if f.kind == "sync_wait")
    places = {(e.metric, e.where.kind, e.where.name) for e in finding.evidence if e.where is not None}
    assert ("sync_calls_per_step", "api", "cudaStreamSynchronize in step_{n}") in places
    assert ("cpu_during_sync_wait_per_step", "range", "log") in places
    assert finding.subject == "scalar_reads"


@pytest.mark.parametrize(("capability", "claimed"), [("7.0", False), ("8.0", True), ("9.0", True)])
def test_no_tensor_core_saving_is_claimed_on_a_gpu_without_them(capability: str, claimed: bool) -> None:
    """The same FP32 GEMMs as if recorded on a V100 (compute capability 7.0: no TF32, no bf16 tensor cores), an
    A100 and an H200: a saving only where the GPU has tensor cores for the type."""
    trace = nsight_core.load_trace(V2["2023.4.4"] / "tf32-problem.nsys-rep")
    frames = {name: getattr(trace, name) for name in ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "nvtx_marks",
                                                      "osrt", "window")}
    gpus = trace.gpus.with_columns(pl.lit(capability).alias("compute_capability"))
    finding = next(f for f in nsight_core.analyze(SimpleNamespace(**frames, gpus=gpus)).findings
                   if f.kind == "fp32_matmul")
    metrics = {e.metric for e in finding.evidence}
    assert (finding.saving is not None) == claimed and ("tf32_saving_per_step" in metrics) == claimed
    assert finding.severity == ("warning" if claimed else "info")


def test_another_rank_in_the_capture_leaves_the_tensor_core_saving_alone() -> None:
    """The FP32 GEMM loop beside a second process on a second GPU whose kernels (no GEMMs) end half a microsecond
    after each of the first's: the saving is the first process's replay alone, not a chain through the other's."""
    trace = nsight_core.load_trace(V2["2023.4.4"] / "tf32-problem.nsys-rep")
    frames = {name: getattr(trace, name) for name in ("kernels", "memcpy", "memset", "cuda_api", "nvtx", "nvtx_marks",
                                                      "osrt", "window")}
    shift, ids, rank = pl.lit(500), pl.col("correlation_id") + int(trace.cuda_api["correlation_id"].max()) + 1, 1 << 24
    other = {"kernels": trace.kernels.with_columns(pl.col("start_ns", "end_ns") + shift, ids, pl.col("device") + 1,
                                                   pl.col("pid") + 1, pl.lit("elementwise_kernel").alias("name")),
             "cuda_api": trace.cuda_api.with_columns(pl.col("start_ns", "end_ns") + shift, ids,
                                                     pl.col("thread") + rank)}
    alone, beside = (nsight_core.analyze(SimpleNamespace(**{**frames, **extra}, gpus=trace.gpus))
                     for extra in ({}, {name: pl.concat([frames[name], frame]) for name, frame in other.items()}))
    saved = [next(e.value for f in analysis.findings if f.kind == "fp32_matmul" for e in f.evidence
                  if e.metric == "tf32_saving_per_step") for analysis in (alone, beside)]
    assert saved[1] == pytest.approx(saved[0]) and saved[0] > 0.8 * alone.steps.estimated_p50_ns


@pytest.mark.parametrize("folder", [*V2.values(), *H100.values(), *H100_ALL.values()], ids=[*V2, *H100, *H100_ALL])
@pytest.mark.parametrize("variant", ["problem", "fixed"])
def test_a_prefetch_on_a_side_stream_does_not_pull_the_step_window_early(folder: Path, variant: str) -> None:
    """Step i+1's input copied on a second stream while step i computes (fixed), against copied on the compute stream
    (problem): the windows follow the compute, so the step is the unprofiled one either way."""
    analysis = _recorded(folder, f"prefetch-{variant}")
    assert isinstance(analysis.steps, NvtxGpuSteps)
    real = _recorded_step_ms(folder, "prefetch", variant)
    assert abs(analysis.steps.family.p50_ns / 1e6 - real) <= TOLERANCE * real
    assert analysis.steps.family.max_ns < 2 * analysis.steps.family.p50_ns, "no window swallows the ones after it"


UNEXPLAINED = {("2023.4.4", "mask_sync", "problem"), ("2023.4.4", "per_param", "fixed"),
               ("2023.4.4", "graph", "problem"), ("2025.3", "alloc_churn", "fixed"),
               ("2023.4.4-h100-all", "small_copies", "fixed"), ("2025.3-h100-all", "small_copies", "fixed"),
               ("2025.3-h100-precision", "bf16_tf32", "fixed"), ("2023.4.4-h100-host-speed", "per_param", "problem"),
               ("2025.3-h100-host-speed", "small_step", "problem")}
"""Host-bound steps whose profiled step differs from the unprofiled one far more (or the other way) than their CUDA
calls explain at the cost per call the other pairs show: small steps of the 2023.4.4 recording (0.2-0.8 ms, where the
same code recorded with 2025.3 lands; graph's problem ran faster profiled than unprofiled), and the MLP without
empty_cache under 2025.3 on the H200 (2.0 ms slower profiled, 32 % over; with 2023.4.4, and on the H100, it lands). On
the H100, small_copies' fixed twin (the 256 samples stacked and pinned on the host, one copy) ran 1.53 ms (2023.4.4)
and 2.70 ms (2025.3) a step unprofiled, 2.1-9.8 ms profiled with 36 CUDA calls a step: the host code before a step's
first call (torch.stack and pin_memory) took about 3 ms in the region's first 14 steps and 0.13 ms in its last six.
Recorded alone in a process it lands (test below): the slow start came with the eight cases the process ran before it.
With 2025.3 on the H100, bf16_tf32's fixed twin (a training step under bf16 autocast, 98 CUDA calls a step) ran
1.89 ms unprofiled and 2.56 ms profiled, where its region measured 0.25 µs a call (its 2023.4.4 twin: 2.35 µs, and it
lands). Time nsys takes from host code outside CUDA calls, which a cost per call cannot see. The thirteenth set timed
the host's own work beside each region (HOST_SPEED): a pure-Python loop took 0.5x to 2.1x as long inside a region as
just before it, either way, on a timescale of milliseconds, so host-bound truth and capture can sample different spells.
There, per_param's problem with 2023.4.4 ran faster profiled (14.8 ms) than unprofiled (16.1 ms), after a start
across which the host slowed 1.44x and its calibration read 1.72 µs a call (-34 %), and small_step's problem with
2025.3 ran 2.53 ms profiled against 1.80 unprofiled with the host's speed unchanged (+35 %). A known gap of the
per-call model, kept visible (strict xfail)."""
ESTIMATED = [pytest.param(recordings[version], case, variant, id=f"{case}-{variant}-{version}",
                         marks=[pytest.mark.xfail(strict=True, reason="UNEXPLAINED")]
                         if (version, case, variant) in UNEXPLAINED else [])
             for recordings in (V2, CAUSES, H100, CALIBRATED, DEEP, H100_DEEP, SPIN, H100_ALL, H100_ADAM, TRAIN_GRAPH,
                                PRECISION, HOST_SPEED)
             for version in recordings
             for case, found in json.loads((recordings[version] / "truth.json").read_text())["cases"].items()
             for variant in found["variants"] if not _lost_data(version, case, variant)]


@pytest.mark.parametrize(("folder", "case", "variant"), ESTIMATED)
def test_the_estimated_step_is_the_unprofiled_step_and_no_saving_exceeds_it(folder: Path, case: str,
                                                                             variant: str) -> None:
    """The step less what nsys' tracing added (a part of the budget of its own) is the step timed without the
    profiler, within 30 % (or within the spread of its unprofiled runs); no finding saves more than that step."""
    analysis = _recorded(folder, f"{case}-{variant}")
    truth = json.loads((folder / "truth.json").read_text())["cases"][case]["variants"][variant]
    assert isinstance(analysis.steps, NvtxGpuSteps) and analysis.overhead is not None
    estimated, real = analysis.steps.estimated_p50_ns / 1e6, float(truth["step_ms"])
    runs = [float(run) for run in truth["runs_ms"]]
    assert abs(estimated - real) <= TOLERANCE * real or min(runs) <= estimated <= max(runs), (estimated, runs)
    budget = analysis.budget
    assert budget.part("profiler_overhead").per_step_mean_ns == pytest.approx(analysis.overhead.per_step_ns, abs=1)
    assert sum(part.total_ns for part in budget.parts) == budget.wall_ns
    savings = [f.saving.per_step_ns for f in analysis.findings if f.saving and f.saving.per_step_ns is not None]
    assert all(saving <= analysis.steps.estimated_p50_ns for saving in savings)


def test_tracing_cost_counts_the_backward_pass_launched_from_autograds_thread() -> None:
    """The MLP without empty_cache on the H100 with 2025.3: autograd launches its backward pass from a thread of its
    own while the step's thread waits, so those calls were traced too. Counted with the step's own, the estimate lands
    within 30 % (counted without them it did not: 9.0 ms against 6.9 ms unprofiled)."""
    folder = H100_ALL["2025.3-h100-all"]
    analysis = _recorded(folder, "alloc_churn-fixed")
    assert isinstance(analysis.steps, NvtxGpuSteps) and analysis.overhead is not None
    trace = nsight_core.load_trace(folder / "alloc_churn-fixed.sqlite")
    steps = trace.nvtx.filter(pl.col("name").str.starts_with("step_"))
    [thread] = steps["thread"].unique().to_list()
    in_steps = trace.cuda_api.filter(pl.col("start_ns").is_between(steps["start_ns"].min(), steps["end_ns"].max()))
    assert in_steps["thread"].n_unique() > 1
    own = in_steps.filter(pl.col("thread") == thread).height / steps.height
    assert analysis.overhead.calls_per_step > 2 * own, (analysis.overhead.calls_per_step, own)
    real = _recorded_step_ms(folder, "alloc_churn", "fixed")
    assert abs(analysis.steps.estimated_p50_ns / 1e6 - real) <= TOLERANCE * real


def test_tracing_cost_leaves_out_the_calls_of_another_process() -> None:
    """The same MLP step as if a second rank in the capture made the same CUDA calls in a process of its own: the
    step's tracing cost counts its own process only, so the estimate does not move."""
    trace = nsight_core.load_trace(H100_ALL["2025.3-h100-all"] / "alloc_churn-fixed.sqlite")
    frames = {name: getattr(trace, name) for name in ("kernels", "memcpy", "memset", "nvtx", "nvtx_marks", "osrt",
                                                      "window", "gpus")}
    other_rank = trace.cuda_api.with_columns(pl.col("thread") + (1 << 24),  # the next pid, no GPU work of its own
                                             pl.lit(None, pl.Int64).alias("correlation_id"))
    alone = nsight_core.analyze(SimpleNamespace(**frames, cuda_api=trace.cuda_api))
    beside = nsight_core.analyze(SimpleNamespace(**frames, cuda_api=pl.concat([trace.cuda_api, other_rank])))
    assert alone.overhead is not None and beside.overhead is not None
    assert beside.overhead.calls_per_step == alone.overhead.calls_per_step


ALONE = unpacked("h100-small-copies-alone-2025")
"""small_copies' fixed twin alone in its process on the H100 with 2025.3: nsys' defaults and CPU sampling off, with
torch's 16 intra-op threads and with one (tests/fixtures/README.md)."""


@pytest.mark.parametrize("run", ["default", "sample-none", "default-omp1", "sample-none-omp1"])
def test_the_stacked_copy_recorded_alone_is_the_unprofiled_step(run: str) -> None:
    """The fixed twin UNEXPLAINED names, recorded in a process that ran nothing before it: its estimated step lands
    within 30 % of the unprofiled one, whatever the sampling and intra-op threads."""
    analysis = _recorded(ALONE / run, "small_copies-fixed")
    assert isinstance(analysis.steps, NvtxGpuSteps)
    real = _recorded_step_ms(ALONE / run, "small_copies", "fixed")
    estimated = analysis.steps.estimated_p50_ns / 1e6
    assert abs(estimated - real) <= TOLERANCE * real, (estimated, real)


def test_a_region_measures_what_tracing_costs_in_its_own_process() -> None:
    """per_param's problem on the H100 (about 1,560 CUDA calls a step): tracing took its step from 11.4 ms unprofiled
    to 20.2 ms profiled. The region timed a burst of launches as it started (nsight_core.calibration): 3.4 µs a call,
    which brings the estimate within 30 %; the table's cost for nsys 2025.3 would leave it about 50 % off."""
    [folder] = H100.values()
    analysis = _recorded(folder, "per_param-problem")
    overhead, steps = analysis.overhead, analysis.steps
    assert overhead is not None and isinstance(steps, NvtxGpuSteps)
    family = steps.family
    assert overhead.calibrated and overhead.per_call_ns == 3422
    real = _recorded_step_ms(folder, "per_param", "problem")
    assert abs(steps.estimated_p50_ns / 1e6 - real) <= TOLERANCE * real
    by_table = (family.p50_ns - overhead.calls_per_step * per_call_ns(overhead.nsys_version)) / 1e6
    assert abs(by_table - real) > TOLERANCE * real
    assert "CUDA calls a step at 3.42 µs each, measured as the region started" in (overhead_text(analysis) or "")


@pytest.mark.parametrize(("version", "release"), [("2023.4.4", "2023"), ("2025.3", "2025")])
def test_a_capture_without_a_measured_cost_says_its_estimate_rests_on_the_usual_one(version: str, release: str) -> None:
    """The second set's regions carry no calibration: the estimate uses the table's cost for their nsys, and the line
    that shows it says so, so a user whose host traces slower knows what to weigh."""
    analysis = _v2(version, "small_step-problem")
    assert analysis.overhead is not None and not analysis.overhead.calibrated
    cost = per_call_ns(analysis.overhead.nsys_version) / 1e3
    assert (f"CUDA calls a step at {cost:.2f} µs each, the usual cost for nsys {release}, not measured in this process"
            in (overhead_text(analysis) or ""))
    assert analysis.overhead.host_slowdown is None and "host's own speed" not in (overhead_text(analysis) or "")


@pytest.mark.parametrize("version", list(HOST_SPEED))
def test_a_host_that_changed_speed_as_the_capture_started_is_said_to_have(version: str) -> None:
    """Each region of the thirteenth set timed a pure-Python loop on both sides of its start. Tracing leaves such code
    alone (the ratio's median is within 10 % of 1), yet starts fell into spells of a host twice as slow or as fast:
    the estimate's line says so exactly where the ratio reaches HOST_SPEED_CHANGED either way; the JSON carries it."""
    folder = HOST_SPEED[version]
    cases = json.loads((folder / "truth.json").read_text())["cases"]
    analyses = [_recorded(folder, f"{case}-{variant}") for case, found in cases.items()
                for variant in found["variants"]]
    measured = [(a, a.overhead.host_slowdown) for a in analyses if a.overhead and a.overhead.host_slowdown]
    slowdowns = [slowdown for _, slowdown in measured]
    assert len(measured) == sum(a.overhead is not None for a in analyses) >= 15
    assert 0.9 <= statistics.median(slowdowns) <= 1.1
    assert min(slowdowns) <= 1 / HOST_SPEED_CHANGED and max(slowdowns) >= HOST_SPEED_CHANGED
    for analysis, slowdown in measured:
        text = overhead_text(analysis) or ""
        said = f"the host's own speed changed as the capture started (a loop with no CUDA call took {slowdown:.2f}x"
        assert (said in text) == (max(slowdown, 1 / slowdown) >= HOST_SPEED_CHANGED), text
        assert analysis.model_dump(mode="json")["overhead"]["host_slowdown"] == slowdown


CAUSE_PAIRS = [
    (V2, Pair("per_param", "fixed", ("per_tensor_launches",))),  # SGD foreach=False over 240 parameters | True
    (V2, Pair("small_copies", "fixed", ("small_copies",))),  # 256 pageable samples copied one by one | one stacked
    (V2, Pair("checkpoint", "fixed", ("bulk_device_to_host",))),  # 48 MiB state_dict + torch.save every step | 100
    (CAUSES, Pair("alloc_churn", "fixed", ("allocator_churn",))),  # empty_cache() every step | never
    (CAUSES, Pair("mask_tail", "fixed", ("sync_wait",))),  # h[h > 0], then small launches | torch.where
    (CAUSES, Pair("item_if", "fixed", ("sync_wait",))),  # `if h.mean() > 0:`, then small launches | torch.where
    (H100, Pair("per_param", "fixed", ("per_tensor_launches",))),
    (H100, Pair("alloc_churn", "fixed", ("allocator_churn",))),
    (H100, Pair("graph", "fixed", ("launch_bound",))),  # 0.97 ms of small launches | one CUDA graph: 0.14 ms
    (CALIBRATED, Pair("per_param", "fixed", ("per_tensor_launches",))),
    (CALIBRATED, Pair("alloc_churn", "fixed", ("allocator_churn",))),
    (DEEP, Pair("item_if_deep", "fixed", ("sync_wait",))),
    (DEEP, Pair("mask_tail_deep", "fixed", ("sync_wait",))),
    (DEEP, Pair("list_tensor_deep", "fixed", ("sync_wait",))),  # torch.tensor(list, device=) | pinned, non_blocking
    (DEEP, Pair("alloc_churn_deep", "fixed", ("allocator_churn",))),
    (H100_DEEP, Pair("alloc_churn_deep", "fixed", ("allocator_churn",))),
    (SPIN, Pair("item_if_spin", "fixed", ("sync_wait",))),
    (SPIN, Pair("mask_tail_spin", "fixed", ("sync_wait",))),
    (SPIN, Pair("list_tensor_spin", "fixed", ("sync_wait",))),
    *((H100_ALL, Pair(case, "fixed", causes)) for case, causes in (
        ("per_param", ("per_tensor_launches",)), ("small_copies", ("small_copies",)),
        ("checkpoint", ("bulk_device_to_host",)), ("mask_sync", ("sync_wait",)), ("alloc_churn", ("allocator_churn",)),
        ("sync_log", ("sync_wait",)), ("pageable", ("pageable_copy",)), ("mask_tail", ("sync_wait",)),
        ("item_if", ("sync_wait",)))),
    (H100_ADAM, Pair("deep_adam", "fixed", ("per_tensor_launches",))),  # Adam foreach=False | True
    # The whole training step as one CUDA graph: both findings' advice, both their savings.
    (TRAIN_GRAPH, Pair("train_graph", "fixed", ("launch_bound", "untraced_host"))),
    *((HOST_SPEED, Pair(case, "fixed", causes)) for case, causes in (
        ("per_param", ("per_tensor_launches",)), ("small_copies", ("small_copies",)), ("mask_sync", ("sync_wait",)),
        ("alloc_churn", ("allocator_churn",)), ("sync_log", ("sync_wait",)), ("graph", ("launch_bound",)))),
]
"""Known causes (analysis/causes.py, and the hidden syncs named by their pattern) whose fix the recordings measured
well above the host's noise, with the recordings that hold them."""
CAUSE_CASES = [pytest.param(recordings[version], pair, id=f"{pair.case}-{version}")
               for recordings, pair in CAUSE_PAIRS for version in recordings]
NOISY_TRUTH = {("alloc_churn", "2023.4.4"), ("alloc_churn", "2025.3"), ("mask_tail", "2025.3"), ("item_if", "2023.4.4"),
               ("item_if", "2025.3"), ("alloc_churn", "2023.4.4-calibrated"), ("alloc_churn_deep", "2023.4.4-deep"),
               ("alloc_churn", "2025.3-h100-all"), ("mask_sync", "2023.4.4-h100-host-speed")}
"""Savings off by more than 30 % where the unprofiled truth moves more than the profiled pair: mask_tail's real saving
was 1.19 ms in one recording and 2.71 ms in the other (the prediction: 1.27 and 1.89 ms); item_if's profiled pair
differs by 1.7 ms and more, its unprofiled one by 0.9-1.0 ms (predicted: 1.96 and 1.93 ms). alloc_churn's real saving
is 0.58 to 1.57 times the difference of its profiled pair (estimated steps) across five recordings of the same loop:
1.94 ms against 3.36 (predicted 2.58), 5.32 against 3.39 (predicted 3.59), 7.73 against 6.01 (predicted 3.22); the
two others land (2.36 against 2.92 predicted, 4.68 against 3.55), and on the H100 with 2025.3 its fixed twin's
unprofiled runs spread 5.89-7.90 ms (6.99 against 4.14 predicted); at batch 32768 it lands with 2025.3, and with
2023.4.4 its profiled problem ran 21 % slower than its unprofiled runs (12.95-14.77 ms). In the thirteenth set,
mask_sync's problem ran faster profiled (1.90 ms) than unprofiled (2.12 ms; the host's own work ran in 0.74x the time
inside the region than just before it): 0.79 ms saved, the profiled pair 0.26 ms apart, 0.50 predicted. Kept visible
(strict xfail)."""
GPU_CLOCKS = {(case, version) for case in ("item_if_deep", "mask_tail_deep", "list_tensor_deep")
              for version in ("2023.4.4-deep", "2025.3-deep")}
"""Savings 34-90 % above the real ones where the fix keeps the GPU busy through GEMMs: the fixed twins' GEMMs ran 6-9 %
longer than their problems' (620 against 667-673 µs in item_if_deep, with both nsys versions), as a GPU that never
idles runs at lower clocks, so part of the idle time removed comes back as slower work. The prediction is the idle
time (1.90 ms against a profiled pair 1.06 ms apart); the capture holds no clocks to foresee the rest. Kept visible
(strict xfail)."""
HIDDEN_LAUNCHES = {("mask_sync", "2025.3-h100-all")}
"""A saving 44 % under the real one: on the H100 with 2025.3 the sync's fix saved 1.00 ms (2.47 against 1.46 ms
unprofiled; the profiled pair's estimated steps 0.91 ms apart), where the sync finding predicts 0.57 ms. The problem's
60 small launches after the sync also show as 0.54 ms of launch gaps, which the fix hides behind the GPU's work once
the host no longer waits; the sync's saving does not yet count them. With 2023.4.4 on the same GPU it lands (0.61
against 0.61). Kept visible (strict xfail)."""
ALLOCATOR_ELSEWHERE = {("alloc_churn", "2023.4.4-h100-host-speed"), ("alloc_churn", "2025.3-h100-host-speed")}
"""Savings 60 % (2023.4.4) and 40 % (2025.3) under the real ones: 2.96 and 3.30 ms predicted against 7.31 and 5.54 ms
saved by dropping empty_cache(), the profiled pairs 4.95 and 4.91 ms apart (with 2023.4.4 the problem ran faster
profiled, 11.6 ms, than unprofiled, 13.4: a host spell). The finding counts the step's thread's cudaMalloc and
cudaFree (38 a step, 2.8 ms); the fix also removed autograd's thread's (4 cudaMalloc a step, 0.53 ms) and, with
2023.4.4, made autograd's launches 26-29 % faster, which no call of the problem's capture shows. There autograd's
thread and the host's dispatch (3.20 and 2.97 ms predicted) rank above the allocator. Kept visible (strict xfail)."""
FOREACH_HOST = {("deep_adam", "2025.3-h100-adam")}
"""A saving 55 % above the real one with 2025.3 (19.5 ms predicted against 12.6 saved by Adam's foreach=True; with
2023.4.4, 21.1 against 18.2, it lands). The prediction is the per-parameter loop's launches at the loop's typical
interval between them (the rest of its host time, a CPU step counter and Python per parameter, a foreach optimizer
keeps), less tracing's cost on their calls at the calibrated cost per call. Tracing adds more to a launch the more
host work surrounds it (bench/gpu/loop_cost.py, on the H100, per launch: with 2025.3 +3.4 µs for the calibration's
empty kernel, +5.5 for `t.add_(1)`, +6.4 for seven ops in turn, +7.3 in Adam's loop; with 2023.4.4 +1.3, +2.3, +2.5,
+2.5): the calibration's cost per call, measured on empty launches, leaves part of tracing's cost in the loop's
interval. The estimated steps land. Kept visible (strict xfail)."""


@pytest.mark.parametrize(("folder", "pair"), [
    pytest.param(*case.values, id=case.id, marks=[pytest.mark.xfail(strict=True, reason="ALLOCATOR_ELSEWHERE")])
    if case.id == "alloc_churn-2023.4.4-h100-host-speed" else case for case in CAUSE_CASES])
def test_a_known_cause_is_the_top_finding(folder: Path, pair: Pair) -> None:
    problem = _recorded(folder, f"{pair.case}-problem")
    assert problem.findings[0].kind in pair.causes, [f.kind for f in problem.findings]


@pytest.mark.parametrize(("folder", "pair"), [
    pytest.param(recordings[version], pair, id=f"{pair.case}-{version}",
                 marks=[pytest.mark.xfail(strict=True, reason="NOISY_TRUTH")] if (pair.case, version) in NOISY_TRUTH
                 else [pytest.mark.xfail(strict=True, reason="GPU_CLOCKS")] if (pair.case, version) in GPU_CLOCKS
                 else [pytest.mark.xfail(strict=True, reason="HIDDEN_LAUNCHES")]
                 if (pair.case, version) in HIDDEN_LAUNCHES
                 else [pytest.mark.xfail(strict=True, reason="FOREACH_HOST")] if (pair.case, version) in FOREACH_HOST
                 else [pytest.mark.xfail(strict=True, reason="ALLOCATOR_ELSEWHERE")]
                 if (pair.case, version) in ALLOCATOR_ELSEWHERE
                 else []) for recordings, pair in CAUSE_PAIRS for version in recordings])
def test_a_known_cause_saves_what_its_fix_saved(folder: Path, pair: Pair) -> None:
    problem = _recorded(folder, f"{pair.case}-problem")
    predicted = _saving_ms(problem, pair.causes)
    step = _recorded_step_ms(folder, pair.case, "problem")
    real = step - _recorded_step_ms(folder, pair.case, pair.fixed)
    assert abs(predicted - real) <= max(TOLERANCE * abs(real), NEAR_ZERO_OF_STEP * step), (predicted, real)


@pytest.mark.parametrize(("folder", "pair"), CAUSE_CASES)
def test_the_fixed_twin_of_a_known_cause_has_no_warning_for_it(folder: Path, pair: Pair) -> None:
    fixed = _recorded(folder, f"{pair.case}-{pair.fixed}")
    assert [f.kind for f in fixed.findings if f.kind in pair.causes] == []


@pytest.mark.parametrize("version", list(V2))
def test_a_read_after_a_selection_is_named_mask_indexing(version: str) -> None:
    """`h[h > 0]` after a GEMM: nonzero counts the selection (CUB) and the host reads the count back. The sync is the
    top finding, named by its pattern; its fixed-shape twin (`torch.where`) has no sync finding. The saving is not
    checked: this recording's real one (0.23 ms with 2023.4.4, 0.67 ms with 2025.3) is within the host's noise."""
    problem = _v2(version, "mask_sync-problem")
    top = problem.findings[0]
    assert (top.kind, top.subject) == ("sync_wait", "mask_indexing"), [(f.kind, f.subject) for f in problem.findings]
    assert next(e.value for e in top.evidence if e.metric == "reads_after_a_selection_per_step") == 1
    assert "sync_wait" not in {f.kind for f in _v2(version, "mask_sync-fixed").findings}


@pytest.mark.parametrize("folder", [*DEEP.values(), *SPIN.values()], ids=[*DEEP, *SPIN])
@pytest.mark.parametrize(("cause", "subject"), [("item_if", "scalar_reads"), ("mask_tail", "mask_indexing"),
                                                ("list_tensor", "pageable_transfer")])
def test_a_hidden_sync_is_named_by_its_pattern(folder: Path, cause: str, subject: str) -> None:
    """The sync after nine GEMMs or a spin kernel, by what made it: a Python `if` on a tensor (a one-byte read),
    boolean-mask indexing (a read after nonzero's selection), a tensor made from a Python list on the GPU (a pageable
    copy); the calls that waited are its evidence, and the fixed twin has no sync finding."""
    case = f"{cause}_{'deep' if folder in DEEP.values() else 'spin'}"
    top = _recorded(folder, f"{case}-problem").findings[0]
    assert (top.kind, top.subject) == ("sync_wait", subject)
    waited = {e.where.name.split(" in ")[0] for e in top.evidence if e.metric == "sync_calls_per_step" and e.where}
    assert waited == ({"cudaMemcpyAsync", "cudaStreamSynchronize"} if subject == "pageable_transfer"
                      else {"cudaStreamSynchronize"})
    assert "sync_wait" not in {f.kind for f in _recorded(folder, f"{case}-fixed").findings}
    if subject == "pageable_transfer":  # its own advice: pinned memory, not the generic sync's
        assert "pin_memory=True" in finding_suggestion(top) and "pageable" in finding_title(top)


@pytest.mark.parametrize("version", list(V2))
def test_allocator_churn_is_named_with_its_calls(version: str) -> None:
    """`torch.cuda.empty_cache()` every step of a small MLP: one cudaMalloc and one cudaFree a step, each ~0.1 ms.
    Named, with its calls; the twin without empty_cache has none. Neither its rank nor its saving is checked: in this
    host-bound step the churn is a tenth of the step, and the real saving (-0.13 ms with 2023.4.4, 0.04 ms with
    2025.3) is within the host's noise."""
    finding = next(f for f in _v2(version, "small_step-problem").findings if f.kind == "allocator_churn")
    calls = {e.where.name: e.value for e in finding.evidence
             if e.metric == "allocator_calls_per_step" and e.where is not None}
    assert calls == {"cudaMalloc": 1, "cudaFree": 1}
    assert "allocator_churn" not in {f.kind for f in _v2(version, "small_step-fixed").findings}


@pytest.mark.parametrize("version", list(RECORDINGS))
def test_a_scalar_read_keeps_its_pattern(version: str) -> None:
    """`.item()` every step: its reads follow no selection, so the sync is a scalar read (what a Python `if` on a
    tensor or `.item()` makes), not a mask."""
    finding = next(f for f in _analysis(version, "sync_log-problem").findings if f.kind == "sync_wait")
    assert finding.subject == "scalar_reads"


ALL_VARIANTS = [(version, case, variant, recordings)
                for recordings in (RECORDINGS, V2, CAUSES, H100, CALIBRATED, DEEP, H100_DEEP, H100_ALL, H100_ADAM,
                                   TRAIN_GRAPH, PRECISION)
                for version in recordings
                for case, found in json.loads((recordings[version] / "truth.json").read_text())["cases"].items()
                for variant in found["variants"]]


@pytest.mark.parametrize(("version", "case", "variant", "recordings"), ALL_VARIANTS,
                         ids=lambda v: v if isinstance(v, str) else "")
def test_the_host_time_the_gpu_waited_on_is_named_by_its_calls(version: str, case: str, variant: str,
                                                               recordings: dict[str, Path]) -> None:
    """No undivided "dispatching" time: the host's time is named by the CUDA call it was in or led to (a call, a
    range, an OS call, or untraced), and no CPU activity of the budget is dispatch without a call's name."""
    analysis = _recorded(recordings[version], f"{case}-{variant}")
    unnamed = [a for a in analysis.budget.idle_activities if a.kind in ("dispatch", "cuda_api") and not a.name]
    assert unnamed == [], [(a.kind, a.fraction) for a in unnamed]


@pytest.mark.parametrize(("version", "case", "variant", "recordings"),
                         [variant for variant in ALL_VARIANTS if variant[2] == "fixed"],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_no_fixed_twin_carries_a_critical_finding(version: str, case: str, variant: str,
                                                  recordings: dict[str, Path]) -> None:
    """A loop with its problems fixed (not a twin that fixes one of two) gets no alarm: what is left on it
    (host-bound small steps, an FP32 model, copies not overlapped) is at most a warning, with its saving."""
    analysis = _recorded(recordings[version], f"{case}-{variant}")
    assert [(f.kind, f.saving) for f in analysis.findings if f.severity == "critical"] == []


def test_the_json_carries_the_step_with_and_without_the_profiler() -> None:
    """`nsight stats --json` of a loop of 2,400 CUDA calls a step: the profiled p50, the estimate without the
    profiler, the overhead with how it was reckoned, and the overhead as a part of the budget."""
    from nsight_core.profile import build_profile
    from nsight_core.report import stats_json

    payload = stats_json(build_profile(V2["2025.3"] / "per_param-problem.sqlite"))
    overhead, steps = payload["overhead"], payload["steps"]
    assert steps["mode"] == "nvtx-gpu" and "source" not in steps and "clock" not in steps
    assert overhead["nsys_version"].startswith("2025.3") and overhead["calls_per_step"] == 2400
    assert steps["estimated_p50_ns"] == pytest.approx(steps["family"]["p50_ns"] - overhead["per_step_ns"])
    part = next(part for part in payload["budget"]["parts"] if part["part"] == "profiler_overhead")
    assert part["per_step_mean_ns"] == pytest.approx(overhead["per_step_ns"], abs=1) and part["total_ns"] > 0


def test_allocator_churn_names_the_python_line_that_freed_the_memory() -> None:
    """alloc_churn's problem recorded with `nsight run --python-backtrace` and exported by nsys 2025.3 with
    `--include-blobs=true`: the finding names the user's line its cudaFree calls came from first, the
    `torch.cuda.empty_cache()` of bench/gpu/fix_pairs.py's `problem` (line 509 when it was recorded), then the
    forward pass whose activations were allocated again."""
    analysis = _recorded(CAUSES["2025.3"] / "python-backtrace-2025-blobs", "alloc_churn-problem")
    finding = next(f for f in analysis.findings if f.kind == "allocator_churn")
    lines = [(e.where.name, e.value) for e in finding.evidence if e.where is not None and e.where.kind == "line"]
    assert lines[0][0].endswith("bench/gpu/fix_pairs.py:509 in problem"), lines
    assert lines[1][0].endswith("bench/gpu/fix_pairs.py:126 in train") and lines[0][1] > lines[1][1] > 0


@pytest.mark.parametrize(("case", "line"), [("mask_tail", "bench/gpu/fix_pairs.py:519 in masked"),
                                             ("item_if", "bench/gpu/fix_pairs.py:531 in branch")])
def test_a_hidden_sync_names_the_python_line_that_waited(case: str, line: str) -> None:
    """mask_tail's and item_if's problems recorded with Python backtraces (as alloc_churn's above): the sync finding
    names the boolean-mask index `h[h > 0]` and the `if m > 0` on a tensor, once per step."""
    finding = next(f for f in _recorded(CAUSES["2025.3"] / "python-backtrace-2025-blobs", f"{case}-problem").findings
                   if f.kind == "sync_wait")
    lines = [(e.where.name, e.value) for e in finding.evidence if e.where is not None and e.where.kind == "line"]
    assert lines[0][0].endswith(line) and lines[0][1] == 1.0, lines


SAMPLED = unpacked("h100-python-sampling-2025")


def _sampled_lines(finding: object) -> dict[str, float]:
    return {e.where.name: e.value for e in finding.evidence  # type: ignore[attr-defined]
            if e.metric == "sampled_host_time_at_line_per_step" and e.where is not None}


def test_a_checkpoint_every_step_names_the_line_that_saves_it() -> None:
    """checkpoint's problem recorded with `nsight run --python-backtrace` (which samples the Python stack too): the
    bulk-copy finding names the `torch.save` line of bench/gpu/fix_pairs.py's `save` (442 when it was recorded) as
    where the host spent most of the step, outside every CUDA call."""
    analysis = _recorded(SAMPLED, "checkpoint-problem")
    finding = analysis.findings[0]
    assert finding.kind == "bulk_device_to_host"
    (top, ns), *_ = _sampled_lines(finding).items()
    assert isinstance(analysis.steps, NvtxGpuSteps)
    assert top.endswith("bench/gpu/fix_pairs.py:442 in save") and ns > 0.5 * analysis.steps.family.p50_ns


def test_untraced_time_is_named_by_the_lines_sampled_outside_calls_and_ranges() -> None:
    """host_load's problem: the batch is made in a `data` range (`tokens()`, a sleep of 8 ms), the rest of the host's
    time is the training step's Python. The untraced-time finding names lines of `train`, never the sampled sleep
    inside the range, which the range's own finding names."""
    analysis = _recorded(SAMPLED, "host_load-problem")
    lines = _sampled_lines(next(f for f in analysis.findings if f.kind == "untraced_host"))
    assert lines and all(name.endswith(" in train") for name in lines), lines


def test_a_capture_without_python_backtraces_names_no_line() -> None:
    finding = next(f for f in _recorded(CAUSES["2025.3"], "alloc_churn-problem").findings
                   if f.kind == "allocator_churn")
    assert [e for e in finding.evidence if e.where is not None and e.where.kind == "line"] == []


@pytest.mark.parametrize(("folder", "case", "variant"), [
    *((H100_ALL[version], "small_step", variant) for version in H100_ALL for variant in ("problem", "fixed")),
    *((H100_ADAM[version], "deep_adam", variant) for version in H100_ADAM for variant in ("problem", "fixed"))])
def test_the_backward_pass_is_named_by_the_thread_that_launched_it(folder: Path, case: str, variant: str) -> None:
    """A training step's thread waits in loss.backward() while autograd's thread launches the backward pass: the GPU's
    idle time there is the other thread's dispatch, and the finding says so with that thread's launches, not "mark the
    host work with NVTX ranges"."""
    analysis = _recorded(folder, f"{case}-{variant}")
    finding = next(f for f in analysis.findings if f.kind == "untraced_host")
    assert finding.subject == "other_threads"
    calls = {e.where.name: e.value for e in finding.evidence
             if e.metric == "other_threads_calls_per_step" and e.where is not None}
    assert any(name.startswith("cudaLaunchKernel") and count >= 10 for name, count in calls.items()), calls
    assert "autograd" in finding_title(finding) and "NVTX" not in finding_suggestion(finding)
    # The budget names the same wait: the other thread's launches, not the steps' thread's "untraced CPU time".
    elsewhere = {a.name: a for a in analysis.budget.idle_activities if a.kind == "other_threads"}
    assert any(name.startswith("cudaLaunchKernel") for name in elsewhere), analysis.budget.idle_activities
    assert all(a.part == "gpu_idle" for a in elsewhere.values())
    lines = budget_lines(analysis.budget)
    assert any(line.strip().startswith("waiting on other threads' CUDA call cudaLaunchKernel") for line in lines)


def test_host_time_with_no_other_thread_at_work_stays_untraced() -> None:
    """The foreach optimizer's step alone (no backward pass): its untraced host time is its own thread's Python."""
    analysis = _recorded(H100_ALL["2025.3-h100-all"], "per_param-fixed")
    assert [f.subject for f in analysis.findings if f.kind == "untraced_host"] == [""]
    assert "other_threads" not in {a.kind for a in analysis.budget.idle_activities}
