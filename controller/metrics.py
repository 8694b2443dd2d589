"""`/metrics` of a controller (Prometheus text format), read from the node when scraped.

The node lives on one asyncio loop and is not thread-safe; prometheus_client scrapes on its own
thread. So each scrape hops onto the loop (`run_coroutine_threadsafe`) and copies plain values
there (`node_view`), then builds the families on the scrape thread. A loop that does not answer
within SCRAPE_TIMEOUT_S gives a scrape with `rocketha_controller_up 0` only.

Series (labels `controller` = n<id> on all; RocketMQ 5's controller names where it has them):
    rocketha_controller_up                    1 when the node answered the scrape
    rocketha_build_info{version}              1, labelled with the running release
    rocketha_controller_role{role}            1 for this node's Raft role
    rocketha_controller_is_leader             sum over the group must be exactly 1
    rocketha_raft_term / _leader_id / _commit_index / _applied_index / _snapshot_index
    rocketha_raft_role_changes_total{role}    times this node became leader/candidate/...
    rocketha_raft_leader_changes_total        leader changes this node saw
    rocketmq_election_total{replica_set}      master elections applied (RocketMQ: election_total)
    rocketmq_active_broker_num{replica_set}   brokers heard from within the heartbeat timeout
    rocketha_replica_set_master_epoch{replica_set}
    rocketha_replica_set_has_master{replica_set}        0 = offline (no master)
    rocketha_replica_set_brokers{replica_set}           registered members
    rocketha_sync_state_set_size{replica_set}
    rocketha_sync_state_set_epoch{replica_set}
    rocketha_broker_reported_log_position_bytes{replica_set,broker_id,position}
                                              max / confirm from each live broker's heartbeat
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from conf.metrics_http import OPEN, MetricsAccess, MetricsServer, serve_collector
from conf.version import VERSION
from controller.node import ControllerNode

__all__ = ["ControllerCollector", "MetricsServer", "NodeView", "node_view", "serve_metrics"]

logger = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 2.0
_RAFT_ROLES = ("leader", "follower", "candidate", "pre_candidate")


@dataclasses.dataclass(frozen=True, slots=True)
class NodeView:
    node_id: int
    role: str
    term: int
    leader_id: int | None
    commit_index: int
    applied_index: int
    snapshot_index: int
    role_counts: dict[str, int]
    leader_changes: int
    master_elections: dict[str, int]
    replica_sets: list[dict[str, Any]]  # ReplicaInfo JSON + "alive": {id: heartbeat JSON}


def node_view(node: ControllerNode) -> NodeView:
    """Copy what metrics and the console show; call on the node's event loop only."""
    raft, telemetry = node.raft, node.telemetry
    now_ms = time.monotonic_ns() // 1_000_000
    sets = []
    for replica in node.state.replica_infos():
        alive = node.live.alive(replica, now_ms)
        beats = {broker_id: node.live.last_heartbeat(replica.broker_name, broker_id)
                 for broker_id in alive}
        sets.append({**replica.to_json(), "alive": {
            broker_id: None if beat is None else {
                "master_epoch": beat.master_epoch, "max_log_position": beat.max_log_position,
                "confirm_log_position": beat.confirm_log_position,
                "broker_address": beat.broker_address}
            for broker_id, beat in beats.items()}})
    return NodeView(raft.node_id, raft.role.value, raft.term, raft.leader_id,
                    raft.log.committed_index, raft.log.applied_index,
                    raft.log.snapshot.entry_index, dict(telemetry.role_counts),
                    telemetry.leader_changes, dict(telemetry.master_elections), sets)


def read_view(node: ControllerNode, loop: asyncio.AbstractEventLoop,
              timeout_s: float = SCRAPE_TIMEOUT_S) -> NodeView | None:
    """`node_view` taken on the node's loop from another thread (None if it does not answer)."""

    async def on_loop() -> NodeView:
        return node_view(node)

    future = asyncio.run_coroutine_threadsafe(on_loop(), loop)
    try:
        return future.result(timeout=timeout_s)
    except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError, RuntimeError):
        # no answer in time, or the loop is closing: the scrape says "not up"
        future.cancel()
        return None


class ControllerCollector(Collector):
    def __init__(self, node: ControllerNode, loop: asyncio.AbstractEventLoop) -> None:
        self._node = node
        self._loop = loop

    def collect(self) -> Iterator[Metric]:
        controller = f"n{self._node.config.node_id}"
        view = read_view(self._node, self._loop)
        up = GaugeMetricFamily("rocketha_controller_up", "1 when the node answered the scrape",
                               labels=["controller"])
        up.add_metric([controller], 0 if view is None else 1)
        yield up
        info = GaugeMetricFamily("rocketha_build_info", "1, labelled with the running version",
                                 labels=["controller", "version"])
        info.add_metric([controller, VERSION], 1)
        yield info
        if view is None:
            return
        yield from _raft(controller, view)
        yield from _replica_sets(controller, view)


def _raft(controller: str, view: NodeView) -> Iterator[Metric]:
    base = [controller]
    roles = GaugeMetricFamily("rocketha_controller_role", "1 for this node's Raft role",
                              labels=["controller", "role"])
    for role in _RAFT_ROLES:
        roles.add_metric([controller, role], 1 if view.role == role else 0)
    yield roles
    for name, doc, value in (
        ("rocketha_controller_is_leader", "1 on the Raft leader (the group's sum must be 1)",
         1 if view.role == "leader" else 0),
        ("rocketha_raft_term", "Raft term", view.term),
        ("rocketha_raft_leader_id", "Raft leader's node id (0: none known)",
         view.leader_id or 0),
        ("rocketha_raft_commit_index", "Raft commit index", view.commit_index),
        ("rocketha_raft_applied_index", "Raft applied index", view.applied_index),
        ("rocketha_raft_snapshot_index", "Raft log compacted up to", view.snapshot_index),
    ):
        gauge = GaugeMetricFamily(name, doc, labels=["controller"])
        gauge.add_metric(base, value)
        yield gauge
    changes = CounterMetricFamily("rocketha_raft_role_changes", "Times this node took a role",
                                  labels=["controller", "role"])
    for role, count in sorted(view.role_counts.items()):
        changes.add_metric([controller, role], count)
    yield changes
    leaders = CounterMetricFamily("rocketha_raft_leader_changes", "Leader changes seen",
                                  labels=["controller"])
    leaders.add_metric(base, view.leader_changes)
    yield leaders


def _replica_sets(controller: str, view: NodeView) -> Iterator[Metric]:
    labels = ["controller", "replica_set"]
    families = {
        "elections": CounterMetricFamily("rocketmq_election", "Master elections applied",
                                         labels=labels),
        "active": GaugeMetricFamily("rocketmq_active_broker_num", "Brokers alive (heartbeats)",
                                    labels=labels),
        "epoch": GaugeMetricFamily("rocketha_replica_set_master_epoch", "Master epoch",
                                   labels=labels),
        "has_master": GaugeMetricFamily("rocketha_replica_set_has_master",
                                        "0 when the set has no master (offline)", labels=labels),
        "brokers": GaugeMetricFamily("rocketha_replica_set_brokers", "Registered brokers",
                                     labels=labels),
        "size": GaugeMetricFamily("rocketha_sync_state_set_size", "SyncStateSet members",
                                  labels=labels),
        "sset_epoch": GaugeMetricFamily("rocketha_sync_state_set_epoch", "SyncStateSet epoch",
                                        labels=labels),
    }
    positions = GaugeMetricFamily("rocketha_broker_reported_log_position_bytes",
                                  "Positions each live broker reported in its heartbeat",
                                  labels=[*labels, "broker_id", "position"])
    for replica in view.replica_sets:
        name = replica["broker_name"]
        key = [controller, name]
        families["elections"].add_metric(key, view.master_elections.get(name, 0))
        families["active"].add_metric(key, len(replica["alive"]))
        families["epoch"].add_metric(key, replica["master_epoch"])
        families["has_master"].add_metric(key, 0 if replica["master_broker_id"] is None else 1)
        families["brokers"].add_metric(key, len(replica["brokers"]))
        families["size"].add_metric(key, len(replica["sync_state_set"]))
        families["sset_epoch"].add_metric(key, replica["sync_state_set_epoch"])
        for broker_id, beat in sorted(replica["alive"].items()):
            if beat is None:
                continue
            for position in ("max", "confirm"):
                positions.add_metric([*key, str(broker_id), position],
                                     beat[f"{position}_log_position"])
    yield from families.values()
    yield positions


def serve_metrics(node: ControllerNode, loop: asyncio.AbstractEventLoop, host: str,
                  port: int, access: MetricsAccess = OPEN) -> MetricsServer:
    """Serve `/metrics` on host:port as `access` says. Raises OSError (e.g. the port is in
    use)."""
    server = serve_collector(ControllerCollector(node, loop), host, port, access)
    logger.info("%s metrics on %s", node.prefix, server.url)
    return server
