"""The Spark source and sink with authentication (issue 16): accessKey/secretKey options.

Goal: a secured broker (static mode: aclFile with a Super and a Normal user) is read and
written through `format("rocketha")` with the user's keys; the option names are ones Spark's
default spark.redaction.regex redacts; no repr, explain() or error shows the secret; a wrong
secret fails the query with UNAUTHENTICATED. Method: a real broker process, a real local
SparkSession (the session fixture).
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest

from connector import ClientConfig, Producer
from connector.spark.options import (
    ACCESS_KEY,
    CREDENTIALS_FILE,
    SECRET_KEY,
    parse_sink_options,
    parse_source_options,
)
from tests.integration.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SPARK_DEFAULT_REDACTION = r"(?i)secret|password|token|access[.]?key"
SECRET = "alice-Sup3r-s3cret-value"
ADMIN_SECRET = "admin-Sup3r-s3cret-value"
TOPIC = "secured"


def _private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Any:
    directory = tmp_path_factory.mktemp("secured")
    acl = {"version": 1, "users": [
        {"name": "admin", "access_key": "AK_admin", "secret_key": ADMIN_SECRET, "type": "Super"},
        {"name": "alice", "access_key": "AK_alice", "secret_key": SECRET, "type": "Normal"}],
        "policies": [{"subject": "User:alice", "resource": f"Topic:{TOPIC}",
                      "actions": ["Pub", "Sub"], "decision": "Allow"}]}
    acl_file = _private(directory / "acl.json", json.dumps(acl))
    from conf.signing import Credentials
    broker = BrokerProcess(directory, credentials=Credentials("AK_admin", ADMIN_SECRET),
                           authenticationEnabled="true", authorizationEnabled="true",
                           aclFile=str(acl_file)).start()
    config = ClientConfig(brokers=(broker.endpoint,), access_key="AK_admin",
                          secret_key=ADMIN_SECRET)
    with Producer(config) as producer:
        assert all(r.ok for r in producer.send_batch(TOPIC, [{"body": b"m1"}, {"body": b"m2"}]))
    yield broker
    broker.stop()


def test_option_names_are_redacted_by_spark_and_secrets_stay_out_of_reprs(
        tmp_path: Path) -> None:
    assert re.search(SPARK_DEFAULT_REDACTION, ACCESS_KEY)
    assert re.search(SPARK_DEFAULT_REDACTION, SECRET_KEY)
    options = parse_source_options({"brokers": "h:1", "subscribe": "t", "accessKey": "AK",
                                    "secretKey": SECRET})
    assert options.credentials is not None and options.credentials.secret_key == SECRET
    assert SECRET not in repr(options)
    assert pickle.loads(pickle.dumps(options)).credentials == options.credentials
    sink = parse_sink_options({"brokers": "h:1", "topic": "t", "accessKey": "AK",
                               "secretKey": SECRET})
    assert SECRET not in repr(sink) and sink.credentials is not None
    assert SECRET not in repr(ClientConfig(brokers=("h:1",), access_key="AK",
                                           secret_key=SECRET))
    shared = tmp_path / "shared.credentials"
    shared.write_text(f"accessKey=AK\nsecretKey={SECRET}\n")
    shared.chmod(0o644)
    with pytest.raises(Exception, match="other users") as caught:
        parse_source_options({"brokers": "h:1", "subscribe": "t",
                              CREDENTIALS_FILE: str(shared)})
    assert SECRET not in str(caught.value)
    shared.chmod(0o600)
    from_file = parse_source_options({"brokers": "h:1", "subscribe": "t",
                                      CREDENTIALS_FILE: str(shared)})
    assert from_file.credentials == options.credentials
    with pytest.raises(Exception, match="go together"):
        parse_source_options({"brokers": "h:1", "subscribe": "t", "accessKey": "AK"})


def test_spark_reads_and_writes_a_secured_broker_without_showing_the_secret(
        spark, secured) -> None:  # type: ignore[no-untyped-def]
    def reader(secret: str):  # type: ignore[no-untyped-def]
        return (spark.read.format("rocketha").option("brokers", secured.endpoint)
                .option("subscribe", TOPIC).option("accessKey", "AK_alice")
                .option("secretKey", secret).load())

    frame = reader(SECRET)
    bodies = sorted(row.body for row in frame.select("body").collect())
    assert bodies[:2] == [b"m1", b"m2"]
    plan = frame._jdf.queryExecution().toString()
    assert SECRET not in plan
    (spark.createDataFrame([(b"m3",)], "body binary").write.format("rocketha")
     .option("brokers", secured.endpoint).option("topic", TOPIC)
     .option("accessKey", "AK_alice").option("secretKey", SECRET).mode("append").save())
    assert b"m3" in [row.body for row in reader(SECRET).select("body").collect()]
    with pytest.raises(Exception) as caught:
        reader("wrong-secret-for-alice").collect()
    assert "UNAUTHENTICATED" in str(caught.value)
    assert "wrong-secret-for-alice" not in str(caught.value)
