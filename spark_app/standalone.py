"""A Spark standalone cluster from the pyspark package: one master and N workers, each its own
process, for tests and the demo (`build.py demo --hosts`).

    with StandaloneCluster(work_dir, host="198.18.7.1", workers=2) as cluster:
        subprocess.run([spark_submit, "--master", cluster.master_url, *cluster.submit_conf(),
                        "job.py", ...], env=cluster.submit_env())

What it starts (pyspark ships the launcher and the classes; no Spark download):
    spark-class org.apache.spark.deploy.master.Master --host H --port P --webui-port W
    spark-class org.apache.spark.deploy.worker.Worker --host H --cores C --memory M
                --work-dir <work_dir>/worker-<i> spark://H:P          (one per worker)
Each worker starts one executor JVM per application, and each executor its own Python workers
(`PYSPARK_PYTHON`, sent by the driver). So tasks run in processes that share nothing with the
driver but the file system of this machine: no driver memory, no driver-local Python state.

Addresses: the master and the driver bind `host` (SPARK_LOCAL_IP; the driver's
`spark.driver.host` / `spark.driver.bindAddress` from `submit_conf()`), which for the demo and
the tests is the root namespace's address on a test-host bridge (ha/cluster/netns.py), so the
executors reach the brokers on the test hosts only through their advertised addresses.
`worker_hosts` puts each worker (and so its executors and their Python workers) on a machine
of its own: `(address, launcher)`, e.g. a test host's address and `ip netns exec NS`; the
worker binds that address, and inside its network stack 127.0.0.1 is its own loopback.

Readiness: the master's web UI JSON (`http://H:W/json/`) lists its workers; `start()` waits
until all are ALIVE. Each process runs in a session of its own: `stop()` ends the process
group it started (the JVM and its executors), and nothing else. Logs: <work_dir>/*.log;
executor logs in <work_dir>/worker-<i>/<app id>/<executor id>/stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

__all__ = ["StandaloneCluster", "StandaloneError", "spark_bin"]

START_TIMEOUT_S = 180.0  # master up and every worker registered (JVM starts on 2 busy cores)
STOP_TIMEOUT_S = 10.0  # then SIGKILL: the daemons hold nothing that must be kept
POLL_S = 0.5
HTTP_TIMEOUT_S = 2.0
WORKER_CORES_DEFAULT = 1
WORKER_MEMORY_DEFAULT = "1g"
EXECUTOR_MEMORY_DEFAULT = "768m"
DAEMON_MEMORY = "256m"  # heap of the master and worker daemons (SPARK_DAEMON_MEMORY)


class StandaloneError(Exception):
    """The cluster did not start (the message holds the log tail)."""


def spark_bin(name: str) -> Path:
    """A launcher of the pyspark package next to this interpreter (`spark-class`, ...)."""
    return Path(sys.executable).parent / name


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class StandaloneCluster:
    """A master and `workers` workers on `host`; see the module docstring."""

    def __init__(self, work_dir: Path, *, host: str = "127.0.0.1", workers: int = 2,
                 worker_cores: int = WORKER_CORES_DEFAULT,
                 worker_memory: str = WORKER_MEMORY_DEFAULT,
                 executor_memory: str = EXECUTOR_MEMORY_DEFAULT,
                 python: str = sys.executable, pythonpath: tuple[str, ...] = (),
                 worker_hosts: Sequence[tuple[str, list[str]]] = ()) -> None:
        """`python`: the interpreter of every Python worker (PYSPARK_PYTHON; it needs pyarrow
        and rocketha). `pythonpath`: put first on the executors' PYTHONPATH. `worker_hosts`:
        one (address, launcher prefix) per worker (default: every worker on `host`)."""
        if workers < 1:
            raise ValueError(f"workers {workers}: at least 1")
        if worker_hosts and len(worker_hosts) != workers:
            raise ValueError(f"worker_hosts: {len(worker_hosts)} given for {workers} workers")
        self.worker_hosts = list(worker_hosts) or [(host, [])] * workers
        self.work_dir = work_dir
        self.host = host
        self.workers = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.executor_memory = executor_memory
        self.python = python
        self.pythonpath = tuple(pythonpath)
        self.master_port = 0
        self.webui_port = 0
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    def env(self, host: str | None = None) -> dict[str, str]:
        """The environment of the daemons, the executors they fork, and spark-submit
        (`host`: the address the process binds; default the master's)."""
        host = host or self.host
        paths = [*self.pythonpath,
                 *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
        return dict(os.environ, SPARK_LOCAL_IP=host, SPARK_PUBLIC_DNS=host,
                    PYSPARK_PYTHON=self.python, PYSPARK_DRIVER_PYTHON=self.python,
                    PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)),
                    SPARK_DAEMON_MEMORY=DAEMON_MEMORY, SPARK_NO_DAEMONIZE="1",
                    # no REST submission server (it would take the fixed port 6066)
                    SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")

    def submit_env(self) -> dict[str, str]:
        return self.env()

    def submit_conf(self) -> list[str]:
        """spark-submit flags for a driver on this machine using this cluster."""
        pythonpath = self.env()["PYTHONPATH"]
        conf = {"spark.driver.host": self.host, "spark.driver.bindAddress": self.host,
                "spark.executor.memory": self.executor_memory,
                "spark.executor.cores": str(self.worker_cores),
                "spark.pyspark.python": self.python,
                "spark.executorEnv.PYTHONPATH": pythonpath,
                "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                "spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"}
        return [item for key, value in conf.items() for item in ("--conf", f"{key}={value}")]

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> Self:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.master_port, self.webui_port = _free_port(self.host), _free_port(self.host)
        try:
            self._spawn("master", ["org.apache.spark.deploy.master.Master",
                                   "--host", self.host, "--port", str(self.master_port),
                                   "--webui-port", str(self.webui_port)])
            self._wait(lambda state: state is not None, "the master's web UI")
            for index, (address, launcher) in enumerate(self.worker_hosts, start=1):
                worker_dir = self.work_dir / f"worker-{index}"
                worker_dir.mkdir(exist_ok=True)
                self._spawn(f"worker-{index}", [
                    "org.apache.spark.deploy.worker.Worker", "--host", address,
                    "--cores", str(self.worker_cores), "--memory", self.worker_memory,
                    "--work-dir", str(worker_dir), "--webui-port", "0", self.master_url],
                    host=address, launcher=launcher)
            self._wait(lambda state: state is not None and len(
                [w for w in state.get("workers", ()) if w.get("state") == "ALIVE"]
            ) >= self.workers, f"{self.workers} ALIVE workers")
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, args: list[str], *, host: str | None = None,
               launcher: Sequence[str] = ()) -> None:
        with (self.work_dir / f"{name}.log").open("ab") as log:
            self._processes.append(subprocess.Popen(
                [*launcher, str(spark_bin("spark-class")), *args], stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env(host),
                start_new_session=True))

    def state(self) -> dict[str, Any] | None:
        """The master's JSON state (workers, active and completed apps); None if it does not
        answer."""
        url = f"http://{self.host}:{self.webui_port}/json/"
        try:
            with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
                return dict(json.loads(response.read()))
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not ready(self.state()):
            exited = [p for p in self._processes if p.poll() is not None]
            if exited or time.monotonic() > deadline:
                tails = "\n".join(f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}"
                                  for log in sorted(self.work_dir.glob("*.log")))
                why = "a daemon exited" if exited else f"not within {START_TIMEOUT_S:.0f}s"
                raise StandaloneError(f"spark standalone: no {what} ({why})\n{tails}")
            time.sleep(POLL_S)

    def executor_logs(self) -> list[Path]:
        """The stderr files of every executor the workers ran so far."""
        return sorted(self.work_dir.glob("worker-*/app-*/*/stderr"))

    def stop(self) -> None:
        """End the process groups this cluster started (workers first); never raises for
        what is gone already."""
        for process in reversed(self._processes):
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for process in reversed(self._processes):
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=STOP_TIMEOUT_S)
        self._processes = []

    def __enter__(self) -> Self:
        return self.start() if not self._processes else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
