"""`rocketha-pipeline`: the pipelines of an installed rocketha, for spark-submit.

spark-submit runs a Python application from a file, and in a wheel install the pipelines are
files inside site-packages that nobody should have to look for:

    rocketha-pipeline list                          each pipeline's name, file and summary
    rocketha-pipeline path NAME                     the file to give your own spark-submit
    rocketha-pipeline submit NAME [SPARK-SUBMIT OPTION ...] [-- PIPELINE ARG ...]
                                                    spark-submit it with this Python

NAME is `ingest` (ingest_to_table.py), `backfill` (backfill.py) or `files` (files_to_topic.py),
or the file's own name. `submit` splits its arguments at `--`: before it spark-submit's
options (`--master`, `--conf`, ...), after it the pipeline's flags; with no `--` every argument
is the pipeline's. It runs the spark-submit of SPARK_HOME when that is set, else the one beside
this Python (the pyspark package installs it there), else the first on PATH, with
PYSPARK_PYTHON defaulting to this Python, so the driver and local executors import the same
rocketha. That Python needs the spark extra (the pipelines import pyspark and deltalake); with
a Spark distribution of your own, give its spark-submit the file `path` prints.

The decision (`plan_submit`) is a pure function of the arguments, this Python and the
environment; `main` only prints or runs it. Misuse is one line and exit status 2.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from conf.extras import extra_refusal

__all__ = ["PIPELINES", "SubmitPlan", "UsageError", "main", "pipeline_path", "plan_submit"]

PROGRAM = "rocketha-pipeline"
USAGE = (f"usage: {PROGRAM} list | path NAME | submit NAME [SPARK-SUBMIT OPTION ...] "
         "[-- PIPELINE ARG ...]")
# short name -> (module file in spark_app/, one-line summary)
PIPELINES: dict[str, tuple[str, str]] = {
    "backfill": ("backfill.py", "a fixed range of topics into a Delta or Parquet table"),
    "files": ("files_to_topic.py", "JSON, CSV or Parquet files into a topic"),
    "ingest": ("ingest_to_table.py", "topics into a Delta or Parquet table, streaming"),
}


class UsageError(ValueError):
    """The command line is wrong; the message says how."""


@dataclasses.dataclass(frozen=True, slots=True)
class SubmitPlan:
    argv: tuple[str, ...]  # spark-submit, its options, the pipeline file, the pipeline's flags
    env: dict[str, str]  # the environment spark-submit runs with


def pipeline_path(name: str) -> Path:
    """The installed file of pipeline `name` (a short name or the file's own name)."""
    by_file = {file.removesuffix(".py"): file for file, _summary in PIPELINES.values()}
    file = PIPELINES[name][0] if name in PIPELINES else by_file.get(name.removesuffix(".py"))
    if file is None:
        raise UsageError(f"no pipeline {name!r} (pipelines: {', '.join(sorted(PIPELINES))})")
    path = Path(__file__).resolve().with_name(file)
    assert path.is_file(), path  # shipped beside this module in the wheel and in a checkout
    return path


def find_spark_submit(python: str, environ: Mapping[str, str],
                      which: Callable[[str], str | None]) -> str | None:
    """SPARK_HOME's spark-submit, else the one beside `python`, else PATH's (None: none)."""
    spark_home = environ.get("SPARK_HOME", "")
    candidates = [Path(spark_home) / "bin" / "spark-submit"] if spark_home else []
    candidates.append(Path(python).parent / "spark-submit")
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    return which("spark-submit")


def plan_submit(args: Sequence[str], *, python: str, environ: Mapping[str, str],
                which: Callable[[str], str | None]) -> SubmitPlan:
    """`submit NAME ...`'s arguments -> the spark-submit command and its environment."""
    if not args:
        raise UsageError("submit: which pipeline? " + USAGE)
    path = pipeline_path(args[0])
    rest = list(args[1:])
    if "--" in rest:
        split = rest.index("--")
        submit_options, pipeline_args = rest[:split], rest[split + 1:]
    else:
        submit_options, pipeline_args = [], rest
    spark_submit = find_spark_submit(python, environ, which)
    if spark_submit is None:
        raise UsageError("submit: no spark-submit in $SPARK_HOME/bin, beside this Python or on "
                         "PATH: pip install 'rocketha[spark]' (or give your own spark-submit "
                         f"the file `{PROGRAM} path NAME` prints)")
    env = dict(environ)
    env.setdefault("PYSPARK_PYTHON", python)
    return SubmitPlan((spark_submit, *submit_options, str(path), *pipeline_args), env)


def _list() -> None:
    for name, (_file, summary) in sorted(PIPELINES.items()):
        print(f"{name:<10} {pipeline_path(name)}  {summary}")


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__ if args else USAGE, file=sys.stdout if args else sys.stderr)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    try:
        if command == "list" and not rest:
            _list()
            return 0
        if command == "path" and len(rest) == 1:
            print(pipeline_path(rest[0]))
            return 0
        if command != "submit":
            raise UsageError(USAGE)
        refusal = extra_refusal(PROGRAM, "spark", purpose="submit")
        if refusal is not None:
            raise UsageError(refusal)
        plan = plan_submit(rest, python=sys.executable, environ=os.environ, which=shutil.which)
    except UsageError as err:
        print(f"{PROGRAM}: {err}", file=sys.stderr)
        return 2
    return subprocess.run(plan.argv, env=plan.env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
