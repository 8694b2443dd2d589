"""A Producer's idle DoPut streams, shared by all its channels (its lanes and `put`).

A produce stream is bound to a broker and to the batches' schema, and names its topic per batch
(the batch's app_metadata; descriptor `{"topics": "per_batch"}`); the queue is a column of each
batch, so one stream carries any lane's batches of any topic. A channel takes an idle stream
for one round trip and gives it back once the broker answered: a Producer holds as many streams
per (endpoint, schema) as it ran round trips there at once (at most its senders plus its
callers' threads), not one per topic or per (topic, queue) lane:
  - one per lane made a producer writing 10,000 queues open a stream (a round trip, a broker
    thread) on the first send to each and hold 10,000, past the broker's putStreamsMax;
  - one per topic made a producer writing 1,250 topics hold 1,250 broker threads, and reopen
    each stream every request_timeout_ms (below): ~125 opens a second, a fifth of its sends
    paying a stream's opening (docs/benchmarks/scale.md, 2026-12-03).
A broker of v0.1.0 knows only a stream per topic (descriptor `{"topic": T}`) and refuses the
per-batch descriptor before it reads a batch (`refuses_per_batch`): from then on the pool keeps
streams per (endpoint, topic, schema) for that endpoint (`note_single_topic`), for its life.

Rules:
  - a stream is used by one thread at a time: taken from the pool (gone from it) until given
    back; two threads writing one stream abort the process (gRPC
    GRPC_CALL_ERROR_TOO_MANY_OPERATIONS);
  - only a stream whose round trip ended with the broker's reply is given back; a stream that
    failed, or that a master watch abandoned, is closed and never given back (its state is
    unknown);
  - gRPC's deadline covers a whole stream, so a stream takes no new batch after its
    `rotate_at_s` (see put_channel `_open_stream`); one found past it is closed on a thread of
    its own (closing waits for the broker's final status, which a paused master never sends
    before the stream's deadline);
  - last in, first out: the streams in use stay few and warm, the spare ones age out: when a
    channel finds no idle stream (it opens one), streams of every key past their rotation time
    are closed too, at most once per SWEEP_INTERVAL_S (those of a master that was replaced are
    never taken again, and each holds a thread of that broker until its deadline).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import pyarrow as pa
from pyarrow import flight

from connector.protocol import RocketHAError

__all__: list[str] = []

PoolKey = tuple[str, str, pa.Schema]  # (endpoint, topic or PER_BATCH, schema)
PER_BATCH = ""  # the topic of a per-batch stream's key (no topic is named "")
SWEEP_INTERVAL_S = 1.0
# what a v0.1.0 broker answers a per-batch descriptor (BAD_REQUEST), before reading any batch
_SINGLE_TOPIC_REFUSAL = 'produce descriptor: field "topic" must be a string'

logger = logging.getLogger(__name__)


def refuses_per_batch(error: RocketHAError) -> bool:
    """Whether a put on a per-batch stream failed because the broker knows only streams per
    topic (v0.1.0): it refused the descriptor, so no batch of the stream was read."""
    return error.status.name == "BAD_REQUEST" and _SINGLE_TOPIC_REFUSAL in str(error)


@dataclasses.dataclass
class _Stream:  # (its endpoint, topic and schema are its shelf's key)
    writer: flight.FlightStreamWriter
    reader: flight.FlightMetadataReader
    rotate_at_s: float  # monotonic time after which no new batch goes on this stream


class StreamPool:
    """Idle streams by (endpoint, topic, schema); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[PoolKey, list[_Stream]] = {}
        self._closed = False
        self._swept_at_s = time.monotonic()
        self._single_topic: set[str] = set()  # endpoints that refused a per-batch stream

    def per_batch(self, endpoint: str) -> bool:
        """Whether streams to `endpoint` name their topic per batch (not known to refuse it)."""
        return endpoint not in self._single_topic

    def note_single_topic(self, endpoint: str) -> None:
        """`endpoint` refused a per-batch stream: streams per topic to it from now on."""
        with self._lock:
            if endpoint in self._single_topic:
                return
            self._single_topic.add(endpoint)
        logger.info("broker %s takes one topic per produce stream (a release before 0.2): "
                    "this producer opens a stream per topic there", endpoint)

    def shelf(self, endpoint: str, topic: str, schema: pa.Schema) -> list[_Stream]:
        """The idle list of one key, for a channel to keep and hand back to `take`/`give`
        (hashing a pa.Schema costs ~6 us: a channel looks a key up once, not per send)."""
        with self._lock:
            return self._idle.setdefault((endpoint, topic, schema), [])

    def take(self, shelf: list[_Stream]) -> _Stream | None:
        """An idle stream of `shelf` still before its rotation time, or None (open one)."""
        now_s = time.monotonic()
        aged: list[_Stream] = []
        found: _Stream | None = None
        with self._lock:
            while shelf and found is None:
                stream = shelf.pop()
                if now_s < stream.rotate_at_s:
                    found = stream
                else:
                    aged.append(stream)
            if found is None:
                aged += self._sweep(now_s)
        if aged:
            close_in_background(aged)
        return found

    def _sweep(self, now_s: float) -> list[_Stream]:
        """Take out every idle stream past its rotation time (under the lock)."""
        if now_s - self._swept_at_s < SWEEP_INTERVAL_S:
            return []
        self._swept_at_s = now_s
        aged: list[_Stream] = []
        for shelf in self._idle.values():
            kept = [stream for stream in shelf if stream.rotate_at_s > now_s]
            if len(kept) < len(shelf):
                aged += [stream for stream in shelf if stream.rotate_at_s <= now_s]
                shelf[:] = kept
        return aged

    def give(self, shelf: list[_Stream], stream: _Stream) -> None:
        """Give back a stream whose round trip ended with the broker's reply."""
        with self._lock:
            if not self._closed:
                shelf.append(stream)
                return
        close_quietly(stream)  # the producer closed meanwhile

    def idle_count(self) -> int:
        with self._lock:
            return sum(len(shelf) for shelf in self._idle.values())

    def close(self) -> None:
        """Close every idle stream; a stream given back later is closed then."""
        with self._lock:
            self._closed = True
            streams = [stream for shelf in self._idle.values() for stream in shelf]
            for shelf in self._idle.values():
                shelf.clear()
        for stream in streams:
            close_quietly(stream)


def close_quietly(stream: _Stream) -> None:
    try:
        stream.writer.done_writing()
        stream.writer.close()
    except (flight.FlightError, OSError, pa.ArrowException):
        pass  # the stream is already broken; the error was (or will be) reported


def close_in_background(streams: list[_Stream]) -> None:
    """Close on a thread of its own: closing waits for the broker's final status."""
    def close_all() -> None:
        for stream in streams:
            close_quietly(stream)

    threading.Thread(target=close_all, name="rocketha-close", daemon=True).start()
