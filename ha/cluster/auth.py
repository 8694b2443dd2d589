"""Authentication for a local `rocketha-cluster` (issue 16): on by default.

The first `up` of a cluster decides, and `cluster.json` remembers ("auth": {"enabled": ...}),
so a later `up` (a restart) keeps it; `up --insecure` makes a cluster without authentication
(and without TLS: ha/cluster/security.py, the same choice). A secured cluster gets, under
its directory, mode 0600:

    admin.credentials   accessKey=... and secretKey=... of the generated Super user "admin":
                        what `rocketha-admin --credentials-file`, the pipelines'
                        --credentials-file, ClientConfig(credentials_file=...) and the Spark
                        option credentialsFile read (the same keys are in client.properties,
                        ha/cluster/security.py)
    admin.secret        the secret alone: the controllers' initAuthenticationUserSecretFile
    acl.json            static mode (no controllers): the brokers' aclFile (the admin user)

Controllers get authenticationEnabled, authorizationEnabled, initAuthenticationUser and an
auditLogFile; brokers the same switches, innerClientCredentialsFile (they sign their calls to
the controllers and to each other as the admin user, unless the cluster runs mutual TLS:
then a broker's member certificate proves it and it holds no keys) and aclFile in static
mode. The tool signs its own calls (readiness, status) with admin.credentials.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from conf import parse_properties
from conf.signing import Credentials
from ha.cluster.processes import write_private_text

__all__ = ["ADMIN_NAME", "admin_credentials", "broker_settings", "controller_settings",
           "prepare"]

ADMIN_NAME = "admin"
CREDENTIALS_FILE = "admin.credentials"
SECRET_FILE = "admin.secret"
ACL_FILE = "acl.json"


def prepare(directory: Path, *, insecure: bool) -> bool:
    """Decide (first `up`) or read (later ones) whether the cluster is secured; on the first
    secured `up` generate the admin user's files. Returns True when secured."""
    manifest_path = directory / "cluster.json"
    manifest: dict[str, Any] = (json.loads(manifest_path.read_text())
                                if manifest_path.exists() else {"brokers": []})
    auth = manifest.get("auth")
    if auth is None:
        auth = manifest["auth"] = {"enabled": not insecure}
        directory.mkdir(parents=True, exist_ok=True)
        write_private_text(manifest_path, json.dumps(manifest, indent=1))
    elif insecure and auth["enabled"]:
        raise SystemExit("rocketha-cluster: this cluster was made with authentication on; "
                         "--insecure cannot turn it off (down, then up in a new --dir)")
    if auth["enabled"] and not (directory / CREDENTIALS_FILE).exists():
        access_key = f"rocketha-{secrets.token_hex(6)}"
        secret = secrets.token_urlsafe(24)
        write_private_text(directory / SECRET_FILE, secret + "\n")
        write_private_text(directory / CREDENTIALS_FILE,
                           f"# the cluster's Super user {ADMIN_NAME}\n"
                           f"accessKey={access_key}\nsecretKey={secret}\n")
        write_private_text(directory / ACL_FILE, json.dumps({"version": 1, "users": [
            {"name": ADMIN_NAME, "access_key": access_key, "secret_key": secret,
             "type": "Super"}], "policies": []}, indent=1))
    return bool(auth["enabled"])


def admin_credentials(directory: Path) -> Credentials | None:
    """The admin user's keys, None for an insecure cluster."""
    path = directory / CREDENTIALS_FILE
    if not path.exists():
        return None
    values = parse_properties(path.read_text(), str(path))
    return Credentials(values["accessKey"], values["secretKey"])


def controller_settings(directory: Path, name: str) -> dict[str, str]:
    credentials = admin_credentials(directory)
    if credentials is None:
        return {}
    return {"authenticationEnabled": "true", "authorizationEnabled": "true",
            "initAuthenticationUser": f"{ADMIN_NAME}:{credentials.access_key}",
            "initAuthenticationUserSecretFile": str(directory / SECRET_FILE),
            "auditLogFile": str(directory / "logs" / f"{name}-audit.log")}


def broker_settings(directory: Path, name: str, *, controller_mode: bool,
                    member_certificates: bool = False) -> dict[str, str]:
    """A broker's auth keys. With `member_certificates` (the cluster runs mutual TLS) its
    certificate proves it to the controllers and to the other brokers (a member identity),
    so it gets no innerClientCredentialsFile: the admin's keys stay with the tools."""
    if admin_credentials(directory) is None:
        return {}
    settings = {"authenticationEnabled": "true", "authorizationEnabled": "true",
                "auditLogFile": str(directory / "logs" / f"{name}-audit.log")}
    if not member_certificates:
        settings["innerClientCredentialsFile"] = str(directory / CREDENTIALS_FILE)
    if not controller_mode:
        settings["aclFile"] = str(directory / ACL_FILE)
    return settings
