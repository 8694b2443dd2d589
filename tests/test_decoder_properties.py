"""Property tests: no decoder or frame parser raises anything but its typed error (issue 16).

Goal: every parser of bytes from a peer, a client or a file (record codec, record runs, HA
frames, Raft codec and core, controller API messages, Flight tickets and replies, config and
Spark options) survives arbitrary input: it returns, or raises the module's typed decode error.
Method: the targets of tests/fuzz/targets.py (the same ones atheris drives, coverage-guided,
with `build.py fuzz`) under hypothesis, with raw bytes and with inputs shaped like the format
(JSON objects with the right keys, valid records, frames with valid headers), bounded examples;
and every input atheris ever found a bug with (tests/fuzz/regressions/), replayed.
"""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.targets import TARGETS

REGRESSIONS = sorted((Path(__file__).parent / "fuzz" / "regressions").iterdir())

RAW_EXAMPLES = 100
SHAPED_EXAMPLES = 60  # recursive JSON is slow to generate: ~1 s per target at this count
RAW = settings(max_examples=RAW_EXAMPLES, deadline=None,
               suppress_health_check=[HealthCheck.too_slow])
SHAPED_SETTINGS = settings(max_examples=SHAPED_EXAMPLES, deadline=None,
                           suppress_health_check=[HealthCheck.too_slow])

_json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), st.text(max_size=20))
_json = st.recursive(_json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=6)

_KEYS = ["v", "type", "from_id", "to_id", "term", "pre_vote", "last_index", "last_term",
         "granted", "prev_index", "prev_term", "entries", "commit_index", "success",
         "match_index", "reject_index", "hint_index", "hint_term", "read_seq", "snapshot",
         "topic", "queue_id", "queue_offset", "max_messages", "max_bytes", "tag_filter",
         "max_wait_ms", "columns", "status", "code", "queues", "row_queue_ids", "broker_name",
         "cluster_name", "broker_id", "broker_address", "sync_state_set", "replica_sets",
         "command", "info", "next_broker_id", "brokers", "topics", "designated_broker_id"]
_shaped_json = st.dictionaries(st.sampled_from(_KEYS), _json, max_size=8).map(
    lambda body: json.dumps(body).encode())
_raft_json = st.fixed_dictionaries(
    {"v": st.just(1), "type": st.sampled_from(
        ["vote", "vote_resp", "append", "append_resp", "heartbeat", "heartbeat_resp",
         "snapshot"])},
    optional={key: _json for key in _KEYS[2:20]}).map(lambda body: json.dumps(body).encode())


def _frame(kind: int, body: bytes) -> bytes:
    prefix = struct.pack(">HBBI", 0x5248, 1, kind, len(body))
    return prefix + struct.pack(">I", zlib.crc32(body, zlib.crc32(prefix))) + body


_frames = st.lists(st.tuples(st.integers(1, 6), st.binary(max_size=120)), max_size=5).map(
    lambda parts: b"".join(_frame(kind, body) for kind, body in parts))
_config_text = st.lists(st.tuples(st.sampled_from([
    "brokerName", "brokerId", "listenPort", "haListenPort", "totalReplicas", "brokerRole",
    "controllerDLegerPeers", "controllerDLegerSelfId", "controllerAddr", "raftFrameBytesMax",
    "subscribe", "brokers", "startingOffsets", "maxOffsetsPerTrigger", "tierStorageOptions",
    "topic", "exactlyOnce", "mappedFileSizeCommitLog", "flushDiskType", "unknownKey"]),
    st.one_of(st.text(max_size=30), st.integers().map(str), _json.map(json.dumps))),
    max_size=8).map(lambda pairs: "\n".join(f"{k}={v}" for k, v in pairs).encode())

_form_text = st.lists(st.tuples(
    st.sampled_from(["access_key", "secret_key", "csrf", "rocketha_console_session", "Bearer",
                     "bearer", "", "%", "a b"]),
    st.text(max_size=40)), max_size=6).map(
        lambda pairs: "&".join(f"{k}={v}" for k, v in pairs).encode("utf-8", "surrogatepass"))

SHAPED = {
    "record_codec": st.binary(max_size=600).map(lambda data: b"\x01" + data),
    "record_runs": st.binary(max_size=600).map(lambda data: b"\x01" + data),
    "slave_indexer": st.binary(max_size=600).map(lambda data: b"\x01" + data),
    "ha_frames": _frames,
    "raft_codec": st.one_of(_raft_json, _shaped_json),
    "raft_core": st.binary(max_size=400),
    "controller_api": _shaped_json,
    "flight_tickets": _shaped_json,
    "config_parsing": _config_text,
    "console_sessions": st.one_of(_form_text, _form_text.map(lambda b: b.replace(b"&", b"; "))),
    "http_access": st.one_of(_form_text.map(lambda b: b"Bearer " + b),
                             st.text(max_size=80).map(lambda t: t.encode("utf-8",
                                                                         "surrogatepass"))),
    "tls_files": st.tuples(st.integers(0, 3), st.integers(0, 255), st.one_of(
        st.binary(max_size=300),
        st.sampled_from(["CERTIFICATE", "X509 CRL", "PRIVATE KEY", "EC PRIVATE KEY"]).flatmap(
            lambda kind: st.binary(max_size=200).map(
                lambda body: b"-----BEGIN %s-----\n%s\n-----END %s-----\n" % (
                    kind.encode(), body, kind.encode())))),
    ).map(lambda parts: bytes([parts[0], parts[1]]) + parts[2]),
}


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_raw_bytes(name: str) -> None:
    @RAW
    @given(st.binary(max_size=2000))
    def run(data: bytes) -> None:
        TARGETS[name](data)

    run()


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_shaped_input(name: str) -> None:
    @SHAPED_SETTINGS
    @given(SHAPED[name])
    def run(data: bytes) -> None:
        TARGETS[name](data)

    run()


@pytest.mark.parametrize("data", [b"[" * 100_000, b"{\"a\":" * 50_000, b"9" * 5000,
                                  b'{"v": 1, "type": "append", "term": 1e999}'],
                         ids=["deep-list", "deep-object", "long-number", "float-overflow"])
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_hostile_classics(name: str, data: bytes) -> None:
    TARGETS[name](data)


@pytest.mark.parametrize("path", REGRESSIONS, ids=[path.name for path in REGRESSIONS])
def test_fuzz_findings_stay_fixed(path: Path) -> None:
    """Inputs atheris found (tests/fuzz/regressions/<target>-<sha>), replayed."""
    TARGETS[path.name.rsplit("-", 1)[0]](path.read_bytes())


@SHAPED_SETTINGS
@given(st.lists(st.tuples(st.binary(max_size=300), st.sampled_from(["a", "orders", "x" * 127,
                                                                   "%RETRY%g-1"]),
                          st.dictionaries(st.text("ab", min_size=1, max_size=5),
                                          st.text(st.characters(blacklist_categories=("Cs",),
                                                                blacklist_characters="\x01\x02"),
                                                  max_size=10), max_size=3),
                          st.integers(0, 65535)), min_size=1, max_size=20))
def test_well_formed_records_pass_the_replica_checks(
        records: list[tuple[bytes, str, dict[str, str], int]]) -> None:
    """No false positive: what the encoder writes, the slave's checks accept (a refusal cuts
    the log, so a false positive would drop acknowledged bytes)."""
    from storage_engine.commit_log import _record_ref
    from storage_engine.record_format import encode_host, encode_properties, encode_record
    from storage_engine.record_runs import scan_run, walk_records

    host = encode_host("127.0.0.1", 1)
    data = b""
    for body, topic, properties, queue_id in records:
        data += encode_record(
            body=body, topic_meta=bytes([len(topic)]) + topic.encode(),
            properties=encode_properties(properties), queue_id=queue_id, queue_offset=7,
            log_position=len(data), store_timestamp_ms=1, store_host=host,
            born_timestamp_ms=1, born_host=host)
    positions, sizes, stop, blank = walk_records(data, 0, len(data))
    assert stop == len(data) and not blank and len(positions) == len(records)
    done = 0
    while done < len(positions):
        done += len(scan_run(data, positions[done:], sizes[done:], 0).log_positions)
    for position, size in zip(positions.tolist(), sizes.tolist(), strict=True):
        _record_ref(data, position, position, size)
