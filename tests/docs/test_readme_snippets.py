"""Every python/bash block of the READMEs runs as written, unless the README says why it cannot here.

A block is skipped only when the line before it (blank lines aside) is `<!-- not run: REASON -->`, so a
reader sees the same reason. A python block whose first line is `# NAME.py` is the file NAME.py of the
README's later blocks: it is written to the working folder (and run too). Blocks of one README run in
order in one fresh folder, with this environment's bin (`nsight`, `python`) first on PATH.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
READMES = [REPO / "README.md", *sorted((REPO / "packages").glob("*/README.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*\Z")
FILE_HEADER = re.compile(r"#\s*([\w.-]+\.py)\s*\n")


@dataclass
class Block:
    readme: Path
    line: int
    language: str
    code: str
    not_run: str | None

    @property
    def where(self) -> str:
        return f"{self.readme.relative_to(REPO)}:{self.line}"


def blocks(readme: Path) -> list[Block]:
    text = readme.read_text()
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip()
        reason = NOT_RUN.search(before[-300:])
        found.append(Block(readme, text.count("\n", 0, match.start()) + 1, match.group(1), match.group(2),
                           reason.group(1) if reason else None))
    return found


def test_every_block_says_its_language() -> None:
    unlabeled = [b.where for readme in READMES for b in blocks(readme) if not b.language]
    assert unlabeled == [], "label these fenced blocks (```python, ```bash, ```text)"


@pytest.mark.nsys  # the blocks run `nsight run` under the real nsys: its hiccups under load get the one retry
@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(REPO)))
def test_readme_blocks_run(readme: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if not k.startswith("NSIGHT_SESSION")}
    ran = 0
    for block in blocks(readme):
        if block.language not in {"python", "bash"} or block.not_run:
            continue
        header = FILE_HEADER.match(block.code)
        if block.language == "python" and header:
            (tmp_path / header.group(1)).write_text(block.code)
        argv = [sys.executable, "-c", block.code] if block.language == "python" else ["bash", "-euo", "pipefail",
                                                                                       "-c", block.code]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240,
                              stdin=subprocess.DEVNULL)
        assert done.returncode == 0, f"{block.where} ({block.language}) failed:\n{done.stdout}\n{done.stderr}"
        ran += 1
    if ran == 0:
        pytest.skip(f"{readme.relative_to(REPO)}: no block to run (none, or all marked not run)")
