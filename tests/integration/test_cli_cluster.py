"""The tools as a user runs them: rocketha-cluster up/status/down, rocketha-admin produce and
consume, and the client library against the same brokers (real processes on 127.0.0.1)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Consumer, Producer

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def tool(module: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                            text=True, timeout=120, cwd=ROOT, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{module} {args} exited {result.returncode}: {result.stderr}")
    return result


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    directory = tmp_path_factory.mktemp("cluster")
    tool("ha.cluster", "up", "--dir", str(directory), "--insecure", "--replica-sets", "2",
         "--set", "defaultTopicQueueNums=4", "--set", "mappedFileSizeCommitLog=8388608")
    try:
        status = json.loads(tool("ha.cluster", "status", "--dir", str(directory),
                                 "--json").stdout)
        yield directory, status["processes"]
    finally:
        tool("ha.cluster", "down", "--dir", str(directory))


def test_status_lists_live_brokers(cluster) -> None:  # type: ignore[no-untyped-def]
    directory, processes = cluster
    assert [p["name"] for p in processes] == ["broker-a", "broker-b"]
    for process in processes:
        assert process["alive"] and process["role"] == "MASTER" and process["pid"] > 0
        assert Path(process["log_file"]).exists()
        assert process["store_dir"].startswith(str(directory))
    # `up` again keeps the same processes and ports.
    tool("ha.cluster", "up", "--dir", str(directory), "--replica-sets", "2")
    again = json.loads(tool("ha.cluster", "status", "--dir", str(directory), "--json").stdout)
    assert [(p["pid"], p["endpoint"]) for p in again["processes"]] == \
        [(p["pid"], p["endpoint"]) for p in processes]
    conf = (directory / "conf" / "broker-a.conf").read_text()
    assert "defaultTopicQueueNums=4" in conf, "a later `up` dropped the --set overrides"


def test_console_produce_then_consume(cluster) -> None:  # type: ignore[no-untyped-def]
    _, processes = cluster
    broker = processes[0]["endpoint"]
    produced = tool("rocketha_admin", "--broker", broker, "produce", "--topic", "cli",
                    "--count", "50", "--batch", "8", "--body-size", "32", "--json-lines")
    lines = [json.loads(line) for line in produced.stdout.splitlines()]
    assert [line["seq"] for line in lines] == list(range(50))
    assert all(line["status"] == "PUT_OK" for line in lines)
    assert "acked 50 of 50" in produced.stderr
    consumed = tool("rocketha_admin", "--broker", broker, "consume", "--topic", "cli",
                    "--from", "earliest", "--until-idle-ms", "300", "--json-lines")
    rows = [json.loads(line) for line in consumed.stdout.splitlines()]
    by_seq = {int(row["body"].split(" ")[0]): row for row in rows}
    assert sorted(by_seq) == list(range(50))
    for line in lines:
        row = by_seq[line["seq"]]
        assert (row["queue_id"], row["queue_offset"]) == (line["queue_id"], line["queue_offset"])
        assert len(row["body"]) == 32
    missing = tool("rocketha_admin", "--broker", broker, "topic", "describe", "--topic",
                   "absent", check=False)
    assert missing.returncode == 1 and "TOPIC_NOT_EXIST" in missing.stderr
    misuse = tool("rocketha_admin", "--broker", broker, "produce", "--topic", "cli",
                  "--count", "0", check=False)
    assert misuse.returncode == 2


def test_client_library_round_trip(cluster) -> None:  # type: ignore[no-untyped-def]
    _, processes = cluster
    config = ClientConfig(brokers=(processes[1]["endpoint"],))
    admin = Admin(config)
    admin.create_topic("lib", queues=2)
    with Producer(config) as producer:
        single = producer.send("lib", b"one", key="k", tags="TagA", properties={"p": "1"})
        assert single.ok
        batch = producer.send_batch("lib", [{"body": f"b{i}", "queue_id": i % 2}
                                            for i in range(10)])
        assert [r.queue_id for r in batch] == [i % 2 for i in range(10)]
        illegal = producer.send("lib", b"x" * (5 << 20))
        assert illegal.status == "MESSAGE_ILLEGAL" and not illegal.ok
    consumer = Consumer(config)
    rows = []
    for queue_id in (0, 1):
        for table in consumer.iter_queue("lib", queue_id, 0, until_idle_ms=200):
            rows += table.to_pylist()
    assert sorted(row["body"] for row in rows) == sorted([b"one"] + [f"b{i}".encode()
                                                                     for i in range(10)])
    tagged = [row for row in rows if row["tags"] == "TagA"]
    assert len(tagged) == 1 and tagged[0]["key"] == "k" and tagged[0]["properties"] == [("p", "1")]
    admin.commit_offset("g", "lib", 0, 3)
    assert admin.query_offsets("g", "lib") == {0: 3}
    pulled = consumer.pull("lib", 0, 100)
    assert pulled.status == "OFFSET_OVERFLOW_BADLY"
