"""How `rocketha-admin --controller <status|cluster|replica|elect|clean|routes>` prints.

An aligned table by default; `--json` prints the controller's reply as it came (one JSON
document), `--json-lines` one object per table row. (The controller package imports nothing
of ours but controller.api, so this small printer is its own; connector/admin/output.py is
the data commands'.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["print_reply"]


def print_reply(command: str, reply: Any, mode: str) -> None:
    if mode == "json":
        print(json.dumps(reply, indent=1))
        return
    columns, rows = _table(command, reply)
    if mode == "json-lines":
        for row in rows:
            print(json.dumps(row))
        return
    _print_table(columns, rows)
    if isinstance(reply, dict) and reply.get("status") not in (None, "OK"):
        print(f"status: {reply['status']}")


def _table(command: str, reply: Any) -> tuple[list[str], list[dict[str, Any]]]:
    if command == "status":
        return (["address", "status", "node_id", "role", "term", "leader_id", "commit_index",
                 "applied_index", "version", "error"], list(reply))
    if command == "user":
        if "users" not in reply:  # a change: its new version
            return ["status", "version", "message"], [reply]
        return ["name", "access_key", "type", "status"], list(reply["users"])
    if command == "acl":
        if "policies" not in reply:  # a change: its new version
            return ["status", "version", "message"], [reply]
        return (["subject", "resource", "actions", "decision", "source_ips"],
                list(reply["policies"]))
    if command == "transfer-leader":
        return ["status", "from_node_id", "leader_id", "term", "leader_address"], [reply]
    if command == "routes":
        sets = {route["broker_name"]: route for route in reply.get("replica_sets", [])}
        return (["broker_name", "read_queue_nums", "write_queue_nums", "perm",
                 "master_address", "master_epoch", "slave_addresses"],
                [{**queue, **{key: sets.get(queue["broker_name"], {}).get(key) for key in (
                    "master_address", "master_epoch", "slave_addresses")}}
                 for queue in reply.get("queues", [])])
    columns = ["replica_set", "master_broker_id", "master_address", "master_epoch",
               "sync_state_set", "sync_state_set_epoch", "brokers", "alive"]
    if command == "cluster":
        sets = [(status["replica"], status.get("alive_broker_ids")) for status in
                reply.get("replica_sets", [])]
    else:
        sets = [(reply["replica"], reply.get("alive_broker_ids"))] if reply.get("replica") \
            else []
    return columns, [_replica_row(replica, alive) for replica, alive in sets]


def _replica_row(replica: dict[str, Any], alive: Sequence[int] | None) -> dict[str, Any]:
    return {"replica_set": replica["broker_name"],
            "master_broker_id": replica.get("master_broker_id"),
            "master_address": replica.get("master_address"),
            "master_epoch": replica.get("master_epoch"),
            "sync_state_set": replica.get("sync_state_set"),
            "sync_state_set_epoch": replica.get("sync_state_set_epoch"),
            "brokers": [f"{b['broker_id']}@{b['broker_address']}"
                        for b in replica.get("brokers", [])],
            "alive": alive}


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(item) for item in value) or "-"
    return str(value)


def _print_table(columns: list[str], rows: list[dict[str, Any]]) -> None:
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for line in cells:
        print("  ".join(cell.rjust(w) if cell.isdigit() else cell.ljust(w)
                        for cell, w in zip(line, widths, strict=True)).rstrip())
    if not rows:
        print("(none)")
