"""The mini fault run of issue 15, rerunnable with a seed: `python3 build.py faults`.

    python3 build.py faults [--minutes 3] [--seed 1] [--faults kill_master,kill_slave,
        kill_leader,pause_master] [--in-sync N] [--rate 500] [--dir DIR] [--json]

What it does, as a new user would: `rocketha-cluster up --controllers 3 --replica-sets 1
--replicas 3` with the tool's default quorum (a majority, 2, with adaptive degradation down to
1; `--in-sync N` sets `inSyncReplicas=N` instead, with degradation when N > 1), one
`Producer(idempotent=True)` with
`ClientConfig(controller=<all three>)` sending one unkeyed message per call at --rate per
second, and every 12 s one fault chosen by the seed, healed 6 s later: SIGKILL of the master,
of a slave or of the controller leader (restarted with `rocketha-cluster up`), or SIGSTOP of the
master (SIGCONT after 6 s). At the end every PUT_OK message is looked up at the (queue, offset)
its ack named on the final master, once its confirm position reached its log end. Acks answered
as duplicates (a retry the broker recognised: no offsets) are looked up by body, and no body
may be stored twice. Exit 0 only when none is lost or doubled, except, with `--in-sync 1`, acks
for sends made in the second before the master was stopped or killed and answered before the
heal: with one in-sync replica a `PUT_OK` is on the master alone until the slaves fetch it, so
a failover may lose it (`lost_acked_by_rule`; RocketMQ and Kafka's acks=1 behave the same). The last
line is a JSON summary.

Bounded: the run ends after --minutes (plus the last heal) and the producer with it; the
cluster is stopped in `finally`. Real processes on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from connector import ClientConfig, Producer
from connector.protocol import RocketHAError
from tests.integration.failover_cluster import FailoverCluster, read_topic

FAULTS = ("kill_master", "kill_slave", "kill_leader", "pause_master")
FAULT_EVERY_S = 12.0
HEAL_AFTER_S = 6.0
SET_A = "broker-a"
TOPIC = "orders"


class PacedProducer:
    """One thread, one idempotent Producer, one message per send at `rate` per second."""

    def __init__(self, config: ClientConfig, rate_per_s: float) -> None:
        self._config = config
        self._interval_s = 1.0 / rate_per_s
        self.acks: dict[int, tuple[int, int]] = {}  # seq -> (queue_id, queue_offset)
        self.acked_at: dict[int, float] = {}  # seq -> monotonic time the PUT_OK arrived
        self.sent_at: dict[int, float] = {}  # seq -> monotonic time its send began (if acked)
        # PUT_OK without offsets: a retry the broker recognised as stored before (idempotence)
        self.acked_without_position: list[int] = []
        self.outcomes: Counter[str] = Counter()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="paced-producer", daemon=True)

    def start(self) -> PacedProducer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        producer = Producer(self._config, idempotent=True)
        next_s = time.monotonic()
        seq = 0
        try:
            while not self._stop.is_set():
                next_s += self._interval_s
                self._stop.wait(max(0.0, next_s - time.monotonic()))
                sent_s = time.monotonic()
                try:
                    result = producer.send(TOPIC, body_of(seq))
                    status = result.status
                    if status == "PUT_OK" and result.queue_id >= 0:
                        self.acks[seq] = (result.queue_id, result.queue_offset)
                        self.acked_at[seq] = time.monotonic()
                        self.sent_at[seq] = sent_s
                    elif status == "PUT_OK":
                        self.acked_without_position.append(seq)
                except RocketHAError as err:
                    status = err.name
                self.outcomes[status] += 1
                seq += 1
        except BaseException as err:  # noqa: BLE001 - reported by run()
            self.error = err
        finally:
            producer.close()


def body_of(seq: int) -> bytes:
    return b"m:%d" % seq


def inject(cluster: FailoverCluster, fault: str, rng: random.Random) -> str | None:
    """Start one fault; returns the process it hit (None: no master to hit)."""
    if fault == "kill_leader":
        victim = cluster.wait_controller_leader(timeout_s=15)
        cluster.kill(victim)
        return victim
    master = cluster.master_now(SET_A)
    if master is None:
        return None
    if fault == "kill_slave":
        victim = rng.choice([b for b in cluster.members(SET_A) if b != master[0]])
        cluster.kill(victim)
    elif fault == "kill_master":
        victim = master[0]
        cluster.kill(victim)
    else:
        victim = master[0]
        cluster.pause(victim)
    return victim


def run(args: argparse.Namespace, directory: Path) -> dict[str, object]:
    rng = random.Random(args.seed)
    quorum = {}
    if args.in_sync is not None:
        quorum["inSyncReplicas"] = str(args.in_sync)
        quorum["enableAutoInSyncReplicas"] = "true" if args.in_sync > 1 else "false"
    cluster = FailoverCluster(directory, controllers=3, replicas=3, **quorum)
    producer = None
    injected: Counter[str] = Counter()
    # (fault began, its victim was stopped, healed, fault), monotonic
    windows: list[tuple[float, float, float, str]] = []
    try:
        cluster.wait_master(SET_A, timeout_s=60)
        producer = PacedProducer(ClientConfig(controller=cluster.controller_addr),
                                 args.rate).start()
        end_s = time.monotonic() + args.minutes * 60
        while time.monotonic() < end_s:
            time.sleep(FAULT_EVERY_S - HEAL_AFTER_S)
            fault = rng.choice(args.faults)
            began_s = time.monotonic()
            victim = inject(cluster, fault, rng)
            stopped_s = time.monotonic()  # a SIGSTOP is waited for until every thread stopped
            print(f"{time.strftime('%H:%M:%S')} {fault} {victim} "
                  f"(acked so far {len(producer.acks)})", flush=True)
            time.sleep(HEAL_AFTER_S)
            if victim is None:
                continue
            injected[fault] += 1
            if fault == "pause_master":
                cluster.resume(victim)
            else:
                cluster.up()
            windows.append((began_s, stopped_s, time.monotonic(), fault))
        producer.stop()
        if producer.error is not None:
            raise producer.error
        master, _ = cluster.wait_master(SET_A, timeout_s=60)
        cluster.wait_confirm_at_end(master)
        found = read_topic(cluster.endpoint(master), TOPIC)
        lost = sorted(seq for seq, place in producer.acks.items()
                      if found.get(place) != body_of(seq))
        stored = Counter(found.values())
        lost_duplicates = [seq for seq in producer.acked_without_position
                           if stored[body_of(seq)] == 0]
        duplicated = sum(1 for count in stored.values() if count > 1)
        when = {seq: _when(producer.acked_at[seq], windows) for seq in lost}
        by_rule = [seq for seq in lost if args.in_sync == 1
                   and _on_master_alone(producer.sent_at[seq], producer.acked_at[seq],
                                        windows)]
        return {"minutes": args.minutes, "seed": args.seed,
                "in_sync_replicas": args.in_sync or "default",
                "faults": dict(injected), "acked": len(producer.acks),
                "outcomes": dict(producer.outcomes), "lost_acked": len(lost),
                "lost_acked_by_rule": len(by_rule),
                "acked_without_position": len(producer.acked_without_position),
                "lost_acked_without_position": len(lost_duplicates), "duplicated": duplicated,
                "lost_acked_by_when": dict(Counter(when.values())),
                "lost_examples": [[seq, *producer.acks[seq]] for seq in lost[:10]]}
    finally:
        if producer is not None:
            producer.stop()
        cluster.down()


def _when(acked_s: float, windows: list[tuple[float, float, float, str]]) -> str:
    """Where an ack falls: within 1 s before a fault began (with inSyncReplicas=1 such an ack
    may be on the master alone when it fails: lost by the rule, as after a crash), during a
    fault, within 1 s after it healed (a resumed master's ack: the lease's business), or
    elsewhere; with the fault's name."""
    for began_s, _, healed_s, fault in windows:
        if began_s - 1.0 <= acked_s < began_s:
            return f"before {fault}"
        if began_s <= acked_s < healed_s:
            return f"during {fault}"
        if healed_s <= acked_s < healed_s + 1.0:
            return f"after {fault}"
    return "elsewhere"


def _on_master_alone(sent_s: float, acked_s: float,
                     windows: list[tuple[float, float, float, str]]) -> bool:
    """May inSyncReplicas=1 explain this loss? The send was made in the second before the
    master was stopped or killed (until every thread of it had stopped: a signal reaches
    threads one by one) and its PUT_OK arrived before the heal, so the master alone held it
    when it failed. An ack that arrived after SIGCONT is never excused, although the master
    may have decided it before the pause (or had it in its socket): from the client that is
    indistinguishable from issue 15's bug (a resumed master acking what it took), so such a
    run fails and is looked at."""
    return any(began_s - 1.0 <= sent_s < stopped_s and acked_s < healed_s
               and fault in ("kill_master", "pause_master")
               for began_s, stopped_s, healed_s, fault in windows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--faults", type=lambda text: text.split(","), default=list(FAULTS))
    parser.add_argument("--in-sync", type=int, default=None, choices=(1, 2, 3),
                        help="inSyncReplicas (default: the cluster tool's majority)")
    parser.add_argument("--rate", type=float, default=500.0, help="messages per second")
    parser.add_argument("--dir", type=Path, default=None, help="kept after the run")
    args = parser.parse_args(argv)
    unknown = set(args.faults) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; known: {','.join(FAULTS)}")
    if args.dir is not None:
        summary = run(args, args.dir)
    else:
        with tempfile.TemporaryDirectory(prefix="rocketha-faults-") as directory:
            summary = run(args, Path(directory) / "cluster")
    print(json.dumps(summary, sort_keys=True))
    fine = (summary["lost_acked"] == summary["lost_acked_by_rule"]
            and summary["acked_without_position"] == 0  # a PUT_OK at -1 (issue 43)
            and summary["lost_acked_without_position"] == 0 and summary["duplicated"] == 0)
    return 0 if fine else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
