"""`rocketha-cluster restart --rolling --dir D [--json]`: restart every process, one at a time.

Why: a config change or a new release means restarting every process; done one at a time in
the right order, producers see pauses of a fraction of a second, never an outage or a lost
message. The order:

    1. the controllers, followers first, the leader last. A leader's SIGTERM hands its role
       to the best follower first (TimeoutNow, controller/raft/transfer.py), so the group has a
       leader again within a round trip, not an election timeout; brokers keep serving
       meanwhile (docs/design.md §5.6). Each waits until the restarted node follows a leader
       and has applied what the leader had committed when it came back.
    2. per replica set, its slaves, then its master. A master's SIGTERM hands its role to
       an in-sync slave first (ha/broker/handover.py). Each waits until the restarted broker
       is back in its set's SyncStateSet (so the next stop still has an in-sync successor).

Around the restarts a write probe (connector/admin/write_probe.py, a separate process: this
tool may not import the client) keeps one idempotent producer per replica set busy and checks
at the end what the masters hold. The last line (with --json, the only line) is a JSON object:
`steps` (one per process: name, kind, role before, seconds, `write_pause_s`: the longest time
a set's producer went without an acknowledgement while that step ran, and
`write_pause_from_s`: when that began, in seconds from the step's start, and
`write_pause_set`: in which set), `longest_write_pause_s`
and `longest_write_pause_step` (the step it fell in), `lost_acked`, `duplicated`,
`failed_puts`, `acked`, and the probe's figures per set.
Needs controller mode (a cluster without controllers has no handover to wait for).
"""

from __future__ import annotations

import argparse
import json
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ha.broker.peer import broker_info
from ha.cluster import auth as cluster_auth
from ha.cluster.controllers import LocalControllers, controller_status
from ha.cluster.hosts import host_of
from ha.cluster.security import CLIENT_PROPERTIES, client_tls

__all__ = ["run"]

STEP_TIMEOUT_S = 120.0  # one process back (a broker recovering its store takes longest)
POLL_S = 0.1
ROUNDING_S = 0.002  # the probe rounds times to ms: a gap's span and its length may differ
PROBE_READY_TIMEOUT_S = 60.0
PROBE_REPORT_TIMEOUT_S = 300.0  # the read-back of every probe message
ROOT = Path(__file__).resolve().parents[2]


def run(args: argparse.Namespace, cluster: Any) -> int:
    """`cluster`: ha.cluster.main.Cluster for args.dir (passed in: main imports this module)."""
    manifest = cluster.load()
    if not manifest.get("controllers"):
        raise SystemExit("rocketha-cluster: restart --rolling needs a cluster with controllers")
    directory: Path = cluster.directory
    tls = client_tls(directory, manifest)
    credentials = cluster_auth.admin_credentials(directory)
    controllers = LocalControllers(directory)
    say: Callable[[str], None] = (lambda line: None) if args.json else print
    probe = _start_probe(directory, manifest)
    steps: list[dict[str, Any]] = []
    try:
        for controller in _controller_order(manifest, tls, credentials):
            started = time.monotonic()
            controllers.stop(controller)
            controllers.start_missing([controller])
            _wait(lambda c=controller: _controller_caught_up(c, manifest, tls, credentials),
                  f"{controller['name']} to follow a leader and catch up")
            steps.append(_step(controller["name"], "controller", controller["_role"], started))
            say(f"{steps[-1]['process']}\t{steps[-1]['role']}\t{steps[-1]['seconds']}s")
        for broker in _broker_order(manifest, tls, credentials):
            started = time.monotonic()
            cluster.stop(broker)  # SIGTERM: a master hands over first
            cluster.start(broker)
            cluster.wait_ready(broker)
            _wait(lambda b=broker: _back_in_sync_state_set(b, manifest, tls, credentials),
                  f"{broker['name']} back in its SyncStateSet")
            steps.append(_step(broker["name"], "broker", broker["_role"], started))
            say(f"{steps[-1]['process']}\t{steps[-1]['role']}\t{steps[-1]['seconds']}s")
        report = _probe_report(probe)
        _attribute_pauses(steps, report)
    finally:
        if probe.poll() is None:
            probe.kill()
    print(json.dumps({"steps": steps, **report}))
    return 0 if not (report["lost_acked"] or report["duplicated"]) else 1


def _step(name: str, kind: str, role: str, started: float) -> dict[str, Any]:
    """One step's line; `_window` (its monotonic span) is taken out by `_attribute_pauses`."""
    ended = time.monotonic()
    return {"process": name, "kind": kind, "role": role, "seconds": round(ended - started, 2),
            "_window": (started, ended)}


def _attribute_pauses(steps: list[dict[str, Any]], report: dict[str, Any]) -> None:
    """Each step's `write_pause_s`: the longest probe gap (no acknowledgement in one set)
    whose middle falls in its span (the probe runs in another process; both read
    CLOCK_MONOTONIC). The middle, not the start: a gap begins with the last ack before the
    cause, so the pause of a master's SIGTERM starts a few ms before its step does. And the
    step of the longest pause (None: between steps)."""
    gaps = [(a, b, name) for name, figures in report["sets"].items()
            for a, b in figures.pop("gaps", [])]
    for step in steps:
        started, ended = step.pop("_window")
        inside = [(b - a, a - started, name) for a, b, name in gaps
                  if started <= (a + b) / 2 < ended]
        pause_s, from_s, name = max(inside, default=(0.0, 0.0, None))
        step["write_pause_s"] = round(pause_s, 3)
        step["write_pause_from_s"] = round(from_s, 2)  # when it began, from the step's start
        step["write_pause_set"] = name
    worst = max(steps, key=lambda step: step["write_pause_s"], default=None)
    report["longest_write_pause_step"] = (
        worst["process"] if worst is not None and worst["write_pause_s"]
        >= report["longest_write_pause_s"] - ROUNDING_S else None)


def _wait(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not done():
        if time.monotonic() >= deadline:
            raise SystemExit(f"rocketha-cluster: restart --rolling stopped: no {what} within "
                             f"{STEP_TIMEOUT_S:.0f}s")
        time.sleep(POLL_S)


def _endpoint(entry: dict[str, Any]) -> str:
    return f"{host_of(entry)}:{entry['port']}"


def _controller_order(manifest: dict[str, Any], tls: Any, credentials: Any
                      ) -> list[dict[str, Any]]:
    """Followers first, the leader last; each entry with its role now (`_role`)."""
    entries = []
    for controller in manifest["controllers"]:
        status = controller_status(_endpoint(controller), 2.0, tls, credentials) or {}
        entries.append({**controller, "_role": status.get("role", "down")})
    return sorted(entries, key=lambda c: c["_role"] == "leader")


def _controller_caught_up(controller: dict[str, Any], manifest: dict[str, Any], tls: Any,
                          credentials: Any) -> bool:
    mine = controller_status(_endpoint(controller), 1.0, tls, credentials)
    if mine is None or mine.get("role") not in ("follower", "leader"):
        return False
    leaders = [s for s in (controller_status(_endpoint(c), 1.0, tls, credentials)
                           for c in manifest["controllers"]) if s and s["role"] == "leader"]
    return len(leaders) == 1 and mine["applied_index"] >= leaders[0]["commit_index"]


def _broker_order(manifest: dict[str, Any], tls: Any, credentials: Any
                  ) -> list[dict[str, Any]]:
    """Set by set; in each, the slaves first and the master last (`_role`: its role now)."""
    ordered = []
    for name in sorted({broker["set"] for broker in manifest["brokers"]}):
        members = []
        for broker in manifest["brokers"]:
            if broker["set"] == name:
                info = broker_info(_endpoint(broker), 2.0, tls, credentials) or {}
                members.append({**broker, "_role": info.get("role", "DOWN")})
        ordered += sorted(members, key=lambda b: b["_role"] == "MASTER")
    return ordered


def _back_in_sync_state_set(broker: dict[str, Any], manifest: dict[str, Any], tls: Any,
                            credentials: Any) -> bool:
    """The set's master (maybe this broker) holds this broker in its SyncStateSet."""
    mine = broker_info(_endpoint(broker), 1.0, tls, credentials)
    broker_id = ((mine or {}).get("controller") or {}).get("broker_id")
    if broker_id is None:
        return False
    for member in manifest["brokers"]:
        if member["set"] != broker["set"]:
            continue
        info = mine if member["name"] == broker["name"] else broker_info(
            _endpoint(member), 1.0, tls, credentials)
        if info and info.get("role") == "MASTER":
            return broker_id in (info.get("sync_state_set") or [])
    return False


def _start_probe(directory: Path, manifest: dict[str, Any]) -> subprocess.Popen[str]:
    controller_addr = ";".join(_endpoint(c) for c in manifest["controllers"])
    command = [sys.executable, "-m", "connector.admin.write_probe", "--controller",
               controller_addr]
    if manifest.get("tls"):
        command += ["--client-config", str(directory / CLIENT_PROPERTIES)]
    log = directory / "logs" / "write-probe.log"  # the client's own warnings go here
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as stderr:
        probe = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=stderr, text=True, cwd=ROOT)
    assert probe.stdout is not None
    # "ready" once every set acked a put (nothing is buffered before it: select is exact)
    readable, _, _ = select.select([probe.stdout], [], [], PROBE_READY_TIMEOUT_S)
    line = (probe.stdout.readline() if readable
            else f"nothing within {PROBE_READY_TIMEOUT_S:.0f}s")
    if line.strip() != "ready":
        probe.kill()
        raise SystemExit(f"rocketha-cluster: the write probe did not start ({line!r}; see "
                         f"{log})")
    return probe


def _probe_report(probe: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = probe.communicate("", timeout=PROBE_REPORT_TIMEOUT_S)  # stdin closed: it reports
    body = json.loads(out.strip().splitlines()[-1])
    return {"longest_write_pause_s": body["longest_write_pause_s"],
            "lost_acked": body["lost_acked"], "duplicated": body["duplicated"],
            "failed_puts": body["failed"], "acked": body["acked"], "sets": body["sets"]}
