"""`rocketha-admin --broker HOST:PORT <command>`: operate a broker (in the spirit of mqadmin).

    topic create --topic T [--queues N] [--perm 6] | list | describe --topic T | delete --topic T
    offsets --topic T [--group G]
    broker info [--json] | broker stats
    produce --topic T --count N [--body-size B] [--rate R] [--batch K] [--json-lines]
    consume --topic T --from earliest|latest|OFFSET [--until-idle-ms MS] [--json-lines]

Exit codes: 0 ok, 1 the broker answered with an error (its status is printed), 2 misuse.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from collections import Counter
from typing import Any

from connector.client import Admin, ClientConfig, Consumer, Producer
from connector.protocol import RocketHAError

__all__ = ["main"]

COUNT_MAX = 100_000_000
BATCH_MAX = 65_536


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocketha-admin", description=__doc__.splitlines()[0])
    parser.add_argument("--broker", required=True, help="HOST:PORT of a broker")
    commands = parser.add_subparsers(dest="command", required=True)
    topic = commands.add_parser("topic").add_subparsers(dest="topic_command", required=True)
    create = topic.add_parser("create")
    create.add_argument("--topic", required=True)
    create.add_argument("--queues", type=int, default=None)
    create.add_argument("--perm", type=int, default=None)
    topic.add_parser("list")
    for name in ("describe", "delete"):
        topic.add_parser(name).add_argument("--topic", required=True)
    offsets = commands.add_parser("offsets")
    offsets.add_argument("--topic", required=True)
    offsets.add_argument("--group", default=None)
    broker = commands.add_parser("broker").add_subparsers(dest="broker_command", required=True)
    broker.add_parser("info").add_argument("--json", action="store_true")
    broker.add_parser("stats")
    produce = commands.add_parser("produce")
    produce.add_argument("--topic", required=True)
    produce.add_argument("--count", type=int, required=True)
    produce.add_argument("--body-size", type=int, default=100)
    produce.add_argument("--rate", type=float, default=0.0, help="messages/s, 0 = unlimited")
    produce.add_argument("--batch", type=int, default=1)
    produce.add_argument("--json-lines", action="store_true")
    consume = commands.add_parser("consume")
    consume.add_argument("--topic", required=True)
    consume.add_argument("--from", dest="start", default="earliest")
    consume.add_argument("--until-idle-ms", type=int, default=2000)
    consume.add_argument("--json-lines", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = ClientConfig(brokers=(args.broker,), send_deadline_ms=15_000)
    except ValueError as err:
        parser.error(str(err))
    try:
        return _dispatch(parser, args, config)
    except RocketHAError as err:
        print(f"rocketha-admin: {err.name}: {err.message}", file=sys.stderr)
        return 1


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace,
              config: ClientConfig) -> int:
    admin = Admin(config)
    if args.command == "topic":
        return _topic(admin, args)
    if args.command == "offsets":
        rows = admin.queue_offsets(args.topic)
        committed = admin.query_offsets(args.group, args.topic) if args.group else {}
        for row in rows:
            line = (f"queue {row['queue_id']}: min {row['min_queue_offset']} "
                    f"max {row['max_queue_offset']}")
            if args.group:
                done = committed.get(row["queue_id"], 0)
                line += f" committed {done} lag {row['max_queue_offset'] - done}"
            print(line)
        return 0
    if args.command == "broker":
        info = admin.broker_info() if args.broker_command == "info" else admin.broker_stats()
        if args.broker_command == "info" and not args.json:
            for key, value in info.items():
                print(f"{key}: {value}")
        else:
            print(json.dumps(info, sort_keys=True))
        return 0
    if args.command == "produce":
        if not 1 <= args.count <= COUNT_MAX or not 1 <= args.batch <= BATCH_MAX \
                or args.body_size < 0 or args.rate < 0:
            parser.error(f"--count must be 1..{COUNT_MAX}, --batch 1..{BATCH_MAX}, "
                         "--body-size and --rate >= 0")
        return _produce(config, args)
    return _consume(admin, config, args, parser)


def _topic(admin: Admin, args: argparse.Namespace) -> int:
    if args.topic_command == "create":
        print(json.dumps(admin.create_topic(args.topic, queues=args.queues, perm=args.perm)))
    elif args.topic_command == "list":
        for topic in admin.list_topics():
            print(f"{topic['name']}\tread {topic['read_queue_nums']}\t"
                  f"write {topic['write_queue_nums']}\tperm {topic['perm']}")
    elif args.topic_command == "describe":
        print(json.dumps({"topic": admin.get_topic(args.topic),
                          "queues": admin.queue_offsets(args.topic)}, indent=1))
    else:
        admin.delete_topic(args.topic)
        print(f"deleted {args.topic}")
    return 0


def _body(seq: int, size: int) -> bytes:
    head = f"{seq} ".encode()
    return head + b"x" * max(0, size - len(head))


def _produce(config: ClientConfig, args: argparse.Namespace) -> int:
    statuses: Counter[str] = Counter()
    started = time.monotonic()
    with Producer(config) as producer:
        for first in range(0, args.count, args.batch):
            seqs = range(first, min(first + args.batch, args.count))
            if args.rate:
                wait_s = started + first / args.rate - time.monotonic()
                if wait_s > 0:
                    time.sleep(wait_s)
            results = producer.send_batch(args.topic, [{"body": _body(seq, args.body_size)}
                                                       for seq in seqs])
            now_ms = int(time.time() * 1000)
            for seq, result in zip(seqs, results):
                statuses[result.status] += 1
                if args.json_lines:
                    print(json.dumps({"seq": seq, "status": result.status,
                                      "queue_id": result.queue_id,
                                      "queue_offset": result.queue_offset, "t_ms": now_ms}))
    acked = statuses.get("PUT_OK", 0)
    summary = ", ".join(f"{name}={count}" for name, count in sorted(statuses.items()))
    print(f"acked {acked} of {args.count} ({summary})", file=sys.stderr if args.json_lines
          else sys.stdout)
    return 0 if acked == args.count else 1


def _consume(admin: Admin, config: ClientConfig, args: argparse.Namespace,
             parser: argparse.ArgumentParser) -> int:
    queues = admin.queue_offsets(args.topic)
    if args.start not in ("earliest", "latest") and not args.start.isdigit():
        parser.error("--from must be earliest, latest or a queue offset")
    consumer = Consumer(config)
    positions = {}
    for queue in queues:
        if args.start == "earliest":
            positions[queue["queue_id"]] = queue["min_queue_offset"]
        elif args.start == "latest":
            positions[queue["queue_id"]] = queue["max_queue_offset"]
        else:
            positions[queue["queue_id"]] = int(args.start)
    total = 0
    idle_since = time.monotonic()
    rounds = 0
    while positions and (time.monotonic() - idle_since) * 1000 < args.until_idle_ms:
        rounds += 1
        got = 0
        for queue_id, queue_offset in positions.items():
            # Drain without waiting; park in a long poll on one queue per idle round.
            wait_ms = 0 if got or queue_id != rounds % len(positions) else 100
            result = consumer.pull(args.topic, queue_id, queue_offset, max_messages=4096,
                                   max_wait_ms=wait_ms)
            positions[queue_id] = result.next_queue_offset
            got += result.table.num_rows
            if args.json_lines:
                for row in result.table.select(["queue_id", "queue_offset", "body"]).to_pylist():
                    print(json.dumps(_json_row(row)))
        total += got
        if got:
            idle_since = time.monotonic()
    print(f"consumed {total}", file=sys.stderr if args.json_lines else sys.stdout)
    return 0


def _json_row(row: dict[str, Any]) -> dict[str, Any]:
    body = row.pop("body")
    try:
        row["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        row["body_b64"] = base64.b64encode(body).decode()
    return row


if __name__ == "__main__":
    sys.exit(main())
