"""Goal: tiering works the same on a real S3 HTTP endpoint, and a wrong key or a missing bucket
is reported clearly (stats, logs) while hot traffic goes on.
Method: moto's server mode with authentication (tests/tiered/moto_s3.py); FileIO's contract
(atomic writes, create-only commits, aborted streams leave nothing) checked directly; then real
brokers with tieredStoreUrl=s3://... produce, tier, drop local segments and read back."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_engine.tiered import (
    FileIO,
    FileIOOptions,
    TierAccessDeniedError,
    TierNotFoundError,
    TierTimeoutError,
    TierVerifyError,
)
from tests.integration.broker_process import BrokerProcess
from tests.tiered.broker_tier import SMALL_TIER, produce, read_all, tier_stats, wait_for, when
from tests.tiered.moto_s3 import MotoS3, moto_s3_server

pytestmark = [pytest.mark.s3, pytest.mark.integration]


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3]:
    with moto_s3_server() as server:
        server.client().create_bucket(Bucket="tier")  # type: ignore[attr-defined]
        yield server


def _file_io(s3: MotoS3, url: str, *, key: str = "", secret: str = "") -> FileIO:
    return FileIO(url, FileIOOptions(s3_endpoint_url=s3.endpoint_url, s3_region="us-east-1",
                                     s3_access_key_id=key or s3.access_key_id,
                                     s3_secret_access_key=secret or s3.secret_access_key,
                                     request_timeout_s=5.0))


def _visible(client: object, prefix: str) -> set[str]:
    listing = client.list_objects_v2(  # type: ignore[attr-defined]
        Bucket="tier", Prefix=f"{prefix}/broker-a/segments/")
    return {item["Key"].rsplit("/", 1)[1] for item in listing.get("Contents", [])}


def _listed(client: object, prefix: str) -> set[str]:
    """Object names the newest manifest version lists."""
    listing = client.list_objects_v2(  # type: ignore[attr-defined]
        Bucket="tier", Prefix=f"{prefix}/broker-a/manifest/")
    keys = sorted(item["Key"] for item in listing.get("Contents", []))
    if not keys:
        return set()
    body = client.get_object(Bucket="tier", Key=keys[-1])["Body"].read()  # type: ignore
    return {f"{s['base_log_position']:020d}.{s['epoch']:010d}.seg"
            for s in json.loads(body)["segments"]}


def test_file_io_contract_on_s3(s3: MotoS3) -> None:
    io = _file_io(s3, "s3://tier/contract")
    data = bytes(range(256)) * 50_000  # 12.8 MB: a multipart upload
    assert io.write_atomic("a/obj", [data[:7 << 20], data[7 << 20:]], part_bytes=5 << 20) \
        == len(data)
    io.verify("a/obj", len(data), hashlib.sha256(data).hexdigest())
    with pytest.raises(TierVerifyError):
        io.verify("a/obj", len(data), "0" * 64)
    assert io.read_range("a/obj", 1000, 1010) == data[1000:1010]
    assert io.list("a") == ["obj"] and io.list("nothing-here") == []

    def cut() -> Iterator[bytes]:
        yield data[:6 << 20]
        raise RuntimeError("writer died mid-stream")

    with pytest.raises(Exception, match="mid-stream"):
        io.write_atomic("a/partial", cut(), part_bytes=5 << 20)
    assert not io.exists("a/partial")  # the multipart upload was aborted: nothing visible
    assert io.write_if_absent("m/1", b"first") and not io.write_if_absent("m/1", b"second")
    assert io.read("m/1") == b"first"
    with pytest.raises(TierAccessDeniedError):
        _file_io(s3, "s3://tier/contract", key="AKIAWRONGWRONGWRONG", secret="x").list("a")
    with pytest.raises(TierNotFoundError, match="no-such-bucket"):
        _file_io(s3, "s3://no-such-bucket/p").list("a")


def test_s3_round_trip_through_the_broker(s3: MotoS3, tmp_path: Path) -> None:
    settings = {**SMALL_TIER, **s3.broker_settings("s3://tier/cluster-1")}
    broker = BrokerProcess(tmp_path / "b", **settings).start()
    try:
        produce(broker, batches=20)
        before = [read_all(broker, queue) for queue in (0, 1)]
        info = wait_for("tiered to S3 and local segments deleted", lambda: when(
            broker.action("broker_info"),
            lambda i: i["min_log_position"] > 0 and i["tiered"]["tier_segments"] >= 6))
        assert info["tiered"]["url"] == "s3://tier/cluster-1"
        assert info["tiered"]["last_error"] is None
        assert "Secret" not in str(info) and s3.secret_access_key not in str(info)
        assert [read_all(broker, queue) for queue in (0, 1)] == before
        assert tier_stats(broker)["cold_reads"] > 0
        listing = s3.client().list_objects_v2(  # type: ignore[attr-defined]
            Bucket="tier", Prefix="cluster-1/broker-a/segments/")
        assert len(listing["Contents"]) >= info["tiered"]["tier_segments"]
    finally:
        broker.stop()


@pytest.mark.parametrize("case", ["bad_key", "no_bucket"])
def test_s3_failures_are_reported_and_hot_traffic_goes_on(s3: MotoS3, tmp_path: Path,
                                                         case: str) -> None:
    settings = {**SMALL_TIER, **s3.broker_settings("s3://tier/bad"), "fileReservedTime": "0"}
    if case == "bad_key":
        settings["tieredS3AccessKeyId"] = "AKIAWRONGWRONGWRONG"
    else:
        settings["tieredStoreUrl"] = "s3://no-such-bucket/p"
    broker = BrokerProcess(tmp_path / "b", **settings).start()
    try:
        produce(broker, batches=12)
        expected_kind = "access_denied" if case == "bad_key" else "not_found"
        stats = wait_for("the failure in stats", lambda: when(
            tier_stats(broker), lambda s: s["last_error"] and s["upload"]["upload_failures"] >= 2))
        assert stats["last_error"]["kind"] == expected_kind
        if case == "no_bucket":
            assert "no-such-bucket" in stats["last_error"]["message"]
        assert stats["tier_segments"] == 0
        rows = [read_all(broker, queue) for queue in (0, 1)]  # nothing deleted locally
        assert sum(map(len, rows)) == 1200
        assert broker.action("broker_info")["min_log_position"] == 0
        assert produce(broker, batches=1, seed=9) == 100  # hot writes still acked
        log = broker.log.read_text()
        assert f"({expected_kind})" in log and s3.secret_access_key not in log
        cli = subprocess.run([sys.executable, "-m", "connector.admin.cli", "--broker",
                              broker.endpoint, "broker", "info", "--json"],
                             capture_output=True, text=True, timeout=60, check=True)
        shown = json.loads(cli.stdout.strip().splitlines()[-1])["tiered"]
        assert shown["last_error"]["kind"] == expected_kind  # what an operator sees
    finally:
        broker.stop()


def test_s3_sigkill_mid_upload_then_resume(s3: MotoS3, tmp_path: Path) -> None:
    slow = {**SMALL_TIER, **s3.broker_settings("s3://tier/killed"),
            "tieredUploadBytesPerSecMax": str(64 * 1024), "tieredUploadChunkBytes": "8192",
            "tieredUploadConcurrency": "1", "fileReservedTime": "72"}
    broker = BrokerProcess(tmp_path / "b", **slow).start()
    client = s3.client()
    try:
        produce(broker, batches=12, seed=3)
        before = [read_all(broker, queue) for queue in (0, 1)]
        wait_for("an upload in progress", lambda: tier_stats(broker)["upload"]["uploading"])
        broker.kill()
        visible, listed = _visible(client, "killed"), _listed(client, "killed")
        # S3 shows an object only once whole; at most one whole object may be written and
        # not yet listed (killed between the upload and the manifest commit)
        assert listed <= visible and len(visible - listed) <= 1
        conf = broker.directory / "broker.conf"
        conf.write_text(conf.read_text().replace("tieredUploadBytesPerSecMax=65536",
                                                 "tieredUploadBytesPerSecMax=67108864"))
        broker.start()
        stats = wait_for("every sealed segment tiered", lambda: when(
            tier_stats(broker), lambda s: s["tier_segments"] >= 4 and not s["upload"]["uploading"]))
        assert _visible(client, "killed") == _listed(client, "killed")
        assert len(_listed(client, "killed")) == stats["tier_segments"]
        assert stats["last_error"] is None
        assert [read_all(broker, queue) for queue in (0, 1)] == before
    finally:
        broker.stop()


def test_s3_timeout_is_typed_and_bounded() -> None:
    """An endpoint that accepts connections and never answers: TierTimeoutError within a few
    request timeouts (botocore's and s3fs's own retry loops are bounded)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        io = FileIO("s3://b/p", FileIOOptions(
            s3_endpoint_url=f"http://127.0.0.1:{server.getsockname()[1]}", s3_region="us-east-1",
            s3_access_key_id="a", s3_secret_access_key="b", request_timeout_s=0.3))
        started = time.monotonic()
        with pytest.raises(TierTimeoutError, match="list s3://b/p/x"):
            io.list("x")
        assert time.monotonic() - started < 10.0
