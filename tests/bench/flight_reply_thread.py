"""Bare pyarrow Flight DoPut: is the reply cheaper written by the thread that sees the ack?

    .venv/bin/python tests/bench/flight_reply_thread.py [--sends N] [--pairs P]

A model of the last hop of an acknowledged put (README, "Where the time of one acknowledged
put goes"), without brokers: a Flight server whose `do_put` handler, for each 1-row batch,
hands a token to a worker thread (standing for the master's HA reader, woken by the slave's
Ack) and then either
  handler:   waits for the worker to wake it and writes the reply itself (today's path), or
  worker:    waits while the worker writes the reply on the handler's FlightMetadataWriter
             (issue 22's proposal: no thread to schedule between the Ack and the reply).
One client stream, one batch in flight; p50 / p99 of the round trip per mode, modes
alternating. It also checks what the proposal relies on: pyarrow's writer used off the
handler's thread while the handler is blocked (every reply arrives, in order).
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import threading
import time

import pyarrow as pa
from pyarrow import flight

REPLY = b'{"status": "PUT_OK"}'


class _Server(flight.FlightServerBase):  # type: ignore[misc]
    def __init__(self, mode: str) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.mode = mode
        self.acks: queue.SimpleQueue[tuple[object | None, threading.Lock]] = queue.SimpleQueue()
        threading.Thread(target=self._reader, name="ack-reader", daemon=True).start()

    def _reader(self) -> None:
        while True:
            writer, waiter = self.acks.get()
            if writer is not None:
                writer.write(pa.py_buffer(REPLY))  # type: ignore[attr-defined]
            waiter.release()

    def do_put(self, context: object, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader,
               writer: flight.FlightMetadataWriter) -> None:
        for _chunk in reader:
            waiter = threading.Lock()
            waiter.acquire()
            self.acks.put((writer if self.mode == "worker" else None, waiter))
            waiter.acquire()  # the stream must outlive the worker's write
            if self.mode == "handler":
                writer.write(pa.py_buffer(REPLY))


def round_trips(mode: str, sends: int) -> list[float]:
    server = _Server(mode)
    try:
        client = flight.FlightClient(f"grpc://127.0.0.1:{server.port}")
        batch = pa.record_batch({"body": pa.array([b"x" * 100], pa.binary())})
        writer, reader = client.do_put(flight.FlightDescriptor.for_command(b"t"), batch.schema)
        samples = []
        for _ in range(sends):
            start = time.perf_counter()
            writer.write_batch(batch)
            reply = reader.read()
            samples.append(time.perf_counter() - start)
            if reply is None or reply.to_pybytes() != REPLY:
                raise SystemExit(f"{mode}: reply {reply!r} (lost or out of order)")
        writer.done_writing()
        writer.close()
        client.close()
        return sorted(samples)
    finally:
        server.shutdown()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sends", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)
    for _ in range(args.pairs):
        for mode in ("handler", "worker"):
            samples = round_trips(mode, args.sends)
            print(f"reply written by the {mode:7s} load {os.getloadavg()[0]:.1f}: p50 "
                  f"{samples[len(samples) // 2] * 1e6:.0f} us, p99 "
                  f"{samples[int(len(samples) * 0.99)] * 1e6:.0f} us ({args.sends} replies, "
                  "all in order)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
