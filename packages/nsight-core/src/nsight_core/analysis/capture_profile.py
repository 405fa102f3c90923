"""One report section's data (:class:`CaptureProfile`), which :func:`nsight_core.profile.build_profile` makes."""

from __future__ import annotations

from pydantic import BaseModel, Field

from nsight_core.analysis.completeness import Completeness
from nsight_core.analysis.result import Analysis
from nsight_core.analysis.step_drawing import StepDrawing
from nsight_core.analysis.summary import Tile, summary_tiles
from nsight_core.analysis.trace_summary import TraceSummary
from nsight_core.stats.models import ProfileStats


class CaptureProfile(BaseModel):
    """One report section's data: a capture's statistics, trace summary, "What to fix", completeness and notes."""

    title: str
    source: str = Field(description="The file or directory the profile was built from")
    stats: ProfileStats
    trace: TraceSummary | None = Field(default=None, description="None for recorded CSVs (no event trace)")
    analysis: Analysis | None = Field(default=None, description="Steps, budget and findings; None without events")
    completeness: Completeness | None = Field(default=None, description="Whether the trace holds all that ran; "
                                              "None without events")
    notes: list[str] = Field(default_factory=list, description="Plain-text lines shown below the charts")
    steps_drawn: StepDrawing | None = Field(default=None, description="The steps the page draws in full, with their "
                                            "events, and every step's budget; None without steps")

    @property
    def tiles(self) -> list[Tile]:
        """The summary tiles of this capture."""
        return summary_tiles(self.stats, self.trace)
