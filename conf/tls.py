"""TLS settings, contexts and member identities (stdlib ssl + pyarrow.flight only).

Keys (RocketMQ's spelling, in broker.conf and controller.conf):

    tls.server.mode              disabled | enforcing   (permissive: a ConfigError, see below)
    tls.server.certPath          this process's certificate (PEM), also its client certificate
    tls.server.keyPath           its private key (PEM, unencrypted: keep the file 0600)
    tls.server.trustCertPath     the CA that signs every member's (and client's) certificate
    tls.server.need.client.auth  none | require         (optional: a ConfigError, see below)
    tls.client.certPath          certificate for outgoing links (default tls.server.certPath)
    tls.client.keyPath           its key (default tls.server.keyPath)
    tls.client.trustCertPath     CA for the servers this process dials (default: the server's)
    tls.crlPath                  revoked certificates (a PEM CRL signed by the trust CA): a
                                 member link (HA, Raft) with a revoked peer fails its handshake
    tls.reloadIntervalMs         how often the files above are checked for a change (0: only
                                 on SIGHUP); conf/tls_reload.py says what reloads live

`enforcing`: every listener speaks TLS only. The member links (HA, Raft) always require a
member certificate; the Arrow Flight endpoints require a client certificate when
need.client.auth=require. `permissive` (RocketMQ: accept TLS and plaintext on one port) is
refused: a Flight (gRPC) listener serves one credential per port, so it cannot honestly take
both; `optional` likewise (pyarrow.flight can require a client certificate or not ask for one,
not ask without requiring). Both raise TLSConfigError naming the key.

Identities (one URI SAN per certificate, checked by the processes):

    rocketha://controller/<nodeId>                  a controller of controllerDLegerPeers
    rocketha://broker/<brokerName>/<host>:<port>    a broker, by its advertised client endpoint
                                                    (brokerIP1:listenPort): the controller
                                                    gives broker ids by that address, so a
                                                    certificate made before start names it
    rocketha://client/<name>                        a tool or application (no member rights)
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import ssl
import threading
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from pyarrow import flight

from conf.properties import PropertiesError, read_properties_file

__all__ = [
    "NO_TLS",
    "RELOAD_INTERVAL_MS_DEFAULT",
    "TLS_KEYS",
    "ClientTLS",
    "MemberIdentity",
    "PeerRefusals",
    "TLSConfigError",
    "TLSSettings",
    "broker_identity",
    "client_identity",
    "client_ssl_context",
    "client_tls_from_file",
    "client_tls_from_properties",
    "connect_flight",
    "controller_identity",
    "flight_location",
    "flight_server_options",
    "identity_of_peercert",
    "is_loopback",
    "parse_identity",
    "plaintext_refusal",
    "read_properties",
    "server_ssl_context",
]

SERVER_MODES = ("disabled", "permissive", "enforcing")
CLIENT_AUTH_MODES = ("none", "optional", "require")
SCHEME = "rocketha://"
RELOAD_INTERVAL_MS_DEFAULT = 10_000  # tls.reloadIntervalMs: a rotated file is served within it


class TLSConfigError(ValueError):
    """A tls.* setting is invalid; `key` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


@dataclasses.dataclass(frozen=True, slots=True)
class ClientTLS:
    """What an outgoing connection presents and trusts; all empty = plaintext. Picklable."""

    trust_cert_path: str = ""
    cert_path: str = ""
    key_path: str = ""
    crl_path: str = ""  # member links only (client_ssl_context); Flight cannot check a CRL

    @property
    def enabled(self) -> bool:
        return bool(self.trust_cert_path)


NO_TLS = ClientTLS()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TLSSettings:
    server_mode: str = "disabled"
    server_cert_path: str = ""
    server_key_path: str = ""
    server_trust_cert_path: str = ""
    need_client_auth: str = "none"
    client_cert_path: str = ""
    client_key_path: str = ""
    client_trust_cert_path: str = ""
    crl_path: str = ""
    reload_interval_ms: int = RELOAD_INTERVAL_MS_DEFAULT

    def __post_init__(self) -> None:
        if self.server_mode not in SERVER_MODES:
            raise TLSConfigError("tls.server.mode", f"{self.server_mode!r} is not one of "
                                 f"{list(SERVER_MODES)}")
        if self.server_mode == "permissive":
            raise TLSConfigError("tls.server.mode", "permissive is not supported: the Arrow "
                                 "Flight listener cannot serve plaintext and TLS on one port; "
                                 "use enforcing (or disabled)")
        if self.need_client_auth not in CLIENT_AUTH_MODES:
            raise TLSConfigError("tls.server.need.client.auth", f"{self.need_client_auth!r} "
                                 f"is not one of {list(CLIENT_AUTH_MODES)}")
        if self.need_client_auth == "optional":
            raise TLSConfigError("tls.server.need.client.auth", "optional is not supported: "
                                 "pyarrow.flight can require a client certificate or not ask "
                                 "for one; use require (or none)")
        if self.reload_interval_ms < 0:
            raise TLSConfigError("tls.reloadIntervalMs", f"{self.reload_interval_ms} is "
                                 "negative (0 turns the polling off; SIGHUP still reloads)")
        if self.enabled:
            for key, path in (("tls.server.certPath", self.server_cert_path),
                              ("tls.server.keyPath", self.server_key_path),
                              ("tls.server.trustCertPath", self.server_trust_cert_path)):
                if not path:
                    raise TLSConfigError(key, "required with tls.server.mode=enforcing")
        for key, path in _paths(self).items():
            if path and not Path(path).is_file():
                raise TLSConfigError(key, f"{path}: no such file")

    @property
    def enabled(self) -> bool:
        return self.server_mode == "enforcing"

    @property
    def require_client_cert(self) -> bool:
        return self.enabled and self.need_client_auth == "require"

    def client(self) -> ClientTLS:
        """This member's outgoing side (its own certificate unless tls.client.* says else)."""
        if not self.enabled:
            return NO_TLS
        return ClientTLS(self.client_trust_cert_path or self.server_trust_cert_path,
                         self.client_cert_path or self.server_cert_path,
                         self.client_key_path or self.server_key_path, self.crl_path)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> TLSSettings:
        """From the `tls.*` keys of a conf file (other keys are ignored)."""
        values: dict[str, Any] = {field: properties[key].strip()
                                  for key, field in TLS_KEYS.items() if key in properties}
        if "reload_interval_ms" in values:
            text = values["reload_interval_ms"]
            try:
                values["reload_interval_ms"] = int(text)
            except ValueError:
                raise TLSConfigError("tls.reloadIntervalMs", f"{text!r} is not a whole number "
                                     "of milliseconds") from None
        return cls(**values)


TLS_KEYS: dict[str, str] = {
    "tls.server.mode": "server_mode",
    "tls.server.certPath": "server_cert_path",
    "tls.server.keyPath": "server_key_path",
    "tls.server.trustCertPath": "server_trust_cert_path",
    "tls.server.need.client.auth": "need_client_auth",
    "tls.client.certPath": "client_cert_path",
    "tls.client.keyPath": "client_key_path",
    "tls.client.trustCertPath": "client_trust_cert_path",
    "tls.crlPath": "crl_path",
    "tls.reloadIntervalMs": "reload_interval_ms",
}


def _paths(settings: TLSSettings) -> dict[str, str]:
    return {key: getattr(settings, field) for key, field in TLS_KEYS.items()
            if field.endswith("_path")}


def _read(path: str) -> bytes:
    return Path(path).read_bytes()


# -- Arrow Flight -----------------------------------------------------------------------------


def flight_location(address: str, tls_enabled: bool) -> str:
    return f"{'grpc+tls' if tls_enabled else 'grpc'}://{address}"


def flight_server_options(settings: TLSSettings) -> dict[str, Any]:
    """Keyword arguments for FlightServerBase (besides the location). No auth handler is ever
    installed, so `context.peer_identity()` is the client certificate's URI SAN."""
    if not settings.enabled:
        return {}
    options: dict[str, Any] = {"tls_certificates": [(_read(settings.server_cert_path),
                                                     _read(settings.server_key_path))]}
    if settings.require_client_cert:
        options["verify_client"] = True
        options["root_certificates"] = _read(settings.server_trust_cert_path)
    return options


def connect_flight(address: str, tls: ClientTLS = NO_TLS, **kwargs: Any) -> flight.FlightClient:
    """A FlightClient for `host:port`, with TLS (and a client certificate, when given) per
    `tls`. The server's certificate must name the host dialled (IP or DNS SAN)."""
    if not tls.enabled:
        return flight.FlightClient(flight_location(address, False), **kwargs)
    if tls.cert_path:
        kwargs["cert_chain"] = _read(tls.cert_path)
        kwargs["private_key"] = _read(tls.key_path)
    return flight.FlightClient(flight_location(address, True),
                               tls_root_certs=_read(tls.trust_cert_path), **kwargs)


# -- raw sockets (HA link, Raft link): always mutual ---------------------------------------


# Bulk links (the HA link ships the CommitLog): TLS 1.2 with AES-128-GCM first. Why: Python
# 3.11 cannot choose TLS 1.3 suites (no set_ciphersuites), and TLS 1.3 here always lands on
# AES-256-GCM; on this machine AES-128-GCM decrypts ~35% faster (openssl speed: 629 vs 469
# MB/s at 16 KiB records, loaded) and a TLS 1.2 + AES-128-GCM link over loopback carried
# 165-275 MB/s where TLS 1.3 carried 99-134 MB/s. ECDHE keeps forward secrecy; AEAD only.
BULK_CIPHERS = ("ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384")


def _bulk(context: ssl.SSLContext) -> None:
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(BULK_CIPHERS)


def _revocations(context: ssl.SSLContext, crl_path: str) -> None:
    """Refuse a peer whose certificate's serial is in the CRL (OpenSSL checks the CRL's
    signature by the trust CA, and refuses every peer once the CRL is past its nextUpdate)."""
    if crl_path:
        context.load_verify_locations(crl_path)
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF


def server_ssl_context(settings: TLSSettings, *, bulk: bool = False) -> ssl.SSLContext:
    """A member listener: its certificate, and a member certificate required from the peer.
    `bulk`: a link that carries the log (see BULK_CIPHERS)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.server_cert_path, settings.server_key_path)
    context.load_verify_locations(settings.server_trust_cert_path)
    context.verify_mode = ssl.CERT_REQUIRED
    _revocations(context, settings.crl_path)
    if bulk:
        _bulk(context)
    return context


def client_ssl_context(tls: ClientTLS, *, bulk: bool = False) -> ssl.SSLContext:
    """A member dialling a member: verifies the server (CA and the host dialled) and
    presents its own certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_verify_locations(tls.trust_cert_path)
    if tls.cert_path:
        context.load_cert_chain(tls.cert_path, tls.key_path)
    _revocations(context, tls.crl_path)
    if bulk:
        _bulk(context)
    return context


# -- identities -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class MemberIdentity:
    """A parsed identity: kind "controller" (name = node id), "broker" (name = brokerName,
    endpoint = host:port) or "client"; None from parse_identity for anything else."""

    kind: str
    name: str
    endpoint: str = ""


def controller_identity(node_id: int) -> str:
    return f"{SCHEME}controller/{node_id}"


def broker_identity(broker_name: str, endpoint: str) -> str:
    return f"{SCHEME}broker/{broker_name}/{endpoint}"


def client_identity(name: str) -> str:
    return f"{SCHEME}client/{name}"


def parse_identity(text: str) -> MemberIdentity | None:
    if not text.startswith(SCHEME):
        return None
    parts = text[len(SCHEME):].split("/")
    if parts[0] == "controller" and len(parts) == 2 and parts[1].isdigit():
        return MemberIdentity("controller", parts[1])
    if parts[0] == "broker" and len(parts) == 3 and parts[1] and ":" in parts[2]:
        return MemberIdentity("broker", parts[1], parts[2])
    if parts[0] == "client" and len(parts) == 2 and parts[1]:
        return MemberIdentity("client", parts[1])
    return None


def identity_of_peercert(cert: Mapping[str, Any] | None) -> str:
    """The identity in `ssl.getpeercert()`'s dict: its URI SAN, else its CN, else ""."""
    if not cert:
        return ""
    for kind, value in cert.get("subjectAltName", ()):
        if kind == "URI":
            return str(value)
    for rdn in cert.get("subject", ()):
        for name, value in rdn:
            if name == "commonName":
                return str(value)
    return ""


class PeerRefusals:
    """Refused peers, logged once per (host, identity) so a hostile or misconfigured peer
    that retries for ever does not flood the log; `count` counts every refusal. Bounded: at
    most `hosts_max` distinct peers are remembered (later ones are counted, not logged)."""

    def __init__(self, logger: logging.Logger, what: str, hosts_max: int = 1024) -> None:
        self._logger = logger
        self._what = what
        self._hosts_max = hosts_max
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self.count = 0

    def refuse(self, host: str, identity: str, reason: str) -> None:
        key = (host, identity)
        with self._lock:
            self.count += 1
            first = key not in self._seen and len(self._seen) < self._hosts_max
            if first:
                self._seen.add(key)
        if first:
            self._logger.warning("%s refuses %s (certificate %s): %s (logged once per peer)",
                                 self._what, host, identity or "none", reason)


# -- client.properties ------------------------------------------------------------------------


def read_properties(path: str | Path) -> dict[str, str]:
    """The settings of a client.properties (conf/properties.py). Raises TLSConfigError
    naming the file and line when it is not a properties file (what the client tools catch
    with the tls.client.* errors), OSError when it cannot be read."""
    try:
        return read_properties_file(path)
    except PropertiesError as err:
        raise TLSConfigError(err.location, err.reason) from err


def client_tls_from_properties(properties: Mapping[str, str]) -> ClientTLS:
    """The tls.client.* keys of a client.properties (a certificate needs its key)."""
    tls = ClientTLS(properties.get("tls.client.trustCertPath", "").strip(),
                    properties.get("tls.client.certPath", "").strip(),
                    properties.get("tls.client.keyPath", "").strip())
    if bool(tls.cert_path) != bool(tls.key_path):
        raise TLSConfigError("tls.client.keyPath", "tls.client.certPath and "
                             "tls.client.keyPath go together")
    if tls.cert_path and not tls.trust_cert_path:
        raise TLSConfigError("tls.client.trustCertPath", "required with tls.client.certPath")
    for key, path in (("tls.client.trustCertPath", tls.trust_cert_path),
                      ("tls.client.certPath", tls.cert_path),
                      ("tls.client.keyPath", tls.key_path)):
        if path and not Path(path).is_file():
            raise TLSConfigError(key, f"{path}: no such file")
    return tls


def client_tls_from_file(path: str | Path) -> ClientTLS:
    return client_tls_from_properties(read_properties(path))


# -- secure by default ------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Only this machine can reach `host` (127.0.0.0/8, ::1, localhost); a wildcard is not."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any interface


def plaintext_refusal(settings: TLSSettings, allow_insecure: bool, binds: Mapping[str, str],
                      *, authenticated: bool, client_keys: Collection[str] = ()) -> str | None:
    """Why a process must not start (None: it may): a listener (`binds`: conf key -> bind
    host) reachable from other machines without TLS, or a client endpoint (`client_keys`)
    reachable from other machines without authentication (`authenticated`:
    authenticationEnabled), and no allowInsecure=true saying so. The member links (HA, Raft)
    need TLS only: with it they are always mutual."""
    if allow_insecure:
        return None
    exposed = {key: host for key, host in binds.items() if not is_loopback(host)}
    missing, fixes = [], []
    if exposed and not settings.enabled:
        missing.append("TLS")
        fixes.append("tls.server.mode=enforcing with certificates")
    if not authenticated and any(key in client_keys for key in exposed):
        missing.append("authentication")
        fixes.append("authenticationEnabled=true with users")
    if not missing:
        return None
    listeners = ", ".join(f"{key} {host}" for key, host in exposed.items())
    return (f"{listeners}: listening beyond this machine without {' and '.join(missing)}; "
            f"set {' and '.join(fixes)} (rocketha-cluster up makes them), or "
            "allowInsecure=true to accept that")
