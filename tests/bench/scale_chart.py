"""The scale benchmark's PNG: one panel per curve, each figure over its sizes on log-log axes,
normalised to its first point (so figures of different units share a panel and a line's slope
is the shape tests/bench/scale_shape.py names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after the backend is chosen

__all__ = ["SHAPED", "chart"]

# the figures whose shape is reported, per curve: (size field, figure fields)
SHAPED = {
    "queues": ("queues", ["put_p50_ms", "put_p99_ms", "broker_rss_bytes",
                          "broker_rss_anon_bytes", "heartbeat_bytes",
                          "controller_cpu_share", "startup_to_put_s", "recovery_to_put_s"]),
    "producers": ("producers", ["put_p50_ms", "put_p99_ms", "broker_threads",
                                "broker_rss_bytes"]),
    "groups": ("groups", ["commits_per_s", "broker_rss_bytes"]),
    "sets": ("sets", ["controller_cpu_share_sum", "leader_rss_bytes", "raft_committed_index",
                      "raft_store_bytes", "snapshot_bytes", "failover_p50_s"]),
    "log": ("log_gib", ["disk_bytes", "clean_restart_readable_s", "kill_restart_readable_s"]),
}


def chart(result: dict[str, Any], path: Path) -> None:
    curves = result["curves"]
    figure, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 4.2), squeeze=False)
    for axis, (name, curve) in zip(axes[0], curves.items(), strict=True):
        size_field, fields = SHAPED[name]
        rows = curve["points"]
        xs = [row[size_field] for row in rows]
        for field in (f for f in fields if f in curve["shapes"]):
            base = next((row[field] for row in rows if row[field] > 0), 1.0)
            shape = curve["shapes"][field]
            points = [(x, row[field] / base) for x, row in zip(xs, rows, strict=True)
                      if row[field] > 0]  # a zero has no place on a log axis
            axis.plot([x for x, _ in points], [y for _, y in points], marker="o",
                      label=f"{field} ({shape['shape']}, {shape['log_log_slope']:.2f})")
        axis.plot(xs, [x / xs[0] for x in xs], color="grey", linestyle=":", label="linear")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel(size_field)
        axis.set_ylabel("relative to the first point")
        axis.set_title(name)
        axis.legend(fontsize=6)
    figure.suptitle(f"{result['command']} — {result['date']} — {result['machine']} — load "
                    f"{result['load_1m_start']}..{result['load_1m_end']}", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
