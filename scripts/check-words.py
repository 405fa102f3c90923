#!/usr/bin/env python3
"""Fail on the team's own process words in what users and maintainers read.

Comments, docstrings and docs say what the code does and why, in words that hold without the story of how
it got there: no work-session names, issue numbers, talk of device time, or commit references. That story
belongs in commit messages; measurements belong in docs/performance.md (written by `make bench`).

usage: scripts/check-words.py [PATH ...]   (default: packages docs README.md Makefile)
Exit status: 0 when clean, 1 when a line needs rewording (each printed as FILE:LINE: what to do).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PATHS = ("packages", "docs", "README.md", "Makefile")
SKIPPED_SUFFIXES = {".png", ".jpg", ".gif", ".ico", ".pyc", ".whl", ".gz", ".nsys-rep", ".sqlite", ".qdstrm"}
SKIPPED_PARTS = {"vendor", "__pycache__"}
"""Third-party files shipped as they are (render/vendor: vega's bundles) and build output."""

HASH = r"[0-9a-f]{7,40}"
RULES = [
    (re.compile(r"\b[Ss]ession [A-Z]\b"),
     "names a work session: say what was measured or decided; the history goes in the commit message"),
    (re.compile(r"\b[Ii]ssues? #?[0-9]+"),
     "cites an issue number: give the reason itself; the issue goes in the commit message"),
    (re.compile(r"\b[Dd]evice[- ]time\b"),
     "talks of the team's device time: say what was measured, or leave it out"),
    (re.compile(rf"\b[Cc]ommits? {HASH}\b"),
     "cites a commit: say what the code does now; history goes in the commit message"),
    (re.compile(rf"\bat (?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9]){HASH}\b"),
     "cites a commit (\"at <hash>\"): say what the code does now; history goes in the commit message"),
]


def files(paths: list[str]) -> list[Path]:
    """The files under PATHS that git tracks or would track (ignored build output left out)."""
    try:
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *paths],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
        found = [ROOT / line for line in listed]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file
        found = [p for path in paths for p in ([ROOT / path] if (ROOT / path).is_file() else (ROOT / path).rglob("*"))]
    return sorted(p for p in found if p.is_file() and p.suffix not in SKIPPED_SUFFIXES
                  and not SKIPPED_PARTS.intersection(p.relative_to(ROOT).parts))


def main(argv: list[str]) -> int:
    hits = 0
    for path in files(argv or list(DEFAULT_PATHS)):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for pattern, advice in RULES:
                if match := pattern.search(line):
                    hits += 1
                    print(f"{path.relative_to(ROOT)}:{number}: \"{match.group(0)}\" {advice}")
    if hits:
        print(f"check-words: {hits} line(s) to reword (scripts/check-words.py says why)", file=sys.stderr)
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
