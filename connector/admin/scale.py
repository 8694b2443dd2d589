"""`rocketha-admin topic update --topic T --add-broker-name broker-c [--queues N]` and
`--remove-broker-name broker-c`: extend a topic onto a replica set, or drain it from one.

Why per replica set: a topic's queues live on the sets it was created on (RocketMQ's
`updateTopic -b` per broker). A set added to a running cluster (`rocketha-cluster add-set`)
holds no topic until one is extended onto it; producers and Spark queries then find its
queues at their next route refresh (a running streaming query reads each new queue from its
earliest offset, connector/spark/datasource.py latestOffset).

Extending copies the topic's config from a set that has it (queue counts, permission,
table), with the command's own fields on top. Draining turns the set's write permission off
(perm 4, read only): the broker refuses new puts there, the Spark sink and producers go to
the other sets, and readers go on reading what it holds. The command then lists what is left
to read there: each group's lag on that set, and the topic table's. The set may be removed
(`rocketha-cluster drop-set`) once nothing lags.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from connector.admin.output import Output, fail
from connector.admin.target import Target
from connector.client.routes import PERM_WRITE
from connector.protocol import RocketHAError

__all__ = ["PERM_READ", "TABLE_ROW", "drain_topic", "extend_topic", "extended_fields",
           "group_lag_rows", "table_lag_row"]

TABLE_ROW = "(topic table)"  # the `group` of the drain report's row for the topic's table
PERM_READ = 4  # RocketMQ's read permission bit, as the broker keeps it (ha/broker/metadata.py)
_COPIED = ("read_queue_nums", "write_queue_nums", "perm", "table")


def extended_fields(template: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The config a topic gets on the set it is extended onto: `template` (its config on a
    set that has it) for what the command does not say, `given` (the command's fields, None
    for unsaid) for the rest."""
    fields = {key: template[key] for key in _COPIED if key in template}
    fields.update({key: value for key, value in given.items() if value is not None})
    return fields


def group_lag_rows(groups: Mapping[str, Any], topic: str, broker_name: str
                   ) -> list[dict[str, Any]]:
    """One row per (group, queue) of `topic` in a `consumer_groups` reply of one set: what
    each group has left to read there (lag 0: done with that queue)."""
    rows = []
    for group, topics in sorted(groups.items()):
        for queue, entry in sorted(topics.get(topic, {}).items(), key=lambda kv: int(kv[0])):
            rows.append({"replica_set": broker_name, "group": group, "queue_id": int(queue),
                         "committed": entry["committed"],
                         "max_queue_offset": entry["max_queue_offset"],
                         "lag": max(0, entry["max_queue_offset"] - entry["committed"])})
    return rows


def table_lag_row(info: Mapping[str, Any], topic: str, broker_name: str
                  ) -> dict[str, Any] | None:
    """The row for `topic`'s table in a set master's broker_info (messages the table has not
    taken in yet), None when the topic has no table there."""
    table = ((info.get("topic_tables") or {}).get("topics") or {}).get(topic)
    if not table or table.get("lag_messages") is None:
        return None
    return {"replica_set": broker_name, "group": TABLE_ROW, "queue_id": None,
            "committed": None, "max_queue_offset": None, "lag": int(table["lag_messages"])}


def _all_sets(target: Target) -> Target:
    return dataclasses.replace(target, broker_name=None)


def extend_topic(target: Target, topic: str, given: Mapping[str, Any], broker_name: str,
                 out: Output) -> int:
    """Create `topic` on `broker_name` with the config it has on the other sets."""
    sets = {s.broker_name: s for s in _all_sets(target).sets()}
    if broker_name not in sets:
        return fail(f"--add-broker-name {broker_name}: no replica set of that name has an "
                    f"alive broker (sets: {', '.join(sorted(sets)) or 'none'})", 2)
    template = None
    for name in sorted(sets):
        if name == broker_name:
            continue
        try:
            template = target.admin_of(sets[name].endpoints).get_topic(topic)
            break
        except RocketHAError as err:
            if err.name != "TOPIC_NOT_EXIST":
                raise
    admin = target.admin_of(sets[broker_name].endpoints)
    if template is None:  # on no other set: maybe only here already (a second run)
        try:
            template = admin.get_topic(topic)
        except RocketHAError as err:
            if err.name != "TOPIC_NOT_EXIST":
                raise
            return fail(f"TOPIC_NOT_EXIST: topic {topic!r} is on no replica set; create it "
                        "with `topic create`")
    created = admin.action("create_topic", {"topic": topic,
                                            **extended_fields(template, given)})["topic"]
    out.rows(["replica_set", "name", "read_queue_nums", "write_queue_nums", "perm", "table"],
             [{"table": "default", "replica_set": broker_name, **created}])
    return 0


def drain_topic(target: Target, topic: str, broker_name: str, out: Output) -> int:
    """Turn write off for `topic` on `broker_name` (reads go on); list each group's lag."""
    sets = {s.broker_name: s for s in _all_sets(target).sets()}
    if broker_name not in sets:
        return fail(f"--remove-broker-name {broker_name}: no replica set of that name has an "
                    f"alive broker (sets: {', '.join(sorted(sets)) or 'none'})", 2)
    others = [name for name in sets if name != broker_name]
    writable_elsewhere = False
    for name in others:
        try:
            perm = int(target.admin_of(sets[name].endpoints).get_topic(topic)["perm"])
        except RocketHAError as err:
            if err.name != "TOPIC_NOT_EXIST":
                raise
            continue
        writable_elsewhere = writable_elsewhere or bool(perm & PERM_WRITE)
    if not writable_elsewhere:
        return fail(f"--remove-broker-name {broker_name}: no other replica set takes writes "
                    f"of topic {topic!r}; extend it first (--add-broker-name)", 2)
    admin = target.admin_of(sets[broker_name].endpoints)
    current = admin.get_topic(topic)
    admin.update_topic(topic, perm=int(current["perm"]) & ~PERM_WRITE | PERM_READ)
    rows = group_lag_rows(admin.action("consumer_groups")["groups"], topic, broker_name)
    table = table_lag_row(admin.broker_info(), topic, broker_name)
    rows += [table] if table is not None else []
    out.rows(["replica_set", "group", "queue_id", "committed", "max_queue_offset", "lag"], rows)
    return 0
