"""Errors of the replication layer (ha/).

Expected outcomes of a put (FLUSH_SLAVE_TIMEOUT, IN_SYNC_REPLICAS_NOT_ENOUGH ...) are statuses,
never exceptions. The exceptions are for links and configuration:

    ReplicationError                 base; carries the peer / log position it is about
    ├── FrameError                   bytes on an HA link that are not a valid frame (bad magic,
    │                                version, kind, size over the limit, CRC mismatch, truncated
    │                                body): the link is closed, nothing else is affected
    └── LinkClosedError              the peer closed the link, or it went silent

A handshake that cannot reconcile two logs (no common epoch, fork point below the confirm
position, segment sizes differ) is not an exception: the slave core closes the link with a
refusal that `broker info` reports (`last_refusal`), and retries at the reconnect pace.

A ConfigError (from storage_engine) names the configuration key that is wrong.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["FrameError", "LinkClosedError", "ReplicationError"]


class ReplicationError(Exception):
    """Base of every error raised by the replication layer."""

    retriable: ClassVar[bool] = True


class FrameError(ReplicationError):
    """An HA frame failed its checks; only the link that carried it is closed."""


class LinkClosedError(ReplicationError):
    """The link ended (peer closed it, or nothing arrived within haHousekeepingInterval)."""
