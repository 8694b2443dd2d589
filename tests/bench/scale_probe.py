"""What the scale benchmark reads from the kernel about a process, and small shared helpers.

Linux /proc only (the benchmark's machine): resident memory (`VmRSS`), thread count
(`Threads`), and CPU seconds (utime + stime of /proc/PID/stat, in clock ticks).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from tests.controller import controller_process
from tests.integration import broker_process
from tests.integration.broker_process import BrokerProcess

# A broker with thousands of queues takes far longer than a test broker's 20 s to start (each
# queue's index is read at start-up): the benchmark waits this long instead, and reports it.
broker_process.STARTUP_TIMEOUT_S = 900.0
# A controller answers within 20 s on a quiet machine, not always at a load average of 30.
controller_process.STARTUP_TIMEOUT_S = 120.0

__all__ = ["TICKS_PER_S", "cpu_s", "dir_bytes", "load_average", "percentile",
           "restart", "rss_bytes", "rss_split_bytes", "threads", "wait_until"]

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _status_field(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def rss_bytes(pid: int) -> int:
    return _status_field(pid, "VmRSS") * 1024


def rss_split_bytes(pid: int) -> tuple[int, int]:
    """(anonymous, file-backed) resident bytes: heap and stacks vs. mapped files (the store's
    segments read through mmap count here, and the kernel can drop them under pressure)."""
    return _status_field(pid, "RssAnon") * 1024, _status_field(pid, "RssFile") * 1024


def mapped_rss_bytes(pid: int | str, under: Path) -> int:
    """Resident bytes of `pid`'s mappings of files below `under` (the Rss lines of
    /proc/<pid>/smaps): a store's mapped segments, apart from the libraries and the heap."""
    total, inside = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):  # a mapping's line
            inside = len(head) == 6 and head[5].startswith(str(under))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total


def threads(pid: int) -> int:
    return _status_field(pid, "Threads")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime


def load_average() -> float:
    """The 1-minute load average: printed beside each figure (the machine is shared)."""
    return round(os.getloadavg()[0], 2)


def dir_bytes(path: Path) -> int:
    """Bytes the files under `path` occupy on disk (allocated blocks, as `du`)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # deleted while walking
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def wait_until(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.01,
               what: str = "condition") -> float:
    """Seconds until `condition()` held; raises TimeoutError past `timeout_s`."""
    start = time.perf_counter()
    while not condition():
        if time.perf_counter() - start > timeout_s:
            raise TimeoutError(f"{what} not reached in {timeout_s} s")
        time.sleep(poll_s)
    return time.perf_counter() - start


def restart(broker: BrokerProcess, *, kill: bool) -> tuple[float, float]:
    """SIGKILL (or SIGTERM and wait) `broker`, spawn it again: (seconds from the spawn to it
    answering, the perf_counter of the spawn, for the caller's own readiness figure)."""
    if kill:
        broker.kill()
    else:
        broker.stop()
    started = time.perf_counter()
    broker.start()
    return time.perf_counter() - started, started
