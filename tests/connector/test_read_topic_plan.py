"""read_topic's tail plan (pure): per queue, from the table's end to the queue's end; a table
behind the log's first offset is a gap; a table past the queue's end is a recreated topic.
The tail's Parquet copy is checked against that plan: each planned offset once, nothing else,
from a per-queue summary of the copy (pyarrow on the driver for a local copy)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from connector.spark.offsets import QueueRef
from connector.spark.planning import Bounds
from connector.spark.read_topic import tail_plan
from connector.spark.tail_file import QueueSummary, check_tail, local_path, summarize_local

A0, A1, B0 = QueueRef("t", "a", 0), QueueRef("t", "a", 1), QueueRef("t", "b", 0)


def test_the_tail_starts_where_the_table_ends_and_at_the_start_where_it_has_nothing() -> None:
    plan = tail_plan({A0: 40, A1: None}, {A0: Bounds(0, 50), A1: Bounds(0, 7), B0: Bounds(3, 9)})
    assert plan.starting == {A0: 40, A1: 0, B0: 3}
    assert plan.ending == {A0: 50, A1: 7, B0: 9}
    assert plan.rows == 10 + 7 + 6
    assert not plan.gaps and not plan.ahead


def test_a_table_behind_the_logs_first_offset_is_a_gap_and_the_tail_starts_at_the_first() -> None:
    plan = tail_plan({A0: 5}, {A0: Bounds(20, 30)})
    assert plan.gaps == {A0: (5, 20)}
    assert plan.starting == {A0: 20}


def test_a_table_past_the_queues_end_is_ahead_and_adds_no_tail() -> None:
    plan = tail_plan({A0: 100, A1: 3}, {A0: Bounds(0, 12), A1: Bounds(0, 3)})
    assert plan.ahead == (A0,)
    assert plan.starting == {A0: 12, A1: 3}
    assert plan.rows == 0


# check_tail: the tail's Parquet copy against the plan, from its per-queue summary
PLANNED_FROM, PLANNED_TO = {A0: 40, A1: 0}, {A0: 50, A1: 7}


def test_a_copy_with_each_planned_offset_once_passes() -> None:
    summary = {("a", 0): QueueSummary(10, 10, 40, 49), ("a", 1): QueueSummary(7, 7, 0, 6)}
    assert check_tail("t", PLANNED_FROM, PLANNED_TO, summary, filtered=False) == []


def test_a_copy_with_an_offset_twice_a_gap_or_a_stray_row_fails() -> None:
    twice = {("a", 0): QueueSummary(11, 10, 40, 49), ("a", 1): QueueSummary(7, 7, 0, 6)}
    assert check_tail("t", PLANNED_FROM, PLANNED_TO, twice, filtered=False) == [
        "t a:0 [40, 50): 1 offset(s) twice"]
    gap = {("a", 0): QueueSummary(9, 9, 40, 49), ("a", 1): QueueSummary(7, 7, 0, 6)}
    assert check_tail("t", PLANNED_FROM, PLANNED_TO, gap, filtered=False) == [
        "t a:0 [40, 50): 9 offsets, 10 planned"]
    past = {("a", 0): QueueSummary(10, 10, 41, 50), ("a", 1): QueueSummary(7, 7, 0, 6)}
    assert check_tail("t", PLANNED_FROM, PLANNED_TO, past, filtered=False) == [
        "t a:0 [40, 50): offsets 41..50 outside"]
    stray = {**summary_of_plan(), ("b", 0): QueueSummary(1, 1, 0, 0)}
    assert check_tail("t", PLANNED_FROM, PLANNED_TO, stray, filtered=False) == [
        "t b:0: rows from a queue with no tail"]
    assert check_tail("t", PLANNED_FROM, PLANNED_TO, {("a", 0): summary_of_plan()[("a", 0)]},
                      filtered=False) == ["t a:1 [0, 7): no row"]


def test_a_tag_filtered_copy_may_hold_fewer_rows_but_never_one_twice() -> None:
    fewer = {("a", 0): QueueSummary(3, 3, 41, 47)}
    assert check_tail("t", PLANNED_FROM, PLANNED_TO, fewer, filtered=True) == []
    twice = {("a", 0): QueueSummary(4, 3, 41, 47)}
    assert check_tail("t", PLANNED_FROM, PLANNED_TO, twice, filtered=True) == [
        "t a:0 [40, 50): 1 offset(s) twice"]


def summary_of_plan() -> dict[tuple[str, int], QueueSummary]:
    return {("a", 0): QueueSummary(10, 10, 40, 49), ("a", 1): QueueSummary(7, 7, 0, 6)}


def test_the_copys_summary_on_the_driver_counts_each_queue_from_its_files(tmp_path: Path) -> None:
    """summarize_local reads a copy laid out as write_tail writes it (storeDate directories,
    Spark's _SUCCESS and .crc files beside) with pyarrow: an offset written twice shows as
    rows above distinct offsets, so check_tail refuses the copy."""
    for day, offsets in (("2026-12-01", [40, 41, 42]), ("2026-12-02", [42, 43])):
        directory = tmp_path / f"storeDate={day}"
        directory.mkdir()
        pq.write_table(pa.table({"brokerName": ["a"] * len(offsets),
                                 "queueId": pa.array([0] * len(offsets), pa.int32()),
                                 "queueOffset": pa.array(offsets, pa.int64())}),
                       directory / "part-00000.zstd.parquet")
        (directory / ".part-00000.zstd.parquet.crc").write_bytes(b"\x00")
    (tmp_path / "_SUCCESS").write_bytes(b"")
    assert local_path(f"file://{tmp_path}") == local_path(str(tmp_path)) == str(tmp_path)
    assert local_path("hdfs://nn/tails") is None
    summary = summarize_local(str(tmp_path))
    assert summary == {("a", 0): QueueSummary(5, 4, 40, 43)}
    assert check_tail("t", {A0: 40}, {A0: 44}, summary, filtered=False) == [
        "t a:0 [40, 44): 1 offset(s) twice"]
