"""The demo's pipeline end to end at small scale, through a controller-driven failover.

Goal: with the master SIGKILLed mid-stream and replaced by the controller's election (not
restarted), every acknowledged order lands in the Delta table exactly once through
ingest_to_table under real spark-submit (routes from the controller), the producer follows the
new master, the old master comes back as a SLAVE, the new master's uploader keeps the tier
growing, a rerun from the checkpoint adds nothing, and every process the demo started is gone.
Method: `examples.demo.main` with 4,000 orders in tmp_path; its printed checks and JSON
summary line (the demo itself compares the table, order by order, with what was acknowledged).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from examples import demo
from tests.support.hosts import hosts_skip_reason

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ORDERS = 4000


def test_demo_small_scale_with_failover(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "demo"
    code = demo.main(["--dir", str(directory), "--orders", str(ORDERS), "--batch", "100",
                      "--ingest-idle-s", "15"])
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0, out
    assert "FAILED" not in out
    assert summary["produced_acked"] == summary["table_rows"] == ORDERS
    assert summary["table_distinct_orders"] == ORDERS
    assert summary["rerun_rows"] == 0 and summary["rerun_exit"] == 0
    assert 0 < summary["failover_s"] < 30
    assert summary["master_before"] != summary["master_after"]
    assert summary["master_epoch_after"] > summary["master_epoch_before"]
    assert summary["old_master_rejoined_as"] == "SLAVE"
    by_epoch = summary["tier_segments_by_epoch"]
    assert by_epoch.get(str(summary["master_epoch_after"]), 0) >= 1, by_epoch
    assert summary["tiered_segments"] > summary["tiered_segments_at_kill"]
    assert not list((directory / "run").glob("*.pid")), "a process outlived the demo"


@pytest.mark.slow
def test_demo_on_test_hosts_and_a_standalone_spark_cluster(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`demo --hosts`: brokers and controller on test hosts, the ingest on a standalone Spark
    master and two workers (about 5 minutes here, so slow)."""
    reason = hosts_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    directory = tmp_path / "demo"
    code = demo.main(["--dir", str(directory), "--orders", str(ORDERS), "--batch", "100",
                      "--ingest-idle-s", "15", "--hosts"])
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0, out
    assert "Spark standalone cluster spark://198." in out
    placed = re.search(r"master on (\S+) and 2 workers on (\S+), (\S+)$", out, re.MULTILINE)
    assert placed is not None, out
    assert len(set(placed.groups())) == 3, placed.groups()  # each worker on a host of its own
    assert summary["produced_acked"] == summary["table_rows"] == ORDERS
    assert summary["table_distinct_orders"] == ORDERS and summary["rerun_rows"] == 0
    assert summary["old_master_rejoined_as"] == "SLAVE"
    assert list((directory / "spark").glob("worker-*/app-*/*/stderr")), "no executor ran"
    assert not list((directory / "run").glob("*.pid")), "a process outlived the demo"


@pytest.mark.parametrize("master", ["yarn", "local[4]", "k8s://x"])
def test_unknown_spark_master_exits_2(tmp_path: Path, master: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        demo.main(["--dir", str(tmp_path / "demo"), "--spark-master", master])
    assert exited.value.code == 2
    assert "--spark-master" in capsys.readouterr().err
    assert not (tmp_path / "demo").exists()
