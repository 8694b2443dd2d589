"""The load of `bench e2e`, in a process of its own (so it shares no interpreter with the Spark
driver): R messages per second for S seconds through `Producer.send_async`, on an open-loop
schedule (tests/bench/open_loop.py). Each body is the wall-clock time (float seconds, 8 bytes
big-endian) the message was due: the benchmark measures from there to the row's visibility.

    python tests/bench/e2e_producer.py ENDPOINT TOPIC RATE_PER_S SECONDS

Prints the number of messages acknowledged and the seconds from the first send to the last
acknowledgement (so the rate reached shows); exits 1 if any send failed.
"""

from __future__ import annotations

import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import ClientConfig, Producer, ProducerConfig
from tests.bench.open_loop import Schedule


def main(argv: list[str]) -> int:
    endpoint, topic, rate, seconds = argv[0], argv[1], float(argv[2]), float(argv[3])
    schedule = Schedule(rate, seconds)
    futures = []
    with Producer(ClientConfig(brokers=(endpoint,)),
                  batching=ProducerConfig(linger_ms=0)) as producer:
        start_wall, start = time.time(), time.perf_counter()
        while not schedule.done:
            for index in schedule.take_due(time.perf_counter() - start):
                due = struct.pack(">d", start_wall + schedule.due_s(index))
                futures.append(producer.send_async(topic, due))
            time.sleep(schedule.wait_s(time.perf_counter() - start))
        producer.flush()
    acked = sum(1 for future in futures if future.result().ok)
    print(acked, round(time.perf_counter() - start, 3), flush=True)
    return 0 if acked == len(futures) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
