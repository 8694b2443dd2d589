"""Single-message publish latency at 3 replicas, rocketha against JetStream R3, same run.

    python3 build.py bench latency [--json] [--rounds R] [--sends N] [--no-peer]

Method: one rocketha set of 3 (`rocketha-cluster up`, one controller, inSyncReplicas=2 with
degradation, ASYNC_FLUSH: an ack means the master and one slave hold the bytes) and one
3-node NATS JetStream cluster (R3 stream, file storage, default sync: an ack means a majority
stored it), both from tests/bench/bench_peers.py. The two take turns, R rounds of N sends
each, one message in flight: `Producer.send` (one 100 B message, one round trip) against
nats-py's `js.publish`, from a client connected to the stream's leader (`jetstream_*`: like
for like, as our producer talks to the master) and from one connected to a follower
(`jetstream_follower_*`: one forwarding hop more, what two of three JetStream clients get;
bench_peers.nats_placement says why both). Before 2026-12-03 the JetStream client connected to
a server picked at random each round. Each round gives a p50 and a p99 per system; the
figures are the medians over the rounds, so a burst of load from the other jobs on this
shared machine moves one round, not the result. The load average is printed with each round.

Why this and not `bench peers`: the same latency row, in about a minute instead of ten, for
measuring a change to the put path before and after (README, "Where the time of one
acknowledged put goes"). With --json the last line holds `latency_p50_ratio` and
`latency_p99_ratio` (ours / the leader-connected JetStream client's; lower is better, the goal
is p50 <= 1.5) and `latency_p50_ratio_via_follower`, `latency_p99_ratio_via_follower`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench import bench_peers as peers

ROOT = Path(__file__).resolve().parents[2]

BODY_BYTES = 100
WARM_UP_SENDS = 200


SendLoop = Callable[[int], list[float]]  # n single sends, one in flight -> their latencies (s)


@contextlib.contextmanager
def started_set(work: Path) -> Iterator[peers.RocketHACluster]:
    """The set of 3 of the module docstring with its topic "latency", warmed up; stopped
    afterwards."""
    ours = peers.RocketHACluster(work, 3, "ASYNC_FLUSH")
    try:
        ours.start()
        config = ours.config()
        peers.Admin(config).create_topic("latency", queues=peers.QUEUES)
        peers.rh_latency(config, "latency", WARM_UP_SENDS)
        yield ours
    finally:
        ours.stop()


@contextlib.contextmanager
def send_loops(work: Path, with_peer: bool) -> Iterator[dict[str, SendLoop]]:
    """The systems compared, started and warmed up: {"rocketha": ..., "jetstream": ...}
    (a set of 3 and an R3 cluster, as the module docstring says), stopped afterwards."""
    theirs = None
    with started_set(work / "rocketha") as ours:
        config = ours.config()
        loops: dict[str, SendLoop] = {
            "rocketha": lambda count: peers.rh_latency(config, "latency", count)}
        try:
            if with_peer:
                theirs = peers.NatsCluster(peers.ensure_peer_tools(), work / "nats",
                                           sync_always=False).start()
                servers = theirs.servers
                asyncio.run(peers.nats_ready(servers))
                asyncio.run(peers.nats_stream(servers, "LATENCY", 3))
                leader, follower = asyncio.run(peers.nats_placement(theirs, "LATENCY"))
                for url in (leader, follower):
                    asyncio.run(peers.nats_latency([url], "LATENCY", WARM_UP_SENDS))
                loops["jetstream"] = lambda count: asyncio.run(
                    peers.nats_latency([leader], "LATENCY", count))
                loops["jetstream_follower"] = lambda count: asyncio.run(
                    peers.nats_latency([follower], "LATENCY", count))
            yield loops
        finally:
            if theirs is not None:
                theirs.stop()


def run(rounds: int, sends: int, with_peer: bool) -> dict[str, Any]:
    figures: dict[str, list[float]] = {}
    with send_loops(Path(tempfile.mkdtemp(prefix="bench-latency-")), with_peer) as loops:
        for index in range(rounds):
            samples = {system: loop(sends) for system, loop in loops.items()}
            line = [f"round {index + 1}/{rounds}, load {os.getloadavg()[0]:.1f}:"]
            for system, values in samples.items():
                for name, fraction in (("p50", 0.5), ("p99", 0.99)):
                    figures.setdefault(f"{system}_latency_{name}_ms", []).append(
                        peers.percentile_ms(values, fraction))
                line.append(f"{system} p50 {figures[f'{system}_latency_p50_ms'][-1]:.3f} / "
                            f"p99 {figures[f'{system}_latency_p99_ms'][-1]:.3f} ms")
            print("  ".join(line), flush=True)
    result: dict[str, Any] = {name: round(statistics.median(values), 4)
                              for name, values in figures.items()}
    result.update(rounds=rounds, sends_per_round=sends, body_bytes=BODY_BYTES,
                  machine=peers.machine())
    if with_peer:
        for name in ("p50", "p99"):
            result[f"latency_{name}_ratio"] = round(
                result[f"rocketha_latency_{name}_ms"] / result[f"jetstream_latency_{name}_ms"], 3)
            result[f"latency_{name}_ratio_via_follower"] = round(
                result[f"rocketha_latency_{name}_ms"]
                / result[f"jetstream_follower_latency_{name}_ms"], 3)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="last line: the figures as JSON")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sends", type=int, default=1000, help="sends per round and system")
    parser.add_argument("--no-peer", action="store_true", help="rocketha only (no NATS)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.sends < 10:
        parser.error("--rounds >= 1 and --sends >= 10")
    result = run(args.rounds, args.sends, not args.no_peer)
    summary = (f"median of {args.rounds} rounds: rocketha p50 "
               f"{result['rocketha_latency_p50_ms']:.3f} / p99 "
               f"{result['rocketha_latency_p99_ms']:.3f} ms")
    if not args.no_peer:
        summary += (f"; JetStream R3 p50 {result['jetstream_latency_p50_ms']:.3f} / p99 "
                    f"{result['jetstream_latency_p99_ms']:.3f} ms at the leader, "
                    f"{result['jetstream_follower_latency_p50_ms']:.3f} / "
                    f"{result['jetstream_follower_latency_p99_ms']:.3f} ms via a follower; "
                    f"ratio p50 {result['latency_p50_ratio']:.2f} "
                    f"({result['latency_p50_ratio_via_follower']:.2f} via a follower), p99 "
                    f"{result['latency_p99_ratio']:.2f}")
    print(summary, flush=True)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
