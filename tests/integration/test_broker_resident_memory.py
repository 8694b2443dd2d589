"""A broker's resident memory stays bounded while its log grows past the resident window,
and every message still reads back (issue 42's soak: the mapped CommitLog's pages counted in
VmRSS and grew with every byte written and read).

Method: a real broker process with small windows; about 40 MiB produced and read back through
Flight (reading maps every page); then, waiting on the condition (the flush thread releases
once a checkpoint), the broker's resident pages of its store files (/proc/<pid>/smaps) fall to
the windows, and the file-backed part of its VmRSS has not grown by the log (the
anonymous part is the allocator's, noisy under load, and not what the release bounds); a
second read returns every body again."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from connector.protocol import GetTicket
from tests.bench.scale_probe import mapped_rss_bytes, rss_split_bytes
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_broker import bodies_table, consume, produce

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc smaps")]

MiB = 1 << 20
WINDOW_BYTES = 2 * MiB
QUEUE_WINDOW_BYTES = 64 * 1024
BATCHES = 40
BATCH_MESSAGES = 1000
WAIT_S = 60.0  # a checkpoint a second; generous under load


def _read_queue(broker: BrokerProcess, topic: str) -> list[bytes]:
    bodies: list[bytes] = []
    while True:
        rows, replies = consume(broker, GetTicket(topic, 0, len(bodies), max_messages=4096,
                                                  max_bytes=8 * MiB))
        if not rows:
            return bodies
        bodies += [row["body"] for row in rows]
        assert replies[-1].next_queue_offset == len(bodies)


def test_mapped_pages_stay_within_the_window_and_every_message_reads_back(
        tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path, mappedFileSizeCommitLog=str(16 * MiB),
                           commitLogResidentWindowBytes=str(WINDOW_BYTES),
                           consumeQueueResidentWindowBytes=str(QUEUE_WINDOW_BYTES)).start()
    try:
        assert broker.process is not None
        pid = broker.process.pid
        broker.action("create_topic", {"topic": "rss", "read_queue_nums": 1,
                                       "write_queue_nums": 1})
        sent = [b"%08d" % n + bytes(1016) for n in range(BATCHES * BATCH_MESSAGES)]
        first = BATCH_MESSAGES * 2  # a warm-up: the broker's own start-up memory settles
        produce(broker, "rss", bodies_table(sent[:first], queue_id=[0] * first))
        assert _read_queue(broker, "rss") == sent[:first]
        anon_before, file_before = rss_split_bytes(pid)
        for start in range(first, len(sent), BATCH_MESSAGES):
            chunk = sent[start:start + BATCH_MESSAGES]
            (reply,) = produce(broker, "rss", bodies_table(chunk, queue_id=[0] * len(chunk)))
            assert reply.status == "PUT_OK"
        assert _read_queue(broker, "rss") == sent  # ~40 MiB read through the mappings

        # the CommitLog's window, and the queue's index as far as the last read faulted it in:
        # a queue is released when it is written (store_recovery.release_cold_pages), and
        # this one is read after its last write; plus partial pages
        index_bytes = len(sent) * 20
        bound = WINDOW_BYTES + index_bytes + 64 * 1024
        deadline = time.monotonic() + WAIT_S
        resident = mapped_rss_bytes(pid, broker.store_dir)
        while resident > bound and time.monotonic() < deadline:
            time.sleep(0.2)
            resident = mapped_rss_bytes(pid, broker.store_dir)
        assert resident <= bound, (resident, bound)
        anon_after, file_after = rss_split_bytes(pid)
        # VmRSS = RssAnon + RssFile (+ RssShmem): its file-backed part is what the log's pages
        # made grow (~40 MiB without the release); the anonymous part is the allocator's
        assert file_after - file_before < 8 * MiB, (
            f"VmRSS's file-backed part grew {(file_after - file_before) / MiB:.1f} MiB over a "
            f"~40 MiB log (anonymous: {(anon_after - anon_before) / MiB:+.1f} MiB)")
        assert _read_queue(broker, "rss") == sent  # faulted back from the page cache
    finally:
        assert broker.stop() == 0
