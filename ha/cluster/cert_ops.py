"""`rocketha-cluster certs`: list, rotate and revoke the certificates of a local cluster.

    rocketha-cluster certs list   --dir DIR            holder, serial, expiry, revoked or not
    rocketha-cluster certs rotate --dir DIR [NAME...]  new certificates (same identity and
                                                       hosts) for every holder, or those named
    rocketha-cluster certs revoke --dir DIR NAME...    a holder's certificate into the CRL,
                                  [--serial HEX...]    after a new one is issued to it
                                                       (--no-reissue: none)
    rocketha-cluster certs revoke --ca DIR --serial HEX  the same in a CA directory alone
                                                       (`plan`'s DIR/ca)

Holders: every controller, broker and the proxy in cluster.json (their `tls_cert`: identity
and host, as `up` made them) and the tools' `client-admin`. Files are replaced by rename (key
first: ha/cluster/certs.py), so a running member never reads half a file.

What takes the new files when (conf/tls_reload.py): the member links (HA, Raft) and their CRL
at the next check (tls.reloadIntervalMs, or SIGHUP), for the next handshake; the RocketMQ
endpoint at its next handshake; tools and clients at their next connect; the Flight endpoints
(brokers' and controllers' client ports) at their next start, since pyarrow cannot swap a
Flight server's certificate: restart each process, one at a time (docs/security.md).
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

from cryptography import x509

from conf.tls import client_identity
from ha.cluster.certs import CertificateAuthority, ensure_ca, serial_of

__all__ = ["run"]

TLS_DIR = "tls"
CLIENT_NAME = "client-admin"  # ha/cluster/security.py: the tools' certificate


def _holders(directory: Path) -> dict[str, tuple[str, list[str]]]:
    """name -> (identity, hosts) of every certificate the cluster tool made."""
    manifest_path = directory / "cluster.json"
    if not manifest_path.is_file():
        raise SystemExit(f"rocketha-cluster certs: {manifest_path}: no cluster here")
    manifest: dict[str, Any] = json.loads(manifest_path.read_text())
    if not manifest.get("tls"):
        raise SystemExit("rocketha-cluster certs: this cluster runs without TLS (--insecure)")
    processes = [*manifest.get("controllers", []), *manifest.get("brokers", [])]
    if manifest.get("proxy"):
        processes.append(manifest["proxy"])
    holders = {process["name"]: (process["tls_cert"]["identity"],
                                 [process["tls_cert"]["host"]])
               for process in processes if process.get("tls_cert")}
    holders[CLIENT_NAME] = (client_identity("admin"), ["127.0.0.1"])
    return holders


def _chosen(holders: dict[str, tuple[str, list[str]]], names: list[str]) -> list[str]:
    unknown = [name for name in names if name not in holders]
    if unknown:
        raise SystemExit(f"rocketha-cluster certs: no certificate holder {', '.join(unknown)}; "
                         f"holders: {', '.join(sorted(holders))}")
    return names or sorted(holders)


def _parse_serial(text: str) -> int:
    try:
        return int(text.removeprefix("0x").replace(":", ""), 16)
    except ValueError:
        raise SystemExit(f"rocketha-cluster certs revoke: --serial {text!r} is not "
                         "hexadecimal") from None


def _revoke_in(ca_dir: Path, args: argparse.Namespace) -> int:
    """`revoke --ca DIR --serial HEX...`: a CA without a local cluster (`plan`'s)."""
    if args.names or not args.serial:
        raise SystemExit("rocketha-cluster certs revoke --ca: serials only (--serial HEX); "
                         "holder names belong to a cluster of `up` (--dir)")
    if not (ca_dir / "ca.pem").is_file() or not (ca_dir / "ca-key.pem").is_file():
        raise SystemExit(f"rocketha-cluster certs revoke: {ca_dir}: no ca.pem and ca-key.pem")
    ca = ensure_ca(ca_dir)
    serials = {_parse_serial(text) for text in args.serial}
    print(f"revoked {', '.join(f'{serial:x}' for serial in sorted(serials))} in "
          f"{ca.revoke(serials)}: copy it to every machine's tls/crl.pem")
    return 0


def _rotate(ca: CertificateAuthority, holders: dict[str, tuple[str, list[str]]],
            names: list[str]) -> list[str]:
    lines = []
    for name in names:
        cert_path = ca.directory / f"{name}.pem"
        old = serial_of(cert_path) if cert_path.is_file() else None
        identity, hosts = holders[name]
        issued = ca.issue(name, identity, hosts)
        lines.append(f"{name}: serial {serial_of(issued.cert_path):x}"
                     + (f" (was {old:x})" if old is not None else ""))
    return lines


def run(args: argparse.Namespace) -> int:
    if getattr(args, "ca", None) is not None:
        return _revoke_in(args.ca, args)
    directory = args.dir.resolve()
    holders = _holders(directory)
    ca = ensure_ca(directory / TLS_DIR)
    if args.certs_command == "list":
        revoked = ca.revoked()
        for name in sorted(holders):
            cert_path = ca.directory / f"{name}.pem"
            if not cert_path.is_file():
                print(f"{name}: no certificate yet")
                continue
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            days = (cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC)).days
            state = "REVOKED" if cert.serial_number in revoked else "valid"
            print(f"{name}: serial {cert.serial_number:x}, {state}, expires "
                  f"{cert.not_valid_after_utc:%Y-%m-%d} ({days} days), {holders[name][0]}")
        print(f"CRL {ca.crl_path}: {len(revoked)} revoked serial(s)")
        return 0
    if args.certs_command == "rotate":
        for line in _rotate(ca, holders, _chosen(holders, args.names)):
            print(line)
        print("member links (HA, Raft) and the RocketMQ endpoint take them at their next "
              "handshake (tls.reloadIntervalMs, or SIGHUP); the Flight client ports at "
              "their next start: restart each controller and broker, one at a time")
        return 0
    serials = {_parse_serial(text) for text in args.serial}
    names = _chosen(holders, args.names) if args.names else []
    for name in names:
        serials.add(serial_of(ca.directory / f"{name}.pem"))
    if not serials:
        raise SystemExit("rocketha-cluster certs revoke: name a holder or give --serial")
    if names and not args.no_reissue:
        for line in _rotate(ca, holders, names):
            print(line)
    ca.revoke(serials)
    print(f"revoked {', '.join(f'{serial:x}' for serial in sorted(serials))} in "
          f"{ca.crl_path}: member links refuse them from their next check (tls.reloadIntervalMs)"
          "; the Flight client ports cannot check a CRL (docs/security.md)")
    return 0
