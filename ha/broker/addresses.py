"""Checks for the hosts a broker binds and the hosts it hands to other processes.

An advertised host (brokerIP1, brokerIP2) ends up in the controller's routes and SyncStateSet
members, in NOT_MASTER redirects and in the HA address slaves dial: another machine must be
able to dial it. A wildcard (`0.0.0.0`, `::`) is a fine bind address and a useless address to
hand out (a client dialling it reaches itself), so it is refused at start, naming the key.
"""

from __future__ import annotations

import ipaddress
import re

from storage_engine import ConfigError

__all__ = ["check_advertised_host", "check_bind_host", "is_wildcard", "join_host_port"]

_HOSTNAME = re.compile(r"^[0-9A-Za-z.\-]{1,253}$")


def is_wildcard(host: str) -> bool:
    """True for an address that means "every interface" (0.0.0.0, ::)."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def _check_host(key: str, host: str) -> None:
    if _HOSTNAME.match(host):
        return
    try:
        ipaddress.IPv6Address(host.strip("[]"))
    except ValueError:
        raise ConfigError(key, f"{host!r} is not a host name or IP address") from None


def check_bind_host(key: str, host: str) -> None:
    """A listener's bind address: any host or IP, wildcards included."""
    _check_host(key, host)


def check_advertised_host(key: str, host: str) -> None:
    """An address handed to other processes: a host or IP they can dial, never a wildcard."""
    _check_host(key, host)
    if is_wildcard(host):
        raise ConfigError(key, f"{host!r} is a wildcard: other processes cannot dial it; "
                          "advertise this machine's address (bind to a wildcard with "
                          "bindAddress / haBindAddress)")


def join_host_port(host: str, port: int) -> str:
    """`host:port`, with an IPv6 literal in brackets (`[::]:9876`)."""
    bare = host.strip("[]")
    return f"[{bare}]:{port}" if ":" in bare else f"{bare}:{port}"
