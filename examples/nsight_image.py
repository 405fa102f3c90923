"""The task image of the flyte_*.py examples: NGC PyTorch (torch and nsys) plus this repository's packages.

    uv build --all-packages --wheel -o dist      # once per change of packages/, before `flyte run`

Two layers on the NGC image, nothing copied from the source tree and no file edited by hand:
- Flyte's venv (/opt/venv) is re-created with `--system-site-packages` (keeping what is in it) so that
  `import torch` finds NGC's CUDA build in the system Python instead of pulling another 3 GB torch.
- The two wheels from dist/ are installed by their exact `+repo` versions from that folder
  (`--find-links`), their dependencies from the image's package index; PyPI cannot serve a
  `+repo` version, so no stranger's `nsight-core` can be picked instead.
"""

import os
from pathlib import Path

import flyte

REPO = Path(__file__).resolve().parent.parent
WHEELS = Path(os.environ.get("NSIGHT_WHEELS", REPO / "dist"))
WHEELS_IN_IMAGE = "/opt/nsight-wheels"
PACKAGES = ("nsight-core[nvtx]==0.1.0+repo", "flyteplugins-nsight==0.1.0+repo")

image = (
    flyte.Image.from_base("nvcr.io/nvidia/pytorch:26.09-py3")
    # python_version must match the base image's Python (3.12 in NGC 26.xx images).
    .clone(extendable=True, name="nsight", python_version=(3, 12))
    .with_commands(["uv venv --allow-existing --system-site-packages --python /usr/bin/python3 /opt/venv"])
    .with_source_folder(WHEELS, WHEELS_IN_IMAGE)
    .with_pip_packages(*PACKAGES, extra_args=f"--find-links {WHEELS_IN_IMAGE}")
)
