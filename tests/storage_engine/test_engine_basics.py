"""Storage engine essentials, end to end on real files (fast, deterministic).

Goal: the record codec detects every damaged byte; recovery after damage or a crash keeps exactly
the valid prefix; truncation is crash-safe and never goes below the confirm position; bad input
is rejected with nothing written; the fork-point rule matches the seeds' example. Method: small
segment sizes in tmp_path, explicit damage with plain file writes, hypothesis for the codec.
"""

from __future__ import annotations

import contextlib
import os
import random
from pathlib import Path
from typing import BinaryIO

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage_engine import (
    ConfigError,
    CorruptRecordError,
    EpochEntry,
    EpochFile,
    FlushDiskType,
    GetStatus,
    Message,
    MessageBatch,
    MessageStore,
    PutStatus,
    StoreConfig,
    StoreLockedError,
    TruncateBelowConfirmError,
    decode_record,
    find_consistent_point,
    java_string_hash,
    scan_record,
)
from storage_engine.checkpoint import Checkpoint, write_checkpoint
from storage_engine.record_format import encode_host, encode_properties, encode_record

SMALL = StoreConfig(commit_log_segment_size_bytes=256 * 1024, message_size_max_bytes=16 * 1024,
                    consume_queue_segment_entries=64)


def record(body: bytes = b"hello", topic: str = "T", props: dict[str, str] | None = None,
           queue_offset: int = 7, log_position: int = 0) -> bytes:
    return encode_record(
        body=body, topic_meta=bytes([len(topic)]) + topic.encode(),
        properties=encode_properties(props or {}), queue_id=3, queue_offset=queue_offset,
        log_position=log_position, store_timestamp_ms=1700000000123,
        store_host=encode_host("127.0.0.1", 10911), born_timestamp_ms=1700000000000,
        born_host=encode_host("10.0.0.1", 5555))


def test_header_layout_matches_rocketmq_v1() -> None:
    raw = record(body=b"abc", topic="TopicX", props={"TAGS": "TagA"}, queue_offset=42,
                 log_position=4096)
    assert int.from_bytes(raw[0:4], "big") == len(raw)
    assert raw[4:8] == bytes.fromhex("DAA320A7")
    assert int.from_bytes(raw[20:28], "big") == 42
    assert int.from_bytes(raw[28:36], "big") == 4096
    assert int.from_bytes(raw[56:64], "big") == 1700000000123
    assert int.from_bytes(raw[84:88], "big") == 3 and raw[88:91] == b"abc"
    props_size = len(encode_properties({"TAGS": "TagA"})) + 20
    assert len(raw) == 91 + 3 + len("TopicX") + props_size
    message = decode_record(raw)
    assert (message.topic, message.queue_offset, message.tags) == ("TopicX", 42, "TagA")


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("ä€") == 228 * 31 + 8364


@settings(max_examples=150, deadline=None)
@given(body=st.binary(max_size=300),
       topic=st.from_regex(r"\A[%|a-zA-Z0-9_-]{1,127}\Z"),
       props=st.dictionaries(st.text("abcXYZ_", min_size=1, max_size=8),
                             st.text(max_size=20).filter(lambda v: "\x01" not in v
                                                         and "\x02" not in v), max_size=4))
def test_codec_round_trip(body: bytes, topic: str, props: dict[str, str]) -> None:
    raw = record(body=body, topic=topic, props=props)
    assert scan_record(raw, 0, len(raw)) == len(raw)
    message = decode_record(raw)
    assert (message.body, message.topic, message.properties) == (body, topic, props)


def test_every_single_bit_flip_is_detected() -> None:
    raw = record(body=b"payload" * 3, props={"KEYS": "k1", "TAGS": "t"})
    for bit in range(len(raw) * 8):
        damaged = bytearray(raw)
        damaged[bit // 8] ^= 1 << (bit % 8)
        assert scan_record(bytes(damaged), 0, len(damaged)) != len(raw), f"bit {bit} missed"
        with pytest.raises(CorruptRecordError):
            decode_record(bytes(damaged))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_crash_the_decoder(data: bytes) -> None:
    assert scan_record(data, 0, len(data)) in (-1, 0) or scan_record(data, 0, len(data)) > 0
    with contextlib.suppress(CorruptRecordError):
        decode_record(data)


def fill(store: MessageStore, count: int, *, queues: int = 3, topic: str = "T") -> list[tuple]:
    """Put `count` messages in batches of 1..20; returns (queue_id, queue_offset, body)."""
    rng = random.Random(count)
    written = []
    sequence = 0
    while sequence < count:
        size = min(rng.randint(1, 20), count - sequence)
        queue_id = rng.randrange(queues)
        bodies = [f"m{sequence + i}-".encode() * rng.randint(1, 40) for i in range(size)]
        result = store.put_messages(MessageBatch(topic=topic, bodies=bodies,
                                                 queue_ids=[queue_id] * size))
        assert result.status is PutStatus.PUT_OK
        written += [(queue_id, offset, body) for offset, body in zip(result.queue_offsets,
                                                                     bodies, strict=True)]
        sequence += size
    return written


def read_all(store: MessageStore, topic: str = "T") -> list[tuple]:
    found = []
    for queue_topic, queue_id in store.queues():
        if queue_topic != topic:
            continue
        offset = store.min_queue_offset(topic, queue_id)
        while True:
            result = store.get_messages(topic, queue_id, offset, max_count=500, max_bytes=1 << 22)
            if result.status is not GetStatus.FOUND:
                break
            found += [(m.queue_id, m.queue_offset, m.body) for m in result.messages()]
            offset = result.next_queue_offset
    return sorted(found)


def test_messages_survive_reopen_and_segments_roll(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        written = fill(store, 3000)
        assert store.stats().commit_log_segments >= 3
    with MessageStore(tmp_path, SMALL) as store:
        assert read_all(store) == sorted(written)
        assert not store.stats().recovered_after_crash
        next_result = store.put_message(Message(topic="T", body=b"next", queue_id=0))
        assert next_result.queue_offsets[0] == sum(1 for w in written if w[0] == 0)


def last_segment(store_dir: Path) -> Path:
    return max((store_dir / "commitlog").iterdir())


def flip_byte(handle: BinaryIO, at: int) -> None:
    handle.seek(at)
    byte = handle.read(1)
    handle.seek(at)
    handle.write(bytes([byte[0] ^ 0x10]))


@pytest.mark.parametrize("damage", ["flip", "zero_tail", "short_file", "garbage"])
def test_recovery_cuts_at_the_first_bad_record(tmp_path: Path, damage: str) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        written = fill(store, 800)
        positions = {}
        for queue_id, offset, _ in written:
            result = store.get_messages("T", queue_id, offset, max_count=1, max_bytes=1 << 20)
            positions[(queue_id, offset)] = result.messages()[0].log_position
        end = store.log_position_end
    by_position = sorted(positions.items(), key=lambda item: item[1])
    victim_key, victim_position = by_position[-5]  # damage the fifth-last record
    segment = last_segment(tmp_path)
    base = int(segment.name)
    relative = victim_position - base
    with open(segment, "r+b") as handle:
        if damage == "flip":
            flip_byte(handle, relative + 30)
        elif damage == "zero_tail":
            handle.seek(relative + 10)
            handle.write(bytes(end - victim_position - 10))
        elif damage == "short_file":
            handle.truncate(relative + 17)
        else:
            handle.seek(end - base)
            handle.write(os.urandom(3000))
    (tmp_path / "abort").touch()  # as after a crash whose last checkpoint came before the
    checkpoint = by_position[-10][1]  # damage: past it, nothing was known durable
    write_checkpoint(tmp_path / "checkpoint", Checkpoint(checkpoint, checkpoint, checkpoint))
    with MessageStore(tmp_path, SMALL) as store:
        survivors = read_all(store)
        if damage == "garbage":
            assert survivors == sorted(written)
            assert store.log_position_end == end
        else:
            expected = sorted(w for w in written if positions[(w[0], w[1])] < victim_position)
            assert survivors == expected
            assert store.log_position_end == victim_position
            assert store.stats().last_recovery.cut_bytes > 0
        queue_id = victim_key[0]
        result = store.put_message(Message(topic="T", body=b"after", queue_id=queue_id))
        expected_offset = store.max_queue_offset("T", queue_id) - 1
        assert result.queue_offsets[0] == expected_offset
        assert sum(1 for s in survivors if s[0] == queue_id) == expected_offset


def test_truncation_is_crash_safe_and_fenced_by_confirm(tmp_path: Path, monkeypatch) -> None:
    store = MessageStore(tmp_path, SMALL, auto_confirm=False)
    written = fill(store, 1500)
    cut = store.log_position_end // 2
    # Find a record boundary at or after `cut`.
    store.set_confirm_log_position(store.log_position_end)
    result = store.get_messages("T", 0, 0, max_count=2000, max_bytes=1 << 24)
    boundary = min(m.log_position for m in result.messages() if m.log_position >= cut)
    store.set_confirm_log_position(boundary + 1)
    with pytest.raises(TruncateBelowConfirmError):
        store.truncate_to(boundary)
    store.set_confirm_log_position(0)

    def crash_midway(position: int) -> None:
        raise OSError("power cut during truncation")

    monkeypatch.setattr(store._commit_log._segments, "truncate_to", crash_midway)
    with pytest.raises(OSError):
        store.truncate_to(boundary)
    store._flush.stop()
    store._release(clean=False)
    monkeypatch.undo()
    with MessageStore(tmp_path, SMALL, auto_confirm=False) as reopened:
        assert reopened.log_position_end == boundary
        survivors = read_all_unconfirmed(reopened)
        assert all(position < boundary for position in survivors)
        assert len(survivors) < len(written)


def read_all_unconfirmed(store: MessageStore) -> list[int]:
    store.set_confirm_log_position(store.log_position_end)
    positions = []
    for topic, queue_id in store.queues():
        result = store.get_messages(topic, queue_id, 0, max_count=4000, max_bytes=1 << 24)
        positions += [m.log_position for m in result.messages()]
    return positions


def test_bad_input_is_rejected_and_nothing_written(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        store.put_message(Message(topic="ok", body=b"x"))
        end = store.log_position_end
        cases = [
            (MessageBatch(topic="", bodies=[b"x"], queue_ids=[0]), PutStatus.MESSAGE_ILLEGAL),
            (MessageBatch(topic="a b", bodies=[b"x"], queue_ids=[0]), PutStatus.MESSAGE_ILLEGAL),
            (MessageBatch(topic="t" * 128, bodies=[b"x"], queue_ids=[0]),
             PutStatus.MESSAGE_ILLEGAL),
            (MessageBatch(topic="t", bodies=[b"x"], queue_ids=[-1]), PutStatus.MESSAGE_ILLEGAL),
            (MessageBatch(topic="t", bodies=[b"x"], queue_ids=[65536]),
             PutStatus.MESSAGE_ILLEGAL),
            (MessageBatch(topic="t", bodies=[b"x", b"y" * (16 * 1024 + 1)], queue_ids=[0, 0]),
             PutStatus.MESSAGE_ILLEGAL),
            (MessageBatch(topic="t", bodies=["text"], queue_ids=[0]),  # type: ignore[list-item]
             PutStatus.MESSAGE_ILLEGAL),
            (MessageBatch(topic="t", bodies=[], queue_ids=[]), PutStatus.MESSAGE_ILLEGAL),
            (MessageBatch(topic="t", bodies=[b"x"], queue_ids=[0, 1]), PutStatus.MESSAGE_ILLEGAL),
            (MessageBatch(topic="t", bodies=[b"x"], queue_ids=[0],
                          properties=[{"big": "v" * 33000}]), PutStatus.PROPERTIES_SIZE_EXCEEDED),
            (MessageBatch(topic="t", bodies=[b"x"], queue_ids=[0],
                          properties=[{"k": "a\x01b"}]), PutStatus.PROPERTIES_SIZE_EXCEEDED),
        ]
        for batch, status in cases:
            result = store.put_messages(batch)
            assert result.status is status, batch
            assert result.error
            assert store.log_position_end == end
    with pytest.raises(ConfigError, match="commit_log_segment_size_bytes"):
        StoreConfig(commit_log_segment_size_bytes=10)
    with pytest.raises(ConfigError, match="flushDiskType"):
        StoreConfig.from_properties({"flushDiskType": "SOMETIMES"})
    parsed = StoreConfig.from_properties({"mappedFileSizeCommitLog": str(1 << 30),
                                          "flushDiskType": "SYNC_FLUSH",
                                          "diskMaxUsedSpaceRatio": "80"})
    assert parsed.flush_disk_type is FlushDiskType.SYNC_FLUSH
    assert parsed.disk_max_used_space_ratio == pytest.approx(0.8)


def test_second_opener_is_refused(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL), pytest.raises(StoreLockedError):
        MessageStore(tmp_path, SMALL)


def test_reads_stop_at_the_confirm_position(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL, auto_confirm=False) as store:
        result = store.put_messages(MessageBatch(topic="T", bodies=[b"a", b"b", b"c"],
                                                 queue_ids=[0, 0, 0]))
        assert store.max_queue_offset("T", 0) == 0
        store.set_confirm_log_position(result.log_positions[2])  # a and b confirmed
        got = store.get_messages("T", 0, 0, max_count=10, max_bytes=1 << 20)
        assert [m.body for m in got.messages()] == [b"a", b"b"]
        assert store.max_queue_offset("T", 0) == 2
        assert store.get_messages("T", 0, 2, max_count=1, max_bytes=1).status is \
            GetStatus.OFFSET_OVERFLOW_ONE


def test_read_statuses(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        store.put_messages(MessageBatch(topic="T", bodies=[b"a", b"b"], queue_ids=[0, 0],
                                        tags=["TagA", "TagB"]))
        assert store.get_messages("T", 9, 0, max_count=1, max_bytes=99).status is \
            GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.get_messages("T", 0, 5, max_count=1, max_bytes=99).status is \
            GetStatus.OFFSET_OVERFLOW_BADLY
        from storage_engine import TagFilter
        tagged = store.get_messages("T", 0, 0, max_count=9, max_bytes=1 << 20,
                                    tag_filter=TagFilter.parse("TagB"))
        assert [m.body for m in tagged.messages()] == [b"b"]


def test_sync_flush_group_commit_and_timeout(tmp_path: Path) -> None:
    import threading
    config = StoreConfig(commit_log_segment_size_bytes=1 << 20, message_size_max_bytes=1024,
                         flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=200)
    with MessageStore(tmp_path, config) as store:
        statuses = []

        def worker() -> None:
            for _ in range(50):
                statuses.append(store.put_message(Message(topic="T", body=b"x" * 50)).status)

        threads = [threading.Thread(target=worker) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert statuses == [PutStatus.PUT_OK] * 400
        assert store.stats().flush_count < 400  # many puts shared one fsync
        store._flush.stop()  # the disk stops answering
        late = store.put_message(Message(topic="T", body=b"late"))
        assert late.status is PutStatus.FLUSH_DISK_TIMEOUT


def test_fork_point_follows_the_seeds_example() -> None:
    master = [EpochEntry(6, 200), EpochEntry(7, 1200), EpochEntry(8, 2500)]
    slave = [EpochEntry(6, 200), EpochEntry(7, 1200), EpochEntry(8, 2250)]
    assert find_consistent_point(slave, 2500, master, 2500) == 2250
    assert find_consistent_point(master[:2], 1800, master, 2600) == 1800  # slave behind
    assert find_consistent_point(master, 3000, master, 2600) == 2600  # slave ahead
    assert find_consistent_point([EpochEntry(9, 0)], 100, master, 2600) == -1
    assert find_consistent_point([], 0, master, 2600) == -1


def test_epoch_file_persists_and_detects_corruption(tmp_path: Path) -> None:
    from storage_engine import CorruptFileError, StorageError
    path = tmp_path / "epochs"
    epochs = EpochFile(path)
    epochs.append(1, 0)
    epochs.append(3, 500)
    with pytest.raises(StorageError):
        epochs.append(2, 900)
    assert EpochFile(path).entries == (EpochEntry(1, 0), EpochEntry(3, 500))
    EpochFile(path).truncate_from(500)
    assert EpochFile(path).entries == (EpochEntry(1, 0),)
    path.write_text(path.read_text().replace("1-0", "1-7"))
    with pytest.raises(CorruptFileError):
        EpochFile(path)


def test_retention_deletes_old_segments_below_the_floor(tmp_path: Path) -> None:
    with MessageStore(tmp_path, SMALL) as store:
        fill(store, 4000, queues=1)
        segments = sorted((tmp_path / "commitlog").iterdir())
        assert len(segments) >= 4
        for segment in segments:
            os.utime(segment, (0, 0))
        floor = int(segments[2].name)  # only the first two segments lie wholly below it
        deleted = store.delete_expired(now_ms=10**13, floor_log_position=floor,
                                       disk_used_ratio=0.1)
        assert deleted == 2
        assert store.min_log_position == floor
        low = store.min_queue_offset("T", 0)
        assert low > 0
        assert store.get_messages("T", 0, 0, max_count=1, max_bytes=99).status is \
            GetStatus.OFFSET_TOO_SMALL
        assert store.get_messages("T", 0, low, max_count=1, max_bytes=1 << 20).status is \
            GetStatus.FOUND
        fresh = store.delete_expired(now_ms=0, floor_log_position=1 << 40, disk_used_ratio=0.1)
        assert fresh == 0  # not expired, disk not full
        forced = store.delete_expired(now_ms=0, floor_log_position=1 << 40, disk_used_ratio=0.99)
        assert forced >= 1 and len(list((tmp_path / "commitlog").iterdir())) >= 1


def test_a_replica_whose_log_ends_at_a_segment_boundary_appends_after_promotion(
        tmp_path: Path) -> None:
    """A slave that replicated exactly up to the end of a segment (the master's blank record
    filled it, then the master died before the next segment's bytes left) is promoted and
    appends: the full segment has no room for a blank of its own, so the append starts the
    next segment (it raised AssertionError in _seal_and_roll, and every put of the new master
    failed; found by the demo's SIGKILL failover)."""
    with MessageStore(tmp_path / "master", SMALL) as master:
        while master.log_position_end <= SMALL.commit_log_segment_size_bytes:
            master.put_message(Message(topic="T", body=b"x" * 4000, queue_id=0))
        boundary = SMALL.commit_log_segment_size_bytes
        first_segment = master.read_log(0, boundary)
        assert len(first_segment) == boundary
    with MessageStore(tmp_path / "slave", SMALL) as promoted:
        promoted.append_replicated(0, first_segment)
        promoted.dispatch_replicated()
        assert promoted.log_position_end == boundary
        result = promoted.put_message(Message(topic="T", body=b"after", queue_id=0))
        assert result.status is PutStatus.PUT_OK
        assert list(result.log_positions) == [boundary]  # the next segment's first record
