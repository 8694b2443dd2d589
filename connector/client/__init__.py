"""The client library: configuration, finding the controller and the masters, connections,
Admin, Producer and Consumer over Arrow Flight (connector.protocol is the wire)."""

from __future__ import annotations

from connector.client.core import (
    Admin,
    Backoff,
    ClientConfig,
    Consumer,
    Producer,
    ProducerConfig,
    PullResult,
    SendResult,
    as_rocketha_error,
    controller_call,
    controller_cluster_list,
    signed_options,
    with_marker,
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
    "as_rocketha_error",
    "controller_call",
    "controller_cluster_list",
    "signed_options",
    "with_marker",
]
