"""`/metrics` of a broker (Prometheus text format), collected when scraped, never on the put path.

`serve_metrics(service, port)` starts prometheus_client's HTTP server on a daemon thread with one
custom collector. Each scrape reads what the broker already keeps: the store's positions, the
master's replication stats (SyncStateSet, each slave's acked position and when it last caught
up), the slave's link, the tier's upload queue, committed consumer offsets against the queues'
ends, and the per-batch traffic counters (ha/broker/telemetry.py). Every series carries the
labels `cluster`, `replica_set` (brokerName) and `broker` (the client endpoint host:port).

Names follow RocketMQ 5 where it has the concept (its metrics docs):
    rocketmq_messages_in_total{topic}            messages stored by puts on this broker
    rocketmq_throughput_in_total{topic}          bytes of those produce batches
    rocketmq_messages_out_total{topic}           messages served to consumers
    rocketmq_throughput_out_total{topic}         record bytes served
    rocketmq_rpc_latency{request="produce"}      histogram (ms) of produce batches
    rocketmq_storage_flush_behind_bytes          written but not yet fsynced
    rocketmq_consumer_lag_messages{group,topic,queue_id}   queue end - committed offset
and rocketha_* for the HA state operators alert on:
    rocketha_build_info{version}                 1, labelled with the running release
    rocketha_broker_role{role}                   1 for the current role (MASTER/SLAVE/NONE)
    rocketha_master_epoch                        epoch of the term this broker serves/follows
    rocketha_log_position_bytes{position}        min / max / confirm / flushed
    rocketha_confirm_lag_bytes                   max - confirm (acked-but-unconfirmed tail)
    rocketha_sync_state_set_size                 master only
    rocketha_need_ack_replicas / rocketha_in_sync_replicas_configured
    rocketha_in_sync_degraded                    1 when the quorum rule dropped below
                                                 inSyncReplicas (enableAutoInSyncReplicas)
    rocketha_master_lease_remaining_seconds      controller mode, master only
    rocketha_slave_lag_bytes{slave_broker_id}    master's end - the slave's acked position
    rocketha_slave_lag_seconds{slave_broker_id}  0 when caught up, else time since it was
    rocketha_slave_in_sync_state_set{slave_broker_id}
    rocketha_slave_link_up                       slave only: 1 while the link transfers
    rocketha_tier_upload_backlog_segments        sealed segments waiting for upload
    rocketha_tier_uploaded_segments_total / _uploaded_bytes_total / _upload_failures_total
    rocketha_long_poll_waiters                   consume calls parked in a long poll
    rocketha_put_batches_total{status}           produce batches by put status
    rocketha_rejected_requests_total{code}       calls refused with a wire error code
    rocketha_topic_messages{topic}               messages held (sum over queues of max - min)
    rocketha_topic_table_*{topic}                topic tables' lag and commits (table_metrics.py)

Cardinality: consumer-lag and topic series stop at SERIES_MAX per family (then a warning
series `rocketha_metrics_truncated{family}` says so).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from conf.metrics_http import OPEN, MetricsAccess, MetricsServer, serve_collector
from conf.version import VERSION
from ha.broker.table_metrics import table_families
from ha.broker.telemetry import LATENCY_BUCKETS_MS

__all__ = ["SERIES_MAX", "BrokerCollector", "MetricsServer", "serve_metrics"]

logger = logging.getLogger(__name__)

SERIES_MAX = 20_000
_ROLES = ("MASTER", "SLAVE", "NONE")
_LABELS = ["cluster", "replica_set", "broker"]


class _Service(Protocol):
    """What the collector reads from BrokerService (kept narrow on purpose)."""

    config: Any
    store: Any
    topics: Any
    offsets: Any
    replication: Any
    traffic: Any
    endpoint: str

    def counters_snapshot(self) -> dict[str, int]: ...
    def tier_stats(self) -> dict[str, Any]: ...
    def table_stats(self) -> dict[str, Any]: ...


class BrokerCollector(Collector):
    def __init__(self, service: _Service) -> None:
        self._service = service

    def collect(self) -> Iterator[Metric]:
        service = self._service
        config = service.config
        base = [config.broker_cluster_name, config.broker_name, service.endpoint]
        info = GaugeMetricFamily("rocketha_build_info", "1, labelled with the running version",
                                 labels=[*_LABELS, "version"])
        info.add_metric([*base, VERSION], 1)
        yield info
        yield from self._traffic(base)
        yield from self._store(base)
        yield from self._replication(base)
        yield from self._requests(base)
        yield from self._consumers(base)
        yield from table_families(service.table_stats(), _LABELS, base)  # table_metrics.py

    # -- families ---------------------------------------------------------------------------
    def _traffic(self, base: list[str]) -> Iterator[Metric]:
        traffic = self._service.traffic.snapshot()
        for name, table, doc in (
            ("rocketmq_messages_in", traffic.messages_in, "Messages stored by puts"),
            ("rocketmq_throughput_in", traffic.bytes_in, "Bytes of stored produce batches"),
            ("rocketmq_messages_out", traffic.messages_out, "Messages served to consumers"),
            ("rocketmq_throughput_out", traffic.bytes_out, "Record bytes served to consumers"),
        ):
            family = CounterMetricFamily(name, doc, labels=[*_LABELS, "topic"])
            for topic, value in sorted(table.items()):
                family.add_metric([*base, topic], value)
            yield family
        batches = CounterMetricFamily("rocketha_put_batches", "Produce batches by put status",
                                      labels=[*_LABELS, "status"])
        for status, value in sorted(traffic.put_batches.items()):
            batches.add_metric([*base, status], value)
        yield batches
        latency = HistogramMetricFamily("rocketmq_rpc_latency",
                                        "Produce batch latency in milliseconds (store + quorum)",
                                        labels=[*_LABELS, "request"], unit="")
        cumulative, buckets = 0, []
        for bound, count in zip((*LATENCY_BUCKETS_MS, float("inf")), traffic.latency_counts,
                                strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        latency.add_metric([*base, "produce"], buckets, traffic.latency_sum_ms)
        yield latency

    def _store(self, base: list[str]) -> Iterator[Metric]:
        service = self._service
        stats = service.store.stats()
        positions = GaugeMetricFamily("rocketha_log_position_bytes",
                                      "CommitLog positions (bytes)",
                                      labels=[*_LABELS, "position"])
        for name, value in (("min", stats.min_log_position), ("max", stats.log_position_end),
                            ("confirm", stats.confirm_log_position),
                            ("flushed", stats.flushed_log_position)):
            positions.add_metric([*base, name], value)
        yield positions
        yield _gauge("rocketmq_storage_flush_behind_bytes", "Written but not yet fsynced",
                     base, max(0, stats.log_position_end - stats.flushed_log_position))
        yield _gauge("rocketha_confirm_lag_bytes", "Max log position minus confirm position",
                     base, max(0, stats.log_position_end - stats.confirm_log_position))
        yield _gauge("rocketha_commit_log_segments", "CommitLog segment files", base,
                     stats.commit_log_segments)
        tier = service.tier_stats()
        upload = tier.get("upload") or {}
        backlog = GaugeMetricFamily("rocketha_tier_upload_backlog_segments",
                                    "Sealed segments waiting for upload to the tier",
                                    labels=_LABELS)
        if tier.get("enabled"):
            backlog.add_metric(base, int(upload.get("pending_segments") or 0))
        yield backlog
        for name, key, doc in (
            ("rocketha_tier_uploaded_segments", "uploaded_segments", "Segments uploaded"),
            ("rocketha_tier_uploaded_bytes", "uploaded_bytes", "Bytes uploaded to the tier"),
            ("rocketha_tier_upload_failures", "upload_failures", "Failed upload attempts"),
        ):
            counter = CounterMetricFamily(name, doc, labels=_LABELS)
            if tier.get("enabled"):
                counter.add_metric(base, int(upload.get(key) or 0))
            yield counter
        topics = GaugeMetricFamily("rocketha_topic_messages",
                                   "Messages held per topic (sum over queues of max - min)",
                                   labels=[*_LABELS, "topic"])
        store = service.store
        for topic in service.topics.all()[:SERIES_MAX]:
            held = sum(store.max_queue_offset(topic.name, queue_id)
                       - store.min_queue_offset(topic.name, queue_id)
                       for queue_id in range(topic.read_queue_nums))
            topics.add_metric([*base, topic.name], held)
        yield topics

    def _replication(self, base: list[str]) -> Iterator[Metric]:
        replication = self._service.replication
        info = replication.info()
        role = info.get("role", "NONE")
        roles = GaugeMetricFamily("rocketha_broker_role", "1 for this broker's current role",
                                  labels=[*_LABELS, "role"])
        for name in _ROLES:
            roles.add_metric([*base, name], 1 if role == name else 0)
        yield roles
        yield _gauge("rocketha_master_epoch", "Master epoch served or followed", base,
                     info.get("master_epoch") or 0)
        master = replication.master
        slave = replication.slave
        if master is not None:
            yield from self._master(base, master, info)
        link_up = GaugeMetricFamily("rocketha_slave_link_up",
                                    "Slave only: 1 while the HA link to the master transfers",
                                    labels=_LABELS)
        if slave is not None:
            link_up.add_metric(base, 1 if info.get("link_state") == "TRANSFER" else 0)
        yield link_up

    def _master(self, base: list[str], master: Any, info: dict[str, Any]) -> Iterator[Metric]:
        stats = master.stats()
        configured = self._service.config.ha.in_sync_replicas
        yield _gauge("rocketha_sync_state_set_size", "Members of the SyncStateSet (master "
                     "included)", base, len(stats.sync_state_set))
        yield _gauge("rocketha_need_ack_replicas", "Replicas a put needs now (master "
                     "included)", base, stats.need_ack_nums)
        yield _gauge("rocketha_in_sync_replicas_configured", "inSyncReplicas", base, configured)
        yield _gauge("rocketha_in_sync_degraded", "1 when puts need fewer replicas than "
                     "inSyncReplicas", base, 1 if stats.need_ack_nums < configured else 0)
        lease = info.get("master_lease_left_ms")
        if lease is not None:
            yield _gauge("rocketha_master_lease_remaining_seconds", "Master lease left", base,
                         lease / 1000.0)
        now_ms = int(time.monotonic() * 1000)  # the clock of ha/replication/master_service.py
        lag_bytes = GaugeMetricFamily("rocketha_slave_lag_bytes", "Master's end minus the "
                                      "slave's acked position", labels=[*_LABELS,
                                                                        "slave_broker_id"])
        lag_seconds = GaugeMetricFamily("rocketha_slave_lag_seconds", "0 when caught up, else "
                                        "seconds since the slave last held the master's end",
                                        labels=[*_LABELS, "slave_broker_id"])
        in_set = GaugeMetricFamily("rocketha_slave_in_sync_state_set", "1 when the slave is "
                                   "in the SyncStateSet", labels=[*_LABELS, "slave_broker_id"])
        for link in stats.links:
            if link.broker_id < 0:
                continue  # still in the handshake: no id yet
            labels = [*base, str(link.broker_id)]
            behind = max(0, stats.master_log_position - max(link.acked_log_position, 0))
            lag_bytes.add_metric(labels, behind)
            caught_up = link.last_caught_up_ms
            lag_seconds.add_metric(labels, 0.0 if behind == 0 or caught_up < 0
                                   else max(0, now_ms - caught_up) / 1000.0)
            in_set.add_metric(labels, 1 if link.in_sync_state_set else 0)
        yield lag_bytes
        yield lag_seconds
        yield in_set

    def _requests(self, base: list[str]) -> Iterator[Metric]:
        counters = self._service.counters_snapshot()
        rejected = CounterMetricFamily("rocketha_rejected_requests",
                                       "Calls refused with a wire error, by code",
                                       labels=[*_LABELS, "code"])
        for key, value in sorted(counters.items()):
            if key.startswith("error:"):
                rejected.add_metric([*base, key[6:]], value)
        yield rejected
        waiters = counters.get("long_polls", 0) - counters.get("long_polls_done", 0)
        yield _gauge("rocketha_long_poll_waiters", "Consume calls parked in a long poll",
                     base, max(0, waiters))
        yield _gauge("rocketha_long_poll_max", "longPollingMax", base,
                     self._service.config.long_polling_max)

    def _consumers(self, base: list[str]) -> Iterator[Metric]:
        service = self._service
        lag = GaugeMetricFamily("rocketmq_consumer_lag_messages", "Queue end minus the group's "
                                "committed offset", labels=[*_LABELS, "group", "topic",
                                                            "queue_id"])
        series = 0
        for group, topics in sorted(service.offsets.snapshot().items()):
            for topic, queues in sorted(topics.items()):
                for queue_id, committed in sorted(queues.items()):
                    if series >= SERIES_MAX:
                        yield lag
                        yield _truncated(base, "rocketmq_consumer_lag_messages")
                        return
                    end = service.store.max_queue_offset(topic, int(queue_id))
                    lag.add_metric([*base, group, topic, str(queue_id)], max(0, end - committed))
                    series += 1
        yield lag


def _gauge(name: str, doc: str, base: list[str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=_LABELS)
    family.add_metric(base, value)
    return family


def _truncated(base: list[str], family_name: str) -> GaugeMetricFamily:
    family = GaugeMetricFamily("rocketha_metrics_truncated", f"Series beyond {SERIES_MAX}",
                               labels=[*_LABELS, "family"])
    family.add_metric([*base, family_name], 1)
    return family


def serve_metrics(service: _Service, host: str, port: int,
                  access: MetricsAccess = OPEN) -> MetricsServer:
    """Serve `/metrics` on host:port as `access` says. Raises OSError (e.g. the port is in
    use)."""
    server = serve_collector(BrokerCollector(service), host, port, access)
    logger.info("metrics on %s", server.url)
    return server
