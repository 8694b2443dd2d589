"""Authentication, authorization and audit with real processes (issue 16, part B).

Method: one controller (authenticationEnabled, authorizationEnabled, initAuthenticationUser
admin with its secret in a 0600 file) and one broker in controller mode (signing its own calls
with innerClientCredentialsFile = the admin's keys); clients are the connector's Producer,
Consumer and Admin with access/secret keys. Users and ACLs are changed through the controller
(Raft) and must become visible at the broker (heartbeat version -> get_auth_data).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyarrow import flight

from conf.signing import Credentials, action_target, sign_headers
from connector.client import Admin, ClientConfig, Consumer, Producer
from connector.protocol import FatalError, RocketHAError
from tests.controller.controller_process import ControllerGroup, call
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration
DEADLINE_S = 20.0
ROOT = Path(__file__).resolve().parents[2]
ADMIN = Credentials("AK_admin", "admin-secret-0123456789")
ALICE = Credentials("AK_alice", "alice-secret-0123456789")


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _private(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


class Secured:
    def __init__(self, tmp_path: Path) -> None:
        secret = _private(tmp_path / "admin.secret", ADMIN.secret_key + "\n")
        inner = _private(tmp_path / "inner.credentials",
                         f"accessKey={ADMIN.access_key}\nsecretKey={ADMIN.secret_key}\n")
        self.controller_audit = tmp_path / "controller-audit.log"
        self.broker_audit = tmp_path / "broker-audit.log"
        auth = {"authenticationEnabled": "true", "authorizationEnabled": "true"}
        self.group = ControllerGroup(
            tmp_path / "controllers", 1, credentials=ADMIN, **auth,
            initAuthenticationUser=f"admin:{ADMIN.access_key}",
            initAuthenticationUserSecretFile=secret, auditLogFile=str(self.controller_audit))
        self.group.start()
        self.group.wait_leader()
        self.controller = self.group.endpoint(1)
        self.broker = BrokerProcess(
            tmp_path / "broker", name="a", credentials=ADMIN, enableControllerMode="true",
            controllerAddr=self.controller, brokerHeartbeatInterval="200",
            controllerRequestTimeoutMs="1000", innerClientCredentialsFile=inner,
            auditLogFile=str(self.broker_audit), **auth)
        self.broker.start()

    def config(self, credentials: Credentials | None, **kwargs: Any) -> ClientConfig:
        return ClientConfig(brokers=(self.broker.endpoint,), request_timeout_ms=3000,
                            send_deadline_ms=3000, retries_max=2,
                            access_key=credentials.access_key if credentials else None,
                            secret_key=credentials.secret_key if credentials else None,
                            **kwargs)

    def admin(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = self.group.call_leader(action, body)
        assert reply["status"] == "OK", reply
        return reply

    def stop(self) -> None:
        if self.broker.process is not None and self.broker.process.poll() is None:
            self.broker.kill()
        self.group.stop_all()


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    cluster = Secured(tmp_path_factory.mktemp("auth"))
    try:
        cluster.admin("user_create", {"name": "alice", "access_key": ALICE.access_key,
                                      "secret_key": ALICE.secret_key, "type": "Normal"})
        admin = Admin(cluster.config(ALICE))
        _wait(lambda: _refused(admin.broker_stats).name == "NO_PERMISSION",
              "the broker to learn user alice (authenticated, no ACL yet)")
        yield cluster
    finally:
        cluster.stop()


def _audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _refused(call_it: Callable[[], object]) -> RocketHAError:
    with pytest.raises(RocketHAError) as caught:
        call_it()
    return caught.value


def test_a_wrong_secret_is_refused_typed_audited_and_the_broker_carries_on(
        secured: Secured) -> None:
    wrong = Credentials(ADMIN.access_key, "not-the-secret-at-all")
    error = _refused(lambda: Admin(secured.config(wrong)).list_topics())
    assert isinstance(error, FatalError) and error.name == "UNAUTHENTICATED"
    assert "signature does not match" in error.message
    assert "not-the-secret" not in str(error)
    lines = [line for line in _audit(secured.broker_audit) if line["event"] == "authentication"]
    assert lines and lines[-1]["outcome"] == "refused"
    assert lines[-1]["source"] == "127.0.0.1" and lines[-1]["principal"] == "AccessKey:AK_admin"
    # unsigned: refused too; the broker still serves the right keys
    assert _refused(lambda: Admin(secured.config(None)).list_topics()).name == "UNAUTHENTICATED"
    assert isinstance(Admin(secured.config(ADMIN)).list_topics(), list)
    assert secured.broker.process is not None and secured.broker.process.poll() is None
    # every admin action is audited, allowed ones too
    Admin(secured.config(ADMIN)).create_topic("audited", queues=2)
    admin_lines = [line for line in _audit(secured.broker_audit) if line["event"] == "admin"]
    assert admin_lines[-1]["operation"] == "create_topic"
    assert admin_lines[-1]["resource"] == "Topic:audited"
    assert admin_lines[-1]["principal"] == "User:admin" and admin_lines[-1]["outcome"] == "allowed"


def test_an_expired_timestamp_is_refused(secured: Secured) -> None:
    stale_ms = int(time.time() * 1000) - 10 * 60 * 1000  # the window is 2 minutes
    client = flight.FlightClient(f"grpc://{secured.broker.endpoint}")
    headers = sign_headers(ADMIN, "DO_ACTION", action_target("list_topics", b"{}"), stale_ms)
    with pytest.raises(flight.FlightUnauthenticatedError, match="from this server's clock"):
        list(client.do_action(flight.Action("list_topics", b"{}"),
                              flight.FlightCallOptions(timeout=5, headers=headers)))
    # a signature replayed for another request (the digest) is refused as well
    fresh = sign_headers(ADMIN, "DO_ACTION", action_target("list_topics", b"{}"),
                         int(time.time() * 1000))
    with pytest.raises(flight.FlightUnauthenticatedError, match="not the one signed"):
        list(client.do_action(flight.Action("delete_topic", b'{"topic":"x"}'),
                              flight.FlightCallOptions(timeout=5, headers=fresh)))
    with pytest.raises(flight.FlightUnauthenticatedError, match="replayed"):
        list(client.do_action(flight.Action("list_topics", b"{}"),
                              flight.FlightCallOptions(timeout=5, headers=fresh)))
    client.close()


def test_produce_needs_pub_granted_through_raft_and_seen_by_the_broker(secured: Secured) -> None:
    producer = Producer(secured.config(ALICE))
    try:
        error = _refused(lambda: producer.send("orders", b"x"))
        assert error.name == "NO_PERMISSION" and "Topic:orders" in error.message
        denied = [line for line in _audit(secured.broker_audit)
                  if line["event"] == "authorization"]
        assert denied[-1]["principal"] == "User:alice" and denied[-1]["outcome"] == "denied"
        assert denied[-1]["resource"] == "Topic:orders"
        secured.admin("acl_create", {"subject": "User:alice", "resources": ["Topic:ord*"],
                                     "actions": ["Pub"], "decision": "Allow"})

        def sent() -> bool:
            try:
                return producer.send("orders", b"x").status == "PUT_OK"
            except RocketHAError as err:
                assert err.name == "NO_PERMISSION", err
                return False

        _wait(sent, "the broker to learn alice's new ACL")
        # deny beats allow: a Deny on the literal topic is more specific than the prefix
        secured.admin("acl_create", {"subject": "User:alice", "resources": ["Topic:orders-x"],
                                     "actions": ["Pub"], "decision": "Deny"})
        _wait(lambda: _is_denied(lambda: producer.send("orders-x", b"x")), "the Deny")
        assert producer.send("orders", b"y").status == "PUT_OK"  # the prefix still allows
        # listings show a user only the topics it may use
        Producer(secured.config(ADMIN)).send("hidden", b"h")
        names = [t["name"] for t in Admin(secured.config(ALICE)).list_topics()]
        assert "orders" in names and "hidden" not in names and "orders-x" not in names
        assert "hidden" in [t["name"] for t in Admin(secured.config(ADMIN)).list_topics()]
    finally:
        producer.close()


def _is_denied(call_it: Callable[[], object]) -> bool:
    try:
        call_it()
    except RocketHAError as err:
        return err.name == "NO_PERMISSION"
    return False


def test_consuming_needs_sub_on_the_topic_and_the_group(secured: Secured) -> None:
    Producer(secured.config(ADMIN)).send("events", b"e1")
    plain = Consumer(secured.config(ALICE))
    grouped = Consumer(secured.config(ALICE), group="g1")
    assert _is_denied(lambda: plain.pull("events", 0, 0, max_messages=10))
    secured.admin("acl_create", {"subject": "User:alice", "resources": ["Topic:events"],
                                 "actions": ["Sub"]})
    _wait(lambda: not _is_denied(lambda: plain.pull("events", 0, 0)), "Sub on the topic")
    assert _is_denied(lambda: grouped.pull("events", 0, 0))  # the group is not granted
    admin = Admin(secured.config(ALICE))
    assert _is_denied(lambda: admin.commit_offset("g1", "events", 0, 1))
    secured.admin("acl_create", {"subject": "User:alice", "resources": ["Group:g1"],
                                 "actions": ["Sub"]})
    _wait(lambda: not _is_denied(lambda: grouped.pull("events", 0, 0)), "Sub on the group")
    admin.commit_offset("g1", "events", 0, 1)


def test_a_normal_user_cannot_manage_users_and_the_refusal_is_audited(secured: Secured) -> None:
    with pytest.raises(flight.FlightUnauthorizedError, match="NO_PERMISSION"):
        call(secured.controller, "user_create",
             {"name": "mallory", "access_key": "AK_m", "secret_key": "mallory-secret-1"},
             credentials=ALICE)
    users = secured.admin("user_list", {})["users"]
    assert "mallory" not in [user["name"] for user in users]
    assert all("secret_key" not in user for user in users)
    lines = _audit(secured.controller_audit)
    assert any(line["event"] == "authorization" and line["principal"] == "User:alice"
               and line["operation"] == "user_create" for line in lines)
    assert any(line["event"] == "admin" and line["operation"] == "user_create"
               and line["principal"] == "User:admin" for line in lines)
    with pytest.raises(flight.FlightUnauthenticatedError):
        call(secured.controller, "cluster_list", {})  # unsigned
    assert call(secured.controller, "cluster_list", {}, credentials=ALICE)["status"] == "OK"


def test_users_and_acls_survive_a_controller_restart(secured: Secured) -> None:
    before = secured.admin("acl_list", {"subject": "User:alice"})["policies"]
    assert before
    secured.group.kill(1)
    secured.group.start(1)
    secured.group.wait_leader()
    assert "alice" in [user["name"] for user in secured.admin("user_list", {})["users"]]
    assert secured.admin("acl_list", {"subject": "User:alice"})["policies"] == before


def _admin_tool(secured: Secured, credentials_file: str, *args: str, stdin: str = ""
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rocketha_admin", "--controller", secured.controller,
         "--credentials-file", credentials_file, *args],
        input=stdin, capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)


def test_admin_tool_manages_users_and_acls_with_secrets_off_the_command_line(
        secured: Secured, tmp_path: Path) -> None:
    admin_file = _private(tmp_path / "admin.credentials",
                          f"accessKey={ADMIN.access_key}\nsecretKey={ADMIN.secret_key}\n")
    created = _admin_tool(secured, admin_file, "user", "create", "--name", "bob",
                          "--access-key", "AK_bob", "--secret-stdin", "--json",
                          stdin="bob-secret-0123456789\n")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["status"] == "OK"
    listed = _admin_tool(secured, admin_file, "user", "list", "--json")
    users = {user["name"]: user for user in json.loads(listed.stdout)["users"]}
    assert users["bob"] == {"name": "bob", "access_key": "AK_bob", "type": "Normal",
                            "status": "enabled"}
    assert "bob-secret" not in listed.stdout
    granted = _admin_tool(secured, admin_file, "acl", "create", "--subject", "User:bob",
                          "--resources", "Topic:bob*,Group:bob", "--actions", "Pub,Sub")
    assert granted.returncode == 0, granted.stderr
    acls = json.loads(_admin_tool(secured, admin_file, "acl", "list", "--subject", "User:bob",
                                  "--json").stdout)["policies"]
    assert sorted(p["resource"] for p in acls) == ["Group:bob", "Topic:bob*"]
    bob = Credentials("AK_bob", "bob-secret-0123456789")
    producer = Producer(secured.config(bob))
    try:
        _wait(lambda: not _is_denied(lambda: producer.send("bob-topic", b"b")), "bob's ACL")
    finally:
        producer.close()
    # bob is no Super user: the tool reports the refusal, exit 2
    bob_file = _private(tmp_path / "bob.credentials",
                        "accessKey=AK_bob\nsecretKey=bob-secret-0123456789\n")
    refused = _admin_tool(secured, bob_file, "user", "delete", "--name", "alice")
    assert refused.returncode == 2 and "NO_PERMISSION" in refused.stderr
    assert _admin_tool(secured, admin_file, "user", "delete", "--name", "bob").returncode == 0
    assert "bob" not in [u["name"] for u in secured.admin("user_list", {})["users"]]
    assert not secured.admin("acl_list", {"subject": "User:bob"})["policies"]
    # data commands sign too
    topics = subprocess.run(
        [sys.executable, "-m", "rocketha_admin", "--broker", secured.broker.endpoint,
         "--credentials-file", admin_file, "topic", "list", "--json"],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT)
    assert topics.returncode == 0 and "orders" in topics.stdout, topics.stderr


def test_a_broker_restarted_while_no_controller_answers_keeps_the_last_table(
        secured: Secured) -> None:
    cache = secured.broker.store_dir / "config" / "auth.json"
    assert oct(cache.stat().st_mode & 0o777) == "0o600"  # it holds secrets
    secured.group.kill(1)
    try:
        assert secured.broker.stop() == 0
        secured.broker.start()  # answers the admin's signed broker_info: the cached table
        assert Admin(secured.config(ALICE)).broker_info()["broker_name"] == "a"
        assert _refused(lambda: Admin(secured.config(ALICE)).broker_stats()).name == \
            "NO_PERMISSION"  # and alice's ACLs are the cached ones too
    finally:
        secured.group.start(1)
