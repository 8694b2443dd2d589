"""The planned-operation faults' reading of a broker's log (tests/chaos/planned.py), without
hosts: the outcome recorded for a handover is this run's, never an earlier stop's."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from tests.chaos.history import History
from tests.chaos.planned import PlannedOperations

SERVING = "2026-12-02 06:26:13,521 INFO rocketha.broker: broker-a-0 serving on 198.18.0.3:1"
HANDED = ("2026-12-02 06:27:01,002 INFO ha.broker.main: handed over to broker 2 "
          "(198.18.0.4:2) at log position 4096")
FELL_BACK = ("2026-12-02 06:29:40,117 INFO ha.broker.main: no handover: the puts in flight "
             "or the slave's catch-up outlasted handoverTimeoutMs")


class _Logs:
    def __init__(self, lines: list[str]) -> None:
        self.text = "\n".join(lines)

    def log_tail(self, name: str, lines: int) -> str:
        return self.text


def _outcome(lines: list[str], tmp_path: Path) -> str:
    history = History(tmp_path / "history.jsonl")
    try:
        return PlannedOperations(cast(Any, _Logs(lines)), history)._handover_outcome("b")
    finally:
        history.close()


def test_the_handover_outcome_is_the_last_stops(tmp_path: Path) -> None:
    assert _outcome([SERVING, HANDED], tmp_path) == \
        "handed over to broker 2 (198.18.0.4:2) at log position 4096"
    assert _outcome([SERVING, HANDED, SERVING, FELL_BACK], tmp_path).startswith(
        "no handover: the puts in flight")
    # handed over on an earlier stop, then restarted: this stop logged nothing
    assert _outcome([SERVING, HANDED, SERVING], tmp_path) == "not logged"
