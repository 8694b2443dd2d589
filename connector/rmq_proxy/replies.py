"""Small builders of MessagingService replies shared by service.py and pop_service.py."""

from __future__ import annotations

import time
from typing import Any

from rocketmq.grpc_protocol import definition_pb2

from connector.rmq_proxy.codes import CODE

__all__ = ["duration_ms", "status", "wall_ms"]


def status(name: str, message: str = "") -> Any:
    """An apache.rocketmq.v2.Status with the Code named `name`."""
    return definition_pb2.Status(code=CODE[name], message=message[:1000])


def duration_ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def wall_ms() -> int:
    """Wall-clock milliseconds: leases outlive the process, so not a monotonic clock."""
    return int(time.time() * 1000)
