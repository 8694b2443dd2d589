"""The demo (`python3 build.py demo`, i.e. `python -m examples.demo` from the repository root):
pipeline.py runs the story (see its docstring), harness.py drives the cluster, Spark and the
tier from outside."""

from __future__ import annotations

from examples.demo.pipeline import main

__all__ = ["main"]
