"""Spark connector pieces with no Spark and no broker: options, offsets, planning.

Goal: every bad option fails with an OptionError naming the option; offsets JSON is canonical
(sorted keys, int values) and round-trips; planning (resolve, admit, split, trigger delay) is a
pure function with the promised bounds. Method: call the parsers and planners directly with
table-driven inputs and a few hypothesis properties.
"""

from __future__ import annotations

import itertools
import json
import pickle
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.client.routes import route_provider
from connector.errors import OptionError, RoutesUnavailableError
from connector.spark.columns import RECORD_KEY
from connector.spark.offsets import (
    QueueRef,
    canonical,
    flatten,
    parse_offsets_json,
    unflatten,
)
from connector.spark.options import (
    READ_OPTIONS,
    batch_only_options,
    parse_sink_options,
    parse_source_options,
)
from connector.spark.planning import (
    Bounds,
    QueueRange,
    admit,
    pack_groups,
    resolve_offsets,
    split_ranges,
    trigger_waits,
)

BASE = {"brokers": "127.0.0.1:9876", "subscribe": "orders"}


def source(**extra: str) -> dict[str, str]:
    return {**BASE, **extra}


@pytest.mark.parametrize("options, named", [
    (source(colour="red"), "colour"),
    (source(subscribePattern="ord.*"), "subscribePattern"),
    ({"brokers": "127.0.0.1:1", "subscribe": "a", "assign": '{"a": ["b:0"]}'}, "assign"),
    ({"brokers": "127.0.0.1:1"}, "subscribe"),
    ({"subscribe": "a"}, "brokers"),
    (source(brokers="nohost"), "brokers"),
    (source(startingOffsets="{not json"), "startingOffsets"),
    (source(startingOffsets='{"orders": {"broker-a:0": "x"}}'), "startingOffsets"),
    (source(startingOffsets='{"orders": {"queue0": 1}}'), "startingOffsets"),
    (source(startingOffsets='{"orders": {"broker-a:0": -3}}'), "startingOffsets"),
    (source(endingOffsets="[1, 2]"), "endingOffsets"),
    (source(endingOffsets="earliest"), "endingOffsets"),
    (source(maxOffsetsPerTrigger="0"), "maxOffsetsPerTrigger"),
    (source(maxOffsetsPerTrigger="ten"), "maxOffsetsPerTrigger"),
    (source(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5"), "minOffsetsPerTrigger"),
    (source(maxTriggerDelay="soon"), "maxTriggerDelay"),
    (source(failOnDataLoss="maybe"), "failOnDataLoss"),
    (source(minPartitions="-1"), "minPartitions"),
    (source(tagFilter="A || "), "tagFilter"),
    (source(groupId="bad group"), "groupId"),
    (source(subscribe="bad topic!"), "subscribe"),
    ({"brokers": "127.0.0.1:1", "subscribePattern": "(unclosed"}, "subscribePattern"),
    ({"brokers": "127.0.0.1:1", "assign": '{"t": [0]}'}, "assign"),
    ({"brokers": "127.0.0.1:1", "assign": "nope"}, "assign"),
    (source(startingTimestamp="1", startingOffsetsByTimestamp='{"orders": {"b:0": 1}}'),
     "startingTimestamp"),
    (source(includeProperties="yes"), "includeProperties"),
    (source(columns="body, colour"), "unknown column 'colour'"),
    (source(columns="body,body"), "listed twice"),
    (source(columns="body", includeMetadata="true"), "columns excludes"),
    (source(workerGcFreeze="sometimes"), "workerGcFreeze"),
    (source(endingTimestamp="1", endingOffsetsByTimestamp='{"orders": {"b:0": 1}}'),
     "endingTimestamp and endingOffsetsByTimestamp exclude"),
    (source(endingOffsetsByTimestamp='{"orders": {"b:0": -1}}'), "endingOffsetsByTimestamp"),
    (source(endingTimestamp="yesterday"), "endingTimestamp"),
    (source(startingOffsetsByTimestampStrategy="earliest"),
     "startingOffsetsByTimestampStrategy: 'earliest' must be one of error, latest"),
    (source(groupId="g", groupIdPrefix="p"), "groupId and groupIdPrefix exclude"),
    (source(groupIdPrefix="bad prefix"), "groupIdPrefix"),
    (source(maxRecordsPerPartition="0"), "maxRecordsPerPartition"),
    (source(fetchTimeoutMs="0s"), "fetchTimeoutMs: '0s' is below 1 ms"),
    (source(requestTimeoutMs="5 minutes"), "requestTimeoutMs"),
])
def test_bad_source_option_names_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named):
        parse_source_options(options)


def test_options_are_case_insensitive_and_pickle() -> None:
    parsed = parse_source_options({"BROKERS": "127.0.0.1:1", "subscribe": "a, b",
                                   "maxoffsetspertrigger": "12", "TagFilter": "A || B",
                                   "checkpointLocation": "/tmp/x"})
    assert parsed.subscribe == ("a", "b")
    assert parsed.max_offsets_per_trigger == 12
    assert parsed.tag_filter == "A || B"
    assert parsed.starting == ""  # batch: earliest, streaming: latest (decided by the caller)
    assert pickle.loads(pickle.dumps(parsed)) == parsed
    assert parsed.topic_matches("a") and not parsed.topic_matches("c")


def test_default_columns_are_lean_and_options_add_groups() -> None:
    assert parse_source_options(source()).columns == (
        "topic", "brokerName", "queueId", "queueOffset", "key", "tags", "body",
        "storeTimestamp")
    assert set(RECORD_KEY) <= set(parse_source_options(source()).columns)  # a record's identity
    assert parse_source_options(source(includeProperties="true")).columns == (
        "topic", "brokerName", "queueId", "queueOffset", "key", "tags", "body", "properties",
        "storeTimestamp")
    everything = ("topic", "brokerName", "queueId", "queueOffset", "msgId", "key", "tags",
                  "body", "properties", "bornTimestamp", "storeTimestamp")
    assert parse_source_options(source(includeProperties="true",
                                       includeMetadata="true")).columns == everything
    assert parse_source_options(source(columns="*")).columns == everything
    assert parse_source_options(source(columns=" BODY,queueid ")).columns == ("body",
                                                                              "queueId")


def test_unknown_option_suggests_and_lists_the_known_ones() -> None:
    with pytest.raises(OptionError) as caught:
        parse_source_options(source(startingOffsetByTimestamp='{"orders": {"b:0": 1}}'))
    message = str(caught.value)
    assert "unknown option 'startingOffsetByTimestamp'; did you mean " \
        "'startingOffsetsByTimestamp'?" in message
    assert "rocketha's options: " in message
    listed = message.split("rocketha's options: ", 1)[1].split(", ")
    assert listed == sorted(READ_OPTIONS) and "maxRecordsPerPartition" in listed
    with pytest.raises(OptionError, match=r"did you mean 'topic'\?.*acceptStatuses"):
        parse_sink_options({"brokers": "h:1", "topc": "t"})


def test_kafka_habit_options() -> None:
    """Kafka's names and value forms: timestamps at either end, the by-timestamp strategy,
    a generated group per reader, durations with Spark's units."""
    parsed = parse_source_options(source(
        endingTimestamp="1700000000000", startingOffsetsByTimestampStrategy="LATEST",
        groupIdPrefix="etl", maxRecordsPerPartition="1000", maxTriggerDelay="2min",
        fetchTimeoutMs="30s", requestTimeoutMs="1500"))
    assert parsed.ending_timestamp_ms == 1_700_000_000_000 and parsed.ending == "latest"
    assert parsed.starting_strategy == "latest"
    assert parsed.max_records_per_partition == 1000
    assert (parsed.max_trigger_delay_ms, parsed.fetch_timeout_ms,
            parsed.request_timeout_ms) == (120_000, 30_000, 1500)
    assert parsed.group_id is not None and parsed.group_id.startswith("etl-")
    assert len(parsed.group_id) == len("etl-") + 12
    again = parse_source_options(source(groupIdPrefix="etl"))
    assert again.group_id != parsed.group_id  # a group per reader, as Kafka's source
    by_queue = parse_source_options(source(
        endingOffsetsByTimestamp='{"orders": {"broker-b:0": 5, "broker-a:1": 7}}'))
    assert by_queue.ending_by_timestamp == {"orders": {"broker-a:1": 7, "broker-b:0": 5}}
    defaults = parse_source_options(source())
    assert defaults.starting_strategy == "error"  # Kafka's default
    assert defaults.group_id is None and defaults.max_records_per_partition is None
    assert batch_only_options({"ENDINGTIMESTAMP": "1", "subscribe": "a"}) == ["endingTimestamp"]
    assert parse_sink_options({"brokers": "h:1", "requestTimeoutMs": "1m"}
                              ).request_timeout_ms == 60_000


def test_pattern_and_assign_select_topics() -> None:
    pattern = parse_source_options({"brokers": "h:1", "subscribePattern": "ord.*"})
    assert pattern.topic_matches("orders") and not pattern.topic_matches("xorders")
    assign = parse_source_options({"brokers": "h:1",
                                   "assign": '{"t": ["broker-a:1", "broker-a:0"]}'})
    assert assign.assign == {"t": {"broker-a:0": 0, "broker-a:1": 0}}
    assert assign.topic_matches("t") and not assign.topic_matches("u")


@pytest.mark.parametrize("options, named", [
    ({"brokers": "h:1", "acceptStatuses": "PUT_OK,NOPE"}, "acceptStatuses"),
    ({"brokers": "h:1", "topic": "a b"}, "topic"),
    ({"brokers": "h:1", "subscribe": "a"}, "subscribe"),
    ({"brokers": "h:1", "writeBatchRows": "0"}, "writeBatchRows"),
    ({"brokers": "h:1", "exactlyOnce": "yes"}, "exactlyOnce"),
    ({"brokers": "h:1", "workerGcFreeze": "2"}, "workerGcFreeze"),
])
def test_bad_sink_option_names_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(OptionError, match=named):
        parse_sink_options(options)


def test_sink_defaults() -> None:
    parsed = parse_sink_options({"brokers": "h:1", "acceptStatuses": "put_ok, FLUSH_DISK_TIMEOUT"})
    assert parsed.accept_statuses == frozenset({"PUT_OK", "FLUSH_DISK_TIMEOUT"})
    assert parsed.exactly_once and parsed.topic is None
    assert parsed.worker_gc_freeze
    assert not parse_sink_options({"brokers": "h:1", "WorkerGcFreeze": "false"}).worker_gc_freeze


def test_options_spark_adds_to_a_stream_writer_are_accepted() -> None:
    # writeStream.queryName(...) and the checkpoint reach the sink as options (any case)
    parsed = parse_sink_options({"brokers": "h:1", "queryName": "q", "checkpointLocation": "/c"})
    assert parsed.brokers == ("h:1",)


# -- offsets -----------------------------------------------------------------------------------
def test_canonical_offsets_sort_keys_and_round_trip() -> None:
    messy = {"b": {"broker-a:10": 3, "broker-a:2": 1}, "a": {"broker-b:0": 7}}
    text = json.dumps(canonical(messy))
    assert text == '{"a": {"broker-b:0": 7}, "b": {"broker-a:10": 3, "broker-a:2": 1}}'
    assert json.dumps(canonical(json.loads(text))) == text
    assert parse_offsets_json(text, "startingOffsets", low=0) == json.loads(text)
    assert unflatten(flatten(messy)) == canonical(messy)
    assert QueueRef("a", "broker-b", 0) in flatten(messy)


@settings(deadline=None)  # a loaded 2-core CI machine: no per-example deadline
@given(st.dictionaries(
    st.text("abc", min_size=1, max_size=3),
    st.dictionaries(st.tuples(st.sampled_from(["broker-a", "broker-b"]),
                              st.integers(0, 20)).map(lambda t: f"{t[0]}:{t[1]}"),
                    st.integers(0, 1 << 40), min_size=1, max_size=5),
    max_size=4))
def test_canonical_json_is_order_independent(offsets: dict[str, dict[str, int]]) -> None:
    reversed_order = {topic: dict(reversed(list(queues.items())))
                      for topic, queues in reversed(list(offsets.items()))}
    assert json.dumps(canonical(offsets)) == json.dumps(canonical(reversed_order))
    assert unflatten(flatten(offsets)) == canonical(offsets)


# -- planning ------------------------------------------------------------------------------------
A0, A1, B0 = QueueRef("t", "broker-a", 0), QueueRef("t", "broker-a", 1), QueueRef("u", "b", 0)
BOUNDS = {A0: Bounds(2, 10), A1: Bounds(0, 5), B0: Bounds(0, 0)}


def test_resolve_offsets_specs() -> None:
    assert resolve_offsets("earliest", BOUNDS, option="o", default="latest") == \
        {A0: 2, A1: 0, B0: 0}
    assert resolve_offsets("", BOUNDS, option="o", default="latest") == {A0: 10, A1: 5, B0: 0}
    spec = {"t": {"broker-a:0": 4, "broker-a:1": -1}}
    assert resolve_offsets(spec, BOUNDS, option="o", default="earliest") == \
        {A0: 4, A1: 5, B0: 0}
    with pytest.raises(OptionError, match=r"startingOffsets.*t/broker-a:9"):
        resolve_offsets({"t": {"broker-a:9": 0}}, BOUNDS, option="startingOffsets",
                        default="earliest")


@settings(deadline=None)  # a loaded 2-core CI machine: no per-example deadline
@given(st.lists(st.integers(0, 1000), min_size=1, max_size=6), st.integers(1, 3000))
def test_admit_caps_and_always_moves(backlogs: list[int], max_rows: int) -> None:
    refs = [QueueRef("t", "broker-a", index) for index in range(len(backlogs))]
    start = {ref: 100 for ref in refs}
    latest = {ref: 100 + size for ref, size in zip(refs, backlogs, strict=True)}
    end = admit(start, latest, max_rows)
    moved = [end[ref] - start[ref] for ref in refs]
    assert all(0 <= m <= size for m, size in zip(moved, backlogs, strict=True))
    assert sum(moved) == min(max_rows, sum(backlogs))
    assert admit(start, latest, None) == latest


def test_admit_new_queue_starts_from_given_start() -> None:
    assert admit({A0: 3}, {A0: 5, A1: 4}, None) == {A0: 5, A1: 4}


def test_split_ranges_min_partitions() -> None:
    ranges = [QueueRange(A0, 0, 100), QueueRange(A1, 0, 10), QueueRange(B0, 5, 5)]
    assert split_ranges(ranges, None) == sorted(ranges[:2])
    parts = split_ranges(ranges, 8)
    assert len(parts) >= 8
    for ref, (low, high) in ((A0, (0, 100)), (A1, (0, 10))):
        mine = [p for p in parts if p.ref == ref]
        assert mine[0].start_queue_offset == low and mine[-1].end_queue_offset == high
        assert all(a.end_queue_offset == b.start_queue_offset for a, b in itertools.pairwise(mine))
        assert all(p.count > 0 for p in mine)


def test_split_ranges_max_rows() -> None:
    """maxRecordsPerPartition: no part above it; with minPartitions the larger split wins."""
    ranges = [QueueRange(A0, 0, 100), QueueRange(A1, 0, 10), QueueRange(B0, 5, 5)]
    parts = split_ranges(ranges, None, 30)
    assert [(p.ref, p.start_queue_offset, p.end_queue_offset) for p in parts] == [
        (A0, 0, 25), (A0, 25, 50), (A0, 50, 75), (A0, 75, 100), (A1, 0, 10)]
    assert len(split_ranges(ranges, 20, 30)) > len(parts)  # minPartitions asks for more
    assert len(split_ranges(ranges, 2, 30)) == len(parts)  # maxRecordsPerPartition does


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 500), max_size=6), st.none() | st.integers(1, 40),
       st.integers(1, 200))
def test_split_ranges_covers_each_range_within_max(counts: list[int],
                                                    min_partitions: int | None,
                                                    max_rows: int) -> None:
    ranges = [QueueRange(QueueRef("t", "b", index), 10, 10 + count)
              for index, count in enumerate(counts)]
    parts = split_ranges(ranges, min_partitions, max_rows)
    assert all(0 < p.count <= max_rows for p in parts)
    for queue_range in ranges:
        mine = [(p.start_queue_offset, p.end_queue_offset) for p in parts
                if p.ref == queue_range.ref]
        covered = [offset for low, high in mine for offset in range(low, high)]
        assert covered == list(range(queue_range.start_queue_offset,
                                     queue_range.end_queue_offset))


def test_pack_groups_packs_small_ranges_into_even_tasks() -> None:
    # 1 M rows in 8 queues with the default 500,000: two tasks of four queues
    assert pack_groups([125_000] * 8, 500_000) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert pack_groups([10, 20, 30], 1000) == [[0, 1, 2]]  # a small read: one task
    assert pack_groups([600, 100, 100, 100], 400) == [[0], [1, 2, 3]]  # big ones stay alone
    assert pack_groups([5, 5, 5], 0) == [[0], [1], [2]]  # 0: one task per range
    assert pack_groups([5, 5, 5], 1, 2) == [[0], [1], [2]]  # already enough rows per range
    assert pack_groups([5, 5, 5, 5], 100, 2) == [[0, 2], [1, 3]]  # minPartitions is a floor
    assert pack_groups([0, 0, 0], 1, 2) == [[0, 2], [1]]  # empty ranges: still minPartitions
    assert pack_groups([], 100) == []
    assert pack_groups([7], 100) == [[0]]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 10_000), max_size=40), st.integers(0, 50_000),
       st.none() | st.integers(1, 60))
def test_pack_groups_keeps_every_range_once_and_the_bounds(
        counts: list[int], min_rows: int, min_groups: int | None) -> None:
    groups = pack_groups(counts, min_rows, min_groups)
    assert sorted(i for g in groups for i in g) == list(range(len(counts)))
    assert all(g == sorted(g) and g for g in groups) and groups == sorted(groups)
    assert len(groups) <= max(1, len(counts))
    if counts:
        # never fewer tasks than minPartitions allows, never more than the rows ask for
        assert len(groups) >= min(len(counts), min_groups or 1)
        if min_rows and len(groups) < len(counts):
            assert len(groups) <= max(1, sum(counts) // min_rows, min_groups or 1)
    assert groups == pack_groups(counts, min_rows, min_groups)  # a replay plans the same


def test_min_rows_per_partition_option() -> None:
    assert parse_source_options(source()).min_rows_per_partition == 500_000
    assert parse_source_options(source(minRowsPerPartition="0")).min_rows_per_partition == 0
    with pytest.raises(OptionError, match="minRowsPerPartition"):
        parse_source_options(source(minRowsPerPartition="-1"))


def test_trigger_waits_for_min_rows_until_delay() -> None:
    assert not trigger_waits(5, None, 0, 10, 1000)
    assert trigger_waits(5, 10, 0, 999, 1000)
    assert not trigger_waits(5, 10, 0, 1000, 1000)
    assert not trigger_waits(10, 10, 0, 1, 1000)


def test_controller_routes_without_a_controller_fail_clearly() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"
    parsed = parse_source_options({"controller": address, "subscribe": "a",
                                   "requestTimeoutMs": "300"})
    routes = route_provider(parsed.brokers, parsed.controller, parsed.request_timeout_ms)
    with pytest.raises(RoutesUnavailableError, match="controller"):
        routes.replica_sets()
