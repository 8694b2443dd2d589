"""Writer for the SIGKILL test: SYNC_FLUSH puts, one stdout line per acknowledged put.

    python crash_writer.py STORE_DIR SEED
Each line: `queue_id first_queue_offset count body_prefix`. Runs until killed (bounded).
"""

from __future__ import annotations

import random
import sys

from storage_engine import FlushDiskType, MessageBatch, MessageStore, StoreConfig

PUTS_MAX = 100_000


def main() -> None:
    store_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    config = StoreConfig(commit_log_segment_size_bytes=128 * 1024, message_size_max_bytes=8192,
                         consume_queue_segment_entries=100,
                         flush_disk_type=FlushDiskType.SYNC_FLUSH)
    store = MessageStore(store_dir, config)
    for put in range(PUTS_MAX):
        queue_id = rng.randrange(3)
        count = rng.choice((1, 1, 5, 20))
        prefix = f"s{seed}p{put}"
        bodies = [f"{prefix}-{i}-".encode() * rng.randint(1, 30) for i in range(count)]
        result = store.put_messages(MessageBatch(topic="crash", bodies=bodies,
                                                 queue_ids=[queue_id] * count))
        assert result.status.name == "PUT_OK", result
        sys.stdout.write(f"{queue_id} {result.queue_offsets[0]} {count} {prefix}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
