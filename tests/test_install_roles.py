"""One install per role: the base install is the client and the connector, each extra a role.

Goal: `pip install rocketha` brings nothing only a server needs, every console script whose
extra is missing says which in one line (exit status 2, no traceback), `pip install
rocketha[spark]` keeps the pyspark a user already has, and the pipelines run from the wheel.

Method. Default suite: pyproject.toml read as data (base dependencies, extras against
conf/extras.py through the installed distributions' metadata, console scripts against their
shims), and each shim run as a subprocess with its extra's modules hidden (`sys.modules[name] =
None`, which is what `importlib.util.find_spec` reports for a module that is not there).
Slow (`python3 build.py test-install`): the wheel built and installed into fresh venvs under
/work/venvs ($ROCKETHA_VENVS), the base one with its base dependencies alone, running a client
round trip against a broker of this checkout and each console script; the spark one on a real
pre-installed pyspark ($ROCKETHA_PRESET_PYSPARK, default: the oldest the spark extra accepts),
then `rocketha-pipeline submit files` under the venv's spark-submit into that broker.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

import conf.process as conf_process
from conf.extras import EXTRA_MODULES
from connector import Admin, ClientConfig, Consumer
from tests.integration.broker_process import BrokerProcess
from tests.support.wheel import ROOT, build_wheel, without_pythonpath

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BASE_DISTRIBUTIONS = {"pyarrow", "numpy", "fsspec", "tenacity"}  # the client and the connector
SERVER_ONLY = {"prometheus-client", "cryptography", "s3fs", "botocore", "aiobotocore", "boto3",
               "grpcio", "rocketmq-python-client", "pyspark", "delta-spark", "deltalake"}
# console script -> its extra (None: the base install runs it)
SCRIPT_EXTRAS = {"rocketha-admin": None, "rocketha-console": None, "rocketha-pipeline": None,
                 "rocketha-broker": "server", "rocketha-controller": "server",
                 "rocketha-cluster": "server", "rocketha-proxy": "rocketmq"}
# a command line each gated script parses, so that the extra's check is what answers
RUN_ARGS = {"rocketha-broker": ["--conf", "broker.conf"],
            "rocketha-controller": ["--conf", "controller.conf"],
            "rocketha-cluster": ["status", "--dir", "cluster"],
            "rocketha-proxy": ["--conf", "proxy.conf"]}
INSTALL_TIMEOUT_S = 900  # a first run downloads what pip's cache lacks (deltalake: ~1 min)
RUN_TIMEOUT_S = 300


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _scripts() -> dict[str, str]:
    return dict(PYPROJECT["project"]["scripts"])


# -- default suite -------------------------------------------------------------------------

def test_base_dependencies_are_the_client_and_the_connector_only() -> None:
    base = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert base == BASE_DISTRIBUTIONS
    assert not base & SERVER_ONLY


def test_conf_extras_names_the_modules_of_each_extra() -> None:
    """Each extra's distributions (and their own requirements, one level down, as grpcio is
    rocketmq-python-client's) provide exactly the modules conf/extras.py checks for."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    providers = importlib.metadata.packages_distributions()
    for extra, modules in EXTRA_MODULES.items():
        wanted = {_name(r) for r in extras[extra]}
        reach = set(wanted)
        for dist in wanted:
            reach |= {_name(r) for r in importlib.metadata.requires(dist) or ()
                      if "extra ==" not in r}
        for module in modules:
            owners = {_name(d) for d in providers.get(module, ())}
            assert owners & reach, f"{extra}: module {module} comes from {owners}, not {reach}"
        for dist in wanted:
            own = {m for m, ds in providers.items() if dist in {_name(d) for d in ds}}
            assert own & set(modules), f"{extra}: nothing of {dist} ({own}) is checked"


def test_every_console_script_checks_its_extra_before_importing() -> None:
    """Each shim's main parses its command line (argparse only: `--help` stays instant), then
    calls require_extra(script, extra), then imports the real command."""
    scripts = _scripts()
    assert set(scripts) == set(SCRIPT_EXTRAS)
    for script, extra in SCRIPT_EXTRAS.items():
        module = scripts[script].partition(":")[0]
        if extra is None:
            assert not module.endswith("entry"), script
            continue
        path = ROOT / (module.replace(".", "/") + ".py")
        main = next(node for node in ast.parse(path.read_text()).body
                    if isinstance(node, ast.FunctionDef) and node.name == "main")
        served = [stmt.value for stmt in main.body if isinstance(stmt, ast.Return)
                  and isinstance(stmt.value, ast.Call)
                  and getattr(stmt.value.func, "id", "") == "server_entry"]
        if served:  # conf.extras.server_entry: parse, require_extra, then import (its test)
            program, named_extra = served[0].args[:2]
            assert getattr(conf_process, program.id).name == script, script  # type: ignore[attr-defined]
            assert named_extra.value == extra, script  # type: ignore[attr-defined]
            continue
        checks = [i for i, stmt in enumerate(main.body) if isinstance(stmt, ast.Expr)
                  and isinstance(stmt.value, ast.Call)
                  and getattr(stmt.value.func, "id", "") == "require_extra"]
        imports = [i for i, stmt in enumerate(main.body) if isinstance(stmt, ast.ImportFrom)]
        assert len(checks) == 1 and imports and checks[0] < imports[0], script
        call = main.body[checks[0]].value  # type: ignore[attr-defined]
        assert [a.value for a in call.args] == [script, extra], script


# A command line each shim's parser accepts, so main() goes on to the extra's check.
ACCEPTED_ARGV = {"rocketha-cluster": ["status", "--dir", "."]}


@pytest.mark.parametrize("script", sorted(s for s, e in SCRIPT_EXTRAS.items() if e))
def test_a_missing_extra_is_one_line_and_status_2(script: str, tmp_path: Path) -> None:
    extra = SCRIPT_EXTRAS[script]
    assert extra is not None
    module = _scripts()[script].partition(":")[0]
    hide = "".join(f"sys.modules[{name!r}] = None; " for name in EXTRA_MODULES[extra])
    argv = ACCEPTED_ARGV.get(script, ["--conf", "x.conf"])
    code = f"import sys; {hide}from {module} import main; sys.exit(main({argv!r}))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"{script}: ")
    assert f"the {extra} extra" in result.stderr
    assert f"pip install 'rocketha[{extra}]'" in result.stderr


def test_an_s3_tier_without_s3fs_is_refused_in_one_line(tmp_path: Path) -> None:
    """The broker refuses before opening its store; FileIO (Spark's cold reads) says the same."""
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 'store'}\ntieredStoreEnable=true\n"
                    "tieredStoreUrl=s3://bucket/tier\n")
    code = ("import sys; sys.modules['s3fs'] = None\n"
            "from storage_engine.tiered import FileIO, TieredStorageError\n"
            "try:\n    FileIO('s3a://bucket/tier')\n"
            "except TieredStorageError as err:\n    print(err)\n"
            "from ha.broker.main import main\n"
            f"sys.exit(main(['--conf', {str(conf)!r}]))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2, result.stderr
    assert result.stdout == ("open s3a://bucket/tier: s3fs is not installed: "
                             "pip install 'rocketha[s3]'\n")
    assert result.stderr == ("rocketha-broker: tieredStoreUrl s3://bucket/tier needs the s3 "
                             "extra (no module s3fs): pip install 'rocketha[s3]'\n")
    assert not (tmp_path / "store").exists()  # refused before the store was opened


def test_a_cluster_without_the_rocketmq_extra_starts_no_proxy(tmp_path: Path) -> None:
    """`rocketha-cluster up` with controllers: no endpoint by default, refused when asked."""
    code = ("import argparse, sys\n"
            "sys.modules['grpc'] = None\n"
            "from ha.cluster.main import _proxy_up\n"
            "parser = argparse.ArgumentParser(prog='rocketha-cluster up')\n"
            "_proxy_up(None, argparse.Namespace(grpc_port=None), '127.0.0.1:1', parser, '')\n"
            "_proxy_up(None, argparse.Namespace(grpc_port=8081), '127.0.0.1:1', parser, '')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    line = "rocketha-proxy needs the rocketmq extra (no module grpc): pip install " \
           "'rocketha[rocketmq]'"
    assert result.stdout == f"no RocketMQ gRPC endpoint: {line}\n"
    assert result.returncode == 2
    assert result.stderr.endswith(f"rocketha-cluster up: error: --grpc-port: {line}\n")


# -- slow: the wheel in fresh venvs --------------------------------------------------------

def _venvs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chosen = Path(os.environ.get("ROCKETHA_VENVS", "/work/venvs"))
    if not chosen.parent.is_dir():
        return tmp_path_factory.mktemp("venvs")
    chosen.mkdir(exist_ok=True)
    return chosen


def _fresh_venv(path: Path) -> Path:
    if path.exists():
        shutil.rmtree(path)
    venv.EnvBuilder(with_pip=False, clear=True).create(path)  # this pip serves it (--python)
    return path / "bin" / "python"


def _pip(python: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    *args], check=True, timeout=INSTALL_TIMEOUT_S, env=without_pythonpath())


def _installed(python: Path) -> dict[str, str]:
    listing = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "list",
                              "--format", "json"],
                             capture_output=True, text=True, check=True, timeout=120,
                             env=without_pythonpath()).stdout
    return {_name(row["name"]): row["version"] for row in json.loads(listing)}


def _run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          check=False, cwd=cwd, env={**without_pythonpath(), **env})


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def checkout_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """A broker of this checkout (the suite's venv: it has the server extra)."""
    process = BrokerProcess(tmp_path_factory.mktemp("broker"), flushDiskType="ASYNC_FLUSH")
    yield process.start()
    process.stop()


ROUND_TRIP = """
import sys
import connector
from connector import Admin, ClientConfig, Consumer, Producer
from storage_engine.tiered import FileIO, TieredStorageError

config = ClientConfig(brokers=(sys.argv[1],))
Admin(config).create_topic("installed", queues=1)
with Producer(config) as producer:
    sent = producer.send("installed", b"from-the-wheel", key="k1")
assert sent.ok, sent
pulled = Consumer(config).pull("installed", sent.queue_id, sent.queue_offset)
print(connector.__file__)
print(pulled.table.column("body")[0].as_py().decode())
try:
    FileIO("s3://bucket/tier")
except TieredStorageError as err:
    print(err)
"""


@pytest.mark.slow
@pytest.mark.integration
def test_base_install_is_a_client(wheel: Path, checkout_broker: BrokerProcess,
                                  tmp_path_factory: pytest.TempPathFactory,
                                  tmp_path: Path) -> None:
    venv_dir = _venvs_dir(tmp_path_factory) / "rocketha-base"
    python = _fresh_venv(venv_dir)
    _pip(python, "-c", str(ROOT / "constraints.txt"), str(wheel))
    installed = _installed(python)
    assert not set(installed) & SERVER_ONLY, installed
    assert set(installed) >= BASE_DISTRIBUTIONS

    (tmp_path / "round_trip.py").write_text(ROUND_TRIP)
    result = _run([str(python), "round_trip.py", checkout_broker.endpoint], tmp_path)
    assert result.returncode == 0, result.stderr
    where, body, s3 = result.stdout.splitlines()
    assert where.startswith(str(venv_dir)), where  # the wheel's copy, not the checkout
    assert body == "from-the-wheel"
    assert "pip install 'rocketha[s3]'" in s3, s3

    bin_dir = venv_dir / "bin"
    for script, extra in SCRIPT_EXTRAS.items():
        if extra is None:
            continue
        # `--help` answers without the extra (the command line is parsed first); a command
        # that would run is what the extra's check refuses
        helped = _run([str(bin_dir / script), "--help"], tmp_path)
        assert helped.returncode == 0 and helped.stdout.startswith("usage: "), (script, helped)
        refused = _run([str(bin_dir / script), *RUN_ARGS[script]], tmp_path)
        assert refused.returncode == 2, (script, refused.stderr)
        assert refused.stderr == (f"{script}: needs the {extra} extra (no module "
                                  f"{', '.join(EXTRA_MODULES[extra])}): "
                                  f"pip install 'rocketha[{extra}]'\n")
    for script in ("rocketha-admin", "rocketha-console"):
        helped = _run([str(bin_dir / script), "--help"], tmp_path)
        assert helped.returncode == 0, (script, helped.stderr)
    located = _run([str(bin_dir / "rocketha-pipeline"), "path", "ingest"], tmp_path)
    path = Path(located.stdout.strip())
    assert path.is_file() and path.is_relative_to(venv_dir), located
    refused = _run([str(bin_dir / "rocketha-pipeline"), "submit", "ingest"], tmp_path)
    assert refused.returncode == 2 and "pip install 'rocketha[spark]'" in refused.stderr


def _preset_pyspark() -> str:
    """$ROCKETHA_PRESET_PYSPARK, else the oldest release the spark extra accepts (4.0 -> 4.0.0):
    the one a newer floor or a dependency's ceiling would replace first."""
    chosen = os.environ.get("ROCKETHA_PRESET_PYSPARK", "")
    if chosen:
        return chosen
    spark = PYPROJECT["project"]["optional-dependencies"]["spark"]
    (floor,) = [m.group(1) for r in spark if (m := re.match(r"pyspark>=([0-9.]+)", r))]
    return ".".join([*floor.split("."), "0", "0"][:3])


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.spark
def test_spark_extra_keeps_the_users_pyspark_and_submits_a_pipeline(
        wheel: Path, checkout_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory,
        tmp_path: Path) -> None:
    venv_dir = _venvs_dir(tmp_path_factory) / "rocketha-spark"
    python = _fresh_venv(venv_dir)
    preset = _preset_pyspark()
    _pip(python, f"pyspark=={preset}")  # what a managed runtime ships, before rocketha
    (marker,) = venv_dir.glob("lib/python*/site-packages/pyspark/__init__.py")
    before = marker.stat()
    _pip(python, f"{wheel}[spark]")  # as a user would: no constraints of ours
    installed = _installed(python)
    assert installed["pyspark"] == preset, installed
    after = marker.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert not set(installed) & (SERVER_ONLY - {"pyspark", "deltalake"}), installed

    config = ClientConfig(brokers=(checkout_broker.endpoint,))
    Admin(config).create_topic("installed_files", queues=2)
    inputs = tmp_path / "in"
    inputs.mkdir()
    rows = [{"order": index, "kind": "paid"} for index in range(5)]
    (inputs / "orders.json").write_text("".join(json.dumps(row) + "\n" for row in rows))
    submitted = _run([str(venv_dir / "bin" / "rocketha-pipeline"), "submit", "files",
                      "--master", "local[1]", "--", "--brokers", checkout_broker.endpoint,
                      "--topic", "installed_files", "--input", str(inputs),
                      "--input-format", "json"], tmp_path, SPARK_LOCAL_IP="127.0.0.1")
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    bodies = []
    for queue_id in range(2):
        pulled = Consumer(config).pull("installed_files", queue_id, 0)
        bodies += [json.loads(body.as_py()) for body in pulled.table.column("body")]
    assert sorted(bodies, key=lambda row: row["order"]) == rows
