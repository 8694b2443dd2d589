"""The controller's users, as the proxy checks RocketMQ clients against them (a SecretLookup).

The same table the brokers use: the controller's replicated users and ACLs, fetched with the
`get_auth_data` action (Super users and members only: the proxy signs it with the keys of
its `clientConfig`, the cluster's admin on a local cluster). The proxy keeps only what it
needs to check a signature (enabled users' access key -> secret key) and never logs a secret.

Freshness: the brokers refresh their copy when a controller heartbeat reports a newer
version; the proxy sends no heartbeats, so it fetches again when its copy is older than
`refresh_interval_ms` (grpcAuthRefreshIntervalMs) at the next lookup, and at once (at most
every MISS_REFRESH_MIN_S) when a lookup misses: a user created a moment ago works on its
first call. A user disabled or deleted keeps passing the proxy's signature check for at most
refresh_interval_ms; the brokers (which re-check every Flight call the proxy makes as that
user) refuse it as soon as their own copy changes. When no controller answers, the last table
stays in use (docs/design.md §5.6: the controller being down stops no data plane); before the first
table every lookup raises AuthUnavailable (the client retries).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from connector.protocol import RocketHAError
from connector.rmq_proxy.auth import AuthUnavailable

__all__ = ["AuthDataError", "ControllerUsers", "parse_users"]

logger = logging.getLogger(__name__)

MISS_REFRESH_MIN_S = 1.0
FAILURE_LOG_INTERVAL_S = 30.0


class AuthDataError(ValueError):
    """A get_auth_data reply the proxy cannot use (the message never holds a secret)."""


def parse_users(reply: Any) -> tuple[int, dict[str, str]]:
    """(version, enabled access key -> secret key) of a get_auth_data reply; AuthDataError
    for anything else."""
    if not isinstance(reply, dict) or reply.get("status") != "OK":
        status = reply.get("status") if isinstance(reply, dict) else None
        raise AuthDataError(f"get_auth_data answered {str(status)[:60]!r}")
    auth = reply.get("auth")
    if not isinstance(auth, dict) or not isinstance(auth.get("users"), list):
        raise AuthDataError("get_auth_data: no users list")
    version = auth.get("version", 0)
    if isinstance(version, bool) or not isinstance(version, int):
        raise AuthDataError("get_auth_data: version is not an integer")
    secrets: dict[str, str] = {}
    for user in auth["users"]:
        if not isinstance(user, dict):
            raise AuthDataError("get_auth_data: a user is not an object")
        access_key, secret = user.get("access_key"), user.get("secret_key")
        if not isinstance(access_key, str) or not isinstance(secret, str):
            raise AuthDataError("get_auth_data: a user without access_key/secret_key strings")
        if user.get("status", "enabled") == "enabled":
            secrets[access_key] = secret
    return version, secrets


class ControllerUsers:
    """SecretLookup over the controller's users; `fetch()` returns the get_auth_data reply
    (JSON) or raises RocketHAError when no controller answers."""

    def __init__(self, fetch: Callable[[], Any], refresh_interval_ms: int,
                 clock_s: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._interval_s = refresh_interval_ms / 1000.0
        self._clock_s = clock_s
        self._secrets: dict[str, str] | None = None
        self.version = -1
        self._fetched_s = float("-inf")  # the last attempt, successful or not
        self._lock = threading.Lock()  # one fetch at a time
        self._failure_logged_s = float("-inf")
        self.fetches = 0

    def secret_key(self, access_key: str) -> str | None:
        now_s = self._clock_s()
        if self._secrets is None or now_s - self._fetched_s >= self._interval_s:
            self.refresh(wait=self._secrets is None)
        secrets = self._secrets
        if secrets is None:
            raise AuthUnavailable("the proxy has not got the users from the controllers yet")
        secret = secrets.get(access_key)
        if secret is None and self._clock_s() - self._fetched_s >= MISS_REFRESH_MIN_S:
            self.refresh(wait=True)  # maybe a user created since the last fetch
            secret = (self._secrets or {}).get(access_key)
        return secret

    def refresh(self, *, wait: bool) -> None:
        """Fetch the table (another thread fetching: wait for it, or use the current one)."""
        if not self._lock.acquire(blocking=wait):
            return
        try:
            self._fetched_s = self._clock_s()
            self.fetches += 1
            try:
                version, secrets = parse_users(self._fetch())
            except (RocketHAError, ValueError) as err:
                if self._fetched_s - self._failure_logged_s >= FAILURE_LOG_INTERVAL_S:
                    self._failure_logged_s = self._fetched_s
                    logger.warning("users from the controllers: %s (keeping version %d)", err,
                                   self.version)
                return
            if version != self.version:
                logger.info("users at version %d (%d enabled)", version, len(secrets))
            self._secrets, self.version = secrets, version
        finally:
            self._lock.release()
