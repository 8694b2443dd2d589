"""Controller addresses: the peer list and controllerAddr are advertised, controllerBindAddress
says where this node listens.

Goal: a wildcard in an advertised list stops start-up naming the key; the bind address defaults
to this node's own advertised hosts and may be 0.0.0.0; NOT_LEADER replies name advertised
addresses. Method: ControllerConfig.from_properties tables.
"""

from __future__ import annotations

import pytest

from controller.config import ControllerConfig
from controller.errors import ConfigError

PEERS = "n1-198.18.0.11:9880;n2-198.18.0.12:9880;n3-198.18.0.13:9880"
CLIENTS = "198.18.0.11:9876;198.18.0.12:9876;198.18.0.13:9876"


def test_binds_its_own_advertised_hosts_by_default() -> None:
    config = ControllerConfig.from_properties({
        "controllerDLegerPeers": PEERS, "controllerAddr": CLIENTS,
        "controllerDLegerSelfId": "n2"})
    assert config.raft_bind_address() == ("198.18.0.12", 9880)
    assert config.client_bind_address() == "198.18.0.12:9876"
    assert config.client_address(3) == "198.18.0.13:9876"  # what NOT_LEADER names


def test_bind_address_applies_to_both_listeners_only() -> None:
    config = ControllerConfig.from_properties({
        "controllerDLegerPeers": PEERS, "controllerAddr": CLIENTS,
        "controllerDLegerSelfId": "n1", "controllerBindAddress": "0.0.0.0"})
    assert config.raft_bind_address() == ("0.0.0.0", 9880)
    assert config.client_bind_address() == "0.0.0.0:9876"
    assert config.raft_address(1) == ("198.18.0.11", 9880)  # still advertised as before
    assert config.client_address(1) == "198.18.0.11:9876"


@pytest.mark.parametrize(("key", "properties"), [
    ("controllerDLegerPeers", {"controllerDLegerPeers": "n1-0.0.0.0:9880",
                               "controllerAddr": "198.18.0.11:9876"}),
    ("controllerAddr", {"controllerAddr": "0.0.0.0:9876"}),
])
def test_wildcard_advertised_address_is_refused(key: str, properties: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=f"^{key}: .*wildcard"):
        ControllerConfig.from_properties(properties)


def test_bad_bind_address_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^controllerBindAddress"):
        ControllerConfig.from_properties({"controllerBindAddress": "a b"})
