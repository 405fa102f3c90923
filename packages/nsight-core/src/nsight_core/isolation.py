"""Failure isolation for a report section: "What to fix" and the drawn steps are its newest, most heuristic parts,
so a capture shape they do not expect costs that part of the page (with a note saying so), never the statistics."""

from __future__ import annotations

import logging
from collections.abc import Callable

from nsight_core.analysis.analyze import Analyzed
from nsight_core.analysis.capture_profile import CaptureProfile
from nsight_core.analysis.result import Analysis, withhold_savings
from nsight_core.analysis.step_drawing import StepDrawing

log = logging.getLogger("nsight")


def diagnosed(profile: CaptureProfile, analysis: Callable[[], Analyzed]) -> CaptureProfile:
    """PROFILE with the ANALYSIS; should it fail, a note says so and the rest of the page stays."""
    try:
        found = analysis().analysis
        if profile.completeness is not None:
            found = withhold_savings(found, profile.completeness)
        return profile.model_copy(update={"analysis": found})
    except Exception as error:  # one part fails, not the page
        log.warning("could not diagnose %s (%s: %s); the page shows its statistics without 'What to fix'",
                    profile.source, type(error).__name__, error)
        return profile.model_copy(update={"notes": [*profile.notes, f"What to fix: the analysis failed "
                                                    f"({type(error).__name__}: {error})"]})


def with_steps_drawn(profile: CaptureProfile, draw: Callable[[Analysis], StepDrawing | None]) -> CaptureProfile:
    """PROFILE with the steps its page draws in full, as DRAW finds them for its analysis (:func:`drawing_for`);
    should that fail, a note says so and the rest of the page stays."""
    if profile.analysis is None:
        return profile
    try:
        return profile.model_copy(update={"steps_drawn": draw(profile.analysis)})
    except Exception as error:  # one part fails, not the page
        log.warning("could not select %s's steps to draw (%s: %s)", profile.source, type(error).__name__, error)
        return profile.model_copy(update={"notes": [*profile.notes, f"Step view: the selection of its steps failed "
                                                    f"({type(error).__name__}: {error})"]})
