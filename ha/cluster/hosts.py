"""`rocketha-cluster up --hosts`: each process of a local cluster on its own test host.

The cluster tool's processes normally share 127.0.0.1. With `--hosts`, `up` makes one network
of test hosts (ha/cluster/netns.py: network namespaces on a bridge, addresses from
198.18.0.0/15, the root namespace on the bridge so tools and clients here reach every host),
puts each controller and broker on a host of its own, and starts it there (`ip netns exec`).
Every address in the configs, in `status --json` and in what the processes hand each other is
then that host's address (brokerIP1, the controllers' peer list and controllerAddr). The
network is recorded in `cluster.json` under "hosts" ({"network", "subnet", "count"}); a later
`up` re-makes it if it is gone (same name and subnet), `down` removes it after stopping the
processes. Network names start with `rc` (never removed by the tests' leftover clean-up).
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

from ha.cluster.netns import HostNetwork, HostsUnavailableError, ensure_tools

__all__ = ["LOOPBACK", "host_of", "hosts_mode", "launcher_of", "place_on_hosts",
           "remove_hosts"]

LOOPBACK = "127.0.0.1"


def host_of(entry: dict[str, Any]) -> str:
    """The address a process of the cluster advertises (its test host's, or 127.0.0.1)."""
    return str(entry.get("host", LOOPBACK))


def launcher_of(entry: dict[str, Any]) -> list[str]:
    """The command prefix that starts the process on its test host (none on 127.0.0.1)."""
    namespace = entry.get("namespace")
    return ["ip", "netns", "exec", str(namespace)] if namespace else []


def _network_name(directory: Path) -> str:
    return f"rc{zlib.crc32(str(directory.resolve()).encode()) & 0xFFFFFF:x}x1"


def hosts_mode(manifest: dict[str, Any]) -> bool:
    """Whether this cluster runs on test hosts (`up --hosts` once made it so)."""
    return manifest.get("hosts") is not None


def place_on_hosts(directory: Path, manifest: dict[str, Any], spare: int = 0) -> HostNetwork:
    """Make (or find) the cluster's network with one host per controller and broker of the
    manifest, and record each one's host ("host", "namespace") in its entry; entries keep
    their host across `up`s. `spare`: hosts with nothing of the cluster on them, for other
    processes (the demo's Spark workers), listed under hosts["spare"] as {"address",
    "namespace"}; they are removed by `down` with the rest."""
    ensure_tools()
    hosts = manifest.setdefault("hosts", {})
    spares = hosts.setdefault("spare", [])
    while len(spares) < spare:
        spares.append({})
    entries = [*manifest.get("controllers", []), *manifest.get("brokers", []), *spares]
    name = hosts.setdefault("network", _network_name(directory))
    taken = {entry["host_index"] for entry in entries if "host_index" in entry}
    free = (index for index in range(1, len(entries) + len(taken) + 1) if index not in taken)
    for entry in entries:
        if "host_index" not in entry:
            entry["host_index"] = next(free)
    count = max([hosts.get("count", 0), *(entry["host_index"] for entry in entries)])
    existing = hosts.get("count", 0)
    network = None
    if existing:
        try:
            network = HostNetwork.attach(name, existing)
            network.grow(count)
        except HostsUnavailableError:  # gone (a reboot, a manual clean-up): made again
            network = None
    if network is None:
        HostNetwork.remove(name, existing)
        network = HostNetwork(count, name=name, subnet=hosts.get("subnet"))
    hosts.update({"subnet": str(network.subnet), "count": count,
                  "root_address": network.root_address})
    for entry in entries:
        host = network.host(entry["host_index"])
        entry["host"], entry["namespace"] = host.address, host.namespace
    for entry in spares:
        entry["address"] = entry["host"]
    return network


def remove_hosts(manifest: dict[str, Any]) -> None:
    """Remove the cluster's network (after its processes are stopped)."""
    hosts = manifest.get("hosts") or {}
    if hosts.get("network") and hosts.get("count"):
        HostNetwork.remove(hosts["network"], hosts["count"])
