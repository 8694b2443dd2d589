"""`rocketha-admin produce` and `consume`: real messages in and out (connector/admin/cli.py).

produce: `--body TEXT` sends one message; `--file F` or standard input one message per line
(the line without its newline) through `Producer.send_async`, so each line leaves within the
producer's linger_ms (a slow pipe, `tail -f log | rocketha-admin produce`, is not held until a
batch fills) while a fast one is still sent in batches, at most PRODUCE_PENDING_MAX lines
waiting for their answer; `--key`, `--tags` and `--property k=v` apply to every message.
`--count N` sends N synthetic messages (`--body-size`, `--batch`, `--rate`), the load
generator the tests and benchmarks use, in batches of `--batch` as given. Each message's status
(or, for a line whose sends failed for good, the error's name), queue and queue offset is
printed (a table shows at most TABLE_ROWS_MAX, then a summary). Exit 1 unless every message was
acknowledged PUT_OK.

consume: every queue of the topic on every replica set (or `--broker-name`'s), from
`--from earliest|latest|OFFSET`, until `--max-messages` or `--until-idle-ms` without a new
message; shows queue, offset, store time, key, tags, properties and body (UTF-8, else base64).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

from connector.admin.output import Output, Progress, body_text, iso_ms
from connector.admin.target import Target
from connector.client import ClientConfig, Consumer, Producer, SendResult
from connector.protocol import RocketHAError

__all__ = ["PRODUCE_PENDING_MAX", "TABLE_ROWS_MAX", "consume", "produce"]

PRODUCE_PENDING_MAX = 8192  # lines sent and not yet answered (reported in order)
TABLE_ROWS_MAX = 1000
PULL_MESSAGES_MAX = 4096
LINE_BYTES_MAX = 4 << 20  # a line longer than this is refused (maxMessageSize's default)


class _Report:
    """Statuses and printed rows of `produce`, one message at a time, in order."""

    def __init__(self, out: Output, total: int | None) -> None:
        self.out = out
        self.statuses: Counter[str] = Counter()
        self.rows: list[dict[str, Any]] = []
        self.sent = 0
        self.progress = Progress("produced", total)

    def add(self, seq: int, result: SendResult | RocketHAError) -> None:
        if isinstance(result, RocketHAError):  # its retries and deadline are spent
            row = {"seq": seq, "status": result.name, "queue_id": -1, "queue_offset": -1}
        else:
            row = {"seq": seq, "status": result.status, "queue_id": result.queue_id,
                   "queue_offset": result.queue_offset}
        row["t_ms"] = int(time.time() * 1000)
        self.statuses[row["status"]] += 1
        self.sent += 1
        self.progress.add(1)
        if self.out.mode == "json-lines":
            self.out.rows([], [row])
        elif len(self.rows) <= TABLE_ROWS_MAX:
            self.rows.append(row)

    def close(self) -> int:
        self.progress.close()
        out, rows = self.out, self.rows
        if out.mode != "json-lines" and (out.mode == "json" or len(rows) <= TABLE_ROWS_MAX):
            out.rows(["seq", "status", "queue_id", "queue_offset"], rows)
        acked = self.statuses.get("PUT_OK", 0)
        summary = ", ".join(f"{name}={count}" for name, count in sorted(self.statuses.items()))
        out.note(f"acked {acked} of {self.sent} ({summary or 'nothing sent'})")
        return 0 if acked == self.sent and self.sent > 0 else 1


def produce(config: ClientConfig, args: argparse.Namespace, properties: dict[str, str],
            out: Output) -> int:
    report = _Report(out, args.count)
    started = time.monotonic()
    with Producer(config) as producer:
        if args.count is not None or args.body is not None:
            for seqs, messages in _batches(args, properties):
                if args.rate:
                    wait_s = started + seqs.start / args.rate - time.monotonic()
                    if wait_s > 0:
                        time.sleep(wait_s)
                results = producer.send_batch(args.topic, messages)
                for seq, result in zip(seqs, results, strict=True):
                    report.add(seq, result)
        else:
            _produce_lines(producer, args, properties, report, started)
    return report.close()


def _produce_lines(producer: Producer, args: argparse.Namespace, properties: dict[str, str],
                   report: _Report, started: float) -> None:
    """One send_async per line; answers reported in line order as they come."""
    pending: collections.deque[tuple[int, Future[SendResult]]] = collections.deque()
    for seq, line in enumerate(_lines(args.file)):
        if args.rate:
            wait_s = started + seq / args.rate - time.monotonic()
            if wait_s > 0:
                time.sleep(wait_s)
        pending.append((seq, producer.send_async(args.topic, line, key=args.key,
                                                 tags=args.tags, properties=properties)))
        while pending and (pending[0][1].done() or len(pending) > PRODUCE_PENDING_MAX):
            _report_next(pending, report)
    producer.flush()
    while pending:
        _report_next(pending, report)


def _report_next(pending: collections.deque[tuple[int, Future[SendResult]]],
                 report: _Report) -> None:
    seq, future = pending.popleft()
    try:
        report.add(seq, future.result())
    except RocketHAError as err:
        report.add(seq, err)


def _batches(args: argparse.Namespace, properties: dict[str, str]
             ) -> Iterator[tuple[range, list[dict[str, Any]]]]:
    if args.count is not None:
        for first in range(0, args.count, args.batch):
            seqs = range(first, min(first + args.batch, args.count))
            yield seqs, [_message(_synthetic_body(seq, args.body_size), args, properties)
                         for seq in seqs]
        return
    if args.body is not None:
        yield range(1), [_message(args.body.encode(), args, properties)]
        return
    raise AssertionError("lines go through _produce_lines")


def _lines(path: str | None) -> Iterator[bytes]:
    stream = open(path, "rb") if path else sys.stdin.buffer  # noqa: SIM115 (closed below)
    try:
        for number, line in enumerate(stream, start=1):
            if len(line) > LINE_BYTES_MAX:
                raise OSError(f"{path or 'stdin'}:{number}: line longer than {LINE_BYTES_MAX} "
                              "bytes")
            yield line.rstrip(b"\r\n") if line.endswith(b"\n") else line
    finally:
        if path:
            stream.close()


def _message(body: bytes, args: argparse.Namespace, properties: dict[str, str]
             ) -> dict[str, Any]:
    message: dict[str, Any] = {"body": body}
    if args.key is not None:
        message["key"] = args.key
    if args.tags is not None:
        message["tags"] = args.tags
    if properties:
        message["properties"] = properties
    return message


def _synthetic_body(seq: int, size: int) -> bytes:
    head = f"{seq} ".encode()
    return head + b"x" * max(0, size - len(head))


def consume(target: Target, args: argparse.Namespace, out: Output) -> int:
    readers = []
    backlog = 0  # messages in the queues at the start: the progress bar's total
    for replica_set in target.sets():
        admin = target.admin_of(replica_set.endpoints)
        queues = admin.queue_offsets(args.topic)
        consumer = Consumer(admin.config)
        for queue in queues:
            if args.start == "earliest":
                start = queue["min_queue_offset"]
            elif args.start == "latest":
                start = queue["max_queue_offset"]
            else:
                start = int(args.start)
            readers.append([replica_set.broker_name, consumer, queue["queue_id"], start])
            backlog += max(0, int(queue["max_queue_offset"]) - start)
    rows = []
    total = 0
    progress = Progress("consumed", min(backlog, args.max_messages) or None)
    idle_since = time.monotonic()
    rounds = 0
    while readers and total < args.max_messages and \
            (time.monotonic() - idle_since) * 1000 < args.until_idle_ms:
        rounds += 1
        got = 0
        for index, reader in enumerate(readers):
            name, consumer, queue_id, queue_offset = reader
            # drain without waiting; park in a long poll on one queue per idle round
            wait_ms = 0 if got or index != rounds % len(readers) else 100
            limit = min(PULL_MESSAGES_MAX, args.max_messages - total - got)
            if limit <= 0:
                break
            result = consumer.pull(args.topic, queue_id, queue_offset, max_messages=limit,
                                   max_wait_ms=wait_ms)
            reader[3] = result.next_queue_offset
            for row in result.table.to_pylist():
                shown = _shown(name, row)
                if out.mode == "json-lines":
                    out.rows([], [shown])
                else:
                    rows.append(shown)
            got += result.table.num_rows
            progress.add(result.table.num_rows)
        total += got
        if got:
            idle_since = time.monotonic()
    progress.close()
    if out.mode != "json-lines":
        out.rows(["replica_set", "queue_id", "queue_offset", "store_time", "key", "tags",
                  "properties", "body"], rows)
    out.note(f"consumed {total}")
    return 0


def _shown(replica_set: str, row: dict[str, Any]) -> dict[str, Any]:
    properties = row.get("properties") or []
    return {"replica_set": replica_set, "queue_id": row["queue_id"],
            "queue_offset": row["queue_offset"], "store_time": iso_ms(row.get("store_timestamp")),
            "born_time": iso_ms(row.get("born_timestamp")), "key": row.get("key"),
            "tags": row.get("tags"), "properties": dict(properties),
            "msg_id": row.get("msg_id"), **body_text(row.get("body"))}
