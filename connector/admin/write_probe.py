"""A steady idempotent write load that measures what a planned operation costs its producers.

`python -m connector.admin.write_probe --controller ADDR [--client-config FILE]` writes to one
topic on every replica set the controller names, one synchronous idempotent producer per set
(its client knows only that set's members, so it follows the set's master by itself), until
its stdin closes; then it reads every queue back from each set's master and prints one JSON
line: per set and in all, the puts acknowledged and failed, the longest time without an
acknowledgement (`longest_write_pause_s`), the p99 of one send, and the checks over what the
masters hold: `lost_acked` (an acknowledged position that does not hold its message) and
`duplicated` (a message stored twice). It prints `ready` once every set acknowledged a put.

Why a separate process: `rocketha-cluster restart --rolling` (ha/cluster/rolling.py) runs it
around the restarts, and the cluster tool may not import the client (docs/design.md §2).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import threading
import time
from typing import Any

from conf.credentials import Credentials
from conf.tls import NO_TLS, ClientTLS
from connector.client import Admin, ClientConfig, Consumer, Producer, controller_cluster_list
from connector.client.routes import client_config
from connector.protocol import RocketHAError

__all__ = ["main"]

QUEUES = 2  # per set: few queues, so each sees many puts
KEYS = 4
SEND_PAUSE_S = 0.002  # between sends: steady, without taking a whole shared core
REQUEST_TIMEOUT_MS = 3000
READ_BATCH = 1024
GAPS_REPORTED = 20  # per set: the longest times without an acknowledgement, with when


class _SetProbe:
    """One replica set's producer thread and its history."""

    def __init__(self, name: str, config: ClientConfig, topic: str) -> None:
        self.name = name
        self.config = config
        self.topic = topic
        self.acked: dict[int, tuple[int, int, float, float]] = {}  # seq -> q, off, sent, acked
        self.failed: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"probe-{name}", daemon=True)

    def body(self, seq: int) -> bytes:
        return f"{self.name}:{seq}".encode()

    def _run(self) -> None:
        with Producer(self.config, idempotent=True) as producer:
            seq = 0
            while not self.stop.is_set():
                sent = time.monotonic()
                try:
                    result = producer.send(self.topic, self.body(seq), key=f"k{seq % KEYS}")
                except RocketHAError as err:
                    self.failed.append(f"{seq}: {err.name}")
                else:
                    if result.ok:
                        self.acked[seq] = (result.queue_id, result.queue_offset, sent,
                                           time.monotonic())
                    else:
                        self.failed.append(f"{seq}: {result.status}")
                seq += 1
                self.stop.wait(SEND_PAUSE_S)

    def verdict(self, found: dict[tuple[int, int], bytes]) -> dict[str, Any]:
        times = sorted(acked for _, _, _, acked in self.acked.values())
        gaps = sorted(itertools.pairwise(times), key=lambda gap: gap[0] - gap[1])
        sends = sorted(acked - sent for _, _, sent, acked in self.acked.values())
        places: dict[bytes, int] = {}
        for body in found.values():
            places[body] = places.get(body, 0) + 1
        prefix = f"{self.name}:".encode()
        return {
            "acked": len(self.acked), "failed": len(self.failed),
            "failures": self.failed[:5],
            "longest_write_pause_s": round(max((b - a for a, b in gaps), default=0.0), 3),
            # the longest gaps, (from, to) in monotonic seconds: the caller names the step
            # of each (ha/cluster/rolling.py)
            "gaps": [(round(a, 3), round(b, 3)) for a, b in gaps[:GAPS_REPORTED]],
            "send_p99_ms": round(sends[int(len(sends) * 0.99)] * 1000, 1) if sends else None,
            "lost_acked": sum(1 for seq, (q, o, _, _) in self.acked.items()
                              if found.get((q, o)) != self.body(seq)),
            "duplicated": sum(1 for body, n in places.items()
                              if n > 1 and body.startswith(prefix)),
        }


def _read_all(config: ClientConfig, topic: str) -> dict[tuple[int, int], bytes]:
    found: dict[tuple[int, int], bytes] = {}
    consumer = Consumer(config)
    for queue in Admin(config).queue_offsets(topic):
        queue_id, offset, end = (queue["queue_id"], queue["min_queue_offset"],
                                 queue["max_queue_offset"])
        while offset < end:
            result = consumer.pull(topic, queue_id, offset, max_messages=READ_BATCH)
            offsets = result.table.column("queue_offset").to_pylist()
            bodies = result.table.column("body").to_pylist()
            found.update(((queue_id, o), b) for o, b in zip(offsets, bodies, strict=True))
            if result.next_queue_offset <= offset:
                break
            offset = result.next_queue_offset
    return found


def _sets(controller: str, tls: ClientTLS, credentials: Credentials | None
          ) -> dict[str, tuple[str, ...]]:
    """Replica set -> its members' endpoints, the master first."""
    reply = controller_cluster_list(controller, REQUEST_TIMEOUT_MS, tls, credentials)
    sets = {}
    for status in reply.get("replica_sets", []):
        replica = status["replica"]
        members = [m["broker_address"] for m in replica["brokers"]]
        master = replica.get("master_address")
        sets[replica["broker_name"]] = tuple(sorted(members, key=lambda a: a != master))
    return sets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="write_probe", description=__doc__.splitlines()[0])
    parser.add_argument("--controller", required=True)
    parser.add_argument("--client-config", default=None, help="client.properties (TLS, keys)")
    parser.add_argument("--topic", default="rocketha-write-probe")
    args = parser.parse_args(argv)
    tls, credentials = NO_TLS, None
    if args.client_config:
        loaded = ClientConfig.from_properties(args.client_config)
        tls, credentials = loaded.tls, loaded.credentials
    probes = []
    for name, members in sorted(_sets(args.controller, tls, credentials).items()):
        config = client_config(members, REQUEST_TIMEOUT_MS, tls, credentials)
        config = dataclasses.replace(config, send_deadline_ms=60_000, retries_max=600,
                                     backoff_max_ms=200)
        Admin(client_config(members[:1], REQUEST_TIMEOUT_MS, tls, credentials)
              ).create_topic(args.topic, queues=QUEUES)  # (an existing one keeps its queues)
        probes.append(_SetProbe(name, config, args.topic))
    for probe in probes:
        probe.thread.start()
    while not all(probe.acked for probe in probes):
        if any(not probe.thread.is_alive() for probe in probes):
            break
        time.sleep(0.05)
    print("ready", flush=True)
    sys.stdin.read()  # until the caller closes it
    for probe in probes:
        probe.stop.set()
    for probe in probes:
        probe.thread.join()
    sets = _sets(args.controller, tls, credentials)
    per_set = {probe.name: probe.verdict(_read_all(
        client_config(sets[probe.name][:1], REQUEST_TIMEOUT_MS, tls, credentials),
        args.topic)) for probe in probes}
    total = {key: sum(v[key] for v in per_set.values())
             for key in ("acked", "failed", "lost_acked", "duplicated")}
    print(json.dumps({**total, "longest_write_pause_s": max(
        (v["longest_write_pause_s"] for v in per_set.values()), default=0.0),
        "sets": per_set}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
