"""SIGKILL a SYNC_FLUSH writer process at random moments; nothing acknowledged may be lost.

Method: a subprocess (crash_writer.py) puts batches and prints each acknowledged put; the test
kills it with SIGKILL after a seeded random delay (several times on the same directory, so
recovery runs on top of recovery), reopens the store here and checks every acknowledged message
is present, in order, with its queue offset, and that every ConsumeQueue entry points at a
record of that queue. A second opener while the writer runs must get StoreLockedError.
"""

from __future__ import annotations

import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from storage_engine import FlushDiskType, GetStatus, MessageStore, StoreConfig, StoreLockedError

WRITER = Path(__file__).with_name("crash_writer.py")
FIRST_ACK_TIMEOUT_S = 60.0
CONFIG = StoreConfig(commit_log_segment_size_bytes=128 * 1024, message_size_max_bytes=8192,
                     consume_queue_segment_entries=100, flush_disk_type=FlushDiskType.SYNC_FLUSH)


def run_and_kill(store_dir: Path, seed: int, delay_s: float) -> list[tuple[int, int, int, str]]:
    process = subprocess.Popen([sys.executable, str(WRITER), str(store_dir), str(seed)],
                               stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).resolve().parents[2])
    # The delay counts from the first acknowledgement, not from the start: on a loaded machine
    # the interpreter and its imports alone can take longer than the whole delay.
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], FIRST_ACK_TIMEOUT_S)
    first = process.stdout.readline() if ready else ""
    time.sleep(delay_s)
    process.send_signal(signal.SIGKILL)
    output, _ = process.communicate(timeout=30)
    output = first + output
    acked = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 4:  # a line cut by the kill is not an acknowledgement
            acked.append((int(parts[0]), int(parts[1]), int(parts[2]), parts[3]))
    return acked


def check_store(store_dir: Path, acked: list[tuple[int, int, int, str]]) -> None:
    with MessageStore(store_dir, CONFIG) as store:
        for queue_id in range(3):
            messages = []
            queue_offset = 0
            while True:  # bounded: every round advances queue_offset
                result = store.get_messages("crash", queue_id, queue_offset, max_count=4096,
                                            max_bytes=1 << 30)
                if result.status is not GetStatus.FOUND:
                    break
                messages += result.messages()
                queue_offset = result.next_queue_offset
            assert [m.queue_offset for m in messages] == list(range(len(messages)))
            assert all(m.queue_id == queue_id and m.topic == "crash" for m in messages)
            by_offset = {m.queue_offset: m.body for m in messages}
            for acked_queue, first, count, prefix in acked:
                if acked_queue != queue_id:
                    continue
                for index in range(count):
                    body = by_offset.get(first + index)
                    assert body is not None, f"lost acknowledged {prefix}-{index}"
                    assert body.startswith(f"{prefix}-{index}-".encode())


@pytest.mark.parametrize("seed", range(4))
def test_acknowledged_puts_survive_sigkill(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    acked: list[tuple[int, int, int, str]] = []
    for round_index in range(3):
        acked += run_and_kill(tmp_path, seed * 10 + round_index, rng.uniform(0.4, 1.2))
        check_store(tmp_path, acked)
    assert len(acked) > 10


def test_second_process_cannot_open_a_live_store(tmp_path: Path) -> None:
    process = subprocess.Popen([sys.executable, str(WRITER), str(tmp_path), "99"],
                               stdout=subprocess.PIPE, text=True,
                               cwd=Path(__file__).resolve().parents[2])
    try:
        assert process.stdout is not None
        process.stdout.readline()  # the writer holds the store
        with pytest.raises(StoreLockedError):
            MessageStore(tmp_path, CONFIG)
    finally:
        process.kill()
        process.communicate(timeout=30)
