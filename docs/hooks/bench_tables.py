"""Benchmark tables generated at docs build time from the JSON the benchmarks wrote.

An MkDocs hook (mkdocs.yml `hooks:`). A benchmark page cites figures of a kept result file
(`tests/bench/results/*.json`, the last line of `bench NAME --json` or `bench all --json`)
with a marker; the build replaces it with the run's command, date and machine and a table:

    <!-- bench-table bench-all-20261125T130828Z.json broker
    command: python3 build.py bench all --json
    machine: 2 vCPUs (AMD EPYC), Linux 6.18, Python 3.11.7
    produce_100B_batch1024_msgs_per_s | acked produce, 100 B, batch 1024 | msgs/s
    -->

The second word picks a section of the file (a dotted path, `runs.0` for a list's first
item; `.` for the whole file); each row is `key | what it is | unit`, the key a dotted path in
that section (`a / b`: two figures side by side). `command:`, `date:` and `machine:` lines
are used only where the file does not say it itself (the file's own `command`, `date` or
`started`, `machine` win, in the section or at the top). The build fails, naming the page's
file and the key, when a cited figure, the file or the section does not exist, or when no
command, date or machine is known: a page can only show figures a benchmark wrote down.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "tests" / "bench" / "results"
MARKER = re.compile(r"^<!-- bench-table (?P<file>\S+) (?P<section>\S+)\n(?P<body>.*?)^-->$",
                    re.MULTILINE | re.DOTALL)
META = ("command", "date", "machine")


class BenchTableError(Exception):
    """A page cites a figure, section or file that the kept results do not have."""


def _at(data: Any, path: str, where: str) -> Any:
    if path == ".":
        return data
    for part in path.split("."):
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            raise BenchTableError(f"{where}: no {path!r} (no {part!r} there)")
    return data


def figure(value: Any) -> str:
    """A measured value as a reader scans it: thousands separated, 3 significant digits."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if abs(value) >= 1000 or float(value).is_integer():
        return f"{round(value):,}"
    return f"{float(f'{value:.3g}'):g}"


def _date(found: dict[str, Any]) -> str | None:
    if "date" in found:
        return str(found["date"])
    started = found.get("started")
    if isinstance(started, str):
        stamp = re.fullmatch(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)\d\dZ", started)
        if stamp:
            year, month, day, hour, minute = stamp.groups()
            return f"{year}-{month}-{day} {hour}:{minute} UTC"
        return started
    return None


def render(file: str, section: str, body: str, page: str = "a page") -> str:
    path = RESULTS / file
    if not path.is_file():
        raise BenchTableError(f"{page}: cites {file}, which is not in tests/bench/results/")
    data = json.loads(path.read_text())
    part = _at(data, section, f"{page}: {file}")
    given: dict[str, str] = {}
    rows: list[tuple[str, str, str]] = []
    for line in filter(None, (raw.strip() for raw in body.splitlines())):
        meta = re.fullmatch(r"(command|date|machine):\s*(.+)", line)
        if meta:
            given[meta.group(1)] = meta.group(2)
            continue
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) != 3 or not cells[0]:
            raise BenchTableError(f"{page}: {line!r} is not 'key | what it is | unit'")
        rows.append((cells[0], cells[1], cells[2]))
    if not rows:
        raise BenchTableError(f"{page}: a bench-table of {file} cites no figure")
    known: dict[str, str] = {}
    for source in (given, data if isinstance(data, dict) else {},
                   part if isinstance(part, dict) else {}):
        for name in META:
            value = _date(source) if name == "date" else source.get(name)
            if value is not None:
                known[name] = str(value)
    missing = [name for name in META if name not in known]
    if missing:
        raise BenchTableError(f"{page}: {file} {section} says no {', '.join(missing)}: "
                              "add a 'name: value' line to the marker")
    where = f"{page}: {file}" + ("" if section == "." else f" {section}")
    lines = [(f"`{known['command']}` on {known['date']}; {known['machine']} "
              f"(figures from `tests/bench/results/{file}`):"), "",
             "| figure | measured | key |", "|---|---|---|"]
    for key, what, unit in rows:
        value = " / ".join(figure(_at(part, one.strip(), where)) for one in key.split("/"))
        lines.append(f"| {what} | {value}{' ' + unit if unit else ''} | `{key}` |")
    return "\n".join(lines)


def replace_markers(markdown: str, page: str = "a page") -> str:
    return MARKER.sub(lambda m: render(m.group("file"), m.group("section"), m.group("body"),
                                       page), markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return replace_markers(markdown, page.file.src_path)
