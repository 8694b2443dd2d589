"""`rocketha-admin broker config set|get` against a broker process: a live key takes effect at
once and survives a restart; a key that is not live is written, answered "restart needed" and
pending until the restart, after which it runs; bad input is one line and changes nothing.

Method: one real broker (tests/integration/broker_process.py) started from its conf file, the
real CLI (connector.admin.cli.main) with --json; the live key is autoCreateTopicEnable, whose
effect a producer sees (a new topic is refused TOPIC_NOT_EXIST); the restart is SIGTERM and a
new process on the same conf file and store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from connector import ClientConfig, Producer
from connector.admin.cli import main as admin_main
from connector.protocol import RocketHAError
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


def _config(broker: BrokerProcess, capsys: pytest.CaptureFixture[str],
            *args: str) -> tuple[int, Any, str]:
    """(exit code, the JSON printed, standard error) of `broker config ARGS --json`."""
    code = admin_main(["--broker", broker.endpoint, "broker", "config", *args, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else None, captured.err


def _send(broker: BrokerProcess, topic: str) -> None:
    config = ClientConfig(brokers=(broker.endpoint,), retries_max=0, send_deadline_ms=10_000)
    with Producer(config) as producer:
        producer.send(topic, b"x")


def test_live_and_restart_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broker = BrokerProcess(tmp_path).start()
    try:
        _send(broker, "made-before")  # autoCreateTopicEnable defaults to true
        conf_before = broker.conf.read_text()

        code, rows, _ = _config(broker, capsys, "set", "--key", "autoCreateTopicEnable",
                                "--value", "false")
        assert code == 0
        assert rows[0]["live"] is True and rows[0]["restart_needed"] is False
        with pytest.raises(RocketHAError) as caught:
            _send(broker, "made-after")
        assert caught.value.name == "TOPIC_NOT_EXIST"

        code, rows, err = _config(broker, capsys, "set", "flushDiskType=SYNC_FLUSH")
        assert code == 0 and rows[0]["restart_needed"] is True
        assert broker.action("broker_info")["pending_restart"] == {"flushDiskType": "SYNC_FLUSH"}

        code, _, err = _config(broker, capsys, "set", "--key", "putRowsMax", "--value", "-1")
        assert code == 1 and "putRowsMax" in err and err.count("\n") == 1

        text = broker.conf.read_text()
        assert text.startswith(conf_before.split("allowInsecure")[0])  # lines kept in place
        assert "autoCreateTopicEnable=false\n" in text and "flushDiskType=SYNC_FLUSH\n" in text
        assert "putRowsMax" not in text

        assert broker.stop() == 0
        broker.start()
        assert broker.action("broker_info")["pending_restart"] == {}
        code, rows, _ = _config(broker, capsys, "get", "--key", "autoCreateTopicEnable")
        assert [(row["value"], row["live"]) for row in rows] == [("false", True)]
        code, rows, _ = _config(broker, capsys, "get", "--key", "flushDiskType")
        assert [row["value"] for row in rows] == ["SYNC_FLUSH"]
        with pytest.raises(RocketHAError) as caught:
            _send(broker, "made-after-restart")
        assert caught.value.name == "TOPIC_NOT_EXIST"
        _send(broker, "made-before")  # an existing topic still takes messages
    finally:
        broker.stop()
