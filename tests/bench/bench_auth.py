"""Authentication cost: the signature check per request, in the core and end to end.

    PYTHONPATH=. python tests/bench/bench_auth.py [--json] [--calls N] [--requests N]

Method: (1) in process, N times: a client signs a DoAction (`sign_headers`) and the server's
gate checks it (`AuthGate.verify_headers`: header parsing, HMAC-SHA256, clock skew, the replay
cache under its lock, then the digest and the ACL decision of `check` for a Normal user with
one matching policy): microseconds per call for each step. (2) Two real broker processes on
127.0.0.1, one without authentication and one with authentication and authorization (aclFile),
the same `queue_offsets` DoAction one after another from one client (a new Flight client per
broker, kept): median and p99 latency and the difference, i.e. what a signed and authorized
request costs over the wire. With `--json` the last line is one JSON object
(`sign_us`, `verify_us`, `authorize_us`, `request_overhead_us`...). For `bench security`
(issue 16) `signature_check_us()` gives the figure alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pyarrow import flight

from conf.signing import Credentials, action_target, sign_headers
from controller.api import AuthData, Policy, User, authorize, requirement_of
from ha.broker.auth import AuthGate, AuthSettings
from tests.integration.broker_process import BrokerProcess

ALICE = User("alice", "AK_alice", "alice-secret-0123456789")
ADMIN = User("admin", "AK_admin", "admin-secret-0123456789", "Super")


def _table() -> AuthData:
    return AuthData(1, (ADMIN, ALICE), (Policy("User:alice", "Topic:bench*", ("Pub", "Sub")),))


def signature_check_us(calls: int = 20_000) -> dict[str, float]:
    """Per call, in microseconds: signing, verifying (with the replay cache), authorizing."""
    gate = AuthGate(AuthSettings(authentication_enabled=True, authorization_enabled=True,
                                 replay_cache_max=max(calls, 1)), _table())
    credentials = Credentials(ALICE.access_key, ALICE.secret_key)
    body = json.dumps({"topic": "bench-t"}).encode()
    target = action_target("queue_offsets", body)
    started = time.perf_counter()
    signed = [sign_headers(credentials, "DO_ACTION", target, int(time.time() * 1000))
              for _ in range(calls)]
    sign_s = time.perf_counter() - started
    headers = [{k.decode(): [v.decode()] for k, v in pairs} for pairs in signed]
    started = time.perf_counter()
    for one in headers:
        found = gate.verify_headers(one, "DO_ACTION")
        assert found.error is None, found.error
    verify_s = time.perf_counter() - started
    requirement = requirement_of("broker", "queue_offsets")
    assert requirement is not None
    request = {"topic": "bench-t"}
    started = time.perf_counter()
    for _ in range(calls):
        assert authorize(gate.auth_data, ALICE, requirement, request, "127.0.0.1")[0].allowed
    authorize_s = time.perf_counter() - started
    return {"sign_us": round(1e6 * sign_s / calls, 2),
            "verify_us": round(1e6 * verify_s / calls, 2),
            "authorize_us": round(1e6 * authorize_s / calls, 2)}


def _latencies(broker: BrokerProcess, credentials: Credentials | None, requests: int
               ) -> list[float]:
    client = flight.FlightClient(f"grpc://{broker.endpoint}")
    body = json.dumps({"topic": "bench-t"}).encode()
    result = []
    try:
        for _ in range(requests):
            started = time.perf_counter()
            headers = [] if credentials is None else sign_headers(
                credentials, "DO_ACTION", action_target("queue_offsets", body),
                int(time.time() * 1000))
            options = flight.FlightCallOptions(timeout=5, headers=headers)
            list(client.do_action(flight.Action("queue_offsets", body), options))
            result.append(time.perf_counter() - started)
    finally:
        client.close()
    return result


def request_overhead(requests: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-auth-") as directory:
        root = Path(directory)
        acl = root / "acl.json"
        acl.write_text(json.dumps(_table().to_json()))
        acl.chmod(0o600)
        admin = Credentials(ADMIN.access_key, ADMIN.secret_key)
        plain = BrokerProcess(root / "plain").start()
        secured = BrokerProcess(root / "secured", credentials=admin,
                                authenticationEnabled="true", authorizationEnabled="true",
                                aclFile=str(acl)).start()
        try:
            plain.action("create_topic", {"topic": "bench-t"})
            secured.action("create_topic", {"topic": "bench-t"})
            alice = Credentials(ALICE.access_key, ALICE.secret_key)
            _latencies(plain, None, 200)  # warm up both
            _latencies(secured, alice, 200)
            rounds = []
            for _ in range(3):  # interleaved, so load on the machine hits both alike
                rounds.append((_latencies(plain, None, requests // 3),
                               _latencies(secured, alice, requests // 3)))
        finally:
            plain.stop()
            secured.stop()
    off = [x for pair in rounds for x in pair[0]]
    on = [x for pair in rounds for x in pair[1]]
    return {"requests": len(on),
            "plain_p50_us": round(1e6 * statistics.median(off), 1),
            "signed_p50_us": round(1e6 * statistics.median(on), 1),
            "plain_p99_us": round(1e6 * sorted(off)[int(len(off) * 0.99)], 1),
            "signed_p99_us": round(1e6 * sorted(on)[int(len(on) * 0.99)], 1),
            "request_overhead_us": round(1e6 * (statistics.median(on)
                                                - statistics.median(off)), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args(argv)
    figures: dict[str, Any] = signature_check_us(args.calls)
    print(f"in process, per call: sign {figures['sign_us']} us, verify {figures['verify_us']} "
          f"us, authorize {figures['authorize_us']} us")
    wire = request_overhead(args.requests)
    print(f"queue_offsets round trip, median: plain {wire['plain_p50_us']} us, signed + "
          f"authorized {wire['signed_p50_us']} us (+{wire['request_overhead_us']} us); p99 "
          f"{wire['plain_p99_us']} / {wire['signed_p99_us']} us")
    figures.update(wire)
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
