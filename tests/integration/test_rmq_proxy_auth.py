"""RocketMQ clients on a secured cluster: each one authenticated as a controller user, its ACLs
enforced by the brokers (issue 21's security requirement).

Goal: the official Python client, with the keys of a user created through the controller
(Raft), is checked by rocketha-proxy against the same users the brokers use, and the proxy
calls the cluster *as that user*: Pub on topic A only -> a send to A is stored, a send to B is
refused FORBIDDEN (40300); receiving needs Sub on the topic and on the consumer group (the
broker checks the group named in the pull); an ack by a user without the rights is refused
too; a wrong secret or a date outside the skew window is UNAUTHORIZED (40100); the admin (a
Super user) works; no secret appears in any log line of any process.

Method: `rocketha-cluster up` secured (TLS + authentication, the default) with one controller
and one broker; the official client trusts DIR/tls/ca.pem through
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH (tls_enable=True); raw stubs signed with the client's own
Signature.metadata read the exact status codes.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq import ClientConfiguration, Credentials, FilterExpression, Producer, SimpleConsumer
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from rocketmq.v5.exception import ForbiddenException
from rocketmq.v5.util.signature import Signature

from connector import Admin, ClientConfig, Consumer
from connector.client import controller_call
from connector.rmq_proxy.auth import sign
from ha.cluster.auth import admin_credentials
from tests.ha.replica_set import FAST_TIMERS, wait_for
from tests.integration.failover_cluster import cluster_cli
from tests.integration.test_rmq_proxy import rmq_message

pytestmark = pytest.mark.integration

ALICE = ("AK_alice", "alice-secret-0123456789")  # Pub on rmq-a
BOB = ("AK_bob", "bob-secret-0123456789")  # Sub on rmq-a and on group g-bob
CAROL = ("AK_carol", "carol-secret-0123456789")  # Sub on rmq-a only (no group)
WRONG_SECRET = "not-the-secret-987654"


class SecuredProxy:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        settings = {**FAST_TIMERS, "brokerHeartbeatInterval": "200",
                    "defaultTopicQueueNums": "2"}
        args = ["up", "--dir", str(directory), "--controllers", "1", "--replicas", "1",
                "--grpc-set", "grpcInvisibleDurationMinMs=1000",
                "--grpc-set", "grpcAuthRefreshIntervalMs=1000"]
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        cluster_cli(*args)
        status = json.loads(cluster_cli("status", "--dir", str(directory), "--json"))
        self.endpoint: str = status["grpc_endpoint"]
        self.config = ClientConfig.from_properties(directory / "client.properties",
                                                   request_timeout_ms=3000)
        keys = admin_credentials(directory)
        assert keys is not None
        self.admin_keys = (keys.access_key, keys.secret_key)
        self.ca = directory / "tls" / "ca.pem"
        self.channel = grpc.secure_channel(
            self.endpoint, grpc.ssl_channel_credentials(root_certificates=self.ca.read_bytes()))
        self.stub = service_pb2_grpc.MessagingServiceStub(self.channel)

    def control(self, action: str, body: dict[str, Any]) -> None:
        reply = controller_call(self.config.controller or "", action, body, 3000,
                                self.config.tls, self.config.credentials)
        assert reply["status"] == "OK", reply

    def user(self, name: str, keys: tuple[str, str], resources: dict[str, list[str]]) -> None:
        self.control("user_create", {"name": name, "access_key": keys[0],
                                     "secret_key": keys[1], "type": "Normal"})
        for resource, actions in resources.items():
            self.control("acl_create", {"subject": f"User:{name}", "resources": [resource],
                                        "actions": actions, "decision": "Allow"})

    def rmq(self, keys: tuple[str, str]) -> ClientConfiguration:
        return ClientConfiguration(self.endpoint, Credentials(*keys), request_timeout=5)


def _metadata(keys: tuple[str, str], date_time: str | None = None) -> list[tuple[str, str]]:
    """The official client's headers for `keys` (optionally signed at another date)."""
    config = type("Config", (), {"namespace": "", "credentials": type(
        "Keys", (), {"ak": keys[0], "sk": keys[1]})})
    metadata = dict(Signature.metadata(config, "test-client"))
    if date_time is not None:
        metadata["x-mq-date-time"] = date_time
        metadata["authorization"] = (f"MQv2-HMAC-SHA1 Credential={keys[0]}, SignedHeaders="
                                     f"x-mq-date-time, Signature={sign(keys[1], date_time)}")
    return list(metadata.items())


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredProxy]:
    directory = tmp_path_factory.mktemp("rmq-auth")
    previous = os.environ.get("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH")
    try:
        cluster = SecuredProxy(directory)
        # the official client dials TLS with gRPC's default roots: this cluster's CA
        os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = str(cluster.ca)
        admin = Admin(cluster.config)
        for topic in ("rmq-a", "rmq-b"):
            admin.create_topic(topic, queues=2)
        cluster.user("alice", ALICE, {"Topic:rmq-a": ["Pub"]})
        cluster.user("bob", BOB, {"Topic:rmq-a": ["Sub"], "Group:g-bob": ["Sub"]})
        cluster.user("carol", CAROL, {"Topic:rmq-a": ["Sub"]})
        # the broker learns users and ACLs a heartbeat after the controller applied them
        # (until then it answers UNAUTHENTICATED: 40100)
        for keys in (BOB, CAROL):
            wait_for(lambda keys=keys: _send_code(cluster, keys, "rmq-b", b"x") == 40300, 30,
                     f"the broker to know {keys[0]}")
        wait_for(lambda: _send_code(cluster, ALICE, "rmq-a", b"probe") == 20000, 30,
                 "alice's Pub on rmq-a at the proxy and the broker")
        yield cluster
        cluster.channel.close()
    finally:
        if previous is None:
            os.environ.pop("GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", None)
        else:
            os.environ["GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"] = previous
        cluster_cli("down", "--dir", str(directory))


def _send_code(cluster: SecuredProxy, keys: tuple[str, str], topic: str, body: bytes) -> int:
    message = definition_pb2.Message(topic=definition_pb2.Resource(name=topic), body=body)
    message.system_properties.message_id = f"01TEST{time.monotonic_ns() % 10**20:020d}"
    message.system_properties.message_type = definition_pb2.NORMAL
    reply = cluster.stub.SendMessage(service_pb2.SendMessageRequest(messages=[message]),
                                     metadata=_metadata(keys), timeout=10)
    return int(reply.entries[0].status.code if reply.entries else reply.status.code)


def _receive_code(cluster: SecuredProxy, keys: tuple[str, str], group: str) -> int:
    route = cluster.stub.QueryRoute(
        service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="rmq-a")),
        metadata=_metadata(cluster.admin_keys), timeout=10)
    request = service_pb2.ReceiveMessageRequest(
        group=definition_pb2.Resource(name=group),
        message_queue=route.message_queues[0],
        filter_expression=definition_pb2.FilterExpression(expression="*"), batch_size=1)
    request.invisible_duration.FromMilliseconds(5000)
    replies = list(cluster.stub.ReceiveMessage(request, metadata=_metadata(keys), timeout=10))
    return int(replies[0].status.code)


def _flight_bodies(cluster: SecuredProxy, topic: str) -> list[bytes]:
    consumer = Consumer(cluster.config)
    bodies = []
    for queue_id in range(2):
        for table in consumer.iter_queue(topic, queue_id, 0, until_idle_ms=300):
            bodies += table.column("body").to_pylist()
    return sorted(bodies)


def test_a_user_publishes_only_where_its_acl_allows(secured: SecuredProxy) -> None:
    producer = Producer(secured.rmq(ALICE), ("rmq-a",), tls_enable=True)
    producer.startup()
    try:
        receipt = producer.send(rmq_message("rmq-a", b"from-alice"))
        assert receipt.message_id
        # as RocketMQ's proxy, a route needs Pub or Sub on the topic: the client's send to
        # rmq-b ends at its route query (FORBIDDEN, checked below on the raw stub)
        with pytest.raises(Exception, match="route"):
            producer.send(rmq_message("rmq-b", b"not-allowed"))
    finally:
        producer.shutdown()
    route = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="rmq-b"))
    assert secured.stub.QueryRoute(route, metadata=_metadata(ALICE),
                                   timeout=10).status.code == 40300
    assert _send_code(secured, ALICE, "rmq-b", b"raw") == 40300  # the put itself, FORBIDDEN
    assert _send_code(secured, BOB, "rmq-a", b"bob-has-no-pub") == 40300
    assert _flight_bodies(secured, "rmq-a").count(b"from-alice") == 1
    assert b"bob-has-no-pub" not in _flight_bodies(secured, "rmq-a")
    assert _flight_bodies(secured, "rmq-b") == []


def test_receiving_needs_sub_on_the_topic_and_the_group(secured: SecuredProxy) -> None:
    admin_producer = Producer(secured.rmq(secured.admin_keys), ("rmq-a",), tls_enable=True)
    admin_producer.startup()
    try:
        admin_producer.send(rmq_message("rmq-a", b"for-bob"))
    finally:
        admin_producer.shutdown()
    wait_for(lambda: _receive_code(secured, CAROL, "g-carol") == 40300, 30,
             "carol (no Sub on her group) refused")
    assert _receive_code(secured, ALICE, "g-bob") == 40300  # no Sub on the topic
    consumer = SimpleConsumer(secured.rmq(BOB), "g-bob", {"rmq-a": FilterExpression("*")},
                              await_duration=1, tls_enable=True)
    consumer.startup()
    try:
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while not any(m.body == b"for-bob" for m in got) and time.monotonic() < deadline:
            got += consumer.receive(32, 30)
        mine = [m for m in got if m.body == b"for-bob"]
        assert mine, [m.body for m in got]
        # a handle bob received, acked by carol (Sub on the topic, not on g-bob): refused
        ack = service_pb2.AckMessageRequest(
            group=definition_pb2.Resource(name="g-bob"),
            topic=definition_pb2.Resource(name="rmq-a"),
            entries=[service_pb2.AckMessageEntry(message_id=mine[0].message_id,
                                                 receipt_handle=mine[0].receipt_handle)])
        assert secured.stub.AckMessage(ack, metadata=_metadata(CAROL),
                                       timeout=10).status.code == 40300
        for message in got:
            consumer.ack(message)  # bob may
    finally:
        consumer.shutdown()
    with pytest.raises(ForbiddenException):
        denied = SimpleConsumer(secured.rmq(CAROL), "g-carol",
                                {"rmq-a": FilterExpression("*")}, await_duration=1,
                                tls_enable=True)
        denied.startup()
        try:
            denied.receive(1, 30)
        finally:
            denied.shutdown()


def test_wrong_secret_unknown_key_and_stale_date_are_unauthorized(secured: SecuredProxy
                                                                   ) -> None:
    route = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name="rmq-a"))

    def code(metadata: list[tuple[str, str]]) -> int:
        return int(secured.stub.QueryRoute(route, metadata=metadata, timeout=10).status.code)

    assert code(_metadata(ALICE)) == 20000
    assert code(_metadata((ALICE[0], WRONG_SECRET))) == 40100
    assert code(_metadata(("AK_nobody", WRONG_SECRET))) == 40100
    assert code(_metadata(ALICE, "20200101T000000Z")) == 40100  # a replay years later
    assert code([]) == 40100
    producer = Producer(secured.rmq((ALICE[0], WRONG_SECRET)), tls_enable=True)
    producer.startup()
    try:
        # its first call is the route query (40100 above): the client reports that
        with pytest.raises(Exception, match="route"):
            producer.send(rmq_message("rmq-a", b"wrong-secret"))
    finally:
        producer.shutdown()
    assert b"wrong-secret" not in _flight_bodies(secured, "rmq-a")


def test_the_admin_works_and_no_secret_is_logged(secured: SecuredProxy) -> None:
    producer = Producer(secured.rmq(secured.admin_keys), ("rmq-b",), tls_enable=True)
    producer.startup()
    try:
        producer.send(rmq_message("rmq-b", b"from-admin"))
    finally:
        producer.shutdown()
    consumer = SimpleConsumer(secured.rmq(secured.admin_keys), "g-admin",
                              {"rmq-b": FilterExpression("*")}, await_duration=1,
                              tls_enable=True)
    consumer.startup()
    try:
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while not got and time.monotonic() < deadline:
            got = consumer.receive(32, 30)
        assert [m.body for m in got] == [b"from-admin"]
        consumer.ack(got[0])
    finally:
        consumer.shutdown()
    secrets = [secured.admin_keys[1], ALICE[1], BOB[1], CAROL[1], WRONG_SECRET]
    logs = [path for path in secured.directory.rglob("*.log*") if path.is_file()]
    assert any(path.name == "proxy.log" for path in logs), logs
    proxy_log = (secured.directory / "logs" / "proxy.log").read_text(errors="replace")
    assert "refused" in proxy_log and "users at version" in proxy_log  # it did log them
    for path in logs:
        text = path.read_text(errors="replace")
        leaked = [s for s in secrets if s in text]
        assert not leaked, f"{path}: a secret in a log line"
