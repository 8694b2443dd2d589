"""`rocketha-admin --controller`: one tool for the whole cluster, following the master.

Goal: the data commands work through the name service as `mqadmin -n` does, and keep working
after a failover without being told the new master; produce sends real messages (body, key,
tags, properties; stdin lines) and consume shows them with their store time; groups have lag
per queue and an unknown group is an error; offsets reset moves a group; live config
changes take effect; mistakes are one line with the right exit code (a broker given to
--controller and the reverse, a cluster directory without a cluster, a replica count the
cluster cannot become). Method: the tools as a user runs them (subprocesses) against one
controller and a set of three brokers started by `rocketha-cluster up`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.operated_cluster import ROOT, OperatedCluster

pytestmark = pytest.mark.integration


def admin(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rocketha_admin", *args], input=stdin,
                          capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)


def lines(result: subprocess.CompletedProcess[str]) -> list[dict]:  # type: ignore[type-arg]
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_admin_through_the_controller_across_a_failover(tmp_path: Path) -> None:
    cluster = OperatedCluster(tmp_path / "cluster")
    try:
        controller = cluster.controller()["endpoint"]
        to = ["--controller", controller]
        master = cluster.wait_master()
        created = json.loads(admin(*to, "topic", "create", "--topic", "orders", "--queues",
                                   "2", "--json").stdout)
        assert [(r["replica_set"], r["read_queue_nums"]) for r in created] == [("broker-a", 2)]
        table = admin(*to, "topic", "list")
        assert table.returncode == 0
        header, row = table.stdout.splitlines()[:2]
        assert header.split() == ["NAME", "REPLICA_SET", "READ_QUEUE_NUMS", "WRITE_QUEUE_NUMS",
                                  "PERM", "TABLE"] and row.split()[:2] == ["orders", "broker-a"]
        assert row.split()[-1] == "default"  # the broker's topicTableDefault

        sets = admin(*to, "cluster")  # a controller command: a table too, JSON on request
        assert sets.returncode == 0 and sets.stdout.split()[:2] == ["REPLICA_SET",
                                                                    "MASTER_BROKER_ID"]
        assert master["endpoint"] in sets.stdout
        assert json.loads(admin(*to, "cluster", "--json").stdout)["status"] == "OK"

        sent = lines(admin(*to, "produce", "--topic", "orders", "--key", "k1", "--tags", "TagA",
                           "--property", "origin=stdin", "--json-lines",
                           stdin="first\nsecond\nthird\n"))
        assert [r["status"] for r in sent] == ["PUT_OK"] * 3
        assert lines(admin(*to, "produce", "--topic", "orders", "--body", "solo",
                           "--json-lines"))[0]["status"] == "PUT_OK"
        read = lines(admin(*to, "consume", "--topic", "orders", "--until-idle-ms", "300",
                           "--json-lines"))
        by_body = {r["body"]: r for r in read}
        assert sorted(by_body) == ["first", "second", "solo", "third"]
        assert by_body["first"]["key"] == "k1" and by_body["first"]["tags"] == "TagA"
        assert by_body["first"]["properties"] == {"origin": "stdin"}
        assert by_body["first"]["store_time"].endswith("Z") and by_body["solo"]["key"] is None

        missing = admin(*to, "group", "describe", "--group", "billing")
        assert missing.returncode == 1
        assert missing.stderr.strip().startswith("rocketha-admin: GROUP_NOT_FOUND")
        assert lines(admin(*to, "offsets", "reset", "--group", "billing", "--topic", "orders",
                           "--to-earliest", "--json-lines"))[0]["after"] == 0
        described = json.loads(admin(*to, "group", "describe", "--group", "billing",
                                     "--json").stdout)
        assert sum(r["lag"] for r in described) == 4 and len(described) == 2

        assert admin(*to, "broker", "config", "set", "autoCreateTopicEnable=false").returncode == 0
        refused = admin(*to, "produce", "--topic", "fresh", "--body", "x")
        assert refused.returncode == 1 and "TOPIC_NOT_EXIST" in refused.stderr
        bad = admin(*to, "broker", "config", "set", "--key", "putRowsMax", "--value", "0")
        assert bad.returncode == 1 and "putRowsMax" in bad.stderr
        assert bad.stderr.count("\n") == 1
        later = admin(*to, "broker", "config", "set", "--key", "deleteFileBatchMax", "--value",
                      "7", "--json")
        assert later.returncode == 0 and json.loads(later.stdout)[0]["restart_needed"] is True
        assert "restart needed" in later.stderr
        settings = json.loads(admin("--broker", master["endpoint"], "broker", "config", "get",
                                    "--json").stdout)
        assert {"key": "autoCreateTopicEnable", "value": "false"}.items() <= next(
            r for r in settings if r["key"] == "autoCreateTopicEnable").items()

        cluster.kill(master)
        successor = cluster.wait_master(not_name=master["name"])
        after = lines(admin(*to, "produce", "--topic", "orders", "--body", "after failover",
                            "--json-lines"))
        assert after[0]["status"] == "PUT_OK"
        read = lines(admin(*to, "consume", "--topic", "orders", "--until-idle-ms", "300",
                           "--json-lines"))
        assert sorted(r["body"] for r in read) == ["after failover", "first", "second", "solo",
                                                    "third"]
        assert admin(*to, "group", "delete", "--group", "billing").returncode == 0
        assert admin(*to, "group", "describe", "--group", "billing").returncode == 1

        wrong = admin("--controller", successor["endpoint"], "topic", "list")
        assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1
        assert f"is a broker, not a controller: use --broker {successor['endpoint']}" \
            in wrong.stderr
        reverse = admin("--broker", controller, "topic", "list")
        assert reverse.returncode == 2 and "is a controller, not a broker" in reverse.stderr

        cli = [sys.executable, "-m", "ha.cluster"]
        empty = subprocess.run([*cli, "status", "--dir", str(tmp_path / "empty")], cwd=ROOT,
                               capture_output=True, text=True, check=False)
        assert empty.returncode == 1 and "no cluster in" in empty.stderr
        regrow = subprocess.run([*cli, "up", "--dir", str(tmp_path / "cluster"), "--replicas",
                                 "2"], cwd=ROOT, capture_output=True, text=True, check=False)
        assert regrow.returncode == 1 and "cannot become 2" in regrow.stderr
    finally:
        cluster.down()
