"""The README's `python3 build.py test` passes on a fresh machine by itself (issue #44).

Goal: the Debian packages the suite needs (Chromium, fuse3, Node.js) come from build.py, so
CI (`.ci/run`) runs exactly the README's command and cannot hide a set-up step it lacks.
Method: build.py's pure planner with fake PATHs, uid and apt-get (nothing to do / install /
refuse with the command); its IO shell with `which`, the uid and the commands faked; and
`.ci/run` read line by line, allowing only its shebang, `set`, `cd` and `python3 build.py test`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import build

ROOT = Path(build.__file__).resolve().parent
ALL_COMMANDS = frozenset(
    command for commands, _why in build.SYSTEM_PACKAGES.values() for command in commands)
# what .ci/run installed with apt-get itself before #44
PACKAGES_CI_INSTALLED = {"chromium", "chromium-driver", "fuse3", "nodejs", "npm"}
README_COMMAND = "python3 build.py test"


@pytest.mark.parametrize(("is_root", "has_apt"),
                         [(True, True), (True, False), (False, True), (False, False)])
def test_nothing_to_do_when_every_command_is_there(is_root: bool, has_apt: bool) -> None:
    assert build.plan_system_packages(ALL_COMMANDS, is_root, has_apt) == build.SystemPlan()


def test_root_with_apt_installs_just_the_missing_packages() -> None:
    present = ALL_COMMANDS - {"chromedriver", "fusermount3"}
    plan = build.plan_system_packages(present, is_root=True, has_apt=True)
    assert plan == build.SystemPlan(install=("chromium-driver", "fuse3"))
    everything = build.plan_system_packages(set(), is_root=True, has_apt=True)
    assert everything.install == tuple(build.SYSTEM_PACKAGES) and not everything.refusal


def test_a_user_who_cannot_install_is_told_which_packages_and_the_command() -> None:
    present = ALL_COMMANDS - {"chromedriver", "npm"}
    plan = build.plan_system_packages(present, is_root=False, has_apt=True)
    assert plan.install == ()
    assert "chromium-driver (the console's browser test)" in plan.refusal
    assert "npm (the Node.js RocketMQ client's smoke test)" in plan.refusal
    assert "apt-get update && apt-get install -y chromium-driver npm" in plan.refusal
    assert "fuse3" not in plan.refusal and "nodejs" not in plan.refusal  # present: not named
    no_apt = build.plan_system_packages(present, is_root=True, has_apt=False)
    assert no_apt.install == () and "no apt-get" in no_apt.refusal
    assert "apt-get install -y chromium-driver npm" in no_apt.refusal


def test_the_io_shell_installs_with_one_update_and_refuses_before_anything_runs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(build, "_run", lambda argv, **kwargs: ran.append(argv))
    on_path = ALL_COMMANDS - {"chromium", "node"} | {"apt-get"}
    monkeypatch.setattr(build.shutil, "which", lambda cmd: f"/usr/bin/{cmd}" if cmd in on_path
                        else None)
    monkeypatch.setattr(build.os, "geteuid", lambda: 0)
    assert build.provide_system_packages() == 0
    assert ran == [["apt-get", "update", "-qq"],
                   ["apt-get", "install", "-y", "-qq", "chromium", "nodejs"]]
    assert capsys.readouterr().out.splitlines() == [
        "build.py: installing chromium (the console's browser test)",
        "build.py: installing nodejs (the Node.js RocketMQ client's smoke test)"]
    ran.clear()
    monkeypatch.setattr(build.os, "geteuid", lambda: 1000)
    assert build.provide_system_packages() == 2
    assert ran == []
    assert "apt-get install -y chromium nodejs" in capsys.readouterr().err


def test_build_py_provides_every_package_ci_used_to_install() -> None:
    assert set(build.SYSTEM_PACKAGES) >= PACKAGES_CI_INSTALLED
    for name, (commands, why) in build.SYSTEM_PACKAGES.items():
        assert commands and why, f"{name}: which commands prove it, and why the suite needs it"


def test_ci_runs_the_readme_command_and_nothing_else() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    steps = [line for line in lines if line and not line.startswith("#")]  # and the shebang
    extra = [step for step in steps
             if not step.startswith(("set ", "cd ")) and step != README_COMMAND]
    assert not extra, f".ci/run does set-up that build.py lacks (move it there): {extra}"
    assert steps[-1] == README_COMMAND
    assert README_COMMAND in (ROOT / "README.md").read_text()


def test_setup_byte_compiles_even_where_python_writes_no_bytecode(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 42: with PYTHONDONTWRITEBYTECODE=1 every broker start compiled the project's
    # modules from source (2.8 s of a restart after a large write evicted the page cache)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("VALUE = 1\n")
    (package / "broken.py").write_text("def (:\n")  # does not compile: skipped, not fatal
    build.byte_compile(Path(sys.executable), [package])
    compiled = {path.name.split(".")[0] for path in (package / "__pycache__").iterdir()}
    assert compiled == {"__init__"}


def test_setup_compiles_every_source_pyproject_installs() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    packages = re.search(r'\[tool\.setuptools\.packages\.find\]\s*include = \[([^\]]*)\]', text)
    modules = re.search(r'py-modules = \[([^\]]*)\]', text)
    assert packages and modules
    expected = {name.strip(' "*') for name in packages.group(1).split(",")}
    expected |= {name.strip(' "') + ".py" for name in modules.group(1).split(",")}
    assert set(build.PROJECT_SOURCES) == expected
    assert all((ROOT / name).exists() for name in build.PROJECT_SOURCES)


def test_setup_byte_compiles_the_project_when_nothing_is_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    compiled: list[list[Path]] = []
    monkeypatch.setattr(build, "byte_compile", lambda python, paths: compiled.append(paths))
    monkeypatch.setattr(build, "_install_fingerprint", lambda: "same")
    monkeypatch.setattr(build, "STAMP_FILE", _Stamp("same"))
    monkeypatch.setattr(build, "VENV_PYTHON", Path(sys.executable))
    assert build.setup() == Path(sys.executable)
    assert compiled == [[ROOT / name for name in build.PROJECT_SOURCES]]


class _Stamp:
    def __init__(self, text: str) -> None:
        self.text = text

    def exists(self) -> bool:
        return True

    def read_text(self) -> str:
        return self.text
