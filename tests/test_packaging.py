"""The wheel as a user installs it: dependency ranges (no `==` pins, no pyspark in the base
install, so an existing pyspark 4.x stays), and the example configs inside it.

Method: build the wheel from the checkout (pip wheel, no network), read its METADATA, install
it with --no-deps into a fresh virtualenv that borrows the dependencies from the project's
environment, and run `rocketha-broker --example-conf` / `rocketha-controller --example-conf`
from there (so the configs come from the wheel's data files, not from the checkout)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.wheel import build_wheel, without_pythonpath


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


def test_dependencies_are_ranges_without_pyspark(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist()
                                     if n.endswith(".dist-info/METADATA"))).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
    pinned = [r for r in requires if "==" in r.split(";")[0]]
    assert requires and not pinned, pinned
    base = [r for r in requires if "extra ==" not in r]
    assert not [r for r in base if r.lower().startswith(("pyspark", "delta"))], base
    assert any(r.startswith("pyspark") and 'extra == "spark"' in r for r in requires)


def test_example_configs_come_from_the_wheel(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                    "--no-deps", "-q", str(wheel)], check=True, timeout=300,
                   env=without_pythonpath())
    # the dependencies from this environment's site-packages (a path entry: its .pth files,
    # among them the checkout's editable install, are not read)
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    for program, first_key in (("rocketha-broker", "brokerClusterName="),
                               ("rocketha-controller", "controllerDLegerGroup=")):
        result = subprocess.run([str(env_dir / "bin" / program), "--example-conf"], env=env,
                                cwd=tmp_path, capture_output=True, text=True, timeout=60,
                                check=False)
        assert result.returncode == 0, result.stderr
        assert first_key in result.stdout
    where = subprocess.run([str(python), "-c", "import ha; print(ha.__file__)"], env=env,
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert str(env_dir) in where, where  # the wheel's copy ran, not the checkout's
