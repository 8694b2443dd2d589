"""rocketha's client side: the wire protocol, the client library and (later) the Spark source.

Import from here: `from connector import Producer, Consumer, Admin, ClientConfig`.
"""

from __future__ import annotations

from connector.client import (
    Admin,
    Backoff,
    ClientConfig,
    Consumer,
    Producer,
    ProducerConfig,
    PullResult,
    SendResult,
)

__all__ = [
    "Admin",
    "Backoff",
    "ClientConfig",
    "Consumer",
    "Producer",
    "ProducerConfig",
    "PullResult",
    "SendResult",
]
