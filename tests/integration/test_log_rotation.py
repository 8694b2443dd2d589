"""A broker's log rotates by size with a cap on the files kept (logFile, logFileBytesMax,
logFilesKept), and a live config change is applied, persisted and logged. Method: a real broker
with a 4 KiB log cap and 2 kept files; each `set_config` call logs one WARNING line, so 80
calls overflow the cap several times."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration


def test_log_rotates_by_size_and_keeps_the_cap(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "broker.log"
    log_file.parent.mkdir()
    broker = BrokerProcess(tmp_path, logFile=str(log_file), logFileBytesMax="4096",
                           logFilesKept="2").start()
    try:
        for value in range(1000, 1080):
            reply = broker.action("set_config", {"key": "putRowsMax", "value": str(value)})
            assert reply == {"key": "putRowsMax", "value": str(value), "live": True,
                             "persisted": True, "restart_needed": False}
        assert broker.action("get_config")["values"]["putRowsMax"] == "1079"
    finally:
        assert broker.stop() == 0
    files = sorted(path.name for path in log_file.parent.iterdir())
    assert files == ["broker.log", "broker.log.1", "broker.log.2"]
    assert all(path.stat().st_size <= 4096 for path in log_file.parent.iterdir())
    assert "putRowsMax=1079" in log_file.read_text()
