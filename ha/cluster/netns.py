"""Test hosts on one Linux machine: network namespaces on a bridge (root, iproute2, nftables).

    root namespace                      host i (namespace <net>h<i>)
      <net>b  (bridge, 198.18.N.1/24)     eth0 198.18.N.(10+i)/24, lo up
        └── <net>v<i>  ─── veth pair ───  eth0         nftables table `inet rocketha`
                                                        (partition rules, inside the host)

Each network gets one /24 of 198.18.0.0/15 (RFC 2544's benchmarking block: it never leaves this
machine) that no interface on the machine uses yet, and never addresses anything outside it.
Processes run on a host through `ip netns exec <namespace> ...` (`launcher(host)`); the root
namespace has the bridge's .1 address, so clients, tools and Spark on the machine reach every
host, and each host reaches the others and the root address.

Faults (what a machine in a real network sees):
    link_down(h) / link_up(h)           the bridge side of h's veth: h is cut from everyone
    block(h, peer, direction, action)   an nftables rule inside h: drop (silence, timeouts) or
                                        reject (TCP reset / ICMP: "connection refused") traffic
                                        with one peer in one direction ("in", "out", "both")
    isolate(h, allow=...)               block every other address of the network (but `allow`)
    lose(h, percent, direction)         drop that share of h's packets with the network, at
                                        random (nftables `numgen random mod 100 < N drop`)
    heal(h=None)                        flush the rules and set the links up again

Names carry the owner: `rh<pid hex>x<n hex>` + `b` (bridge) / `v<i>` (veth; `p<i>` its
peer until it moves into the host) / `h<i>` (namespace), at most 15 characters (an interface name's
limit). `remove_leftovers()` deletes every namespace and link of that shape whose owner pid is gone
(a test run that was killed), and never anything else. `HostNetwork.close()` removes what the
network made; deleting a namespace deletes its veth end, its addresses and its nftables rules with
it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from typing import Self

from ha.cluster.processes import pid_alive

__all__ = ["BENCHMARK_BLOCK", "HostNetwork", "HostsUnavailableError", "TestHost",
           "ensure_tools", "hosts_unavailable_reason", "remove_leftovers"]

BENCHMARK_BLOCK = ipaddress.ip_network("198.18.0.0/15")
HOSTS_MAX = 200  # .10 ... .209 of the network's /24
COMMAND_TIMEOUT_S = 30.0
APT_TIMEOUT_S = 600.0
NFT_TABLE = "rocketha"
_NAME = re.compile(r"^r[hc]([0-9a-f]+)x([0-9a-f]+)(b|[vph]\d+)$")
_TEST_NAME = re.compile(r"^rh([0-9a-f]+)x")
_TOOLS = {"ip": "iproute2", "nft": "nftables"}
_networks = itertools.count(1)


class HostsUnavailableError(Exception):
    """Test hosts cannot be made here (not root, no namespaces, a tool missing)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TestHost:
    """One test host: its namespace and its address on the network's bridge."""

    __test__ = False  # not a pytest class
    index: int
    namespace: str
    address: str
    veth: str  # the bridge side, in the root namespace

    def launcher(self) -> list[str]:
        """The command prefix that runs a process on this host."""
        return ["ip", "netns", "exec", self.namespace]


def _run(argv: Sequence[str], *, input_text: str | None = None, check: bool = True
         ) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), input=input_text, capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, check=False)
    if check and done.returncode != 0:
        raise HostsUnavailableError(f"{' '.join(argv)} failed ({done.returncode}): "
                                    f"{done.stderr.strip()[-500:]}")
    return done


def ensure_tools(*, install: bool = True) -> None:
    """`ip` and `nft` on PATH; installs the missing Debian packages (apt-get) when allowed."""
    missing = sorted({package for tool, package in _TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        return
    if not install or os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise HostsUnavailableError(f"missing Debian packages {missing} (and cannot install)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"],
                 ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=APT_TIMEOUT_S,
                              env=env, check=False)
        if done.returncode != 0:
            raise HostsUnavailableError(f"{' '.join(argv)} failed: {done.stderr[-500:]}")
    still = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if still:
        raise HostsUnavailableError(f"{still} still missing after installing {missing}")


def hosts_unavailable_reason() -> str | None:
    """Why test hosts cannot be made here (None: they can). Tries one namespace for real."""
    if os.geteuid() != 0:
        return "test hosts need root (network namespaces, a bridge, nftables)"
    try:
        ensure_tools()
        probe = f"rh{os.getpid():x}xffh0"
        _run(["ip", "netns", "add", probe])
        try:
            _run(["ip", "netns", "exec", probe, "nft", "list", "tables"])
        finally:
            _run(["ip", "netns", "del", probe], check=False)
    except (HostsUnavailableError, OSError, subprocess.TimeoutExpired) as err:
        return f"network namespaces cannot be made here: {err}"
    return None


def _our_names() -> tuple[list[str], list[str]]:
    """(namespaces, links) in the root namespace whose names have our shape."""
    namespaces = [line.split()[0] for line in _run(["ip", "netns", "list"]).stdout.splitlines()
                  if line.strip()]
    links = [line.split(":")[1].strip().split("@")[0]
             for line in _run(["ip", "-o", "link", "show"]).stdout.splitlines()
             if line.count(":") >= 2]
    return ([n for n in namespaces if _NAME.match(n)], [n for n in links if _NAME.match(n)])


def remove_leftovers(*, owner_pids: Iterable[int] = ()) -> list[str]:
    """Delete the test networks (`rh...` names) of a process that is gone (or of
    `owner_pids`): first every process still running in their namespaces (a killed test run's
    brokers), then the namespaces and links. Returns what was removed. Networks of live
    owners (a parallel test run) and of `rocketha-cluster up --hosts` (`rc...`, removed by its
    `down`) are left alone."""
    owners = set(owner_pids)
    removed = []
    namespaces, links = _our_names()
    for name in namespaces + links:
        match = _TEST_NAME.match(name)
        if match is None:
            continue
        pid = int(match.group(1), 16)
        if pid not in owners and pid_alive(pid):
            continue
        if name in namespaces:
            _kill_processes_in(name)
            done = _run(["ip", "netns", "del", name], check=False)
        else:
            done = _run(["ip", "link", "del", name], check=False)
        if done.returncode == 0:
            removed.append(name)
    return removed


def _kill_processes_in(namespace: str) -> None:
    """SIGKILL every process running in `namespace` (only processes our harness started there:
    the namespace is ours) and wait briefly until they are gone."""
    for _ in range(50):  # bounded: 50 rounds of 0.1 s
        listed = _run(["ip", "netns", "pids", namespace], check=False).stdout.split()
        pids = [int(pid) for pid in listed if pid.isdigit()]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def _free_subnet(seed: int) -> ipaddress.IPv4Network:
    """A /24 of the benchmarking block that no interface here has an address in."""
    used = []
    for line in _run(["ip", "-o", "-4", "addr", "show"]).stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            used.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    subnets = list(BENCHMARK_BLOCK.subnets(new_prefix=24))
    for step in range(len(subnets)):
        candidate = subnets[(seed + step) % len(subnets)]
        if not any(candidate.overlaps(net) for net in used):
            return candidate
    raise HostsUnavailableError("every /24 of 198.18.0.0/15 is in use on this machine")


class HostNetwork:
    """N test hosts on one bridge; see the module docstring. Use as a context manager or call
    `close()` (it never raises for things already gone)."""

    def __init__(self, count: int, *, name: str | None = None, create: bool = True,
                 subnet: str | None = None) -> None:
        """Make `count` hosts (`create=False`: a handle on a network made before, see
        `attach`). `name`: `rh<pid hex>x<n hex>` by default (a test run's network, removed by
        `remove_leftovers` once that pid is gone); `rocketha-cluster` names its own `rc...`."""
        if not 1 <= count <= HOSTS_MAX:
            raise ValueError(f"count {count} not in [1, {HOSTS_MAX}]")
        self.name = name or f"rh{os.getpid():x}x{next(_networks):x}"
        match = _NAME.match(self.name + "b")
        if match is None or len(self.name) + 4 > 15:
            raise ValueError(f"network name {self.name!r}: r[hc]<hex>x<hex>, <= 11 chars")
        self.bridge = f"{self.name}b"
        self.hosts: list[TestHost] = []
        self._attempted = 0  # hosts whose making started (close removes their remains)
        self._blocked: dict[str, list[str]] = {}
        if not create:
            self._attempted = count
            self._load(count)
            return
        self.subnet = (ipaddress.ip_network(subnet) if subnet is not None else
                       _free_subnet(int(match.group(1), 16) + int(match.group(2), 16) * 7919))
        if not (self.subnet.prefixlen == 24 and BENCHMARK_BLOCK.supernet_of(self.subnet)):
            raise ValueError(f"subnet {self.subnet}: a /24 of {BENCHMARK_BLOCK}")
        self.root_address = str(self.subnet.network_address + 1)
        self._up(count)

    @classmethod
    def attach(cls, name: str, count: int) -> HostNetwork:
        """A handle on the network `name` with `count` hosts, made earlier (maybe by another
        process, e.g. `rocketha-cluster up --hosts`): faults and `close()` work on it."""
        return cls(count, name=name, create=False)

    @staticmethod
    def remove(name: str, count: int) -> None:
        """Remove whatever is left of network `name` with up to `count` hosts (its processes,
        namespaces and links), without needing the network to be whole."""
        network = HostNetwork.__new__(HostNetwork)
        network.name, network.bridge = name, f"{name}b"
        network._attempted, network.hosts = count, []
        network.close()

    def _load(self, count: int) -> None:
        line = _run(["ip", "-o", "-4", "addr", "show", "dev", self.bridge]).stdout.split()
        bridge = ipaddress.ip_interface(line[line.index("inet") + 1])
        self.subnet = bridge.network
        self.root_address = str(bridge.ip)
        for index in range(1, count + 1):
            host = TestHost(index, f"{self.name}h{index}",
                            str(self.subnet.network_address + 9 + index), f"{self.name}v{index}")
            listed = _run([*host.launcher(), "nft", "list", "tables"], check=False).stdout
            if NFT_TABLE in listed:
                self._blocked[host.namespace] = []
            self.hosts.append(host)

    # -- making and removing ----------------------------------------------------------------
    def _up(self, count: int) -> None:
        try:
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
            _run(["ip", "addr", "add", f"{self.root_address}/24", "dev", self.bridge])
            _run(["ip", "link", "set", self.bridge, "up"])
            for index in range(1, count + 1):
                self._attempted = index
                self.hosts.append(self._add_host(index))
        except BaseException:
            self.close()
            raise

    def grow(self, count: int) -> None:
        """Add hosts until there are `count` (the ones there keep running)."""
        for index in range(len(self.hosts) + 1, count + 1):
            self._attempted = max(self._attempted, index)
            self.hosts.append(self._add_host(index))

    def shrink(self, count: int) -> None:
        """Remove the hosts after the first `count` (what runs in them, their namespaces and
        veth pairs); the inverse of `grow`."""
        while len(self.hosts) > count:
            host = self.hosts.pop()
            self._blocked.pop(host.namespace, None)
            _kill_processes_in(host.namespace)
            _run(["ip", "netns", "del", host.namespace], check=False)
            if _run(["ip", "link", "show", host.veth], check=False).returncode == 0:
                _run(["ip", "link", "del", host.veth], check=False)
        self._attempted = min(self._attempted, max(count, len(self.hosts)))

    def _add_host(self, index: int) -> TestHost:
        namespace, veth = f"{self.name}h{index}", f"{self.name}v{index}"
        address = str(self.subnet.network_address + 9 + index)
        peer = f"{self.name}p{index}"  # renamed to eth0 inside the namespace
        _run(["ip", "netns", "add", namespace])
        _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
        _run(["ip", "link", "set", peer, "netns", namespace])
        _run(["ip", "link", "set", veth, "master", self.bridge])
        _run(["ip", "link", "set", veth, "up"])
        inside = ["ip", "netns", "exec", namespace]
        _run([*inside, "ip", "link", "set", peer, "name", "eth0"])
        _run([*inside, "ip", "addr", "add", f"{address}/24", "dev", "eth0"])
        _run([*inside, "ip", "link", "set", "eth0", "up"])
        _run([*inside, "ip", "link", "set", "lo", "up"])
        return TestHost(index, namespace, address, veth)

    def close(self) -> None:
        """Remove every namespace (with its veth end, addresses and rules) and the bridge."""
        for index in range(1, self._attempted + 1):
            namespace = f"{self.name}h{index}"
            if _run(["ip", "netns", "pids", namespace], check=False).returncode == 0:
                _kill_processes_in(namespace)
                _run(["ip", "netns", "del", namespace], check=False)
            for link in (f"{self.name}v{index}", f"{self.name}p{index}"):
                if _run(["ip", "link", "show", link], check=False).returncode == 0:
                    _run(["ip", "link", "del", link], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        self.hosts = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def host(self, index: int) -> TestHost:
        """Host `index` (1-based)."""
        return self.hosts[index - 1]

    def exists(self) -> bool:
        namespaces, links = _our_names()
        return self.bridge in links or any(n.startswith(self.name + "h") for n in namespaces)

    # -- faults -----------------------------------------------------------------------------
    def link_down(self, host: TestHost) -> None:
        _run(["ip", "link", "set", host.veth, "down"])

    def link_up(self, host: TestHost) -> None:
        _run(["ip", "link", "set", host.veth, "up"])

    def block(self, host: TestHost, peer: str, *, direction: str = "both",
              action: str = "drop") -> None:
        """Inside `host`: drop or reject packets to ("out") / from ("in") address `peer`."""
        if direction not in ("in", "out", "both"):
            raise ValueError(f"direction {direction!r}: in, out or both")
        if action not in ("drop", "reject"):
            raise ValueError(f"action {action!r}: drop or reject")
        if ipaddress.ip_address(peer) not in self.subnet:
            raise ValueError(f"{peer} is not on this network ({self.subnet})")
        verdict = "reject with tcp reset" if action == "reject" else "drop"
        rules = []
        for chain, match in (("input", "saddr"), ("output", "daddr")):
            if direction in ("both", "in" if chain == "input" else "out"):
                if action == "reject":
                    rules.append(f"add rule inet {NFT_TABLE} {chain} ip {match} {peer} "
                                 f"meta l4proto tcp {verdict}")
                    rules.append(f"add rule inet {NFT_TABLE} {chain} ip {match} {peer} reject")
                else:
                    rules.append(f"add rule inet {NFT_TABLE} {chain} ip {match} {peer} drop")
        self._nft(host, rules)

    def isolate(self, host: TestHost, *, allow: Iterable[str] = (), direction: str = "both",
                action: str = "drop") -> None:
        """Block every address of the network (hosts and root) except `allow`."""
        allowed = set(allow)
        for peer in [self.root_address, *(h.address for h in self.hosts)]:
            if peer != host.address and peer not in allowed:
                self.block(host, peer, direction=direction, action=action)

    def lose(self, host: TestHost, percent: int, *, direction: str = "both") -> None:
        """Inside `host`: drop `percent` % of the packets from ("in") / to ("out") the
        network's other addresses, each packet drawn at random (tc netem is not available
        here: nftables' numgen is)."""
        if not 0 < percent <= 100:
            raise ValueError(f"percent {percent} not in (0, 100]")
        if direction not in ("in", "out", "both"):
            raise ValueError(f"direction {direction!r}: in, out or both")
        draw = f"numgen random mod 100 < {percent} " if percent < 100 else ""  # 0-99 only
        rules = [f"add rule inet {NFT_TABLE} {chain} ip {match} {self.subnet} {draw}drop"
                 for chain, match, side in (("input", "saddr", "in"), ("output", "daddr", "out"))
                 if direction in ("both", side)]
        self._nft(host, rules)

    def heal(self, host: TestHost | None = None) -> None:
        """Flush the rules of `host` (every host when None) and set its link(s) up."""
        for target in [host] if host is not None else self.hosts:
            if self._blocked.pop(target.namespace, None) is not None:
                _run([*target.launcher(), "nft", "flush", "table", "inet", NFT_TABLE])
            self.link_up(target)

    def rules(self, host: TestHost) -> str:
        """The host's nftables ruleset as `nft list ruleset` prints it."""
        return _run([*host.launcher(), "nft", "list", "ruleset"]).stdout

    def _nft(self, host: TestHost, rules: list[str]) -> None:
        script = []
        if host.namespace not in self._blocked:
            script += [f"add table inet {NFT_TABLE}"] + [
                f"add chain inet {NFT_TABLE} {chain} {{ type filter hook {chain} priority 0; "
                "policy accept; }" for chain in ("input", "output")]
        script += rules
        _run([*host.launcher(), "nft", "-f", "-"], input_text="\n".join(script) + "\n")
        self._blocked.setdefault(host.namespace, []).extend(rules)
