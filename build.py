#!/usr/bin/env python3
"""rocketha's one dev and CI entry point (imported only by tests/test_build_setup.py).

    python3 build.py setup            the suite's Debian packages (SYSTEM_PACKAGES), then create
                                      or refresh .venv and install the project (+ extras)
    python3 build.py test [ARGS...]   setup, then the default test suite, its 15 slowest tests
                                      last (extra ARGS go to pytest, and skip the Debian packages),
                                      then the connector's Spark smoke tests on the oldest
                                      supported pyspark (the --pyspark 4.0 lane below)
    python3 build.py test --pyspark 4.0|4.1|4.2|4.3 [ARGS...]   a version lane: the connector's
                                      Spark smoke tests (SPARK_SMOKE_TESTS; ARGS instead select
                                      what to run) with that pyspark, in .venv-pyspark-<release>
    python3 build.py bench NAME [--json]   run a benchmark from tests/bench/ (e.g. `storage`)
    python3 build.py bench all [--json]    every benchmark, one after another; their JSON in one
                                      file (.bench-tmp/bench-all-<UTC time>.json)
    python3 build.py sim [--seeds N] [--seed S --trace]  Raft simulation search / one replay
    python3 build.py sim --cluster [--seeds N | --minutes M] [--seed S --trace] [--json]
                      [--disk engine] [--sets 1|2] [--replicas 2|3|4]
                      [--only-faults 3,7] [--no-noise] [--no-torn-writes]
                                      whole-cluster simulation (tests/sim/cluster_sim.py; with
                                      --disk engine the brokers run the real storage engine on
                                      a simulated disk; the topology is drawn from each seed
                                      unless forced; --only-faults etc.: a smaller run)
    python3 build.py sim --cluster --seed S --minimise [--minimise-runs-max N]
                                      a failing seed's smallest failing run: fewer faults, no
                                      noise, a shorter fault phase (tests/sim/cluster_minimise.py)
    python3 build.py sim --store [--seeds N | --minutes M] [--seed S] [--json]
                                      crash schedules of one real store on a simulated disk
                                      (tests/sim/store_sim.py)
    python3 build.py faults [--minutes M --seed S ...]   the fault run of
                                      tests/integration/fault_run.py
    python3 build.py chaos [--minutes M --seed S --faults kill,pause,...]   a fault campaign on
                                      test hosts judged by a Jepsen-style checker
                                      (tests/chaos/run.py)
    python3 build.py demo [ARGS...]   setup, then the demo pipeline (examples/demo/) on a local
                                      cluster (`demo --hosts`: test hosts + a Spark standalone
                                      cluster)
    python3 build.py fuzz TARGET [--seconds N]   coverage-guided fuzzing (atheris) of one decoder
                                      (targets in tests/fuzz/targets.py; `fuzz all` runs each)
    python3 build.py test-install     build the wheel, install it per role into fresh venvs under
                                      /work/venvs (or $ROCKETHA_VENVS) and run the install tests
                                      (tests/test_install_roles.py, marked slow: ~2 minutes)
    python3 build.py test-upgrade     the mixed-version test: v0.1.0 built from its git tag next to
                                      this tree in one replica set and Raft group
                                      (tests/integration/test_mixed_versions.py, slow: ~2 minutes)
    python3 build.py lint             ruff over the whole tree (prints the counts; exit 1 if any),
                                      then mypy --strict on MYPY_STRICT_PATHS
    python3 build.py docs             the documentation site, built strictly into site/ (a
                                      broken link, a page missing from the nav or any warning fails)
    python3 build.py screenshots [--only console,chaos,bench]   remake the docs' pictures
                                      in docs/images/ with the tools (tests/docs/screenshots.py)

Why a stamp file: `pip install` of pyspark alone takes minutes on a fresh machine, so `setup`
records a hash of pyproject.toml and constraints.txt and skips the install when nothing
changed; a version lane's venv has its own stamp (PYSPARK_LANES). `setup` installs with
`-c constraints.txt` (the exact versions the suite runs with); pyproject.toml states the ranges
users get.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV_DIR = ROOT / ".venv"
VENV_PYTHON = VENV_DIR / "bin" / "python"
STAMP_FILE = VENV_DIR / ".rocketha-install-stamp"
CONSTRAINTS_FILE = ROOT / "constraints.txt"  # exact versions; pyproject.toml has the ranges
# Every extra but bench: development needs each role (docs/install.md); bench installs itself.
EXTRAS = "server,s3,spark,tables,rocketmq,test,fuzz,docs"
# The project's importable sources (pyproject's packages and py-modules), byte-compiled by setup
PROJECT_SOURCES = ("conf", "storage_engine", "ha", "controller", "connector", "spark_app",
                   "pyspark_rocketha.py", "rocketha_cold.py", "rocketha_admin.py")
DEFAULT_SUITE_ARGS = ["--durations=15"]  # `test` without pytest arguments: 15 slowest last
BENCHES = {
    "tier": "tests/bench/bench_tier.py",
    "storage": "tests/bench/bench_storage.py",
    "broker": "tests/bench/bench_broker.py",
    "ha": "tests/bench/bench_ha.py",
    "spark": "tests/bench/bench_spark.py",
    "table": "tests/bench/bench_table.py",
    "table_nice": "tests/bench/bench_table_nice.py",
    "controller": "tests/bench/bench_controller.py",
    "failover": "tests/bench/bench_failover.py",
    "peers": "tests/bench/bench_peers.py",
    "grpc": "tests/bench/bench_grpc.py",
    "security": "tests/bench/bench_security.py",
    "latency": "tests/bench/bench_latency.py",
    "latency_floor": "tests/bench/bench_latency_floor.py",
    "sched_waits": "tests/bench/bench_sched_waits.py",
    "threads": "tests/bench/bench_threads.py",
    "offsets": "tests/bench/bench_offsets.py",
    "topics": "tests/bench/bench_topics.py",
    "system_log": "tests/bench/bench_system_log.py",
    "tcp_loss": "tests/bench/bench_tcp_loss.py",
    "scale": "tests/bench/bench_scale.py",
    "recovery_scan": "tests/bench/bench_recovery_scan.py",
    "peers_open_loop": "tests/bench/peers_open_loop.py",
    "e2e": "tests/bench/bench_e2e.py",
}
# The Debian packages the default suite needs: package -> (the commands whose presence proves
# it is installed, why the suite needs it). `setup` and `test` install the missing ones.
SYSTEM_PACKAGES: dict[str, tuple[tuple[str, ...], str]] = {
    # tests/integration/test_console.py drives Chromium through chromedriver (Selenium)
    "chromium": (("chromium",), "the console's browser test"),
    "chromium-driver": (("chromedriver",), "the console's browser test"),
    # tests/support/lazyfs.py mounts through libfuse 3 and unmounts with fusermount3
    "fuse3": (("fusermount3",), "the chaos run's power-loss file system"),
    # tests/integration/test_rmq_proxy.py: the Node.js RocketMQ client, installed with npm
    "nodejs": (("node",), "the Node.js RocketMQ client's smoke test"),
    "npm": (("npm",), "the Node.js RocketMQ client's smoke test"),
}


# Version lanes (`test --pyspark 4.0`): the release each lane installs, the first of its minor
# version (the first that has what that minor added; connector.spark.compat); the default
# suite ends with DEFAULT_LANE, the oldest the connector serves (pyproject's spark extra).
PYSPARK_LANES = {"4.0": "4.0.0", "4.1": "4.1.0", "4.2": "4.2.0", "4.3": "4.3.0"}
DEFAULT_LANE = "4.0"
# read, readStream, write and writeStream on a real SparkSession, and what differs by version;
# the Kafka guide's everyday examples on two replica sets; Kafka's column names (no session)
SPARK_SMOKE_TESTS = ["tests/connector/test_spark_versions.py",
                     "tests/connector/test_spark_kafka_guide.py",
                     "tests/connector/test_kafka_columns_unit.py"]
# constraints.txt lines a lane leaves out: its pyspark and what pins pyspark's own versions
LANE_UNCONSTRAINED = frozenset({"pyspark", "py4j", "delta-spark"})
LANE_SKIPPED_EXTRAS = frozenset({"spark", "fuzz", "docs"})  # pyspark comes from the lane
# pytest arguments for a lane's known pyspark defects (the suite turns warnings into errors):
# 4.0's and 4.1's DataFrame.collect() leaves its result socket to the garbage collector
# (pyspark/util.py _load_from_socket; closed from 4.2 on), a ResourceWarning in every test that
# collects.
_COLLECT_SOCKET = ["-W", "ignore:unclosed <socket.socket:ResourceWarning"]
LANE_PYTEST_ARGS = {"4.0": _COLLECT_SOCKET, "4.1": _COLLECT_SOCKET}


def _install_fingerprint() -> str:
    digest = hashlib.sha256()
    digest.update((ROOT / "pyproject.toml").read_bytes())
    digest.update(CONSTRAINTS_FILE.read_bytes())
    digest.update(EXTRAS.encode())
    digest.update(b"editable_mode=compat")
    digest.update(sys.version.encode())
    return digest.hexdigest()


def _run(argv: list[str], **kwargs: object) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, cwd=ROOT, **kwargs)  # type: ignore[arg-type]


def setup() -> Path:
    """Create .venv if missing and (re)install the project when pyproject.toml changed; then
    byte-compile (`byte_compile`)."""
    if not VENV_PYTHON.exists():
        print(f"creating {VENV_DIR}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV_DIR)
    fingerprint = _install_fingerprint()
    if STAMP_FILE.exists() and STAMP_FILE.read_text() == fingerprint:
        byte_compile(VENV_PYTHON, [ROOT / name for name in PROJECT_SOURCES])
        return VENV_PYTHON
    pip = [str(VENV_PYTHON), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "--upgrade", "pip", "setuptools", "wheel"])
    # compat mode puts the checkout on sys.path, so packages added later import without a
    # reinstall (the default finder mode freezes the package list at install time).
    _run([*pip, "install", "-c", str(CONSTRAINTS_FILE), "--config-settings",
          "editable_mode=compat", "-e", f".[{EXTRAS}]"])
    byte_compile(VENV_PYTHON, [ROOT / name for name in PROJECT_SOURCES] + [VENV_DIR])
    STAMP_FILE.write_text(fingerprint)
    return VENV_PYTHON


def byte_compile(python: Path, paths: list[Path]) -> None:
    """Write the .pyc of every module under `paths` that lacks an up-to-date one (`compileall`
    skips the others). Why: with PYTHONDONTWRITEBYTECODE=1 (set on some machines, this one
    included) Python never writes the .pyc it compiles, so every broker start compiled the
    project's ~150 modules from source again: 2.8 s of a 16.6 s restart after a 20 GiB write
    had evicted the page cache (docs/benchmarks/scale.md). compileall writes them whatever
    that variable says. The venv's packages are compiled once, after an install; a file that
    does not compile (a template shipped as .py) is skipped, and so is a failure here: it only
    costs start-up time."""
    done = subprocess.run([str(python), "-m", "compileall", "-qq",
                           *map(str, paths)], cwd=ROOT, check=False)
    if done.returncode != 0:
        print(f"build.py: byte-compiling {', '.join(p.name for p in paths)} left files "
              "uncompiled (they compile at each import)", file=sys.stderr, flush=True)


def lane_release(lane: str) -> str:
    """The pyspark release of a lane ("4.0" or a full release such as "4.1.1")."""
    release = PYSPARK_LANES.get(lane, lane)
    if not re.fullmatch(r"4\.[0-9]+\.[0-9]+", release):
        raise ValueError(f"--pyspark {lane}: not a lane ({', '.join(PYSPARK_LANES)}) "
                         "nor a pyspark 4.x.y release")
    return release


def lane_extras(extras: str = EXTRAS) -> str:
    """The project's extras a lane installs: the suite's, less pyspark's and the tools'."""
    return ",".join(e for e in extras.split(",") if e not in LANE_SKIPPED_EXTRAS)


def lane_constraints(text: str) -> str:
    """constraints.txt without the lines that pin pyspark (or a package pinned to one)."""
    def name(line: str) -> str:
        return re.split(r"[=<>!~ ;\[]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")
    return "".join(line for line in text.splitlines(keepends=True)
                   if name(line) not in LANE_UNCONSTRAINED)


def lane_venv(release: str) -> Path:
    return ROOT / f".venv-pyspark-{release}"


def setup_lane(release: str) -> Path:
    """Create or reuse the lane's venv: pyspark `release` plus the project with its non-Spark
    extras, editable; reinstalled only when the stamp changes (the pyspark sdist is ~450 MB)."""
    directory = lane_venv(release)
    python = directory / "bin" / "python"
    stamp = directory / ".rocketha-install-stamp"
    fingerprint = hashlib.sha256(
        f"{_install_fingerprint()} pyspark=={release} {lane_extras()}".encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == fingerprint:
        return python
    if not python.exists():
        print(f"creating {directory}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(directory)
    constraints = directory / "constraints.txt"
    constraints.write_text(lane_constraints(CONSTRAINTS_FILE.read_text()))
    pip = [str(python), "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "install", "--upgrade", "pip", "setuptools", "wheel"])
    _run([*pip, "install", "-c", str(constraints), f"pyspark=={release}", "--config-settings",
          "editable_mode=compat", "-e", f".[{lane_extras()}]"])
    stamp.write_text(fingerprint)
    return python


def test_lane(lane: str, pytest_args: list[str]) -> int:
    """The Spark smoke tests (or what `pytest_args` select) with the lane's pyspark."""
    try:
        release = lane_release(lane)
    except ValueError as err:
        print(f"build.py: {err}", file=sys.stderr)
        return 2
    python = setup_lane(release)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("SPARK_HOME", None)  # the lane's own pyspark, not another Spark on the machine
    minor = ".".join(release.split(".")[:2])
    argv = [str(python), "-m", "pytest", *LANE_PYTEST_ARGS.get(minor, []),
            *(pytest_args or [*SPARK_SMOKE_TESTS, "-q"])]
    print(f"== pyspark {release} lane:", " ".join(argv), flush=True)
    started = time.monotonic()
    code = subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode
    print(f"== pyspark {release} lane: exit {code} in {time.monotonic() - started:.0f} s",
          flush=True)
    return code


def split_lane(args: list[str]) -> tuple[str | None, list[str]]:
    """`test` arguments: (the --pyspark lane or None, the rest for pytest)."""
    if "--pyspark" not in args:
        return None, args
    at = args.index("--pyspark")
    if at + 1 >= len(args):
        raise ValueError("--pyspark needs a version: " + ", ".join(PYSPARK_LANES))
    return args[at + 1], args[:at] + args[at + 2:]


@dataclass(frozen=True)
class SystemPlan:
    """What to do about SYSTEM_PACKAGES: nothing (both empty), apt-get install `install`, or
    stop before the suite with `refusal` (a message naming the packages and the command)."""

    install: tuple[str, ...] = ()
    refusal: str = ""


def plan_system_packages(present: Collection[str], is_root: bool, has_apt: bool) -> SystemPlan:
    """The decision alone (no IO): `present` holds the commands found on PATH."""
    missing = tuple(name for name, (commands, _why) in SYSTEM_PACKAGES.items()
                    if not all(command in present for command in commands))
    if not missing:
        return SystemPlan()
    if is_root and has_apt:
        return SystemPlan(install=missing)
    reasons = "\n".join(f"  {name} ({SYSTEM_PACKAGES[name][1]})" for name in missing)
    how = ("as root" if has_apt else
           "as root (this machine has no apt-get: use its package manager's equivalents)")
    return SystemPlan(refusal=(
        f"build.py: the test suite needs Debian packages that are missing:\n{reasons}\n"
        f"install them {how}, then run build.py again:\n"
        f"  apt-get update && apt-get install -y {' '.join(missing)}"))


def provide_system_packages() -> int:
    """Install the suite's missing Debian packages, or say which and how; 0 when all are there.

    Why here: the README's `python3 build.py test` must pass on a fresh machine by itself, so
    what the suite needs beyond pip (a browser, FUSE, Node.js) is provided by the same command
    CI runs, not by a CI-only script. Root with apt-get installs; anyone else gets exit 2 and
    the exact command before the suite starts, instead of a red suite minutes later."""
    commands = {command for commands, _why in SYSTEM_PACKAGES.values() for command in commands}
    plan = plan_system_packages(
        present={command for command in commands if shutil.which(command)},
        is_root=os.geteuid() == 0, has_apt=shutil.which("apt-get") is not None)
    if plan.refusal:
        print(plan.refusal, file=sys.stderr)
        return 2
    if not plan.install:
        return 0
    for name in plan.install:
        print(f"build.py: installing {name} ({SYSTEM_PACKAGES[name][1]})", flush=True)
    try:
        _run(["apt-get", "update", "-qq"])
        _run(["apt-get", "install", "-y", "-qq", *plan.install],
             env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    except subprocess.CalledProcessError as err:
        print(f"build.py: apt-get failed (exit {err.returncode}); the suite needs "
              f"{' '.join(plan.install)}", file=sys.stderr)
        return 2
    return 0


def test(args: list[str]) -> int:
    """The default suite (the Debian packages it needs, then ruff: the tree is kept
    lint-clean, DEBTS.md 8; the 15 slowest tests printed last, so drift shows), then the
    DEFAULT_LANE smoke tests; with pytest arguments only what they select, without the
    packages, the lint, the durations or the lane; with --pyspark only that lane."""
    try:
        lane, pytest_args = split_lane(args)
    except ValueError as err:
        print(f"build.py: {err}", file=sys.stderr)
        return 2
    if lane is not None:
        return test_lane(lane, pytest_args)
    if not pytest_args:
        refused = provide_system_packages()
        if refused:
            return refused
    python = setup()
    if not pytest_args:
        linted = subprocess.run([str(python), "-m", "ruff", "check", "."], cwd=ROOT,
                                check=False)
        if linted.returncode != 0:
            print("build.py test: ruff check failed (fix it, or `build.py lint` for counts)",
                  file=sys.stderr)
            return linted.returncode
        typed = type_check(python)
        if typed != 0:
            print("build.py test: mypy --strict failed on the checked modules (MYPY_STRICT_PATHS)",
                  file=sys.stderr)
            return typed
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    argv = [str(python), "-m", "pytest", *(pytest_args or DEFAULT_SUITE_ARGS)]
    print("+", " ".join(argv), flush=True)
    code = subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode
    if pytest_args:
        return code
    lane_code = test_lane(DEFAULT_LANE, [])  # the oldest supported pyspark
    return code or lane_code


def test_upgrade(args: list[str]) -> int:
    """The mixed-version tests (slow): the previous release's wheel beside this tree."""
    return test(["-m", "slow", "tests/integration/test_mixed_versions.py", *args])


def test_install(args: list[str]) -> int:
    """The install tests (slow): wheel, fresh venvs, the base and spark roles."""
    return test(["-m", "slow", "tests/test_install_roles.py", *args])


def bench_all(python: Path) -> int:
    """Each benchmark with --json; the last line of each is its figures. One JSON file."""
    started = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    results: dict[str, object] = {"started": started}
    failed = 0
    for name, script in BENCHES.items():
        print(f"== bench {name}", flush=True)
        done = subprocess.run([str(python), script, "--json"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, check=False)
        print(done.stdout, end="", flush=True)
        lines = done.stdout.strip().splitlines()
        try:
            results[name] = json.loads(lines[-1]) if lines else None
        except ValueError:
            results[name] = None
        if done.returncode != 0 or results[name] is None:
            failed += 1
            results[name] = {"exit_code": done.returncode, "figures": results[name]}
    out = ROOT / ".bench-tmp" / f"bench-all-{started}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1, sort_keys=True))
    print(f"bench all: {len(BENCHES) - failed} of {len(BENCHES)} ran cleanly; JSON in {out}")
    print(json.dumps(results, sort_keys=True))
    return 1 if failed else 0


def bench(args: list[str]) -> int:
    if args and args[0] == "all":
        return bench_all(setup())
    if not args or args[0] not in BENCHES:
        print(f"usage: build.py bench {{all|{'|'.join(sorted(BENCHES))}}} [--json]",
              file=sys.stderr)
        return 2
    python = setup()
    argv = [str(python), BENCHES[args[0]], *args[1:]]
    return subprocess.run(argv, cwd=ROOT, check=False).returncode


def sim(args: list[str]) -> int:
    python = setup()
    module = "tests.sim.raft_sim"
    if "--cluster" in args:
        # --minimise drives the cluster simulation from its own module
        module = "tests.sim.cluster_minimise" if "--minimise" in args else "tests.sim.cluster_sim"
        args = [arg for arg in args if arg != "--cluster"]
    elif "--store" in args:
        module = "tests.sim.store_sim"
        args = [arg for arg in args if arg != "--store"]
    argv = [str(python), "-m", module, *args]
    return subprocess.run(argv, cwd=ROOT, check=False).returncode


def faults(args: list[str]) -> int:
    python = setup()
    argv = [str(python), "-m", "tests.integration.fault_run", *args]
    return subprocess.run(argv, cwd=ROOT, check=False).returncode


def chaos(args: list[str]) -> int:
    python = setup()
    argv = [str(python), "-m", "tests.chaos.run", *args]
    return subprocess.run(argv, cwd=ROOT, check=False).returncode


def fuzz(args: list[str]) -> int:
    """One target (or `all`, one after another) for --seconds each; stops at a finding."""
    python = setup()
    if not args:
        print("usage: build.py fuzz {TARGET|all} [--seconds N]; targets: see "
              "tests/fuzz/targets.py", file=sys.stderr)
        return 2
    names = [args[0]]
    if args[0] == "all":
        listing = subprocess.run(
            [str(python), "-c", "from tests.fuzz.targets import TARGETS; print(*TARGETS)"],
            cwd=ROOT, capture_output=True, text=True, check=True)
        names = listing.stdout.split()
    for name in names:
        result = subprocess.run([str(python), "tests/fuzz/run.py", name, *args[1:]], cwd=ROOT,
                                capture_output=True, text=True, check=False)
        runs = re.findall(r"stat::number_of_executed_units: (\d+)", result.stderr)
        seconds = re.findall(r"Done \d+ runs in (\d+) second", result.stderr)
        if result.returncode != 0:
            print(result.stderr[-6000:], file=sys.stderr)
            print(f"fuzz {name}: FINDING after {runs[0] if runs else '?'} executions "
                  "(input saved as .fuzz/" + name + "-crash-*)", flush=True)
            return 1
        print(f"fuzz {name}: {runs[0] if runs else '?'} executions in "
              f"{seconds[0] if seconds else '?'} s, no finding", flush=True)
    return 0


# mypy --strict (pyproject's [tool.mypy]) runs on these: the shared leaf, the storage engine and
# the sans-IO cores, whose decisions the simulator and the shells rely on. Grow the list, never
# shrink it.
MYPY_STRICT_PATHS = (
    "conf", "storage_engine", "ha/replication/quorum.py", "ha/replication/put_core.py",
    "ha/replication/master_core.py", "ha/replication/master_quorum.py",
    "ha/replication/master_effects.py", "ha/replication/slave_core.py",
    "ha/replication/role_core.py", "ha/replication/takeover_core.py", "controller/raft",
    "controller/api", "controller/state.py", "controller/leader_core.py",
    "controller/election.py", "controller/liveness.py", "controller/auth_changes.py",
    "connector/client/producer_core.py", "connector/rmq_proxy/pop_core.py",
    "controller/console/sessions.py", "controller/console/tables.py",
    "controller/handover.py", "ha/broker/handover_core.py",
    "ha/broker/table_plan.py", "connector/protocol/table_ids.py",
    "tests/bench/scale_shape.py", "tests/bench/open_loop.py",
)


def type_check(python: Path) -> int:
    """mypy --strict over MYPY_STRICT_PATHS (`lint` and `test` run it)."""
    return subprocess.run([str(python), "-m", "mypy", *MYPY_STRICT_PATHS], cwd=ROOT,
                          check=False).returncode


def lint(args: list[str]) -> int:
    """ruff over the tree, with counts per rule, then mypy (`test` runs both first)."""
    python = setup()
    result = subprocess.run([str(python), "-m", "ruff", "check", ".", "--statistics", *args],
                            cwd=ROOT, check=False)
    return result.returncode or type_check(python)


def docs(args: list[str]) -> int:
    """mkdocs build --strict (mkdocs.yml; its hook generates the key and option tables from
    the code first); extra ARGS go to mkdocs, e.g. `docs --site-dir /tmp/site`."""
    python = setup()
    argv = [str(python), "-m", "mkdocs", "build", "--strict", *args]
    print("+", " ".join(argv), flush=True)
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's banner about its successor
    return subprocess.run(argv, cwd=ROOT, env=env, check=False).returncode


def screenshots(args: list[str]) -> int:
    python = setup()
    return subprocess.run([str(python), "-m", "tests.docs.screenshots", *args], cwd=ROOT,
                          check=False).returncode


def demo(args: list[str]) -> int:
    python = setup()
    return subprocess.run([str(python), "-m", "examples.demo", *args], cwd=ROOT,
                          check=False).returncode


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "setup":
        refused = provide_system_packages()
        if refused:
            return refused
        setup()
        return 0
    if command == "test":
        return test(rest)
    if command == "test-install":
        return test_install(rest)
    if command == "test-upgrade":
        return test_upgrade(rest)
    if command == "bench":
        return bench(rest)
    if command == "sim":
        return sim(rest)
    if command == "demo":
        return demo(rest)
    if command == "faults":
        return faults(rest)
    if command == "fuzz":
        return fuzz(rest)
    if command == "chaos":
        return chaos(rest)
    if command == "lint":
        return lint(rest)
    if command == "docs":
        return docs(rest)
    if command == "screenshots":
        return screenshots(rest)
    print(f"build.py: unknown command {command!r}; see `python3 build.py --help`", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
