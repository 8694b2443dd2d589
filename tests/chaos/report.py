"""A chaos run's pictures: the PNG timeline and the HTML page beside the JSON report.

Timeline (matplotlib, Agg): top, acknowledged sends per second and sends that ended without an
ack (indeterminate, red); bottom, each acknowledged send's latency (log scale) and the
unacknowledged ones (red x at the time they gave up). Fault windows are shaded in both, one
colour per kind, labelled with the kind and target.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tests.chaos.checker import fault_windows
from tests.chaos.history import Event, pairs

__all__ = ["write_html", "write_timeline"]

COLOURS = {"kill": "tab:red", "pause": "tab:orange", "partition": "tab:purple",
           "loss": "tab:brown", "link": "tab:gray", "power": "tab:blue",
           "corrupt": "tab:pink", "disk": "tab:olive", "handover": "teal",
           "restart": "gold"}


def write_timeline(events: Sequence[Event], path: Path, title: str) -> Path:
    events = sorted(events, key=lambda e: e["t"])
    t0 = events[0]["t"] if events else 0

    def seconds(t: int) -> float:
        return (t - t0) / 1e9

    oks, others = [], []
    for invoke, done in pairs(events, "send"):
        if done is None:
            continue
        point = (seconds(done["t"]), (done["t"] - invoke["t"]) / 1e6)
        (oks if done["type"] == "ok" else others).append(point)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(12, 6), sharex=True)
    per_second = Counter(int(t) for t, _ in oks)
    failed_per_second = Counter(int(t) for t, _ in others)
    span = range(int(max([t for t, _ in oks + others], default=0)) + 1)
    top.plot(list(span), [per_second[s] for s in span], color="tab:green", lw=1,
             label="acknowledged / s")
    top.bar(list(span), [failed_per_second[s] for s in span], color="red", width=1.0,
            label="no ack / s")
    top.set_ylabel("sends per second")
    if oks:
        bottom.scatter([t for t, _ in oks], [ms for _, ms in oks], s=2, color="tab:green",
                       label="ack latency")
    if others:
        bottom.scatter([t for t, _ in others], [max(ms, 0.1) for _, ms in others], s=18,
                       marker="x", color="red", label="gave up (indeterminate)")
    bottom.set_yscale("log")
    bottom.set_ylabel("send latency (ms)")
    bottom.set_xlabel("seconds since the run began")
    end = seconds(events[-1]["t"]) if events else 0
    shown: set[str] = set()
    for window in fault_windows(events):
        stop = seconds(window.stop_ns) if window.stop_ns is not None else end
        colour = COLOURS.get(window.kind, "tab:cyan")
        for axis in (top, bottom):
            axis.axvspan(seconds(window.start_ns), stop, color=colour, alpha=0.18,
                         label=window.kind if axis is top and window.kind not in shown else None)
        shown.add(window.kind)
        top.text(seconds(window.start_ns), 1.0, f"{window.kind} {','.join(window.targets)}",
                 transform=top.get_xaxis_transform(), fontsize=6, rotation=90, va="top")
    top.legend(loc="upper right", fontsize=7, ncols=3)
    bottom.legend(loc="upper right", fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def write_html(report: dict[str, Any], png: Path, path: Path) -> Path:
    """The timeline beside the report, and the fault table with each recovery time."""
    rows = "".join(
        f"<tr><td>{html.escape(str(r['name']))}</td><td>{html.escape(', '.join(r['targets']))}"
        f"</td><td>{r['rto_s']}</td><td>{'yes' if r['recovered'] else 'NO'}</td><td>"
        f"{html.escape(', '.join(f'{k} {v}' for k, v in r.get('by_set_s', {}).items()))}"
        "</td></tr>"
        for r in report.get("rto", []))
    verdict = "valid" if report["valid"] else f"INVALID: {report.get('first_violation')}"
    heading_class = "" if report["valid"] else "bad"
    page = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rocketha chaos seed {report['seed']}</title>
<style>body{{font-family:sans-serif;margin:1em}} .row{{display:flex;gap:1em}}
pre{{font-size:12px;max-width:40em;overflow:auto}} img{{max-width:60vw;height:auto}}
td,th{{padding:2px 8px;font-size:12px}} .bad{{color:#b00}}</style></head>
<body><h1 class="{heading_class}">seed {report['seed']}: {html.escape(verdict)}</h1>
<div class="row"><img src="{html.escape(png.name)}" alt="timeline">
<pre>{html.escape(json.dumps({k: v for k, v in report.items() if k != 'rto'}, indent=1))}</pre>
</div><h2>faults</h2><table><tr><th>fault</th><th>targets</th><th>RTO (s)</th>
<th>recovered</th><th>first ack per set (s)</th></tr>{rows}</table></body></html>
"""
    path.write_text(page)
    return path
