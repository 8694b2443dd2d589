"""Failover benchmark: RTO of a replica set in controller mode, and acknowledged messages lost.

    python3 build.py bench failover [--json] [--trials N] [--pauses N] [--pause-s S]
                                    [--set key=value ...] [--hosts]

Method: `rocketha-cluster up --controllers 1 --replica-sets 1 --replicas 3` on 127.0.0.1 with
the default heartbeat settings (brokerHeartbeatInterval 1000 ms, controllerHeartbeatTimeoutMs
3000 ms) and quorum inSyncReplicas=2 with adaptive degradation (minInSyncReplicas=1, as in the
demo; `--set` changes any broker key). One producer thread sends single keyed messages without
pause through a controller-configured, idempotent client (it follows the master the controller
names; a retry of a send the dead master stored is recognised, not stored twice;
`--no-idempotent` shows the at-least-once alternative).
Each trial: wait until the set is whole (3 alive brokers, an accepted SyncStateSet of 3), let
the producer run, SIGKILL the current master, and take RTO = time from the SIGKILL to the first
PUT_OK the producer receives for a send it started after the SIGKILL (only the new master can
ack that; a reply already on its way from the old master does not count). The killed broker is
then restarted (`rocketha-cluster up`) and must come back as SLAVE before the next trial. At the
end every PUT_OK message is looked for on the final master: `lost_acked` counts those missing,
`duplicated` those stored twice; both must be 0.

Pause mode (`--pauses N`, after the SIGKILL trials; 0 skips it): the master is stopped with
SIGSTOP for `--pause-s` (default 6 s, as in the fault run of issue 15) instead of killed, then
resumed with SIGCONT and must come back as a SLAVE. The producer's request timeout (2 s) is
shorter than the pause, but what counts is when the first PUT_OK of a send started after the
SIGSTOP comes back: the controller elects another master after controllerHeartbeatTimeoutMs,
and an idempotent producer leaves the paused master once the controller names its replacement
(connector/client/master_watch.py) instead of waiting for the pause to end. Goal: pause RTO <=
controllerHeartbeatTimeoutMs + 1 s (4 s).

`--hosts` (root): the controller and every broker on a test host of its own (`rocketha-cluster
up --hosts`: network namespaces on a bridge, 198.18.0.0/15 addresses), the producer in the root
namespace: detection, election and the producer's switch go over a real network stack.

With `--json` the last line is one JSON object with `trials`, `rto_p50_s`, `rto_max_s`,
`lost_acked`, `pause_trials`, `pause_rto_p50_s`, `pause_rto_max_s`, `pause_lost_acked` (the
acknowledged messages lost over the whole run, the pauses included) and more.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig, Consumer, Producer
from ha.cluster.processes import pid_alive

ROOT = Path(__file__).resolve().parents[2]

TOPIC = "failover"
QUEUES = 4
WHOLE_TIMEOUT_S = 60.0
RTO_TIMEOUT_S = 30.0
SENDS_MAX = 10_000_000  # the producer's loop bound (it also stops when told)


def _cluster(directory: Path, *args: str) -> str:
    command = [sys.executable, "-m", "ha.cluster", *args, "--dir", str(directory)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=180,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _status(directory: Path) -> list[dict[str, Any]]:
    return json.loads(_cluster(directory, "status", "--json"))["processes"]


def _brokers(directory: Path) -> list[dict[str, Any]]:
    return [p for p in _status(directory) if p.get("kind") == "broker"]


def _wait_whole(directory: Path, admin_info: Any) -> dict[str, Any]:
    """Until one MASTER, two SLAVEs, and the master's accepted SyncStateSet has 3 members."""
    deadline = time.monotonic() + WHOLE_TIMEOUT_S
    while time.monotonic() < deadline:
        brokers = _brokers(directory)
        masters = [b for b in brokers if b["role"] == "MASTER"]
        slaves = [b for b in brokers if b["role"] == "SLAVE"]
        if len(masters) == 1 and len(slaves) == 2:
            info = admin_info(masters[0]["endpoint"])
            if info and len(info.get("accepted_sync_state_set") or []) == 3:
                return masters[0]
        time.sleep(0.2)
    raise SystemExit(f"the replica set did not become whole within {WHOLE_TIMEOUT_S:.0f}s: "
                     f"{[(b['name'], b['role']) for b in _brokers(directory)]}")


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + WHOLE_TIMEOUT_S
    while pid_alive(pid):
        if time.monotonic() > deadline:
            raise SystemExit(f"pid {pid} still alive {WHOLE_TIMEOUT_S:.0f}s after SIGKILL")
        time.sleep(0.05)


class _Load:
    """One producer thread: single keyed sends, PUT_OK times and message ids recorded."""

    def __init__(self, controller: str, idempotent: bool) -> None:
        self._idempotent = idempotent
        # the default request timeout (10 s): longer than a pause, as a user's would be
        self._config = ClientConfig(controller=controller,
                                    send_deadline_ms=int(RTO_TIMEOUT_S * 1000),
                                    retries_max=10_000, backoff_initial_ms=10,
                                    backoff_max_ms=100)
        self.acked: list[tuple[str, int, int]] = []  # (body, queue_id, queue_offset)
        self.ok_times: list[tuple[float, float]] = []  # (send started, PUT_OK received)
        self.other_statuses: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=RTO_TIMEOUT_S + 10)

    def first_ok_after(self, moment: float, timeout_s: float) -> float | None:
        """When the first PUT_OK of a send started after `moment` arrived (None: timeout)."""
        deadline = time.monotonic() + timeout_s
        checked = 0
        while time.monotonic() < deadline:
            times = self.ok_times
            for started, received in times[checked:]:
                if started > moment:
                    return received
            checked = len(times)
            time.sleep(0.01)
        return None

    def _run(self) -> None:
        with Producer(self._config, idempotent=self._idempotent) as producer:
            for sequence in range(SENDS_MAX):
                if self._stop.is_set():
                    return
                body = f"m{sequence}"
                started = time.monotonic()
                try:
                    result = producer.send(TOPIC, body.encode(), key=f"k{sequence % 97}")
                except Exception as err:  # noqa: BLE001 - counted; the load goes on
                    self.other_statuses[type(err).__name__] += 1
                    continue
                if result.status == "PUT_OK":
                    self.acked.append((body, result.queue_id, result.queue_offset))
                    self.ok_times.append((started, time.monotonic()))
                else:
                    self.other_statuses[result.status] += 1


def _stored(endpoint: str) -> collections.Counter[str]:
    consumer = Consumer(ClientConfig(brokers=(endpoint,)))
    bodies: collections.Counter[str] = collections.Counter()
    for queue_id in range(QUEUES):
        queue_offset = 0
        for _ in range(100_000):  # bounded: each pull moves forward or ends the queue
            pulled = consumer.pull(TOPIC, queue_id, queue_offset, max_messages=20_000)
            if pulled.table.num_rows == 0:
                break
            for body in pulled.table.column("body").to_pylist():
                bodies[body.decode()] += 1
            queue_offset = pulled.reply.next_queue_offset
    return bodies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--run-s", type=float, default=1.0, help="load before each fault")
    parser.add_argument("--pauses", type=int, default=5, help="SIGSTOP trials (0: none)")
    parser.add_argument("--pause-s", type=float, default=6.0, help="SIGSTOP to SIGCONT")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--no-idempotent", dest="idempotent", action="store_false")
    parser.add_argument("--hosts", action="store_true",
                        help="every process on a test host of its own (root)")
    args = parser.parse_args(argv)
    directory = args.dir or Path(tempfile.mkdtemp(prefix="rocketha-failover-"))
    settings = ["inSyncReplicas=2", "enableAutoInSyncReplicas=true", "minInSyncReplicas=1",
                *args.set]
    set_args = [arg for pair in settings for arg in ("--set", pair)]
    _cluster(directory, "up", "--insecure", "--controllers", "1", "--replica-sets", "1",
             "--replicas", "3",
             *(["--hosts"] if args.hosts else []), *set_args)
    def admin_info(endpoint: str) -> dict[str, Any] | None:
        try:
            return Admin(ClientConfig(brokers=(endpoint,), request_timeout_ms=2000,
                                      retries_max=0)).broker_info()
        except Exception:  # noqa: BLE001 - not up yet
            return None

    controller = next(p["endpoint"] for p in _status(directory) if p.get("kind") != "broker")
    rtos: list[float] = []
    pause_rtos: list[float] = []
    load = _Load(controller, args.idempotent)
    try:
        master = _wait_whole(directory, admin_info)
        Admin(ClientConfig(brokers=(master["endpoint"],))).create_topic(TOPIC, queues=QUEUES)
        load.start()
        for trial in range(args.trials):
            master = _wait_whole(directory, admin_info)
            time.sleep(args.run_s)
            killed_at = time.monotonic()
            os.kill(master["pid"], signal.SIGKILL)
            first = load.first_ok_after(killed_at, RTO_TIMEOUT_S)
            if first is None:
                raise SystemExit(f"trial {trial}: no PUT_OK within {RTO_TIMEOUT_S:.0f}s of the "
                                 f"SIGKILL of {master['name']}")
            rtos.append(first - killed_at)
            print(f"trial {trial + 1}: killed {master['name']}, RTO {rtos[-1]:.3f} s "
                  f"({len(load.acked)} acked so far)", flush=True)
            _wait_gone(master["pid"])
            _cluster(directory, "up", "--replicas", "3")  # restart the killed broker
        for trial in range(args.pauses):
            master = _wait_whole(directory, admin_info)
            time.sleep(args.run_s)
            paused_at = time.monotonic()
            os.kill(master["pid"], signal.SIGSTOP)
            # SIGCONT when the pause is over, whether or not the producer has moved on
            resume = threading.Timer(args.pause_s, os.kill, (master["pid"], signal.SIGCONT))
            resume.start()
            try:
                first = load.first_ok_after(paused_at, RTO_TIMEOUT_S)
            finally:
                resume.join()
            if first is None:
                raise SystemExit(f"pause {trial}: no PUT_OK within {RTO_TIMEOUT_S:.0f}s of the "
                                 f"SIGSTOP of {master['name']}")
            pause_rtos.append(first - paused_at)
            print(f"pause {trial + 1}: stopped {master['name']} for {args.pause_s:.0f} s, RTO "
                  f"{pause_rtos[-1]:.3f} s ({len(load.acked)} acked so far)", flush=True)
        final = _wait_whole(directory, admin_info)
        load.stop()
        stored = _stored(final["endpoint"])
    finally:
        load.stop()
        _cluster(directory, "down")
    lost = sum(1 for body, _, _ in load.acked if stored[body] == 0)
    duplicated = sum(1 for count in stored.values() if count > 1)
    result = {
        "trials": len(rtos), "rto_p50_s": round(statistics.median(rtos), 3) if rtos else None,
        "rto_max_s": round(max(rtos), 3) if rtos else None,
        "rto_min_s": round(min(rtos), 3) if rtos else None,
        "lost_acked": lost, "duplicated": duplicated, "acked": len(load.acked),
        "stored": sum(stored.values()), "other_statuses": dict(load.other_statuses),
        "idempotent_producer": args.idempotent, "settings": settings, "dir": str(directory),
        "hosts": args.hosts,
        "pause_trials": len(pause_rtos), "pause_s": args.pause_s,
        "pause_rto_p50_s": round(statistics.median(pause_rtos), 3) if pause_rtos else None,
        "pause_rto_max_s": round(max(pause_rtos), 3) if pause_rtos else None,
        "pause_lost_acked": lost if pause_rtos else None,
    }
    print(f"RTO over {len(rtos)} SIGKILLs of the master: p50 {result['rto_p50_s']} s, max "
          f"{result['rto_max_s']} s (target p50 <= 2 s, max <= 4 s); acknowledged {len(load.acked)}"
          f", lost {lost}, duplicated {duplicated}")
    if pause_rtos:
        print(f"RTO over {len(pause_rtos)} SIGSTOPs of {args.pause_s:.0f} s: p50 "
              f"{result['pause_rto_p50_s']} s, max {result['pause_rto_max_s']} s (target <= "
              f"controllerHeartbeatTimeoutMs + 1 s = 4 s)")
    if args.json:
        print(json.dumps(result))
    return 0 if lost == 0 and (duplicated == 0 or not args.idempotent) else 1


if __name__ == "__main__":
    sys.exit(main())
