"""Broker addresses: what a broker binds and what it hands out are separate settings.

Goal: brokerIP1/brokerIP2 are advertised (never a wildcard: the key is named), bindAddress and
haBindAddress default to them and accept 0.0.0.0. Method: BrokerConfig.from_properties tables.
"""

from __future__ import annotations

import pytest

from ha.broker.addresses import is_wildcard, join_host_port
from ha.broker.config import BrokerConfig
from storage_engine import ConfigError


def test_defaults_bind_where_they_advertise() -> None:
    config = BrokerConfig.from_properties({"brokerIP1": "198.18.0.11"})
    assert config.endpoint == "198.18.0.11:10911"
    assert config.client_bind_host == "198.18.0.11"
    assert config.ha_host == "198.18.0.11"  # brokerIP2 defaults to brokerIP1
    assert config.ha_bind_host == "198.18.0.11"


def test_separate_ha_host_and_wildcard_binds() -> None:
    config = BrokerConfig.from_properties({
        "brokerIP1": "broker-a.example", "brokerIP2": "10.0.0.7", "bindAddress": "0.0.0.0",
        "haBindAddress": "0.0.0.0"})
    assert config.endpoint == "broker-a.example:10911"
    assert config.ha_host == "10.0.0.7"
    assert (config.client_bind_host, config.ha_bind_host) == ("0.0.0.0", "0.0.0.0")
    only_ha = BrokerConfig.from_properties({"brokerIP1": "10.0.0.1", "brokerIP2": "10.0.1.1"})
    assert only_ha.client_bind_host == "10.0.0.1" and only_ha.ha_bind_host == "10.0.1.1"


@pytest.mark.parametrize(("key", "value"), [
    ("brokerIP1", "0.0.0.0"), ("brokerIP1", "::"), ("brokerIP2", "0.0.0.0"),
    ("brokerIP2", "[::]"),
])
def test_wildcard_advertised_address_is_refused_naming_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        BrokerConfig.from_properties({key: value})
    assert caught.value.key == key
    assert str(caught.value).startswith(key) and "wildcard" in str(caught.value)


@pytest.mark.parametrize("key", ["brokerIP1", "brokerIP2", "bindAddress", "haBindAddress"])
def test_garbage_host_is_refused(key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        BrokerConfig.from_properties({key: "not a host"})


def test_helpers() -> None:
    assert is_wildcard("0.0.0.0") and is_wildcard("::") and is_wildcard("[::]")
    assert not is_wildcard("127.0.0.1") and not is_wildcard("broker-a")
    assert join_host_port("10.0.0.1", 5) == "10.0.0.1:5"
    assert join_host_port("::1", 5) == "[::1]:5"
