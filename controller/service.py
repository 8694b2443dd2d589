"""The controller's client endpoint: Arrow Flight `DoAction(type, JSON body)` -> one JSON reply.

The actions and their messages are listed in `controller.api`. A handler thread decodes and
checks the body (a malformed one fails that call alone with a Flight error whose text starts
with `controller error BAD_REQUEST:`; anything unforeseen with `controller error
INTERNAL_ERROR:` and the exception's type, logged here: a client never gets a Python
traceback), hands the request to the node's event loop, and waits
at most requestTimeoutMs (+1 s) for the reply; outcomes (NOT_LEADER, fenced epochs, BUSY...)
are JSON replies with a `status`, never errors. TLS per tls.* (conf/tls.py); with
need.client.auth=require the caller's certificate identity (`context.peer_identity()`: no auth
handler is installed, so it is the certificate's) must be allowed the call by
controller/auth/member_check.py, else the call fails with `controller error FORBIDDEN:` (logged once
per caller host and identity). At most `REQUESTS_INFLIGHT_MAX` calls wait on
the node at once; beyond that a call is answered BUSY at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

from pyarrow import flight

from conf.signing import action_target
from conf.tls import PeerRefusals, flight_location, flight_server_options, parse_identity
from controller.api import ACTIONS
from controller.auth.member_check import member_refusal
from controller.auth.verify import AuditLog, AuthGate
from controller.config import ControllerConfig
from controller.errors import CodecError
from controller.node import ControllerNode

__all__ = ["REQUESTS_INFLIGHT_MAX", "REQUEST_BODY_BYTES_MAX", "ControllerService"]

logger = logging.getLogger(__name__)

REQUEST_BODY_BYTES_MAX = 16 << 20
REQUESTS_INFLIGHT_MAX = 512


def _bad_request(message: str, name: str = "BAD_REQUEST") -> flight.FlightServerError:
    return flight.FlightServerError(f"controller error {name}: {message}")


class ControllerService(flight.FlightServerBase):
    def __init__(self, config: ControllerConfig, node: ControllerNode,
                 loop: asyncio.AbstractEventLoop) -> None:
        settings = config.auth
        self.auth = AuthGate(settings, lambda: node.state.auth, bootstrap=node.init_user,
                             audit=AuditLog(settings.audit_log_file,
                                            settings.audit_log_bytes_max,
                                            settings.audit_logs_kept, "controller"))
        # binds controllerBindAddress (default: its advertised host); NOT_LEADER names the
        # advertised client address (controllerAddr)
        # the auth middleware, never a ServerAuthHandler: that would replace peer_identity()
        # (the client certificate's identity, which the member checks below read)
        super().__init__(flight_location(config.client_bind_address(), config.tls.enabled),
                         middleware=self.auth.middleware(), **flight_server_options(config.tls))
        self._check_callers = config.tls.require_client_cert
        self.refusals = PeerRefusals(logger, f"controller n{config.node_id}")
        self.config = config
        self.node = node
        self.loop = loop
        self._slots = threading.BoundedSemaphore(REQUESTS_INFLIGHT_MAX)

    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        try:
            return self._do_action(context, action)
        except flight.FlightError:
            raise
        except Exception as err:  # shell boundary: this call fails alone, without a traceback
            logger.exception("controller action %.40r failed", action.type)
            raise _bad_request(type(err).__name__, "INTERNAL_ERROR") from None

    def _do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        body = action.body.to_pybytes() if action.body is not None else b""
        if len(body) > REQUEST_BODY_BYTES_MAX:
            raise _bad_request(f"body of {len(body)} bytes exceeds {REQUEST_BODY_BYTES_MAX}")
        target = action_target(action.type, body)
        spec = ACTIONS.get(action.type)
        if spec is None:
            self.auth.principal_of(context, "DO_ACTION", target)  # strangers learn nothing
            raise _bad_request(f"unknown action {action.type[:40]!r}; known: {sorted(ACTIONS)}",
                               "UNKNOWN_ACTION")
        request_type, reply_type = spec
        try:
            parsed = json.loads(body or b"{}")
            request = request_type.from_json(parsed) if request_type is not None else None
        except (ValueError, RecursionError, CodecError) as err:  # JSONDecodeError: ValueError
            raise _bad_request(f"{action.type}: {str(err)[:300]}") from None
        self.auth.check(context, action.type, "DO_ACTION", target,
                        parsed if isinstance(parsed, dict) else {})
        if self._check_callers:  # also for a signed call: a user cannot speak for a broker
            self._check_caller(context, action.type, request)
        if not self._slots.acquire(blocking=False):
            return iter([json.dumps(reply_type(status="BUSY").to_json()).encode()])
        try:
            future = asyncio.run_coroutine_threadsafe(self.node.handle(action.type, request),
                                                      self.loop)
            try:
                reply = future.result(timeout=self.config.request_timeout_ms / 1000 + 1)
            except concurrent.futures.TimeoutError:
                future.cancel()
                reply = reply_type(status="BUSY")
        finally:
            self._slots.release()
        return iter([json.dumps(reply.to_json()).encode()])

    def _check_caller(self, context: Any, action: str, request: Any) -> None:
        caller = context.peer_identity().decode(errors="replace")
        refusal = member_refusal(parse_identity(caller), action, request, self._address_of)
        if refusal is not None:
            host = context.peer().rpartition(":")[0]  # "ipv4:1.2.3.4:port": the port varies
            self.refusals.refuse(host, caller, refusal)
            raise flight.FlightUnauthorizedError(f"controller error FORBIDDEN: {refusal}")

    def _address_of(self, broker_name: str, broker_id: int) -> str | None:
        # read from a Flight thread: the state's replica sets are replaced, never mutated
        replica = self.node.state.replica_info(broker_name)
        members = () if replica is None else replica.brokers
        return next((m.broker_address for m in members if m.broker_id == broker_id), None)

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        self.auth.principal_of(context, "LIST_ACTIONS", b"")
        return [(name, (spec[0] or spec[1]).__doc__ or "") for name, spec in
                sorted(ACTIONS.items())]
