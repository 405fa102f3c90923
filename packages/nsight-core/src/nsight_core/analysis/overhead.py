"""The profiler's own cost: what nsys' CUDA tracing adds to every CUDA API call, taken out of the step.

With CUDA traced, each runtime call runs nsys' callbacks, so a host-bound loop runs slower profiled. A step's overhead,
its calls times the cost per call (PER_CALL_NS by nsys version, measured on the fix pairs: tests/fixtures/README.md; or
as measured in its region's process, nsight_core.calibration), comes out of the GPU's waits on the host."""

from __future__ import annotations

from pydantic import BaseModel, Field

from nsight_core.analysis.budget import BudgetPart, Part, StepBudget

PER_CALL_NS = {"2023": 1_000.0, "2024": 1_300.0, "2025": 1_300.0}
"""By nsys' release year: what tracing adds to one CUDA call. A release not here takes the newest entry's."""
FROM_PARTS: tuple[Part, ...] = ("launch_gap", "gpu_idle", "sync_wait")
"""The parts the overhead is taken from, in order: the GPU waited on the host's dispatch, then on the host at all, then
on the host catching up after a sync (its calls were traced too)."""
HOST_SPEED_CHANGED = 1.25
"""A host whose own code took this many times longer (or shorter) once collection was live than just before changed
speed by itself: on the GPU machines measured, a host's speed held within 0.82-1.16x across most starts, and some
starts fell into spells about twice as slow or as fast, whichever way, traced or not."""


class ProfilerOverhead(BaseModel):
    """What nsys' tracing added to each step (numbers only: render words them)."""

    per_call_ns: float = Field(description="What tracing adds to one CUDA call: as measured in the capture's process, "
                               "else PER_CALL_NS of the nsys version")
    calibrated: bool = Field(default=False, description="True where per_call_ns was measured in the capture's process")
    nsys_version: str | None = Field(description="The nsys that wrote the export; None where it does not say")
    calls_per_step: float = Field(description="CUDA API calls of every thread per steady step")
    per_step_ns: float = Field(description="Taken out of each step: calls x cost, at most the time the GPU waited on "
                               "the host")
    host_slowdown: float | None = Field(default=None, description="How many times as long the host took for the same "
                                        "pure-Python loop (no CUDA call) once collection was live as just before; "
                                        "None where not measured")

    def host_speed_change(self) -> float | None:
        """host_slowdown where the host's own speed changed across the start by HOST_SPEED_CHANGED or more, either
        way (the capture's host-bound times may then not be the program's usual ones, whatever tracing cost); else
        None."""
        slowdown = self.host_slowdown
        changed = slowdown is not None and slowdown > 0 and max(slowdown, 1 / slowdown) >= HOST_SPEED_CHANGED
        return slowdown if changed else None


def release_year(nsys_version: str | None) -> str:
    """The year of the nsys release NSYS_VERSION (``2025`` of ``2025.3.2.0``); '' where unknown."""
    return (nsys_version or "").split(".")[0]


def per_call_ns(nsys_version: str | None) -> float:
    """PER_CALL_NS of the nsys release NSYS_VERSION (``2025.3.2.0``); the newest entry's where unknown."""
    return PER_CALL_NS.get(release_year(nsys_version), PER_CALL_NS[max(PER_CALL_NS)])


def with_overhead(budget: StepBudget, calls_per_step: float, nsys_version: str | None,
                  calibrated_ns: float | None = None,
                  host_slowdown: float | None = None) -> tuple[StepBudget, ProfilerOverhead]:
    """BUDGET with the profiler's overhead as a part of its own (``profiler_overhead``), taken from FROM_PARTS, and the
    overhead: CALLS_PER_STEP CUDA calls at CALIBRATED_NS each, else at :func:`per_call_ns`, at most what those hold.
    HOST_SLOWDOWN, as the region measured it, is carried to be said, never taken out: it is the host's, not nsys'."""
    cost = calibrated_ns if calibrated_ns is not None else per_call_ns(nsys_version)
    steps = max(budget.steps, 1)
    wanted = calls_per_step * cost * budget.steps
    moved: dict[str, float] = {}
    for name in FROM_PARTS:
        take = min(wanted, float(budget.part(name).total_ns))
        moved[name], wanted = take, wanted - take
    taken = sum(moved.values())

    def less(part: BudgetPart) -> BudgetPart:
        gone = moved.get(part.part, 0.0) if part.part != "profiler_overhead" else -taken
        total = round(part.total_ns - gone)
        return part.model_copy(update={
            "total_ns": total, "per_step_mean_ns": total / steps,
            "per_step_p50_ns": max(part.per_step_p50_ns - gone / steps, 0.0),
            "fraction": total / budget.wall_ns if budget.wall_ns else 0.0})

    parts = [less(part) for part in budget.parts]
    drift = budget.wall_ns - sum(part.total_ns for part in parts)  # rounding: the parts still add up to the wall
    parts = [part.model_copy(update={"total_ns": part.total_ns + drift}) if part.part == "profiler_overhead" else part
             for part in parts]
    overhead = ProfilerOverhead(per_call_ns=cost, calibrated=calibrated_ns is not None, nsys_version=nsys_version,
                                calls_per_step=calls_per_step, per_step_ns=taken / steps,
                                host_slowdown=host_slowdown)
    return budget.model_copy(update={"parts": parts}), overhead
