"""Build the project's wheel as a user gets it, for the packaging and install tests.

From a copy of the checkout (a build writes build/ and *.egg-info next to the sources, and a
stale build/lib would ship modules the tree no longer has), with this environment's pip and
setuptools (no build isolation: no network), and without PYTHONPATH (a worktree on it would
not change what is packaged, but keeps the build honest about its inputs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT_S = 600


def without_pythonpath() -> dict[str, str]:
    """This process's environment less PYTHONPATH (so a child imports only its own venv)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def build_wheel(out: Path) -> Path:
    """The wheel of this checkout, built under `out`."""
    source = out / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".*cache", ".hypothesis",
        ".bench-tmp", "demo-data", "site", "node_modules"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "-q", str(source), "-w", str(out)], check=True, cwd=out,
                   timeout=BUILD_TIMEOUT_S, env=without_pythonpath())
    (found,) = out.glob("rocketha-*.whl")
    return found
