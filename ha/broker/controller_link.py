"""A broker's link to the controller (controller mode): register, heartbeat, learn its role.

Layout (threads and calls):

    ControllerLink thread (one per broker)
        register_broker ──> leader (NOT_LEADER -> leader_address, at most controllerRedirectsMax)
        every brokerHeartbeatInterval:
            broker_heartbeat ──> every controller in controllerAddr, in parallel (each keeps
                                 its own liveness table); the leader's reply has the RoleChange
        on a RoleChange newer than the last one seen -> on_role(change) (the broker acts)
        on every leader's reply with this broker's role -> on_confirm(change, sent_ms,
                                 controller timeout): the master lease, from the heartbeat's
                                 send time (monotonic ms), never from the reply's arrival,
                                 less the reply's credit_behind_ms (a late heartbeat)
        every heartbeat echoes the clock of the last reply from that controller and how long
                                 ago it came (controller/liveness.py heartbeat_credit_ms)

    ControllerClient.call(action, request, reply_type)
        one pass of the shared leader search (conf/controller_addresses.py): the cached
        leader, then each configured address; NOT_LEADER hints followed; bounded by
        controllerRedirectsMax hops per address and controllerRequestTimeoutMs per call.

States of the link:

    UNREGISTERED --register OK--> REGISTERED (broker_id known; heartbeats flow)
         ^  |                         |
         |  +--no controller answers--+--> stays, retried every heartbeat interval
         +---- BROKER_NOT_REGISTERED (the controller forgot us: register again)

The controller being down, slow or partitioned never stops the broker (docs/design.md §5.6): the
link
only reports; the broker keeps its last role until a newer epoch arrives. The link imports
`controller.api` (messages) only, never controller internals (docs/design.md §2).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pyarrow import flight

from conf.controller_addresses import ANSWERED, LeaderSearch, NotLeader, Unavailable
from conf.protocol import DOCS_PAGE, LOCAL, VERSION_HEADER, refusal
from conf.signing import Credentials, action_target, sign_headers
from conf.tls import NO_TLS, ClientTLS, connect_flight
from controller.api import (
    TOPICS_MAX,
    AuthData,
    AuthDataReply,
    BrokerHeartbeat,
    CodecError,
    HeartbeatReply,
    JsonMessage,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    RoleChange,
    TopicInfo,
)
from ha.broker.metadata import TopicConfig
from ha.replication.role_core import newer

__all__ = ["ControllerClient", "ControllerLink", "ControllerUnavailableError", "HeartbeatState"]

logger = logging.getLogger("rocketha.broker.controller")

# While a slave has lost its master it heartbeats this often (at most), so the role the
# controller gives after the election arrives within this time, not brokerHeartbeatInterval.
FAST_HEARTBEAT_INTERVAL_MS = 100
_R = TypeVar("_R", bound=JsonMessage)


class ControllerUnavailableError(ConnectionError):
    """No configured controller answered (or only with redirects past the bound)."""


class ControllerClient:
    """DoAction JSON calls to the controller group's leader, following NOT_LEADER."""

    def __init__(self, addresses: Sequence[str], request_timeout_ms: int,
                 redirects_max: int, tls: ClientTLS = NO_TLS,
                 credentials: Credentials | None = None) -> None:
        if not addresses:
            raise ValueError("controllerAddr: no controller address")
        self._credentials = credentials  # innerClientCredentialsFile: every call is signed
        self.addresses = tuple(addresses)
        self._timeout_s = request_timeout_ms / 1000.0
        self._redirects_max = redirects_max
        self._tls = tls
        self._leader: str | None = None
        self._lock = threading.Lock()

    @property
    def leader(self) -> str | None:
        return self._leader

    def call_one(self, address: str, action: str, request: JsonMessage | None,
                 reply_type: type[_R]) -> _R:
        """One call to one address; raises ControllerUnavailableError on any transport error
        or a reply that does not decode."""
        body = json.dumps(request.to_json() if request is not None else {}).encode()
        try:
            client = connect_flight(address, self._tls)
        except OSError as err:  # a certificate file is unreadable
            raise ControllerUnavailableError(f"{address} {action}: {err}") from err
        try:
            headers = [] if self._credentials is None else sign_headers(
                self._credentials, "DO_ACTION", action_target(action, body),
                int(time.time() * 1000))
            options = flight.FlightCallOptions(timeout=self._timeout_s,
                                               headers=[VERSION_HEADER, *headers])
            results = list(client.do_action(flight.Action(action, body), options))
            if len(results) != 1:
                raise ControllerUnavailableError(f"{address} {action}: {len(results)} results")
            return reply_type.from_json(json.loads(results[0].body.to_pybytes()))
        except (flight.FlightError, OSError, ValueError, CodecError) as err:
            raise ControllerUnavailableError(f"{address} {action}: {err}") from err
        finally:
            client.close()

    def call(self, action: str, request: JsonMessage | None, reply_type: type[_R]) -> _R:
        """Call the leader: one pass of the shared leader search (conf/controller_addresses.py),
        the cached leader first, then every address; a NOT_LEADER reply naming a leader is
        followed (at most redirects_max hops per starting address). Every call is bounded by
        the request timeout, the pass by its addresses and hops: the link thread never stalls
        on a controller group without a leader, it tries again at its next round."""
        with self._lock:
            first = self._leader
        search = LeaderSearch(self.addresses, hops_max=self._redirects_max, preferred=first)
        while (step := search.next_address()) is not None:  # bounded by the search
            try:
                reply = self.call_one(step.address, action, request, reply_type)
            except ControllerUnavailableError as err:
                search.on_answer(step.address, Unavailable(str(err)))
                continue
            if getattr(reply, "status", "OK") == "NOT_LEADER":
                search.on_answer(step.address, NotLeader(getattr(reply, "leader_address", None)))
                continue
            search.on_answer(step.address, ANSWERED)
            with self._lock:
                self._leader = step.address
            return reply
        with self._lock:
            self._leader = None
        raise ControllerUnavailableError(f"{action}: no controller leader answered ("
                                         f"{search.describe() or 'no controller'})")


class HeartbeatState:
    """What the broker reports each heartbeat (read by the link thread)."""

    __slots__ = ("confirm_log_position", "leaving", "master_epoch", "master_epoch_abandoned",
                 "master_lease_lapsed", "master_unreachable_epoch", "max_log_position",
                 "topics")

    def __init__(self) -> None:
        self.master_epoch = 0
        self.max_log_position = 0
        self.confirm_log_position = 0
        self.topics: tuple[TopicInfo, ...] = ()  # at most controller.api.TOPICS_MAX
        self.master_unreachable_epoch = 0  # a slave that lost its master (0: none)
        self.master_lease_lapsed = False  # a master whose lease had lapsed before the read
        self.master_epoch_abandoned = 0  # a restarted master refusing its old epoch (0: none)
        self.leaving = False  # lame duck: about to stop (ha/broker/handover.py)


class HeartbeatTopics:
    """The topics a heartbeat reports, built again only when they changed.

    Why: each heartbeat (1 s) rebuilt a TopicInfo per topic, ~1.4 ms of CPU at 1,250 topics
    holding the GIL the broker's puts need (docs/benchmarks/scale.md, issue 42). The topic
    list holds the same config objects while none changed, so the compare is one identity
    check per topic. Called by the link thread only."""

    def __init__(self) -> None:
        self._topics: list[TopicConfig] = []
        self._infos: tuple[TopicInfo, ...] = ()

    def __call__(self, topics: list[TopicConfig]) -> tuple[TopicInfo, ...]:
        if topics != self._topics:
            self._infos = tuple(TopicInfo(topic.name, topic.read_queue_nums,
                                          topic.write_queue_nums, topic.perm)
                                for topic in topics)
            self._topics = topics
        return self._infos


class ControllerLink:
    """Registers this broker and heartbeats every controller; reports role changes."""

    def __init__(self, client: ControllerClient, *, cluster_name: str, broker_name: str,
                 broker_address: str, heartbeat_interval_ms: int,
                 report: Callable[[], HeartbeatState],
                 on_role: Callable[[RoleChange], None],
                 on_confirm: Callable[[RoleChange, int, int], None] | None = None,
                 on_auth: Callable[[AuthData], None] | None = None) -> None:
        self.client = client
        # users/ACLs: fetched (get_auth_data) when a heartbeat reply names a newer version
        self._on_auth = on_auth
        self.auth_version = -1  # the version last handed to on_auth
        self._auth_wanted = -1
        self._cluster_name = cluster_name
        self._broker_name = broker_name
        self._address = broker_address
        self._interval_s = heartbeat_interval_ms / 1000.0
        self._report = report
        self._on_role = on_role
        self._on_confirm = on_confirm
        self.broker_id: int | None = None
        self.role: RoleChange | None = None
        self.heartbeats_ok = 0
        self.heartbeats_failed = 0  # no answer from one controller (it is down or slow)
        self._master_silent = False  # the last reply said the master went quiet
        self.version_refusal = ""  # the last line refusing a controller's version ("": none)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=len(client.addresses), thread_name_prefix="controller-heartbeat")
        self._in_flight: dict[str, concurrent.futures.Future[HeartbeatReply]] = {}
        # per controller address: (controller_ms, controller_clock, our monotonic ms when
        # that reply came), echoed in the next heartbeat to it
        self._echoes: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.Lock()  # replies arrive on pool threads
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._registered = threading.Event()
        self._thread = threading.Thread(target=self._run, name="controller-link", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Heartbeat now (something the controller should hear at once happened)."""
        self._wake.set()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._thread.join(timeout=10 * self._interval_s + 10)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def wait_registered(self, timeout_s: float) -> bool:
        return self._registered.wait(timeout_s)

    def info(self) -> dict[str, Any]:
        """For broker_info: the id and role the controller gave this broker."""
        role = self.role
        return {"broker_id": self.broker_id, "leader": self.client.leader,
                "heartbeats_ok": self.heartbeats_ok,
                "heartbeats_failed": self.heartbeats_failed,
                "version_refusal": self.version_refusal,
                "role": role.role if role else None,
                "master_epoch": role.master_epoch if role else None,
                "master_address": role.master_address if role else None,
                "sync_state_set": list(role.sync_state_set) if role else None}

    def _run(self) -> None:
        while not self._stopping.is_set():
            interval_s = self._interval_s
            try:
                if self.broker_id is None:
                    self._register()
                if self.broker_id is not None and (self._heartbeat_all()
                                                   or self._master_silent):
                    # a slave without its master, or whose master the controller has not
                    # heard from for a while: the new role matters now, not in a second
                    interval_s = min(interval_s, FAST_HEARTBEAT_INTERVAL_MS / 1000.0)
                if self._auth_wanted > self.auth_version:
                    self._refresh_auth()
            except Exception:  # the link must outlive any one bad round
                logger.exception("%s: controller round failed", self._broker_name)
            self._wake.wait(interval_s)
            self._wake.clear()

    def _refresh_auth(self) -> None:
        try:
            reply = self.client.call("get_auth_data", None, AuthDataReply)
        except ControllerUnavailableError as err:
            logger.warning("%s: get_auth_data: %s", self._broker_name, err)
            return
        if reply.status != "OK" or reply.auth is None:
            logger.warning("%s: get_auth_data refused: %s", self._broker_name, reply.status)
            return
        assert self._on_auth is not None
        self._on_auth(reply.auth)
        self.auth_version = reply.auth.version
        logger.info("%s: users and ACLs at version %d (%d users, %d policies)",
                    self._broker_name, reply.auth.version, len(reply.auth.users),
                    len(reply.auth.policies))

    def _register(self) -> None:
        request = RegisterBrokerRequest(self._cluster_name, self._broker_name, self._address,
                                        protocol=LOCAL.text())
        try:
            reply = self.client.call("register_broker", request, RegisterBrokerReply)
        except ControllerUnavailableError as err:
            logger.warning("%s: register_broker: %s", self._broker_name, err)
            return
        if self._version_refused(reply.status, reply.protocol, self.client.leader):
            return
        if reply.status != "OK":
            logger.warning("%s: register_broker refused: %s", self._broker_name, reply.status)
            return
        self.broker_id = reply.broker_id
        logger.info("%s: registered at %s as broker id %d", self._broker_name,
                    self.client.leader, reply.broker_id)
        self._registered.set()

    def _heartbeat_all(self) -> bool:
        """One heartbeat to every controller; True when it reports a lost or abandoned master."""
        assert self.broker_id is not None
        # the echo's age runs to before the report is read: a controller's bound on when a
        # heartbeat was made must hold for the positions in it (controller/liveness.py)
        made_ms = int(time.monotonic() * 1000)
        state = self._report()
        request = BrokerHeartbeat(self._cluster_name, self._broker_name, self.broker_id,
                                  self._address, state.master_epoch, state.max_log_position,
                                  state.confirm_log_position, topics=state.topics[:TOPICS_MAX],
                                  master_unreachable_epoch=state.master_unreachable_epoch,
                                  master_lease_lapsed=state.master_lease_lapsed,
                                  master_epoch_abandoned=state.master_epoch_abandoned,
                                  leaving=state.leaving, protocol=LOCAL.text())
        # In parallel and without waiting, so one stopped controller (a full request timeout)
        # does not delay the heartbeats the others need; at most one call per controller is
        # in flight (a slow one is skipped until its call ends).
        for address in self.client.addresses:
            previous = self._in_flight.get(address)
            if previous is not None and not previous.done():
                continue
            sent_ms = int(time.monotonic() * 1000)  # before the request leaves: see on_confirm
            future = self._pool.submit(self.client.call_one, address, "broker_heartbeat",
                                       self._with_echo(request, address, made_ms),
                                       HeartbeatReply)
            self._in_flight[address] = future
            future.add_done_callback(functools.partial(self._on_done, sent_ms, address))
        return state.master_unreachable_epoch > 0 or state.master_epoch_abandoned > 0

    def _with_echo(self, request: BrokerHeartbeat, address: str, now_ms: int) -> BrokerHeartbeat:
        """`request` for `address`, echoing the clock of its last reply (no echo: none came)."""
        with self._lock:
            echo = self._echoes.get(address)
        if echo is None:
            return request
        controller_ms, clock, received_ms = echo
        if received_ms > now_ms:  # a reply that came after the report was read: it may
            return request        # be newer than the report, so it bounds nothing
        return dataclasses.replace(request, echo_controller_ms=controller_ms,
                                   echo_controller_clock=clock,
                                   echo_age_ms=now_ms - received_ms)

    def _on_done(self, sent_ms: int, address: str,
                 future: concurrent.futures.Future[HeartbeatReply]) -> None:
        if future.cancelled():
            return
        try:
            reply = future.result()
        except ControllerUnavailableError as err:
            with self._lock:
                self.heartbeats_failed += 1
            logger.debug("%s: heartbeat: %s", self._broker_name, err)
            return
        received_ms = int(time.monotonic() * 1000)
        with self._lock:
            if reply.controller_ms > 0:
                self._echoes[address] = (reply.controller_ms, reply.controller_clock,
                                         received_ms)
            if not self._version_refused(reply.status, reply.protocol, address):
                self._on_reply(reply, sent_ms)

    def _version_refused(self, status: str, protocol: str, address: str | None) -> bool:
        """True when the controller at `address` refused this broker's protocol version or
        answered with one the rule refuses (conf/protocol.py): its reply is not acted on. The
        line is logged once per change. Only OK replies carry a version (a NOT_LEADER or BUSY
        says nothing about it)."""
        if status not in ("OK", "VERSION_REFUSED"):
            return False
        line = refusal(LOCAL, protocol, f"controller {address}")
        if line is None and status == "VERSION_REFUSED":
            line = (f"controller {address} refused this broker's protocol version "
                    f"{LOCAL.protocol}; see {DOCS_PAGE}")
        if line is not None and line != self.version_refusal:
            logger.error("%s: %s", self._broker_name, line)
        self.version_refusal = line or ""
        return line is not None

    def _on_reply(self, reply: HeartbeatReply, sent_ms: int) -> None:
        if reply.status == "BROKER_NOT_REGISTERED":
            self.broker_id = None
            return
        if reply.status != "OK":
            return
        self.heartbeats_ok += 1
        self._master_silent = reply.master_silent
        if self._on_auth is not None and reply.auth_version > self._auth_wanted:
            self._auth_wanted = reply.auth_version
            self._wake.set()  # the link thread fetches the table now
        change = reply.role
        if change is None or change.broker_id != self.broker_id:
            return
        if self._on_confirm is not None:
            # a late heartbeat: the controller counted it as heard credit_behind_ms before it
            # arrived, so the lease starts that much before its send time (liveness.py)
            self._on_confirm(change, sent_ms - max(0, reply.credit_behind_ms),
                             reply.heartbeat_timeout_ms)
        if newer(change, self.role):
            self.role = change
            logger.info("%s: role %s (master %s, epoch %d, SyncStateSet %s epoch %d)",
                        self._broker_name, change.role, change.master_address,
                        change.master_epoch, list(change.sync_state_set),
                        change.sync_state_set_epoch)
            self._on_role(change)

