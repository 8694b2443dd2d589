"""Small builders of MessagingService replies shared by service.py and pop_service.py."""

from __future__ import annotations

import time
from typing import Any

from rocketmq.grpc_protocol import definition_pb2

from connector.protocol import RocketHAError
from connector.rmq_proxy.codes import CODE, code_for_status

__all__ = ["duration_ms", "refusal_or_error", "status", "wall_ms"]


def status(name: str, message: str = "") -> Any:
    """An apache.rocketmq.v2.Status with the Code named `name`."""
    return definition_pb2.Status(code=CODE[name], message=message[:1000])


def duration_ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def wall_ms() -> int:
    """Wall-clock milliseconds: leases outlive the process, so not a monotonic clock."""
    return int(time.time() * 1000)


def refusal_or_error(err: RocketHAError, what: str) -> Any:
    """A refusal of the user's call (NO_PERMISSION -> FORBIDDEN, UNAUTHENTICATED ->
    UNAUTHORIZED), else a retriable server error."""
    if err.name in ("NO_PERMISSION", "UNAUTHENTICATED"):
        return status(code_for_status(err.name)[1], f"{what}: {err.message}")
    return status("INTERNAL_SERVER_ERROR", f"{what}: {err}")
