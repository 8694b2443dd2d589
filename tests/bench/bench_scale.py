"""Scale benchmark: how each cost grows with queues, producers, consumer groups, replica sets
and log size; each curve's shape (constant / log / linear / worse) beside its figures.

    python3 build.py bench scale [--json] [--full] [--curves queues,clients,sets,log]
                                 [--queues 8,2000,10000] [--log-gib 1,5] [--save]

Curves (each method is in its module's docstring):
  (a) queues per broker, tests/bench/scale_queues.py: put p50/p99, broker RSS, start-up and
      recovery after SIGKILL, controller heartbeat bytes and controller CPU;
  (b) producers (connections) and consumer groups, tests/bench/scale_clients.py: broker
      threads and RSS, put p99, offset commits/s;
  (c) replica sets per controller group, tests/bench/scale_sets.py (fake brokers of
      tests/bench/scale_heartbeater.py): controller CPU and RSS, Raft log and snapshot bytes,
      the controller's failover RTO p50;
  (d) log size, tests/bench/scale_log.py: restart after SIGKILL and after a clean stop, disk
      use over payload, a new slave's full catch-up rate.
The default sizes fit a small machine in about ten minutes; `--full` reaches the issue's sizes
(10,000 queues, 1,000 producers and groups, 50 sets, 20 GiB). The 1-minute load average is
recorded beside every point: on a shared machine a point taken under load is slower, and the
curve's shape should be read with it. Shapes come from the log-log slope of each figure over
its sizes (tests/bench/scale_shape.py). `--save` writes the JSON and a PNG of the curves to
tests/bench/results/scale-<date>[-full][-<curves>].{json,png}; `--reshape FILE.json`
computes a saved run's shapes, keys and PNG again from its points. With --json the last
line is the keys:
`put_p99_ratio_<top>_vs_8_queues` (the steady state: every queue written once first, the
producer's streams open; `..._first_puts`: a new producer's sends to queues never written;
`..._open_streams`: the same with its streams to every topic open first),
`rss_bytes_per_queue`, `restart_s_<size>GiB`,
`clean_restart_s_<size>GiB`, `catchup_mb_s`, `put_p99_ratio_<top>_producers` (<top> as a
number: `put_p99_ratio_1000_producers`),
`commits_per_s_ratio_<top>_groups`, `failover_p50_s_<top>_sets` (<top>: the largest size the
run reached, so a default run's keys never claim the --full sizes).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.bench_peers import machine
from tests.bench.scale_chart import SHAPED, chart
from tests.bench.scale_clients import groups_curve, producers_curve
from tests.bench.scale_log import log_curve
from tests.bench.scale_probe import load_average
from tests.bench.scale_queues import queues_curve
from tests.bench.scale_sets import sets_curve
from tests.bench.scale_shape import classify, classify_increment

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
CURVES = ("queues", "clients", "sets", "log")


@dataclasses.dataclass(frozen=True)
class Sizes:
    queues: list[int]
    put_samples: int
    producers: list[int]
    groups: list[int]
    sets: list[int]
    failover_trials: int
    log_gib: list[float]
    catchup_gib: float


DEFAULT = Sizes(queues=[8, 64, 512, 2000], put_samples=1000, producers=[1, 8, 64],
                groups=[1, 10, 100, 300], sets=[1, 5, 20], failover_trials=5,
                log_gib=[0.25, 0.5, 1.0], catchup_gib=0.5)
FULL = Sizes(queues=[8, 64, 512, 2000, 10_000], put_samples=2000,
             producers=[1, 10, 100, 1000], groups=[1, 10, 100, 1000], sets=[1, 5, 10, 25, 50],
             failover_trials=10, log_gib=[1.0, 5.0, 10.0, 20.0], catchup_gib=5.0)

def shapes(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    size_field, fields = SHAPED[name]
    xs = [float(row[size_field]) for row in rows]
    result = {}
    for field in fields:
        if not all(field in row for row in rows):
            continue  # a figure a saved run's version did not take
        ys = [float(row[field]) for row in rows]
        result[field] = {**classify(xs, ys).to_json(),
                         "increment_shape": classify_increment(xs, ys).name}
    return result


def _size_label(value: float) -> str:
    return f"{value / 1000:g}k" if value >= 1000 and value % 1000 == 0 else f"{value:g}"


def keys(curves: dict[str, Any]) -> dict[str, float]:
    """The last JSON line, named after the sizes actually reached."""
    result: dict[str, float] = {}
    if "queues" in curves:
        rows = curves["queues"]["points"]
        first, top = rows[0], rows[-1]
        prefix = f"put_p99_ratio_{_size_label(top['queues'])}_vs_{first['queues']}_queues"
        # The headline is the steady state: queues in use, streams open (`_written` rows).
        # A new producer's sends to queues never written (`_first_puts`) are a transient:
        # their share of the samples, and so the p99, depends on how many samples the curve
        # takes per queue, and at 8 queues it is none after the eighth send (scale_queues.py).
        # Saved runs from before 2026-12-03 have no `_written` rows: their headline was the
        # first-puts figure.
        if "put_p99_ms_written" in top and "put_p99_ms_written" in first:
            result[prefix] = round(top["put_p99_ms_written"] / first["put_p99_ms_written"], 3)
        result[f"{prefix}_first_puts"] = round(top["put_p99_ms"] / first["put_p99_ms"], 3)
        if "put_p99_ms_open_streams" in top and "put_p99_ms_open_streams" in first:
            result[f"{prefix}_open_streams"] = round(
                top["put_p99_ms_open_streams"] / first["put_p99_ms_open_streams"], 3)
        result["rss_bytes_per_queue"] = round(
            (top["broker_rss_bytes"] - first["broker_rss_bytes"])
            / (top["queues"] - first["queues"]))
    if "producers" in curves:
        rows = curves["producers"]["points"]
        # the name spells the count out (put_p99_ratio_1000_producers)
        result[f"put_p99_ratio_{rows[-1]['producers']:g}_producers"] = round(
            rows[-1]["put_p99_ms"] / rows[0]["put_p99_ms"], 3)
        result["broker_threads_per_producer"] = round(
            (rows[-1]["broker_threads"] - rows[0]["broker_threads"])
            / (rows[-1]["producers"] - rows[0]["producers"]), 3)
    if "groups" in curves:
        rows = curves["groups"]["points"]
        result[f"commits_per_s_ratio_{_size_label(rows[-1]['groups'])}_groups"] = round(
            rows[-1]["commits_per_s"] / rows[0]["commits_per_s"], 3)
    if "sets" in curves:
        top = curves["sets"]["points"][-1]
        result[f"failover_p50_s_{top['sets']}_sets"] = top["failover_p50_s"]
    if "log" in curves:
        top = curves["log"]["points"][-1]
        label = f"{top['log_gib']:g}GiB"
        result[f"restart_s_{label}"] = round(top["kill_restart_readable_s"], 3)
        result[f"clean_restart_s_{label}"] = round(top["clean_restart_readable_s"], 3)
        result["catchup_mb_s"] = curves["log"]["catchup"]["mb_s"]
    return result


def run(work: Path, sizes: Sizes, names: list[str]) -> dict[str, Any]:
    curves: dict[str, Any] = {}
    if "queues" in names:
        rows = queues_curve(work, sizes.queues, sizes.put_samples)
        curves["queues"] = {"points": rows, "shapes": shapes("queues", rows)}
    if "clients" in names:
        rows = producers_curve(work, sizes.producers, sizes.put_samples)
        curves["producers"] = {"points": rows, "shapes": shapes("producers", rows)}
        rows = groups_curve(work, sizes.groups)
        curves["groups"] = {"points": rows, "shapes": shapes("groups", rows)}
    if "sets" in names:
        rows = sets_curve(work, sizes.sets, sizes.failover_trials)
        curves["sets"] = {"points": rows, "shapes": shapes("sets", rows)}
    if "log" in names:
        result = log_curve(work, sizes.log_gib, sizes.catchup_gib)
        curves["log"] = {**result, "shapes": shapes("log", result["points"])}
    return curves


def print_shapes(curves: dict[str, Any]) -> None:
    for name, curve in curves.items():
        for field, shape in curve["shapes"].items():
            print(f"shape {name:9s} {field:26s} {shape['shape']:8s} slope "
                  f"{shape['log_log_slope']:6.2f}, x{shape['growth_ratio']:.2f} over the curve; "
                  f"past the first point: {shape['increment_shape']}")


def reshape(path: Path) -> int:
    """A saved run's shapes and keys again from its points (after a change to the classifier),
    and its PNG beside it."""
    result = json.loads(path.read_text())
    for name, curve in result["curves"].items():
        curve["shapes"] = shapes(name, curve["points"])
    result["keys"] = keys(result["curves"])
    path.write_text(json.dumps(result, indent=1) + "\n")
    chart(result, path.with_suffix(".png"))
    print_shapes(result["curves"])
    print(json.dumps(result["keys"], sort_keys=True))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--full", action="store_true", help="the issue's sizes (hours)")
    parser.add_argument("--curves", default=",".join(CURVES),
                        help=f"comma-separated subset of {','.join(CURVES)}")
    parser.add_argument("--save", action="store_true",
                        help="write JSON and PNG to tests/bench/results/")
    parser.add_argument("--queues", help="queue counts instead of the preset's, e.g. 8,2000,10000"
                        " (the first is the reference of put_p99_ratio_<top>_vs_<first>_queues)")
    parser.add_argument("--log-gib", help="log sizes in GiB instead of the preset's, e.g. 1,5"
                        " (the catch-up then copies the smallest)")
    parser.add_argument("--reshape", type=Path,
                        help="recompute the shapes and keys of a saved run's JSON, and its PNG")
    args = parser.parse_args(argv)
    if args.reshape is not None:
        return reshape(args.reshape)
    names = [name for name in args.curves.split(",") if name]
    unknown = set(names) - set(CURVES)
    if unknown:
        parser.error(f"unknown curves {sorted(unknown)}; choose from {','.join(CURVES)}")
    root = ROOT / ".bench-tmp"
    root.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="scale-", dir=root))
    started = datetime.datetime.now(datetime.UTC)
    load_before = load_average()
    sizes = FULL if args.full else DEFAULT
    if args.queues:
        sizes = dataclasses.replace(sizes, queues=sorted(int(q) for q in args.queues.split(",")))
    if args.log_gib:
        log_gib = sorted(float(size) for size in args.log_gib.split(","))
        sizes = dataclasses.replace(sizes, log_gib=log_gib, catchup_gib=log_gib[0])
    try:
        curves = run(work, sizes, names)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print_shapes(curves)
    figures = keys(curves)
    result = {"date": started.strftime("%Y-%m-%dT%H:%MZ"), "machine": machine(),
              "command": "python3 build.py bench scale" + (" --full" if args.full else "")
              + ("" if names == list(CURVES) else f" --curves {','.join(names)}")
              + (f" --queues {args.queues}" if args.queues else "")
              + (f" --log-gib {args.log_gib}" if args.log_gib else ""),
              "load_1m_start": load_before, "load_1m_end": load_average(),
              "curves": curves, "keys": figures}
    if args.save:
        stem = (f"scale-{started:%Y-%m-%d}" + ("-full" if args.full else "")
                + ("" if names == list(CURVES) else "-" + "-".join(names)))
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
        chart(result, RESULTS / f"{stem}.png")
        print(f"saved {RESULTS / stem}.json and .png")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
