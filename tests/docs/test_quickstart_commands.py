"""The quickstart's code does not rot: its Python compiles and every command it names exists.

Goal: a reader who copies the README's or docs/quickstart.md's blocks never meets a command,
subcommand or Spark option the code does not have. Method: pull the fenced ```python and
```bash blocks out of both files; compile each Python block and check every `.option("x", ...)`
against the connector's option sets; for each shell line, check `python3 build.py X` against
the commands `build.py --help` lists, `rocketha-*` against pyproject's console scripts, and the
tool's subcommand against an `add_parser("...")` in the code. This also covers the blocks
marked `not run` there; tests/docs/test_examples_run.py runs the others.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

import build
from connector.spark.options import READ_OPTIONS, WRITE_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "quickstart.md"]
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
# Commands a quickstart may use that are not ours.
FOREIGN = {"pip", "python3", "cat", "grep", "kill", "jq", "spark-submit", "."}


def _blocks(lang: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for match in FENCE.finditer(page.read_text()):
            if match.group("lang") == lang:
                found.append((page.name, match.group("body")))
    return found


def _console_scripts() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])


def _subcommands() -> set[str]:
    names: set[str] = set()
    for path in ROOT.glob("**/*.py"):
        if ".venv" in path.parts or "tests" in path.parts:
            continue
        names.update(re.findall(r"add_parser\(\s*\"([a-z-]+)\"", path.read_text()))
    return names


def _build_commands() -> set[str]:
    assert build.__doc__ is not None
    return set(re.findall(r"^\s+python3 build\.py (\w+)", build.__doc__, re.MULTILINE))


def _shell_commands() -> list[tuple[str, list[str]]]:
    commands = []
    for page, body in _blocks("bash"):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            for part in re.split(r"&&|\|", line):
                if part.strip():
                    commands.append((page, shlex.split(part)))
    return commands


def test_there_is_something_to_check() -> None:
    assert len(_blocks("python")) >= 2 and len(_shell_commands()) >= 8


@pytest.mark.parametrize("page,body", _blocks("python"))
def test_python_blocks_compile_and_name_known_options(page: str, body: str) -> None:
    compile(body, page, "exec")
    for option in re.findall(r"\.option\(\s*\"(\w+)\"", body):
        assert option in READ_OPTIONS | WRITE_OPTIONS, f"{page}: unknown option {option!r}"


def test_every_command_named_exists() -> None:
    scripts, subcommands, build_commands = _console_scripts(), _subcommands(), _build_commands()
    for page, argv in _shell_commands():
        program = argv[0]
        if program == "python3" and argv[1:2] == ["build.py"]:
            assert argv[2] in build_commands, f"{page}: build.py has no command {argv[2]!r}"
        elif program.startswith("rocketha-"):
            assert program in scripts, f"{page}: {program} is no console script"
            words = [word for word in argv[1:] if not word.startswith("-")]
            if program in ("rocketha-cluster", "rocketha-admin"):
                # the first bare word that is not a path (an option's value) is the subcommand
                sub = next(word for word in words if not word.startswith("/"))
                assert sub in subcommands, f"{page}: {program} has no subcommand {sub!r}"
        else:
            assert program in FOREIGN, f"{page}: unknown command {program!r} in {argv}"
