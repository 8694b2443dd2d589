"""Certificates, keys, the trust file and the CRL reloaded while a process runs.

A member's raw TLS links (the HA link, the Raft link) take their SSLContext from a
`ReloadingTLS` at every new connection, so a reload is live there: the next handshake (in
either direction) presents the new certificate, trusts the new trust file and refuses what
the new CRL revokes, while every link already up keeps the session it started with (nothing
healthy is dropped). The files are checked every `tls.reloadIntervalMs` by one thread per
process (`watch`), and at once on SIGHUP (`install_sighup`, `request_reload`).

What does not reload live: the Arrow Flight listeners (the broker's and the controller's client
endpoints). pyarrow's FlightServerBase takes `tls_certificates` once, at construction, and has
no call to replace them (nor a hook into gRPC's certificate providers), so those endpoints serve
a new certificate from their next start: docs/security.md gives the rolling restart. Flight
*clients* read the files at every connect (conf/tls.py connect_flight), so they need nothing.

A reload is all or nothing: the new files must build complete contexts (the key matches the
certificate, the certificate is valid now, the trust file parses, the CRL parses, is signed by
a certificate of the trust file and is not past its nextUpdate) before they replace the current
ones. Anything else keeps the previous contexts and logs one line, once per state of the files;
a pair written in two steps (key, then certificate) just loads at the next check after the
second write.
"""

from __future__ import annotations

import datetime
import hashlib
import logging
import signal
import ssl
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from conf.tls import TLSConfigError, TLSSettings, client_ssl_context, server_ssl_context

if TYPE_CHECKING:
    from cryptography import x509

__all__ = ["FileStamp", "ReloadingTLS", "check_crl", "check_files", "file_stamp",
           "install_sighup", "load_pair", "request_reload", "watch"]

logger = logging.getLogger(__name__)

FileStamp = tuple[tuple[str, str], ...]  # (path, SHA-256 of its bytes, "" if unreadable)


def file_stamp(paths: tuple[str, ...]) -> FileStamp:
    """What says a file changed: its bytes. (An mtime can miss a rewrite of the same size
    within one clock tick of the filesystem; the files are a few KiB, read in microseconds.)"""
    stamps = []
    for path in paths:
        try:
            stamps.append((path, hashlib.sha256(Path(path).read_bytes()).hexdigest()))
        except OSError:
            stamps.append((path, ""))
    return tuple(stamps)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _parse_errors() -> tuple[type[Exception], ...]:
    """What cryptography raises for bytes that are not what they claim, at load or later, when
    a field is first read (its objects parse lazily). cryptography is imported here, not at the
    top: every server module imports this one, and `python -m ha.broker` without the server
    extra must still reach its one-line refusal (conf/extras.py)."""
    from cryptography import x509
    from cryptography.exceptions import UnsupportedAlgorithm
    return (ValueError, TypeError, x509.InvalidVersion, UnsupportedAlgorithm)


def _leaf(cert_path: str) -> x509.Certificate:
    """The first certificate of a PEM chain file, valid now (a rotation to an expired or
    not-yet-valid certificate would make every new handshake fail)."""
    from cryptography import x509
    key = "tls.server.certPath"
    try:
        cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
        valid_from, valid_to = cert.not_valid_before_utc, cert.not_valid_after_utc
        cert.public_key()  # parsed here, not at the first handshake
        _ = cert.serial_number
    except _parse_errors() as err:
        raise TLSConfigError(key, f"{cert_path}: not a PEM certificate ({err})") from None
    if not valid_from <= _now() <= valid_to:
        raise TLSConfigError(key, f"{cert_path}: valid from {valid_from:%Y-%m-%d %H:%M} to "
                             f"{valid_to:%Y-%m-%d %H:%M} UTC, not now")
    return cert


def load_pair(cert_path: str, key_path: str) -> tuple[bytes, bytes, int]:
    """(certificate PEM, key PEM, serial) once they belong together and the certificate is
    valid now; TLSConfigError otherwise (for servers that take bytes: gRPC's)."""
    from cryptography.hazmat.primitives import serialization
    cert = _leaf(cert_path)
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        cert_pem, key_pem = Path(cert_path).read_bytes(), Path(key_path).read_bytes()
        key = serialization.load_pem_private_key(key_pem, password=None)
        matches = key.public_key().public_bytes(serialization.Encoding.PEM, spki) == \
            cert.public_key().public_bytes(serialization.Encoding.PEM, spki)
    except _parse_errors() as err:
        raise TLSConfigError("tls.server.keyPath", f"{key_path}: not an unencrypted PEM "
                             f"private key ({err})") from None
    if not matches:
        raise TLSConfigError("tls.server.keyPath", f"{key_path} is not the key of {cert_path}")
    return cert_pem, key_pem, cert.serial_number


def _signed_by_one_of(crl: x509.CertificateRevocationList,
                      anchors: list[x509.Certificate]) -> bool:
    for anchor in anchors:
        try:
            if crl.is_signature_valid(anchor.public_key()):  # type: ignore[arg-type]
                return True
        except _parse_errors():
            continue  # a key that cannot sign a CRL, or does not load: not its issuer
    return False


def check_crl(crl_path: str, trust_path: str) -> frozenset[int]:
    """The revoked serials of a PEM CRL, after the checks OpenSSL would otherwise fail every
    handshake on: signed by a certificate of the trust file, and not past its nextUpdate."""
    from cryptography import x509
    key = "tls.crlPath"
    try:
        crl = x509.load_pem_x509_crl(Path(crl_path).read_bytes())
        anchors = x509.load_pem_x509_certificates(Path(trust_path).read_bytes())
        signed = _signed_by_one_of(crl, anchors)
        next_update = crl.next_update_utc
        revoked = frozenset(entry.serial_number for entry in crl)
    except _parse_errors() as err:
        raise TLSConfigError(key, f"{crl_path}: not a PEM CRL, or the trust file is not PEM "
                             f"certificates ({err})") from None
    if not signed:
        raise TLSConfigError(key, f"{crl_path}: not signed by a certificate of {trust_path}")
    if next_update is not None and next_update < _now():
        raise TLSConfigError(key, f"{crl_path}: past its nextUpdate "
                             f"({next_update:%Y-%m-%d %H:%M} UTC); issue a new CRL")
    return revoked


class ReloadingTLS:
    """The current server and client contexts of one process's member links (conf/tls.py
    server_ssl_context / client_ssl_context, `bulk` as there), rebuilt when a file changes.

    Built at once: a file that does not load raises TLSConfigError naming its key (the process
    refuses to start). Later, `reload()` swaps in new contexts or keeps the current ones."""

    def __init__(self, settings: TLSSettings, *, what: str, bulk: bool = False) -> None:
        assert settings.enabled, "ReloadingTLS is for tls.server.mode=enforcing"
        self.settings = settings
        self.what = what  # who logs: "HA master of broker-a", "Raft node 2"
        self._bulk = bulk
        client = settings.client()
        self._paths = tuple(dict.fromkeys(
            path for path in (settings.server_cert_path, settings.server_key_path,
                              settings.server_trust_cert_path, client.cert_path,
                              client.key_path, client.trust_cert_path, settings.crl_path)
            if path))
        self._lock = threading.Lock()
        self._stamp = file_stamp(self._paths)
        self._failed: FileStamp | None = None  # the files' state that failed (logged once)
        self._server, self._client, self.serial, self.revoked = self._build()
        self.reloads = 0
        self.failures = 0

    @property
    def interval_ms(self) -> int:
        return self.settings.reload_interval_ms

    def server(self) -> ssl.SSLContext:
        """The context for the next accepted connection."""
        return self._server

    def client(self) -> ssl.SSLContext:
        """The context for the next connection this process dials."""
        return self._client

    def _build(self) -> tuple[ssl.SSLContext, ssl.SSLContext, int, frozenset[int]]:
        settings = self.settings
        _, _, serial = load_pair(settings.server_cert_path, settings.server_key_path)
        revoked = (check_crl(settings.crl_path, settings.server_trust_cert_path)
                   if settings.crl_path else frozenset())
        try:
            server = server_ssl_context(settings, bulk=self._bulk)
            client = client_ssl_context(settings.client(), bulk=self._bulk)
        except (ssl.SSLError, OSError) as err:
            raise TLSConfigError("tls.server.certPath", f"the certificate, key, trust file "
                                 f"or CRL does not load ({err})") from None
        return server, client, serial, revoked

    def reload(self) -> bool:
        """Check the files; when they changed and load, swap the contexts in (True)."""
        stamp = file_stamp(self._paths)
        with self._lock:
            if stamp in (self._stamp, self._failed):
                return False
            try:
                server, client, serial, revoked = self._build()
            except (TLSConfigError, OSError) as err:
                self._failed = stamp
                self.failures += 1
                logger.warning("%s: the TLS files changed but do not load, keeping the "
                               "certificate in use (serial %x): %s", self.what, self.serial, err)
                return False
            self._server, self._client = server, client
            self._stamp, self._failed = stamp, None
            old, self.serial, self.revoked = self.serial, serial, revoked
            self.reloads += 1
        logger.info("%s: TLS files reloaded: certificate serial %x (was %x), %d revoked "
                    "serial(s); new connections use them", self.what, serial, old, len(revoked))
        return True


def check_files(settings: TLSSettings) -> TLSSettings:
    """`settings` once its files load as a reload would take them (at start-up: a bad file is
    a TLSConfigError naming its key, not a traceback when the first link is built)."""
    if settings.enabled:
        ReloadingTLS(settings, what="start-up")
    return settings


class _Watcher:
    """One daemon thread per process: checks each watched ReloadingTLS every its own
    tls.reloadIntervalMs, and every one at once when asked (SIGHUP). Holds them weakly: a
    stopped service's goes with it."""

    def __init__(self) -> None:
        self._due_s: weakref.WeakKeyDictionary[ReloadingTLS, float] = \
            weakref.WeakKeyDictionary()  # monotonic time of each one's next check
        self._wake = threading.Event()
        self._requested = False  # SIGHUP: check all now
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, reloading: ReloadingTLS) -> None:
        with self._lock:
            self._due_s[reloading] = time.monotonic() + reloading.interval_ms / 1000
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tls-reload",
                                                daemon=True)
                self._thread.start()
        self._wake.set()  # its interval may end before the current wait does

    def request(self) -> None:
        self._requested = True
        self._wake.set()

    def _timeout_s(self) -> float | None:
        with self._lock:
            dues = [due for item, due in self._due_s.items() if item.interval_ms > 0]
        return max(0.0, min(dues) - time.monotonic()) if dues else None

    def _run(self) -> None:
        while True:
            self._wake.wait(self._timeout_s())
            self._wake.clear()
            requested, self._requested = self._requested, False
            now = time.monotonic()
            with self._lock:
                due = [item for item, due_s in self._due_s.items()
                       if requested or (item.interval_ms > 0 and due_s <= now)]
                for item in due:
                    self._due_s[item] = now + item.interval_ms / 1000
            for item in due:
                try:
                    item.reload()
                except Exception:  # a bug here must not stop later reloads
                    logger.exception("%s: TLS reload failed", item.what)


_WATCHER = _Watcher()


def watch(reloading: ReloadingTLS) -> ReloadingTLS:
    """Have this process's reload thread check `reloading`'s files (returned, for chaining)."""
    _WATCHER.add(reloading)
    return reloading


def request_reload() -> None:
    """Check every watched file now (safe from a signal handler: it only sets an event)."""
    _WATCHER.request()


def install_sighup() -> bool:
    """SIGHUP checks the TLS files now; only the main thread can install it (False if not)."""
    if threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "SIGHUP"):
        return False
    signal.signal(signal.SIGHUP, lambda _signum, _frame: request_reload())
    return True
