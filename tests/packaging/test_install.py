"""Installing from the repository as a stranger would: both wheels into a fresh virtual environment,
dependencies from the package registry only (no workspace, no editable source), then a real capture.

The plugin pins `nsight-core==0.1.0+repo`; PyPI refuses local versions, so no index can satisfy that
pin with somebody else's `nsight-core`, and the plugin alone must fail to install rather than pull one.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from packaging_helpers import REPO, fresh_venv, uv

pytestmark = pytest.mark.nsys

REGION_SCRIPT = """
import nsight_core
with nsight_core.range("work"):
    print(sum(i * i for i in range(200_000)))
"""


def run(argv: list[str | Path], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL, env={**os.environ, **env})


def test_both_wheels_install_with_uv_and_profile_a_script(tmp_path: Path, wheels: list[Path]) -> None:
    venv = fresh_venv(tmp_path / "venv")
    installed = run([*uv(), "pip", "install", "--python", venv / "bin" / "python", *wheels], tmp_path)
    assert installed.returncode == 0, installed.stderr
    bin_ = venv / "bin"
    versions = run([bin_ / "python", "-c", "from importlib.metadata import version as v; import importlib.util as u; "
                    "print(v('nsight-core'), v('flyteplugins-nsight'), u.find_spec('vl_convert'))"], tmp_path)
    assert versions.stdout.split() == ["0.1.0+repo", "0.1.0+repo", "None"], versions.stderr

    helped = run([bin_ / "nsight", "--help"], tmp_path)
    assert helped.returncode == 0 and "usage: nsight" in helped.stdout
    imported = run([bin_ / "python", "-c", "import flyteplugins.nsight, nsight_core; print(nsight_core.__file__)"],
                   tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert str(venv) in imported.stdout  # the installed copy, not the repository's source

    out = tmp_path / "runs"
    profiled = run([bin_ / "nsight", "run", "--capture", "manual", "--trace", "nvtx,osrt", "--sample", "none",
                    "-o", out, "--", bin_ / "python", "-c", REGION_SCRIPT], tmp_path)
    assert profiled.returncode == 0, profiled.stderr
    reports = [line for line in profiled.stdout.splitlines() if line.endswith(".nsys-rep")]
    assert reports == [str(out / "work.nsys-rep")] and Path(reports[0]).stat().st_size > 0

    page = tmp_path / "report.html"
    rendered = run([bin_ / "nsight", "report", reports[0], "-o", page], tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert "vegaEmbed" in page.read_text()  # the vendored JavaScript came with the wheel


def test_pip_installs_both_packages_from_the_repository(tmp_path: Path, wheels: list[Path]) -> None:
    """pip resolves the plugin's `nsight-core==0.1.0+repo` to the repository's folder. The third-party
    dependencies are put in first from uv's cache (the test above installs them from the registry), so
    this costs pip's build of our two packages, not a download of flyte's whole tree."""
    venv = fresh_venv(tmp_path / "venv", seed=True)
    python = venv / "bin" / "python"
    deps = run([*uv(), "pip", "install", "--python", python, *wheels], tmp_path)
    assert deps.returncode == 0, deps.stderr
    run([*uv(), "pip", "uninstall", "--python", python, "nsight-core", "flyteplugins-nsight"], tmp_path)
    installed = run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                     REPO / "packages" / "nsight-core", REPO / "packages" / "nsight-flyte"], tmp_path)
    assert installed.returncode == 0, installed.stderr
    version = run([venv / "bin" / "nsight", "--version"], tmp_path)
    assert version.returncode == 0 and "0.1.0+repo" in version.stdout, version.stderr
    imported = run([python, "-c", "import flyteplugins.nsight"], tmp_path)
    assert imported.returncode == 0, imported.stderr


def test_the_plugin_alone_never_resolves_the_core_from_an_index(tmp_path: Path, wheels: list[Path]) -> None:
    plugin = [w for w in wheels if w.name.startswith("flyteplugins_nsight")]
    venv = fresh_venv(tmp_path / "venv")
    refused = run([*uv(), "pip", "install", "--dry-run", "--python", venv / "bin" / "python", *plugin], tmp_path)
    assert refused.returncode != 0
    assert "nsight-core==0.1.0+repo" in refused.stderr
