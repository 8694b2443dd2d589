"""spark-submit pipelines and the demo driver. Depends on connector only (docs/design.md §2)."""

from __future__ import annotations

__all__: list[str] = []
