"""Certificates for a cluster: one CA, a certificate per member, one for the tools.

    <dir>/tls/ca.pem                    the cluster CA's certificate (the trust anchor)
    <dir>/tls/ca-key.pem                its private key (only ever used to sign, here)
    <dir>/tls/<name>.pem, <name>-key.pem
                                        a member's (or the tools') certificate and key
    <dir>/tls/crl.pem                   the revoked serials (a CRL signed by the CA), read by
                                        every member as tls.crlPath (conf/tls_reload.py)

Every file is written with mode 0600 (ha/local_processes.write_private_text): keys are secrets,
and nothing here needs another user to read them. Keys are ECDSA P-256 (fast to make and to
handshake); certificates last `VALID_DAYS`.

Identity: each certificate names its holder in one URI SAN, spelled by
`conf.tls` (`rocketha://controller/<id>`, `rocketha://broker/<brokerName>/<host:
port>`, `rocketha://client/<name>`), which the processes check (README "Transport security").
Rotation writes a certificate and its key to new files and renames them over the old ones,
key first: a member checking its files between the two renames finds a pair that does not
match, keeps what it serves, and loads the pair at its next check.

Addresses: IP SANs (and DNS SANs for names) for every address the holder listens on, since
clients check the address they dial against them.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from ha.cluster.processes import write_private_text

__all__ = ["CRL_NAME", "VALID_DAYS", "CertificateAuthority", "IssuedCert", "ensure_ca",
           "serial_of"]

CRL_NAME = "crl.pem"

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


def _replace_private(path: Path, text: str) -> None:
    """Write `text` beside `path` (0600), then rename it over `path`: a process reading the
    file sees the old content or the new, never a part."""
    partial = path.with_name(path.name + ".new")
    write_private_text(partial, text)
    os.replace(partial, path)


def serial_of(cert_path: Path) -> int:
    """The serial number of the (first) certificate in a PEM file."""
    return x509.load_pem_x509_certificate(cert_path.read_bytes()).serial_number


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
        _replace_private(issued.key_path, _key_pem(key))
        _replace_private(issued.cert_path, _cert_pem(cert))
        return issued

    @property
    def crl_path(self) -> Path:
        return self.directory / CRL_NAME

    def revoked(self) -> frozenset[int]:
        """The serials the CRL lists (none before the first `revoke`)."""
        if not self.crl_path.is_file():
            return frozenset()
        crl = x509.load_pem_x509_crl(self.crl_path.read_bytes())
        return frozenset(entry.serial_number for entry in crl)

    def revoke(self, serials: Iterable[int] = ()) -> Path:
        """Write the CRL: what it listed plus `serials` (with none: an empty CRL, made once so
        every member can name it in tls.crlPath). Its nextUpdate is the CA's own expiry: a
        member refuses every peer once the CRL it holds is past it."""
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateRevocationListBuilder()
                   .issuer_name(self._cert.subject)
                   .last_update(now - datetime.timedelta(minutes=5))
                   .next_update(self._cert.not_valid_after_utc))
        for serial in sorted(self.revoked() | frozenset(serials)):
            builder = builder.add_revoked_certificate(
                x509.RevokedCertificateBuilder().serial_number(serial)
                .revocation_date(now - datetime.timedelta(minutes=5)).build())
        crl = builder.sign(self._key, hashes.SHA256())
        _replace_private(self.crl_path, crl.public_bytes(serialization.Encoding.PEM).decode())
        return self.crl_path

    def ensure_crl(self) -> Path:
        return self.crl_path if self.crl_path.is_file() else self.revoke()


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
