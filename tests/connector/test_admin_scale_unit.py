"""The sans-IO parts of extending a topic onto a replica set and draining it
(connector/admin/scale.py), and the name `rocketha-cluster add-set` gives the next set."""

from __future__ import annotations

import pytest

from connector.admin.scale import TABLE_ROW, extended_fields, group_lag_rows, table_lag_row
from ha.cluster.add_set import next_set_name
from ha.cluster.drop_set import leftovers


def test_an_extended_topic_copies_its_config_and_the_command_wins() -> None:
    template = {"name": "t", "read_queue_nums": 8, "write_queue_nums": 8, "perm": 6,
                "table": "delta"}
    assert extended_fields(template, {"read_queue_nums": None, "write_queue_nums": None,
                                      "perm": None, "table": None}) == {
        "read_queue_nums": 8, "write_queue_nums": 8, "perm": 6, "table": "delta"}
    assert extended_fields(template, {"read_queue_nums": 4, "write_queue_nums": 4,
                                      "perm": None, "table": None}) == {
        "read_queue_nums": 4, "write_queue_nums": 4, "perm": 6, "table": "delta"}
    # a topic with the broker's default table says none; the command's "" is kept
    assert extended_fields({"read_queue_nums": 2, "write_queue_nums": 2, "perm": 6},
                           {"table": ""}) == {"read_queue_nums": 2, "write_queue_nums": 2,
                                              "perm": 6, "table": ""}


def test_the_lag_rows_name_each_group_and_queue_of_the_topic_only() -> None:
    groups = {"g2": {"t": {"1": {"committed": 5, "max_queue_offset": 9},
                           "0": {"committed": 3, "max_queue_offset": 3}},
                     "other": {"0": {"committed": 0, "max_queue_offset": 7}}},
              "g1": {"other": {"0": {"committed": 0, "max_queue_offset": 7}}},
              "g0": {"t": {"10": {"committed": 12, "max_queue_offset": 11}}}}
    rows = group_lag_rows(groups, "t", "broker-c")
    assert [(r["group"], r["queue_id"], r["lag"]) for r in rows] == [
        ("g0", 10, 0), ("g2", 0, 0), ("g2", 1, 4)]  # a commit past the end lags 0, not -1
    assert {r["replica_set"] for r in rows} == {"broker-c"}
    assert group_lag_rows({}, "t", "broker-c") == []


def test_add_set_names_the_next_letter_and_refuses_what_it_cannot_name() -> None:
    def manifest(*sets: str) -> dict:  # type: ignore[type-arg]
        return {"brokers": [{"name": f"{s}-{i}", "set": s} for s in sets for i in range(3)]}

    assert next_set_name(manifest("broker-a")) == "broker-b"
    assert next_set_name(manifest("broker-b", "broker-a")) == "broker-c"
    with pytest.raises(SystemExit, match="needs a cluster"):
        next_set_name({"brokers": []})
    with pytest.raises(SystemExit, match="add a set by hand"):
        next_set_name(manifest("broker-a", "broker-c"))
    full = manifest(*(f"broker-{chr(ord('a') + i)}" for i in range(26)))
    with pytest.raises(SystemExit, match="already has 26 replica sets"):
        next_set_name(full)


def test_drop_set_names_everything_still_left_on_the_set() -> None:
    topics = [{"name": "drained", "perm": 4}, {"name": "open", "perm": 6}]
    groups = {"g": {"drained": {"0": {"committed": 5, "max_queue_offset": 9},
                                "1": {"committed": 2, "max_queue_offset": 3}}},
              "done": {"drained": {"0": {"committed": 9, "max_queue_offset": 9}}}}
    tables = {"drained": {"lag_messages": 7}, "caught_up": {"lag_messages": 0},
              "follower_view": {"lag_messages": None}}
    assert leftovers(topics, groups, tables) == [
        "topic open takes writes", "group g lags 5 on drained", "the table of drained lags 7"]
    assert leftovers([{"name": "drained", "perm": 4}],
                     {"done": groups["done"]}, {"caught_up": {"lag_messages": 0}}) == []


def test_the_drain_report_has_a_row_for_the_topic_table_when_there_is_one() -> None:
    info = {"topic_tables": {"topics": {"t": {"lag_messages": 3}, "u": {"lag_messages": None}}}}
    assert table_lag_row(info, "t", "broker-c") == {
        "replica_set": "broker-c", "group": TABLE_ROW, "queue_id": None, "committed": None,
        "max_queue_offset": None, "lag": 3}
    assert table_lag_row(info, "u", "broker-c") is None  # a slave's view: no lag known
    assert table_lag_row(info, "v", "broker-c") is None
    assert table_lag_row({}, "t", "broker-c") is None
