"""The version every rocketha process reports (broker info, controller status, /metrics).

Why one place: an operator in the middle of a rolling upgrade needs to see which process runs
which release (docs/planned-operations.md says what may run together). The version is the
installed distribution's (pyproject.toml `version`); a tree run from a checkout without an
install reports "0+unknown" rather than guess.
"""

from __future__ import annotations

from importlib import metadata

__all__ = ["VERSION"]


def _installed_version() -> str:
    try:
        return metadata.version("rocketha")
    except metadata.PackageNotFoundError:
        return "0+unknown"


VERSION = _installed_version()
