"""The proxy's TLS certificate, reloaded when its files change (grpcTlsCertFile, grpcTlsKeyFile).

grpcio can swap a server's certificate live: `dynamic_ssl_server_credentials` asks a fetch
function before each new handshake, and a configuration it returns serves that handshake and
the ones after; connections already up keep theirs. The fetch here compares the two files'
stamps (their SHA-256: two reads of a few KiB per handshake) and, when they changed, loads them
through conf/tls_reload.load_pair: a key that is not the certificate's (a rotation half done),
a file that is not PEM, or a certificate not valid now keeps the certificate in use, with one
log line per state of the files.
"""

from __future__ import annotations

import logging
import threading

import grpc

from conf.tls import TLSConfigError
from conf.tls_reload import FileStamp, file_stamp, load_pair

__all__ = ["ReloadingCredentials"]

logger = logging.getLogger(__name__)


class ReloadingCredentials:
    """Server credentials for grpc.server.add_secure_port that follow the files."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self._paths = (cert_file, key_file)
        self._lock = threading.Lock()
        self._stamp = file_stamp(self._paths)
        cert_pem, key_pem, self.serial = load_pair(cert_file, key_file)  # at start: raises
        self._failed: FileStamp | None = None
        self.reloads = 0
        self.credentials = grpc.dynamic_ssl_server_credentials(
            grpc.ssl_server_certificate_configuration([(key_pem, cert_pem)]), self._fetch,
            require_client_authentication=False)

    def _fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's question before a handshake: a new configuration, or None (keep)."""
        stamp = file_stamp(self._paths)
        with self._lock:
            if stamp in (self._stamp, self._failed):
                return None
            try:
                cert_pem, key_pem, serial = load_pair(*self._paths)
            except (TLSConfigError, OSError) as err:
                self._failed = stamp
                logger.warning("grpcTlsCertFile/grpcTlsKeyFile changed but do not load, "
                               "keeping the certificate in use (serial %x): %s", self.serial,
                               err)
                return None
            self._stamp, self._failed = stamp, None
            old, self.serial = self.serial, serial
            self.reloads += 1
        logger.info("TLS certificate reloaded: serial %x (was %x); new connections use it",
                    serial, old)
        return grpc.ssl_server_certificate_configuration([(key_pem, cert_pem)])
