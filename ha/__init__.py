"""Replication and the broker service (ha/broker). Depends on storage_engine, controller.api
and connector.protocol only (DESIGN.md §2)."""

from __future__ import annotations

__all__: list[str] = []
