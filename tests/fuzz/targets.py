"""Fuzz targets: every decoder and frame parser that reads bytes from a peer, a client or a file.

Each target takes arbitrary bytes and feeds them to one parser (and, where the parser's output
drives a core, to that core). It catches only the parser's typed decode error; anything else
(IndexError, UnicodeDecodeError, RecursionError, OverflowError, struct.error, an assertion in a
core...) escapes and is a finding. The same functions run under hypothesis in the default suite
(tests/test_decoder_properties.py, bounded examples) and under atheris, coverage-guided
(`python3 build.py fuzz TARGET --seconds N`, tests/fuzz/run.py).

    target           what it parses                                   allowed error
    record_codec     a CommitLog record (decode_record, scan_record)  CorruptRecordError
    record_runs      a replica's record bytes: walk_few, walk_records, CorruptRecordError
                     scan_run, group_entries, the per-record path
    slave_indexer    a slave's MessageStore: append_replicated then   ReplicatedDataError,
                     dispatch_replicated (bad bytes cut, never below  QueueOffsetsError
                     the confirm position)
    ha_frames        HA link frames (decode_stream), then the slave   FrameError
                     and master cores' handling of each decoded frame
    raft_codec       a Raft message (decode_message)                  CodecError
    raft_core        messages built from the bytes, through the       CodecError (codec only);
                     codec, stepped into a 3-node RaftNode with a     the core may raise nothing
                     log, with ticks and Ready handling in between
    controller_api   controller requests, commands and snapshots      CodecError
    flight_tickets   GetTicket / PutReply / GetReply / JSON bodies    ProtocolError
    config_parsing   properties text -> Controller/Broker configs,    ConfigError, OptionError
                     and Spark option maps
    console_sessions the console's Cookie header, login and logout   FormError
                     forms, same-origin check and session lookups
    http_access      /metrics' Authorization header (bearer token)   (none)
    tls_files        a certificate, key, trust file or CRL rewritten  TLSConfigError (parsers);
                     under a running ReloadingTLS, and the proxy's    the reload itself raises
                     pair (load_pair), and check_crl                  nothing, keeps serving
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

from conf.https import bearer_token_matches
from conf.signing import Credentials
from conf.tls import TLSConfigError, TLSSettings
from conf.tls_reload import ReloadingTLS, check_crl, load_pair
from connector.errors import OptionError
from connector.protocol import GetReply, GetTicket, ProtocolError, PutReply, decode_json_object
from connector.spark.options import parse_sink_options, parse_source_options
from controller.api import ACTIONS
from controller.config import ControllerConfig
from controller.config import parse_properties as parse_controller_properties
from controller.console.sessions import (
    FormError,
    SessionTable,
    parse_cookies,
    parse_form,
    parse_login_form,
    same_origin,
    tokens_match,
)
from controller.errors import CodecError
from controller.errors import ConfigError as ControllerConfigError
from controller.raft import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    HardState,
    HeartbeatRequest,
    HeartbeatResponse,
    MemoryRaftStorage,
    RaftConfig,
    RaftNode,
    Snapshot,
    SnapshotRequest,
    VoteRequest,
    VoteResponse,
    decode_message,
    encode_message,
    save_ready,
)
from controller.state import ControllerState, decode_command
from ha.broker.config import BrokerConfig
from ha.broker.config import parse_properties as parse_broker_properties
from ha.cluster.certs import ensure_ca
from ha.replication.errors import FrameError
from ha.replication.frames import decode_stream
from ha.replication.master_core import MasterLog, MasterReplication, MasterSettings
from ha.replication.quorum import QuorumSettings
from ha.replication.slave_core import LocalLog, SlaveReplication
from storage_engine import ConfigError as StoreConfigError
from storage_engine import (
    CorruptRecordError,
    EpochEntry,
    MessageStore,
    QueueOffsetsError,
    ReplicatedDataError,
    StoreConfig,
    decode_record,
    scan_record,
)
from storage_engine.commit_log import _record_ref
from storage_engine.record_format import encode_host, encode_record
from storage_engine.record_runs import group_entries, scan_run, walk_few, walk_records

__all__ = ["TARGETS"]

FRAME_BODY_BYTES_MAX = 1 << 20
SEGMENT_BYTES = 1 << 20
RAFT_CORE_INPUT_BYTES_MAX = 4096  # about 400 messages and ticks: enough for one scenario
_HOST = encode_host("127.0.0.1", 1)


def _valid_records(count: int, topic: bytes = b"orders") -> bytes:
    out = b""
    for index in range(count):
        out += encode_record(
            body=bytes([65 + index % 26]) * (index % 7), topic_meta=bytes([len(topic)]) + topic,
            properties=b"TAGS\x01t\x02" if index % 2 else b"", queue_id=index % 3,
            queue_offset=index // 3, log_position=len(out), store_timestamp_ms=1,
            store_host=_HOST, born_timestamp_ms=1, born_host=_HOST)
    return out


_SEED_RECORDS = _valid_records(12)


def _mutated(data: bytes) -> bytes:
    """data[0] picks raw bytes (even) or valid records overwritten by the rest (odd), so the
    fuzzer reaches deep into the format without having to discover it byte by byte."""
    if not data or data[0] % 2 == 0:
        return data[1:]
    out = bytearray(_SEED_RECORDS)
    rest = data[1:]
    for at in range(0, len(rest) - 2, 3):  # (position, value) pairs over the seed
        out[(rest[at] << 8 | rest[at + 1]) % len(out)] = rest[at + 2]
    return bytes(out)


# -- storage ---------------------------------------------------------------------------------
def record_codec(data: bytes) -> None:
    data = _mutated(data)
    position = 0
    while position < len(data):
        size = scan_record(data, position, len(data))
        try:
            message = decode_record(data, position)
        except CorruptRecordError:
            assert size <= 0, (position, size)  # the two paths agree
            return
        assert size == message.size_bytes, (size, message.size_bytes)
        position += size


def record_runs(data: bytes) -> None:
    data = _mutated(data)
    try:
        walk_few(data, 0, len(data), 8)  # the single put's walk: same checks
        positions, sizes, _stop, _blank = walk_records(data, 0, len(data))
        done = 0
        while done < len(positions):
            run = scan_run(data, positions[done:], sizes[done:], 0)
            group_entries(run)
            assert len(run.log_positions) >= 1
            done += len(run.log_positions)
        for position, size in zip(positions.tolist(), sizes.tolist(), strict=True):
            _record_ref(data, position, position, size)  # the per-record (interleaved) path
    except CorruptRecordError:
        return


class _Slave:
    """One store in /dev/shm (or the temp dir) reused across inputs: a fresh one costs 30 ms."""

    store: MessageStore | None = None
    directory = ""


def _drop_slave_store(directory: str) -> None:
    """At exit: close the store first, or its flush thread checkpoints into a removed dir."""
    if _Slave.store is not None and _Slave.directory == directory:
        _Slave.store.close()
        _Slave.store = None
    shutil.rmtree(directory, ignore_errors=True)


def _slave_store() -> MessageStore:
    store = _Slave.store
    if store is None or store.log_position_end > SEGMENT_BYTES // 2:
        if store is not None:
            store.close()
            shutil.rmtree(_Slave.directory, ignore_errors=True)
        shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
        _Slave.directory = tempfile.mkdtemp(prefix="rocketha-fuzz-", dir=shm)
        atexit.register(_drop_slave_store, _Slave.directory)
        store = _Slave.store = MessageStore(_Slave.directory, StoreConfig(
            commit_log_segment_size_bytes=SEGMENT_BYTES, message_size_max_bytes=4096,
            consume_queue_segment_entries=1024), auto_confirm=False)
    return store


def slave_indexer(data: bytes) -> None:
    """A slave's store: the master's bytes appended at its end, then indexed. Bad bytes are a
    ReplicatedDataError and are cut (the confirm position, set from the input, is respected);
    a partial record at the end waits for the next input."""
    store = _slave_store()
    payload = _mutated(data)[:8192]
    if data[-1:] == b"\xff":  # sometimes confirm everything so far: a cut must stop there
        store.set_confirm_log_position(store.dispatched_log_position)
    confirm = store.confirm_log_position
    store.append_replicated(store.log_position_end, payload)
    try:
        store.dispatch_replicated()
    except ReplicatedDataError:
        pass
    except QueueOffsetsError:  # well-formed records, offsets that jump: nothing is cut
        store.close()
        shutil.rmtree(_Slave.directory, ignore_errors=True)
        _Slave.store = None
        return
    assert store.confirm_log_position == confirm
    assert confirm <= store.dispatched_log_position <= store.log_position_end


# -- HA --------------------------------------------------------------------------------------
def ha_frames(data: bytes) -> None:
    try:
        frames, _used = decode_stream(data, FRAME_BODY_BYTES_MAX)
    except FrameError:
        return
    _master_side(frames)
    core = SlaveReplication(broker_id=1, heartbeat_interval_ms=100,
                            housekeeping_interval_ms=1000, fsync_before_ack=False)
    local = LocalLog(0, 300, 100, (EpochEntry(1, 0), EpochEntry(2, 200)), SEGMENT_BYTES)
    core.link_up(local, now_ms=0)
    for now_ms, frame in enumerate(frames, start=1):
        core.on_frame(frame, now_ms=now_ms)
        core.on_tick(now_ms=now_ms)
        if core.state.value == "CLOSED":
            core.link_down()
            core.link_up(local, now_ms=now_ms)


def _master_side(frames: list[Any]) -> None:
    """The same frames as a (hostile) slave's, into the master core of one link."""
    quorum = QuorumSettings(total_replicas=3, in_sync_replicas=2, min_in_sync_replicas=1,
                            auto_in_sync_replicas=True, gap_not_in_sync_bytes_max=1 << 20,
                            all_ack_in_sync_state_set=False)
    master = MasterReplication(MasterSettings(quorum=quorum, segment_size_bytes=SEGMENT_BYTES),
                               broker_id=0, master_epoch=2, endpoint="127.0.0.1:1",
                               master_log_position=400, confirm_log_position=100, now_ms=0)
    log = MasterLog(0, 400, (EpochEntry(1, 0), EpochEntry(2, 200)))
    master.link_opened(1, now_ms=0)
    for now_ms, frame in enumerate(frames, start=1):
        master.on_frame(1, frame, log, now_ms=now_ms)
        master.next_send(1, log, now_ms=now_ms)
        master.on_tick(log, now_ms=now_ms)


# -- Raft ------------------------------------------------------------------------------------
def raft_codec(data: bytes) -> None:
    try:
        message = decode_message(data)
    except CodecError:
        return
    assert decode_message(encode_message(message)) == message


class _Bytes:
    """Reads small integers from fuzz bytes (0 when they run out)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._at = 0

    def byte(self) -> int:
        value = self._data[self._at] if self._at < len(self._data) else 0
        self._at += 1
        return value

    def number(self) -> int:
        """Mostly small; sometimes huge (a hostile peer's favourite)."""
        head = self.byte()
        if head < 200:
            return head % 12
        if head < 250:
            return int.from_bytes(bytes(self.byte() for _ in range(4)), "big")
        return 2**63 - 1 - self.byte()

    def more(self) -> bool:
        return self._at < len(self._data)


def _message(reader: _Bytes) -> Any:
    kind = reader.byte() % 7
    from_id, to_id, term = 2 + reader.byte() % 2, 1, reader.number()
    n = reader.number
    if kind == 0:
        return VoteRequest(from_id, to_id, term, reader.byte() % 2 == 1, n(), n())
    if kind == 1:
        return VoteResponse(from_id, to_id, term, reader.byte() % 2 == 1, reader.byte() % 2 == 1)
    if kind == 2:
        prev_index, prev_term = n(), n()
        count = reader.byte() % 4
        entries = tuple(Entry(prev_index + 1 + i if reader.byte() % 8 else n(), n(),
                              EntryKind(reader.byte() % 2), b"") for i in range(count))
        return AppendRequest(from_id, to_id, term, prev_index, prev_term, entries, n())
    if kind == 3:
        return AppendResponse(from_id, to_id, term, reader.byte() % 2 == 1, n(), n(), n(), n())
    if kind == 4:
        return HeartbeatRequest(from_id, to_id, term, n(), n())
    if kind == 5:
        return HeartbeatResponse(from_id, to_id, term, n())
    state = ControllerState().snapshot() if reader.byte() % 2 else b"junk"
    voters = (1, 2, 3) if reader.byte() % 4 else (1, 2)
    return SnapshotRequest(from_id, to_id, term, Snapshot(n(), n(), voters, state))


def _drain(node: RaftNode, storage: MemoryRaftStorage) -> None:
    for _ in range(64):  # a hostile input must not make the Ready loop spin
        if not node.has_ready():
            return
        ready = node.ready()
        save_ready(storage, ready)
        node.advance(ready)
    raise AssertionError("Ready loop still busy after 64 rounds")


def raft_core(data: bytes) -> None:
    """Messages built from the bytes go through the codec (as the transport does) and then
    into a node that holds a log; the core must neither raise nor spin."""
    reader = _Bytes(data[:RAFT_CORE_INPUT_BYTES_MAX])
    storage = MemoryRaftStorage()
    entries = [Entry(i, 1 + i // 3, EntryKind.NORMAL, b"") for i in range(1, 7)]
    storage.save(snapshot=None, entries=entries, hard_state=HardState(2, None, 3))
    state = storage.load()
    node = RaftNode(RaftConfig(node_id=1, voter_ids=(1, 2, 3)), random.Random(7),
                    hard_state=state.hard_state, entries=state.entries)
    while reader.more():
        if reader.byte() % 5 == 0:
            node.tick()
        else:
            try:
                message = decode_message(encode_message(_message(reader)))
            except CodecError:
                continue
            node.step(message)
        _drain(node, storage)


# -- controller API ----------------------------------------------------------------------------
_REQUESTS = [spec[0] for spec in ACTIONS.values() if spec[0] is not None]


def controller_api(data: bytes) -> None:
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):
        body = None
    for request_type in _REQUESTS:  # what controller.service does with a body
        with contextlib.suppress(CodecError):
            request_type.from_json(body)
    for parse in (decode_command, ControllerState.restore):
        with contextlib.suppress(CodecError):
            parse(data)


# -- client protocol -----------------------------------------------------------------------------
def flight_tickets(data: bytes) -> None:
    for parse in (GetTicket.decode, PutReply.decode, GetReply.decode,
                  lambda raw: decode_json_object(raw, "body")):
        with contextlib.suppress(ProtocolError):
            parse(data)


# -- configuration -----------------------------------------------------------------------------
def config_parsing(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    for parse, build, errors in (
            (lambda t: parse_controller_properties(t, "fuzz"), ControllerConfig.from_properties,
             (ControllerConfigError,)),
            (parse_broker_properties, BrokerConfig.from_properties, (StoreConfigError,))):
        with contextlib.suppress(errors):
            build(parse(text))
    options = dict(_pairs(text))
    for parse_options in (parse_source_options, parse_sink_options):
        with contextlib.suppress(OptionError):
            parse_options(options)


def _pairs(text: str) -> Iterator[tuple[str, str]]:
    for line in text.splitlines():
        key, _, value = line.partition("=")
        yield key, value


# -- console sessions and /metrics access ----------------------------------------------------
_SESSIONS = SessionTable(3600)
_LIVE_TOKEN, _ = _SESSIONS.create(Credentials("AK_viewer", "viewer-secret"))


def console_sessions(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    cookies = parse_cookies(text)
    for token in (*cookies.values(), text):
        _SESSIONS.lookup(token)
    with contextlib.suppress(FormError):
        parse_login_form(data)
    with contextlib.suppress(FormError):
        parse_form(data)
    host, _, origin = text.partition("\n")
    same_origin({"Host": host, "Origin": origin}, "https")
    same_origin({"Host": host, "Referer": origin}, "http")
    tokens_match(text, _LIVE_TOKEN)
    assert _SESSIONS.lookup(_LIVE_TOKEN) is not None  # no input ends another's session


def http_access(data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    assert not bearer_token_matches(text, "the-token-of-the-fuzz-target-0") \
        or text.strip().lower().startswith("bearer")
# -- TLS files reloaded while running --------------------------------------------------------
class _Files:
    """One CA, certificate, key and CRL in a temp dir, and a ReloadingTLS over them (made
    once: a CA and a key pair cost milliseconds), restored after every input."""

    reloading: ReloadingTLS | None = None
    originals: ClassVar[dict[str, bytes]] = {}


def _tls_files() -> ReloadingTLS:
    if _Files.reloading is None:
        directory = tempfile.mkdtemp(prefix="rocketha-fuzz-tls-")
        atexit.register(shutil.rmtree, directory, True)
        ca = ensure_ca(Path(directory))
        issued = ca.issue("member", "rocketha://controller/1", ["127.0.0.1"])
        settings = TLSSettings(server_mode="enforcing", server_cert_path=str(issued.cert_path),
                               server_key_path=str(issued.key_path),
                               server_trust_cert_path=str(ca.cert_path),
                               crl_path=str(ca.revoke([1])), reload_interval_ms=0)
        _Files.originals = {path: Path(path).read_bytes() for path in (
            settings.server_cert_path, settings.server_key_path,
            settings.server_trust_cert_path, settings.crl_path)}
        _Files.reloading = ReloadingTLS(settings, what="fuzz")
    return _Files.reloading


def tls_files(data: bytes) -> None:
    """data[0] picks the file (certificate, key, trust file, CRL); data[1] whether the rest
    replaces it or overwrites the valid file from an offset (a PEM with damage inside)."""
    reloading = _tls_files()
    if len(data) < 2:
        return
    served = reloading.serial
    paths = list(_Files.originals)
    path = paths[data[0] % len(paths)]
    original = _Files.originals[path]
    offset = data[1] % (len(original) + 1)
    damaged = data[2:] if data[1] & 1 else original[:offset] + data[2:] + \
        original[offset + len(data) - 2:]
    Path(path).write_bytes(damaged)
    try:
        serial = reloading.serial
        if not reloading.reload():
            assert reloading.serial == serial  # kept what it served
        settings = reloading.settings
        with contextlib.suppress(TLSConfigError):
            check_crl(settings.crl_path, settings.server_trust_cert_path)
        with contextlib.suppress(TLSConfigError):
            load_pair(settings.server_cert_path, settings.server_key_path)
    finally:
        Path(path).write_bytes(original)
    reloading.reload()  # the files as they were: what it serves is the certificate it had
    assert reloading.serial == served


TARGETS: dict[str, Callable[[bytes], None]] = {
    "record_codec": record_codec,
    "record_runs": record_runs,
    "slave_indexer": slave_indexer,
    "ha_frames": ha_frames,
    "raft_codec": raft_codec,
    "raft_core": raft_core,
    "controller_api": controller_api,
    "flight_tickets": flight_tickets,
    "config_parsing": config_parsing,
    "console_sessions": console_sessions,
    "http_access": http_access,
    "tls_files": tls_files,
}
