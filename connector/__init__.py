"""rocketha's client side: the wire protocol, the client library and (later) the Spark source.

Import from here: `from connector import Producer, Consumer, Admin, ClientConfig`.

The names are loaded on first use (PEP 562 `__getattr__`): importing a submodule such as
`connector.admin.parser` or `connector.rmq_proxy_entry` runs this file first, and the client
library pulls in the Arrow Flight client, which would make every console script's `--help`
slow. Type checkers see the real imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    if name in __all__:
        value = getattr(importlib.import_module("connector.client"), name)
        globals()[name] = value  # the next lookup does not come here
        return value
    raise AttributeError(f"module 'connector' has no attribute {name!r}")
