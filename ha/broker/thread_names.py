"""The broker's Python threads under their own names in the kernel (`top -H`, `perf`,
`/proc/<pid>/task/*/comm`, `ps -L`).

Why: CPython 3.11 leaves every thread it starts with the process's name ("python"), so the
kernel's per-thread tools cannot tell the HA reader from the flush thread. Profiling where a
put's CPU goes (README, "Where the CPU goes, by the kernel's count") needed py-spy to map
thread ids to names; an operator used to `top -H` on a RocketMQ broker (Java names its
threads) saw only "python". Python 3.14 names native threads itself; until then a profile
hook (`threading.setprofile`, public API) runs once in each thread started afterwards, before
its first line of Python: it copies `Thread.name` to the kernel (prctl PR_SET_NAME, at most
NAME_BYTES_MAX bytes, the kernel's limit) and removes itself from that thread, so it costs
nothing after a thread's first call.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from types import FrameType
from typing import Any

PR_SET_NAME = 15  # <linux/prctl.h>
NAME_BYTES_MAX = 15  # TASK_COMM_LEN 16, with its NUL

_prctl: Any = None


def native_name(name: str) -> bytes:
    """`name` as the kernel keeps it: UTF-8, cut to NAME_BYTES_MAX bytes on a character
    boundary."""
    return name.encode("utf-8")[:NAME_BYTES_MAX].decode("utf-8", "ignore").encode("utf-8")


def set_native_name(name: str) -> bool:
    """Name the calling thread in the kernel; False where prctl is not available."""
    if _prctl is None:
        return False
    return _prctl(PR_SET_NAME, ctypes.c_char_p(native_name(name)), 0, 0, 0) == 0


def _first_call(frame: FrameType, event: str, arg: object) -> None:
    sys.setprofile(None)  # this thread only, and before anything else can fail
    set_native_name(threading.current_thread().name)


def name_native_threads() -> bool:
    """From now on, every thread started in this process carries its Python name in the
    kernel. Call once, early in a process's entry point. False (and nothing installed) where
    the C library has no prctl (not Linux)."""
    global _prctl
    if _prctl is None:
        if not sys.platform.startswith("linux"):
            return False
        try:  # the C library is loaded already: look prctl up in the process itself
            _prctl = ctypes.CDLL(None).prctl
        except (OSError, AttributeError):
            return False
        _prctl.restype = ctypes.c_int
    threading.setprofile(_first_call)
    return True
