"""The topic tables' Prometheus families (part of the broker's `/metrics`, ha/broker/metrics.py).

From TopicTables.stats() (ha/broker/topic_tables.py), one series per table topic, on the
master only (a slave writes no table; its series would say nothing):

    rocketha_topic_table_lag_messages{topic}        confirmed messages not in the table
    rocketha_topic_table_lag_seconds{topic}         age of the oldest of those (0: none)
    rocketha_topic_table_last_commit_timestamp_seconds{topic}   epoch seconds (absent: none)
    rocketha_topic_table_failures_in_a_row{topic}   passes failed since the last success
    rocketha_topic_table_rows_total{topic}          rows this broker committed (counter)
    rocketha_topic_table_commits_total{topic}       commits this broker made (counter)

Alert on lag_seconds above a few topicTableIntervalMs, or on failures_in_a_row > 0 for long.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["table_families"]

_GAUGES = (
    ("rocketha_topic_table_lag_messages", "lag_messages",
     "Confirmed messages not yet in the topic's table"),
    ("rocketha_topic_table_lag_seconds", "lag_seconds",
     "Age of the oldest confirmed message not yet in the table (0 when none)"),
    ("rocketha_topic_table_failures_in_a_row", "failures_in_a_row",
     "Table passes failed since the last successful one"),
)
_COUNTERS = (
    ("rocketha_topic_table_rows", "rows", "Rows this broker committed to the table"),
    ("rocketha_topic_table_commits", "commits", "Commits this broker made to the table"),
)


def table_families(stats: Mapping[str, Any], labels: list[str], base: list[str]
                   ) -> Iterator[Metric]:
    """The families above, `labels`/`base` the broker's common labels and their values."""
    topics = stats.get("topics", {}) if stats.get("role") == "master" else {}
    names = [*labels, "topic"]
    for name, key, doc in _GAUGES:
        family = GaugeMetricFamily(name, doc, labels=names)
        for topic, values in sorted(topics.items()):
            if values.get(key) is not None:
                family.add_metric([*base, topic], float(values[key]))
        yield family
    last = GaugeMetricFamily("rocketha_topic_table_last_commit_timestamp_seconds",
                             "When this broker last committed to the table (epoch seconds)",
                             labels=names)
    for topic, values in sorted(topics.items()):
        if values.get("last_commit_ms") is not None:
            last.add_metric([*base, topic], values["last_commit_ms"] / 1000.0)
    yield last
    for name, key, doc in _COUNTERS:
        counter = CounterMetricFamily(name, doc, labels=names)
        for topic, values in sorted(topics.items()):
            counter.add_metric([*base, topic], int(values.get(key) or 0))
        yield counter
