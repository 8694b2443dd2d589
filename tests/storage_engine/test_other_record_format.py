"""A record of another record format is refused at open, never cut as a torn tail.

Goal (issue 40: what cannot be mixed is refused with a clear message, never misread): a store
holding a record with RocketMQ's MESSAGE_MAGIC_CODE_V2 (a store written by a release with another
record format, opened by this one) stops the open with StoreFormatError naming the format, the
magic code and the log position, and leaves every byte of the store as it was, whether the record
is past the checkpoint (the scan meets it) or below it (the chain check fails, and the scan from
the segment's start meets it). A read or a replica's walk that meets such a record (in a
segment the open does not check) names its format in the error. Rubbish that merely contains
the V2 code without a plausible record around it (TOTALSIZE, PHYSICALOFFSET) is still a torn
tail and is cut as before. The broker process refuses such a store in one line with the
refusal exit status.
Method: real stores in tmp_path, the magic code written into the segment file, the checkpoint
set to a mid-segment record boundary as after a crash (test_recovery_from_checkpoint's helpers).
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from storage_engine import CorruptRecordError, MessageStore, StoreFormatError, decode_record
from storage_engine.record_format import LOG_POSITION_AT, MESSAGE_MAGIC_CODE_V2
from storage_engine.record_runs import walk_few, walk_records
from tests.storage_engine.test_engine_basics import SMALL, last_segment, record
from tests.storage_engine.test_recovery_from_checkpoint import (
    crashed_store,
    in_last_segment,
    set_checkpoint,
)

ROOT = Path(__file__).resolve().parents[2]
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")


def store_bytes(store_dir: Path) -> dict[str, bytes]:
    """Every file of the store but the lock and the abort marker (the open's own files)."""
    return {str(path.relative_to(store_dir)): path.read_bytes()
            for path in sorted(store_dir.rglob("*"))
            if path.is_file() and path.name not in ("lock", "abort")}


def write_at(segment: Path, relative: int, data: bytes) -> None:
    with open(segment, "r+b") as handle:
        handle.seek(relative)
        handle.write(data)


def v2_store(tmp_path: Path, where: str) -> int:
    """A crashed store whose last segment holds one record turned V2, `where` the checkpoint
    ("past" or "below"); returns the record's log position."""
    _written, positions, _end = crashed_store(tmp_path)
    tail = in_last_segment(tmp_path, positions)
    assert len(tail) > 40 and tail[0] > 0  # a second segment, with many records
    checkpoint = tail[len(tail) // 2]
    victim = tail[-5] if where == "past" else tail[len(tail) // 4]
    set_checkpoint(tmp_path, checkpoint)
    segment = last_segment(tmp_path)
    write_at(segment, victim - int(segment.name) + 4, _U32.pack(MESSAGE_MAGIC_CODE_V2))
    return victim


@pytest.mark.parametrize("where", ["past", "below"])
def test_a_v2_record_stops_the_open_and_nothing_is_cut(tmp_path: Path, where: str) -> None:
    victim = v2_store(tmp_path, where)
    before = store_bytes(tmp_path)
    for _attempt in range(2):  # refused again: the first refusal changed nothing
        with pytest.raises(StoreFormatError) as refused:
            MessageStore(tmp_path, SMALL)
        assert refused.value.log_position == victim
        assert refused.value.format_name == "V2"
        assert str(refused.value) == (
            f"record format V2 (magic 0xDAA320AB) at log_position {victim}: this store was "
            "written by a release that uses another record format; this release reads V1; "
            "nothing was cut")
        assert store_bytes(tmp_path) == before


@pytest.mark.parametrize("rubbish", ["wrong PHYSICALOFFSET", "TOTALSIZE past the segment",
                                     "TOTALSIZE below a record"])
def test_rubbish_holding_the_v2_code_is_still_a_torn_tail_and_cut(
        tmp_path: Path, rubbish: str) -> None:
    victim = v2_store(tmp_path, "past")
    segment = last_segment(tmp_path)
    relative = victim - int(segment.name)
    if rubbish == "wrong PHYSICALOFFSET":
        write_at(segment, relative + LOG_POSITION_AT, _I64.pack(victim + 1))
    elif rubbish == "TOTALSIZE past the segment":
        write_at(segment, relative, _U32.pack(SMALL.commit_log_segment_size_bytes - relative + 1))
    else:
        write_at(segment, relative, _U32.pack(40))
    with MessageStore(tmp_path, SMALL) as store:
        recovery = store.stats().last_recovery
        assert recovery is not None
        assert store.log_position_end == victim
        assert recovery.cut_bytes > 0


def test_a_read_and_a_replicas_walk_name_the_other_format() -> None:
    data = bytearray(record() * 2)
    data[4:8] = _U32.pack(MESSAGE_MAGIC_CODE_V2)
    reason = "magic code 0xdaa320ab (record format V2; this release reads V1)"
    with pytest.raises(CorruptRecordError, match=re.escape(reason)):
        decode_record(bytes(data))
    for walk in (lambda: walk_few(data, 0, len(data), 8), lambda: walk_records(data, 0, len(data))):
        with pytest.raises(CorruptRecordError) as refused:
            walk()
        assert reason in str(refused.value) and refused.value.log_position == 0


def test_the_broker_refuses_a_v2_store_in_one_line(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    store_dir.mkdir()
    victim = v2_store(store_dir, "past")
    before = store_bytes(store_dir)
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={store_dir}\n"
                    f"mappedFileSizeCommitLog={SMALL.commit_log_segment_size_bytes}\n"
                    f"maxMessageSize={SMALL.message_size_max_bytes}\n"
                    f"mappedFileSizeConsumeQueue={SMALL.consume_queue_segment_entries * 20}\n")
    result = subprocess.run(
        [sys.executable, "-c",
         f"import sys; from ha.broker.main import main; sys.exit(main(['--conf', {str(conf)!r}]))"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"rocketha-broker: record format V2 (magic 0xDAA320AB) at log_position {victim}: this "
        "store was written by a release that uses another record format; this release reads "
        "V1; nothing was cut\n")
    assert store_bytes(store_dir) == before
