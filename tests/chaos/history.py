"""A chaos run's history: one JSON object per line, what every client and the nemesis did.

    {"t": 12034567, "process": "p2", "type": "invoke", "f": "send", "value": "r1:p2:17",
     "key": "k3", "tags": "tA", "idempotent": true}
    {"t": 12035012, "process": "p2", "type": "ok", "f": "send", "value": "r1:p2:17",
     "queue": 1, "offset": 40, "set": null, "duplicate": false}

Fields every event has: `t` (monotonic nanoseconds, one clock for the whole run), `process`
(who: a producer `p<i>`, a consumer `c<i>`, `nemesis`, `observer`, `drain`, `final`), `type`
(Jepsen's: `invoke` starts an operation; `ok` it happened; `fail` it certainly did not;
`info` unknown, e.g. a send whose reply never came: it may or may not be stored) and `f`.

Operations (`f`), with their fields:
    send            invoke: value, key, tags, idempotent; ok: queue, offset (-1 with
                    duplicate=true: the broker recognised a retry it had stored), set (the
                    replica set, when known); fail / info: error
    poll            invoke: set, queue, offset; ok: msgs [[offset, value], ...], next
                    (a consumer's poll, or the final drain's: process "drain")
    commit          invoke: group, set, queue, offset; ok / info
    read_commit     ok: group, set, offsets {queue: offset} (a group's committed offsets)
    fault           type info, phase "start" / "stop": kind, name, targets
    elections       type ok: controller, records [{broker_name, master_epoch,
                    master_broker_id, entry_index}] (controller_status recent_elections)
    replica_state   type ok: set, master_broker_id, master_epoch, sync_state_set
    replica_digest  type ok: set, broker, start, end, sha256 (CommitLog bytes [start, end) after
                    heal; start is the highest first segment among the members, 0 if absent)

Writing is thread-safe and line-buffered: a run that dies leaves a readable prefix.
"""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

__all__ = ["Event", "History", "pairs", "read_history", "write_history"]

Event = dict[str, Any]


class History:
    """Appends events (with `t` filled in) to a list and, optionally, a JSON-lines file."""

    def __init__(self, path: Path | None = None, *, events: Iterable[Event] = (),
                 append: bool = False) -> None:
        """`append`: go on with an existing file (`events`: what it holds already)."""
        self.events: list[Event] = list(events)
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            if append and path.exists():
                with path.open("rb+") as file:  # a killed run's torn last line stays apart
                    if file.seek(0, 2) and (file.seek(-1, 2), file.read(1))[1] != b"\n":
                        file.write(b"\n")
            self._file = path.open("a" if append else "w", buffering=1)

    def add(self, process: str, type_: str, f: str, **fields: Any) -> Event:
        assert type_ in ("invoke", "ok", "fail", "info"), type_
        event = {"t": time.monotonic_ns(), "process": process, "type": type_, "f": f, **fields}
        line = json.dumps(event, sort_keys=True, default=str)
        with self._lock:
            self.events.append(event)
            if self._file is not None:
                self._file.write(line + "\n")
        return event

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def read_history(path: Path) -> list[Event]:
    """The events of a history file, plain or gzipped (`.gz`); a torn last line, from a
    killed run, is skipped."""
    events = []
    text = (gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz"
            else path.read_text())
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def write_history(path: Path, events: Iterable[Event]) -> None:
    path.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in events))


def pairs(events: Iterable[Event], f: str) -> Iterator[tuple[Event, Event | None]]:
    """(invoke, completion) of every `f` operation, matched per process in order (a process
    runs one operation at a time); completion None: the run ended before it completed."""
    open_by_process: dict[str, Event] = {}
    done: list[tuple[Event, Event | None]] = []
    for event in events:
        if event.get("f") != f:
            continue
        process = event["process"]
        if event["type"] == "invoke":
            if process in open_by_process:
                done.append((open_by_process.pop(process), None))
            open_by_process[process] = event
        elif process in open_by_process:
            done.append((open_by_process.pop(process), event))
    done += [(invoke, None) for invoke in open_by_process.values()]
    done.sort(key=lambda pair: pair[0]["t"])
    return iter(done)
