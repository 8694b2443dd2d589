"""A connection another thread closed is a retriable failure, not a crash of the caller.

Found by a chaos campaign (seed 5, power faults): the controller observer's thread died on
`ArrowInvalid('FlightClient is closed')`. Clients of one process share one Flight connection
per endpoint (connector/client/connections.py `_connection`); after a transport failure a thread
drops and closes it (`_drop_connection`) while another thread is about to call on it. That call
raised pyarrow's ArrowInvalid, which the retry policy did not know, so the caller's call failed with
an untyped error instead of being retried on a fresh connection.
Method: the race made deterministic: the cached connection of a real broker's endpoint is
closed before the call (as the other thread would), then an Admin call and a Consumer pull must
succeed (they retry on a new connection).
"""

from __future__ import annotations

from conf.tls import NO_TLS
from connector import Admin, ClientConfig, Consumer
from connector.client.connections import _connection


def test_admin_call_on_a_connection_closed_by_another_thread_is_retried(broker) -> None:  # type: ignore[no-untyped-def]
    config = ClientConfig(brokers=(broker.endpoint,), retries_max=3, request_timeout_ms=3000)
    Admin(config).create_topic("closed-conn", queues=1)
    _connection(broker.endpoint, NO_TLS).close()  # what _drop_connection in another thread does
    assert Admin(config).broker_info()["broker_name"]
    _connection(broker.endpoint, NO_TLS).close()
    result = Consumer(config).pull("closed-conn", 0, 0, max_messages=1)
    assert result.table.num_rows == 0
