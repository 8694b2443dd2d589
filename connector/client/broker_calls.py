"""Where a client's calls to brokers go, and how they are retried: the routes and the retry
policy Admin, Consumer and the Producer's put channels share (`_Base`).

Retry policy: a call that fails with a retriable status or error (see
connector.protocol.errors) is retried after a jittered backoff (`Backoff`: a random time in the
upper half of min(backoff_max_ms, backoff_initial_ms x 2^attempt)) while attempts remain and
the next attempt would still start before the deadline (tenacity's Retrying: a count and a
deadline bound every retry); with
several brokers, an unordered send moves to the next broker when one is unreachable or answers
NOT_MASTER. With `ClientConfig(controller=...)` the brokers are the alive masters the
controller names (its `cluster_list`), fetched again after NOT_MASTER or a broken connection,
and in the background every `route_refresh_interval_ms`, so clients follow a failover.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import pyarrow as pa
import tenacity
from pyarrow import flight

from connector.client.config import Backoff, ClientConfig
from connector.client.connections import _drop_connection, as_rocketha_error, signed_options
from connector.client.discovery import controller_masters
from connector.protocol import RetriableError, RocketHAError, status_for

__all__: list[str] = []

logger = logging.getLogger(__name__)

INCOMPLETE_ROUTES_REFRESH_MS = 1000  # routes missing a set's master: fetched again this soon


class _Routes:
    """Where a client's calls go, and what it learnt about that. One per Admin / Consumer;
    one per Producer, shared by its synchronous channel and every lane of its asynchronous
    sends, so that what one lane learns (NOT_MASTER, a broken connection, a master replaced
    while a put waited) every other lane uses at its next attempt. (Each lane on its own
    routes had to find a paused master out by itself, a stream deadline each: one message
    per key in turn stood still for lanes x deadline, tests/integration/test_paused_master.py.)
    Fields are read without a lock (a stale read costs a retry); a fetch from the controller
    holds `fetch_lock`, so lanes that find the routes stale together ask once."""

    def __init__(self, brokers: tuple[str, ...]) -> None:
        self.endpoints = brokers
        self.broker_index = 0
        self.stale = False  # with `controller`: fetch the endpoints again first
        # With `controller`, from the last cluster_list (producers): the replica set of each
        # member address, and the alive master of each set.
        self.set_of_member: dict[str, str] = {}
        self.master_of_set: dict[str, str] = {}
        self.fetch_lock = threading.Lock()
        self.refresh_at_s = 0.0  # monotonic: when a background fetch is due (`_Base.endpoint`)
        self.incomplete = False  # the last fetch named a replica set without an alive master

    def move_past(self, endpoint: str) -> None:
        """The next call goes to the endpoint after `endpoint`, if that is still the current
        one: lanes that fail on the same broker together move once (with two brokers, two
        lanes moving one each would land back on the failed one)."""
        with self.fetch_lock:
            endpoints = self.endpoints
            if endpoints and endpoints[self.broker_index % len(endpoints)] == endpoint:
                self.broker_index += 1


class _Base:
    def __init__(self, config: ClientConfig, routes: _Routes | None = None) -> None:
        self.config = config
        self._backoff = Backoff(config.backoff_initial_ms, config.backoff_max_ms)
        self._routes = routes if routes is not None else _Routes(config.brokers)

    @property
    def endpoint(self) -> str:
        """The broker to call: from `brokers`, or (with `controller`) those the controller
        names (`_controller_endpoints`), fetched again after NOT_MASTER or a broken
        connection."""
        routes = self._routes
        if not routes.endpoints or routes.stale:
            assert self.config.controller is not None
            with routes.fetch_lock:
                if not routes.endpoints or routes.stale:  # (not done meanwhile by another)
                    routes.stale = False
                    try:
                        routes.endpoints = self._controller_endpoints(self.config.controller)
                    except RetriableError:
                        if not routes.endpoints:
                            raise
                        # no controller answers: go on with the endpoints already known
                        # (docs/design.md §5.6: the controller being down never stops a healthy
                        # replica set)
                    finally:
                        routes.refresh_at_s = time.monotonic() + self._refresh_interval_s()
        elif self.config.controller is not None and time.monotonic() >= routes.refresh_at_s:
            self._refresh_in_background()
        endpoints = routes.endpoints
        return endpoints[routes.broker_index % len(endpoints)]

    def _refresh_in_background(self) -> None:
        """Fetch the routes again on a thread of its own, while calls go on with the ones
        known (ClientConfig.route_refresh_interval_ms): a controller that is slow or down
        never holds a call up here. At most one fetch at a time (`fetch_lock`)."""
        routes = self._routes
        if not routes.fetch_lock.acquire(blocking=False):
            return  # a fetch is under way (it sets the next refresh_at_s when done)
        controller = self.config.controller
        assert controller is not None

        def fetch() -> None:
            try:
                routes.endpoints = self._controller_endpoints(controller)
            except RocketHAError as err:  # the known routes stay (docs/design.md §5.6)
                logger.debug("routes not refreshed from %s: %s", controller, err)
            finally:
                routes.refresh_at_s = time.monotonic() + self._refresh_interval_s()
                routes.fetch_lock.release()
        threading.Thread(target=fetch, name="rocketha-routes", daemon=True).start()

    def _refresh_interval_s(self) -> float:
        interval_ms = self.config.route_refresh_interval_ms
        if self._routes.incomplete:
            interval_ms = min(interval_ms, INCOMPLETE_ROUTES_REFRESH_MS)
        return interval_ms / 1000.0

    def _controller_endpoints(self, controller: str) -> tuple[str, ...]:
        return controller_masters(controller, self.config.request_timeout_ms, self.config.tls,
                                  self.config.credentials)

    def _refresh_route(self, endpoint: str) -> None:
        _drop_connection(endpoint, self.config.tls)
        self._routes.move_past(endpoint)
        if self.config.controller is not None:
            self._routes.stale = True

    def _options(self, method: str, target: bytes, timeout_s: float | None = None
                 ) -> flight.FlightCallOptions:
        return signed_options(self.config.credentials, method, target,
                              timeout_s or self.config.request_timeout_ms / 1000.0)

    def _retry(self, call: Any, what: str) -> Any:
        """Run `call(endpoint)` with the retry policy; returns its value. A retriable
        RocketHAError is retried; anything else, and the last error, is raised as it is."""
        def log_retry(state: tenacity.RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome else None
            logger.info("%s: %s; retry %d in %d ms", what, error, state.attempt_number,
                        round((state.upcoming_sleep or 0.0) * 1000))

        retrying = tenacity.Retrying(
            stop=(tenacity.stop_after_attempt(self.config.retries_max + 1)
                  | tenacity.stop_before_delay(self.config.send_deadline_ms / 1000.0)),
            wait=self._backoff.wait(), retry=tenacity.retry_if_exception(_retriable),
            before_sleep=log_retry, reraise=True)
        return retrying(self._attempt, call)

    def _attempt(self, call: Any) -> Any:
        """One attempt of `call(endpoint)`: a failure becomes a RocketHAError, after what it
        implies (a route to refresh, a closed shared connection to drop)."""
        endpoint = ""
        try:
            endpoint = self.endpoint
            return call(endpoint)
        except flight.FlightError as err:
            error = as_rocketha_error(err)
            if isinstance(err, flight.FlightUnavailableError) or error.refresh_route:
                self._refresh_route(endpoint)
            raise error from err
        except pa.ArrowInvalid as err:
            if "is closed" not in str(err):
                raise
            # another thread closed the shared connection after a failure of its own
            # (_refresh_route): a new one on the next attempt (found by a chaos run)
            _drop_connection(endpoint, self.config.tls)
            raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                                 f"{endpoint}: {err}") from err


def _retriable(error: BaseException) -> bool:
    return isinstance(error, RocketHAError) and error.retriable
