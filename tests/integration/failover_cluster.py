"""Test support for failover in controller mode: a `rocketha-cluster` with controllers, faults on
its processes, a producer load that keeps a history, and the history checks.

    FailoverCluster(dir, controllers=C, replica_sets=M, replicas=R, **settings)
        runs `python -m ha.cluster up` (as users do; subprocesses get this checkout on
        PYTHONPATH and as cwd); `status()` is `status --json`; faults go to one process by the
        pid in its pid file (SIGKILL, SIGSTOP until every thread is in state T, SIGCONT);
        `wait_master` / `wait_controller_leader` poll broker_info / controller_status in
        process with a deadline; `down()` resumes stopped processes, then `down`.
    Load(config, topic, ...)
        one thread, one Producer: body b"<run>:<seq>", key k<seq % keys> (a key always maps
        to one queue), optionally the idempotence marker "<run>/<seq>" so a resent sequence
        is never stored twice (or, `producer_idempotent`, the client's own idempotence).
        With `resend`, a sequence is sent again until PUT_OK (the producer contract of
        connector/protocol/wire.py: sequences in order, a prefix stored); without it, every
        attempt uses a new sequence. Bounded by `messages_max` and `duration_max_s`. The
        history: attempted sequences, acks (queue, offset, send start time), every outcome
        with its time.
    read_topic / check_history / commitlog_bytes / epoch_entries
        what a replica holds, and the Jepsen total-queue checks over it (lost, unexpected,
        duplicated), per-queue order, and acked (queue, offset) pairs holding their body.

Controller keys go through `controller_settings` (`--controller-set`); without them a dead
master is noticed after the controller's default controllerHeartbeatTimeoutMs (3 s). With
`hosts=True` every process runs on its own test host (`up --hosts`) and `network` / `host(name)`
give the network faults (ha/cluster/netns.py); `down()` heals before stopping.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Self

from connector import Admin, ClientConfig, Consumer, Producer
from connector.client import controller_cluster_list
from connector.protocol import IDEMPOTENCE_PROPERTY, PutIdempotence, RocketHAError
from ha.cluster.controllers import controller_status
from ha.cluster.netns import HostNetwork, TestHost
from ha.cluster.processes import pid_from_file
from tests.ha.replica_set import FAST_TIMERS, _all_threads_stopped, cluster_command, wait_for

ROOT = Path(__file__).resolve().parents[2]
CLI_TIMEOUT_S = 200.0  # `up` waits up to 120 s for a recovering broker (ha/cluster/main.py)
QUEUES = 4
# FAST_TIMERS: HA link timers of a second or two; heartbeats to the controller every 200 ms
BROKER_SETTINGS = {**FAST_TIMERS, "brokerHeartbeatInterval": "200",
                   "defaultTopicQueueNums": str(QUEUES)}
INFO_TIMEOUT_S = 2.0  # one broker_info / controller_status call (2 busy shared cores)
FAILED_SEND_PAUSE_S = 0.05  # the load's pause after a send that did not end in PUT_OK


def _env() -> dict[str, str]:
    """This checkout first on PYTHONPATH, so the cluster runs the code under test."""
    env = dict(os.environ)
    paths = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


def cluster_cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "ha.cluster", *args], capture_output=True,
                          text=True, timeout=CLI_TIMEOUT_S, cwd=ROOT, env=_env(),
                          check=False)
    assert done.returncode == 0, (args, done.stderr[-3000:], done.stdout[-2000:])
    return done.stdout


class FailoverCluster:
    def __init__(self, directory: Path, *, controllers: int, replica_sets: int = 1,
                 replicas: int = 3, hosts: bool = False,
                 controller_settings: dict[str, str] | None = None,
                 cli_args: tuple[str, ...] = (), **settings: str) -> None:
        """`hosts`: every process on its own test host (`up --hosts`; `self.network` then
        offers the network faults of ha/cluster/netns.py). `cli_args`: more `up` arguments;
        without a `--grpc-*` one the cluster runs no RocketMQ gRPC endpoint (`--grpc-port 0`:
        one process fewer to start and stop per test; tests/integration/rmq_proxy_support.py
        asks for it)."""
        self.directory = directory
        merged = {**BROKER_SETTINGS, **settings}
        self._up_args: tuple[str, ...] = () if any(
            arg.startswith("--grpc") for arg in cli_args) else ("--grpc-port", "0")
        args = ["up", "--dir", str(directory), "--insecure", "--controllers", str(controllers),
                "--replica-sets", str(replica_sets), "--replicas", str(replicas)]
        args += ["--hosts"] if hosts else []
        args += [*cli_args, *self._up_args]
        for key, value in (controller_settings or {}).items():
            args += ["--controller-set", f"{key}={value}"]
        for key, value in merged.items():
            args += ["--set", f"{key}={value}"]
        try:
            cluster_cli(*args)
        except BaseException:  # stop whatever did start before the failure is reported
            if (directory / "cluster.json").exists():
                subprocess.run([sys.executable, "-m", "ha.cluster", "down", "--dir",
                                str(directory)], capture_output=True, timeout=CLI_TIMEOUT_S,
                               cwd=ROOT, env=_env(), check=False)
            raise
        manifest = json.loads((directory / "cluster.json").read_text())
        self.brokers: dict[str, dict[str, Any]] = {b["name"]: b for b in manifest["brokers"]}
        self.controllers: dict[str, dict[str, Any]] = {
            c["name"]: c for c in manifest["controllers"]}
        self.controller_addr = ",".join(self.endpoint(name) for name in self.controllers)
        self.network: HostNetwork | None = None
        if hosts:
            self.network = HostNetwork.attach(manifest["hosts"]["network"],
                                              manifest["hosts"]["count"])

    # -- processes --------------------------------------------------------------------------
    def _entry(self, name: str) -> dict[str, Any]:
        return self.brokers.get(name) or self.controllers[name]

    def pid(self, name: str) -> int | None:
        return pid_from_file(self._entry(name)["pid_file"])

    def kill(self, name: str) -> None:
        pid = self.pid(name)
        assert pid is not None, f"{name} is not running"
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: self.pid(name) is None, 10, f"{name} to exit after SIGKILL")

    def pause(self, name: str) -> None:
        pid = self.pid(name)
        assert pid is not None, f"{name} is not running"
        os.kill(pid, signal.SIGSTOP)  # delivery is asynchronous: wait until every thread stops
        wait_for(lambda: _all_threads_stopped(pid), 10, f"{name}'s threads to stop")

    def resume(self, name: str) -> None:
        pid = self.pid(name)
        assert pid is not None, f"{name} is not running"
        os.kill(pid, signal.SIGCONT)

    def start(self, name: str) -> None:
        """Start one stopped broker without waiting for the others (`up` waits for every
        broker to answer, which a paused one never does)."""
        assert self.pid(name) is None, f"{name} is running"
        # as `up` starts it
        script = ("import json, sys, pathlib; from ha.cluster.main import Cluster; "
                  "Cluster(pathlib.Path(sys.argv[1])).start(json.loads(sys.argv[2]))")
        subprocess.run([sys.executable, "-c", script, str(self.directory),
                        json.dumps(self.brokers[name])], check=True, timeout=CLI_TIMEOUT_S,
                       cwd=ROOT, env=_env())

    def up(self) -> None:
        """Start what is down (a second `up` keeps data, ports and --set overrides)."""
        cluster_cli("up", "--dir", str(self.directory), *self._up_args)

    def add_set(self) -> str:
        """`rocketha-cluster add-set`: one more replica set with the cluster's shape and
        settings (on new test hosts with `hosts`), waited for until it has a master; returns
        its name. The processes already running are not touched."""
        before = {b["set"] for b in self.brokers.values()}
        cluster_cli("add-set", "--dir", str(self.directory))
        manifest = json.loads((self.directory / "cluster.json").read_text())
        self.brokers = {b["name"]: b for b in manifest["brokers"]}
        if self.network is not None:  # the hosts the new set runs on (made by add-set)
            self.network = HostNetwork.attach(manifest["hosts"]["network"],
                                              manifest["hosts"]["count"])
        [added] = sorted({b["set"] for b in self.brokers.values()} - before)
        return str(added)

    def down(self) -> None:
        if self.network is not None:
            self.network.heal()  # processes stop cleanly; `down` removes the hosts
        for name in [*self.brokers, *self.controllers]:
            pid = self.pid(name)
            if pid is not None:
                os.kill(pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
        cluster_command("down", "--dir", str(self.directory))

    def status(self) -> dict[str, dict[str, Any]]:
        """`rocketha-cluster status --json`, by process name."""
        out = json.loads(cluster_command("status", "--dir", str(self.directory), "--json"))
        return {process["name"]: process for process in out["processes"]}

    def log_tail(self, name: str, lines: int = 30) -> str:
        text = Path(self._entry(name)["log_file"]).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # -- brokers ----------------------------------------------------------------------------
    def members(self, replica_set: str) -> list[str]:
        return [name for name, b in self.brokers.items() if b["set"] == replica_set]

    def endpoint(self, name: str) -> str:
        entry = self._entry(name)
        return f"{entry.get('host', '127.0.0.1')}:{entry['port']}"

    def host(self, name: str) -> TestHost:
        """The test host `name` runs on (a cluster made with `hosts=True`)."""
        assert self.network is not None, "not a cluster on test hosts"
        return self.network.host(self._entry(name)["host_index"])

    def store_dir(self, name: str) -> Path:
        return Path(self.brokers[name]["store_dir"])

    def info(self, name: str) -> dict[str, Any] | None:
        """broker_info, or None when the broker does not answer within INFO_TIMEOUT_S."""
        config = ClientConfig(brokers=(self.endpoint(name),), retries_max=0,
                              request_timeout_ms=int(INFO_TIMEOUT_S * 1000))
        try:
            return Admin(config).broker_info()
        except RocketHAError:
            return None

    def info_now(self, name: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """broker_info of a broker that is up (asked again until it answers)."""
        return wait_for(lambda: self.info(name), timeout_s, f"{name} to answer broker_info")

    def master_now(self, replica_set: str, *, min_epoch: int = 0,
                   exclude: Iterable[str] = ()) -> tuple[str, dict[str, Any]] | None:
        """A member that is MASTER with the controller's word for it (applied), at min_epoch."""
        for name in self.members(replica_set):
            if name in exclude or self.pid(name) is None:
                continue
            info = self.info(name)
            controller = (info or {}).get("controller") or {}
            if (info is not None and info["role"] == "MASTER"
                    and info["master_epoch"] >= min_epoch
                    and controller.get("applied_role") == "master"
                    and controller.get("applied_master_epoch") == info["master_epoch"]):
                return name, info
        return None

    def wait_master(self, replica_set: str, *, min_epoch: int = 0, exclude: Iterable[str] = (),
                    timeout_s: float = 20.0) -> tuple[str, dict[str, Any]]:
        excluded = tuple(exclude)
        return wait_for(lambda: self.master_now(replica_set, min_epoch=min_epoch,
                                                exclude=excluded),
                        timeout_s, f"a master of {replica_set} (epoch >= {min_epoch}, "
                        f"not {excluded})")

    def wait_full_sync_state_set(self, master: str, size: int,
                                 timeout_s: float = 20.0) -> list[int]:
        """Until the controller's accepted set and the master's own (its linked, caught-up
        slaves) both hold `size` members: a put needing all of them can then be acked. The
        accepted set alone can be full while links are down (the controller was away)."""
        def full() -> list[int] | None:
            info = self.info(master) or {}
            accepted = info.get("accepted_sync_state_set") or []
            local = info.get("sync_state_set") or []
            return accepted if len(accepted) == size == len(local) else None
        return wait_for(full, timeout_s, f"{master}'s SyncStateSet to hold {size}, accepted "
                        "and linked")

    def wait_slave(self, name: str, master_epoch: int, timeout_s: float = 30.0) -> dict[str, Any]:
        def slave() -> dict[str, Any] | None:
            info = self.info(name)
            if (info is not None and info["role"] == "SLAVE"
                    and info["master_epoch"] == master_epoch
                    and (info.get("controller") or {}).get("applied_role") == "slave"):
                return info
            return None
        return wait_for(slave, timeout_s, f"{name} to follow as SLAVE of epoch {master_epoch}")

    def wait_converged(self, slave: str, master: str, timeout_s: float = 30.0) -> int:
        """Wait until the slave's log ends where the master's does; returns that position."""
        def same_end() -> int | None:
            ours, theirs = self.info(slave), self.info(master)
            if ours is None or theirs is None:
                return None
            end = theirs["max_log_position"]
            return end if ours["max_log_position"] == end and end > 0 else None
        return wait_for(same_end, timeout_s, f"{slave} to catch up with {master}")

    def wait_confirm_at_end(self, name: str, timeout_s: float = 30.0) -> int:
        """Until `name`'s confirm position reaches its log end (every slave of its set holds
        what it acked: with inSyncReplicas=1 the last acks can be ahead of what reads show)."""
        def at_end() -> int | None:
            info = self.info(name)
            if info is None or info["confirm_log_position"] != info["max_log_position"]:
                return None
            return int(info["max_log_position"]) or None
        return wait_for(at_end, timeout_s, f"{name}'s confirm position to reach its log end")

    # -- controllers ------------------------------------------------------------------------
    def controller_role(self, name: str) -> str | None:
        if self.pid(name) is None:
            return None
        reply = controller_status(self.endpoint(name), timeout_s=INFO_TIMEOUT_S)
        return None if reply is None else str(reply["role"])

    def wait_controller_leader(self, *, exclude: Iterable[str] = (),
                               timeout_s: float = 20.0) -> str:
        excluded = set(exclude)

        def leader() -> str | None:
            leaders = [name for name in self.controllers
                       if name not in excluded and self.controller_role(name) == "leader"]
            return leaders[0] if len(leaders) == 1 else None
        return wait_for(leader, timeout_s, f"one controller leader (not {sorted(excluded)})")

    def replica_state(self, replica_set: str) -> dict[str, Any]:
        """(master id, epoch, SyncStateSet, its epoch) as the controller leader's state has it."""
        leader = self.wait_controller_leader(timeout_s=10)
        listing = controller_cluster_list(self.endpoint(leader), 2000)
        for entry in listing["replica_sets"]:
            replica = entry["replica"]
            if replica["broker_name"] == replica_set:
                return {key: replica[key] for key in ("master_broker_id", "master_address",
                                                       "master_epoch", "sync_state_set",
                                                       "sync_state_set_epoch")}
        raise AssertionError(f"the controller does not know {replica_set}: {listing}")


# -- load -------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    seq: int
    key: str | None
    queue_id: int  # -1 when the broker answered "duplicate" (stored earlier, no fresh offsets)
    queue_offset: int
    sent_at: float  # monotonic time the successful attempt started
    acked_at: float


class _Worker:
    """A client thread a test starts, stops (joined and checked for an error) or aborts."""

    def __init__(self, config: ClientConfig, name: str) -> None:
        self.config = config
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> Self:
        self._stop.set()
        self._thread.join(timeout=self.config.send_deadline_ms / 1000.0 + 10)
        assert not self._thread.is_alive(), f"{self._thread.name} did not stop"
        assert self.error is None, f"{self._thread.name} failed: {self.error!r}"
        return self

    def abort(self) -> None:
        """Ask the thread to end (teardown after a failure; `stop` also waits and checks)."""
        self._stop.set()


class Load(_Worker):
    """One producer thread; see the module docstring."""

    def __init__(self, config: ClientConfig, topic: str, run: str, *, keys: int = 8,
                 idempotent: bool = True, resend: bool = True, messages_max: int = 20_000,
                 duration_max_s: float = 45.0, producer_idempotent: bool = False) -> None:
        assert not resend or idempotent, "resending without a marker may store twice"
        # the client's own idempotence (Producer(idempotent=True)): it retries inside `send`,
        # so any outcome other than PUT_OK is a failure its caller sees
        assert not (producer_idempotent and (idempotent or resend)), "one idempotence at a time"
        self.producer_idempotent = producer_idempotent
        super().__init__(config, f"load-{run}")
        self.topic = topic
        self.run = run
        self.keys = keys
        self.idempotent = idempotent
        self.resend = resend
        self.messages_max = messages_max
        self.duration_max_s = duration_max_s
        self.attempted: set[int] = set()
        self.acked: dict[int, Ack] = {}
        self.outcomes: list[tuple[float, int, str]] = []  # (time, seq, status or error name)
        self._lock = threading.Lock()  # the thread adds acks while the test reads them

    def body(self, seq: int) -> bytes:
        return f"{self.run}:{seq}".encode()

    def key(self, seq: int) -> str | None:
        return f"k{seq % self.keys}" if self.keys else None

    def wait_acks(self, count: int, timeout_s: float = 20.0) -> None:
        had, started = len(self.acked), time.monotonic()
        try:
            wait_for(lambda: len(self.acked) >= count or self.error is not None, timeout_s,
                     f"{count} acks")
        except AssertionError:  # say what happened meanwhile: the message is made at the call
            late = [o for o in list(self.outcomes) if o[0] >= started]
            raise AssertionError(
                f"timed out after {timeout_s:.0f}s waiting for {count} acks (had {had}, have "
                f"{len(self.acked)}; {len(late)} outcomes since: {Counter(o[2] for o in late)}; "
                f"last {late[-3:]})") from None
        assert self.error is None, f"the load thread failed: {self.error!r}"

    def acks(self) -> list[Ack]:
        """A snapshot of the acks so far (safe while the thread runs)."""
        with self._lock:
            return list(self.acked.values())

    def acks_after(self, moment: float) -> list[Ack]:
        return [ack for ack in self.acks() if ack.sent_at >= moment]

    def max_ack_gap_s(self, start: float, end: float) -> float:
        """The longest time in [start, end] without an ack."""
        times = sorted(a.acked_at for a in self.acks() if start <= a.acked_at <= end)
        edges = [start, *times, end]
        return max(b - a for a, b in itertools.pairwise(edges))

    def _run(self) -> None:
        producer = Producer(self.config, idempotent=self.producer_idempotent)
        deadline = time.monotonic() + self.duration_max_s
        seq = 0
        try:
            while (seq < self.messages_max and not self._stop.is_set()
                   and time.monotonic() < deadline):
                self.attempted.add(seq)
                started = time.monotonic()
                status, result = self._send(producer, seq)
                now = time.monotonic()
                self.outcomes.append((now, seq, status))
                if result is not None:
                    with self._lock:
                        self.acked[seq] = Ack(seq, self.key(seq), result.queue_id,
                                              result.queue_offset, started, now)
                if result is not None or not self.resend or status == "DUPLICATE_POSITION_UNKNOWN":
                    seq += 1  # (stored earlier, position unknown: resending cannot ack it)
                if result is None:  # the client backed off already, or it was a reply
                    self._stop.wait(FAILED_SEND_PAUSE_S)
        except BaseException as err:  # noqa: BLE001 - surfaced by stop() / wait_acks()
            self.error = err
        finally:
            producer.close()

    def _send(self, producer: Producer, seq: int) -> tuple[str, Any]:
        properties = ({IDEMPOTENCE_PROPERTY: PutIdempotence(self.run, seq).marker()}
                      if self.idempotent else None)
        try:
            result = producer.send(self.topic, self.body(seq), key=self.key(seq),
                                   properties=properties)
        except RocketHAError as err:
            return err.name, None
        return result.status, (result if result.status == "PUT_OK" else None)


class Reader(_Worker):
    """One consumer thread: pulls every queue of `topic` in turn from where it left off
    (long polls of `POLL_WAIT_MS`), recording (time, queue, offset, body). Bounded by
    `duration_max_s`; errors from the client are counted, not raised (the client retries)."""

    POLL_WAIT_MS = 50

    def __init__(self, config: ClientConfig, topic: str, queues: int = QUEUES, *,
                 duration_max_s: float = 60.0) -> None:
        super().__init__(config, f"reader-{topic}")
        self.topic = topic
        self.queues = queues
        self.duration_max_s = duration_max_s
        self.rows: list[tuple[float, int, int, bytes]] = []
        self.errors: Counter[str] = Counter()

    def rows_after(self, moment: float) -> int:
        return sum(1 for row in self.rows if row[0] >= moment)

    def wait_rows_after(self, moment: float, count: int, timeout_s: float = 20.0) -> None:
        wait_for(lambda: self.rows_after(moment) >= count or self.error is not None, timeout_s,
                 f"{count} rows read after t={moment:.1f} (errors {dict(self.errors)})")
        assert self.error is None, f"the reader thread failed: {self.error!r}"

    def _run(self) -> None:
        consumer = Consumer(self.config)
        next_offsets = [0] * self.queues
        deadline = time.monotonic() + self.duration_max_s
        try:
            while not self._stop.is_set() and time.monotonic() < deadline:
                for queue_id in range(self.queues):
                    try:
                        result = consumer.pull(self.topic, queue_id, next_offsets[queue_id],
                                               max_messages=256, max_wait_ms=self.POLL_WAIT_MS)
                    except RocketHAError as err:
                        self.errors[err.name] += 1
                        self._stop.wait(FAILED_SEND_PAUSE_S)
                        continue
                    now = time.monotonic()
                    offsets = result.table.column("queue_offset").to_pylist()
                    bodies = result.table.column("body").to_pylist()
                    self.rows += [(now, queue_id, o, b)
                                  for o, b in zip(offsets, bodies, strict=True)]
                    next_offsets[queue_id] = max(next_offsets[queue_id],
                                                 result.next_queue_offset)
        except BaseException as err:  # noqa: BLE001 - surfaced by stop() / wait_rows_after()
            self.error = err

    def check_against(self, found: dict[tuple[int, int], bytes]) -> list[str]:
        """What was read must be what the replica holds at those places, each queue read in
        order without gaps (a consumer never reads past the confirm position)."""
        problems = [f"{q}/{o}: read {b!r}, replica holds {found.get((q, o))!r}"
                    for _, q, o, b in self.rows if found.get((q, o)) != b]
        for queue_id in range(self.queues):
            offsets = [o for _, q, o, _ in self.rows if q == queue_id]
            if offsets != list(range(len(offsets))):
                problems.append(f"queue {queue_id} read out of order or with gaps: "
                                f"{offsets[:10]}...")
        return problems


# -- what a replica holds, and the checks -----------------------------------------------------
def read_topic(endpoint: str, topic: str) -> dict[tuple[int, int], bytes]:
    """Every message of `topic` readable on `endpoint` (up to its confirm), by (queue, offset)."""
    config = ClientConfig(brokers=(endpoint,), retries_max=3, request_timeout_ms=5000)
    ranges = Admin(config).queue_offsets(topic)
    consumer = Consumer(config)
    found: dict[tuple[int, int], bytes] = {}
    for queue in ranges:
        queue_id, queue_offset = queue["queue_id"], queue["min_queue_offset"]
        for _ in range(10_000):  # bounded: each pull moves forward or the loop ends
            if queue_offset >= queue["max_queue_offset"]:
                break
            result = consumer.pull(topic, queue_id, queue_offset, max_messages=1024)
            offsets = result.table.column("queue_offset").to_pylist()
            bodies = result.table.column("body").to_pylist()
            found.update(((queue_id, o), b) for o, b in zip(offsets, bodies, strict=True))
            if result.next_queue_offset <= queue_offset:
                break
            queue_offset = result.next_queue_offset
        assert queue_offset >= queue["max_queue_offset"], (
            f"{endpoint} {topic}/{queue_id}: read up to {queue_offset} of "
            f"{queue['max_queue_offset']}")
    return found


@dataclasses.dataclass
class Verdict:
    acked: int
    found: int
    lost: list[int]
    unexpected: list[bytes]
    duplicated: dict[int, int]
    order_violations: list[str]
    wrong_offsets: list[str]
    recovered: int  # attempted, never acked, but stored (an indeterminate send that got in)

    def summary(self) -> str:
        return (f"acked {self.acked}, found {self.found}, lost {len(self.lost)} "
                f"{self.lost[:5]}, unexpected {len(self.unexpected)} {self.unexpected[:3]}, "
                f"duplicated {len(self.duplicated)} {list(self.duplicated.items())[:5]}, "
                f"order {self.order_violations[:3]}, offsets {self.wrong_offsets[:3]}, "
                f"recovered {self.recovered}")


def check_history(load: Load, found: dict[tuple[int, int], bytes]) -> Verdict:
    """The load's history against what one replica holds (other runs' bodies are ignored)."""
    prefix = f"{load.run}:".encode()
    where: dict[int, list[tuple[int, int]]] = {}
    per_queue: dict[int, list[int]] = {}
    unexpected = []
    for (queue_id, queue_offset), body in sorted(found.items()):
        if not body.startswith(prefix):
            continue
        seq = int(body[len(prefix):])
        if seq not in load.attempted:
            unexpected.append(body)
        where.setdefault(seq, []).append((queue_id, queue_offset))
        per_queue.setdefault(queue_id, []).append(seq)
    order = [f"queue {q}: {a} before {b}" for q, seqs in per_queue.items()
             for a, b in itertools.pairwise(seqs) if a >= b]
    if load.keys:  # one key, one queue
        queues_of_key: dict[str | None, set[int]] = {}
        for seq, places in where.items():
            queues_of_key.setdefault(load.key(seq), set()).update(q for q, _ in places)
        order += [f"key {k} in queues {sorted(q)}" for k, q in queues_of_key.items()
                  if len(q) > 1]
    wrong = [f"seq {a.seq} acked at {a.queue_id}/{a.queue_offset} holds "
             f"{found.get((a.queue_id, a.queue_offset))!r}"
             for a in load.acked.values()
             if found.get((a.queue_id, a.queue_offset)) != load.body(a.seq)]  # -1: wrong too
    return Verdict(
        acked=len(load.acked), found=sum(map(len, where.values())),
        lost=sorted(seq for seq in load.acked if seq not in where),
        unexpected=unexpected,
        duplicated={seq: len(p) for seq, p in where.items() if len(p) > 1},
        order_violations=order, wrong_offsets=wrong,
        recovered=sum(1 for seq in where if seq not in load.acked))


def epoch_entries(store_dir: Path) -> list[tuple[int, int]]:
    """The store's epoch file (storage_engine/epoch.py: count, CRC, `epoch-start` lines)."""
    lines = (store_dir / "epochFileCheckpoint").read_text().splitlines()
    count = int(lines[0])
    entries = [tuple(int(part) for part in line.split("-")) for line in lines[2:2 + count]]
    assert len(entries) == count, lines
    return entries  # type: ignore[return-value]


def commitlog_segments(store_dir: Path) -> list[tuple[int, Path]]:
    """A store's CommitLog segment files, as (start position, path), lowest first."""
    return sorted((int(path.name), path) for path in (store_dir / "commitlog").iterdir()
                  if path.name.isdigit())


def commitlog_bytes(store_dir: Path, end: int, start: int = 0) -> bytes:
    """CommitLog bytes [start, end) straight from the segment files (named by start position).
    `start` must be a segment's start: retention deletes whole segments from the front, so a
    long run compares replicas from the highest first segment among them."""
    assert start <= end, (start, end)
    segments = [(first, path) for first, path in commitlog_segments(store_dir) if first >= start]
    assert segments and segments[0][0] == start, f"{store_dir}: segments {segments[:3]}"
    out = bytearray()
    for first, path in segments:
        if first >= end:
            break
        assert first == start + len(out), f"{path}: starts at {first}, expected {start + len(out)}"
        with open(path, "rb") as segment:
            data = segment.read(end - first)
        out += data
        size = path.stat().st_size
        if first + size < end:  # a full segment: the next one continues it
            assert len(data) == size
    assert start + len(out) == end, f"{store_dir}: {len(out)} of {end - start} bytes"
    return bytes(out)


def counts(load: Load) -> Counter[str]:
    return Counter(status for _, _, status in load.outcomes)
