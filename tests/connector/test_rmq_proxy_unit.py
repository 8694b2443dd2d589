"""The RocketMQ gRPC endpoint's pure parts: POP state, receipt handles, signatures, messages.

Goal: the POP state a replay rebuilds equals the live one (whatever the record order a proxy
wrote), stale and forged receipt handles are recognised, the clients' exact `authorization`
header is accepted and a wrong secret is not, and messages the proxy must refuse are refused
with the RocketMQ code the clients expect. Method: plain values, a seeded random walk for the
replay property (no processes).
"""

from __future__ import annotations

import logging
import random

import pytest
from rocketmq.grpc_protocol import definition_pb2
from rocketmq.v5.util.signature import Signature

from conf.signing import Credentials
from connector.protocol import RetriableError, status_for
from connector.rmq_proxy.auth import (
    Authenticator,
    AuthError,
    AuthUnavailable,
    StaticSecrets,
    parse_authorization,
    parse_utc_offsets,
    sign,
)
from connector.rmq_proxy.codes import code_for_status
from connector.rmq_proxy.config import ProxyConfig, ProxyConfigError
from connector.rmq_proxy.messages import InvalidMessage, to_pb_message, to_produce_row
from connector.rmq_proxy.pop_core import (
    Lease,
    PopState,
    QueueKey,
    RecordError,
    decode_records,
    encode_records,
)
from connector.rmq_proxy.receipt import ReceiptHandle, ReceiptHandleCodec
from connector.rmq_proxy.users import AuthDataError, ControllerUsers, parse_users

KEY = QueueKey("g", "t", "broker-a", 0)


def _decide(view: PopState, rng: random.Random, now_ms: int, end: int, at: int) -> dict:
    """One record a proxy whose view is `view` could write (pop.service's shapes)."""
    state = view.get(KEY)
    choice = rng.random()
    if choice < 0.45 or not (state and state.leases):
        cursor = state.cursor if state else 0
        redeliver = [[o, lease.attempt + 1, now_ms + 500, rng.getrandbits(40), lease.nonce]
                     for o, lease in view.due(KEY, now_ms, 3)]
        new = list(range(cursor, min(end, cursor + rng.randrange(0, 4))))
        skipped = rng.random() < 0.2
        leases = [] if skipped else [[o, 1, now_ms + 500, rng.getrandbits(40)] for o in new]
        dropped = []
        if redeliver and rng.random() < 0.1:  # e.g. dead-lettered
            o, _, _, _, previous = redeliver.pop()
            dropped.append([o, previous])
        return {"t": "pop", "k": KEY.to_json(), "start": None if state else 0,
                "cursor": max(cursor, new[-1] + 1) if new else cursor, "leases": leases,
                "redeliver": redeliver, "dropped": dropped,
                "groups": [[lease[0], f"g{lease[0] % 3}"] for lease in leases]}
    if choice < 0.8:
        offset = rng.choice(sorted(state.leases))
        nonce = state.leases[offset].nonce if rng.random() < 0.9 else 7
        return {"t": "ack", "k": KEY.to_json(), "offsets": [[offset, nonce]]}
    if choice < 0.9:
        offset = rng.choice(sorted(state.leases))
        return {"t": "change", "k": KEY.to_json(), "offset": offset,
                "nonce": state.leases[offset].nonce, "new_nonce": rng.getrandbits(40),
                "until": now_ms + 1000}
    return view.snapshot("broker-a", at)


def _random_walk(seed: int, writers: int = 1, steps: int = 200) -> list[dict]:
    """A shared log written by `writers` proxies, each deciding on its own view, which lags
    the log by a random amount (state_store.py's several proxies). Checks, record by record,
    that a lease a writer wins replaced no lease still in its invisible time (no double
    delivery) and the QueueState invariant (apply asserts it: nothing lost)."""
    rng = random.Random(seed)
    log: list[dict] = []
    truth = PopState()  # the log applied in order: what every proxy converges to
    views = [(PopState(), [0]) for _ in range(writers)]  # (view, next log index applied)
    now_ms, end = 1_000, 0
    for _ in range(steps):
        now_ms += rng.randrange(0, 300)
        end += rng.randrange(0, 3)
        view, applied = views[rng.randrange(writers)]
        target = rng.randrange(applied[0], len(log) + 1) if writers > 1 else len(log)
        for record in log[applied[0]:target]:
            if record["t"] != "snapshot":
                view.apply(record)
        applied[0] = target
        record = _decide(view, rng, now_ms, end, at=target)  # valid if it lands there
        decode_records(encode_records([record]))  # every record the proxy writes decodes
        before = truth.get(KEY)
        leases_before = dict(before.leases) if before else {}
        cursor_before = before.cursor if before else 0
        truth.apply(record)
        after = truth.get(KEY)
        for o, lease in (after.leases.items() if after else ()):
            old = leases_before.get(o)
            if old is not None and old.nonce != lease.nonce and record["t"] == "pop":
                assert old.invisible_until_ms <= now_ms, (seed, o, old, lease)
            if old is None and record["t"] == "pop":
                assert o >= cursor_before, (seed, o)  # a new lease: never delivered before
        log.append(record)
        for item in log[applied[0]:]:  # the writer applies up to its own record
            if item["t"] != "snapshot":
                view.apply(item)
        applied[0] = len(log)
    return log


@pytest.mark.parametrize(("seed", "writers"), [(seed, 1 + seed % 3) for seed in range(15)])
def test_replay_from_any_valid_snapshot_rebuilds_the_state(seed: int, writers: int) -> None:
    records = _random_walk(seed, writers)
    live = PopState()
    for record in records:
        if record["t"] != "snapshot":
            live.apply(record)
    expected = live.snapshot("broker-a", 0)
    # a snapshot is a replay start only where it was meant to land (state_store.py)
    starts = [0] + [i for i, r in enumerate(records) if r["t"] == "snapshot" and r["at"] == i]
    assert writers > 1 or len(starts) > 1
    for start in starts:
        replayed = PopState()
        for index, record in enumerate(records[start:], start):
            if record["t"] != "snapshot" or index == start:
                replayed.apply(record)
        assert replayed.snapshot("broker-a", 0) == expected, f"seed {seed}, from {start}"
    # records are idempotent: a record stored twice (a put retried after a lost reply)
    doubled = PopState()
    for record in records:
        if record["t"] != "snapshot":
            doubled.apply(record)
            doubled.apply(record)
    assert doubled.snapshot("broker-a", 0) == expected


def test_a_record_decided_on_a_stale_view_loses_to_the_earlier_one() -> None:
    """Two proxies lease the same new messages, redeliver the same expired lease, and ack a
    superseded handle: in log order the first wins, the second changes nothing."""
    pop = PopState()
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": 0, "cursor": 2,
               "leases": [[0, 1, 1000, 11], [1, 1, 1000, 12]]})
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": 0, "cursor": 3,  # B: saw nothing
               "leases": [[0, 1, 1000, 21], [1, 1, 1000, 22], [2, 1, 1000, 23]]})
    state = pop.get(KEY)
    assert {o: lease.nonce for o, lease in state.leases.items()} == {0: 11, 1: 12, 2: 23}
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": None, "cursor": 3,
               "redeliver": [[0, 2, 3000, 31, 11]], "leases": []})  # A redelivers 0
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": None, "cursor": 3,
               "redeliver": [[0, 2, 3000, 41, 11]], "leases": []})  # B too, later
    assert state.leases[0] == Lease(2, 3000, 31)
    pop.apply({"t": "ack", "k": KEY.to_json(), "offsets": [[0, 11]]})  # the old handle
    assert 0 in state.leases
    pop.apply({"t": "change", "k": KEY.to_json(), "offset": 0, "nonce": 41,
               "new_nonce": 42, "until": 9000})
    assert state.leases[0].nonce == 31
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": None, "cursor": 3,
               "dropped": [[1, 99]], "leases": []})  # a drop of a lease it did not see
    assert 1 in state.leases


def test_fifo_groups_follow_their_leases() -> None:
    pop = PopState()
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": 0, "cursor": 3,
               "leases": [[0, 1, 1000, 1], [1, 1, 1000, 2], [2, 1, 1000, 3]],
               "groups": [[0, "order-1"], [2, "order-2"]]})
    assert pop.groups_in_flight(KEY) == {"order-1", "order-2"}
    pop.apply({"t": "ack", "k": KEY.to_json(), "offsets": [[0, 1]]})
    assert pop.groups_in_flight(KEY) == {"order-2"}
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": None, "cursor": 3,
               "dropped": [[2, 3]], "leases": []})
    assert pop.groups_in_flight(KEY) == set()
    snapshot = pop.snapshot("broker-a", 0)
    again = PopState()
    again.apply(snapshot)
    assert again.snapshot("broker-a", 0) == snapshot
    with pytest.raises(RecordError):
        decode_records(encode_records([{**snapshot["states"][0], "t": "pop",
                                        "cursor": 3, "leases": [], "start": None,
                                        "groups": [[0, ""]]}]))


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
    pop.apply({"t": "pop", "k": KEY.to_json(), "start": None, "cursor": 8, "leases": [],
               "redeliver": [[7, 2, 3000, 13, 12]], "dropped": []})
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


class _Keys:
    """What Signature.metadata reads of the official client's configuration."""

    def __init__(self, ak: str, sk: str) -> None:
        self.credentials = type("credentials", (), {"ak": ak, "sk": sk})
        self.namespace = ""


def _at(date_time: str) -> list[tuple[str, str]]:
    """The client's headers with its x-mq-date-time set to `date_time` (re-signed)."""
    metadata = dict(Signature.metadata(_Keys("alice", "s3cret"), "client-1"))
    metadata["x-mq-date-time"] = date_time
    metadata["authorization"] = (f"MQv2-HMAC-SHA1 Credential=alice, SignedHeaders="
                                 f"x-mq-date-time, Signature={sign('s3cret', date_time)}")
    return list(metadata.items())


def test_the_official_clients_signature_is_accepted_and_a_wrong_secret_is_not() -> None:
    metadata = Signature.metadata(_Keys("alice", "s3cret"), "client-1")
    offsets = parse_utc_offsets("")  # the client formats this host's local time
    caller = Authenticator(StaticSecrets({"alice": "s3cret"}),
                           utc_offsets_minutes=offsets).check(metadata)
    assert caller == Credentials("alice", "s3cret")  # the keys its Flight calls are signed with
    with pytest.raises(AuthError, match="does not match"):
        Authenticator(StaticSecrets({"alice": "wrong"}), utc_offsets_minutes=offsets
                      ).check(metadata)
    with pytest.raises(AuthError, match="does not match"):
        Authenticator(StaticSecrets({}), utc_offsets_minutes=offsets).check(metadata)
    assert Authenticator(None).check([]) is None
    with pytest.raises(AuthError, match="no authorization"):
        Authenticator(StaticSecrets({})).check([])
    for bad in ("Basic abc", "MQv2-HMAC-SHA1 Credential=a", ("MQv2-HMAC-SHA1 Credential=, "
                "SignedHeaders=x-mq-date-time, Signature=00"), "MQv2-HMAC-SHA1 " + "x" * 2000):
        with pytest.raises(AuthError):
            parse_authorization(bad)


def test_a_signed_date_outside_the_skew_window_is_refused_in_every_accepted_offset() -> None:
    now_ms = 1_795_000_000_000  # 2026-11-18T11:06:40Z
    secrets = StaticSecrets({"alice": "s3cret"})

    def check(date_time: str, offsets: tuple[int, ...] = (0,)) -> Credentials | None:
        return Authenticator(secrets, clock_skew_ms=60_000, utc_offsets_minutes=offsets,
                             now_ms=lambda: now_ms).check(_at(date_time))

    assert check("20261118T110640Z") is not None
    assert check("20261118T110740Z") is not None  # 60 s ahead: inside
    with pytest.raises(AuthError, match="more than 60000 ms"):
        check("20261118T110741Z")
    with pytest.raises(AuthError, match="more than 60000 ms"):
        check("20261118T110539Z")  # 61 s behind: a replay after the window
    # a client in UTC+08:00 formats its local time: refused unless that offset is accepted
    with pytest.raises(AuthError, match="more than"):
        check("20261118T190640Z")
    assert check("20261118T190640Z", parse_utc_offsets("+08:00")) is not None
    assert check("20261118T053640Z", parse_utc_offsets("-05:30")) is not None
    assert check("20261118T190640Z", parse_utc_offsets("any")) is not None
    with pytest.raises(AuthError, match="is not"):
        check("2026-11-18 11:06:40")
    for bad in ("8:00", "+15:00", "+08:60", "utc"):
        with pytest.raises(ValueError):
            parse_utc_offsets(bad)


def test_users_come_from_the_controller_and_are_fetched_again_when_old_or_missed(
        caplog: pytest.LogCaptureFixture) -> None:
    """ControllerUsers over a scripted get_auth_data: enabled users only, a miss fetches at
    once (at most every second), an old table is fetched again, a failing controller keeps
    the last table, and no secret reaches a log line."""
    clock = [0.0]
    replies: list[object] = [{"status": "OK", "auth": {"version": 3, "users": [
        {"name": "alice", "access_key": "AK_a", "secret_key": "alice-secret-1"},
        {"name": "bob", "access_key": "AK_b", "secret_key": "bob-secret-12",
         "status": "disabled"}], "policies": []}}]

    def fetch() -> object:
        reply = replies[0]
        if isinstance(reply, Exception):
            raise reply
        return reply

    caplog.set_level(logging.DEBUG)
    users = ControllerUsers(fetch, refresh_interval_ms=5000, clock_s=lambda: clock[0])
    with pytest.raises(AuthUnavailable):
        ControllerUsers(lambda: {"status": "NO_PERMISSION"}, 5000).secret_key("AK_a")
    assert users.secret_key("AK_a") == "alice-secret-1" and users.fetches == 1
    assert users.secret_key("AK_b") is None  # disabled
    assert users.fetches == 1  # a miss within a second of the last fetch: no new fetch
    replies[0] = {"status": "OK", "auth": {"version": 4, "users": [
        {"name": "alice", "access_key": "AK_a", "secret_key": "alice-secret-1"},
        {"name": "carol", "access_key": "AK_c", "secret_key": "carol-secret-1"}]}}
    clock[0] = 1.5
    assert users.secret_key("AK_c") == "carol-secret-1" and users.fetches == 2  # the miss
    replies[0] = RetriableError(status_for("SERVICE_NOT_AVAILABLE"), "no controller answered")
    clock[0] = 7.0
    assert users.secret_key("AK_a") == "alice-secret-1"  # old table kept, fetch failed
    assert users.fetches == 3 and users.version == 4
    replies[0] = {"status": "OK", "auth": {"version": 5, "users": []}}
    clock[0] = 13.0
    assert users.secret_key("AK_a") is None and users.version == 5  # deleted
    for bad in ({"status": "OK"}, {"status": "OK", "auth": {"users": [1]}},
                {"status": "OK", "auth": {"users": [{"access_key": "x"}]}}):
        with pytest.raises(AuthDataError):
            parse_users(bad)
    text = caplog.text
    assert "version 5" in text and not any(secret in text for secret in (
        "alice-secret-1", "bob-secret-12", "carol-secret-1"))


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
              "properties": [*row.properties.items(), ("__RH_IDEM", "m/0")]}
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
    with pytest.raises(ProxyConfigError, match="grpcCredentialsFile: gone"):
        ProxyConfig.from_properties({"grpcCredentialsFile": "f", "controllerAddr": "h:1"})
    with pytest.raises(ProxyConfigError, match="grpcAuthenticationEnabled"):
        ProxyConfig.from_properties({"grpcAuthenticationEnabled": "yes",
                                     "controllerAddr": "h:1"})
    with pytest.raises(ProxyConfigError, match="grpcAuthClientUtcOffsets"):
        ProxyConfig.from_properties({"grpcAuthClientUtcOffsets": "+99:00",
                                     "controllerAddr": "h:1"})
    assert code_for_status("NO_PERMISSION")[1] == "FORBIDDEN"
    assert code_for_status("UNAUTHENTICATED")[1] == "UNAUTHORIZED"
