"""`rocketha-pipeline`: the pipelines' files found, and the spark-submit command planned.

Goal: a user of the wheel gets the file spark-submit needs, and `submit` runs the right
spark-submit with this Python for the driver and the executors. Method: `plan_submit` is pure
(arguments, this Python, an environment and a `which` passed in), so its table is checked
directly; `main` is called in-process for `path`, `list` and misuse. The real spark-submit of
an installed pipeline runs in tests/test_install_roles.py (slow).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import spark_app
from spark_app.locate import PIPELINES, UsageError, main, pipeline_path, plan_submit

SPARK_APP = Path(spark_app.__file__).resolve().parent


def no_which(name: str) -> str | None:
    return None


@pytest.mark.parametrize("name,file", [("ingest", "ingest_to_table.py"),
                                       ("backfill", "backfill.py"),
                                       ("files", "files_to_topic.py"),
                                       ("ingest_to_table", "ingest_to_table.py"),
                                       ("files_to_topic.py", "files_to_topic.py")])
def test_a_name_finds_its_file(name: str, file: str) -> None:
    assert pipeline_path(name) == SPARK_APP / file


def test_each_pipeline_file_runs_as_a_script() -> None:
    for file, _summary in PIPELINES.values():
        assert 'if __name__ == "__main__":' in (SPARK_APP / file).read_text(), file


def test_unknown_pipeline_names_the_known_ones() -> None:
    with pytest.raises(UsageError, match="no pipeline 'ingst' \\(pipelines: backfill, files, "
                                         "ingest\\)"):
        pipeline_path("ingst")


def test_submit_splits_at_double_dash(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "spark-submit").write_text("#!/bin/sh\n")
    python = str(bin_dir / "python")
    plan = plan_submit(["ingest", "--master", "local[2]", "--", "--topics", "t"],
                       python=python, environ={"HOME": "/h"}, which=no_which)
    assert plan.argv == (str(bin_dir / "spark-submit"), "--master", "local[2]",
                         str(SPARK_APP / "ingest_to_table.py"), "--topics", "t")
    assert plan.env == {"HOME": "/h", "PYSPARK_PYTHON": python}
    # no `--`: every argument is the pipeline's; a PYSPARK_PYTHON of the user's is kept
    plan = plan_submit(["files", "--topic", "t"], python=python,
                       environ={"PYSPARK_PYTHON": "/opt/py"}, which=no_which)
    assert plan.argv[1:] == (str(SPARK_APP / "files_to_topic.py"), "--topic", "t")
    assert plan.env["PYSPARK_PYTHON"] == "/opt/py"


def test_submit_prefers_spark_home_then_beside_python_then_path(tmp_path: Path) -> None:
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    python = str(tmp_path / "venv" / "bin" / "python")  # nothing beside it
    plan = plan_submit(["backfill"], python=python, environ={"SPARK_HOME": str(home)},
                       which=lambda name: "/usr/bin/" + name)
    assert plan.argv[0] == str(home / "bin" / "spark-submit")
    plan = plan_submit(["backfill"], python=python, environ={},
                       which=lambda name: "/usr/bin/" + name)
    assert plan.argv[0] == "/usr/bin/spark-submit"
    with pytest.raises(UsageError, match=r"no spark-submit .*pip install 'rocketha\[spark\]'"):
        plan_submit(["backfill"], python=python, environ={}, which=no_which)


def test_main_prints_a_path_and_refuses_misuse(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["path", "backfill"]) == 0
    assert capsys.readouterr().out == f"{SPARK_APP / 'backfill.py'}\n"
    assert main(["list"]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] \
        == ["backfill", "files", "ingest"]
    for argv in (["path", "nope"], ["run", "ingest"], []):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "rocketha-pipeline" in err and err.count("\n") == 1, (argv, err)


def test_submit_of_this_checkout_names_its_spark_submit() -> None:
    """This suite's venv has the spark extra and a spark-submit beside its Python."""
    plan = plan_submit(["ingest"], python=sys.executable, environ=dict(os.environ),
                       which=no_which)
    assert Path(plan.argv[0]).is_file()
