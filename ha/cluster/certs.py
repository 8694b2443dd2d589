"""Certificates for a cluster: one CA, a certificate per member, one for the tools.

    <dir>/tls/ca.pem                    the cluster CA's certificate (the trust anchor)
    <dir>/tls/ca-key.pem                its private key (only ever used to sign, here)
    <dir>/tls/<name>.pem, <name>-key.pem
                                        a member's (or the tools') certificate and key

Every file is written with mode 0600 (ha/local_processes.write_private_text): keys are secrets,
and nothing here needs another user to read them. Keys are ECDSA P-256 (fast to make and to
handshake); certificates last `VALID_DAYS`.

Identity: each certificate names its holder in one URI SAN, spelled by
`conf.tls` (`rocketha://controller/<id>`, `rocketha://broker/<brokerName>/<host:
port>`, `rocketha://client/<name>`), which the processes check (README "Transport security").
Addresses: IP SANs (and DNS SANs for names) for every address the holder listens on, since
clients check the address they dial against them.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ha.cluster.processes import write_private_text

__all__ = ["VALID_DAYS", "CertificateAuthority", "IssuedCert", "ensure_ca"]

VALID_DAYS = 825
CA_VALID_DAYS = 3650


@dataclasses.dataclass(frozen=True, slots=True)
class IssuedCert:
    cert_path: Path
    key_path: Path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _sans(identity: str, hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = [x509.UniformResourceIdentifier(identity)]
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


class CertificateAuthority:
    """A cluster CA kept in `directory` (ca.pem, ca-key.pem): issues member certificates."""

    def __init__(self, directory: Path, key: ec.EllipticCurvePrivateKey,
                 cert: x509.Certificate) -> None:
        self.directory = directory
        self._key = key
        self._cert = cert

    @property
    def cert_path(self) -> Path:
        return self.directory / "ca.pem"

    def issue(self, name: str, identity: str, hosts: Iterable[str]) -> IssuedCert:
        """Write `<name>.pem` / `<name>-key.pem`: a certificate for `identity` (URI SAN) and
        `hosts` (IP or DNS SANs), usable as a TLS server and as a TLS client."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(_sans(identity, hosts)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(self._key, hashes.SHA256())
        )
        issued = IssuedCert(self.directory / f"{name}.pem", self.directory / f"{name}-key.pem")
        write_private_text(issued.key_path, _key_pem(key))
        write_private_text(issued.cert_path, _cert_pem(cert))
        return issued


def ensure_ca(directory: Path, cluster_name: str = "rocketha") -> CertificateAuthority:
    """The CA in `directory`: loaded when ca.pem and ca-key.pem exist, else made (0600)."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    cert_path, key_path = directory / "ca.pem", directory / "ca-key.pem"
    if cert_path.exists() and key_path.exists():
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey), key_path
        return CertificateAuthority(directory, key,
                                    x509.load_pem_x509_certificate(cert_path.read_bytes()))
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{cluster_name} cluster CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=CA_VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    write_private_text(key_path, _key_pem(key))
    write_private_text(cert_path, _cert_pem(cert))
    return CertificateAuthority(directory, key, cert)
