"""Certificates reloaded while a process runs, and revoked ones refused (conf/tls_reload.py).

Goal: a rotated certificate is served at the next handshake while a link already up keeps
working; a file that does not load (garbage, a key of another certificate, an expired
certificate, a CRL of another CA or past its nextUpdate) keeps the previous contexts and logs
one line however often it is checked; a serial in the CRL is refused at the handshake in both
directions; the watch thread and SIGHUP reload without being called.

Method: real certificates from the cluster CA code (ha/cluster/certs.py), real TLS handshakes
over loopback sockets with the contexts ReloadingTLS hands out (as the HA and Raft links take
them).
"""

from __future__ import annotations

import datetime
import logging
import os
import signal
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization

from conf.tls import TLSConfigError, TLSSettings
from conf.tls_reload import ReloadingTLS, check_crl, install_sighup, watch
from ha.cluster.certs import CertificateAuthority, ensure_ca, serial_of
from tests.ha.replica_set import wait_for


@pytest.fixture()
def ca(tmp_path: Path) -> CertificateAuthority:
    return ensure_ca(tmp_path / "tls")


def _settings(ca: CertificateAuthority, name: str, *, crl: bool = False,
              interval_ms: int = 0) -> TLSSettings:
    issued = ca.issue(name, f"rocketha://broker/broker-a/127.0.0.1:{len(name)}", ["127.0.0.1"])
    return TLSSettings(server_mode="enforcing", server_cert_path=str(issued.cert_path),
                       server_key_path=str(issued.key_path),
                       server_trust_cert_path=str(ca.cert_path),
                       crl_path=str(ca.ensure_crl()) if crl else "",
                       reload_interval_ms=interval_ms)


class Listener:
    """Accepts TLS connections with `reloading.server()` taken per connection; echoes."""

    def __init__(self, reloading: ReloadingTLS) -> None:
        self.reloading = reloading
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = self.sock.getsockname()
        self.refusals: list[str] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                raw, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            with self.reloading.server().wrap_socket(raw, server_side=True) as tls:
                while data := tls.recv(1024):
                    tls.sendall(data)
        except (ssl.SSLError, OSError) as err:
            self.refusals.append(str(err))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture()
def pair(ca: CertificateAuthority) -> Iterator[tuple[ReloadingTLS, ReloadingTLS, Listener]]:
    server = ReloadingTLS(_settings(ca, "server", crl=True), what="test server")
    client = ReloadingTLS(_settings(ca, "client", crl=True), what="test client")
    listener = Listener(server)
    yield server, client, listener
    listener.close()


def _dial(client: ReloadingTLS, listener: Listener) -> ssl.SSLSocket:
    raw = socket.create_connection(listener.address, timeout=5)
    try:
        return client.client().wrap_socket(raw, server_hostname="127.0.0.1")
    except (ssl.SSLError, OSError):
        raw.close()
        raise


def _served_serial(tls: ssl.SSLSocket) -> int:
    der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def _echo(tls: ssl.SSLSocket, data: bytes) -> bytes:
    tls.sendall(data)
    return tls.recv(1024)


def test_a_rotated_certificate_serves_the_next_handshake_and_the_open_link_stays(
        ca: CertificateAuthority, pair: tuple[ReloadingTLS, ReloadingTLS, Listener]) -> None:
    server, client, listener = pair
    cert_path = Path(server.settings.server_cert_path)
    first = serial_of(cert_path)
    open_link = _dial(client, listener)
    assert _served_serial(open_link) == first and _echo(open_link, b"before") == b"before"
    assert not server.reload()  # nothing changed: nothing rebuilt
    ca.issue("server", "rocketha://broker/broker-a/127.0.0.1:6", ["127.0.0.1"])
    second = serial_of(cert_path)
    assert second != first
    assert server.reload() and server.serial == second and server.reloads == 1
    with _dial(client, listener) as new_link:
        assert _served_serial(new_link) == second
    assert _echo(open_link, b"after") == b"after"  # the link up before the rotation
    open_link.close()


@pytest.mark.parametrize("damage", ["garbage", "other key", "expired"])
def test_a_file_that_does_not_load_keeps_the_certificate_in_use(
        ca: CertificateAuthority, pair: tuple[ReloadingTLS, ReloadingTLS, Listener],
        caplog: pytest.LogCaptureFixture, damage: str) -> None:
    server, client, listener = pair
    cert_path = Path(server.settings.server_cert_path)
    key_path = Path(server.settings.server_key_path)
    kept = server.serial
    if damage == "garbage":
        cert_path.write_bytes(b"-----BEGIN CERTIFICATE-----\n\x00\xff not base64\n")
    elif damage == "other key":  # the second of two writes not done yet
        other = ca.issue("other", "rocketha://client/other", ["127.0.0.1"])
        key_path.write_bytes(other.key_path.read_bytes())
    else:
        _write_expired(ca, cert_path, key_path)
    caplog.set_level(logging.WARNING, logger="conf.tls_reload")
    for _ in range(3):
        assert not server.reload()
    lines = [r.getMessage() for r in caplog.records if "do not load" in r.getMessage()]
    assert len(lines) == 1 and f"serial {kept:x}" in lines[0], lines
    assert server.failures == 1 and server.serial == kept
    with _dial(client, listener) as link:
        assert _served_serial(link) == kept
    issued = ca.issue("server", "rocketha://broker/broker-a/127.0.0.1:6", ["127.0.0.1"])
    assert server.reload() and server.serial == serial_of(issued.cert_path)


def _write_expired(ca: CertificateAuthority, cert_path: Path, key_path: Path) -> None:
    key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    ca_key = serialization.load_pem_private_key((ca.directory / "ca-key.pem").read_bytes(),
                                                password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_path.read_bytes())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(ca_cert.subject)
            .issuer_name(ca_cert.subject).public_key(key.public_key())  # type: ignore[arg-type]
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=10))
            .not_valid_after(now - datetime.timedelta(days=1))
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def test_a_revoked_certificate_is_refused_at_the_next_handshake_both_ways(
        ca: CertificateAuthority, pair: tuple[ReloadingTLS, ReloadingTLS, Listener]) -> None:
    server, client, listener = pair
    open_link = _dial(client, listener)
    ca.revoke([client.serial])
    assert server.reload() and client.serial in server.revoked
    # TLS 1.3: the refusal reaches the client at its first I/O
    with pytest.raises(OSError), _dial(client, listener) as refused:
        _echo(refused, b"x")
    wait_for(lambda: any("revoked" in r for r in listener.refusals), 10.0,
             "the server's refusal")
    assert _echo(open_link, b"still") == b"still"  # a revocation acts at the next handshake
    # the other direction: a client holding the CRL refuses a revoked server
    ca.revoke([server.serial])
    assert client.reload()
    with pytest.raises(ssl.SSLError, match="certificate verify failed: certificate revoked"):
        _dial(client, listener).close()
    open_link.close()


def test_a_crl_of_another_ca_or_past_its_next_update_is_not_taken(
        ca: CertificateAuthority, pair: tuple[ReloadingTLS, ReloadingTLS, Listener],
        tmp_path: Path) -> None:
    server, _client, _listener = pair
    crl_path = Path(server.settings.crl_path)
    other = ensure_ca(tmp_path / "other")
    other.revoke([server.serial])
    crl_path.write_bytes(other.crl_path.read_bytes())
    assert not server.reload() and server.revoked == frozenset()
    with pytest.raises(TLSConfigError, match="not signed by"):
        check_crl(str(crl_path), server.settings.server_trust_cert_path)
    ca_key = serialization.load_pem_private_key((ca.directory / "ca-key.pem").read_bytes(),
                                                password=None)
    now = datetime.datetime.now(datetime.UTC)
    stale = (x509.CertificateRevocationListBuilder()
             .issuer_name(x509.load_pem_x509_certificate(ca.cert_path.read_bytes()).subject)
             .last_update(now - datetime.timedelta(days=2))
             .next_update(now - datetime.timedelta(days=1))
             .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    crl_path.write_bytes(stale.public_bytes(serialization.Encoding.PEM))
    with pytest.raises(TLSConfigError, match="past its nextUpdate"):
        check_crl(str(crl_path), server.settings.server_trust_cert_path)
    assert not server.reload() and server.failures == 2


def test_a_bad_file_at_start_is_a_config_error_naming_the_key(ca: CertificateAuthority) -> None:
    settings = _settings(ca, "server", crl=True)
    Path(settings.crl_path).write_bytes(b"not a crl")
    with pytest.raises(TLSConfigError) as refused:
        ReloadingTLS(settings, what="test")
    assert refused.value.key == "tls.crlPath"


def test_the_watch_thread_and_sighup_reload_without_a_call(ca: CertificateAuthority) -> None:
    polled = watch(ReloadingTLS(_settings(ca, "polled", interval_ms=50), what="polled"))
    on_signal = watch(ReloadingTLS(_settings(ca, "signalled"), what="signalled"))  # no polling
    ca.issue("polled", "rocketha://client/polled", ["127.0.0.1"])
    wait_for(lambda: polled.reloads == 1 or None, 10.0, "the polled reload")
    previous = signal.getsignal(signal.SIGHUP)
    try:
        assert install_sighup()
        ca.issue("signalled", "rocketha://client/signalled", ["127.0.0.1"])
        os.kill(os.getpid(), signal.SIGHUP)
        wait_for(lambda: on_signal.reloads == 1 or None, 10.0, "the SIGHUP reload")
    finally:
        signal.signal(signal.SIGHUP, previous)
