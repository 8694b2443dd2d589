"""`pyspark_rocketha` never breaks Spark's data source lookup.

Goal: Spark imports every top-level `pyspark_*` module in one worker for every Python data
source lookup, and an exception there fails the lookup of all of them; on a pyspark the
connector cannot serve, the module must import cleanly, define no `DefaultSource` (which Spark
skips) and log one line saying why. Method: the pure version check on literal versions; then
Spark's own lookup loop (pyspark/sql/worker/lookup_data_sources.py: iter_modules, import,
`hasattr(mod, "DefaultSource")`) in a fresh interpreter whose `pyspark` is a stand-in package:
an old 3.5.3 (no Python Data Source API at all), and a 4.0.0 whose data source module lacks
what the connector imports. The real pyspark's lookup runs in tests/connector/
test_spark_versions.py (`format("rocketha")` without register(), on every lane).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pyspark_rocketha

ROOT = Path(__file__).resolve().parents[2]

# Spark's lookup, as pyspark/sql/worker/lookup_data_sources.py does it (4.0 to 4.3)
LOOKUP = textwrap.dedent("""
    from importlib import import_module
    from pkgutil import iter_modules
    found = {}
    for info in iter_modules():
        if info.name.startswith("pyspark_"):
            mod = import_module(info.name)
            if hasattr(mod, "DefaultSource"):
                found[mod.DefaultSource.name()] = mod.DefaultSource
    print("registered:", sorted(found))
""")


@pytest.mark.parametrize(("version", "served"), [
    ("4.0.0", True), ("4.1.1", True), ("4.3.0", True), ("4.2.0.dev1", True),
    ("3.5.3", False), ("5.0.0", False), ("banana", False), (None, False)])
def test_which_versions_are_served(version: str | None, served: bool) -> None:
    assert (pyspark_rocketha.unserved_reason(version) is None) == served


def run_lookup(tmp_path: Path, version: str, datasource_module: str) -> tuple[str, list[str]]:
    stub = tmp_path / "stub"
    (stub / "pyspark" / "sql").mkdir(parents=True)
    (stub / "pyspark" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (stub / "pyspark" / "sql" / "__init__.py").write_text("")
    if datasource_module:
        (stub / "pyspark" / "sql" / "datasource.py").write_text(datasource_module)
    done = subprocess.run([sys.executable, "-c", LOOKUP], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={"PYTHONPATH": f"{stub}:{ROOT}", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip(), done.stderr.strip().splitlines()


def test_an_old_pyspark_registers_nothing_and_logs_one_line(tmp_path: Path) -> None:
    stdout, log = run_lookup(tmp_path, "3.5.3", "")
    assert stdout == "registered: []"
    assert log == [("rocketha: format('rocketha') is not registered: pyspark 3.5.3 is outside "
                    "the supported range >=4.0,<5")]


def test_a_connector_that_fails_to_import_registers_nothing(tmp_path: Path) -> None:
    stdout, log = run_lookup(tmp_path, "4.0.0", "class DataSource: pass\n")
    assert stdout == "registered: []"
    assert len(log) == 1, log
    assert log[0].startswith("rocketha: format('rocketha') is not registered: the connector "
                             "failed to import (ImportError: "), log
