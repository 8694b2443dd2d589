"""TCP under packet loss: what one request and its answer cost over one connection when a host
drops a share of its packets (the chaos nemesis' `loss` fault).

    python3 build.py bench tcp_loss [--json] [--seconds S] [--percents 0,30,55] [--connections N]

Why: in chaos campaigns (issue 18) the slowest recoveries are packet loss on a master's host
(30-80 % of its packets, both ways, for 3-6 s): no failover happens (the master still answers
some heartbeats), and a producer's put in flight waits for TCP to get the request and its
answer through. This benchmark separates what TCP itself costs at those rates from what
rocketha adds: plain sockets, no rocketha code in the path.

Method: two test hosts (ha/cluster/netns.py, root only); an echo server on host 1; on host 2,
N connections (threads), each sending 100 bytes and waiting for them back, one in flight per
connection, for S seconds per case; nftables `numgen` drops p % of host 1's packets to and from
the network (HostNetwork.lose, as the nemesis does). Cases per rate: the kernel's defaults
(RTO from 200 ms, doubling up to 120 s), and `capped`: TCP_RTO_MIN_US=20000 and
TCP_RTO_MAX_MS=1000 on both sockets (Linux >= 6.15; the sysctls net.ipv4.tcp_rto_min_us and
tcp_rto_max_ms set the same per network namespace). A round trip still in flight when the time
is up counts at its age (so a stuck one is not dropped from the tail).

Figures per case: round trips, p50 / p90 / p99 / max in ms, and the share over 3 s (the
issue's RTO goal). With --json the last line holds them all.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ha.cluster.netns import HostNetwork

PORT = 47_391
MESSAGE_BYTES = 100
TCP_RTO_MAX_MS = 44  # linux/tcp.h (6.15+)
TCP_RTO_MIN_US = 45
CAPPED_RTO_MIN_US = 20_000
CAPPED_RTO_MAX_MS = 1_000  # the kernel's lowest accepted cap
SLOW_S = 3.0


def _tune(sock: socket.socket, capped: bool) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if capped:
        sock.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MIN_US, CAPPED_RTO_MIN_US)
        sock.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MAX_MS, CAPPED_RTO_MAX_MS)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("peer closed")
        data += chunk
    return data


def serve(address: str, capped: bool) -> None:
    """Echo every connection's messages back (runs on host 1 until killed)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, PORT))
    listener.listen(64)

    def echo(conn: socket.socket) -> None:
        _tune(conn, capped)
        try:
            while True:
                conn.sendall(_receive_exactly(conn, MESSAGE_BYTES))
        except OSError:
            conn.close()

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=echo, args=(conn,), daemon=True).start()


def ping(address: str, capped: bool, connections: int, seconds: float,
         start_file: str) -> None:
    """Connect every connection, wait for `start_file` (the loss is on), then ping-pong for
    `seconds`; print one JSON object: the latencies (s) of the round trips done, and the ages of
    those still in flight at the end (lower bounds of theirs)."""
    socks = []
    for _ in range(connections):
        sock = socket.create_connection((address, PORT), timeout=30)
        sock.settimeout(None)
        _tune(sock, capped)
        socks.append(sock)
    print("connected", flush=True)
    while not Path(start_file).exists():
        time.sleep(0.01)
    end = time.monotonic() + seconds
    latencies: list[float] = []
    in_flight_since: dict[int, float] = {}
    lock = threading.Lock()

    def run(index: int, sock: socket.socket) -> None:
        payload = b"x" * MESSAGE_BYTES
        try:
            while time.monotonic() < end:
                started = time.monotonic()
                with lock:
                    in_flight_since[index] = started
                sock.sendall(payload)
                _receive_exactly(sock, MESSAGE_BYTES)
                with lock:
                    latencies.append(time.monotonic() - started)
                    del in_flight_since[index]
        except OSError:
            pass  # the run is over (the sockets are closed with the process)

    for index, sock in enumerate(socks):
        threading.Thread(target=run, args=(index, sock), daemon=True).start()
    time.sleep(seconds)
    time.sleep(0.05)  # a round trip that ends on the deadline lands
    now = time.monotonic()
    with lock:
        report = {"latencies_s": list(latencies),
                  "in_flight_ages_s": [now - since for since in in_flight_since.values()]}
    print(json.dumps(report), flush=True)


def _percentile(sorted_values: list[float], fraction: float) -> float:
    index = min(len(sorted_values) - 1, max(0, int(fraction * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def run_case(network: HostNetwork, percent: int, capped: bool, connections: int,
             seconds: float) -> dict[str, float | int]:
    server_host, client_host = network.host(1), network.host(2)
    mode = ["--capped"] if capped else []
    me = [sys.executable, str(Path(__file__).resolve())]
    start_file = Path(f"/tmp/rocketha-tcp-loss-{network.name}")
    start_file.unlink(missing_ok=True)
    server = subprocess.Popen([*server_host.launcher(), *me, "--serve", server_host.address,
                               *mode])
    client = None
    try:
        time.sleep(0.5)
        client = subprocess.Popen(
            [*client_host.launcher(), *me, "--ping", server_host.address, *mode,
             "--connections", str(connections), "--seconds", str(seconds),
             "--start-file", str(start_file)], stdout=subprocess.PIPE, text=True)
        assert client.stdout is not None
        assert client.stdout.readline().strip() == "connected"
        if percent:
            network.lose(server_host, percent)
        start_file.touch()
        result = json.loads(client.stdout.readline())
    finally:
        network.heal(server_host)
        for process in (client, server):
            if process is not None:
                process.kill()
                process.wait()
        start_file.unlink(missing_ok=True)
    done = sorted(result["latencies_s"])
    every = sorted(done + result["in_flight_ages_s"])
    return {"percent": percent, "capped": capped, "round_trips": len(done),
            "in_flight_at_end": len(result["in_flight_ages_s"]),
            "p50_ms": round(_percentile(every, 0.5) * 1000, 1),
            "p90_ms": round(_percentile(every, 0.9) * 1000, 1),
            "p99_ms": round(_percentile(every, 0.99) * 1000, 1),
            "max_ms": round(every[-1] * 1000, 1),
            "over_3s_share": round(sum(v > SLOW_S for v in every) / len(every), 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--percents", default="0,30,55")
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--serve", metavar="ADDRESS")
    parser.add_argument("--ping", metavar="ADDRESS")
    parser.add_argument("--capped", action="store_true")
    parser.add_argument("--start-file")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.capped)
        return 0
    if args.ping:
        ping(args.ping, args.capped, args.connections, args.seconds, args.start_file)
        return 0
    cases = []
    with HostNetwork(2) as network:
        for percent in (int(p) for p in args.percents.split(",")):
            for capped in (False, True):
                case = run_case(network, percent, capped, args.connections, args.seconds)
                cases.append(case)
                print(f"loss {percent:3d} % {'capped ' if capped else 'default'}: "
                      f"{case['round_trips']:6d} round trips, p50 {case['p50_ms']:8.1f} ms, "
                      f"p90 {case['p90_ms']:8.1f}, p99 {case['p99_ms']:8.1f}, "
                      f"max {case['max_ms']:8.1f}, over 3 s {case['over_3s_share']:.1%}",
                      flush=True)
    if args.json:
        print(json.dumps({"bench": "tcp_loss", "seconds": args.seconds,
                          "connections": args.connections, "cases": cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
