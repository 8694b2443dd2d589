"""The broker's replication hooks: role checks, the replicated put, metadata sync, broker info.

BrokerService calls into one `Replication` (kept apart from produce.py so the put path stays a
one-line call there):

    role                      put                                            reads
    standalone (1 replica)    store.put_messages                             up to confirm
    SYNC_MASTER               plan (IN_SYNC_REPLICAS_NOT_ENOUGH before any   up to confirm
                              write) -> append -> fsync (SYNC_FLUSH) ->
                              wait for needAckNums replicas up to
                              syncFlushTimeout: PUT_OK / FLUSH_SLAVE_TIMEOUT
                              / SLAVE_NOT_AVAILABLE
    ASYNC_MASTER              append -> fsync (SYNC_FLUSH) -> PUT_OK; the    up to confirm
                              reply says "replication": "ASYNC_MASTER"
    SLAVE                     NOT_MASTER naming the master's endpoint        slaveReadEnable, up
                                                                             to the confirm it got

Metadata: topic configs and consumer-group offsets are records in the CommitLog
(ha/broker/topic_log.py, offset_log.py over ha/broker/system_log.py): written by `put`,
replicated with the log, applied by every replica. A master still ships its topic and offset
snapshots as HA metadata when they change (at most every haMetadataSyncInterval), used only by
a slave whose log lost records to retention.

Runtime roles (controller mode with replicas, `BrokerConfig.runtime_roles`): the broker starts
with neither service and fenced; ha/broker/roles.py calls `become_master` / `become_slave` /
`become_none` as the controller decides. Ordering that keeps the safety rules:
- promotion: fence, stop following, then the steps ha/replication/takeover_core.py plans from the
  log's state (the simulator runs the same plan): cut a partial tail record, raise the confirm
  position to the log's end (docs/design.md §5.4), apply the topic and offset records up to it, open
  the term at the controller's epoch, fsync, start the master service; the caller lifts the
  fence only after the rest of the take-over (idempotence table);
- demotion: fence first (no new put passes `check_writable`; a put already past it is answered
  FLUSH_SLAVE_TIMEOUT by `_fenced_after`), then stop the master service (its waiting puts return
  at once), then follow the new master, whose handshake truncates this log's fork.
A put reads `self.master` after `check_writable`, so it never writes without the service that
must replicate it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from ha.broker.config import BrokerConfig
from ha.broker.handover import HandoverGate
from ha.broker.handover_core import HandoverCore
from ha.broker.offset_log import OffsetLog
from ha.broker.topic_log import TopicLog
from ha.replication.config import BrokerRole
from ha.replication.master_service import MasterService
from ha.replication.put_core import Admission, admit, answer, flush_status, plan_status
from ha.replication.slave_service import SlaveService
from ha.replication.takeover_core import (
    AppendEpoch,
    ConfirmTo,
    CutTail,
    FlushLog,
    LiftFence,
    OpenTerm,
    ReplayState,
    TakeOverLog,
    plan_take_over,
)
from storage_engine import FlushDiskType, MessageBatch, MessageStore, PutResult, PutStatus

__all__ = ["NotMasterError", "Replication", "RoleChangeError"]

logger = logging.getLogger(__name__)

METADATA_BYTES_MAX = 16 << 20
# the end of a replicated master's put reply (`annotate_reply`), built once
_SYNC_MASTER_FIELD = b', "replication": "' + BrokerRole.SYNC_MASTER.value.encode() + b'"}'
_ASYNC_MASTER_FIELD = b', "replication": "' + BrokerRole.ASYNC_MASTER.value.encode() + b'"}'


class RoleChangeError(Exception):
    """A role the controller asked for cannot be taken safely (the broker stays fenced)."""


class NotMasterError(Exception):
    """A write (or, without slaveReadEnable, a read) reached a slave."""

    name = "NOT_MASTER"


class Replication:
    def __init__(self, config: BrokerConfig, store: MessageStore, *, endpoint: str,
                 topics: TopicLog, offsets: OffsetLog) -> None:
        self._config = config
        self._runtime_roles = config.runtime_roles  # (a property of the frozen config)
        self._ha = config.ha
        self._store = store
        self._topics = topics
        self._offsets = offsets
        self._sync_flush = store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self._endpoint = endpoint
        self.master: MasterService | None = None
        self.slave: SlaveService | None = None
        self._fenced: str | None = None  # controller mode: why this broker takes no writes
        self._slave_epoch = -1  # runtime roles: the master epoch the slave service follows
        self.handover = HandoverGate(config.handover_timeout_ms, NotMasterError)
        if config.runtime_roles:
            self._fenced = "waiting for the controller to name this replica set's master"
            return
        if not self._ha.replicated:
            return
        if self._ha.broker_role.is_master:
            self.master = MasterService(store, self._ha, broker_id=config.broker_id,
                                        endpoint=endpoint, metadata_source=self._metadata,
                                        host=config.ha_bind_host, tls=config.tls,
                                        broker_name=config.broker_name).start()
        else:
            self.slave = SlaveService(store, self._ha, broker_id=config.broker_id,
                                      apply_metadata=self._apply_metadata, tls=config.tls,
                                      broker_name=config.broker_name).start()

    @property
    def role(self) -> BrokerRole:
        return self._ha.broker_role

    def close(self) -> None:
        """Stop replicating; then the topic and offset logs write their last snapshots."""
        self._stop_master()
        self._stop_slave()
        self._topics.close()
        self._offsets.close()

    def _stop_master(self) -> None:
        master, self.master = self.master, None
        if master is not None:
            master.close()

    def _stop_slave(self) -> None:
        slave, self.slave = self.slave, None
        self._slave_epoch = -1
        if slave is not None:
            slave.close()

    # -- runtime roles (controller mode) -----------------------------------------------------
    def become_master(self, *, broker_id: int, master_epoch: int,
                      sync_state_set: tuple[int, ...],
                      on_sync_state_set: Callable[[tuple[int, ...]], None],
                      lease_until_ms: int, sync_state_set_epoch: int = 0) -> MasterService:
        """Take over as master of `master_epoch` (fenced until the caller lifts it), with the
        master lease the controller's naming gave (ha/replication/master_core.py)."""
        assert self._config.runtime_roles
        self.fence(f"taking over as master (epoch {master_epoch})")
        self.handover.step(HandoverCore.rearm)  # a term after a handover (the fence holds)
        self._stop_slave()
        self._stop_master()  # a newer epoch for a master: a new term
        store = self._store
        plan = plan_take_over(TakeOverLog(store.log_position_end,
                                          store.complete_log_position_end(),
                                          tuple(store.epochs.entries)), master_epoch)
        if plan.refusal is not None:
            raise RoleChangeError(plan.refusal)
        master: MasterService | None = None
        for effect in plan.effects:  # in order: ha/replication/takeover_core.py
            if isinstance(effect, CutTail):  # a replica's log may end inside a record
                store.cut_tail(effect.log_position)
            elif isinstance(effect, ConfirmTo):
                store.set_confirm_log_position(effect.log_position)
            elif isinstance(effect, ReplayState):  # every topic and offset record in the log,
                self._topics.take_over()  # before writes resume (ha/broker/system_log.py)
                self._offsets.take_over()
            elif isinstance(effect, AppendEpoch):
                store.epochs.append(effect.epoch, effect.start_log_position)
            elif isinstance(effect, FlushLog):  # as durable as a put's bytes: the flush thread
                timeout_ms = store.config.sync_flush_timeout_ms
                if self._sync_flush and not store.wait_flushed(effect.log_position, timeout_ms):
                    raise RoleChangeError(f"the log was not flushed to {effect.log_position} "
                                          f"within {timeout_ms} ms (syncFlushTimeout)")
            elif isinstance(effect, OpenTerm):
                master = self.master = MasterService(
                    store, self._ha, broker_id=broker_id, endpoint=self._endpoint,
                    metadata_source=self._metadata, host=self._config.ha_bind_host,
                    master_epoch=effect.master_epoch, accepted_sync_state_set=sync_state_set,
                    accepted_sync_state_set_epoch=sync_state_set_epoch,
                    on_sync_state_set=on_sync_state_set, lease_until_ms=lease_until_ms,
                    sync_master=self._ha.broker_role is not BrokerRole.ASYNC_MASTER,
                    tls=self._config.tls, broker_name=self._config.broker_name).start()
            elif isinstance(effect, LiftFence):
                pass  # the caller's, after the rest of the take-over (ha/broker/roles.py)
            else:
                raise AssertionError(effect)  # noqa: TRY004 - a broken invariant, not input
        assert master is not None, plan
        return master

    def become_slave(self, *, broker_id: int, master_epoch: int, master_endpoint: str,
                     resolve_master: Callable[[], tuple[str, int] | None],
                     on_link_down: Callable[[], None] | None = None) -> None:
        """Follow the master the controller named in `master_epoch` (fenced from now on)."""
        assert self._config.runtime_roles
        self.fence(f"the controller names {master_endpoint} master (epoch {master_epoch})")
        self.handover.step(HandoverCore.rearm)  # handed over on `elect`: follow (fenced)
        self._stop_master()
        if self.slave is not None and self._slave_epoch == master_epoch:
            return
        self._stop_slave()
        self.slave = SlaveService(self._store, self._ha, broker_id=broker_id,
                                  apply_metadata=self._apply_metadata,
                                  resolve_master=resolve_master, master_epoch_min=master_epoch,
                                  master_endpoint=master_endpoint,
                                  on_link_down=on_link_down, tls=self._config.tls,
                                  broker_name=self._config.broker_name).start()
        self._slave_epoch = master_epoch

    def master_unreachable_epoch(self) -> int:
        """Runtime roles: the epoch of the master this slave follows while it has no link to
        it in TRANSFER (0 otherwise), for the controller's heartbeat."""
        slave = self.slave
        if slave is None or self._slave_epoch <= 0 or not slave.master_unreachable:
            return 0
        return self._slave_epoch

    def become_none(self, reason: str) -> None:
        """The set has no master (or this broker is not in it): take no writes; a slave keeps
        trying its last master, a master stops serving its term."""
        self.fence(reason)
        self._stop_master()

    # -- roles ------------------------------------------------------------------------------
    def _master_hint(self) -> str:
        slave = self.slave
        endpoint = slave.master_endpoint if slave is not None else ""
        return endpoint or f"unknown yet (HA master at {self._ha.master_address})"

    def fence(self, reason: str | None) -> None:
        """Controller mode: refuse writes (NOT_MASTER, `reason` names the master) while the
        controller says another broker is master; None lifts it (this broker is master)."""
        if reason != self._fenced:
            logger.warning("writes %s", f"fenced: {reason}" if reason else "accepted again")
        self._fenced = reason

    def check_writable(self) -> None:
        """NOT_MASTER while fenced or following (ha/replication/put_core.py `admit`)."""
        self._admit()

    def _admit(self, *, writing: bool = False) -> MasterService | None:
        """ha/replication/put_core.py `admit` on this broker's state: NotMasterError when refused,
        else the master service (None: standalone). `writing`: a put about to write, which also
        needs the master service in controller mode. The master is read after the fence."""
        fenced, slave = self._fenced, self.slave
        master = self.master
        admission = admit(fenced=fenced is not None, following=slave is not None,
                          serving=master is not None or not writing,
                          runtime_roles=self._runtime_roles)
        if admission is Admission.FENCED:
            raise NotMasterError(f"broker {self._config.broker_name} is not the master: "
                                 f"{fenced}")
        if admission is Admission.SLAVE:
            raise NotMasterError(f"broker {self._config.broker_name}-{self._config.broker_id} "
                                 f"is a SLAVE; the master is {self._master_hint()}")
        if admission is Admission.CHANGING_ROLE:
            raise NotMasterError(f"broker {self._config.broker_name} is changing role")
        return master

    def writing_master_epoch(self) -> int | None:
        """This broker's master epoch while it takes writes as the master (standalone: the
        epoch file's last, or 0); None while it is a slave, fenced or changing role. Work only
        a master does (topic tables) asks before each pass."""
        try:
            master = self._admit(writing=True)
        except NotMasterError:
            return None
        if master is not None:
            return master.stats().master_epoch
        last = self._store.epochs.last
        return last.epoch if last else 0

    def check_offsets_readable(self) -> None:
        """Controller mode: committed offsets are answered by the master once its take-over
        applied every offset record, and only while its master lease holds (a slave's table,
        or a deposed master's, lags the commits the new master acked: a client reading it
        after the new master would see the group's offset move back); static mode: any broker
        answers. So while no controller renews the lease, offset queries get NOT_MASTER
        (commits go on under the lease rule of ha/replication/master_core.py)."""
        if not self._config.runtime_roles:
            return
        self.check_writable()
        master = self.master
        lease_until_ms = master.stats().lease_until_ms if master is not None else None
        if lease_until_ms is not None and time.monotonic() * 1000 >= lease_until_ms:
            raise NotMasterError(f"broker {self._config.broker_name}: the master lease lapsed "
                                 "(no controller confirmed this master lately); committed "
                                 "offsets are answered once one does")

    def check_readable(self) -> None:
        not_master = self.slave is not None or (self._config.runtime_roles
                                                and self.master is None)
        if not_master and not self._ha.slave_read_enable:
            raise NotMasterError(f"broker {self._config.broker_name}-{self._config.broker_id} "
                                 f"is a SLAVE with slaveReadEnable=false; read from the master "
                                 f"{self._master_hint()}")

    # -- puts -------------------------------------------------------------------------------
    def put(self, batch: MessageBatch) -> PutResult:
        """The put path, through the handover gate (a master handing over holds new puts
        until it knows whether it still is the master: ha/broker/handover.py)."""
        gate = self.handover
        gate.enter()
        try:
            return self._put(batch)
        finally:
            gate.exit()

    def _put(self, batch: MessageBatch) -> PutResult:
        """Every status is ha/replication/put_core.py's answer to what happened."""
        master = self._admit(writing=True)
        if master is None:  # no replication (STANDALONE)
            return self._fenced_after(self._store.put_messages(batch))
        plan = master.plan_put()
        status = plan_status(plan)
        if status is not None:
            return PutResult(status, error=plan.refused)
        result = self._store.append(batch)
        if result.status is not PutStatus.PUT_OK:
            return result
        end = result.log_position_end
        timeout_ms = self._store.config.sync_flush_timeout_ms
        if self._sync_flush:  # wait_flushed is False only once the wait expired
            status = flush_status(self._store.wait_flushed(end, timeout_ms), expired=True)
            if status is not None:
                return dataclasses.replace(result, status=status)
        status = master.replicate(end, plan.need, timeout_ms)  # quorum_status, waiting
        if status is PutStatus.PUT_OK:
            return self._fenced_after(result)
        return dataclasses.replace(result, status=status, error=(
            f"{plan.need} replica(s) needed (master included); SyncStateSet "
            f"{list(master.stats().sync_state_set)}"))

    def _fenced_after(self, result: PutResult) -> PutResult:
        """A put that completed while the broker was deposed is not acknowledged: its fate is
        the new master's (truncated at the fork point or kept), so the client must retry
        (ha/replication/put_core.py `answer`)."""
        fenced = self._fenced
        status = answer(result.status, fenced=fenced is not None)
        if status is result.status:
            return result
        return dataclasses.replace(result, status=status,
                                   error=f"deposed during the put: {fenced}")

    def settle(self, log_position_end: int) -> str:
        """The status a put ending at `log_position_end`, already in the log, has now: the
        flush and quorum waits of `put`, without writing (answers to idempotent duplicates)."""
        self.check_writable()
        timeout_ms = self._store.config.sync_flush_timeout_ms
        if self._sync_flush:
            status = flush_status(self._store.wait_flushed(log_position_end, timeout_ms),
                                  expired=True)
            if status is not None:
                return status.name
        master = self.master  # the fence was checked before the wait, as for a put
        if master is None:
            if self._config.runtime_roles:
                raise NotMasterError(f"broker {self._config.broker_name} is changing role")
            return self._fenced_after(PutResult(PutStatus.PUT_OK)).status.name
        plan = master.plan_put()
        status = plan_status(plan)
        if status is not None:
            return status.name
        status = master.replicate(log_position_end, plan.need, timeout_ms)
        return self._fenced_after(PutResult(status)).status.name

    def annotate_reply(self, encoded: bytes) -> bytes:
        """Add `"replication": role` to a put reply's JSON on a replicated master."""
        master = self.master
        if master is None:
            return encoded
        assert encoded.endswith(b"}"), encoded[-20:]
        return encoded[:-1] + (_SYNC_MASTER_FIELD if master.sync else _ASYNC_MASTER_FIELD)

    # -- metadata ---------------------------------------------------------------------------
    def _metadata(self) -> bytes:
        return json.dumps({**self._topics.metadata_json(), **self._offsets.metadata_json()},
                          sort_keys=True).encode()

    def _apply_metadata(self, payload: bytes) -> None:
        if len(payload) > METADATA_BYTES_MAX:
            logger.warning("ignoring metadata of %d bytes (> %d)", len(payload),
                           METADATA_BYTES_MAX)
            return
        try:
            decoded = json.loads(payload)
            if not isinstance(decoded, dict):
                raise TypeError("metadata is a JSON object")
            self._topics.note_master_snapshot(decoded)
            self._offsets.note_master_snapshot(decoded)
        except (ValueError, KeyError, TypeError, RecursionError) as err:
            logger.warning("ignoring malformed metadata from the master: %.300s", err)

    # -- info -------------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """The replication fields of `broker info`: `role` is MASTER or SLAVE (as the controller
        will report it), `broker_role` the configured brokerRole."""
        master = self.master
        if master is not None:
            stats = master.stats()
            return {
                "role": "MASTER",
                "broker_role": (BrokerRole.SYNC_MASTER if master.sync
                                else BrokerRole.ASYNC_MASTER).value,
                "master_epoch": stats.master_epoch,
                "sync_state_set": list(stats.sync_state_set),
                "master_lease_left_ms": (None if stats.lease_until_ms is None else max(
                    0, stats.lease_until_ms - int(time.monotonic() * 1000))),
                "accepted_sync_state_set": (None if stats.accepted_sync_state_set is None
                                            else list(stats.accepted_sync_state_set)),
                "need_ack_nums": stats.need_ack_nums, "in_sync_replicas": stats.in_sync_replicas,
                "ha_listen_port": master.listen_port,
                # what slaves dial (brokerIP2), not the bind address (haBindAddress)
                "ha_address": f"{self._config.ha_host}:{master.listen_port}",
                "slaves": [{"broker_id": link.broker_id, "state": link.state,
                            "acked_log_position": link.acked_log_position,
                            "in_sync_state_set": link.in_sync_state_set}
                           for link in stats.links],
            }
        slave = self.slave
        if slave is not None:
            slave_stats = slave.stats()
            return {
                "role": "SLAVE", "broker_role": "SLAVE",
                "master_epoch": slave_stats.master_epoch,
                "master_endpoint": slave_stats.master_endpoint,
                "ha_master_address": self._ha.master_address,
                "link_state": slave_stats.state.value,
                "last_refusal": slave_stats.last_refusal,
                "slave_read_enable": self._ha.slave_read_enable,
            }
        last = self._store.epochs.last
        return {"role": "NONE" if self._config.runtime_roles else "MASTER",
                "broker_role": self.role.value, "master_epoch": last.epoch if last else 0}
