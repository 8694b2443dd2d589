"""The documentation site builds strictly, and its generated tables follow the code.

Goal: a broken link, a page missing from the nav, an unknown anchor, a key or Spark option the
code has and docs/_data does not describe (or the reverse), or any other MkDocs warning fails
CI, as `python3 build.py docs` would. Method: run the same `mkdocs build --strict` into a
temporary directory and check a few generated pages; then drive the table generator
(docs/hooks/reference_tables.py) directly with a key table that has an undescribed key and one
with a stale description, and expect both refused with the key named.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.docs.hooks import load_hook

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> Any:
    return load_hook("reference_tables")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=ROOT, capture_output=True, text=True, check=False,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stderr[-4000:]
    configuration = (site / "configuration" / "index.html").read_text()
    for key in ("inSyncReplicas", "controllerHeartbeatTimeoutMs", "grpcListenPort"):
        assert key in configuration  # generated from the code's key tables


def test_every_key_in_the_code_needs_a_description() -> None:
    hook = _hook()
    with pytest.raises(hook.TableError, match=r"brandNewKey.*docs/_data/broker\.yml"):
        hook._check_same({"listenPort", "brandNewKey"}, {"listenPort"}, "broker keys",
                         "broker")
    with pytest.raises(hook.TableError, match=r"goneKey.*no longer"):
        hook._check_same({"listenPort"}, {"listenPort", "goneKey"}, "broker keys", "broker")


def test_the_generated_tables_name_what_the_code_accepts() -> None:
    from connector.spark.options import READ_OPTIONS, WRITE_OPTIONS
    from ha.broker import BROKER_KEYS
    hook = _hook()
    broker = hook.render("broker-keys")
    assert all(f"`{key}`" in broker for key in BROKER_KEYS)
    spark = hook.render("spark-options")
    assert all(f"`{name}`" in spark for name in READ_OPTIONS | WRITE_OPTIONS)
    assert "| `PUT_OK` |" in hook.render("error-codes")
    with pytest.raises(hook.TableError, match="unknown table"):
        hook.render("no-such-table")


def test_a_key_object_of_the_code_wins_over_the_data_file() -> None:
    from conf.keys import Key
    hook = _hook()
    entry = hook._key_entry(Key(name="x", default=7, unit="ms", doc="from the code"),
                            {"default": "1", "doc": "from the data file"})
    assert (entry["default"], entry["unit"], entry["doc"]) == (7, "ms", "from the code")
