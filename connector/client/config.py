"""What a client is told: where the cluster is, how hard to try, how to prove who it is.

`ClientConfig` is a frozen, picklable value (plain values only), so Spark can ship it to its
executors, which open their own connections. With `ClientConfig(controller=...)` the brokers
are the alive masters the controller names (connector/client/discovery.py). TLS:
`tls_trust_cert_path` (the cluster CA) turns it on for every connection,
`tls_cert_path`/`tls_key_path` add a client certificate (brokers and controllers that require
one). Authentication: `access_key`/`secret_key` (or `credentials_file`) sign every call
(conf/signing.py). `ClientConfig.from_properties(path)` reads both from a client.properties
(`rocketha-cluster up` writes `<dir>/client.properties`). `Backoff` is the delay between
retries (connector/client/broker_calls.py, the producer's put retries), with jitter from
tenacity's wait strategies.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import tenacity

from conf.controller_addresses import controller_addresses
from conf.credentials import read_credentials_file, read_private_file
from conf.signing import Credentials
from conf.tls import ClientTLS, TLSConfigError, client_tls_from_properties, read_properties
from conf.values import parse_host_port

__all__ = ["Backoff", "ClientConfig"]

# The retry object a lone draw's RetryCallState names (tenacity's wait strategies read only
# the state's attempt number; nothing here calls or retries through it).
_DRAW_ONLY = tenacity.Retrying()


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """Where the brokers are and how hard to try. Picklable (plain values only)."""

    brokers: tuple[str, ...] = ()  # "host:port" Arrow Flight endpoints
    controller: str | None = None  # or "host:port[,host:port...]" of the controllers
    request_timeout_ms: int = 10_000
    send_deadline_ms: int = 30_000  # a send gives up (raises) after this
    retries_max: int = 20
    backoff_initial_ms: int = 20
    backoff_max_ms: int = 1_000
    # An idempotent producer with `controller` asks the controller this often, while a put's
    # reply is late, whether its master was replaced, and if so sends it to the new one
    # (connector/client/master_watch.py).
    master_check_interval_ms: int = 200
    master_check_after_ms: int = 1000  # ... once a reply is this late (then every interval)
    # With `controller`: the routes are fetched again this often in the background, as
    # RocketMQ's clients poll the name server (pollNameServerInterval, 30 s), and every
    # INCOMPLETE_ROUTES_REFRESH_MS while a replica set the controller lists has no alive
    # master: without it a client sent nothing to a set whose master was elected after its
    # last fetch until some call failed (a chaos campaign: one set without writes for minutes).
    route_refresh_interval_ms: int = 30_000
    # TLS (README "Transport security"): the CA that signs the servers' certificates (set:
    # TLS on), and this client's certificate and key (servers with need.client.auth=require)
    tls_trust_cert_path: str = ""
    tls_cert_path: str = ""
    tls_key_path: str = ""
    # Authentication (issue 16): every call is signed with the secret key (the secret never
    # travels; conf/signing.py). Or `credentials_file`: a file only its owner
    # may read, with accessKey= and secretKey= lines (read once, here).
    access_key: str | None = None
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    credentials_file: str | None = None

    def __post_init__(self) -> None:
        if self.credentials_file:
            found = read_credentials_file(self.credentials_file, "ClientConfig.credentials_file")
            object.__setattr__(self, "access_key", found.access_key)
            object.__setattr__(self, "secret_key", found.secret_key)
        if bool(self.access_key) != bool(self.secret_key):
            raise ValueError("ClientConfig: access_key and secret_key go together")
        if isinstance(self.brokers, str):
            object.__setattr__(self, "brokers", tuple(
                part.strip() for part in self.brokers.split(",") if part.strip()))
        if not self.brokers and not self.controller:
            raise ValueError("ClientConfig.brokers: at least one host:port is required "
                             "(or ClientConfig.controller)")
        for endpoint in self.brokers:
            parse_host_port(endpoint, "ClientConfig.brokers")
        for endpoint in controller_addresses(self.controller):
            parse_host_port(endpoint, "ClientConfig.controller")
        for name in ("request_timeout_ms", "send_deadline_ms", "backoff_initial_ms",
                     "backoff_max_ms", "master_check_interval_ms", "master_check_after_ms",
                     "route_refresh_interval_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ClientConfig.{name} must be > 0")
        if self.retries_max < 0:
            raise ValueError("ClientConfig.retries_max must be >= 0")
        if bool(self.tls_cert_path) != bool(self.tls_key_path):
            raise ValueError("ClientConfig.tls_cert_path and tls_key_path go together")
        if self.tls_cert_path and not self.tls_trust_cert_path:
            raise ValueError("ClientConfig.tls_trust_cert_path is required with tls_cert_path")

    @property
    def tls(self) -> ClientTLS:
        return ClientTLS(self.tls_trust_cert_path, self.tls_cert_path, self.tls_key_path)

    @classmethod
    def from_properties(cls, path: str | os.PathLike[str], **overrides: Any) -> ClientConfig:
        """A client from a client.properties file: `controllerAddr` (host:port[;...]) or
        `brokerAddr` (host:port[,...]), `tls.client.trustCertPath` / `certPath` /
        `keyPath`, and the user's `accessKey` + `secretKey` (then the file must be private
        to its owner, as a credentials file) or `credentialsFile` (a path to one).
        `overrides` set any other field. Raises ValueError naming the key."""
        try:
            properties = read_properties(path)
            tls = client_tls_from_properties(properties)
            if properties.get("secretKey"):
                read_private_file(str(path), "client config")
        except (OSError, TLSConfigError) as err:
            raise ValueError(f"client config {path}: {err}") from err
        values: dict[str, Any] = {"tls_trust_cert_path": tls.trust_cert_path,
                                  "tls_cert_path": tls.cert_path, "tls_key_path": tls.key_path}
        for key, field in (("accessKey", "access_key"), ("secretKey", "secret_key"),
                           ("credentialsFile", "credentials_file")):
            if properties.get(key):
                values[field] = properties[key]
        if bool(values.get("access_key")) != bool(values.get("secret_key")):
            raise ValueError(f"client config {path}: accessKey and secretKey go together")
        if properties.get("controllerAddr"):
            values["controller"] = properties["controllerAddr"]
        if properties.get("brokerAddr"):
            values["brokers"] = properties["brokerAddr"]
        return cls(**{**values, **overrides})

    @property
    def credentials(self) -> Credentials | None:
        if not self.access_key or not self.secret_key:
            return None
        return Credentials(self.access_key, self.secret_key)


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with a cap, and jitter: retry `attempt` (0 = the first retry) waits
    a random time in [c/2, c], where c = `delay_ms(attempt)` = min(max, initial x 2^attempt).

    Why jitter: a failover fails every producer and reader of the old master at once (each
    Spark executor runs several); with fixed delays they all retry at the same instants, and
    the new master takes every retry wave at once. Spreading each wave over the upper half
    of its window ("equal jitter") keeps the backoff's growth and never retries sooner than
    half the planned delay (an election takes a few hundred ms, so a retry at 0 is wasted).
    The waits are tenacity's (a maintained library, as the Retrying loop that uses them):
    wait_exponential for the fixed half plus wait_random_exponential for the random half.
    """

    initial_ms: int
    max_ms: int

    def delay_ms(self, attempt: int) -> int:
        """The window's upper end c (no jitter): 1x, 2x, 4x ... initial, never above the cap."""
        return min(self.max_ms, self.initial_ms * (1 << min(attempt, 20)))

    def wait(self) -> tenacity.wait.wait_base:
        """The jittered wait as a tenacity strategy (its attempt_number 1 is `attempt` 0)."""
        half_initial_s, half_max_s = self.initial_ms / 2000.0, self.max_ms / 2000.0
        return (tenacity.wait_exponential(multiplier=half_initial_s, max=half_max_s)
                + tenacity.wait_random_exponential(multiplier=half_initial_s, max=half_max_s))

    def jittered_ms(self, attempt: int) -> int:
        """One draw of the jittered delay before retry `attempt`, in [c/2, c] (whole ms)."""
        state = tenacity.RetryCallState(_DRAW_ONLY, None, (), {})
        state.attempt_number = min(attempt, 20) + 1
        return round(self.wait()(state) * 1000.0)

    @staticmethod
    def remaining_ms(deadline_monotonic_s: float, now_s: float) -> int:
        return max(0, int((deadline_monotonic_s - now_s) * 1000))
