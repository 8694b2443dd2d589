"""RocketMQ 5 clients, unchanged, against rocketha through `rocketha-proxy` (issue 21).

Goal: the official Python client from PyPI produces and consumes through the gRPC endpoint of
a real cluster (a controller, a 3-broker replica set, the proxy, all started by
`rocketha-cluster up`): keys, tags and properties survive; SimpleConsumer receive + ack; a
message not acked comes back after its invisible duration with delivery_attempt 2; stale,
superseded and forged receipt handles get INVALID_RECEIPT_HANDLE (40013); delay messages get
UNSUPPORTED; the client's retries of one message id are stored once; the POP state survives a
SIGKILL of the proxy; TLS on the port; one set of topics: our Flight
Consumer and Spark read what the RocketMQ client wrote, the RocketMQ client reads what our
Producer wrote. Method: real processes, the real client; raw gRPC stubs only for requests the
client library would not send (forged handles, a resent message id, a delay message).
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from rocketmq import (
    ConsumeResult,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
from rocketmq.v5.exception import BadRequestException

from connector import Admin, ClientConfig, Consumer
from connector import Producer as FlightProducer
from connector.client import controller_call
from ha.cluster.processes import free_port, stop_pid_file
from tests.ha.replica_set import wait_for
from tests.integration.rmq_proxy_support import ProxyCluster, receive_all, rmq_config, stub

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BODY_BYTES_MAX = 1 << 20  # the brokers' maxMessageSize in FAST_TIMERS
MAX_DELIVERY_ATTEMPTS = 2  # a third delivery goes to %DLQ%<group> instead


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    cluster = ProxyCluster(tmp_path_factory.mktemp("rmq"), grpcMaxBodyBytes=str(BODY_BYTES_MAX),
                           grpcMaxDeliveryAttempts=str(MAX_DELIVERY_ATTEMPTS))
    try:
        yield cluster
    finally:
        cluster.down()


def make_topic(cluster: ProxyCluster, topic: str, queues: int = 4) -> None:
    Admin(ClientConfig(controller=cluster.controller_addr)).create_topic(topic, queues=queues)
    wait_for(lambda: controller_call(cluster.controller_addr, "get_routes", {"topic": topic},
                                     3000).get("status") == "OK", 20, f"routes of {topic}")


def flight_rows(cluster: ProxyCluster, topic: str, queues: int = 4) -> list[dict]:
    consumer = Consumer(ClientConfig(controller=cluster.controller_addr))
    rows = []
    for queue_id in range(queues):
        for table in consumer.iter_queue(topic, queue_id, 0, until_idle_ms=300):
            rows += table.to_pylist()
    return rows


def rmq_message(topic: str, body: bytes, *, tag: str | None = None,
                keys: tuple[str, ...] = (), **properties: str) -> Message:
    message = Message()
    message.topic = topic
    message.body = body
    if tag:
        message.tag = tag
    if keys:  # the property setter takes *keys, which `message.keys = ...` cannot pass
        type(message).keys.fset(message, *keys)  # type: ignore[attr-defined]
    for name, value in properties.items():
        message.add_property(name, value)
    return message


def simple_consumer(cluster: ProxyCluster, group: str, topic: str,
                    expression: str = "*") -> SimpleConsumer:
    consumer = SimpleConsumer(rmq_config(cluster.grpc_endpoint), group,
                              {topic: FilterExpression(expression)}, await_duration=1)
    consumer.startup()
    return consumer


def test_keys_tags_properties_through_rocketmq_flight_and_tag_filters(
        cluster: ProxyCluster) -> None:
    topic = "rmq-basic"
    make_topic(cluster, topic)
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()
    try:
        receipts = [producer.send(rmq_message(topic, f"m{i}".encode(),
                                              tag="TagA" if i % 2 else "TagB",
                                              keys=(f"k{i}", "common"), n=str(i)))
                    for i in range(20)]
    finally:
        producer.shutdown()
    assert len({r.message_id for r in receipts}) == 20
    consumer = simple_consumer(cluster, "g-all", topic)
    try:
        got = receive_all(consumer, 20)
        assert consumer.receive(32, 30) == []  # every one acked: nothing comes back
    finally:
        consumer.shutdown()
    assert sorted(m.body for m in got) == sorted(f"m{i}".encode() for i in range(20))
    for message in got:
        i = int(message.body[1:])
        assert message.tag == ("TagA" if i % 2 else "TagB")
        assert message.keys == {f"k{i}", "common"}
        assert message.properties == {"n": str(i)}
        assert message.delivery_attempt == 1
    assert {m.message_id for m in got} == {r.message_id for r in receipts}
    # the same messages through Arrow Flight: key, tags, properties, the message id
    rows = flight_rows(cluster, topic)
    assert len(rows) == 20
    ids = {r.message_id for r in receipts}
    for row in rows:
        i = int(row["body"][1:])
        props = dict(row["properties"])
        assert (set(row["key"].split(" ")), row["tags"], props["n"]) == (
            {f"k{i}", "common"}, "TagA" if i % 2 else "TagB", str(i))  # KEYS: space-separated
        assert props["UNIQ_KEY"] in ids
    # a group with a tag filter gets exactly its tag
    tagged = simple_consumer(cluster, "g-tag-a", topic, "TagA")
    try:
        only_a = receive_all(tagged, 10)
        assert tagged.receive(32, 30) == []
    finally:
        tagged.shutdown()
    assert sorted(m.body for m in only_a) == sorted(f"m{i}".encode() for i in range(1, 20, 2))


def test_the_rocketmq_client_reads_what_our_producer_wrote(cluster: ProxyCluster) -> None:
    topic = "rmq-from-flight"
    make_topic(cluster, topic)
    with FlightProducer(ClientConfig(controller=cluster.controller_addr)) as producer:
        for i in range(6):
            result = producer.send(topic, f"f{i}", key=f"key-{i}", tags="Flight",
                                   properties={"origin": "flight"})
            assert result.status == "PUT_OK"
    consumer = simple_consumer(cluster, "g-flight", topic)
    try:
        got = receive_all(consumer, 6)
    finally:
        consumer.shutdown()
    assert sorted(m.body for m in got) == [f"f{i}".encode() for i in range(6)]
    for message in got:
        assert message.tag == "Flight" and message.properties == {"origin": "flight"}
        assert message.keys == {f"key-{message.body.decode()[1:]}"}
        assert message.message_id  # the broker's msg id (no UNIQ_KEY on Flight messages)


def test_unacked_message_comes_back_and_stale_handles_are_refused(
        cluster: ProxyCluster) -> None:
    topic = "rmq-redelivery"
    make_topic(cluster, topic, queues=1)
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()
    try:
        for body in (b"once", b"twice"):
            producer.send(rmq_message(topic, body))
    finally:
        producer.shutdown()
    consumer = simple_consumer(cluster, "g-redeliver", topic)
    raw = stub(cluster.grpc_endpoint)
    try:
        first = receive_all(consumer, 2, invisible_s=2, ack=False)
        assert [m.delivery_attempt for m in first] == [1, 1]
        received_at = time.monotonic()
        once, twice = sorted(first, key=lambda m: m.body)
        old_handle = twice.receipt_handle
        consumer.change_invisible_duration(twice, 30)  # a new handle; the old one is stale
        assert twice.receipt_handle != old_handle
        assert _ack_code(raw, "g-redeliver", topic, old_handle) == 40013
        again = receive_all(consumer, 1, invisible_s=2, ack=False)
        assert time.monotonic() - received_at >= 1.5  # not before its invisible time ended
        assert [(m.body, m.delivery_attempt) for m in again] == [(b"once", 2)]
        with pytest.raises(BadRequestException) as stale:
            consumer.ack(once)  # the first delivery's handle: superseded by the second
        assert stale.value.code == 40013
        consumer.ack(again[0])
        consumer.ack(twice)
        assert consumer.receive(32, 2) == []
        forged = again[0].receipt_handle[:-4] + "0000"
        assert _ack_code(raw, "g-redeliver", topic, forged) == 40013
        assert _ack_code(raw, "another-group", topic, again[0].receipt_handle) == 40013
    finally:
        consumer.shutdown()


def _ack_code(raw: object, group: str, topic: str, handle: str) -> int:
    request = service_pb2.AckMessageRequest()
    request.group.name = group
    request.topic.name = topic
    request.entries.add(message_id="x", receipt_handle=handle)
    return raw.AckMessage(request, timeout=10).status.code  # type: ignore[attr-defined]


def _send_request(topic: str, message_id: str, body: bytes,
                  kind: int = definition_pb2.NORMAL) -> service_pb2.SendMessageRequest:
    request = service_pb2.SendMessageRequest()
    message = request.messages.add(body=body)
    message.topic.name = topic
    message.system_properties.message_id = message_id
    message.system_properties.message_type = kind
    message.system_properties.body_encoding = definition_pb2.IDENTITY
    return request


def test_refused_sends_and_a_resent_message_id_stored_once(cluster: ProxyCluster) -> None:
    topic = "rmq-refused"
    make_topic(cluster, topic)
    raw = stub(cluster.grpc_endpoint)

    def send(request: service_pb2.SendMessageRequest) -> service_pb2.SendMessageResponse:
        response = raw.SendMessage(request, timeout=15)
        assert len(response.entries) == 1
        return response

    delay = _send_request(topic, "ID-DELAY", b"later", definition_pb2.DELAY)
    assert send(delay).status.code == 50500  # UNSUPPORTED
    transaction = _send_request(topic, "ID-TX", b"tx", definition_pb2.TRANSACTION)
    assert send(transaction).status.code == 50500
    assert send(_send_request("no-such-topic", "ID-NT", b"x")).status.code == 40402
    big = _send_request(topic, "ID-BIG", b"x" * (BODY_BYTES_MAX + 1))
    assert send(big).status.code == 41301  # MESSAGE_BODY_TOO_LARGE
    route = raw.QueryRoute(service_pb2.QueryRouteRequest(
        topic=definition_pb2.Resource(name="no-such-topic")), timeout=10)
    assert route.status.code == 40402  # TOPIC_NOT_FOUND
    first = send(_send_request(topic, "0102FC00000000000000000000000000AA", b"one copy"))
    again = send(_send_request(topic, "0102FC00000000000000000000000000AA", b"one copy"))
    assert (first.status.code, again.status.code) == (20000, 20000)
    assert first.entries[0].offset >= 0  # the resend's receipt: the original's (issue 43)
    assert again.entries[0].offset == first.entries[0].offset
    assert [r["body"] for r in flight_rows(cluster, topic)] == [b"one copy"]


def test_pop_state_survives_a_proxy_kill(cluster: ProxyCluster) -> None:
    topic = "rmq-restart"
    make_topic(cluster, topic, queues=1)
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()
    try:
        for body in (b"a", b"b", b"c"):
            producer.send(rmq_message(topic, body))
    finally:
        producer.shutdown()
    consumer = simple_consumer(cluster, "g-restart", topic)
    try:
        a, b, c = sorted(receive_all(consumer, 3, invisible_s=60, ack=False),
                         key=lambda m: m.body)
        consumer.ack(a)
        cluster.kill_proxy()  # SIGKILL: no snapshot on the way out
        cluster.restart_proxy()
        wait_for(lambda: _ack_code(stub(cluster.grpc_endpoint), "g-restart", topic,
                                   "rh1.x.0") == 40013, 30, "the restarted proxy")

        def ack_b() -> bool:  # a handle from before the restart is still valid
            try:
                consumer.ack(b)
            except grpc.aio.AioRpcError as err:  # the client's channel is in its reconnect
                if err.code() != grpc.StatusCode.UNAVAILABLE:  # backoff (the proxy was down)
                    raise
                return False
            return True

        wait_for(ack_b, 30, "the client's channel to the restarted proxy")
        assert consumer.receive(32, 30) == []  # a acked, b acked, c still invisible
        consumer.change_invisible_duration(c, 1)
        back = receive_all(consumer, 1, invisible_s=30)
        assert [(m.body, m.delivery_attempt) for m in back] == [(b"c", 2)]
        assert consumer.receive(32, 30) == []
    finally:
        consumer.shutdown()


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 (IP SAN) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rocketha-proxy test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "proxy.crt", directory / "proxy.key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    return cert_file, key_file


CLIENT_SEND = """
import sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic, ak, sk = sys.argv[1:5]
producer = Producer(ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=5),
                    (topic,), tls_enable=True)
producer.startup()
message = Message()
message.topic, message.body = topic, b"signed"
print(producer.send(message).message_id)
producer.shutdown()
"""


@contextlib.contextmanager
def extra_proxy(cluster: ProxyCluster, directory: Path, **keys: str) -> Iterator[str]:
    """A second rocketha-proxy on the cluster with these keys; yields its endpoint (log:
    `directory/proxy.log`). By default it writes no snapshot."""
    keys = {"grpcStateSnapshotIntervalMs": "86400000", **keys}
    port = free_port()
    conf = directory / "proxy.conf"
    conf.write_text("\n".join([f"grpcListenPort={port}",
                               f"controllerAddr={cluster.controller_addr}",
                               *(f"{key}={value}" for key, value in keys.items())]) + "\n")
    pid_file = directory / "proxy.pid"
    with open(directory / "proxy.log", "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "connector.rmq_proxy", "--conf",
                                    str(conf)], stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    pid_file.write_text(f"{process.pid}\n")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_pid_file(pid_file)
        process.wait(timeout=30)


def test_a_tls_port_and_authentication_that_needs_the_controllers_users(
        cluster: ProxyCluster, tmp_path: Path) -> None:
    """A proxy with TLS: the official client (tls_enable) sends; a plaintext connection gets
    no answer. Authentication (grpcAuthenticationEnabled) checks the controllers' users, so
    a proxy without a Super user's keys to read them refuses to start, naming clientConfig
    (test_rmq_proxy_auth.py covers users, ACLs and wrong secrets on a secured cluster)."""
    cert_file, key_file = _self_signed(tmp_path)
    conf = tmp_path / "auth.conf"
    conf.write_text(f"grpcListenPort={free_port()}\ncontrollerAddr={cluster.controller_addr}\n"
                    "grpcAuthenticationEnabled=true\n")
    refused = subprocess.run([sys.executable, "-m", "connector.rmq_proxy", "--conf", str(conf)],
                             capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
    assert refused.returncode == 2 and "clientConfig" in refused.stderr, refused.stderr[-2000:]
    with extra_proxy(cluster, tmp_path, grpcTlsCertFile=str(cert_file),
                     grpcTlsKeyFile=str(key_file)) as endpoint:
        topic = "rmq-tls"
        make_topic(cluster, topic)
        roots = grpc.ssl_channel_credentials(root_certificates=cert_file.read_bytes())
        raw = service_pb2_grpc.MessagingServiceStub(grpc.secure_channel(endpoint, roots))
        request = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
        code = wait_for(lambda: _query_code(raw, request, []), 30, "the TLS proxy")
        assert code == 20000
        assert _query_code(stub(endpoint), request, []) is None  # plaintext: no answer
        sent = subprocess.run([sys.executable, "-c", CLIENT_SEND, endpoint, topic, "", ""],
                              capture_output=True, text=True, timeout=120, check=False,
                              cwd=ROOT, env={**os.environ, "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH":
                                             str(cert_file)})
        assert sent.returncode == 0, sent.stderr[-2000:]
        assert sent.stdout.strip().splitlines()[-1] in {
            dict(r["properties"])["UNIQ_KEY"] for r in flight_rows(cluster, topic)}


def _query_code(raw: object, request: object, metadata: list) -> int | None:
    try:
        return raw.QueryRoute(request, metadata=metadata, timeout=5).status.code  # type: ignore
    except Exception:  # noqa: BLE001 - not listening yet: wait_for asks again
        return None


@pytest.mark.spark
def test_spark_reads_what_the_rocketmq_client_wrote(cluster: ProxyCluster, spark: object
                                                    ) -> None:
    topic = "rmq-spark"
    make_topic(cluster, topic)
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()
    try:
        ids = {producer.send(rmq_message(topic, f"s{i}".encode(), tag="Spark",
                                         keys=(f"sk{i}",), color="blue")).message_id
               for i in range(8)}
    finally:
        producer.shutdown()
    frame = (spark.read.format("rocketha")  # type: ignore[attr-defined]
             .option("controller", cluster.controller_addr).option("subscribe", topic)
             .option("includeProperties", "true").load())
    rows = frame.select("key", "tags", "body", "properties").collect()
    assert sorted(bytes(r["body"]) for r in rows) == sorted(f"s{i}".encode() for i in range(8))
    for row in rows:
        properties = dict(row["properties"])
        assert row["key"] == f"sk{bytes(row['body']).decode()[1:]}" and row["tags"] == "Spark"
        assert properties["color"] == "blue" and properties["UNIQ_KEY"] in ids


NODE_DIR = Path(__file__).resolve().parent / "node"
NPM_TIMEOUT_S = 300


def test_the_nodejs_client_sends_and_receives(cluster: ProxyCluster) -> None:
    """npm `rocketmq-client-nodejs` 1.0.8 (tests/integration/node/smoke.js) with Debian's node."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are not installed (Debian: apt-get install nodejs npm)")
    if not (NODE_DIR / "node_modules" / "rocketmq-client-nodejs").exists():
        done = subprocess.run([npm, "install", "--no-audit", "--no-fund"], cwd=NODE_DIR,
                              capture_output=True, text=True, timeout=NPM_TIMEOUT_S,
                              check=False)
        assert done.returncode == 0, f"npm install failed: {done.stderr[-2000:]}"
    topic = "rmq-node"
    make_topic(cluster, topic)
    done = subprocess.run([node, "smoke.js", cluster.grpc_endpoint, topic, "g-node", "5"],
                          cwd=NODE_DIR, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    received = sorted(result["received"], key=lambda m: m["body"])
    assert [m["body"] for m in received] == [f"n{i}" for i in range(5)]
    assert {m["messageId"] for m in received} == set(result["sent"])
    for message in received:
        assert message["tag"] == "Node" and message["origin"] == "nodejs"
        assert message["keys"] == [f"node-{message['body'][1:]}"] and message["attempt"] == 1
    # and what node wrote is an ordinary rocketha message
    rows = flight_rows(cluster, topic)
    assert sorted(r["key"] for r in rows) == [f"node-{i}" for i in range(5)]


def test_fifo_messages_of_one_group_share_a_queue_in_order(cluster: ProxyCluster) -> None:
    topic = "rmq-fifo"
    make_topic(cluster, topic)
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()
    try:
        for i in range(12):
            message = rmq_message(topic, f"{i % 3}:{i}".encode())
            message.message_group = f"order-{i % 3}"
            producer.send(message)
    finally:
        producer.shutdown()
    rows = flight_rows(cluster, topic)
    assert len(rows) == 12
    for group in range(3):
        mine = [r for r in rows if dict(r["properties"])["__SHARDINGKEY"] == f"order-{group}"]
        assert len({r["queue_id"] for r in mine}) == 1  # one group, one queue
        in_queue_order = [r["body"] for r in sorted(mine, key=lambda r: r["queue_offset"])]
        assert in_queue_order == [f"{group}:{i}".encode() for i in range(group, 12, 3)]
    consumer = simple_consumer(cluster, "g-fifo", topic)
    try:
        got = receive_all(consumer, 12)
    finally:
        consumer.shutdown()
    assert {(m.message_group, m.body) for m in got} == {
        (f"order-{i % 3}", f"{i % 3}:{i}".encode()) for i in range(12)}


def test_the_push_consumer_consumes_by_pop_and_retries_a_failure(cluster: ProxyCluster) -> None:
    topic = "rmq-push"
    make_topic(cluster, topic, queues=2)
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()
    try:
        for i in range(6):
            producer.send(rmq_message(topic, f"p{i}".encode()))
    finally:
        producer.shutdown()
    consumed: list[tuple[bytes, int, ConsumeResult]] = []

    class Listener(MessageListener):
        def consume(self, message: Message) -> ConsumeResult:
            first_p3 = message.body == b"p3" and not any(b == b"p3" for b, _, _ in consumed)
            result = ConsumeResult.FAILURE if first_p3 else ConsumeResult.SUCCESS
            consumed.append((message.body, message.delivery_attempt, result))
            return result

    consumer = PushConsumer(rmq_config(cluster.grpc_endpoint), "g-push", Listener(),
                            {topic: FilterExpression("*")})
    consumer.startup()
    try:
        wait_for(lambda: sum(r is ConsumeResult.SUCCESS for _, _, r in consumed) >= 6, 60,
                 "the push consumer to consume every message")
    finally:
        consumer.shutdown()
    succeeded = sorted((b, a) for b, a, r in consumed if r is ConsumeResult.SUCCESS)
    assert succeeded == [(b"p0", 1), (b"p1", 1), (b"p2", 1), (b"p3", 2), (b"p4", 1),
                         (b"p5", 1)]  # p3 failed once and came back as attempt 2


def test_dead_letters_after_the_last_attempt_and_on_request(cluster: ProxyCluster) -> None:
    topic, group = "rmq-dlq", "g-dlq"
    make_topic(cluster, topic, queues=1)
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()
    try:
        ids = {body: producer.send(rmq_message(topic, body, tag="T")).message_id
               for body in (b"doomed", b"forwarded")}
    finally:
        producer.shutdown()
    consumer = simple_consumer(cluster, group, topic)
    raw = stub(cluster.grpc_endpoint)
    try:
        assert len(receive_all(consumer, 2, invisible_s=1, ack=False)) == 2
        second = {m.body: m for m in receive_all(consumer, 2, invisible_s=1, ack=False)}
        assert {b: m.delivery_attempt for b, m in second.items()} == {
            b"doomed": 2, b"forwarded": 2}
        forward = service_pb2.ForwardMessageToDeadLetterQueueRequest(
            receipt_handle=second[b"forwarded"].receipt_handle, message_id=ids[b"forwarded"],
            delivery_attempt=2, max_delivery_attempts=MAX_DELIVERY_ATTEMPTS)
        forward.group.name, forward.topic.name = group, topic
        assert raw.ForwardMessageToDeadLetterQueue(forward, timeout=15).status.code == 20000
        assert raw.ForwardMessageToDeadLetterQueue(forward, timeout=15).status.code == 40013

        def dead_lettered() -> bool:  # "doomed"'s second lease ends; its turn goes to the DLQ
            assert consumer.receive(32, 1) == []  # never a third delivery
            return len(flight_rows(cluster, "%DLQ%" + group, queues=1)) == 2

        wait_for(dead_lettered, 30, "both messages on the dead-letter topic")
    finally:
        consumer.shutdown()
    dead = {r["body"]: r for r in flight_rows(cluster, "%DLQ%" + group, queues=1)}
    assert set(dead) == {b"doomed", b"forwarded"}  # each once
    for body, row in dead.items():
        properties = dict(row["properties"])
        assert (properties["DLQ_ORIGIN_TOPIC"], properties["DLQ_ORIGIN_MESSAGE_ID"]) == (
            topic, ids[body])
        assert row["tags"] == "T"


def _receive_code(raw: object, group: str, topic: str) -> int | None:
    request = service_pb2.ReceiveMessageRequest(batch_size=1)
    request.group.name = group
    request.message_queue.topic.name = topic
    request.message_queue.broker.name = "broker-a"
    request.invisible_duration.FromMilliseconds(30_000)
    request.long_polling_timeout.FromMilliseconds(0)
    try:
        responses = list(raw.ReceiveMessage(request, timeout=15))  # type: ignore[attr-defined]
    except grpc.RpcError:
        return None  # not listening yet: wait_for asks again
    return responses[0].status.code


def test_consumer_states_are_bounded(cluster: ProxyCluster, tmp_path: Path) -> None:
    """grpcConsumerQueuesMax: a client inventing consumer groups cannot grow the proxy's
    state without bound; the groups it has keep working."""
    topic = "rmq-bounded"
    make_topic(cluster, topic, queues=4)
    # the bound counts every state the proxy holds, also those it replays from the state
    # topic (the other tests' groups here): so new groups until the first refusal
    limit = 200
    with extra_proxy(cluster, tmp_path, grpcConsumerQueuesMax=str(limit)) as endpoint:
        raw = stub(endpoint)
        first = wait_for(lambda: _receive_code(raw, "bounded-0", topic), 30, "the proxy")
        assert first == 40401  # MESSAGE_NOT_FOUND: its 4 states are in
        codes = []
        for index in range(1, limit // 4 + 1):
            codes.append(_receive_code(raw, f"bounded-{index}", topic))
            if codes[-1] != 40401:
                break
        assert codes[-1] == 42900, codes  # TOO_MANY_REQUESTS before limit / 4 new groups
        assert set(codes[:-1]) <= {40401}
        assert _receive_code(raw, "bounded-0", topic) == 40401  # a known group still works


def test_two_proxies_serve_one_consumer_group_without_double_delivery(
        cluster: ProxyCluster, tmp_path: Path) -> None:
    """Two rocketha-proxy processes on one cluster, a SimpleConsumer of the same group on
    each, receiving concurrently: every message is delivered once (none lost, none to both);
    a handle from one proxy is acked on the other; then nothing comes back on either. The
    proxies share the POP state through its log (state_store.py: conditional records in log
    order, each proxy applying the log up to its own record before it answers)."""
    topic = "rmq-two-proxies"
    make_topic(cluster, topic, queues=2)
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()
    try:
        expected = [f"p{i}".encode() for i in range(40)]
        for body in expected:
            producer.send(rmq_message(topic, body))
    finally:
        producer.shutdown()
    key_file = cluster.directory / "conf" / "proxy.key"
    with extra_proxy(cluster, tmp_path, grpcReceiptHandleKeyFile=str(key_file),
                     grpcStateSnapshotIntervalMs="500",
                     grpcInvisibleDurationMinMs="1000") as second:
        route = service_pb2.QueryRouteRequest(topic=definition_pb2.Resource(name=topic))
        wait_for(lambda: _query_code(stub(second), route, []) == 20000, 30, "the 2nd proxy")
        consumers = [simple_consumer(cluster, "g-two", topic),
                     SimpleConsumer(rmq_config(second), "g-two",
                                    {topic: FilterExpression("*")}, await_duration=1)]
        consumers[1].startup()
        got: list[list[bytes]] = [[], []]
        deadline = time.monotonic() + 90

        def consume(index: int) -> None:
            while sum(map(len, got)) < len(expected) and time.monotonic() < deadline:
                for message in consumers[index].receive(4, 60):
                    got[index].append(message.body)
                    consumers[index].ack(message)

        try:
            for index in (1, 0):  # one batch each first (a client's first call is slow)
                batch = wait_for(lambda index=index: consumers[index].receive(4, 60), 30,
                                 f"a first batch through proxy {index}")
                for message in batch:
                    got[index].append(message.body)
                    consumers[index].ack(message)
            threads = [threading.Thread(target=consume, args=(i,)) for i in (0, 1)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(got[0] + got[1]) == sorted(expected)  # once each, none lost
            assert got[0] and got[1], (len(got[0]), len(got[1]))  # both proxies served
            # a handle leased through the second proxy, acked through the first
            extra = Producer(rmq_config(second), (topic,))
            extra.startup()
            try:
                extra.send(rmq_message(topic, b"cross"))
            finally:
                extra.shutdown()
            crossed = wait_for(lambda: consumers[1].receive(1, 60), 30, "the cross message")
            assert [m.body for m in crossed] == [b"cross"]
            assert _ack_code(stub(cluster.grpc_endpoint), "g-two", topic,
                             crossed[0].receipt_handle) == 20000
            assert consumers[0].receive(32, 30) == [] and consumers[1].receive(32, 30) == []
        finally:
            for consumer in consumers:
                consumer.shutdown()
    stopped = [line for line in (tmp_path / "proxy.log").read_text().splitlines()
               if "rocketha-proxy stopped" in line]
    assert stopped and "'records_caught_up': 0," not in stopped[-1], stopped


def test_fifo_a_message_waits_while_an_earlier_one_of_its_group_is_in_flight(
        cluster: ProxyCluster) -> None:
    """RocketMQ's FIFO consumption (grpcFifoConsumption, on by default): in one queue
    a0 b0 a1 n0 b1 a2 (groups A and B, n0 without a group). A message is held back while an
    earlier one of its group is leased (in flight, expired or not), and so is what follows it
    in the queue (the cursor stops there); an expired one is redelivered before the later
    ones of its group."""
    topic = "rmq-fifo-order"
    make_topic(cluster, topic, queues=1)
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()
    try:
        for body in (b"a0", b"b0", b"a1", b"n0", b"b1", b"a2"):
            message = rmq_message(topic, body)
            if not body.startswith(b"n"):
                message.message_group = "group-" + body[:1].decode()
            producer.send(message)
    finally:
        producer.shutdown()
    consumer = simple_consumer(cluster, "g-fifo-order", topic)

    def receive(invisible_s: int = 30) -> dict[bytes, Any]:
        return {m.body: m for m in consumer.receive(32, invisible_s)}

    try:
        first = receive(invisible_s=5)
        assert sorted(first) == [b"a0", b"b0"]  # a1 waits for a0, and n0 b1 a2 behind it
        assert receive() == {}
        consumer.ack(first[b"a0"])
        second = receive()
        assert sorted(second) == [b"a1", b"n0"]  # b1 waits for b0 (in flight)
        for body in (b"a1", b"n0"):
            consumer.ack(second[body])
        held = receive()  # b1 and a2 wait behind b0 (b0 itself once its time is over)
        assert set(held) <= {b"b0"}, sorted(held)
        expired = held or wait_for(lambda: receive(), 30, "b0 back after its invisible time")
        assert sorted(expired) == [b"b0"] and expired[b"b0"].delivery_attempt == 2
        consumer.ack(expired[b"b0"])
        last = receive()
        assert sorted(last) == [b"a2", b"b1"]
        for message in last.values():
            consumer.ack(message)
        assert receive() == {}
    finally:
        consumer.shutdown()
