"""The S3 secret stays out of command lines, world-readable files, reprs and `broker info`.

Goal (issue 16): `rocketha-cluster up --set tieredS3SecretAccessKey=...` is refused (a command
line is visible to every user through `ps`); the same key from `--set-file` reaches the broker,
whose conf file and the cluster manifest are mode 0600, whose command line does not hold it,
and whose `broker_info` does not show it; the Spark options and cold-read partitions that
carry it to executors keep it through pickling but never show it in their repr.
Method: the cluster tool as a user runs it (subprocess), /proc/<pid>/cmdline, stat modes.
"""

from __future__ import annotations

import json
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from connector.spark.options import parse_source_options
from connector.spark.partitions import ColdRangePartition

ROOT = Path(__file__).resolve().parents[2]
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCY-not-a-real-key"


def _cluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ha.cluster", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)


@pytest.mark.integration
def test_cluster_tool_keeps_the_secret_off_command_lines_and_shared_files(
        tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    refused = _cluster("up", "--dir", str(directory), "--insecure", "--set",
                       f"tieredS3SecretAccessKey={SECRET}")
    assert refused.returncode != 0 and "--set-file" in refused.stderr, refused.stderr
    assert not (directory / "cluster.json").exists()
    secrets = tmp_path / "secrets.properties"
    secrets.write_text(f"tieredS3AccessKeyId=AKIAEXAMPLE\ntieredS3SecretAccessKey={SECRET}\n")
    secrets.chmod(0o600)
    started = _cluster("up", "--dir", str(directory), "--insecure", "--set-file", str(secrets),
                       "--set", "mappedFileSizeCommitLog=8388608")
    try:
        assert started.returncode == 0, started.stderr
        status = _cluster("status", "--dir", str(directory), "--json")
        (broker,) = json.loads(status.stdout)["processes"]
        written = [directory / "cluster.json", *sorted((directory / "conf").iterdir())]
        assert any(SECRET in path.read_text() for path in written)  # it did reach the broker
        for path in written:
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == 0o600, (path, oct(mode))
        cmdline = Path(f"/proc/{broker['pid']}/cmdline").read_bytes()
        assert SECRET.encode() not in cmdline and b"--conf" in cmdline
        assert SECRET not in status.stdout + started.stdout + started.stderr
        info = subprocess.run(
            [sys.executable, "-m", "rocketha_admin", "--broker", broker["endpoint"],
             "broker", "info"],
            capture_output=True, text=True, timeout=60, cwd=ROOT, check=False)
        assert info.returncode == 0, info.stderr
        assert SECRET not in info.stdout and str(directory / "data") not in info.stdout
    finally:
        _cluster("down", "--dir", str(directory))


def test_spark_options_and_partitions_redact_the_secret() -> None:
    options = parse_source_options({
        "brokers": "127.0.0.1:1", "subscribe": "t", "readColdFromTier": "true",
        "tierStorageOptions": json.dumps({"endpoint_url": "http://s3.local"}),
        "tierS3AccessKeyId": "AKIAEXAMPLE", "tierS3SecretAccessKey": SECRET})
    assert dict(options.tier_storage_options)["secret"] == SECRET
    assert SECRET not in repr(options) and SECRET not in str(options)
    partition = ColdRangePartition(
        topic="t", broker_name="broker-a", queue_id=0, start_queue_offset=0,
        end_queue_offset=10, tier_url="s3://tier/x",
        tier_storage_options=options.tier_storage_options, pieces=())
    assert SECRET not in repr(partition)
    assert pickle.loads(pickle.dumps(partition)).tier_storage_options == \
        options.tier_storage_options
    with pytest.raises(ValueError, match="give it once"):
        parse_source_options({"brokers": "127.0.0.1:1", "subscribe": "t",
                              "tierStorageOptions": json.dumps({"secret": "a"}),
                              "tierS3SecretAccessKey": "b"})
