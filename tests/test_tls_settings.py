"""TLS settings, identities and the member-call rule (issue 16, transport security): unit tests.

Goal: every tls.* key is parsed and checked with an
error naming it, in broker.conf and in controller.conf; identities round-trip; the controller's
member-call rule is a table; a client.properties becomes a ClientConfig. Method: plain calls
with real certificate files made by the cluster CA code (ha/cluster/certs.py).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from conf import tls
from connector import ClientConfig
from connector.errors import OptionError
from connector.spark.options import parse_sink_options, parse_source_options
from controller.admin.main import client_config as controller_admin_client_config
from controller.api import (
    AlterSyncStateSetRequest,
    BrokerHeartbeat,
    ElectMasterRequest,
    GetRoutesRequest,
    RegisterBrokerRequest,
)
from controller.auth.member_check import member_refusal
from controller.config import ControllerConfig
from controller.errors import ConfigError as ControllerConfigError
from ha.broker.config import BrokerConfig
from ha.cluster.certs import ensure_ca
from storage_engine import ConfigError as BrokerConfigError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    ca = ensure_ca(tmp_path_factory.mktemp("tls"))
    issued = ca.issue("n1", tls.controller_identity(1), ["127.0.0.1"])
    return {"tls.server.mode": "enforcing", "tls.server.certPath": str(issued.cert_path),
            "tls.server.keyPath": str(issued.key_path),
            "tls.server.trustCertPath": str(ca.cert_path),
            "tls.server.need.client.auth": "require"}


def test_settings_are_checked_with_the_key_named(certs: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    settings = tls.TLSSettings.from_properties(certs)
    assert settings.enabled and settings.require_client_cert
    assert settings.client().cert_path == certs["tls.server.certPath"]  # default: its own
    assert not tls.TLSSettings.from_properties({}).enabled
    for key, value, words in (
        ("tls.server.mode", "permissive", "cannot serve plaintext and TLS on one port"),
        ("tls.server.mode", "on", "is not one of"),
        ("tls.server.need.client.auth", "optional", "require a client certificate or not"),
        ("tls.server.need.client.auth", "maybe", "is not one of"),
        ("tls.server.keyPath", "", "required with tls.server.mode=enforcing"),
        ("tls.server.trustCertPath", "/nonexistent/ca.pem", "no such file"),
        ("tls.crlPath", "/nonexistent/crl.pem", "no such file"),
        ("tls.reloadIntervalMs", "soon", "not a whole number of milliseconds"),
        ("tls.reloadIntervalMs", "-1", "negative"),
    ):
        with pytest.raises(tls.TLSConfigError) as caught:
            tls.TLSSettings.from_properties({**certs, key: value})
        assert caught.value.key == key and words in str(caught.value)


def test_broker_and_controller_confs_take_the_tls_keys(certs: dict[str, str]) -> None:
    broker = BrokerConfig.from_properties(certs)
    assert broker.tls.enabled
    controller = ControllerConfig.from_properties(certs)
    assert controller.tls.require_client_cert
    with pytest.raises(BrokerConfigError, match=r"tls\.server\.mode"):
        BrokerConfig.from_properties({**certs, "tls.server.mode": "permissive"})
    with pytest.raises(ControllerConfigError, match=r"tls\.server\.need\.client\.auth"):
        ControllerConfig.from_properties({**certs, "tls.server.need.client.auth": "optional"})


def test_a_file_that_does_not_load_is_a_config_error_at_start(
        certs: dict[str, str], tmp_path: Path) -> None:
    """The files are loaded as a reload would (conf/tls_reload.py), not at the first link."""
    bad_crl = tmp_path / "crl.pem"
    bad_crl.write_text("not a CRL\n")
    with pytest.raises(BrokerConfigError, match=r"tls\.crlPath: .*not a PEM CRL"):
        BrokerConfig.from_properties({**certs, "tls.crlPath": str(bad_crl)})
    with pytest.raises(ControllerConfigError, match=r"tls\.server\.keyPath: .*is not the key"):
        ControllerConfig.from_properties({**certs, "tls.server.keyPath": str(
            ensure_ca(tmp_path / "other").issue("x", "rocketha://client/x", []).key_path)})
    assert ControllerConfig.from_properties(
        {**certs, "tls.reloadIntervalMs": "0"}).tls.reload_interval_ms == 0


def test_contexts_load_and_require_a_peer_certificate(certs: dict[str, str]) -> None:
    settings = tls.TLSSettings.from_properties(certs)
    server = tls.server_ssl_context(settings)
    assert server.verify_mode is ssl.CERT_REQUIRED
    client = tls.client_ssl_context(settings.client())
    assert client.check_hostname and client.verify_mode is ssl.CERT_REQUIRED


def test_identities_round_trip() -> None:
    parse = tls.parse_identity
    assert parse(tls.controller_identity(3)) == tls.MemberIdentity("controller", "3")
    assert parse(tls.broker_identity("broker-a", "10.0.0.1:10911")) == \
        tls.MemberIdentity("broker", "broker-a", "10.0.0.1:10911")
    assert parse(tls.client_identity("admin")) == tls.MemberIdentity("client", "admin")
    for other in ("", "CN=x", "rocketha://controller/x", "rocketha://broker/a",
                  "rocketha://broker//1.2.3.4:1", "https://controller/1", "rocketha://ctl/1"):
        assert parse(other) is None, other
    assert tls.identity_of_peercert({"subject": ((("commonName", "n1"),),),
                                        "subjectAltName": (("URI", "rocketha://client/x"),)}) \
        == "rocketha://client/x"
    assert tls.identity_of_peercert({"subject": ((("commonName", "n1"),),)}) == "n1"
    assert tls.identity_of_peercert(None) == ""


A0 = tls.MemberIdentity("broker", "broker-a", "10.0.0.1:1")
B0 = tls.MemberIdentity("broker", "broker-b", "10.0.0.2:1")
TOOL = tls.MemberIdentity("client", "admin")
REGISTERED = {("broker-a", 1): "10.0.0.1:1", ("broker-a", 2): "10.0.0.3:1"}


def _address_of(name: str, broker_id: int) -> str | None:
    return REGISTERED.get((name, broker_id))


@pytest.mark.parametrize(("caller", "action", "request_", "allowed"), [
    (A0, "register_broker", RegisterBrokerRequest("c", "broker-a", "10.0.0.1:1"), True),
    (A0, "register_broker", RegisterBrokerRequest("c", "broker-a", "10.0.0.3:1"), False),
    (B0, "register_broker", RegisterBrokerRequest("c", "broker-a", "10.0.0.2:1"), False),
    (TOOL, "register_broker", RegisterBrokerRequest("c", "broker-a", "10.0.0.1:1"), False),
    (None, "register_broker", RegisterBrokerRequest("c", "broker-a", "10.0.0.1:1"), False),
    (A0, "broker_heartbeat", BrokerHeartbeat("c", "broker-a", 1, "10.0.0.1:1"), True),
    (A0, "broker_heartbeat", BrokerHeartbeat("c", "broker-a", 2, "10.0.0.1:1"), False),
    (A0, "broker_heartbeat", BrokerHeartbeat("c", "broker-a", 9, "10.0.0.1:1"), True),
    (A0, "broker_heartbeat", BrokerHeartbeat("c", "broker-a", 2, "10.0.0.3:1"), False),
    (A0, "alter_sync_state_set", AlterSyncStateSetRequest("broker-a", 1, 1, (1, 2), 1), True),
    (A0, "alter_sync_state_set", AlterSyncStateSetRequest("broker-a", 2, 1, (1, 2), 1), False),
    (B0, "alter_sync_state_set", AlterSyncStateSetRequest("broker-a", 1, 1, (1,), 1), False),
    (A0, "elect_master", ElectMasterRequest("broker-a"), True),
    (A0, "elect_master", ElectMasterRequest("broker-b"), False),
    (TOOL, "elect_master", ElectMasterRequest("broker-b"), True),
    (B0, "get_routes", GetRoutesRequest("t"), True),
])
def test_member_calls_come_only_from_the_broker_they_are_about(
        caller, action, request_, allowed) -> None:  # type: ignore[no-untyped-def]
    refusal = member_refusal(caller, action, request_, _address_of)
    assert (refusal is None) == allowed, refusal


def test_client_properties_make_a_client_config(tmp_path: Path, certs: dict[str, str]) -> None:
    path = tmp_path / "client.properties"
    path.write_text("# comment\ncontrollerAddr=127.0.0.1:1;127.0.0.1:2\n"
                    f"tls.client.trustCertPath={certs['tls.server.trustCertPath']}\n"
                    f"tls.client.certPath={certs['tls.server.certPath']}\n"
                    f"tls.client.keyPath={certs['tls.server.keyPath']}\n")
    config = ClientConfig.from_properties(path, request_timeout_ms=1234)
    assert config.controller == "127.0.0.1:1;127.0.0.1:2" and config.request_timeout_ms == 1234
    assert config.tls.enabled and config.tls.cert_path == certs["tls.server.certPath"]
    path.write_text("brokerAddr=127.0.0.1:1\ntls.client.certPath=/x.pem\n")
    with pytest.raises(ValueError, match=r"tls\.client\.keyPath"):
        ClientConfig.from_properties(path)
    path.write_text("brokerAddr=127.0.0.1:1\nnot-a-property-line\n")  # a key, no value
    with pytest.raises(ValueError, match=":2"):
        ClientConfig.from_properties(path)
    plain = tmp_path / "plain.properties"
    plain.write_text("brokerAddr=127.0.0.1:1,127.0.0.1:2\n")
    assert ClientConfig.from_properties(plain).brokers == ("127.0.0.1:1", "127.0.0.1:2")
    assert not ClientConfig.from_properties(plain).tls.enabled


def test_spark_option_client_config_gives_addresses_and_tls(tmp_path: Path,
                                                            certs: dict[str, str]) -> None:
    path = tmp_path / "client.properties"
    path.write_text("controllerAddr=127.0.0.1:1;127.0.0.1:2\n"
                    f"tls.client.trustCertPath={certs['tls.server.trustCertPath']}\n")
    source = parse_source_options({"clientConfig": str(path), "subscribe": "t"})
    assert source.controller == "127.0.0.1:1;127.0.0.1:2"
    assert source.tls.trust_cert_path == certs["tls.server.trustCertPath"]
    sink = parse_sink_options({"clientconfig": str(path), "brokers": "127.0.0.1:3"})
    assert sink.brokers == ("127.0.0.1:3",) and sink.controller is None and sink.tls.enabled
    with pytest.raises(OptionError, match="clientConfig"):
        parse_source_options({"clientConfig": str(tmp_path / "missing"), "subscribe": "t"})


def test_plaintext_beyond_loopback_needs_allow_insecure(certs: dict[str, str]) -> None:
    assert tls.is_loopback("127.0.0.5") and tls.is_loopback("localhost")
    assert tls.is_loopback("::1") and not tls.is_loopback("0.0.0.0")
    assert not tls.is_loopback("198.18.0.11")
    assert not tls.is_loopback("broker-a.example")  # a name may be any interface
    local = BrokerConfig.from_properties({"brokerIP1": "127.0.0.1"})
    assert local.plaintext_refusal() is None
    exposed = BrokerConfig.from_properties({"brokerIP1": "127.0.0.1", "bindAddress": "0.0.0.0"})
    assert "bindAddress 0.0.0.0" in (exposed.plaintext_refusal() or "")
    assert "allowInsecure=true" in (exposed.plaintext_refusal() or "")
    assert BrokerConfig.from_properties({"brokerIP1": "127.0.0.1", "bindAddress": "0.0.0.0",
                                         "allowInsecure": "true"}).plaintext_refusal() is None
    # TLS alone is not enough for a client endpoint beyond loopback: authentication too
    tls_only = BrokerConfig.from_properties({"brokerIP1": "198.18.0.1", **certs})
    assert "without authentication" in (tls_only.plaintext_refusal() or "")
    assert "TLS" not in (tls_only.plaintext_refusal() or "").split(";")[0].split("without")[1]
    assert BrokerConfig.from_properties({"brokerIP1": "198.18.0.1", **certs,
                                         "authenticationEnabled": "true", "aclFile": "acl.json"}
                                        ).plaintext_refusal() is None
    plain_authenticated = BrokerConfig.from_properties({
        "brokerIP1": "198.18.0.1", "authenticationEnabled": "true",
        "aclFile": "acl.json"}).plaintext_refusal() or ""
    assert "without TLS;" in plain_authenticated
    replicated = BrokerConfig.from_properties({"brokerIP1": "127.0.0.1", "brokerIP2": "10.0.0.2",
                                               "totalReplicas": "2"})
    assert "haBindAddress 10.0.0.2" in (replicated.plaintext_refusal() or "")
    controller = ControllerConfig.from_properties({
        "controllerDLegerPeers": "n1-198.18.0.1:9880", "controllerAddr": "198.18.0.1:9876"})
    assert "Raft" in (controller.plaintext_refusal() or "")
    assert "without TLS and authentication" in (controller.plaintext_refusal() or "")
    assert ControllerConfig.from_properties({
        "controllerDLegerPeers": "n1-198.18.0.1:9880", "controllerAddr": "198.18.0.1:9876",
        "allowInsecure": "true"}).plaintext_refusal() is None


def test_one_client_properties_gives_tls_and_the_users_keys(tmp_path: Path,
                                                            certs: dict[str, str]) -> None:
    """What `rocketha-cluster up` writes: addresses, TLS files and the admin's keys in one
    0600 file, read alike by ClientConfig, the Spark options and the admin tool."""
    path = tmp_path / "client.properties"
    path.write_text("controllerAddr=127.0.0.1:1\n"
                    f"tls.client.trustCertPath={certs['tls.server.trustCertPath']}\n"
                    "accessKey=AK_admin\nsecretKey=admin-secret-0123\n")
    path.chmod(0o600)
    config = ClientConfig.from_properties(path)
    assert config.tls.enabled and config.credentials is not None
    assert config.credentials.access_key == "AK_admin"
    assert "admin-secret-0123" not in repr(config)
    source = parse_source_options({"clientConfig": str(path), "subscribe": "t"})
    assert source.credentials == config.credentials and source.tls == config.tls
    assert "admin-secret-0123" not in repr(source)
    assert parse_sink_options({"clientConfig": str(path), "topic": "t"}).credentials \
        == config.credentials
    other = parse_source_options({"clientConfig": str(path), "subscribe": "t",
                                  "accessKey": "AK_bob", "secretKey": "bob-secret-0123"})
    assert other.credentials is not None and other.credentials.access_key == "AK_bob"
    tls, credentials = controller_admin_client_config(str(path))
    assert tls.enabled and credentials is not None and credentials.access_key == "AK_admin"
    path.chmod(0o644)  # a secret others may read is refused, by every reader
    with pytest.raises(ValueError, match="chmod 600"):
        ClientConfig.from_properties(path)
    with pytest.raises(OptionError, match="chmod 600"):
        parse_source_options({"clientConfig": str(path), "subscribe": "t"})
    with pytest.raises(ValueError, match="chmod 600"):
        controller_admin_client_config(str(path))
    keys = tmp_path / "admin.credentials"  # or the file names a credentials file
    keys.write_text("accessKey=AK_admin\nsecretKey=admin-secret-0123\n")
    keys.chmod(0o600)
    path.write_text(f"brokerAddr=127.0.0.1:1\ncredentialsFile={keys}\n")
    assert ClientConfig.from_properties(path).credentials == config.credentials
    assert parse_sink_options({"clientConfig": str(path), "topic": "t"}).credentials \
        == config.credentials
    from_file = controller_admin_client_config(str(path))[1]  # conf.signing's twin
    assert from_file is not None and from_file.secret_key == "admin-secret-0123"
