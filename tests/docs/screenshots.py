"""The docs' pictures, made by the tools themselves: `python3 build.py screenshots`.

Why: a screenshot drawn by hand goes stale the day the console changes; these are remade from
the same code the pages describe, into docs/images/ (committed, each kept under
IMAGE_BYTES_MAX by reducing it to a palette):

- console.png: the web console of a `rocketha-cluster up` cluster (one controller, a replica set
  of three, a topic with messages and a consumer group), in headless Chromium via Selenium,
  as tests/integration/test_console.py drives it;
- chaos-timeline.png: tests/chaos/report.py's timeline of the kept real campaign history
  (tests/chaos/testdata/real_run.jsonl.gz);
- bench-peers.png, bench-recut.png: matplotlib charts of the kept benchmark JSON
  (tests/bench/results/).

`--only NAME[,NAME]` remakes some of them (console, chaos, bench).
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
RESULTS = ROOT / "tests" / "bench" / "results"
IMAGE_BYTES_MAX = 150_000
CONSOLE_WINDOW = (1280, 760)


def save_small(png: bytes, path: Path, colours: int = 64) -> Path:
    """Write `png` reduced to a palette of `colours` (screens and charts have few), halving the
    palette until it fits IMAGE_BYTES_MAX."""
    image = Image.open(io.BytesIO(png)).convert("RGB")
    while True:
        out = io.BytesIO()
        image.quantize(colors=colours).save(out, format="PNG", optimize=True)
        if out.tell() <= IMAGE_BYTES_MAX or colours <= 8:
            break
        colours //= 2
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(out.getvalue())
    return path


def _figure_png(draw: Callable[[Figure], None], size: tuple[float, float]) -> bytes:
    figure = plt.figure(figsize=size, dpi=90)
    draw(figure)
    figure.tight_layout()
    out = io.BytesIO()
    figure.savefig(out, format="png")
    plt.close(figure)
    return out.getvalue()


def bench_peers(images: Path) -> list[Path]:
    data = json.loads((RESULTS / "peers-2026-11-25.json").read_text())
    cases = [(f"{r.upper()} {size} {durability}", f"publish_{r}_{size}_{durability}")
             for r in ("r1", "r3") for size in ("100B", "1KiB") for durability in ("async", "sync")]

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        ys = range(len(cases))
        ours = [data[f"rocketha_{key}"] for _, key in cases]
        theirs = [data[f"jetstream_{key}"] for _, key in cases]
        axes.barh([y + 0.2 for y in ys], ours, 0.4, label="rocketha", color="tab:blue")
        axes.barh([y - 0.2 for y in ys], theirs, 0.4, label="NATS JetStream", color="tab:gray")
        axes.set_yticks(list(ys), [label for label, _ in cases])
        axes.set_xscale("log")
        axes.set_xlabel("acknowledged publishes per second (log scale)")
        axes.set_xlim(right=max(ours + theirs) * 6)  # room for the legend beside the bars
        axes.set_title(f"Acknowledged publish, rocketha and JetStream ({data['date']})",
                       fontsize=9)
        axes.legend(loc="lower right")
    return [save_small(_figure_png(draw, (8, 4.2)), images / "bench-peers.png")]


def bench_recut(images: Path) -> list[Path]:
    data = json.loads((RESULTS / "recut-ab-2026-12-02.json").read_text())
    figures = [("storage", "append_100B_batch1024_async_msgs_per_s", "storage append\n100 B x1024"),
               ("storage", "read_100B_msgs_per_s", "storage read 100 B"),
               ("broker", "produce_100B_batch1024_msgs_per_s", "broker produce\n100 B x1024"),
               ("broker", "consume_msgs_per_s", "broker consume 100 B")]
    runs = ["before1", "after1", "before2", "after2"]

    def draw(figure: Figure) -> None:
        axes = figure.add_subplot()
        width = 0.2
        for i, run in enumerate(runs):
            values = [data[f"{bench}_{run}"][key] for bench, key, _ in figures]
            axes.bar([x + (i - 1.5) * width for x in range(len(figures))], values, width,
                     label=run, color=("tab:gray" if run.startswith("before") else "tab:blue"),
                     alpha=0.6 if run.endswith("1") else 1.0)
        axes.set_xticks(range(len(figures)), [label for *_, label in figures], fontsize=8)
        axes.set_yscale("log")
        axes.set_ylabel("messages per second (log scale)")
        axes.set_title(f"Old and new tree, alternated ({data['date']}, {data['machine']})",
                       fontsize=9)
        axes.legend(ncol=4, fontsize=8)
    return [save_small(_figure_png(draw, (8, 4)), images / "bench-recut.png")]


def chaos(images: Path) -> list[Path]:
    from tests.chaos.history import read_history
    from tests.chaos.report import write_timeline

    events = read_history(ROOT / "tests" / "chaos" / "testdata" / "real_run.jsonl.gz")
    with tempfile.TemporaryDirectory() as scratch:
        drawn = write_timeline(events, Path(scratch) / "timeline.png",
                               "A kept chaos campaign: sends, latencies and fault windows")
        return [save_small(drawn.read_bytes(), images / "chaos-timeline.png")]


def console(images: Path) -> list[Path]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from connector import Admin, ClientConfig, Producer
    from tests.integration.operated_cluster import OperatedCluster, wait_for

    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and driver_path):
        raise SystemExit("screenshots: the console needs Debian's chromium and chromium-driver "
                         "(python3 build.py setup installs them)")
    with tempfile.TemporaryDirectory() as scratch:
        cluster = OperatedCluster(Path(scratch) / "cluster", defaultTopicQueueNums="4")
        options = webdriver.ChromeOptions()
        options.binary_location = chromium
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size={},{}".format(*CONSOLE_WINDOW)):
            options.add_argument(flag)
        browser = webdriver.Chrome(service=Service(driver_path), options=options)
        try:
            master = cluster.wait_master()
            config = ClientConfig(brokers=(master["endpoint"],), retries_max=3)
            with Producer(config) as producer:
                producer.send_batch("orders", [{"body": b"o" * 64, "key": f"customer-{n}"}
                                               for n in range(1000)])
            Admin(config).commit_offset("billing", "orders", 0, 120)
            url = cluster.controller()["console_url"]
            browser.get(url)
            wait_for(lambda: "orders" in browser.find_element("css selector", "#topics").text
                     and "billing" in browser.find_element("css selector", "#groups").text,
                     30, "the console to show the topic and the group")
            shot = browser.get_screenshot_as_png()
        finally:
            browser.quit()
            cluster.down()
    return [save_small(shot, images / "console.png")]


MAKERS: dict[str, Callable[[Path], list[Path]]] = {
    "console": console, "chaos": chaos,
    "bench": lambda images: bench_peers(images) + bench_recut(images)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="build.py screenshots", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(MAKERS), help="console,chaos,bench")
    parser.add_argument("--out", type=Path, default=IMAGES, help="default: docs/images/")
    args = parser.parse_args(argv)
    names = [name for name in args.only.split(",") if name]
    unknown = sorted(set(names) - set(MAKERS))
    if unknown:
        parser.error(f"unknown picture(s) {unknown}; known: {sorted(MAKERS)}")
    for name in names:
        for path in MAKERS[name](args.out):
            print(f"{path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
