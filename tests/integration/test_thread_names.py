"""A broker's Python threads carry their names in the kernel (ha/broker/thread_names.py): what
`top -H`, `perf` and `/proc/<pid>/task/*/comm` show an operator profiling a broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ha.broker.thread_names import NAME_BYTES_MAX, native_name
from tests.integration.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")


def _comms(pid: int) -> list[str]:
    names = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # a thread that ended meanwhile
            continue
    return names


def test_native_name_is_cut_to_the_kernels_limit_on_a_character_boundary() -> None:
    assert native_name("ha-read-1") == b"ha-read-1"
    assert native_name("controller-heartbeat_0") == b"controller-hear"
    assert len(native_name("x" * 40)) == NAME_BYTES_MAX
    # 14 ASCII bytes and a 2-byte character: the character does not fit and is left out
    assert native_name("a" * 14 + "é") == b"a" * 14


_CHILD = """
import sys, threading
from pathlib import Path
from ha.broker.thread_names import name_native_threads

def comm():
    return Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()

before = []
t = threading.Thread(target=lambda: before.append(comm()), name="started-before")
t.start(); t.join()
assert name_native_threads()
seen = []
def body():
    seen.append((comm(), sys.getprofile()))
t = threading.Thread(target=body, name="ha-read-1-of-a-long-set")
t.start(); t.join()
print(before[0], seen[0][0], seen[0][1] is None, sep="|")
"""


def test_threads_started_after_install_carry_their_names_and_no_profile_hook() -> None:
    done = subprocess.run([sys.executable, "-c", _CHILD], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    before, after, hook_removed = done.stdout.strip().split("|")
    assert before != "started-before"  # nothing renames threads unasked
    assert after == "ha-read-1-of-a-"  # Thread.name, cut to 15 bytes
    assert hook_removed == "True"  # the hook ran once and left the thread unprofiled


def test_a_running_broker_shows_its_threads_by_name(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        assert broker.process is not None
        names = _comms(broker.process.pid)
    finally:
        broker.stop()
    # threading's names (the store's flush and retention threads, the system logs'), beside
    # the ones gRPC gives its own C++ threads; without the hook each of ours reads "python"
    assert {"flush-store", "retention", "topic-log", "offset-log"} <= set(names), names
