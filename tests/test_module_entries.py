"""`python -m` entries of the server parts check their extra first, as the console scripts do.

Goal: `python -m ha.broker`, `controller`, `ha.cluster` and `connector.rmq_proxy` without
their extra (server, rocketmq) print one line naming the command, the extra and the pip
command, exit with status 2 and show no traceback; with the extra they run (`--help` prints
the usage and exits 0), so the check refuses only what is missing. Method: each entry run as
a subprocess; the extra's modules hidden as tests/test_install_roles.py hides them for the
console-script shims (`sys.modules[name] = None`, what importlib.util.find_spec reports for a
module that is not there), the module run as `__main__` by runpy (what `python -m` does).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conf.extras import EXTRA_MODULES
from tests.support.wheel import ROOT

# `python -m` module -> the extra it needs
MODULE_EXTRAS = {"ha.broker": "server", "controller": "server", "ha.cluster": "server",
                 "connector.rmq_proxy": "rocketmq"}


def _run(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("module", sorted(MODULE_EXTRAS))
def test_a_missing_extra_is_one_line_and_status_2(module: str, tmp_path: Path) -> None:
    extra = MODULE_EXTRAS[module]
    hide = "".join(f"sys.modules[{name!r}] = None; " for name in EXTRA_MODULES[extra])
    result = _run(f"import runpy, sys; {hide}sys.argv = [{module!r}, '--help']; "
                  f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)", tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith(f"python -m {module}: ")
    assert f"the {extra} extra" in result.stderr
    assert f"pip install 'rocketha[{extra}]'" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("module", sorted(MODULE_EXTRAS))
def test_with_the_extra_the_entry_runs(module: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                            text=True, timeout=60, check=False, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ")
