"""build.py's pyspark version lanes (`build.py test --pyspark 4.0`).

Goal: a lane installs the pyspark it names beside the project's other dependencies (never
pinned back to the suite's pyspark by constraints.txt), reuses its venv while nothing changed
(the pyspark sdist is ~450 MB), and the default `build.py test` ends with the oldest supported
lane, its exit code counted. Method: the pure helpers on literal inputs; the IO shell with
`_run`, `subprocess.run` and the venv directory faked (nothing is installed).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import build


def test_a_lane_names_the_first_release_of_its_minor_version() -> None:
    assert build.lane_release("4.0") == "4.0.0"
    assert build.lane_release("4.3") == "4.3.0"
    assert build.lane_release("4.1.1") == "4.1.1"  # a full release is taken as it is
    for bad in ("3.5", "4", "latest", "4.0.0; rm -rf /"):
        with pytest.raises(ValueError, match="not a lane"):
            build.lane_release(bad)


def test_the_default_lane_is_the_spark_extras_lower_bound() -> None:
    pyproject = (build.ROOT / "pyproject.toml").read_text()
    assert f'"pyspark>={build.DEFAULT_LANE},<5"' in pyproject
    assert min(build.PYSPARK_LANES, key=lambda lane: tuple(map(int, lane.split(".")))) == \
        build.DEFAULT_LANE


def test_lane_constraints_drop_what_pins_pyspark_and_keep_the_rest() -> None:
    text = "pyarrow==26.0.1\npyspark==4.2.0\npy4j==0.10.9.9\ndelta_spark==4.4.1\nPySpark >= 4\n" \
           "chispa==0.12.0\n"
    assert build.lane_constraints(text) == "pyarrow==26.0.1\nchispa==0.12.0\n"
    kept = build.lane_constraints(build.CONSTRAINTS_FILE.read_text())
    assert "pyspark" not in kept.lower() and "pyarrow==" in kept


def test_lane_extras_leave_out_spark_and_the_tools() -> None:
    assert build.lane_extras("spark,test,fuzz,docs") == "test"
    assert build.lane_extras("server,s3,spark,rocketmq,test") == "server,s3,rocketmq,test"


def test_split_lane() -> None:
    assert build.split_lane(["-k", "x"]) == (None, ["-k", "x"])
    assert build.split_lane(["--pyspark", "4.1", "-k", "x"]) == ("4.1", ["-k", "x"])
    with pytest.raises(ValueError, match="needs a version"):
        build.split_lane(["--pyspark"])


def test_a_lane_venv_is_reused_while_its_stamp_matches(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    monkeypatch.setattr(build, "lane_venv", lambda release: tmp_path / f".venv-pyspark-{release}")
    monkeypatch.setattr(build.venv.EnvBuilder, "create",
                        lambda self, directory: (Path(directory) / "bin").mkdir(parents=True))
    ran: list[list[str]] = []

    def fake_run(argv: list[str], **kwargs: object) -> None:
        ran.append(argv)
        (tmp_path / ".venv-pyspark-4.0.0" / "bin" / "python").touch()

    monkeypatch.setattr(build, "_run", fake_run)
    python = build.setup_lane("4.0.0")
    assert python == tmp_path / ".venv-pyspark-4.0.0" / "bin" / "python"
    install = ran[-1]
    assert "pyspark==4.0.0" in install and f".[{build.lane_extras()}]" in install
    constraints = Path(install[install.index("-c") + 1]).read_text()
    assert "pyspark" not in constraints.lower()
    ran.clear()
    assert build.setup_lane("4.0.0") == python and ran == []  # stamp matches: no pip
    (python.parent.parent / ".rocketha-install-stamp").write_text("stale")
    build.setup_lane("4.0.0")
    assert any("pyspark==4.0.0" in argv for argv in ran)


@pytest.mark.parametrize(("suite", "lane", "expected"), [(0, 0, 0), (1, 0, 1), (0, 3, 3)])
def test_the_default_run_ends_with_the_oldest_lane(monkeypatch: pytest.MonkeyPatch,
                                                   suite: int, lane: int, expected: int) -> None:
    lanes: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(build, "provide_system_packages", lambda: 0)
    monkeypatch.setattr(build, "setup", lambda: Path("/venv/bin/python"))
    monkeypatch.setattr(build.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, suite if "pytest" in argv else 0))
    monkeypatch.setattr(build, "test_lane",
                        lambda name, args: lanes.append((name, args)) or lane)
    assert build.test([]) == expected
    assert lanes == [(build.DEFAULT_LANE, [])]
    lanes.clear()
    assert build.test(["-k", "x"]) == suite and lanes == []  # a selection runs no lane
    assert build.test(["--pyspark", "4.3", "-k", "x"]) == lane
    assert lanes == [("4.3", ["-k", "x"])]


def test_a_lane_runs_the_smoke_set_with_its_pyspark(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(build, "setup_lane", lambda release: Path(f"/lane-{release}/python"))
    monkeypatch.setattr(build.subprocess, "run", lambda argv, **kw: ran.append(argv) or
                        subprocess.CompletedProcess(argv, 0))
    assert build.test_lane("4.0", []) == 0
    assert ran[-1][:3] == ["/lane-4.0.0/python", "-m", "pytest"]
    assert ran[-1][3:5] == build.LANE_PYTEST_ARGS["4.0"]  # pyspark 4.0's leaked socket
    assert all(test in ran[-1] for test in build.SPARK_SMOKE_TESTS)
    assert build.test_lane("4.3", ["-k", "x"]) == 0
    assert ran[-1][3:] == ["-k", "x"]
    assert build.test_lane("9.9", []) == 2  # not a lane: nothing runs
    assert len(ran) == 2
