"""`rocketha-cluster drop-set --dir D`: stop and forget the cluster's last replica set,
once nothing is left on it.

Why a check first: the set may hold messages nobody has read yet, and those are only on it.
So the command refuses, in one line, while any of its topics still takes writes (drain them
first: `rocketha-admin topic update --topic T --remove-broker-name broker-c`), while any
consumer group has not read all of a queue there, or while a topic table still lags behind
the set's messages (ha/broker/topic_tables.py). Then it stops the set's brokers, asks the
controllers to forget the set (their `clean_broker_data`, through `rocketha-admin clean`,
once they no longer hear it) and takes it out of cluster.json and client.properties.

Only the last set (the highest letter) is removed, so the sets stay broker-a.. in order,
which is what `add-set` names the next one from.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ha.broker.peer import signed_action
from ha.cluster import auth as cluster_auth
from ha.cluster.controllers import LocalControllers
from ha.cluster.hosts import host_of
from ha.cluster.security import CLIENT_PROPERTIES, client_tls, write_client_properties

__all__ = ["leftovers", "run"]

PERM_WRITE = 2  # a topic config's write permission bit (RocketMQ's PERM_WRITE)
CLEAN_TIMEOUT_S = 60.0  # until the controllers no longer hear the stopped brokers
CLEAN_RETRY_S = 1.0
CALL_TIMEOUT_S = 5.0
ROOT = Path(__file__).resolve().parents[2]


def leftovers(topics: list[Mapping[str, Any]], groups: Mapping[str, Any],
              tables: Mapping[str, Any]) -> list[str]:
    """What keeps a set from being removed, from its master's list_topics, consumer_groups
    and broker_info["topic_tables"]["topics"] replies: topics taking writes, groups with
    unread messages (per topic, summed over queues), tables behind the log."""
    found = [f"topic {topic['name']} takes writes" for topic in topics
             if int(topic.get("perm", PERM_WRITE)) & PERM_WRITE]
    for group, by_topic in sorted(groups.items()):
        for topic, queues in sorted(by_topic.items()):
            lag = sum(max(0, entry["max_queue_offset"] - entry["committed"])
                      for entry in queues.values())
            if lag:
                found.append(f"group {group} lags {lag} on {topic}")
    for topic, table in sorted(tables.items()):
        if table.get("lag_messages"):
            found.append(f"the table of {topic} lags {table['lag_messages']}")
    return found


def run(args: argparse.Namespace, cluster: Any) -> int:
    """`cluster`: ha.cluster.main.Cluster for args.dir (passed in: main imports this module)."""
    if not cluster.manifest_path.exists():
        raise SystemExit(f"rocketha-cluster: no cluster in {cluster.directory} (no "
                         "cluster.json)")
    manifest = cluster.load()
    sets = sorted({broker["set"] for broker in manifest["brokers"]})
    if len(sets) < 2:
        raise SystemExit("rocketha-cluster: drop-set: the cluster has one replica set; "
                         "it keeps it (`down` stops everything)")
    last = sets[-1]
    members = [broker for broker in manifest["brokers"] if broker["set"] == last]
    master = _master_info(cluster.directory, manifest, members)
    if master is None:
        raise SystemExit(f"rocketha-cluster: drop-set: no master of {last} answers, so "
                         "what is left on it is unknown; start it (`up`) and drain it first")
    endpoint, info = master
    replies = [_call(cluster.directory, manifest, endpoint, action)
               for action in ("list_topics", "consumer_groups")]
    if None in replies:
        raise SystemExit(f"rocketha-cluster: drop-set: {last}'s master {endpoint} did not "
                         "answer list_topics and consumer_groups; nothing was changed")
    topics, groups = replies[0] or {}, replies[1] or {}
    left = leftovers(topics.get("topics", []), groups.get("groups", {}),
                     (info.get("topic_tables") or {}).get("topics", {}))
    if left:
        raise SystemExit(f"rocketha-cluster: drop-set: {last} still has work: "
                         f"{'; '.join(left)} (drain: rocketha-admin topic update --topic T "
                         f"--remove-broker-name {last}; then let readers finish)")
    for broker in members:
        cluster.stop(broker)
        print(f"{broker['name']} stopped")
    controllers = LocalControllers(cluster.directory)
    controller_addr = ";".join(c["endpoint"] for c in controllers.status())
    if controller_addr:
        _forget(cluster.directory, controller_addr, last)
        print(f"{last} forgotten by the controllers")
    manifest["brokers"] = [b for b in manifest["brokers"] if b["set"] != last]
    cluster.save(manifest)
    write_client_properties(cluster.directory, manifest, controller_addr,
                            [f"{host_of(b)}:{b['port']}" for b in manifest["brokers"]])
    print(f"{last} removed (its data stays under {cluster.directory / 'data'})")
    return 0


def _call(directory: Path, manifest: dict[str, Any], endpoint: str, action: str
          ) -> dict[str, Any] | None:
    return signed_action(endpoint, action, CALL_TIMEOUT_S, client_tls(directory, manifest),
                         cluster_auth.admin_credentials(directory))


def _master_info(directory: Path, manifest: dict[str, Any], members: list[dict[str, Any]]
                 ) -> tuple[str, dict[str, Any]] | None:
    for broker in members:
        endpoint = f"{host_of(broker)}:{broker['port']}"
        info = _call(directory, manifest, endpoint, "broker_info")
        if info is not None and info.get("role") == "MASTER":
            return endpoint, info
    return None


def _forget(directory: Path, controller_addr: str, set_name: str) -> None:
    """`rocketha-admin clean` until the controllers no longer hear the set (BROKER_ALIVE
    until their heartbeat timeout passes) and forget it."""
    command = [sys.executable, "-m", "rocketha_admin", "--controller", controller_addr,
               "--client-config", str(directory / CLIENT_PROPERTIES), "clean",
               "--broker-name", set_name]
    deadline = time.monotonic() + CLEAN_TIMEOUT_S
    while True:
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False,
                              timeout=CLEAN_TIMEOUT_S)
        if done.returncode == 0:
            return
        if time.monotonic() >= deadline:
            raise SystemExit(f"rocketha-cluster: drop-set: the controllers did not forget "
                             f"{set_name} within {CLEAN_TIMEOUT_S:.0f}s (its brokers are "
                             f"stopped): {(done.stdout + done.stderr).strip()[-300:]}")
        time.sleep(CLEAN_RETRY_S)
