"""`rocketha-cluster add-set --dir D`: one more replica set in a running cluster.

Why: when a cluster is full, the way out is another replica set, not a bigger one: a topic
is then extended onto the new set (`rocketha-admin topic update --topic T --add-broker-name
broker-c --queues 4`, RocketMQ's `updateTopic -b` per broker) and its producers and readers
find the new queues at their next route refresh. Nothing already running is restarted.

The new set is `broker-<next letter>` with the cluster's shape and settings: as many
replicas as the other sets, the `--set` keys `up` kept, the cluster's TLS (a member
certificate from the cluster CA) and its authentication keys, and, with controllers, their
addresses, so it registers with them and is given a master like any other set. The command
prints the new brokers, the set's master, and the admin command that extends a topic.
"""

from __future__ import annotations

import argparse
import string
from typing import Any

from ha.cluster.cli import REPLICA_SETS_MAX
from ha.cluster.controllers import LocalControllers
from ha.cluster.hosts import host_of, hosts_mode
from ha.cluster.security import write_client_properties

__all__ = ["next_set_name", "run"]


def next_set_name(manifest: dict[str, Any]) -> str:
    """The name the next replica set gets; SystemExit (one line) when there is none: no
    cluster yet, sets that are not broker-a.. in order (the layout `up` makes), or all 26."""
    sets = sorted({broker["set"] for broker in manifest.get("brokers", [])})
    if not sets:
        raise SystemExit("rocketha-cluster: add-set needs a cluster (start one with "
                         "`rocketha-cluster up --dir ...`)")
    expected = [f"broker-{letter}" for letter in string.ascii_lowercase[:len(sets)]]
    if sets != expected:
        raise SystemExit(f"rocketha-cluster: add-set: this cluster's replica sets {sets} are "
                         f"not {expected[0]}..{expected[-1]}; add a set by hand (see "
                         "docs/planned-operations.md)")
    if len(sets) >= REPLICA_SETS_MAX:
        raise SystemExit(f"rocketha-cluster: add-set: the cluster already has "
                         f"{REPLICA_SETS_MAX} replica sets (broker-a..broker-z)")
    return f"broker-{string.ascii_lowercase[len(sets)]}"


def run(args: argparse.Namespace, cluster: Any) -> int:
    """`cluster`: ha.cluster.main.Cluster for args.dir (passed in: main imports this module)."""
    if not cluster.manifest_path.exists():
        raise SystemExit(f"rocketha-cluster: no cluster in {cluster.directory} (no "
                         "cluster.json); start one with `rocketha-cluster up --dir ...`")
    manifest = cluster.load()
    new_set = next_set_name(manifest)
    set_count = len({broker["set"] for broker in manifest["brokers"]})
    controllers = LocalControllers(cluster.directory)
    controller_addr = ";".join(c["endpoint"] for c in controllers.status())
    if manifest.get("controllers") and not controller_addr:
        raise SystemExit("rocketha-cluster: add-set: no controller of this cluster is known "
                         "(`rocketha-cluster status`); start them first (`up`)")
    # the plan keeps every existing broker's ports and settings (their conf files are
    # rewritten with the same content) and appends the new set's members
    manifest = cluster.plan(set_count + 1, {}, manifest.get("replicas", 1), controller_addr,
                            hosts=hosts_mode(manifest))
    added = [broker for broker in manifest["brokers"] if broker["set"] == new_set]
    for broker in added:
        if cluster.pid_of(broker) is None:
            cluster.start(broker)
    for broker in added:
        cluster.wait_ready(broker)
        print(f"{broker['name']} {host_of(broker)}:{broker['port']}")
    if controller_addr and not args.no_wait:
        for line in cluster.wait_masters():
            if line.startswith(f"{new_set} "):
                print(line)
    properties = write_client_properties(
        cluster.directory, manifest, controller_addr,
        [f"{host_of(b)}:{b['port']}" for b in manifest["brokers"]])
    print(f"extend a topic onto it: rocketha-admin --client-config {properties} topic update "
          f"--topic T "
          f"--add-broker-name {new_set} --queues N")
    return 0
