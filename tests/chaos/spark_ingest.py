"""The chaos run's Spark workload (`--spark`): a structured-streaming ingest into a Delta table.

A Spark standalone cluster (spark_app/standalone.py: a master and two workers, bound to the
root namespace's address on the test hosts' bridge) runs `spark_app/ingest_to_table.py` under
`spark-submit` for the whole run: the topic, routes from the controllers, micro-batches every
2 s, into a Delta table (exactly once: the deltalake engine's transaction id per batch), reading
from replicas during failovers. Faults hit the brokers under it as they hit everyone; a task
that fails is retried by Spark, and if the query itself gives up, the second run finishes it.
At the end: the first run stops once it saw no rows for IDLE_S (or is killed after
FINISH_TIMEOUT_S), then a second run (`available-now`, same checkpoint) ingests whatever is
left, and the table's bodies are recorded in the history (`f: table`). The checker then wants
every acknowledged value exactly once in the table, and nothing that was never sent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from spark_app.standalone import StandaloneCluster
from tests.chaos.history import History
from tests.chaos.workload import TOPIC
from tests.integration.failover_cluster import ROOT

__all__ = ["SparkIngest"]

INGEST_SCRIPT = ROOT / "spark_app" / "ingest_to_table.py"
IDLE_S = 20.0
FINISH_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 7200.0


class SparkIngest:
    def __init__(self, out: Path, host: str, controller_addr: str) -> None:
        self.out = out
        self.controller_addr = controller_addr
        self.table = out / "table"
        self.checkpoint = out / "checkpoint"
        self.cluster = StandaloneCluster(out / "spark", host=host, workers=2,
                                         pythonpath=(str(ROOT),))
        self._jobs: list[subprocess.Popen[bytes]] = []

    def start(self) -> SparkIngest:
        self.cluster.start()
        self.stream = self._submit("processing:2s", "ingest.log")
        return self

    def _submit(self, trigger: str, log_name: str) -> subprocess.Popen[bytes]:
        argv = [str(Path(sys.executable).parent / "spark-submit"), "--master",
                self.cluster.master_url, *self.cluster.submit_conf(), str(INGEST_SCRIPT),
                "--controller", self.controller_addr, "--topics", TOPIC,
                "--table", str(self.table), "--checkpoint", str(self.checkpoint),
                "--trigger", trigger, "--body-as", "string",
                "--option", "readFromReplicas=true", "--idle-timeout-s", str(IDLE_S),
                "--timeout-s", str(RUN_TIMEOUT_S)]
        with (self.out / log_name).open("wb") as log:
            job = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                   env=self.cluster.submit_env(), cwd=self.out,
                                   start_new_session=True)
        self._jobs.append(job)
        return job

    def _wait(self, job: subprocess.Popen[bytes], timeout_s: float) -> int | None:
        try:
            return job.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait(timeout=30)
            return None

    def finish(self, history: History) -> dict[str, Any]:
        """Both runs to their end, then the table into the history; returns what happened."""
        stream_rc = self._wait(self.stream, FINISH_TIMEOUT_S)
        rerun_rc = self._wait(self._submit("available-now", "ingest-rerun.log"),
                              FINISH_TIMEOUT_S)
        values: list[str] = []
        if (self.table / "_delta_log").exists():
            values = [str(v) for v in DeltaTable(str(self.table)).to_pyarrow_table(
                columns=["body"]).column("body").to_pylist()]
        outcome = {"stream_rc": stream_rc, "rerun_rc": rerun_rc, "rows": len(values)}
        history.add("final", "ok", "table", values=values, **outcome)
        return outcome

    def close(self) -> None:
        for job in self._jobs:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(timeout=30)
        self.cluster.stop()
