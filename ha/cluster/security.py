"""Secure by default for `rocketha-cluster up`: certificates, TLS settings, client.properties.

(The admin user and the auth settings: ha/cluster/auth.py.)

The first `up` of a cluster decides (`cluster.json` "tls"): TLS and mutual TLS on, unless
`--insecure`. A secure cluster gets, under `<dir>/tls/` (ha/cluster/certs.py, all 0600):
the cluster CA, one certificate per controller and broker (its identity as a URI SAN and its
advertised host as an IP/DNS SAN; made again when the host or port changes), and
`client-admin.pem` (`rocketha://client/admin`) for the tools. Every process runs with
`tls.server.mode=enforcing` and `tls.server.need.client.auth=require`.

`<dir>/client.properties` (0600) is what tools, the demo, Spark (`clientConfig`) and
`ClientConfig.from_properties` read:

    controllerAddr=H:P;H:P            the controllers' client endpoints
    tls.client.trustCertPath=...      the cluster CA
    tls.client.certPath=... / tls.client.keyPath=...   the tools' certificate
    accessKey=... / secretKey=...     the generated Super user admin (ha/cluster/auth.py)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conf.tls import (
    NO_TLS,
    ClientTLS,
    broker_identity,
    client_identity,
    controller_identity,
)
from ha.cluster import auth as cluster_auth
from ha.cluster.certs import ensure_ca
from ha.cluster.hosts import host_of
from ha.cluster.processes import write_private_text

__all__ = ["CLIENT_PROPERTIES", "choose_tls", "client_tls", "member_tls_settings",
           "proxy_tls_settings", "write_client_properties"]

TLS_DIR = "tls"
CLIENT_PROPERTIES = "client.properties"
CLIENT_NAME = "client-admin"


def choose_tls(manifest: dict[str, Any], insecure: bool) -> None:
    """Record the cluster's choice at its first `up`; a later `up` keeps it."""
    if "tls" not in manifest:
        existing = manifest.get("brokers") or manifest.get("controllers")
        manifest["tls"] = not insecure and not existing  # a cluster from before: plaintext
    elif insecure and manifest["tls"]:
        raise SystemExit("rocketha-cluster: this cluster runs with TLS; --insecure cannot "
                         "turn it off (down, then up in a new --dir)")


def _issue(directory: Path, process: dict[str, Any], identity: str) -> dict[str, str]:
    """The process's certificate (made when missing or when its identity or host changed)."""
    host = host_of(process)
    ca = ensure_ca(directory / TLS_DIR)
    made = process.get("tls_cert", {})
    cert_path = Path(made.get("cert", ""))
    if (made.get("identity") != identity or made.get("host") != host
            or not cert_path.is_file()):
        issued = ca.issue(process["name"], identity, [host])
        made = {"identity": identity, "host": host, "cert": str(issued.cert_path),
                "key": str(issued.key_path)}
        process["tls_cert"] = made
    return {"tls.server.mode": "enforcing", "tls.server.need.client.auth": "require",
            "tls.server.certPath": made["cert"], "tls.server.keyPath": made["key"],
            "tls.server.trustCertPath": str(ca.cert_path),
            "tls.crlPath": str(ca.ensure_crl())}


def member_tls_settings(directory: Path, manifest: dict[str, Any],
                        process: dict[str, Any]) -> dict[str, str]:
    """The tls.* keys of one controller or broker; for a cluster made `--insecure`,
    allowInsecure=true (it may then listen on test hosts' addresses in plaintext)."""
    if not manifest.get("tls"):
        return {"allowInsecure": "true"}
    if "node_id" in process:
        identity = controller_identity(process["node_id"])
    else:
        identity = broker_identity(process.get("set", process["name"]),
                                   f"{host_of(process)}:{process['port']}")
    return _issue(directory, process, identity)


def proxy_tls_settings(directory: Path, proxy: dict[str, Any]) -> dict[str, str]:
    """The certificate of the RocketMQ gRPC endpoint (ha/cluster/proxy.py): the cluster CA's,
    identity rocketha://client/proxy (it is a client of the cluster, not a member)."""
    return _issue(directory, proxy, client_identity("proxy"))


def client_tls(directory: Path, manifest: dict[str, Any]) -> ClientTLS:
    """What the cluster tool itself (and the tools) present: the admin client certificate."""
    if not manifest.get("tls"):
        return NO_TLS
    ca = ensure_ca(directory / TLS_DIR)
    cert, key = ca.directory / f"{CLIENT_NAME}.pem", ca.directory / f"{CLIENT_NAME}-key.pem"
    if not cert.is_file() or not key.is_file():
        ca.issue(CLIENT_NAME, client_identity("admin"), ["127.0.0.1"])
    return ClientTLS(str(ca.cert_path), str(cert), str(key))


def write_client_properties(directory: Path, manifest: dict[str, Any],
                            controller_addr: str, brokers: list[str]) -> Path:
    """`<dir>/client.properties` (0600): where the cluster is and how to reach it."""
    tls = client_tls(directory, manifest)
    lines = ["# rocketha client settings, written by rocketha-cluster up (mode 0600)",
             "# used by: rocketha-admin --client-config, ClientConfig.from_properties,",
             "# the Spark option clientConfig, the pipelines' --client-config"]
    if controller_addr:
        lines.append(f"controllerAddr={controller_addr}")
    else:
        lines.append(f"brokerAddr={','.join(brokers)}")
    if tls.enabled:
        lines += [f"tls.client.trustCertPath={tls.trust_cert_path}",
                  f"tls.client.certPath={tls.cert_path}",
                  f"tls.client.keyPath={tls.key_path}"]
    credentials = cluster_auth.admin_credentials(directory)
    if credentials is not None:
        lines += [(f"# the Super user {cluster_auth.ADMIN_NAME} "
                   f"(also in {cluster_auth.CREDENTIALS_FILE})"),
                  f"accessKey={credentials.access_key}", f"secretKey={credentials.secret_key}"]
    path = directory / CLIENT_PROPERTIES
    write_private_text(path, "\n".join(lines) + "\n")
    return path
