"""Errors the Spark connector raises (the wire's own codes live in connector.protocol.errors).

    ConnectorError                  a connector-level failure; the message names what and why
    ├── OptionError                 a bad, missing, conflicting or unknown option (names it)
    ├── RoutesUnavailableError      routes cannot be resolved (unreachable brokers, no controller)
    ├── DataLossError               offsets behind retention, or a topic/queue that went away,
    │                               with failOnDataLoss=true
    ├── SourceSchemaError           a declared read schema (`.schema(...)`) with an unknown
    │                               column or a wrong type (names the column and the type)
    ├── SinkSchemaError             sink input columns unknown or of the wrong type
    ├── SinkStatusError             a write came back with a status not in acceptStatuses
    ├── ProducerBufferFullError     send_async: no room in buffer_bytes within max_block_ms
    └── ProducerClosedError         a send on a closed Producer

All derive from ValueError or RuntimeError as well, so Spark shows the message verbatim.
"""

from __future__ import annotations

__all__ = [
    "ConnectorError",
    "DataLossError",
    "OptionError",
    "ProducerBufferFullError",
    "ProducerClosedError",
    "RoutesUnavailableError",
    "SinkSchemaError",
    "SinkStatusError",
    "SourceSchemaError",
]


class ConnectorError(Exception):
    """Base of the connector's errors."""


class OptionError(ConnectorError, ValueError):
    """An option is unknown, malformed, missing, or conflicts with another."""


class RoutesUnavailableError(ConnectorError, RuntimeError):
    """Where a topic lives cannot be resolved."""


class DataLossError(ConnectorError, RuntimeError):
    """The query's offsets point at messages that no longer exist."""


class SourceSchemaError(ConnectorError, ValueError):
    """A schema declared for a read names a column the source lacks, or types one wrongly."""


class SinkSchemaError(ConnectorError, ValueError):
    """The DataFrame given to the sink has columns it cannot write."""


class SinkStatusError(ConnectorError, RuntimeError):
    """The broker answered a write with a status the user did not accept."""


class ProducerBufferFullError(ConnectorError, RuntimeError):
    """`Producer.send_async` found no room in `buffer_bytes` within `max_block_ms`."""


class ProducerClosedError(ConnectorError, RuntimeError):
    """A send on a Producer that was closed (or whose close gave up on it)."""
