"""`broker config set`'s core (ha/broker/live_config.py) and its key table (ha/broker/config.py
LIVE_KEYS): validation as at start-up, the conf file rewritten atomically with its comments, live
keys applied, the others pending until a restart.

Method: plan_change on texts; LiveConfig on a real file in tmp_path (real fsync and rename),
its running config held in a list the way BrokerService holds its attribute; refusals checked
to leave the file's bytes and the running config exactly as they were.
"""

from __future__ import annotations

import dataclasses
import stat
import threading
from pathlib import Path

import pytest

from conf.acl import ADMIN_OPERATIONS, AuthData, Policy, User, authorize, requirement_of
from ha.broker.config import (
    BROKER_KEYS,
    LIVE_KEYS,
    MASKED,
    BrokerConfig,
    effective_properties,
    top_level_properties,
)
from ha.broker.live_config import LiveConfig, plan_change
from storage_engine import ConfigError

CONF = """# a broker
brokerName=broker-a
listenPort=10911
# limits
putRowsMax=65536
flushDiskType=ASYNC_FLUSH
"""


def test_every_live_key_is_a_broker_key_read_from_the_running_config() -> None:
    assert set(top_level_properties(BrokerConfig())) >= LIVE_KEYS
    assert LIVE_KEYS < BROKER_KEYS


def test_a_live_key_changes_the_text_and_the_running_config() -> None:
    running = BrokerConfig.from_properties({"listenPort": "10911"})
    text, after = plan_change(CONF, "broker.conf", running, "putRowsMax", "1024")
    assert text == CONF.replace("putRowsMax=65536", "putRowsMax=1024")
    assert after.put_rows_max == 1024
    assert dataclasses.replace(after, put_rows_max=running.put_rows_max) == running


def test_a_key_that_is_not_live_changes_only_the_text() -> None:
    running = BrokerConfig()
    text, after = plan_change(CONF, "broker.conf", running, "listenPort", "10999")
    assert "listenPort=10999\n" in text and after is running


@pytest.mark.parametrize(("key", "value", "named"), [
    ("putRowsMax", "lots", "putRowsMax"),
    ("putRowsMax", "0", "putRowsMax"),
    ("listenPort", "70000", "listenPort"),
    ("flushDiskType", "SOMETIMES", "flushDiskType"),
    ("putRowMax", "5", "putRowMax"),  # a typo: refused, with the nearest key
    ("putRowsMax", "5\nlistenPort=1", "putRowsMax"),
])
def test_bad_input_is_refused_naming_the_key(key: str, value: str, named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        plan_change(CONF, "broker.conf", BrokerConfig(), key, value)
    assert caught.value.key == named
    assert "\n" not in str(caught.value)


def test_the_typo_names_the_nearest_key() -> None:
    with pytest.raises(ConfigError, match="putRowsMax"):
        plan_change(CONF, "broker.conf", BrokerConfig(), "putRowMax", "5")


class Broker:
    """The running config as BrokerService keeps it, and a LiveConfig on a conf file."""

    def __init__(self, path: Path) -> None:
        self.live = LiveConfig.from_file(path)
        self.config = BrokerConfig.from_properties(self.live.start_properties)

    def set(self, key: str, value: str) -> dict[str, object]:
        return self.live.change(lambda: self.config, self._apply, key, value).to_json()

    def _apply(self, config: BrokerConfig) -> None:
        self.config = config


@pytest.fixture
def conf_file(tmp_path: Path) -> Path:
    path = tmp_path / "broker.conf"
    path.write_text(CONF)
    path.chmod(0o640)
    return path


def test_a_live_set_applies_and_persists_keeping_comments_and_mode(conf_file: Path) -> None:
    broker = Broker(conf_file)
    assert broker.set("putRowsMax", "2048") == {"key": "putRowsMax", "value": "2048",
                                                 "live": True, "persisted": True,
                                                 "restart_needed": False}
    assert broker.config.put_rows_max == 2048
    assert conf_file.read_text() == CONF.replace("putRowsMax=65536", "putRowsMax=2048")
    assert stat.S_IMODE(conf_file.stat().st_mode) == 0o640
    assert not list(conf_file.parent.glob("*.tmp"))
    assert BrokerConfig.from_file(conf_file).put_rows_max == 2048  # what a restart reads
    assert broker.live.pending_restart() == {}


def test_a_set_of_a_key_not_in_the_file_appends_it(conf_file: Path) -> None:
    broker = Broker(conf_file)
    broker.set("topicTableIntervalMs", "250")
    assert conf_file.read_text() == CONF + "topicTableIntervalMs=250\n"
    assert broker.config.topic_table_interval_ms == 250


def test_a_key_that_is_not_live_waits_for_a_restart(conf_file: Path) -> None:
    broker = Broker(conf_file)
    before = broker.config
    reply = broker.set("flushDiskType", "SYNC_FLUSH")
    assert reply["restart_needed"] is True and reply["live"] is False
    assert broker.config is before
    assert broker.live.pending_restart() == {"flushDiskType": "SYNC_FLUSH"}
    assert BrokerConfig.from_file(conf_file).store.flush_disk_type.value == "SYNC_FLUSH"
    broker.set("flushDiskType", "ASYNC_FLUSH")  # back to what it runs with: nothing pending
    assert broker.live.pending_restart() == {}


def test_a_refused_set_changes_neither_the_file_nor_the_broker(conf_file: Path) -> None:
    broker = Broker(conf_file)
    before_text, before = conf_file.read_bytes(), broker.config
    for key, value in (("putRowsMax", "-1"), ("listenPort", "x"), ("nope", "1")):
        with pytest.raises(ConfigError):
            broker.set(key, value)
    assert conf_file.read_bytes() == before_text and broker.config is before


def test_a_live_value_that_does_not_fit_the_running_config_is_refused(conf_file: Path) -> None:
    """putRowsMax is bounded by the store's batch limit, which the running config holds."""
    broker = Broker(conf_file)
    limit = broker.config.store.batch_messages_max
    with pytest.raises(ConfigError, match="putRowsMax"):
        broker.set("putRowsMax", str(limit + 1))
    assert conf_file.read_text() == CONF


def test_concurrent_sets_of_different_keys_all_land(conf_file: Path) -> None:
    broker = Broker(conf_file)
    values = {"putRowsMax": "1000", "putStreamsMax": "7", "longPollingWaitMaxMs": "900",
              "topicTableVacuumHours": "3", "defaultTopicQueueNums": "5", "listenPort": "10950"}
    threads = [threading.Thread(target=broker.set, args=item) for item in values.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    in_file = BrokerConfig.from_file(conf_file)
    running = top_level_properties(broker.config)
    for key, value in values.items():
        assert top_level_properties(in_file)[key] == value
        assert running[key] == (value if key in LIVE_KEYS else "10911")


def test_secrets_are_masked_in_replies_and_in_get(conf_file: Path) -> None:
    with pytest.raises(ConfigError, match="give both"):  # coupled keys checked as at start
        Broker(conf_file).set("tieredS3AccessKeyId", "AKIA1")
    conf_file.write_text(CONF + "tieredS3AccessKeyId=AKIA1\ntieredS3SecretAccessKey=old\n")
    broker = Broker(conf_file)
    reply = broker.set("tieredS3SecretAccessKey", "hush")
    assert reply["value"] == MASKED
    assert broker.live.pending_restart() == {"tieredS3SecretAccessKey": MASKED}
    assert "tieredS3SecretAccessKey=hush" in conf_file.read_text()
    shown = effective_properties(broker.config, LiveConfig.from_file(conf_file).start_properties)
    assert shown["tieredS3SecretAccessKey"] == MASKED and "hush" not in str(shown)
    assert shown["tieredS3AccessKeyId"] == "AKIA1"
    assert shown["putRowsMax"] == "65536" and shown["flushDiskType"] == "ASYNC_FLUSH"


def test_without_a_conf_file_live_keys_change_in_memory_only() -> None:
    live = LiveConfig(None, {})
    holder = [BrokerConfig()]
    change = live.change(lambda: holder[0], holder.append, "putStreamsMax", "3")
    assert change.persisted is False and holder[-1].put_streams_max == 3
    with pytest.raises(ConfigError, match="no conf file"):
        live.change(lambda: holder[-1], holder.append, "listenPort", "1")


def test_on_a_secured_cluster_a_set_needs_update_on_cluster_and_is_audited() -> None:
    alice = User("alice", "AK_alice", "alice-secret-1", "Normal")
    reader = AuthData(users=(alice,), policies=(
        Policy("User:alice", "Cluster", ("Get",)), Policy("User:alice", "Topic:*", ("Pub",))))
    admin = AuthData(users=(alice,), policies=(Policy("User:alice", "Cluster", ("Update",)),))
    set_config, get_config = (requirement_of("broker", "set_config"),
                              requirement_of("broker", "get_config"))
    assert set_config is not None and get_config is not None
    body = {"key": "putRowsMax", "value": "1"}
    assert not authorize(reader, alice, set_config, body, None)[0].allowed
    assert authorize(reader, alice, get_config, {}, None)[0].allowed
    assert authorize(admin, alice, set_config, body, None)[0].allowed
    assert ("broker", "set_config") in ADMIN_OPERATIONS
