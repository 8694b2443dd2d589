"""Single-send latency of this tree against a git ref, two sets of 3 side by side, same run.

    .venv/bin/python tests/bench/bench_latency_ab.py [--base REF] [--rounds R] [--sends N]
        [--head-env KEY=VALUE ...] [--json]

(not in build.py's BENCHES: `bench all` would compare main with itself)

Why: on this shared 2-core machine the load average swings from 1 to 45 within an hour (chaos
campaigns, other benches), and the p50 of a single acknowledged send moves ±10 % between
rounds of one run; a change to the put path can only be judged against its base measured in
the same minutes. Sessions kept rewriting this comparison as a `/tmp` script; this is it.

Method: `git archive REF` (default `main`) into a temporary directory; one rocketha set of 3
from each tree (`rocketha-cluster up`, one controller, inSyncReplicas 2 with degradation,
ASYNC_FLUSH, as tests/bench/bench_latency.py), each started from its own tree, so brokers,
controller and proxy run that tree's code. Rounds alternate which set goes first; each round
sends N single 100 B messages with `Producer.send` from a client process started in the same
tree as the set (so the client's code is compared too). Per round and set it prints p50, p90,
p99, and from /proc the brokers' CPU per send (utime + stime of the three broker processes,
and of the master alone) and their voluntary context switches per send (every thread: each
is a thread going to sleep, i.e. a wake-up somewhere on or beside the path). The summary is
the median over the rounds; `--json`: the last line holds them (`base_*`, `head_*`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench import bench_peers as peers

ROOT = Path(__file__).resolve().parents[2]

WARM_UP_SENDS = 200
# run in the set's own tree (cwd): its client code sends; prints the latencies in seconds
_SENDS = """
import json, sys, time
from connector.client import ClientConfig, Producer
samples = []
config = ClientConfig(brokers=(sys.argv[1],), request_timeout_ms=30_000)
with Producer(config) as producer:
    for _ in range(int(sys.argv[2])):
        start = time.perf_counter()
        assert producer.send("latency", b"x" * 100).ok
        samples.append(time.perf_counter() - start)
print(json.dumps(samples))
"""


class TreeCluster(peers.RocketHACluster):
    """A set of 3 started from the source tree `root` (its `ha.cluster.main`, hence its brokers)."""

    def __init__(self, root: Path, directory: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(directory, 3, "ASYNC_FLUSH")
        self.root = root
        self.env = env or {}

    def _cli(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "ha.cluster", *args, "--dir",
                               str(self.directory)], cwd=self.root, capture_output=True,
                              text=True, timeout=300, check=False,
                              env=_env(self.root, self.env))
        if done.returncode != 0:
            raise SystemExit(f"rocketha-cluster {' '.join(args)} ({self.root}) failed:\n"
                             f"{done.stdout}\n{done.stderr}")
        return done.stdout

    def sends(self, endpoint: str, count: int) -> list[float]:
        done = subprocess.run([sys.executable, "-c", _SENDS, endpoint, str(count)],
                              cwd=self.root, capture_output=True, text=True, timeout=600,
                              check=False, env=_env(self.root, self.env))
        if done.returncode != 0:
            raise SystemExit(f"sends from {self.root} failed:\n{done.stderr}")
        return [float(value) for value in json.loads(done.stdout.strip().splitlines()[-1])]


def _env(root: Path, extra: dict[str, str]) -> dict[str, str]:
    return {**os.environ, **extra, "PYTHONPATH": str(root)}


def _proc_counters(pid: int) -> tuple[float, int]:
    """(CPU seconds, voluntary context switches of every thread) of one process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            for line in (task / "status").read_text().splitlines():
                if line.startswith("voluntary_ctxt_switches"):
                    switches += int(line.split()[1])
        except OSError:  # a thread that ended meanwhile
            continue
    return cpu_s, switches


def _export(ref: str, into: Path) -> Path:
    archive = into / "base.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", ref], cwd=ROOT, stdout=out, check=True)
    tree = into / "base"
    tree.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    archive.unlink()
    return tree


def run(base_ref: str, rounds: int, sends: int,
        head_env: dict[str, str] | None = None) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-latency-ab-"))
    sets = {"base": TreeCluster(_export(base_ref, work), work / "base-set"),
            "head": TreeCluster(ROOT, work / "head-set", head_env)}
    figures: dict[str, list[float]] = {}
    try:
        endpoints = {}
        for name, cluster in sets.items():
            cluster.start()
            endpoints[name] = cluster.config().brokers[0]
            peers.Admin(cluster.config()).create_topic("latency", queues=peers.QUEUES)
            cluster.sends(endpoints[name], WARM_UP_SENDS)
        pids = {name: cluster.brokers() for name, cluster in sets.items()}
        for index in range(rounds):
            order = list(sets) if index % 2 == 0 else list(sets)[::-1]
            line = [f"round {index + 1}/{rounds}, load {os.getloadavg()[0]:.1f}:"]
            for name in order:
                before = [_proc_counters(pid) for pid, _ in pids[name]]
                ordered = sorted(sets[name].sends(endpoints[name], sends))
                after = [_proc_counters(pid) for pid, _ in pids[name]]
                deltas = [(a[0] - b[0], a[1] - b[1], role)
                          for a, b, (_, role) in zip(after, before, pids[name], strict=True)]
                row = {"p50_ms": peers.percentile_ms(ordered, 0.5),
                       "p90_ms": peers.percentile_ms(ordered, 0.9),
                       "p99_ms": peers.percentile_ms(ordered, 0.99),
                       "cpu_us_per_send": sum(d[0] for d in deltas) / sends * 1e6,
                       "master_cpu_us_per_send": sum(d[0] for d in deltas
                                                     if d[2] == "MASTER") / sends * 1e6,
                       "switches_per_send": sum(d[1] for d in deltas) / sends}
                for key, value in row.items():
                    figures.setdefault(f"{name}_{key}", []).append(value)
                line.append(f"{name} p50 {row['p50_ms']:.3f} p90 {row['p90_ms']:.3f} p99 "
                            f"{row['p99_ms']:.2f} ms, CPU {row['cpu_us_per_send']:.0f} us "
                            f"(master {row['master_cpu_us_per_send']:.0f}), "
                            f"{row['switches_per_send']:.1f} switches per send")
            print("  ".join(line), flush=True)
    finally:
        for cluster in sets.values():
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)  # the base's tree and both stores (~39 MB)
    result: dict[str, Any] = {key: round(statistics.median(values), 4)
                              for key, values in figures.items()}
    result.update(base_ref=base_ref, rounds=rounds, sends_per_round=sends,
                  head_env=head_env or {}, machine=peers.machine())
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="main", help="git ref to compare with (main)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--sends", type=int, default=1000, help="sends per round and set")
    parser.add_argument("--head-env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment of the head set's processes and client only "
                             "(repeatable; with --base HEAD: an environment A/B)")
    parser.add_argument("--json", action="store_true", help="last line: the figures as JSON")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.sends < 10:
        parser.error("--rounds >= 1 and --sends >= 10")
    head_env = {}
    for pair in args.head_env:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"--head-env {pair!r}: expected KEY=VALUE")
        head_env[key] = value
    result = run(args.base, args.rounds, args.sends, head_env)
    for name in ("base", "head"):
        print(f"{name}: median of {args.rounds} rounds p50 {result[f'{name}_p50_ms']:.3f} / "
              f"p99 {result[f'{name}_p99_ms']:.2f} ms, CPU {result[f'{name}_cpu_us_per_send']:.0f}"
              f" us per send (master {result[f'{name}_master_cpu_us_per_send']:.0f}), "
              f"{result[f'{name}_switches_per_send']:.1f} switches per send", flush=True)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
