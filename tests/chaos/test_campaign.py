"""A 1.5-minute chaos campaign in the default suite: `build.py chaos` as a user runs it.

Goal: the whole harness keeps working (cluster on 9 test hosts, workload, seeded faults of
every kind: process, network, power loss on LazyFS, corrupt tails, full disk; drain, replica
digests, checker, PNG and HTML) and the store
keeps its promises under it: no acknowledged message lost, no offset holding two messages, no
idempotent send stored twice, replicas byte-identical below the confirm position, controller
invariants, and committed group offsets never move back (finding 1, fixed: commits are
quorum-acknowledged CommitLog records). Longer campaigns: `python3 build.py chaos --minutes 60
--seed S`.
Method: the run as a subprocess (its own alarm, its own clean-up); on a hang the test kills it
and takes the cluster down itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.disk_faults import unmount_under
from tests.chaos.nemesis import KINDS
from tests.integration.failover_cluster import ROOT, _env
from tests.support.hosts import hosts_skip_reason
from tests.support.lazyfs import fuse_unavailable_reason

pytestmark = pytest.mark.integration

MINUTES = 1.5
SEED = 11
MIN_FAULTS = 4  # injected whatever the load (the run goes on past MINUTES until then)
RUN_TIMEOUT_S = 1200  # set-up, settling, drain, digests (and Spark) on 2 busy cores


def test_short_campaign_of_every_fault_kind(tmp_path: Path) -> None:
    report = _campaign(tmp_path, MINUTES, SEED, "--min-faults", str(MIN_FAULTS))
    assert report["faults"] >= MIN_FAULTS and report["table_rows"] is None


@pytest.mark.slow
def test_campaign_with_the_spark_ingest(tmp_path: Path) -> None:
    """`--spark`: the Delta table holds every acknowledged value exactly once (slow: a Spark
    standalone cluster and two spark-submit runs on top; about 7 minutes)."""
    report = _campaign(tmp_path, 2.0, 31, "--spark")
    assert report["table_rows"] == report["acknowledged"], report
    assert report["table_lost"] == report["table_duplicated"] == 0


def _campaign(tmp_path: Path, minutes: float, seed: int, *extra: str) -> dict[str, Any]:
    reason = hosts_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    # every kind (power needs FUSE for LazyFS: left out where it cannot be mounted)
    kinds = [k for k in KINDS if k != "power" or fuse_unavailable_reason() is None]
    argv = [sys.executable, "-m", "tests.chaos.run", "--minutes", str(minutes), "--seed",
            str(seed), "--faults", ",".join(kinds), "--out", str(tmp_path), *extra]
    process = subprocess.Popen(argv, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        if (tmp_path / "cluster" / "cluster.json").exists():
            subprocess.run([sys.executable, "-m", "ha.cluster", "down", "--dir",
                            str(tmp_path / "cluster")], cwd=ROOT, env=_env(), timeout=120,
                           check=False, capture_output=True)
        unmount_under(tmp_path)  # the LazyFS processes died with the run
        pytest.fail(f"the campaign ran past {RUN_TIMEOUT_S} s")
    lines = stdout.strip().splitlines()
    assert lines, stderr[-3000:]
    report = json.loads(lines[-1])
    assert process.returncode == 0, (report.get("first_violation") or report.get("error"),
                                     stderr[-3000:])
    print(f"\nchaos seed {seed}: faults {report['faults_by_kind']}, acked "
          f"{report['acknowledged']}, RTO p50/p99 {report['rto_p50_s']}/{report['rto_p99_s']} s, "
          f"commit regressions {report['commit_regressions']}")
    assert report["valid"] and report["seed"] == seed
    assert report["lost"] == report["inconsistent_offsets"] == report["lost_writes"] == 0
    assert report["duplicated_unexplained"] == report["replica_divergence"] == 0
    assert report["controller_violations"] == 0
    assert report["acknowledged"] > 1000 and report["read"] >= report["acknowledged"]
    assert all(report["acknowledged_by_set"].get(name, 0) > 100
               for name in ("broker-a", "broker-b")), report["acknowledged_by_set"]
    assert report["replicas_compared"] == 6
    assert Path(report["timeline"]).stat().st_size > 10_000
    assert "timeline.png" in Path(report["html"]).read_text()
    return report
