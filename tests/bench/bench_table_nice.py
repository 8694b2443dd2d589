"""topicTableNice benchmark: produce into a table topic, its threads niced or not.

    python3 build.py bench table_nice [--json] [--rows N] [--repeat R] [--nice N]

Method: three real broker processes on 127.0.0.1, set up as in bench_table.py: `off`
(topicTableDefault=none), `nice0` (delta, topicTableNice=0) and `nice` (delta, topicTableNice
= --nice, 10 by default), topicTableIntervalMs=1000. R rounds, the three taking turns, of N
rows each from one client at full speed (rounds of several seconds: a table commit every
second falls inside each). After each of its rounds a table broker's lag_seconds is read,
then the seconds until its table holds every row (the next round starts from a caught-up
table).

  produce_ratio_nice0 / produce_ratio_nice   mean rows/s of the rounds, against `off`'s
  table_lag_after_round_s_nice0 / _nice      mean lag_seconds right after a round
  table_catch_up_s_nice0 / _nice             mean seconds from then until caught up

The machine is shared: the three take turns so that each sees the same load.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig
from tests.bench.bench_table import QUEUES, TOPIC, produce, table_stats, wait_caught_up
from tests.integration.broker_process import BrokerProcess


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=4)
    parser.add_argument("--nice", type=int, default=10)
    args = parser.parse_args(argv)
    root = Path.cwd() / ".bench-tmp"
    root.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root))
    common = {"mappedFileSizeCommitLog": str(1 << 30), "flushDiskType": "ASYNC_FLUSH",
              "defaultTopicQueueNums": str(QUEUES)}
    settings = {"off": {}, "nice0": {"topicTableNice": "0"},
                "nice": {"topicTableNice": str(args.nice)}}
    brokers: dict[str, BrokerProcess] = {}
    rates: dict[str, list[float]] = {name: [] for name in settings}
    lags: dict[str, list[float]] = {name: [] for name in settings if name != "off"}
    catch_up: dict[str, list[float]] = {name: [] for name in lags}
    try:
        for name, extra in settings.items():
            table = {} if name == "off" else {"topicTableDefault": "delta",
                                              "topicTableIntervalMs": "1000"}
            brokers[name] = BrokerProcess(work / name, tieredStoreUrl=f"file://{work / name}-tier",
                                          **common, **table, **extra).start()
            Admin(ClientConfig(brokers=(brokers[name].endpoint,))).create_topic(TOPIC,
                                                                                queues=QUEUES)
        for round_index in range(args.repeat):
            for name, broker in brokers.items():
                rates[name].append(produce(broker, TOPIC, args.rows,
                                           first=round_index * args.rows))
                if name in lags:
                    lags[name].append(float(table_stats(broker, TOPIC).get("lag_seconds") or 0))
                    catch_up[name].append(wait_caught_up(broker, TOPIC))
            print(f"round {round_index + 1}: " + ", ".join(
                f"{name} {values[-1]:,.0f} rows/s" for name, values in rates.items()), flush=True)
    finally:
        for broker in brokers.values():
            broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    figures: dict[str, float] = {"rows": args.rows, "repeat": args.repeat, "nice": args.nice}
    for name, lag in lags.items():
        figures[f"produce_ratio_{name}"] = statistics.mean(rates[name]) / statistics.mean(
            rates["off"])
        figures[f"table_lag_after_round_s_{name}"] = statistics.mean(lag)
        figures[f"table_catch_up_s_{name}"] = statistics.mean(catch_up[name])
    print(", ".join(f"{key} {value:.3f}" for key, value in sorted(figures.items())), flush=True)
    if args.json:
        print(json.dumps({key: round(value, 4) for key, value in figures.items()},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
