"""The examples' task image (examples/nsight_image.py) as Flyte's image builder writes it, and its install
run here: the same `uv pip install` line, against a fresh venv instead of the image's /opt/venv.

No docker here and no NGC image: what is checked is what the spec makes the builder do, and that those
commands install our two wheels and their dependencies into an environment that can import them.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import shlex
import subprocess
from pathlib import Path
from types import ModuleType

import pytest
from flyte._internal.imagebuild.docker_builder import _process_layer
from packaging_helpers import REPO, fresh_venv, uv


def load_image_module(wheels: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NSIGHT_WHEELS", str(wheels))
    spec = importlib.util.spec_from_file_location("nsight_image_under_test", REPO / "examples" / "nsight_image.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dockerfile_of(image, context: Path) -> str:  # type: ignore[no-untyped-def]
    """The Dockerfile lines Flyte's docker builder writes for IMAGE's layers (files copied into CONTEXT)."""

    async def render() -> str:
        text = ""
        for layer in image._layers:
            text = await _process_layer(layer, context, text)
        return text

    return asyncio.run(render())


def test_image_spec_installs_the_wheels_into_flytes_venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       wheels: list[Path]) -> None:
    module = load_image_module(wheels[0].parent, monkeypatch)
    context = tmp_path / "context"
    context.mkdir()
    dockerfile = dockerfile_of(module.image, context)

    assert "pyvenv.cfg" not in dockerfile and "sed " not in dockerfile
    assert "uv venv --allow-existing --system-site-packages --python /usr/bin/python3 /opt/venv" in dockerfile
    copy = re.search(r"^COPY \S+ (\S+) (\S+)$", dockerfile, re.M)
    assert copy and copy.group(2) == module.WHEELS_IN_IMAGE
    copied = sorted(p.name for p in (context / copy.group(1)).glob("*.whl"))
    assert [name.split("-")[0] for name in copied] == ["flyteplugins_nsight", "nsight_core"]  # only wheels

    # The install line, run as the image would run it, with the venv and the wheel folder of this machine.
    install = re.search(r"uv pip install --python \$UV_PYTHON (.+)$", dockerfile, re.M)
    assert install, dockerfile
    venv = fresh_venv(tmp_path / "venv")
    args = [a.replace(module.WHEELS_IN_IMAGE, str(context / copy.group(1))) for a in shlex.split(install.group(1))]
    done = subprocess.run([*uv(), "pip", "install", "--python", str(venv / "bin" / "python"), *args],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    probe = "import flyteplugins.nsight, nvtx, importlib.metadata as m; print(m.version('nsight-core'))"
    check = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True)
    assert check.stdout.strip() == "0.1.0+repo", check.stderr
    assert (venv / "bin" / "nsight").exists()  # on the image's PATH: /opt/venv/bin
