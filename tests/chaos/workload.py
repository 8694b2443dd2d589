"""The chaos workload: client threads that record everything they do in the history.

    Producers   N threads, each one `Producer(idempotent=True)` with the controllers as its only
                address (routes from the controller), sending unique values `<run>:p<i>:<seq>`
                with keys `k<seq % 8>` and tags `t<seq % 3>` at a paced rate. A send is `ok`
                (PUT_OK with its queue and offset, or `duplicate`: a retry the broker had
                stored), else `info` (the client gave up: it may be stored). An ack names
                its replica set: the set of the broker its last attempt went to (the client's
                routes; an idempotent retry stays in its first attempt's set). Send `seq` of
                producer i first goes to master (i + seq) of the controller's route list, like
                RocketMQ's producer rotating over brokers per message: the client alone stays
                on one master until it fails, so after a few failovers every producer sat on
                one set and the other got no writes for minutes (seed 404, faults 55-160).
                Only the replica sets that take the topic's writes are in that rotation
                (TopicRoutes: the topic's permission on each set, as the Spark sink asks):
                a set drained from the topic (`drain`) gets no new sends, one added and
                extended onto it (`add-set`) gets its share.
    Consumers   one per replica set (one more when a set is added), all in one consumer
                group: pull every queue of the set in turn (long polls), record each
                poll, and commit the group's offsets to the set's master every
                COMMIT_EVERY_S.
    Observer    once a second: each controller's recent elections (controller_status), the
                replica sets' master, epoch and SyncStateSet (cluster_list), and the group's
                committed offsets read back from each set.
Every thread is bounded by its stop event and the client's deadlines; errors are recorded,
never raised, except a bug in the thread itself (then `error` is set and the run fails).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from connector import Admin, ClientConfig, Consumer, Producer
from connector.client import controller_cluster_list
from connector.client.discovery import _alive_masters
from connector.client.routes import ReplicaSet, writable_topics
from connector.errors import RoutesUnavailableError
from connector.protocol import RetriableError, RocketHAError, status_for
from ha.cluster.controllers import controller_status
from tests.chaos.history import History

__all__ = ["GROUP", "TOPIC", "ConsumerWorker", "Observer", "ProducerWorker", "SetAdmin",
           "TopicRoutes", "client_config", "route_index"]

TOPIC = "chaos"
GROUP = "chaos-group"
KEYS = 8
COMMIT_EVERY_S = 0.5
OBSERVE_EVERY_S = 1.0
POLL_WAIT_MS = 100
OBSERVE_TIMEOUT_MS = 1500
ROUTES_EVERY_S = 0.5  # TopicRoutes: how often the topic's writable sets are asked again


def route_index(endpoints: tuple[str, ...], set_of_member: dict[str, str],
                writable: tuple[str, ...], turn: int) -> int:
    """The client's broker_index for send number `turn`: the master (in `endpoints`, the
    controller's alive masters) of writable set `turn % len(writable)`; `turn` itself (a
    rotation over every master) while the writable sets or that set's master are unknown."""
    if writable:
        wanted = writable[turn % len(writable)]
        for index, endpoint in enumerate(endpoints):
            if set_of_member.get(endpoint) == wanted:
                return index
    return turn


def client_config(controller_addr: str, *, request_timeout_ms: int = 3000) -> ClientConfig:
    return ClientConfig(controller=controller_addr, request_timeout_ms=request_timeout_ms,
                        send_deadline_ms=10_000, retries_max=60, backoff_max_ms=300)


class SetAdmin(Admin):
    """Admin calls to one replica set's master (the controller's alive master of that set): a
    group's offsets are committed on, and read back from, the master of the set that holds
    the queue (a slave's copy may lag, which is no regression of the group's offsets)."""

    def __init__(self, config: ClientConfig, broker_name: str) -> None:
        super().__init__(config)
        self.broker_name = broker_name

    def _controller_endpoints(self, controller: str) -> tuple[str, ...]:
        cluster = controller_cluster_list(controller, self.config.request_timeout_ms)
        for name, address in _alive_masters(cluster):
            if name == self.broker_name:
                return (address,)
        raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                             f"{self.broker_name} has no alive master")


class _Worker:
    def __init__(self, name: str) -> None:
        self.error: BaseException | None = None
        self.stop_event = threading.Event()
        self._thread = threading.Thread(target=self._guarded, name=name, daemon=True)

    def start(self) -> _Worker:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self.stop_event.set()
        self._thread.join(timeout=timeout_s)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as err:  # noqa: BLE001 - reported by the run
            self.error = err

    def _run(self) -> None:
        raise NotImplementedError


class TopicRoutes(_Worker):
    """The replica sets that take writes of TOPIC now (`writable`, sorted), asked every
    ROUTES_EVERY_S: the controller's alive masters, and the topic's permission on each
    (connector.client.routes.writable_topics). A set that does not answer keeps what it last
    said (a set whose master is down for a moment is not taken out of the rotation). Each
    change is recorded (`topic_routes`)."""

    def __init__(self, history: History, controller_addr: str) -> None:
        super().__init__("routes")
        self.history, self.controller_addr = history, controller_addr
        self.writable: tuple[str, ...] = ()
        self._known: dict[str, bool] = {}

    def _run(self) -> None:
        self.refresh()
        while not self.stop_event.wait(ROUTES_EVERY_S):
            self.refresh()

    def refresh(self) -> None:
        try:
            cluster = controller_cluster_list(self.controller_addr, OBSERVE_TIMEOUT_MS)
        except RocketHAError:
            return
        for name, master in _alive_masters(cluster):
            try:
                self._known[name] = TOPIC in writable_topics(ReplicaSet(name, (master,)),
                                                             OBSERVE_TIMEOUT_MS)
            except (RocketHAError, RoutesUnavailableError):
                continue
        writable = tuple(sorted(name for name, takes in self._known.items() if takes))
        if writable != self.writable:
            self.history.add("routes", "ok", "topic_routes", writable=list(writable))
            self.writable = writable


class ProducerWorker(_Worker):
    def __init__(self, history: History, config: ClientConfig, run: str, index: int,
                 rate_per_s: float, topic_routes: TopicRoutes) -> None:
        super().__init__(f"p{index}")
        self.history, self.config, self.run, self.index = history, config, run, index
        self.topic_routes = topic_routes
        self.interval_s = 1.0 / rate_per_s
        self.process = f"p{index}"
        self._endpoint = ""  # the broker the last put attempt went to

    def _run(self) -> None:
        producer = Producer(self.config, idempotent=True)
        channel = producer._channel  # send_batch's synchronous channel (not the lanes)
        pinned = channel._pinned

        def watched(endpoint: str, home: list[str]) -> str:
            self._endpoint = pinned(endpoint, home)  # where this attempt goes
            return self._endpoint
        channel._pinned = watched  # type: ignore[method-assign]
        self._channel = channel
        next_s, seq = time.monotonic(), 0
        try:
            while not self.stop_event.is_set():
                next_s = max(next_s + self.interval_s, time.monotonic() - 1.0)
                self.stop_event.wait(max(0.0, next_s - time.monotonic()))
                self._send(producer, seq)
                seq += 1
        finally:
            producer.close()

    def _send(self, producer: Producer, seq: int) -> None:
        value = f"{self.run}:{self.process}:{seq}"
        key, tags = f"k{seq % KEYS}", f"t{seq % 3}"
        self.history.add(self.process, "invoke", "send", value=value, key=key, tags=tags,
                         idempotent=True)
        try:
            # send_batch of one row: the synchronous channel, whose attempts `watched` sees
            # (Producer.send goes through the asynchronous lanes, one channel per lane)
            routes = producer._routes  # rotate over the writable sets' masters (docstring)
            routes.broker_index = route_index(routes.endpoints, routes.set_of_member,
                                              self.topic_routes.writable, self.index + seq)
            [result] = producer.send_batch(TOPIC, [{"body": value.encode(), "key": key,
                                                    "tags": tags}])
        except RocketHAError as err:
            self.history.add(self.process, "info", "send", value=value, error=err.name)
            return
        if result.status == "PUT_OK":
            replica_set = self._channel._routes.set_of_member.get(self._endpoint)
            self.history.add(self.process, "ok", "send", value=value, queue=result.queue_id,
                             offset=result.queue_offset, set=replica_set,
                             duplicate=result.queue_id < 0)
        else:
            self.history.add(self.process, "info", "send", value=value, error=result.status)


class ConsumerWorker(_Worker):
    def __init__(self, history: History, config: ClientConfig, broker_name: str, index: int,
                 queues: int) -> None:
        super().__init__(f"c{index}")
        self.history, self.config, self.broker_name = history, config, broker_name
        self.process = f"c{index}"
        self.queues = queues
        self.next_offsets = [0] * queues
        self._committed = [0] * queues

    def _run(self) -> None:
        consumer = Consumer(self.config, broker_name=self.broker_name)
        admin = SetAdmin(self.config, self.broker_name)
        commit_at = time.monotonic() + COMMIT_EVERY_S
        while not self.stop_event.is_set():
            for queue_id in range(self.queues):
                self._poll(consumer, queue_id)
            if time.monotonic() >= commit_at:
                self._commit(admin)
                commit_at = time.monotonic() + COMMIT_EVERY_S

    def _poll(self, consumer: Consumer, queue_id: int) -> None:
        asked = self.next_offsets[queue_id]
        self.history.add(self.process, "invoke", "poll", set=self.broker_name, queue=queue_id,
                         offset=asked)
        try:
            result = consumer.pull(TOPIC, queue_id, asked, max_messages=256,
                                   max_wait_ms=POLL_WAIT_MS)
        except RocketHAError as err:
            self.history.add(self.process, "fail", "poll", set=self.broker_name,
                             queue=queue_id, error=err.name)
            self.stop_event.wait(0.05)
            return
        offsets = result.table.column("queue_offset").to_pylist()
        bodies = result.table.column("body").to_pylist()
        self.history.add(self.process, "ok", "poll", set=self.broker_name, queue=queue_id,
                         msgs=[[o, b.decode(errors="replace")]
                               for o, b in zip(offsets, bodies, strict=True)],
                         next=result.next_queue_offset, status=result.status)
        if offsets:
            self.next_offsets[queue_id] = max(asked, offsets[-1] + 1)

    def _commit(self, admin: SetAdmin) -> None:
        for queue_id in range(self.queues):
            offset = self.next_offsets[queue_id]
            if offset == self._committed[queue_id]:
                continue
            self.history.add(self.process, "invoke", "commit", group=GROUP,
                             set=self.broker_name, queue=queue_id, offset=offset)
            try:
                admin.commit_offset(GROUP, TOPIC, queue_id, offset)
            except RocketHAError as err:
                self.history.add(self.process, "info", "commit", group=GROUP,
                                 set=self.broker_name, queue=queue_id, error=err.name)
                continue
            self.history.add(self.process, "ok", "commit", group=GROUP, set=self.broker_name,
                             queue=queue_id, offset=offset)
            self._committed[queue_id] = offset


class Observer(_Worker):
    def __init__(self, history: History, controller_addr: str, controllers: list[str],
                 replica_sets: list[str]) -> None:
        super().__init__("observer")
        self.history = history
        self.controller_addr = controller_addr
        self.controllers = controllers
        self.replica_sets = replica_sets
        self.config = ClientConfig(controller=controller_addr,
                                   request_timeout_ms=OBSERVE_TIMEOUT_MS, retries_max=1,
                                   send_deadline_ms=OBSERVE_TIMEOUT_MS * 2)

    def _run(self) -> None:
        while not self.stop_event.wait(OBSERVE_EVERY_S):
            self.observe()

    def observe(self) -> None:
        """One round (also called once more at the end of the run)."""
        for endpoint in self.controllers:
            status = controller_status(endpoint, timeout_s=OBSERVE_TIMEOUT_MS / 1000)
            if status is not None:
                self.history.add("observer", "ok", "elections", controller=endpoint,
                                 role=status.get("role"),
                                 records=status.get("recent_elections", []))
        try:
            listing = controller_cluster_list(self.controller_addr, OBSERVE_TIMEOUT_MS)
        except RocketHAError:
            listing = {}
        for entry in listing.get("replica_sets", []):
            replica: dict[str, Any] = entry["replica"]
            self.history.add("observer", "ok", "replica_state", set=replica["broker_name"],
                             master_broker_id=replica.get("master_broker_id"),
                             master_epoch=replica.get("master_epoch", 0),
                             sync_state_set=replica.get("sync_state_set", []))
        for broker_name in self.replica_sets:
            self.history.add("observer", "invoke", "read_commit", group=GROUP, set=broker_name)
            try:
                offsets = SetAdmin(self.config, broker_name).query_offsets(GROUP, TOPIC)
            except RocketHAError as err:
                self.history.add("observer", "fail", "read_commit", group=GROUP,
                                 set=broker_name, error=err.name)
                continue
            self.history.add("observer", "ok", "read_commit", group=GROUP, set=broker_name,
                             offsets={str(q): o for q, o in offsets.items()})
