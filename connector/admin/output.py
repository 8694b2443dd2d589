"""How `rocketha-admin` prints: aligned tables for people, `--json` / `--json-lines` for scripts.

    Output(mode).rows(columns, rows, title=None)   a table; --json: one JSON array of objects;
                                                    --json-lines: one object per line
    Output(mode).document(value)                   a nested value (broker stats): --json as is,
                                                    a table of flattened key/value otherwise
    Output(mode).note(text)                        a summary line: stdout for tables, stderr
                                                    with --json/--json-lines (stdout stays data)

Errors are one line on stderr, `rocketha-admin: <what>`, and an exit code (1: the cluster
answered with an error; 2: misuse or nothing to talk to).
"""

from __future__ import annotations

import base64
import datetime
import json
import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any, TextIO

__all__ = ["Output", "Progress", "body_text", "fail", "iso_ms", "progress_line"]

CELL_CHARS_MAX = 120  # a table cell is cut here (the JSON modes print everything)
PROGRESS_INTERVAL_S = 0.2  # a progress line is redrawn at most this often
PROGRESS_BAR_CHARS = 24


def fail(message: str, code: int = 1) -> int:
    print(f"rocketha-admin: {message}", file=sys.stderr)
    return code


def iso_ms(value: Any) -> str | None:
    """A timestamp (datetime or ms since the epoch) as ISO-8601 UTC with milliseconds."""
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    else:
        moment = datetime.datetime.fromtimestamp(int(value) / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def body_text(body: bytes | None) -> dict[str, str]:
    """{"body": text} when the body is UTF-8, else {"body_b64": base64}."""
    if body is None:
        return {"body": ""}
    try:
        return {"body": body.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_b64": base64.b64encode(body).decode()}


class Output:
    def __init__(self, mode: str) -> None:
        assert mode in ("table", "json", "json-lines"), mode
        self.mode = mode

    def rows(self, columns: Sequence[str], rows: Iterable[dict[str, Any]],
             title: str | None = None) -> None:
        rows = list(rows)
        if self.mode == "json":
            print(json.dumps(rows, sort_keys=False))
            return
        if self.mode == "json-lines":
            for row in rows:
                print(json.dumps(row))
            return
        if title:
            print(title)
        cells = [[_cell(row.get(column)) for column in columns] for row in rows]
        widths = [max([len(column)] + [len(line[i]) for line in cells])
                  for i, column in enumerate(columns)]
        print("  ".join(column.upper().ljust(width)
                        for column, width in zip(columns, widths, strict=True)).rstrip())
        for line in cells:
            print("  ".join(cell.rjust(width) if _numeric(cell) else cell.ljust(width)
                            for cell, width in zip(line, widths, strict=True)).rstrip())
        if not rows:
            print("(none)")

    def document(self, value: dict[str, Any]) -> None:
        if self.mode != "table":
            print(json.dumps(value, sort_keys=True))
            return
        self.rows(["key", "value"], ({"key": key, "value": item}
                                     for key, item in _flatten(value)))

    def note(self, text: str) -> None:
        print(text, file=sys.stdout if self.mode == "table" else sys.stderr)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        text = ", ".join(_cell(item) for item in value)
    elif isinstance(value, dict):
        text = ", ".join(f"{key}={_cell(item)}" for key, item in value.items())
    else:
        text = str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= CELL_CHARS_MAX else text[:CELL_CHARS_MAX - 3] + "..."


def _numeric(cell: str) -> bool:
    return cell.lstrip("-").replace(".", "", 1).isdigit()


def _flatten(value: dict[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, dict) and item:
            yield from _flatten(item, name + ".")
        else:
            yield name, item


class Progress:
    """A progress line on a terminal, redrawn in place on standard error at most every
    PROGRESS_INTERVAL_S: a bar when the total is known (`produced [#####-----] 2,400/5,000 48%
    1,200/s`), a counter otherwise (`consumed 2,400 (1,200/s)`); nothing at all when the stream
    is not a TTY (pipes, files, CI), so it never mixes into captured output. `add` counts on,
    `update` sets the count (and the total: a Spark job learns its task count as it runs)."""

    def __init__(self, label: str, total: int | None = None, *,
                 stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = self._stream.isatty()
        self._label = label
        self._total = total
        self._done = 0
        self._started = time.monotonic()
        self._drawn = 0.0

    def add(self, count: int) -> None:
        self.update(self._done + count)

    def update(self, done: int, total: int | None = None) -> None:
        self._done = done
        if total is not None:
            self._total = total
        if self._total is not None and done > self._total:  # more arrived than was there
            self._total = done
        now = time.monotonic()
        if self.enabled and now - self._drawn >= PROGRESS_INTERVAL_S:
            self._draw(now)

    def close(self) -> None:
        if self.enabled and self._drawn:
            self._draw(time.monotonic())
            self._stream.write("\n")
            self._stream.flush()

    def _draw(self, now: float) -> None:
        self._drawn = now
        rate = self._done / max(now - self._started, 1e-6)
        self._stream.write("\r" + progress_line(self._label, self._done, self._total, rate)
                           + "\x1b[K")  # erase what a longer line left behind
        self._stream.flush()


def progress_line(label: str, done: int, total: int | None, rate_per_s: float) -> str:
    """`label [####------] done/total pct% rate/s`, or `label done (rate/s)` without a total."""
    rate = f"{rate_per_s:,.1f}" if rate_per_s < 10 else f"{rate_per_s:,.0f}"
    if not total:
        return f"{label} {done:,} ({rate}/s)"
    fraction = min(1.0, max(0.0, done / total))
    filled = int(fraction * PROGRESS_BAR_CHARS)
    bar = "#" * filled + "-" * (PROGRESS_BAR_CHARS - filled)
    return f"{label} [{bar}] {done:,}/{total:,} {fraction:.0%} {rate}/s"
