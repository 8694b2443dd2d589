"""Mutual TLS on every link of a real cluster, and who is refused (issue 16, transport security).

Goal: a cluster started secure by default (`rocketha-cluster up`: 3 controllers, one replica
set of 3, certificates made by its CA) produces, replicates, consumes and fails over with every
link under mutual TLS; and the refusals hold against real processes: a plaintext client and a
client without a certificate get nothing; a tool's certificate cannot make a broker's calls, nor
one broker's certificate another broker's; an HA slave whose certificate names another
brokerName is refused by the master; a Raft peer whose certificate names an id outside the
peer list, or which claims another id in its frames, is refused by the controller. Each refusal
is logged once per peer, and the refusing process keeps serving.

Method: `python -m ha.cluster up` (no --insecure), the clients from `<dir>/client.properties`;
impostors get real certificates from the cluster's own CA (ha/cluster/certs.py), so only the
identity in them is wrong.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyarrow import flight

from conf.signing import Credentials, action_target
from conf.tls import (
    ClientTLS,
    broker_identity,
    client_ssl_context,
    connect_flight,
    controller_identity,
)
from connector import Admin, ClientConfig, Consumer, Producer
from connector.client import controller_cluster_list, signed_options
from connector.protocol import RocketHAError
from controller.console.app import gather
from controller.transport import encode_frame
from ha.cluster.certs import ensure_ca
from tests.ha.replica_set import FAST_TIMERS, cluster_command, wait_for
from tests.support.sockets import closed_within

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "secure"


def _cluster_cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "ha.cluster", *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    return done.stdout


class Secure:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.config = ClientConfig.from_properties(directory / "client.properties",
                                                   request_timeout_ms=3000)
        self.manifest = json.loads((directory / "cluster.json").read_text())
        self.ca = ensure_ca(directory / "tls")

    def processes(self) -> list[dict[str, Any]]:
        out = cluster_command("status", "--dir", str(self.directory), "--json")
        return json.loads(out)["processes"]  # type: ignore[no-any-return]

    def master(self) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            masters = [p for p in self.processes() if p["role"] == "MASTER"]
            return masters[0] if len(masters) == 1 else None
        return wait_for(found, 30.0, "one master")  # type: ignore[no-any-return]

    def log_text(self, prefix: str) -> str:
        return "".join(path.read_text(errors="replace")
                       for path in sorted((self.directory / "logs").glob(f"{prefix}*.log")))

    def impostor(self, name: str, identity: str) -> ClientTLS:
        issued = self.ca.issue(name, identity, ["127.0.0.1"])
        return ClientTLS(str(self.ca.cert_path), str(issued.cert_path), str(issued.key_path))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secure]:
    directory = tmp_path_factory.mktemp("secure")
    # autoCreateTopicEnable: a secured cluster's default is false; these tests are about TLS
    settings = [arg for key, value in {**FAST_TIMERS, "brokerHeartbeatInterval": "200",
                                       "defaultTopicQueueNums": "2",
                                       "autoCreateTopicEnable": "true"}.items()
                for arg in ("--set", f"{key}={value}")]
    printed = _cluster_cli("up", "--dir", str(directory), "--controllers", "3", "--replicas",
                           "3", *settings)
    assert "TLS on" in printed
    try:
        yield Secure(directory)
    finally:
        cluster_command("down", "--dir", str(directory))


def test_secrets_are_private_and_every_member_enforces_tls(cluster: Secure) -> None:
    for path in [*(cluster.directory / "tls").iterdir(), cluster.directory / "client.properties"]:
        assert path.stat().st_mode & 0o077 == 0, path
    for conf in (cluster.directory / "conf").glob("*.conf"):
        text = conf.read_text()
        if conf.name == "proxy.conf":  # the RocketMQ endpoint: TLS for its clients (no mTLS)
            assert "grpcTlsCertFile=" in text and "clientConfig=" in text, conf
            continue
        assert "tls.server.mode=enforcing" in text and \
            "tls.server.need.client.auth=require" in text, conf


def test_plaintext_client_and_client_without_certificate_are_refused(cluster: Secure) -> None:
    master = cluster.master()["endpoint"]
    plain = ClientConfig(controller=cluster.config.controller, request_timeout_ms=2000,
                         retries_max=0)
    no_cert = ClientConfig(controller=cluster.config.controller, request_timeout_ms=2000,
                           retries_max=0, tls_trust_cert_path=cluster.config.tls_trust_cert_path)
    for config in (plain, no_cert):
        with pytest.raises(RocketHAError):
            controller_cluster_list(config.controller or "", 2000, config.tls)
        broker = ClientConfig(brokers=(master,), request_timeout_ms=2000, retries_max=0,
                              send_deadline_ms=2000, tls_trust_cert_path=config.tls_trust_cert_path)
        with pytest.raises(RocketHAError):
            Admin(broker).broker_info()
    assert Admin(ClientConfig.from_properties(cluster.directory / "client.properties",
                                              brokers=(master,))).broker_info()["role"] == \
        "MASTER"


def test_admin_tool_takes_the_client_config(cluster: Secure) -> None:
    def admin(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rocketha_admin", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=False)
    plain = admin("--controller", cluster.config.controller or "", "topic", "list")
    assert plain.returncode == 2 and "requires TLS and a client certificate" in plain.stderr
    secured = admin("--client-config", str(cluster.directory / "client.properties"), "status")
    assert secured.returncode == 0 and secured.stdout.count(" OK ") == 3, secured.stdout


def test_console_gathers_over_mutual_tls(cluster: Secure) -> None:
    addresses = (cluster.config.controller or "").split(";")
    view = gather(addresses, cluster.config.tls, cluster.config.credentials)
    assert view["leader"] is not None and not view["errors"], view["errors"]
    roles = sorted(b.get("role") or "" for s in view["replica_sets"] for b in s["brokers"])
    assert roles == ["MASTER", "SLAVE", "SLAVE"]  # broker_info over TLS, from every broker
    unsigned = gather(addresses, cluster.config.tls)  # authentication is on too
    assert unsigned["leader"] is None and "UNAUTHENTICATED" in " ".join(unsigned["errors"])
    plain = gather(addresses)
    assert plain["leader"] is None and plain["errors"]


def _call(address: str, tls: ClientTLS, action: str, body: dict[str, Any],
          credentials: Credentials | None = None) -> dict[str, Any]:
    client = connect_flight(address, tls)
    try:
        payload = json.dumps(body).encode()
        results = list(client.do_action(flight.Action(action, payload), signed_options(
            credentials, "DO_ACTION", action_target(action, payload), 5.0)))
        return json.loads(results[0].body.to_pybytes())  # type: ignore[no-any-return]
    finally:
        client.close()


def test_member_calls_only_from_the_broker_they_are_about(cluster: Secure) -> None:
    """The certificate decides who may speak for a broker, whatever user signs the call: the
    admin's keys (a Super user) with a tool's or another set's certificate are refused; an
    unsigned call is a member's only with a member's certificate (authentication is on)."""
    brokers = cluster.manifest["brokers"]
    controller = cluster.config.controller.split(";")[0]  # type: ignore[union-attr]
    admin = cluster.config.credentials
    assert admin is not None  # client.properties holds the generated admin's keys
    first, second = (f"127.0.0.1:{b['port']}" for b in brokers[:2])
    register = {"cluster_name": "LocalCluster", "broker_name": "broker-a",
                "broker_address": first}
    with pytest.raises(flight.FlightUnauthenticatedError, match="unsigned"):
        _call(controller, cluster.config.tls, "register_broker", register)  # a tool's cert
    with pytest.raises(flight.FlightUnauthorizedError, match="FORBIDDEN"):
        _call(controller, cluster.config.tls, "register_broker", register, admin)
    own = ClientTLS(cluster.config.tls_trust_cert_path, brokers[0]["tls_cert"]["cert"],
                    brokers[0]["tls_cert"]["key"])
    assert _call(controller, own, "register_broker", register)["status"] in ("OK", "NOT_LEADER")
    for _ in range(2):  # refused each time, logged once
        with pytest.raises(flight.FlightUnauthorizedError, match="cannot make broker_heartbeat"):
            _call(controller, own, "broker_heartbeat", {
                "cluster_name": "LocalCluster", "broker_name": "broker-a", "broker_id": 2,
                "broker_address": second})
    other_set = cluster.impostor("broker-b-0", broker_identity("broker-b", "127.0.0.1:1"))
    with pytest.raises(flight.FlightUnauthorizedError, match="broker of broker-b cannot"):
        _call(controller, other_set, "elect_master", {"broker_name": "broker-a"}, admin)
    with pytest.raises(flight.FlightUnauthorizedError, match="not a member operation"):
        _call(controller, other_set, "elect_master", {"broker_name": "broker-a"})
    assert _call(controller, cluster.config.tls, "controller_status", {}, admin)["status"] \
        == "OK"
    identity = broker_identity("broker-a", first)
    lines = [line for line in cluster.log_text("controller").splitlines()
             if "refuses" in line and identity in line and "broker_heartbeat" in line]
    assert len(lines) == 1, lines


def _tls_connect(address: tuple[str, int], tls: ClientTLS) -> ssl.SSLSocket:
    raw = socket.create_connection(address, timeout=5)
    try:
        return client_ssl_context(tls).wrap_socket(raw, server_hostname=address[0])
    except (OSError, ssl.SSLError):  # refused in the handshake: the test's `with` never runs
        raw.close()
        raise


def test_impostor_slave_with_another_broker_name_is_refused(cluster: Secure) -> None:
    master = cluster.master()
    info = Admin(ClientConfig.from_properties(cluster.directory / "client.properties",
                                              brokers=(master["endpoint"],))).broker_info()
    ha_address = ("127.0.0.1", int(info["ha_listen_port"]))
    impostor = cluster.impostor("impostor-slave", broker_identity("broker-z", "127.0.0.1:9"))
    for _ in range(2):
        with _tls_connect(ha_address, impostor) as sock:  # TLS 1.3: refused after the handshake
            assert closed_within(sock, 5.0)
    with socket.create_connection(ha_address, timeout=5) as plain:  # no TLS at all
        plain.sendall(b"RH" + bytes(30))
        assert closed_within(plain, 5.0)
    log = Path(master["log_file"]).read_text(errors="replace")
    refused = [line for line in log.splitlines() if "rocketha://broker/broker-z" in line]
    assert len(refused) == 1 and "not a broker of broker-a" in refused[0], refused
    producer = Producer(cluster.config)
    assert producer.send(TOPIC, b"after the impostor").status == "PUT_OK"
    producer.close()


def test_raft_peer_outside_the_list_or_claiming_another_id_is_refused(cluster: Secure) -> None:
    target = cluster.manifest["controllers"][0]
    address = ("127.0.0.1", int(target["raft_port"]))
    stranger = cluster.impostor("controller-n7", controller_identity(7))
    with _tls_connect(address, stranger) as sock:
        assert closed_within(sock, 5.0)
    other_ca = ensure_ca(cluster.directory / "other-ca")  # a certificate not of this cluster
    foreign = other_ca.issue("controller-n2-foreign", controller_identity(2), ["127.0.0.1"])
    for _ in range(2):
        with _tls_connect(address, ClientTLS(str(cluster.ca.cert_path), str(foreign.cert_path),
                                             str(foreign.key_path))) as sock:
            assert closed_within(sock, 5.0)
    liar = cluster.impostor("controller-n2-liar", controller_identity(2))
    heartbeat = json.dumps({"v": 1, "type": "heartbeat", "from_id": 3, "to_id": 1,
                            "term": 10**6, "commit_index": 0, "read_seq": 0}).encode()
    with _tls_connect(address, liar) as sock:
        sock.sendall(encode_frame(heartbeat))
        assert closed_within(sock, 5.0)

    def logged() -> bool:
        text = Path(target["log_file"]).read_text(errors="replace")
        return "controller 7 is not a peer of node 1" in text and \
            "controller 2 sent a message from 3" in text and "TLS handshake failed" in text
    wait_for(logged, 10.0, "the three refusals in controller-n1's log")
    text = Path(target["log_file"]).read_text(errors="replace")
    assert text.count("TLS handshake failed") == 1  # two attempts, logged once
    statuses = [p for p in cluster.processes() if p["kind"] == "controller"]
    assert all(p["alive"] for p in statuses) and \
        max(p["term"] for p in statuses) < 10**6  # the forged term was never taken in


@pytest.mark.spark
def test_spark_writes_and_reads_with_the_client_config_option(  # type: ignore[no-untyped-def]
        cluster: Secure, spark) -> None:
    path = str(cluster.directory / "client.properties")
    rows = spark.createDataFrame([(f"body-{i}", f"k{i}") for i in range(10)],
                                 "value STRING, key STRING")
    rows.write.format("rocketha").option("clientConfig", path).option("topic", "spark-tls") \
        .mode("append").save()
    read = spark.read.format("rocketha").option("clientConfig", path) \
        .option("subscribe", "spark-tls").load()
    assert sorted(r.body.decode() for r in read.select("body").collect()) == \
        sorted(f"body-{i}" for i in range(10))


def test_produce_consume_and_failover_under_mutual_tls(cluster: Secure) -> None:
    producer = Producer(cluster.config)
    bodies = [b"before-%d" % i for i in range(20)]
    assert all(producer.send(TOPIC, body).status == "PUT_OK" for body in bodies)
    old = cluster.master()
    os.kill(old["pid"], signal.SIGKILL)
    wait_for(lambda: cluster.master()["name"] != old["name"] or None, 30.0, "a new master")
    after = [b"after-%d" % i for i in range(20)]
    for body in after:
        assert producer.send(TOPIC, body).status == "PUT_OK", body
    producer.close()
    seen: list[bytes] = []
    consumer = Consumer(cluster.config)
    for queue_id in range(2):
        result = consumer.pull(TOPIC, queue_id, 0, max_messages=1000)
        seen += result.table.column("body").to_pylist()
    assert set(bodies + after) <= set(seen)
    _cluster_cli("up", "--dir", str(cluster.directory))  # the killed broker back, with TLS
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not all(p["alive"] for p in cluster.processes()):
        time.sleep(0.2)
    assert all(p["alive"] for p in cluster.processes())


def test_a_plaintext_listener_beyond_loopback_refuses_to_start(tmp_path: Path) -> None:
    broker = tmp_path / "broker.conf"
    broker.write_text(f"brokerIP1=127.0.0.1\nbindAddress=0.0.0.0\nlistenPort=0\n"
                      f"storePathRootDir={tmp_path / 'store'}\n")
    controller = tmp_path / "controller.conf"
    controller.write_text("controllerDLegerPeers=n1-127.0.0.1:1\ncontrollerAddr=127.0.0.1:2\n"
                          f"controllerBindAddress=0.0.0.0\ncontrollerStorePath={tmp_path / 'c'}\n")
    for module, conf in (("ha.broker", broker), ("controller", controller)):
        done = subprocess.run([sys.executable, "-m", module, "--conf", str(conf)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr
        assert "refusing to start" in done.stderr and "allowInsecure=true" in done.stderr
        assert "0.0.0.0" in done.stderr


RMQ_SEND_OVER_TLS = """
import os, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer
endpoint, topic = sys.argv[1:3]
keys = Credentials(os.environ["RMQ_AK"], os.environ["RMQ_SK"])
producer = Producer(ClientConfiguration(endpoint, keys, request_timeout=5), (topic,),
                    tls_enable=True)
producer.startup()
message = Message()
message.topic, message.body, message.tag = topic, b"rocketmq-over-tls", "tls"
print(producer.send(message).message_id)
producer.shutdown()
"""


def test_the_rocketmq_endpoint_serves_tls_and_calls_the_cluster_over_mutual_tls(
        cluster: Secure) -> None:
    """The secured cluster's rocketha-proxy: its gRPC port has a certificate of the cluster CA
    (the official client, trusting DIR/tls/ca.pem, sends over TLS; a plaintext channel gets
    nothing), and its own calls to controllers and brokers use client.properties (a proxy
    without it could not store the message: every member requires a client certificate and a
    signature). It checks RocketMQ clients against the controllers' users
    (grpcAuthenticationEnabled, test_rmq_proxy_auth.py): unknown keys are refused."""
    import grpc
    from rocketmq.grpc_protocol import service_pb2, service_pb2_grpc

    endpoint = json.loads(cluster_command("status", "--dir", str(cluster.directory),
                                       "--json"))["grpc_endpoint"]
    topic = "rmq-over-tls"
    Admin(cluster.config).create_topic(topic, queues=1)
    keys = cluster.config.credentials
    assert keys is not None
    env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(cluster.ca.cert_path),
               RMQ_AK=keys.access_key, RMQ_SK=keys.secret_key)
    sent = subprocess.run([sys.executable, "-c", RMQ_SEND_OVER_TLS, endpoint, topic], env=env,
                          capture_output=True, text=True, timeout=90, cwd=ROOT, check=False)
    assert sent.returncode == 0 and sent.stdout.strip(), sent.stderr[-2000:]
    stranger = subprocess.run([sys.executable, "-c", RMQ_SEND_OVER_TLS, endpoint, topic],
                              env={**env, "RMQ_AK": "stranger", "RMQ_SK": "guess"},
                              capture_output=True, text=True, timeout=90, cwd=ROOT,
                              check=False)
    assert stranger.returncode != 0, stranger.stdout

    found = Consumer(cluster.config).pull(topic, 0, 0, max_messages=10)
    assert [bytes(body) for body in found.table.column("body").to_pylist()] \
        == [b"rocketmq-over-tls"]
    assert found.table.column("tags").to_pylist() == ["tls"]

    plain = service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))
    with pytest.raises(grpc.RpcError):
        plain.QueryRoute(service_pb2.QueryRouteRequest(), timeout=5)
