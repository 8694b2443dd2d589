"""The broker's admin actions: DoAction with a JSON body, one handler per action.

Topics (create, update, delete, list, get), queue offsets (min/max per queue, offset for a
timestamp), consumer groups (commit, query, list with lag, delete), runtime configuration (get,
set) and the broker's info and statistics. A handler takes the decoded request and returns the
JSON reply; it refuses with RequestError (ha/broker/request_errors.py). Changes of topics and
consumer-group offsets are records in the CommitLog (ha/broker/system_log.py): the action is
answered once the replica set holds the record as it would a message (PUT_OK), else with the
put's status as the error; those actions run on the master only. ListActions lists every
action with its handler's docstring.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from pyarrow import flight

from conf.signing import action_target
from conf.version import VERSION
from connector.protocol import decode_json_object
from ha.broker.config import LIVE_KEYS, BrokerConfig, effective_properties
from ha.broker.live_config import LiveConfig
from ha.broker.metadata import TABLE_FORMATS, TopicConfig
from ha.broker.request_errors import (
    RequestError,
    check_not_internal,
    check_record_put,
    check_topic_name,
    guarded,
    record_limits,
    request_int,
    request_string,
)
from ha.broker.system_log import SystemLog
from ha.broker.table_removal import remove_table
from storage_engine import ConfigError, PutStatus
from storage_engine.tiered import TieredStorageError

__all__ = ["AdminActions"]

# the broker service's handlers log under its name, wherever their code sits
logger = logging.getLogger("ha.broker.service")

_STORED_NAMES = frozenset(status.name for status in PutStatus if status.stored)
_MASTER_ONLY_ACTIONS = frozenset({"create_topic", "update_topic", "delete_topic", "commit_offset",
                                  "delete_group"})


class AdminActions:
    """The DoAction handlers of BrokerService (not usable on its own: they use its config,
    auth, replication, topics, offsets, store, idempotence table, counters, and its
    `_topic_for_read` of ha/broker/consume.py)."""

    # removes a deleted topic's table, waiting for its writer (TopicTables.remove_table, set
    # by ha/broker/main.py); None: no writer runs here, remove it directly
    table_removal: Callable[[str], bool] | None = None
    # the conf file and the changes waiting for a restart (ha/broker/live_config.py; main
    # sets the file's); without a file, live keys change in memory only
    live_config: LiveConfig
    # told each live config change (main: the topic tables' thread)
    config_listeners: list[Callable[[BrokerConfig], None]]
    # the `handover` action: hand the master role to that member (set by ha/broker/main.py in
    # controller mode); returns whether it did and the one-line result
    request_handover: Callable[[int], tuple[bool, str]] | None = None

    def _action_handlers(self) -> dict[str, Callable[[dict[str, Any]], dict[str, Any]]]:
        """The DoAction table, by action name (a handler's docstring is what ListActions says
        of it)."""
        return {
            "broker_info": self._broker_info,
            "broker_stats": self._broker_stats,
            "commit_offset": self._commit_offset,
            "consumer_groups": self._consumer_groups,
            "delete_group": self._delete_group,
            "get_config": self._get_config,
            "set_config": self._set_config,
            "create_topic": self._create_topic,
            "delete_topic": self._delete_topic,
            "get_topic": self._get_topic,
            "list_topics": self._list_topics,
            "offset_for_timestamp": self._offset_for_timestamp,
            "query_offsets": self._query_offsets,
            "queue_offsets": self._queue_offsets,
            "update_topic": self._update_topic,
            "shutdown": self._shutdown,
            "handover": self._handover,
        }

    @guarded
    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        body = action.body.to_pybytes() if action.body is not None else b""
        target = action_target(action.type, body)
        handler = self._actions.get(action.type)
        if handler is None:
            self.auth.principal_of(context, "DO_ACTION", target)  # strangers learn nothing
            raise RequestError("UNKNOWN_ACTION", f"unknown action {action.type!r}; known: "
                               f"{sorted(self._actions)}")
        request = decode_json_object(body or b"{}", f"action {action.type} body")
        principal = self.auth.check(context, action.type, "DO_ACTION", target, request)
        if action.type in _MASTER_ONLY_ACTIONS:
            self.replication.check_writable()
        elif action.type == "query_offsets":
            self.replication.check_offsets_readable()
        self._count("actions")
        reply = handler(request)
        if action.type == "list_topics":  # only the topics this caller may use
            reply["topics"] = [topic for topic in reply["topics"]
                               if self.auth.visible(principal, topic["name"])]
        return iter([json.dumps(reply).encode()])

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        self.auth.check(context, "ListActions", "LIST_ACTIONS", b"", {})
        return [(name, (handler.__doc__ or "").strip()) for name, handler in
                sorted(self._actions.items())]

    def _topic_from_request(self, request: dict[str, Any], *, existing: bool) -> TopicConfig:
        name = request_string(request, "topic")
        check_topic_name(name)
        check_not_internal(name)
        current = self.topics.get(name)
        if existing and current is None:
            raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist")
        default = self.config.default_topic_queue_nums
        base = current or TopicConfig(name, default, default)
        topic = TopicConfig(
            name,
            request_int(request, "read_queue_nums", base.read_queue_nums, 1, 1024),
            request_int(request, "write_queue_nums", base.write_queue_nums, 1, 1024),
            request_int(request, "perm", base.perm, 0, 7),
            _request_table(request, base.table),
        )
        return topic

    def _create_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        """Create (or reconfigure) a topic: topic, read_queue_nums, write_queue_nums, perm,
        table ("none", "delta", "" for the broker's topicTableDefault) (answered once the
        replica set holds it as it would a message: PUT_OK)."""
        return self._put_topic(self._topic_from_request(request, existing=False))

    def _update_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        """Change an existing topic's queue counts, permission or table (answered on
        PUT_OK)."""
        return self._put_topic(self._topic_from_request(request, existing=True))

    def _put_topic(self, topic: TopicConfig) -> dict[str, Any]:
        with record_limits():
            result = self.topics.put(topic, queues_max=self.config.queues_max)
        if result is not None:  # None: the table already had this config
            check_record_put(result, f"change of topic {topic.name}")
        return {"topic": topic.to_json()}

    def _delete_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        """Delete a topic's config and queues (records age out with retention). Its topic
        table stays unless `delete_table` is true: then it is removed from the tier too
        (also when the topic is already gone, so a removal that failed can be asked again)."""
        name = request_string(request, "topic")
        check_topic_name(name)
        check_not_internal(name)
        delete_table = request.get("delete_table", False)
        if not isinstance(delete_table, bool):
            raise RequestError("BAD_REQUEST", "field 'delete_table' must be true or false")
        with record_limits():
            result = self.topics.delete(name)
        if result is None and not delete_table:
            raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist")
        if result is not None:
            check_record_put(result, f"delete of topic {name}")
            self.store.delete_topic(name)
        reply: dict[str, Any] = {"deleted": result is not None}
        if delete_table:
            reply["table_deleted"] = self._remove_table(name)
        return reply

    def _remove_table(self, name: str) -> bool:
        try:
            removed = (self.table_removal(name) if self.table_removal is not None
                       else remove_table(self.config.store, self.config.store_dir, name))
        except (TieredStorageError, ValueError) as err:
            raise RequestError("SERVICE_NOT_AVAILABLE",
                               f"topic {name!r}: its table was not removed: {err}") from None
        logger.info("topic %s: table %s", name, "removed" if removed else "was not there")
        return removed

    def _list_topics(self, request: dict[str, Any]) -> dict[str, Any]:
        """All topic configs."""
        return {"topics": [topic.to_json() for topic in self.topics.all()]}

    def _get_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        """One topic's config."""
        name = request_string(request, "topic")
        topic = self.topics.get(name)
        if topic is None:
            raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist")
        return {"topic": topic.to_json()}

    def _queue_offsets(self, request: dict[str, Any]) -> dict[str, Any]:
        """Min and max (next) queue offset of every queue of a topic."""
        topic = self._topic_for_read(request_string(request, "topic"))
        queues = [{"queue_id": queue_id,
                   "min_queue_offset": self.store.min_queue_offset(topic.name, queue_id),
                   "max_queue_offset": self.store.max_queue_offset(topic.name, queue_id)}
                  for queue_id in range(topic.read_queue_nums)]
        return {"topic": topic.name, "queues": queues}

    def _offset_for_timestamp(self, request: dict[str, Any]) -> dict[str, Any]:
        """First queue offset stored at or after timestamp_ms."""
        topic = self._topic_for_read(request_string(request, "topic"))
        queue_id = request_int(request, "queue_id", None, 0, topic.read_queue_nums - 1)
        timestamp_ms = request_int(request, "timestamp_ms", None, 0, 1 << 62)
        return {"queue_offset": self.store.queue_offset_for_timestamp(
            topic.name, queue_id, timestamp_ms)}

    def _commit_offset(self, request: dict[str, Any]) -> dict[str, Any]:
        """Commit a consumer group's offset for one queue (answered once the replica set
        holds it as it would a message: PUT_OK; else the put's status as the error)."""
        group = request_string(request, "group")
        check_topic_name(group)
        topic = self._topic_for_read(request_string(request, "topic"))
        queue_id = request_int(request, "queue_id", None, 0, topic.read_queue_nums - 1)
        queue_offset = request_int(request, "queue_offset", None, 0, 1 << 62)
        with record_limits():
            result = self.offsets.commit(group, topic.name, queue_id, queue_offset)
        check_record_put(result, f"commit of group {group}")
        return {}

    def _consumer_groups(self, request: dict[str, Any]) -> dict[str, Any]:
        """Every consumer group's committed offsets with each queue's end: lag per queue."""
        groups: dict[str, Any] = {}
        for group, topics in self.offsets.snapshot().items():
            groups[group] = {topic: {queue_id: {
                "committed": committed,
                "max_queue_offset": self.store.max_queue_offset(topic, int(queue_id))}
                for queue_id, committed in queues.items()} for topic, queues in topics.items()}
        return {"groups": groups}

    def _delete_group(self, request: dict[str, Any]) -> dict[str, Any]:
        """Forget a consumer group's committed offsets (GROUP_NOT_FOUND if it has none)."""
        group = request_string(request, "group")
        with record_limits():
            result = self.offsets.delete_group(group)
        if result is None:
            raise RequestError("GROUP_NOT_FOUND", f"consumer group {group!r} has no offsets here")
        check_record_put(result, f"delete of group {group}")
        return {"deleted": True}

    def _get_config(self, request: dict[str, Any]) -> dict[str, Any]:
        """Every key this broker runs with (secrets masked; `key` for one), which of them apply
        at once when set (live_keys), and the changes waiting for a restart."""
        values = effective_properties(self.config, self.live_config.start_properties)
        key = request.get("key")
        if key is not None:
            if not isinstance(key, str):
                raise RequestError("BAD_REQUEST", 'field "key" must be a string')
            values = {key: values[key]} if key in values else {}
        return {"values": values, "live_keys": sorted(LIVE_KEYS),
                "pending_restart": self.live_config.pending_restart(),
                "conf_file": str(self.live_config.path or "")}

    def _set_config(self, request: dict[str, Any]) -> dict[str, Any]:
        """Set one key: checked as at start-up, written to the conf file (atomically, comments
        kept), applied at once if live, else at the next start (restart_needed)."""
        key, value = request_string(request, "key"), request.get("value")
        if not isinstance(value, str):
            raise RequestError("BAD_REQUEST", 'field "value" must be a string')
        try:
            change = self.live_config.change(lambda: self.config, self._apply_config, key,
                                             value)
        except ConfigError as err:
            raise RequestError("BAD_REQUEST", str(err)) from err
        except OSError as err:
            raise RequestError("BAD_REQUEST", f"conf file {self.live_config.path}: {err} "
                               "(nothing changed)") from err
        return change.to_json()

    def _apply_config(self, config: BrokerConfig) -> None:
        """A live change: the handlers read self.config at each call, the listeners (the
        topic tables' thread) get the same object."""
        self.config = config
        for listener in self.config_listeners:
            listener(config)

    def _query_offsets(self, request: dict[str, Any]) -> dict[str, Any]:
        """A consumer group's committed offsets for a topic."""
        group, topic = request_string(request, "group"), request_string(request, "topic")
        return {"group": group, "topic": topic, "offsets": self.offsets.query(group, topic)}

    def _broker_info(self, request: dict[str, Any]) -> dict[str, Any]:
        """Identity, role and log positions."""
        stats = self.store.stats()
        return {
            "broker_cluster_name": self.config.broker_cluster_name,
            "broker_name": self.config.broker_name,
            "broker_id": self.config.broker_id,
            "endpoint": self.endpoint,
            "bind_address": self.config.client_bind_host,
            "pid": os.getpid(),
            "tiered": self._tier_stats(),
            "topic_tables": self.table_stats(),
            "min_log_position": stats.min_log_position,
            "max_log_position": stats.log_position_end,
            "confirm_log_position": stats.confirm_log_position,
            "flushed_log_position": stats.flushed_log_position,
            **self.replication.info(),
            "version": VERSION,
            "handover": self.replication.handover.info(),
            "controller": self.controller_info() if self.controller_info else None,
            # keys set in the conf file that apply at the next start (live_config.py)
            "pending_restart": self.live_config.pending_restart(),
        }

    def _shutdown(self, request: dict[str, Any]) -> dict[str, Any]:
        """Stop this broker as SIGTERM does (a master hands its role over first)."""
        if self.request_stop is None:
            raise RequestError("BAD_REQUEST", "this broker cannot be stopped remotely")
        self.request_stop()
        return {"stopping": True, "broker_name": self.config.broker_name,
                "endpoint": self.endpoint}

    def _handover(self, request: dict[str, Any]) -> dict[str, Any]:
        """A master hands its role to the SyncStateSet member `broker_id` and keeps running as
        its slave (an operator's `elect`; ha/broker/handover.py). Answers once it is known
        (at most handoverTimeoutMs): `handed_over` and the broker's one-line `result`."""
        broker_id = request_int(request, "broker_id", None, 0, 2**31 - 1)
        if self.request_handover is None:
            raise RequestError("BAD_REQUEST", "this broker is not in controller mode")
        handed_over, result = self.request_handover(broker_id)
        logger.info("handover to broker %d asked by an operator: %s", broker_id, result)
        return {"handed_over": handed_over, "result": result,
                "broker_name": self.config.broker_name, "endpoint": self.endpoint}

    def _broker_stats(self, request: dict[str, Any]) -> dict[str, Any]:
        """Request counters and store statistics."""
        with self._counters.lock:
            counters = dict(self._counters.values)
        traffic = self.traffic.snapshot()
        counters["put_batches"] = sum(traffic.put_batches.values())
        counters["put_messages"] = sum(traffic.messages_in.values())
        counters["put_rejected"] = sum(count for status, count in traffic.put_batches.items()
                                       if status not in _STORED_NAMES)
        counters["get_messages"] = sum(traffic.messages_out.values())
        stats = self.store.stats()
        return {
            "counters": counters,
            "uptime_ms": int(time.time() * 1000) - self._started_ms,
            "store": {
                "min_log_position": stats.min_log_position,
                "end_log_position": stats.log_position_end,
                "flushed_log_position": stats.flushed_log_position,
                "confirm_log_position": stats.confirm_log_position,
                "commit_log_segments": stats.commit_log_segments,
                "queue_count": stats.queue_count,
                "unflushed_queues": stats.unflushed_queue_count,
                "flush_count": stats.flush_count,
                "recovered_after_crash": stats.recovered_after_crash,
            },
            "topics": len(self.topics.all()),
            "open_streams": self.open_streams,  # produce streams (bounded by putStreamsMax)
            "idempotence": {"producers": len(self.idempotence.table),
                            "duplicates_dropped": self.idempotence.duplicates_dropped},
            "groups": len(self.offsets.groups()),
            "offset_records": _record_stats(self.offsets),
            "topic_records": _record_stats(self.topics),
            "tiered": self._tier_stats(),
        }


def _record_stats(log: SystemLog[Any]) -> dict[str, int]:
    return {"written": log.records_written, "applied": log.records_applied,
            "applied_queue_offset": log.applied_queue_offset, "lost": log.records_lost,
            "unreadable": log.records_unreadable, "rollbacks": log.rollbacks}


def _request_table(request: dict[str, Any], default: str) -> str:
    """The `table` field of a topic create/update: "none", "delta", or "" (the broker's
    topicTableDefault); absent keeps `default`."""
    value = request.get("table", default)
    if value not in ("", *TABLE_FORMATS):
        raise RequestError("BAD_REQUEST", f"field 'table' must be one of "
                           f"{['', *TABLE_FORMATS]}, got {str(value)[:20]!r}")
    return value
