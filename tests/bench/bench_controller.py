"""Controller benchmark: Raft-replicated request rate and controller leader failover time.

    PYTHONPATH=. python tests/bench/bench_controller.py [--json] [--requests N] [--trials K]

Method: three real controller processes on 127.0.0.1 (tests/controller/controller_process.py,
50 ms ticks, election timeout 6-12 ticks). (1) `register_broker` calls one after another from
one client (each is one Raft entry: fsync on the leader and a majority, then applied):
requests/s and p50/p99 latency; the same for `broker_heartbeat` (not in the log) as the
same-run baseline, so the ratio shows the price of the log. (2) K times: SIGKILL the leader
and time until the two others agree on a new one (then restart the killed node). With
`--json` the last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.controller.controller_process import ControllerGroup, call


def _latencies(endpoint: str, action: str, bodies: list[dict[str, object]]) -> list[float]:
    result = []
    for body in bodies:
        start = time.perf_counter()
        reply = call(endpoint, action, body)
        result.append(time.perf_counter() - start)
        assert reply["status"] == "OK", reply
    return result


def _summary(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "per_s": round(len(ordered) / sum(ordered), 1),
        "p50_ms": round(1000 * ordered[len(ordered) // 2], 2),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-controller-") as directory:
        group = ControllerGroup(Path(directory), 3).start()
        try:
            leader = group.wait_leader()
            endpoint = group.endpoint(leader)
            registers = [{"cluster_name": "c", "broker_name": f"s{i % 50}",
                          "broker_address": f"h:{i}"} for i in range(args.requests)]
            logged = _summary(_latencies(endpoint, "register_broker", registers))
            beats = [{"cluster_name": "c", "broker_name": "s0", "broker_id": 1,
                      "broker_address": "h:0"} for _ in range(args.requests)]
            unlogged = _summary(_latencies(endpoint, "broker_heartbeat", beats))
            failovers = []
            for _ in range(args.trials):
                leader = group.wait_leader()
                start = time.perf_counter()
                group.kill(leader)
                group.wait_leader(timeout_s=10.0, not_id=leader)
                failovers.append(time.perf_counter() - start)
                group.start(leader)
        finally:
            group.stop_all()
    result = {
        "register_broker": logged, "broker_heartbeat": unlogged,
        "logged_vs_unlogged_latency_ratio": round(logged["p50_ms"] / unlogged["p50_ms"], 2),
        "leader_failover_s": {"trials": len(failovers),
                              "p50": round(statistics.median(failovers), 3),
                              "max": round(max(failovers), 3)},
    }
    print(f"register_broker (Raft entry, fsync x3): {logged}")
    print(f"broker_heartbeat (no log):               {unlogged}")
    print(f"leader failover after SIGKILL: {result['leader_failover_s']}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
