"""Test hosts for integration tests: network namespaces on a bridge (ha/cluster/netns.py).

    def test_x(test_hosts):                 # the fixture is a factory
        net = test_hosts(3)                 # 3 hosts, 198.18.0.0/15 addresses, root on the bridge
        group = ControllerGroup(dir, 1, hosts={1: net.host(1).address},
                                launchers={1: net.host(1).launcher()})
        net.block(net.host(1), net.host(2).address, direction="out", action="drop")
        net.heal()

Every network a test makes is removed after it, failed or not (the fixture's finalizer kills
what still runs in its namespaces, then deletes them and the bridge); at the first use in a
session, networks left by a killed run (their owner pid gone) are removed too. Where
namespaces cannot be made (not root, no netns support) the test is skipped with the reason;
missing Debian packages (iproute2, nftables) are installed first.
"""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest

from ha.cluster.netns import HostNetwork, hosts_unavailable_reason, remove_leftovers

__all__ = ["can_connect", "hosts_skip_reason", "test_hosts"]

CONNECT_TIMEOUT_S = 1.0


@functools.cache
def hosts_skip_reason() -> str | None:
    """Checked once per session: why test hosts cannot be made (None: they can)."""
    reason = hosts_unavailable_reason()
    if reason is None:
        remove_leftovers()
    return reason


@pytest.fixture
def test_hosts() -> Iterator[Callable[[int], HostNetwork]]:
    reason = hosts_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    made: list[HostNetwork] = []

    def make(count: int) -> HostNetwork:
        network = HostNetwork(count)
        made.append(network)
        return network

    yield make
    for network in made:
        network.close()
    assert not any(network.exists() for network in made), "a test network outlived its test"


def can_connect(address: str, port: int, *, launcher: list[str] | None = None) -> str:
    """Try one TCP connect to address:port, from the root namespace or (launcher) a host:
    "ok", "refused" or "timeout"/"unreachable"."""
    if launcher:
        done = subprocess.run(
            [*launcher, sys.executable, "-c", _PROBE, address, str(port)],
            capture_output=True, text=True, timeout=30, check=False,
            env={**os.environ})
        return done.stdout.strip() or f"error: {done.stderr[-200:]}"
    return _probe(address, port)


def _probe(address: str, port: int) -> str:
    try:
        socket.create_connection((address, port), timeout=CONNECT_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError as err:
        return f"unreachable ({err.strerror})"
    return "ok"


_PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1.0).close()
    print("ok")
except ConnectionRefusedError:
    print("refused")
except TimeoutError:
    print("timeout")
except OSError as err:
    print(f"unreachable ({err.strerror})")
"""
