"""Client pieces that need no broker: config validation and pickling, backoff, reply mapping,
ticket validation (columns included), and error decoding."""

from __future__ import annotations

import dataclasses
import json
import pickle
import random

import pyarrow as pa
import pytest
import tenacity
from hypothesis import given, settings
from hypothesis import strategies as st
from pyarrow import flight

from connector import Backoff, ClientConfig, Consumer
from connector.client import as_rocketha_error, consumer, discovery, encoding, put_channel
from connector.client.producer_core import Message
from connector.client.put_channel import _PutChannel
from connector.protocol import (
    CODES,
    CONSUME_SCHEMA,
    FatalError,
    GetTicket,
    ProtocolError,
    PutReply,
    RetriableError,
    consume_schema,
    encode_error_info,
    status_for,
)


def test_config_pickles_and_validates() -> None:
    config = ClientConfig(brokers="127.0.0.1:1, 127.0.0.1:2")  # type: ignore[arg-type]
    assert config.brokers == ("127.0.0.1:1", "127.0.0.1:2")
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(ValueError, match="'nohost' has no port: expected HOST:PORT"):
        ClientConfig(brokers=("nohost",))
    with pytest.raises(ValueError, match="request_timeout_ms"):
        ClientConfig(brokers=("h:1",), request_timeout_ms=0)


def test_config_takes_a_controller_instead_of_brokers() -> None:
    config = ClientConfig(controller="127.0.0.1:1;127.0.0.1:2")
    assert config.brokers == () and pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(ValueError, match=r"ClientConfig\.controller: 'nohost' has no port"):
        ClientConfig(controller="127.0.0.1:1,nohost")
    with pytest.raises(ValueError, match="controller"):
        ClientConfig()


def test_backoff_doubles_up_to_the_cap() -> None:
    backoff = Backoff(initial_ms=20, max_ms=300)
    assert [backoff.delay_ms(attempt) for attempt in range(6)] == [20, 40, 80, 160, 300, 300]
    assert backoff.delay_ms(10_000) == 300
    assert Backoff.remaining_ms(10.0, 9.5) == 500 and Backoff.remaining_ms(1.0, 2.0) == 0


@pytest.mark.parametrize("end", ["low", "high"])
def test_jitter_spans_exactly_the_upper_half_of_each_window(
        end: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The random draw pinned to each end of its range (tenacity draws with random.uniform):
    retry n waits between half and all of min(cap, initial x 2^n), never outside."""
    monkeypatch.setattr(tenacity.wait.random, "uniform",
                        (lambda low, high: low) if end == "low" else (lambda low, high: high))
    backoff = Backoff(initial_ms=20, max_ms=1000)
    windows = [backoff.delay_ms(attempt) for attempt in range(8)]
    assert windows == [20, 40, 80, 160, 320, 640, 1000, 1000]
    drawn = [backoff.jittered_ms(attempt) for attempt in range(8)]
    expected = [w // 2 for w in windows] if end == "low" else windows
    assert drawn == expected
    assert backoff.jittered_ms(10_000) == expected[-1]


def test_jitter_spreads_retries_within_their_bounds() -> None:
    """Seeded: a thousand producers' first and fifth retries, each inside its window and
    spread over it (without jitter all would wait the same time)."""
    random.seed(20261202)
    backoff = Backoff(initial_ms=20, max_ms=1000)
    for attempt, window in ((0, 20), (4, 320)):
        drawn = [backoff.jittered_ms(attempt) for _ in range(1000)]
        assert window // 2 <= min(drawn) and max(drawn) <= window
        assert max(drawn) - min(drawn) >= window * 0.4  # spread over most of the half
        assert len(set(drawn)) >= min(window // 2, 100) * 0.8


def test_put_reply_maps_rows_back_to_queue_offsets() -> None:
    uniform = PutReply("PUT_OK", 0, [[2, 10, 3]], None, 99)
    assert uniform.row_offsets(3) == [(2, 10), (2, 11), (2, 12)]
    mixed = PutReply("PUT_OK", 0, [[1, 5, 2], [0, 7, 1]], [1, 0, 1], 99)
    assert mixed.row_offsets(3) == [(1, 5), (0, 7), (1, 6)]
    assert PutReply.decode(mixed.encode()) == mixed


def test_put_reply_encodes_every_field_as_asdict_would() -> None:
    """encode() lists the fields by hand (speed): a field added later must not go missing."""
    for reply in (PutReply("PUT_OK", 0, [[2, 10, 3]], None, 99),
                  PutReply("FLUSH_SLAVE_TIMEOUT", 7, [], [1, 0], -1, "late", True)):
        assert json.loads(reply.encode()) == dataclasses.asdict(reply)
        assert PutReply.decode(reply.encode()) == reply


@pytest.mark.parametrize("raw, field", [
    (b"{", "JSON"), (b"[]", "object"), (b'{"topic": "t"}', "queue_id"),
    (b'{"topic": "t", "queue_id": "1", "queue_offset": 0}', "queue_id"),
    (b'{"topic": "t", "queue_id": 1, "queue_offset": -1}', "queue_offset"),
    (b'{"topic": "t", "queue_id": 1, "queue_offset": 0, "color": 1}', "color"),
    (b'{"topic": "t", "queue_id": 1, "queue_offset": 0, "max_messages": 0}', "max_messages"),
])
def test_ticket_errors_name_the_field(raw: bytes, field: str) -> None:
    with pytest.raises(ProtocolError, match=field):
        GetTicket.decode(raw)
    assert GetTicket.decode(GetTicket("t", 1, 5).encode()) == GetTicket("t", 1, 5)


def test_ticket_columns_round_trip_and_give_the_reply_schema() -> None:
    ticket = GetTicket("t", 1, 5, tag_filter="A", columns=("msg_id", "body", "queue_offset"))
    assert GetTicket.decode(ticket.encode()) == ticket
    assert ticket.schema().names == ["queue_offset", "body", "msg_id"]  # schema order
    assert ticket.schema() == consume_schema(("body", "queue_offset", "msg_id"))
    assert GetTicket("t", 1, 5).schema() == CONSUME_SCHEMA
    assert b"columns" not in GetTicket("t", 1, 5).encode()  # a full read's ticket is unchanged
    every = GetTicket("t", 0, 0, columns=tuple(CONSUME_SCHEMA.names))
    assert GetTicket.decode(every.encode()).schema() == CONSUME_SCHEMA


@pytest.mark.parametrize("columns, message", [
    (["body", "colour"], "unknown column 'colour'"),
    (["queueId"], "unknown column 'queueId'"),  # the Spark name is not a consume column
    ([3], "unknown column 3"),
    ([], "non-empty list"),
    ("body", "non-empty list"),
    (["body", "body"], "named twice"),
])
def test_ticket_columns_errors_name_the_column(columns: object, message: str) -> None:
    raw = json.dumps({"topic": "t", "queue_id": 0, "queue_offset": 0, "columns": columns})
    with pytest.raises(ProtocolError, match=message):
        GetTicket.decode(raw.encode())


def test_error_table_and_flight_error_decoding() -> None:
    assert status_for("NOT_MASTER").retriable and status_for("NOT_MASTER").refresh_route
    assert not status_for("MESSAGE_ILLEGAL").retriable
    assert status_for("FLUSH_SLAVE_TIMEOUT").stored and not status_for("MESSAGE_ILLEGAL").stored
    assert len({entry.name for entry in CODES.values()}) == len(CODES)
    text, info = encode_error_info("TOPIC_NOT_EXIST", "topic 'x' does not exist")
    error = as_rocketha_error(flight.FlightServerError(text, info))
    assert isinstance(error, FatalError) and error.name == "TOPIC_NOT_EXIST"
    assert error.refresh_route and "topic 'x'" in error.message
    transport = as_rocketha_error(flight.FlightUnavailableError("connection refused"))
    assert isinstance(transport, RetriableError) and transport.name == "SERVICE_NOT_AVAILABLE"


def _cluster_list(*sets: tuple[str, int | None, list[int], list[int]]) -> dict:  # type: ignore
    """A cluster_list reply: (broker_name, master id, member ids, alive ids) per set."""
    return {"replica_sets": [
        {"replica": {"broker_name": name, "master_broker_id": master,
                     "brokers": [{"broker_id": i, "broker_address": f"{name}:{i}"}
                                 for i in members]},
         "alive_broker_ids": alive}
        for name, master, members, alive in sets]}


def test_a_consumer_reads_from_one_replica_set_master_first(monkeypatch) -> None:  # type: ignore
    reply = _cluster_list(("b", 2, [1, 2, 3], [1, 2, 3]), ("a", 1, [1, 2], [2]))
    monkeypatch.setattr(discovery, "controller_cluster_list",
                        lambda controller, timeout, *_: reply)
    assert discovery.controller_members("c:1", 1000, "b") == ("b:2", "b:1", "b:3")
    assert discovery.controller_members("c:1", 1000, "a") == ("a:2",)  # the master is dead
    with pytest.raises(FatalError, match="name one"):
        discovery.controller_members("c:1", 1000, None)  # two sets: which one?
    with pytest.raises(RetriableError, match="no alive broker"):
        discovery.controller_members("c:1", 1000, "z")
    single = _cluster_list(("a", None, [1, 2], [1, 2]))
    monkeypatch.setattr(discovery, "controller_cluster_list",
                        lambda controller, timeout, *_: single)
    assert discovery.controller_members("c:1", 1000, None) == ("a:1", "a:2")


def test_routes_fetched_again_after_a_failure_or_kept_without_a_controller(  # type: ignore
        monkeypatch) -> None:
    answers: list[object] = [("m:1", "s:2"), RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                                                           "controllers down")]

    def members(controller: str, timeout_ms: int, broker_name: str | None,
                tls: object = None, credentials: object = None) -> tuple[str, ...]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    monkeypatch.setattr(consumer, "controller_members", members)
    reader = Consumer(ClientConfig(controller="c:1"))
    assert reader.endpoint == "m:1"
    assert reader.endpoint == "m:1"  # cached: no second controller call
    reader._refresh_route("m:1")  # the master failed; the controller does not answer
    assert reader.endpoint == "s:2"  # the known slave, next in turn
    assert answers == []


def test_an_idempotent_batch_is_retried_only_in_the_replica_set_it_was_sent_to(  # type: ignore
        monkeypatch) -> None:
    """The idempotence table that recognises a retry is per replica set: a retry that moved
    to another set's master would be stored twice (issue 15 review)."""
    def cluster(a_master: int | None) -> dict:  # type: ignore[type-arg]
        reply = _cluster_list(("a", a_master, [1, 2], [1, 2]), ("b", 1, [1, 2], [1, 2]))
        for status in reply["replica_sets"]:
            replica = status["replica"]
            master = replica["master_broker_id"]
            replica["master_address"] = None if master is None else \
                f"{replica['broker_name']}:{master}"
        return reply

    answers = [cluster(1)]
    monkeypatch.setattr(put_channel, "controller_cluster_list",
                        lambda controller, timeout, *_: answers[0])
    producer = _PutChannel(ClientConfig(controller="c:1"), idempotent=True)
    plain = _PutChannel(ClientConfig(controller="c:1"), idempotent=False)
    assert producer.endpoint == "a:1" and plain.endpoint == "a:1"
    home: list[str] = []
    assert producer._pinned("a:1", home) == "a:1" and home == ["a"]
    answers[0] = cluster(2)  # set a failed over
    producer._routes.stale = True
    assert producer.endpoint in ("a:2", "b:1")
    assert producer._pinned("b:1", home) == "a:2"  # never set b's master
    answers[0] = cluster(None)  # set a has no master yet: wait for one
    producer._routes.stale = True
    producer.endpoint  # noqa: B018 - refreshes the routes
    with pytest.raises(RetriableError, match="replica set a has no alive master"):
        producer._pinned("b:1", home)
    assert plain._pinned("b:1", []) == "b:1"  # no idempotence: nothing to pin


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.binary(max_size=3).map(bytearray)))
def test_one_body_is_the_array_pa_array_builds(body: bytes) -> None:
    """A keyless send's 1-row batch is built from buffers (speed): the same array, valid,
    and the same batch as the general builder's."""
    built = encoding._one_body(body)
    built.validate(full=True)
    assert built.equals(pa.array([body], pa.binary()))
    only = Message(bytes(body), None, None, None, len(body), None)
    fast = encoding._messages_to_batch([only], None, None)
    assert fast.equals(encoding._messages_to_batch([only, only], None, None).slice(0, 1))
    assert fast.schema.equals(encoding._BODY_SCHEMA)
