"""The RocketMQ gRPC endpoint's pure parts: POP state, receipt handles, signatures, messages.

Goal: the POP state a replay rebuilds equals the live one (whatever the record order a proxy
wrote), stale and forged receipt handles are recognised, the clients' exact `authorization`
header is accepted and a wrong secret is not, and messages the proxy must refuse are refused
with the RocketMQ code the clients expect. Method: plain values, a seeded random walk for the
replay property (no processes).
"""

from __future__ import annotations

import random

import pytest
from rocketmq.grpc_protocol import definition_pb2
from rocketmq.v5.util.signature import Signature

from connector.rmq_proxy.auth import Authenticator, AuthError, StaticSecrets, parse_authorization
from connector.rmq_proxy.codes import code_for_status
from connector.rmq_proxy.config import ProxyConfig, ProxyConfigError
from connector.rmq_proxy.messages import InvalidMessage, to_pb_message, to_produce_row
from connector.rmq_proxy.pop_core import (
    PopState,
    QueueKey,
    RecordError,
    decode_records,
    encode_records,
)
from connector.rmq_proxy.receipt import ReceiptHandle, ReceiptHandleCodec

KEY = QueueKey("g", "t", "broker-a", 0)


def _random_walk(seed: int, steps: int = 300) -> list[dict]:
    """Records a proxy could write: pops (new and redelivered), acks, changes, snapshots."""
    rng = random.Random(seed)
    live = PopState()
    records: list[dict] = []
    now_ms = 1_000
    end = 0  # messages in the queue
    for _ in range(steps):
        now_ms += rng.randrange(0, 300)
        end += rng.randrange(0, 3)
        choice = rng.random()
        state = live.get(KEY)
        if choice < 0.45:
            cursor = state.cursor if state else 0
            leases = [[o, lease.attempt + 1, now_ms + 500, rng.getrandbits(40)]
                      for o, lease in live.due(KEY, now_ms, 3)]
            new = list(range(cursor, min(end, cursor + rng.randrange(0, 4))))
            skipped = rng.random() < 0.2
            leases += [] if skipped else [[o, 1, now_ms + 500, rng.getrandbits(40)]
                                          for o in new]
            record = {"t": "pop", "k": KEY.to_json(), "start": None if state else 0,
                      "cursor": max(cursor, new[-1] + 1) if new else cursor,
                      "leases": leases, "dropped": []}
        elif choice < 0.8 and state and state.leases:
            offset = rng.choice(sorted(state.leases))
            nonce = state.leases[offset].nonce if rng.random() < 0.9 else 7
            record = {"t": "ack", "k": KEY.to_json(), "offsets": [[offset, nonce]]}
        elif choice < 0.9 and state and state.leases:
            offset = rng.choice(sorted(state.leases))
            record = {"t": "change", "k": KEY.to_json(), "offset": offset,
                      "nonce": state.leases[offset].nonce, "new_nonce": rng.getrandbits(40),
                      "until": now_ms + 1000}
        else:
            record = live.snapshot("broker-a")
        decode_records(encode_records([record]))  # every record the proxy writes decodes
        live.apply(record)
        records.append(record)
    return records


@pytest.mark.parametrize("seed", range(20))
def test_replay_from_any_snapshot_rebuilds_the_live_state(seed: int) -> None:
    records = _random_walk(seed)
    live = PopState()
    for record in records:
        live.apply(record)
    expected = live.snapshot("broker-a")
    starts = [0] + [i for i, r in enumerate(records) if r["t"] == "snapshot"]
    for start in starts:
        replayed = PopState()
        for record in records[start:]:
            replayed.apply(record)
        assert replayed.snapshot("broker-a") == expected, f"seed {seed}, replay from {start}"
    # records are idempotent: a record stored twice (a put retried after a lost reply)
    doubled = PopState()
    for record in records:
        doubled.apply(record)
        doubled.apply(record)
    assert doubled.snapshot("broker-a") == expected


def test_lease_lifecycle_and_stale_handles() -> None:
    pop = PopState()
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": 5, "cursor": 8,
               "leases": [[5, 1, 1000, 11], [7, 1, 1000, 12]], "dropped": []})
    state = pop.get(KEY)
    assert state is not None and state.committed == 5 and state.acked == {6}  # 6: filtered
    assert pop.lease_problem(KEY, 5, 11, now_ms=999) is None
    assert "superseded" in pop.lease_problem(KEY, 5, 99, now_ms=999)
    assert "over" in pop.lease_problem(KEY, 5, 11, now_ms=1000)
    assert [o for o, _ in pop.due(KEY, 1000, 10)] == [5, 7]
    pop.apply({"t": "ack", "k": KEY.to_json(), "offsets": [[5, 11]]})
    assert state.committed == 7 and "acknowledged" in pop.lease_problem(KEY, 5, 11, 0)
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": None, "cursor": 8,
               "leases": [[7, 2, 3000, 13]], "dropped": []})
    assert state.leases[7].attempt == 2 and "superseded" in pop.lease_problem(KEY, 7, 12, 0)
    pop.apply({"t": "ack", "k": KEY.to_json(), "offsets": [[7, 13]]})
    assert (state.committed, state.cursor, state.leases, state.acked) == (8, 8, {}, set())
    assert pop.room(KEY, 10) == 10


@pytest.mark.parametrize("raw", [b"", b"{}", b"[1]", b'[{"t": "pop"}]', b"\xff",
                                 b'[{"t":"ack","k":["g","t","b",0],"offsets":[[1]]}]',
                                 (b'[{"t":"snapshot","states":[{"k":["g","t","b",0],'
                                 b'"committed":5,"cursor":4,"leases":[],"acked":[]}]}]'),
                                 b"[" * 100_000])
def test_malformed_state_records_are_refused(raw: bytes) -> None:
    with pytest.raises(RecordError):
        decode_records(raw)


def test_receipt_handles_are_bound_to_group_and_topic_and_unforgeable() -> None:
    codec = ReceiptHandleCodec(b"k" * 32)
    handle = ReceiptHandle("broker-a", 3, 42, 123456789, 1_700_000_000_000)
    text = codec.encode("g", "t", handle)
    assert codec.decode("g", "t", text) == handle
    assert codec.decode("other-group", "t", text) is None
    assert codec.decode("g", "other-topic", text) is None
    assert ReceiptHandleCodec(b"x" * 32).decode("g", "t", text) is None
    body, _, mac = text.rpartition(".")
    assert codec.decode("g", "t", body[:-2] + "AA." + mac) is None
    for junk in ("", "rh1.", "rh1..", "x" * 10_000, "rh1.!!!.00", text + "0"):
        assert codec.decode("g", "t", junk) is None


def test_the_official_clients_signature_is_accepted_and_a_wrong_secret_is_not() -> None:
    class Config:
        class credentials:
            ak, sk = "alice", "s3cret"
        namespace = ""

    metadata = Signature.metadata(Config, "client-1")
    assert Authenticator(StaticSecrets({"alice": "s3cret"})).check(metadata) == "alice"
    with pytest.raises(AuthError, match="does not match"):
        Authenticator(StaticSecrets({"alice": "wrong"})).check(metadata)
    with pytest.raises(AuthError, match="does not match"):
        Authenticator(StaticSecrets({})).check(metadata)
    assert Authenticator(None).check([]) is None
    with pytest.raises(AuthError, match="no authorization"):
        Authenticator(StaticSecrets({})).check([])
    for bad in ("Basic abc", "MQv2-HMAC-SHA1 Credential=a", ("MQv2-HMAC-SHA1 Credential=, "
                "SignedHeaders=x-mq-date-time, Signature=00"), "MQv2-HMAC-SHA1 " + "x" * 2000):
        with pytest.raises(AuthError):
            parse_authorization(bad)


def _message(**system: object) -> definition_pb2.Message:
    message = definition_pb2.Message(body=b"payload")
    message.topic.name = "t"
    message.system_properties.message_id = "0102FC000000013A610B189A0B00000000"
    message.system_properties.message_type = definition_pb2.NORMAL
    for name, value in system.items():
        setattr(message.system_properties, name, value)
    return message


def test_messages_the_proxy_refuses_get_rocketmq_codes() -> None:
    def refused(message: definition_pb2.Message, body_max: int = 100) -> str:
        with pytest.raises(InvalidMessage) as info:
            to_produce_row(message, body_max)
        return info.value.code_name

    assert refused(_message(message_type=definition_pb2.DELAY)) == "UNSUPPORTED"
    assert refused(_message(message_type=definition_pb2.TRANSACTION)) == "UNSUPPORTED"
    assert refused(_message(message_type=definition_pb2.FIFO)) == "ILLEGAL_MESSAGE_GROUP"
    assert refused(_message(), body_max=3) == "MESSAGE_BODY_TOO_LARGE"
    assert refused(_message(message_id="a/b")) == "ILLEGAL_MESSAGE_ID"
    assert refused(_message(tag="a|b")) == "ILLEGAL_MESSAGE_TAG"
    reserved = _message()
    reserved.user_properties["UNIQ_KEY"] = "x"
    assert refused(reserved) == "ILLEGAL_MESSAGE_PROPERTY_KEY"


def test_a_message_round_trips_through_a_row() -> None:
    message = _message(tag="TagA", message_type=definition_pb2.FIFO, message_group="order-7")
    message.system_properties.keys.extend(["k1", "k2"])
    message.user_properties["color"] = "red"
    row = to_produce_row(message, 100)
    assert (row.key, row.tags, row.message_group) == ("k1 k2", "TagA", "order-7")
    stored = {"body": row.body, "key": row.key, "tags": row.tags, "queue_id": 1,
              "queue_offset": 9, "msg_id": "X",
              "properties": list(row.properties.items()) + [("__RH_IDEM", "m/0")]}
    back = to_pb_message(stored, "t", "", receipt_handle="h", delivery_attempt=2,
                         invisible_ms=5000, broker_name="broker-a")
    system = back.system_properties
    assert (back.body, system.tag, list(system.keys), system.message_group) == (
        b"payload", "TagA", ["k1", "k2"], "order-7")
    assert system.message_id == message.system_properties.message_id
    assert dict(back.user_properties) == {"color": "red"}
    assert (system.delivery_attempt, system.queue_offset, system.receipt_handle) == (2, 9, "h")


def test_codes_and_config() -> None:
    assert code_for_status("PUT_OK") == (20000, "OK")
    assert code_for_status("FLUSH_SLAVE_TIMEOUT")[1] == "SLAVE_PERSISTENCE_TIMEOUT"
    assert code_for_status("TOPIC_NOT_EXIST")[1] == "TOPIC_NOT_FOUND"
    assert code_for_status("SOMETHING_NEW")[1] == "INTERNAL_SERVER_ERROR"
    config = ProxyConfig.from_properties({"grpcListenPort": "9", "controllerAddr": "h:1"})
    assert config.endpoint == "127.0.0.1:9"
    with pytest.raises(ProxyConfigError, match="grpcListenPort"):
        ProxyConfig.from_properties({"grpcListenPort": "x", "controllerAddr": "h:1"})
    with pytest.raises(ProxyConfigError, match="grpcNoSuchKey"):
        ProxyConfig.from_properties({"grpcNoSuchKey": "1", "controllerAddr": "h:1"})
    with pytest.raises(ProxyConfigError, match="controllerAddr"):
        ProxyConfig.from_properties({})
