"""Probe: what a queue's FIRST put costs in a broker with many queues, against a second put.

Goal: tell the broker's first-put cost (issue 42) apart from the number of queues. Method: the
scale bench's setup (one controller, one broker in controller mode, SYNC_MASTER, ASYNC_FLUSH,
topics of 8 queues), one Producer with a stream open to every topic (one untimed send to queue
0 of each), then four phases of `--pairs` steps: "written" (a send to queue 0 of a random
topic, written before), "mixed" (a send to a queue never written, then one to a written
queue, alternating, so both kinds share the same moments of a shared machine), "fresh" (only
never-written queues) and "written again". Prints each kind's p50/p90/p99/max, the load, and
the broker's CPU per phase by thread (/proc/<pid>/task: the flush thread's checkpoint work
shows apart from the put handlers').

    PYTHONPATH=. .venv/bin/python tests/bench/first_put_probe.py --queues 10000 --pairs 1000

`--spy DIR`: py-spy (a dev tool, not a dependency) samples the GIL holder in each phase.
`--launcher env VAR=... --dump PATH --phases-out PATH`: for a broker run with throw-away
instrumentation (a sitecustomize on its PYTHONPATH that writes PATH when PATH.go appears);
docs/benchmarks/scale.md, "where the broker's first put went", says what was timed that way.
`--hold` keeps the broker up after the sends until Enter.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from connector import Admin, ClientConfig, Producer
from tests.bench.scale_probe import TICKS_PER_S, load_average, percentile
from tests.controller.controller_process import ControllerGroup
from tests.integration.broker_process import BrokerProcess

QUEUES_PER_TOPIC = 8
# written: only queues written before; mixed: a first put then a second, alternating;
# fresh: only first puts; written again: as the first phase, after the others
PHASES = ("written", "mixed", "fresh", "written again")
BODY = b"x" * 100


def _summary(name: str, latencies_s: list[float]) -> str:
    ms = [value * 1000 for value in latencies_s]
    return (f"{name:>22}: p50 {percentile(ms, 0.5):6.3f}  p90 {percentile(ms, 0.9):6.3f}  "
            f"p99 {percentile(ms, 0.99):7.3f}  max {max(ms):7.3f} ms  (n={len(ms)})")


def _spy(directory: Path | None, pid: int, phase: str) -> subprocess.Popen[bytes] | None:
    """py-spy sampling the thread that holds the GIL (`--gil`), folded stacks per phase."""
    if directory is None:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    out = directory / f"{phase.replace(' ', '-')}.txt"
    spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--gil",
                            "--threads", "-r", "500", "-f", "raw", "-o", str(out),
                            "-p", str(pid)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    return spy


def _thread_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) of each thread of `pid`, summed by thread name."""
    totals: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        name = name.rstrip("0123456789_-") or name
        totals[name] = totals.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / TICKS_PER_S
    return totals


def _timed(producer: Producer, topic: str, queue_id: int) -> float:
    start = time.perf_counter()
    assert producer.send(topic, BODY, queue_id=queue_id).ok
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queues", type=int, default=10_000)
    parser.add_argument("--pairs", type=int, default=1000)
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--launcher", nargs="*", default=[],
                        help="command prefix of the broker (e.g. env VAR=... for probes)")
    parser.add_argument("--dump", type=Path, default=None)
    parser.add_argument("--phases-out", type=Path, default=None,
                        help="write each phase's monotonic start and end here (JSON)")
    parser.add_argument("--spy", type=Path, default=None,
                        help="py-spy record --gil each phase into this directory")
    args = parser.parse_args()
    topics = args.queues // QUEUES_PER_TOPIC
    assert 2 * args.pairs <= topics * (QUEUES_PER_TOPIC - 1)
    work = Path(tempfile.mkdtemp(prefix="firstput-"))
    controllers = ControllerGroup(work / "controller", 1).start()
    broker = BrokerProcess(work / "broker", enableControllerMode="true",
                           controllerAddr=controllers.endpoint(1), brokerClusterName="scale",
                           brokerRole="SYNC_MASTER", flushDiskType="ASYNC_FLUSH",
                           mappedFileSizeCommitLog=str(64 << 20), launcher=args.launcher,
                           queuesMax=str(args.queues + QUEUES_PER_TOPIC))  # (scale_queues.py)
    try:
        broker.start()
        assert broker.process is not None
        admin = Admin(ClientConfig(brokers=(broker.endpoint,)))
        existing = {t["name"] for t in admin.list_topics()}
        for index in range(topics):
            if f"q{index}" not in existing:
                admin.create_topic(f"q{index}", queues=QUEUES_PER_TOPIC)
        chooser = random.Random(args.seed)
        fresh = [(f"q{t}", q) for t in range(topics) for q in range(1, QUEUES_PER_TOPIC)]
        chooser.shuffle(fresh)
        with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:  # master in its controller's eyes
                try:
                    if producer.send("q0", BODY, queue_id=0).ok:
                        break
                except Exception:  # noqa: BLE001 - not master yet
                    time.sleep(0.05)
            for index in range(topics):
                assert producer.send(f"q{index}", BODY, queue_id=0).ok
            print(f"broker pid {broker.process.pid}; streams open to {topics} topics; "
                  f"load {load_average()}", flush=True)
            results: dict[str, list[float]] = {}
            spans: dict[str, list[float]] = {}
            cursor = 0
            for phase in PHASES:
                spy = _spy(args.spy, broker.process.pid, phase)
                spans[phase] = [time.monotonic()]
                cpu_before = _thread_cpu_s(broker.process.pid)
                client_cpu_before_s = time.process_time()
                for _ in range(args.pairs):
                    if phase in ("mixed", "fresh"):
                        topic, queue_id = fresh[cursor]
                        cursor += 1
                        results.setdefault(f"{phase}: first", []).append(
                            _timed(producer, topic, queue_id))
                    if phase in ("mixed", "written", "written again"):
                        results.setdefault(f"{phase}: second", []).append(
                            _timed(producer, f"q{chooser.randrange(topics)}", 0))
                if spy is not None:
                    spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
                    spy.wait(timeout=60)
                spans[phase].append(time.monotonic())
                cpu_after = _thread_cpu_s(broker.process.pid)
                used_ms = {name: round((cpu_after[name] - cpu_before.get(name, 0.0)) * 1000)
                           for name in cpu_after}
                busiest = dict(sorted(((name, ms) for name, ms in used_ms.items() if ms),
                                      key=lambda item: -item[1]))
                client_ms = round((time.process_time() - client_cpu_before_s) * 1000)
                print(f"{phase}: {spans[phase][1] - spans[phase][0]:.2f} s; client CPU "
                      f"{client_ms} ms; broker CPU ms: total {sum(used_ms.values())}, by "
                      f"thread {busiest}", flush=True)
                print(f"after {phase}: load {load_average()}", flush=True)
        for name, latencies in results.items():
            print(_summary(name, latencies))
        print(f"load {load_average()}", flush=True)
        if args.phases_out is not None:
            args.phases_out.write_text(json.dumps(spans))
        if args.dump is not None:  # an instrumented broker writes it when asked (.go)
            Path(str(args.dump) + ".go").touch()
            deadline = time.monotonic() + 60
            while not args.dump.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        if args.hold:
            input(f"broker pid {broker.process.pid}: Enter to stop ")
    finally:
        broker.stop()
        controllers.stop_all()


if __name__ == "__main__":
    main()
