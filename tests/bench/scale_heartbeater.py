"""Lightweight heartbeaters: replica sets of fake brokers that speak the broker's controller
protocol (register_broker, broker_heartbeat every second to every controller, the master's
alter_sync_state_set) without a store, so one controller group can be loaded with more replica
sets than real brokers fit on the machine.

    python tests/bench/scale_heartbeater.py --controllers A;B;C --sets N [--replicas 3]

Each fake broker's address is 127.42.<a>.<b>:<9000 + id>: a loopback address nothing listens on,
so the controller's TCP probe of a master reported lost is refused (as for a crashed broker).
Commands on stdin, answers on stdout (one line each):
    ready                      -> printed once every set has a master and a SyncStateSet of all
    kill SET                   the master of set SET goes silent; its slaves report it lost at
                               once (master_unreachable_epoch, as a real slave whose HA link
                               broke) and beat every 100 ms until one learns it is master,
                               as real brokers do; printed when a slave learns it is the new
                               master: "elected SET SECONDS" (from the silence, by this
                               process's clock)
    revive SET                 the silenced broker heartbeats again (it comes back as a slave);
                               "ready" is printed again once its SyncStateSet is whole
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

from pyarrow import flight

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from controller.api import ROLE_MASTER, ROLE_NONE

HEARTBEAT_INTERVAL_S = 1.0
FAST_HEARTBEAT_INTERVAL_S = 0.1  # the broker's FAST_HEARTBEAT_INTERVAL_MS
CALL_TIMEOUT_S = 3.0
POSITION = 1 << 20  # every fake broker holds the same log: any slave may be elected
CLUSTER = "scale"


@dataclasses.dataclass
class FakeBroker:
    set_index: int
    index: int
    broker_id: int = -1
    role: str = ROLE_NONE
    master_epoch: int = 0
    sss: tuple[int, ...] = ()
    sss_epoch: int = 0
    silent: bool = False
    master_lost_epoch: int = 0

    @property
    def name(self) -> str:
        return f"hb-{self.set_index}"

    @property
    def address(self) -> str:
        return f"127.42.{self.set_index // 250}.{self.set_index % 250 + 1}:{9000 + self.index}"


class Controllers:
    """One Flight client per controller, kept open; calls follow NOT_LEADER to the leader."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.clients = {a: flight.FlightClient(f"grpc://{a}") for a in addresses}
        self.leader = addresses[0]

    def call_one(self, address: str, action: str, body: dict[str, Any]) -> dict[str, Any]:
        options = flight.FlightCallOptions(timeout=CALL_TIMEOUT_S)
        results = list(self.clients[address].do_action(
            flight.Action(action, json.dumps(body).encode()), options))
        return json.loads(results[0].body.to_pybytes())  # type: ignore[no-any-return]

    def call_leader(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        for _ in range(10):
            try:
                reply = self.call_one(self.leader, action, body)
            except flight.FlightError:
                reply = {"status": "UNAVAILABLE"}
            if reply.get("status") != "NOT_LEADER" and reply.get("status") != "UNAVAILABLE":
                return reply
            leader = reply.get("leader_address")
            self.leader = leader if leader in self.clients else self.addresses[
                (self.addresses.index(self.leader) + 1) % len(self.addresses)]
            time.sleep(0.1)
        return reply


class Heartbeaters:
    def __init__(self, controllers: Controllers, sets: int, replicas: int) -> None:
        self.controllers = controllers
        self.brokers = [FakeBroker(s, i) for s in range(sets) for i in range(replicas)]
        self.lock = threading.Lock()
        self.wake = threading.Event()
        self.killed: dict[int, tuple[float, int]] = {}  # set -> (silenced at, old epoch)
        self.ready_said = False

    def register(self) -> None:
        for broker in self.brokers:
            reply = self.controllers.call_leader("register_broker", {
                "cluster_name": CLUSTER, "broker_name": broker.name,
                "broker_address": broker.address})
            assert reply["status"] == "OK", reply
            broker.broker_id = reply["broker_id"]

    def beat(self, broker: FakeBroker) -> None:
        body = {"cluster_name": CLUSTER, "broker_name": broker.name,
                "broker_id": broker.broker_id, "broker_address": broker.address,
                "master_epoch": broker.master_epoch, "max_log_position": POSITION,
                "confirm_log_position": POSITION,
                "master_unreachable_epoch": broker.master_lost_epoch}
        for address in self.controllers.addresses:
            try:
                reply = self.controllers.call_one(address, "broker_heartbeat", body)
            except flight.FlightError:
                continue
            role = reply.get("role")
            if reply.get("status") == "OK" and role:
                self.learn(broker, role)

    def learn(self, broker: FakeBroker, role: dict[str, Any]) -> None:
        if role["master_epoch"] < broker.master_epoch:
            return
        became_master = role["role"] == ROLE_MASTER and broker.role != ROLE_MASTER
        broker.role, broker.master_epoch = role["role"], role["master_epoch"]
        broker.sss, broker.sss_epoch = tuple(role["sync_state_set"]), role["sync_state_set_epoch"]
        if role["master_epoch"] > broker.master_lost_epoch:
            broker.master_lost_epoch = 0
        killed = self.killed.get(broker.set_index)
        if became_master and killed is not None and role["master_epoch"] > killed[1]:
            print(f"elected {broker.set_index} {time.perf_counter() - killed[0]:.4f}",
                  flush=True)
            del self.killed[broker.set_index]

    def widen_sync_state_sets(self) -> None:
        """A master adds every alive member to its SyncStateSet (all hold the same log)."""
        for broker in self.brokers:
            if broker.role != ROLE_MASTER or broker.silent:
                continue
            members = tuple(sorted(b.broker_id for b in self.brokers
                                   if b.set_index == broker.set_index and not b.silent))
            if set(members) <= set(broker.sss):
                continue
            reply = self.controllers.call_leader("alter_sync_state_set", {
                "broker_name": broker.name, "master_broker_id": broker.broker_id,
                "master_epoch": broker.master_epoch, "sync_state_set": list(members),
                "sync_state_set_epoch": broker.sss_epoch})
            if reply.get("status") == "OK":
                broker.sss = members
                broker.sss_epoch = reply.get("sync_state_set_epoch", broker.sss_epoch + 1)

    def all_ready(self) -> bool:
        by_set: dict[int, list[FakeBroker]] = {}
        for broker in self.brokers:
            by_set.setdefault(broker.set_index, []).append(broker)
        return all(any(b.role == ROLE_MASTER and len(b.sss) == len(members) for b in members)
                   for members in by_set.values())

    def run(self) -> None:
        """Every broker beats each HEARTBEAT_INTERVAL_S; a slave that lost its master beats
        each FAST_HEARTBEAT_INTERVAL_S until it learns the next one (as a real broker does)."""
        next_full = 0.0
        while True:
            now = time.perf_counter()
            with self.lock:
                full = now >= next_full
                for broker in self.brokers:
                    if not broker.silent and (full or broker.master_lost_epoch):
                        self.beat(broker)
                if full:
                    next_full = now + HEARTBEAT_INTERVAL_S
                self.widen_sync_state_sets()
                if not self.ready_said and self.all_ready():
                    self.ready_said = True
                    print("ready", flush=True)
                fast = any(b.master_lost_epoch and not b.silent for b in self.brokers)
            self.wake.wait(FAST_HEARTBEAT_INTERVAL_S if fast
                           else max(0.0, next_full - time.perf_counter()))
            self.wake.clear()

    def kill(self, set_index: int) -> None:
        with self.lock:
            master = next(b for b in self.brokers
                          if b.set_index == set_index and b.role == ROLE_MASTER)
            master.silent = True
            self.killed[set_index] = (time.perf_counter(), master.master_epoch)
            for broker in self.brokers:
                if broker.set_index == set_index and not broker.silent:
                    broker.master_lost_epoch = master.master_epoch
                    self.beat(broker)  # at once, as a slave whose HA link broke
        self.wake.set()  # and then every FAST_HEARTBEAT_INTERVAL_S

    def revive(self, set_index: int) -> None:
        with self.lock:
            for broker in self.brokers:
                if broker.set_index == set_index and broker.silent:
                    broker.silent = False
                    broker.role = ROLE_NONE
            self.ready_said = False  # "ready" again once its SyncStateSet is whole
        self.wake.set()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--controllers", required=True)
    parser.add_argument("--sets", type=int, required=True)
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args(argv)
    beaters = Heartbeaters(Controllers(args.controllers.split(";")), args.sets, args.replicas)
    beaters.register()
    threading.Thread(target=beaters.run, daemon=True).start()
    for line in sys.stdin:
        command, _, value = line.strip().partition(" ")
        if command == "kill":
            beaters.kill(int(value))
        elif command == "revive":
            beaters.revive(int(value))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
