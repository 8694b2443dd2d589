"""`rocketha-admin (--broker HOST:PORT | --controller 'H:P;H:P') <command>`: the data commands.

With `--broker` every command talks to that broker. With `--controller` (the name service, like
`mqadmin -n`) the commands follow the current masters: topic commands run on every replica set
(or the one named by `--broker-name`), produce goes to a master, consume, offsets and groups
read each set's master (the controller names it; after a failover the next call finds the new
one). The controller's own commands (status, cluster, replica, elect, clean, routes) live in
controller/admin/main.py; rocketha_admin.py picks the tool.

    topic create|update --topic T [--queues N | --read-queues R --write-queues W] [--perm P]
                       [--table delta|none|default]
    topic update --topic T --add-broker-name SET [--queues N]   extend T onto a replica set
    topic update --topic T --remove-broker-name SET              drain T from one (write off)
    topic list | describe --topic T | delete --topic T
    produce --topic T [--body TEXT | --file F | (stdin lines)] [--key K] [--tags T]
            [--property k=v ...]          one message per line of the file or stdin
    produce --topic T --count N [--body-size B] [--rate R] [--batch K]   synthetic load
    consume --topic T [--from earliest|latest|OFFSET] [--max-messages N] [--until-idle-ms MS]
    offsets --topic T [--group G]
    offsets reset --group G --topic T (--to-earliest | --to-latest | --to-time MS|ISO-8601)
    group list | describe --group G | delete --group G
    broker info | stats | config get | config set KEY=VALUE

Every command takes `--json` (one JSON document) or `--json-lines` (one object per line);
without them output is an aligned table. Exit codes: 0 ok, 1 the cluster answered with an
error (one line on stderr naming it), 2 misuse or nothing to talk to.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

from conf.credentials import read_credentials_file
from conf.tls import NO_TLS
from connector.admin.data import consume, produce
from connector.admin.output import Output, fail
from connector.admin.parser import BATCH_MAX, COUNT_MAX, build_parser
from connector.admin.planned import elect_broker, shutdown_broker
from connector.admin.scale import drain_topic, extend_topic
from connector.admin.target import Target
from connector.client import ClientConfig
from connector.errors import RoutesUnavailableError
from connector.protocol import RocketHAError

__all__ = ["build_parser", "main"]

def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.timeout_s <= 0:
        parser.error("--timeout-s must be > 0")
    tls, credentials = NO_TLS, None
    if args.client_config is not None:
        try:
            config = ClientConfig.from_properties(args.client_config)
        except ValueError as err:
            parser.error(str(err))
        tls, credentials = config.tls, config.credentials
        if args.broker is None and args.controller is None:
            args.controller = config.controller
            args.broker = config.brokers[0] if config.brokers and not config.controller \
                else None
    if args.broker is None and args.controller is None:
        parser.error("one of --broker, --controller or --client-config is required")
    try:
        if args.credentials_file:
            credentials = read_credentials_file(args.credentials_file, "--credentials-file")
    except (OSError, ValueError) as err:
        return fail(str(err), 2)
    target = Target(args.broker, args.controller, int(args.timeout_s * 1000), args.broker_name,
                    tls, credentials)
    out = Output(args.output or "table")
    try:
        return _dispatch(parser, args, target, out)
    except RocketHAError as err:
        return fail(f"{err.name}: {err.message}")
    except RoutesUnavailableError as err:
        return fail(str(err), 2)
    except OSError as err:  # --file
        return fail(str(err), 2)


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace, target: Target,
              out: Output) -> int:
    if args.command == "topic":
        return _topic(parser, args, target, out)
    if args.command == "offsets":
        if args.action == "reset":
            return _offsets_reset(parser, args, target, out)
        return _offsets(args, target, out)
    if args.command == "group":
        return _group(parser, args, target, out)
    if args.command == "broker":
        return _broker(parser, args, target, out)
    if args.command == "produce":
        if args.count is not None and not (1 <= args.count <= COUNT_MAX
                                           and 1 <= args.batch <= BATCH_MAX
                                           and args.body_size >= 0 and args.rate >= 0):
            parser.error(f"--count must be 1..{COUNT_MAX}, --batch 1..{BATCH_MAX}, "
                         "--body-size and --rate >= 0")
        properties = _properties(parser, args.property)
        return produce(target.client_config(), args, properties, out)
    if args.start not in ("earliest", "latest") and not args.start.isdigit():
        parser.error("--from must be earliest, latest or a queue offset")
    if args.max_messages < 1:
        parser.error("--max-messages must be >= 1")
    return consume(target, args, out)


def _properties(parser: argparse.ArgumentParser, pairs: list[str]) -> dict[str, str]:
    properties = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            parser.error(f"--property expects k=v, got {pair!r}")
        properties[key] = value
    return properties


# -- topics ---------------------------------------------------------------------------------
_TABLE_VALUES = {"delta": "delta", "none": "none", "default": ""}  # --table -> the attribute


def _topic(parser: argparse.ArgumentParser, args: argparse.Namespace, target: Target,
           out: Output) -> int:
    if args.action != "list" and not args.topic:
        parser.error(f"topic {args.action} needs --topic")
    rows: list[dict[str, Any]] = []
    if args.action in ("create", "update") and (args.add_broker_name or args.remove_broker_name):
        return _move_topic(parser, args, target, out)
    if args.action in ("create", "update"):
        fields = {"read_queue_nums": args.read_queues or args.queues,
                  "write_queue_nums": args.write_queues or args.queues, "perm": args.perm,
                  "table": None if args.table is None else _TABLE_VALUES[args.table]}
        fields = {key: value for key, value in fields.items() if value is not None}
        for replica_set in target.sets():
            admin = target.admin_of(replica_set.endpoints)
            topic = (admin.update_topic(args.topic, **fields) if args.action == "update"
                     else admin.action("create_topic", {"topic": args.topic, **fields})["topic"])
            rows.append({"replica_set": replica_set.broker_name, **topic})
        out.rows(["replica_set", "name", "read_queue_nums", "write_queue_nums", "perm", "table"],
                 [{"table": "default", **row} for row in rows])
        return 0
    if args.action == "list":
        for replica_set in target.sets():
            rows += [{"replica_set": replica_set.broker_name, **topic} for topic in
                     target.admin_of(replica_set.endpoints).list_topics()]
        out.rows(["name", "replica_set", "read_queue_nums", "write_queue_nums", "perm", "table"],
                 sorted(({"table": "default", **row} for row in rows),
                        key=lambda row: (row["name"], row["replica_set"])))
        return 0
    if args.action == "delete" and args.delete_table:
        return _delete_with_table(args.topic, target, out)
    if args.action == "delete":
        deleted = _on_sets_having(target, args.topic, lambda admin: admin.delete_topic(
            args.topic))
        out.rows(["replica_set", "topic", "deleted"], [
            {"replica_set": name, "topic": args.topic, "deleted": True} for name, _ in deleted])
        return 0
    described = _on_sets_having(target, args.topic, lambda admin: admin.queue_offsets(
        args.topic))
    for name, queues in described:
        rows += [{"replica_set": name, "topic": args.topic, **queue,
                  "messages": queue["max_queue_offset"] - queue["min_queue_offset"]}
                 for queue in queues]
    out.rows(["replica_set", "topic", "queue_id", "min_queue_offset", "max_queue_offset",
              "messages"], rows)
    return 0


def _move_topic(parser: argparse.ArgumentParser, args: argparse.Namespace, target: Target,
                out: Output) -> int:
    """topic update --add-broker-name / --remove-broker-name (connector/admin/scale.py)."""
    if args.action != "update":
        parser.error("--add-broker-name and --remove-broker-name go with topic update")
    if args.remove_broker_name:
        return drain_topic(target, args.topic, args.remove_broker_name, out)
    return extend_topic(target, args.topic, {
        "read_queue_nums": args.read_queues or args.queues,
        "write_queue_nums": args.write_queues or args.queues, "perm": args.perm,
        "table": None if args.table is None else _TABLE_VALUES[args.table]},
        args.add_broker_name, out)


def _delete_with_table(topic: str, target: Target, out: Output) -> int:
    """The topic on every replica set first, then its table on each (a set's master removes
    the table under its tier once its own writer has stopped: sets sharing one tier share the
    table, so the later ones find it gone). Run again after a failure: a topic already gone
    is no error here."""
    try:
        deleted = {name for name, _ in _on_sets_having(
            target, topic, lambda admin: admin.delete_topic(topic))}
    except RocketHAError as err:
        if err.name != "TOPIC_NOT_EXIST":
            raise
        deleted = set()
    rows = []
    for replica_set in target.sets():
        reply = target.admin_of(replica_set.endpoints).delete_topic_table(topic)
        rows.append({"replica_set": replica_set.broker_name, "topic": topic,
                     "deleted": replica_set.broker_name in deleted or reply["deleted"],
                     "table_deleted": reply["table_deleted"]})
    out.rows(["replica_set", "topic", "deleted", "table_deleted"], rows)
    return 0


def _on_sets_having(target: Target, topic: str, call: Any) -> list[tuple[str, Any]]:
    """`call(admin)` on each replica set that has `topic`; TOPIC_NOT_EXIST if none has it."""
    results, missing = [], None
    for replica_set in target.sets():
        try:
            results.append((replica_set.broker_name,
                            call(target.admin_of(replica_set.endpoints))))
        except RocketHAError as err:
            if err.name != "TOPIC_NOT_EXIST":
                raise
            missing = err
    if not results:
        assert missing is not None
        raise missing
    return results


# -- offsets and groups ---------------------------------------------------------------------
def _offsets(args: argparse.Namespace, target: Target, out: Output) -> int:
    rows = []
    for name, queues in _on_sets_having(target, args.topic,
                                        lambda admin: admin.queue_offsets(args.topic)):
        committed: dict[int, int] = {}
        if args.group:
            committed = target.admin_of(_endpoints(target, name)).query_offsets(args.group,
                                                                                args.topic)
        for queue in queues:
            row: dict[str, Any] = {"replica_set": name, **queue}
            if args.group:
                done = committed.get(queue["queue_id"])
                row.update(group=args.group, committed=done,
                           lag=queue["max_queue_offset"] - (done or 0))
            rows.append(row)
    columns = ["replica_set", "queue_id", "min_queue_offset", "max_queue_offset"]
    out.rows(columns + (["group", "committed", "lag"] if args.group else []), rows)
    return 0


def _endpoints(target: Target, replica_set: str) -> tuple[str, ...]:
    return next(s.endpoints for s in target.sets() if s.broker_name == replica_set)


def _offsets_reset(parser: argparse.ArgumentParser, args: argparse.Namespace, target: Target,
                   out: Output) -> int:
    if not args.group or not (args.to_earliest or args.to_latest or args.to_time):
        parser.error("offsets reset needs --group and one of --to-earliest, --to-latest, "
                     "--to-time")
    timestamp_ms = _timestamp_ms(parser, args.to_time) if args.to_time else None
    rows = []
    for replica_set in target.sets():
        admin = target.admin_of(replica_set.endpoints)
        try:
            queues = admin.queue_offsets(args.topic)
        except RocketHAError as err:
            if err.name == "TOPIC_NOT_EXIST":
                continue
            raise
        before = admin.query_offsets(args.group, args.topic)
        for queue in queues:
            queue_id = queue["queue_id"]
            if timestamp_ms is not None:
                new = admin.offset_for_timestamp(args.topic, queue_id, timestamp_ms)
            else:
                new = queue["min_queue_offset" if args.to_earliest else "max_queue_offset"]
            admin.commit_offset(args.group, args.topic, queue_id, new)
            rows.append({"replica_set": replica_set.broker_name, "queue_id": queue_id,
                         "group": args.group, "before": before.get(queue_id), "after": new})
    if not rows:
        return fail(f"TOPIC_NOT_EXIST: topic {args.topic!r} does not exist")
    out.rows(["replica_set", "group", "queue_id", "before", "after"], rows)
    return 0


def _timestamp_ms(parser: argparse.ArgumentParser, text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        parser.error(f"--to-time {text!r}: expected ms since the epoch or ISO-8601")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _group(parser: argparse.ArgumentParser, args: argparse.Namespace, target: Target,
           out: Output) -> int:
    if args.action != "list" and not args.group:
        parser.error(f"group {args.action} needs --group")
    rows: list[dict[str, Any]] = []
    found_in = []
    for replica_set in target.sets():
        admin = target.admin_of(replica_set.endpoints)
        groups = admin.action("consumer_groups")["groups"]
        if args.action == "delete":
            if args.group in groups:
                admin.action("delete_group", {"group": args.group})
                found_in.append(replica_set.broker_name)
            continue
        for group, topics in sorted(groups.items()):
            if args.group is not None and group != args.group:
                continue
            found_in.append(replica_set.broker_name)
            for topic, queues in sorted(topics.items()):
                per_queue = [{"group": group, "topic": topic,
                              "replica_set": replica_set.broker_name, "queue_id": int(queue),
                              "committed": entry["committed"],
                              "max_queue_offset": entry["max_queue_offset"],
                              "lag": max(0, entry["max_queue_offset"] - entry["committed"])}
                             for queue, entry in sorted(queues.items(), key=lambda kv: int(kv[0]))]
                if args.action == "describe":
                    rows += per_queue
                else:
                    rows.append({"group": group, "topic": topic,
                                 "replica_set": replica_set.broker_name,
                                 "queues": len(per_queue),
                                 "lag": sum(row["lag"] for row in per_queue)})
    if args.group is not None and not found_in:
        return fail(f"GROUP_NOT_FOUND: consumer group {args.group!r} has no committed offsets")
    if args.action == "delete":
        out.rows(["replica_set", "group", "deleted"], [
            {"replica_set": name, "group": args.group, "deleted": True} for name in found_in])
    elif args.action == "describe":
        out.rows(["group", "topic", "replica_set", "queue_id", "committed", "max_queue_offset",
                  "lag"], rows)
    else:
        out.rows(["group", "topic", "replica_set", "queues", "lag"], rows)
    return 0


# -- brokers --------------------------------------------------------------------------------
def _broker(parser: argparse.ArgumentParser, args: argparse.Namespace, target: Target,
            out: Output) -> int:
    if args.action == "shutdown":  # (connector/admin/planned.py)
        return shutdown_broker(target, args.broker_id, args.wait_s, out)
    if args.action == "elect":
        return elect_broker(target, args.broker_id, args.wait_s, out)
    brokers = target.brokers()
    if args.action == "stats":
        documents = {endpoint: target.admin_of((endpoint,)).broker_stats()
                     for _, endpoint in brokers}
        out.document(documents if len(documents) > 1 else next(iter(documents.values())))
        return 0
    if args.action == "info":
        infos = [target.admin_of((endpoint,)).broker_info() for _, endpoint in brokers]
        for info in infos:  # controller mode: the id the controller gave, not brokerId's
            info["broker_id"] = (info.get("controller") or {}).get("broker_id",
                                                                  info["broker_id"])
        if out.mode == "json" and target.broker is not None:
            out.document(infos[0])  # one broker: its info object, as before
            return 0
        for info in infos if out.mode == "table" else ():  # keys waiting for a restart
            info["pending_restart"] = ",".join(info.get("pending_restart") or {})
        out.rows(["broker_name", "broker_id", "endpoint", "role", "master_epoch",
                  "max_log_position", "confirm_log_position", "sync_state_set", "store_dir",
                  "pending_restart"], infos)
        return 0
    if args.config_action is None:
        parser.error("broker config needs get or set")
    return _broker_config(parser, args, target, out)


def _broker_config(parser: argparse.ArgumentParser, args: argparse.Namespace, target: Target,
                   out: Output) -> int:
    """`broker config get|set`: on each replica set's master, --broker-id's member, or
    --all-members (live_config.py on the broker)."""
    if args.broker_id is not None and args.all_members:
        parser.error("broker config: --broker-id or --all-members, not both")
    members = target.members(args.broker_id, all_members=args.all_members)
    rows: list[dict[str, Any]] = []
    if args.config_action == "get":
        request = {} if args.key is None else {"key": args.key}
        for name, endpoint in members:
            reply = target.admin_of((endpoint,)).action("get_config", request)
            live = set(reply.get("live_keys", reply.get("runtime_keys", [])))
            pending = reply.get("pending_restart", {})
            rows += [{"replica_set": name, "endpoint": endpoint, "key": key, "value": value,
                      "live": key in live, "pending_restart": pending.get(key, "")}
                     for key, value in sorted(reply["values"].items())]
        if args.key is not None and not rows:
            parser.error(f"broker config get: {args.key!r} is not a key this broker has a "
                         "value for (see `broker config get`)")
        out.rows(["replica_set", "endpoint", "key", "value", "live", "pending_restart"], rows)
        return 0
    key, value = args.key, args.value
    if args.setting is not None:
        if key is not None or value is not None:
            parser.error("broker config set: KEY=VALUE or --key/--value, not both")
        key, sep, value = args.setting.partition("=")
        if not sep:
            parser.error("broker config set needs KEY=VALUE (or --key K --value V)")
    if not key or value is None:
        parser.error("broker config set needs --key K --value V")
    for name, endpoint in members:
        reply = target.admin_of((endpoint,)).action("set_config", {"key": key, "value": value})
        rows.append({"replica_set": name, "endpoint": endpoint, **reply})
    out.rows(["replica_set", "endpoint", "key", "value", "live", "restart_needed"], rows)
    if any(row.get("restart_needed") for row in rows):
        out.note(f"{key}: written to the conf file; restart needed (`broker info` lists it "
                 "under pending_restart until then)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
