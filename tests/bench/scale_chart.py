"""The scale benchmark's PNG: one panel per curve, each figure over its sizes on log-log axes,
normalised to its first point (so figures of different units share a panel and a line's slope
is the shape tests/bench/scale_shape.py names)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after the backend is chosen

from tests.bench.bench_scale import SHAPED

__all__ = ["chart"]


def chart(result: dict[str, Any], path: Path) -> None:
    curves = result["curves"]
    figure, axes = plt.subplots(1, len(curves), figsize=(4.2 * len(curves), 4.2), squeeze=False)
    for axis, (name, curve) in zip(axes[0], curves.items(), strict=True):
        size_field, fields = SHAPED[name]
        rows = curve["points"]
        xs = [row[size_field] for row in rows]
        for field in fields:
            base = rows[0][field] or 1e-9
            shape = curve["shapes"][field]
            axis.plot(xs, [max(row[field], 1e-9) / base for row in rows], marker="o",
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
