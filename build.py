#!/usr/bin/env python3
"""rocketha's one dev and CI entry point (imported by nothing).

    python3 build.py setup            create or refresh .venv and install the project (+ extras)
    python3 build.py test [ARGS...]   setup, then the default test suite (extra ARGS go to pytest)
    python3 build.py bench NAME [--json]   run a benchmark from tests/bench/ (e.g. `storage`)
    python3 build.py sim [--seeds N] [--seed S --trace]  Raft simulation search / one replay
    python3 build.py faults [--minutes M --seed S ...]   the fault run of tests/integration/fault_run.py
    python3 build.py demo [ARGS...]   setup, then the demo pipeline on a local cluster
                                      (`demo --hosts`: test hosts + a Spark standalone cluster)

Why a stamp file: `pip install` of pyspark alone takes minutes on a fresh machine, so `setup`
records a hash of pyproject.toml and skips the install when nothing changed.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV_DIR = ROOT / ".venv"
VENV_PYTHON = VENV_DIR / "bin" / "python"
STAMP_FILE = VENV_DIR / ".rocketha-install-stamp"
EXTRAS = "spark,test"
BENCHES = {
    "tier": "tests/bench/bench_tier.py",
    "storage": "tests/bench/bench_storage.py",
    "broker": "tests/bench/bench_broker.py",
    "ha": "tests/bench/bench_ha.py",
    "spark": "tests/bench/bench_spark.py",
    "controller": "tests/bench/bench_controller.py",
    "failover": "tests/bench/bench_failover.py",
}


def _install_fingerprint() -> str:
    digest = hashlib.sha256()
    digest.update((ROOT / "pyproject.toml").read_bytes())
    digest.update(EXTRAS.encode())
    digest.update(b"editable_mode=compat")
    digest.update(sys.version.encode())
    return digest.hexdigest()


def _run(argv: list[str], **kwargs: object) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, cwd=ROOT, **kwargs)  # type: ignore[arg-type]


def setup() -> Path:
    """Create .venv if missing and (re)install the project when pyproject.toml changed."""
    if not VENV_PYTHON.exists():
        print(f"creating {VENV_DIR}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV_DIR)
    fingerprint = _install_fingerprint()
    if STAMP_FILE.exists() and STAMP_FILE.read_text() == fingerprint:
        return VENV_PYTHON
    pip = [str(VENV_PYTHON), "-m", "pip", "--disable-pip-version-check"]
    _run(pip + ["install", "--upgrade", "pip", "setuptools", "wheel"])
    # compat mode puts the checkout on sys.path, so packages added later import without a
    # reinstall (the default finder mode freezes the package list at install time).
    _run(pip + ["install", "--config-settings", "editable_mode=compat", "-e", f".[{EXTRAS}]"])
    STAMP_FILE.write_text(fingerprint)
    return VENV_PYTHON


def test(pytest_args: list[str]) -> int:
    python = setup()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    argv = [str(python), "-m", "pytest", *pytest_args]
    print("+", " ".join(argv), flush=True)
    return subprocess.run(argv, cwd=ROOT, env=env).returncode


def bench(args: list[str]) -> int:
    if not args or args[0] not in BENCHES:
        print(f"usage: build.py bench {{{'|'.join(sorted(BENCHES))}}} [--json]", file=sys.stderr)
        return 2
    python = setup()
    argv = [str(python), BENCHES[args[0]], *args[1:]]
    return subprocess.run(argv, cwd=ROOT).returncode


def sim(args: list[str]) -> int:
    python = setup()
    argv = [str(python), "-m", "tests.sim.raft_sim", *args]
    return subprocess.run(argv, cwd=ROOT).returncode


def faults(args: list[str]) -> int:
    python = setup()
    argv = [str(python), "-m", "tests.integration.fault_run", *args]
    return subprocess.run(argv, cwd=ROOT).returncode


def demo(args: list[str]) -> int:
    python = setup()
    return subprocess.run([str(python), "-m", "spark_app.demo", *args], cwd=ROOT).returncode


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "setup":
        setup()
        return 0
    if command == "test":
        return test(rest)
    if command == "bench":
        return bench(rest)
    if command == "sim":
        return sim(rest)
    if command == "demo":
        return demo(rest)
    if command == "faults":
        return faults(rest)
    print(f"build.py: unknown command {command!r}; see `python3 build.py --help`", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
