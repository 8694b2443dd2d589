"""Run a module (a real broker) with an fsync layer that fails on demand: EIO from the kernel.

    python -m tests.support.fsync_faults TRIGGER_FILE STORE_DIR [PYTHON] -m MODULE ARGS...

(so `[python, -m, tests.support.fsync_faults, TRIGGER, STORE]` is a launcher prefix for
tests/integration/broker_process.py, whose command then reads `PYTHON -m ha.broker ...`).

While TRIGGER_FILE exists, every fsync/fdatasync of a file under STORE_DIR fails with EIO, as a
disk that lost a write does; before, they pass through to the kernel. The fault sits at the
process's IO boundary (the `os` functions every store module calls), so the store, its flush
service and the broker above it run unchanged: the test sees what a broker does when its disk
fails under it (storage_engine/files.py: fail-stop).
"""

from __future__ import annotations

import errno
import os
import runpy
import sys
from collections.abc import Callable


def _failing(real: Callable[[int], None], trigger: str, store_dir: str) -> Callable[[int], None]:
    def call(fd: int) -> None:
        if os.path.exists(trigger):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                target = ""
            if target.startswith(store_dir):
                raise OSError(errno.EIO, os.strerror(errno.EIO), target)
        real(fd)
    return call


def main(argv: list[str]) -> None:
    trigger, store_dir, *command = argv
    flag = command.index("-m")
    module, rest = command[flag + 1], command[flag + 2:]
    store_dir = os.path.realpath(store_dir)
    os.fsync = _failing(os.fsync, trigger, store_dir)
    os.fdatasync = _failing(os.fdatasync, trigger, store_dir)
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
