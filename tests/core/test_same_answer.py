"""The same capture gives the same answer whatever the memory allowed: `nsight stats --json` under 512 MiB, 1 GiB,
no limit, and a budget so small that the capture is exported to SQLite and scanned from disk in windows, is one JSON
(but for ``export``, which says how it was read). One pipeline over windows, never a choice between analyses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fixture_sets import FIXTURES, fanned

from nsight_core import memory
from nsight_core.profile import build_profile
from nsight_core.report import stats_json
from nsight_core.trace import export as export_module

CAPTURES = sorted(path for path in FIXTURES.glob("h200-*/*.nsys-rep") if "2025" not in path.parent.name) + \
    sorted(FIXTURES.glob("h200-*2025*/*.sqlite"))
"""Every recorded capture: nsys 2025.3's as their SQLite exports (the installed nsys 2023.4.4 cannot read them)."""
SETTINGS = ["512M", "1G", "off", "scanned"]


def answer(capture: Path, setting: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`nsight stats --json` of a fresh copy of CAPTURE with NSIGHT_SUMMARY_MEMORY at SETTING, its ``export`` left out;
    ``scanned``: 34 MiB allowed, a scan from disk allowed 1 MiB (the capture is streamed from its SQLite export)."""
    copy = folder / setting / capture.name
    copy.parent.mkdir(parents=True)
    shutil.copyfile(capture, copy)
    with monkeypatch.context() as patched:
        if setting == "scanned":
            patched.setattr(memory, "STREAMED_SUMMARY_BYTES", 1 << 20)
            patched.setattr(export_module, "STREAM_ABOVE_BYTES", 0)
            patched.setenv("NSIGHT_SUMMARY_MEMORY", "34M")
        else:
            patched.setenv("NSIGHT_SUMMARY_MEMORY", setting)
        payload = stats_json(build_profile(copy))
    assert (payload["export"] or {}).get("streamed", False) == (setting == "scanned") or capture.suffix == ".sqlite"
    payload.pop("export")
    return payload


@pytest.mark.nsys
@pytest.mark.parametrize("capture", fanned(CAPTURES))
def test_the_json_is_the_same_whatever_the_memory(capture: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    answers = {setting: answer(capture, setting, tmp_path, monkeypatch) for setting in SETTINGS}
    first = json.dumps(answers["512M"], sort_keys=True)
    for setting in SETTINGS[1:]:
        assert json.dumps(answers[setting], sort_keys=True) == first, setting
