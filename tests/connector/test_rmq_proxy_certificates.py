"""The RocketMQ endpoint's certificate follows its files (connector/rmq_proxy/certificates.py).

Goal: a real grpcio server serves a rotated certificate at the next handshake, and keeps the
one in use, logging one line, when the files do not load (a key of another certificate, as
between the two writes of a rotation). Method: certificates from the cluster CA code, a
grpc.server with no services (the TLS handshake is all that is looked at), and a stdlib TLS
client offering h2 that reads the certificate served.
"""

from __future__ import annotations

import logging
import socket
import ssl
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from cryptography import x509

from connector.rmq_proxy.certificates import ReloadingCredentials
from ha.cluster.certs import CertificateAuthority, ensure_ca, serial_of


@pytest.fixture()
def ca(tmp_path: Path) -> CertificateAuthority:
    return ensure_ca(tmp_path / "tls")


@pytest.fixture()
def served(ca: CertificateAuthority) -> Iterator[tuple[ReloadingCredentials, int]]:
    issued = ca.issue("proxy", "rocketha://client/proxy", ["127.0.0.1"])
    credentials = ReloadingCredentials(str(issued.cert_path), str(issued.key_path))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    port = server.add_secure_port("127.0.0.1:0", credentials.credentials)
    server.start()
    yield credentials, port
    server.stop(None).wait()


def _served_serial(ca: CertificateAuthority, port: int) -> int:
    context = ssl.create_default_context(cafile=str(ca.cert_path))
    context.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def test_the_next_handshake_serves_the_rotated_certificate(
        ca: CertificateAuthority, served: tuple[ReloadingCredentials, int],
        caplog: pytest.LogCaptureFixture) -> None:
    credentials, port = served
    first = credentials.serial
    assert _served_serial(ca, port) == first
    other = ca.issue("other", "rocketha://client/other", ["127.0.0.1"])
    key_path = ca.directory / "proxy-key.pem"
    key_path.write_bytes(other.key_path.read_bytes())  # the first of a rotation's two writes
    caplog.set_level(logging.WARNING, logger="connector.rmq_proxy.certificates")
    for _ in range(3):
        assert _served_serial(ca, port) == first
    lines = [r.getMessage() for r in caplog.records if "do not load" in r.getMessage()]
    assert len(lines) == 1 and "is not the key of" in lines[0], lines
    issued = ca.issue("proxy", "rocketha://client/proxy", ["127.0.0.1"])
    second = serial_of(issued.cert_path)
    assert _served_serial(ca, port) == second and credentials.reloads == 1
