"""A progress bar for a Spark batch action on a terminal: tasks done of the action's jobs.

    with JobProgress(spark, "files_to_topic"):
        frame.write.format("rocketha")...save()

The action runs under a job group of its own (SparkContext.setJobGroup, per thread), and a
daemon thread polls the status tracker every PROGRESS_INTERVAL_S: completed tasks of the
group's stages out of their task count, drawn by connector's `Progress` on standard error
(`files_to_topic [#####-----] 12/40 30% 3/s`). The task count grows as Spark plans later
stages, so the bar can step back; a finished job's stages that ran no task were skipped (their
shuffle output reused) and leave the count. Nothing runs, and nothing is drawn, when standard error
is not a terminal (logs, CI, spark-submit with redirected output).
"""

from __future__ import annotations

import threading
import uuid
from typing import Self, TextIO

from pyspark.sql import SparkSession

from connector.admin.output import PROGRESS_INTERVAL_S, Progress

__all__ = ["JobProgress"]


class JobProgress:
    def __init__(self, spark: SparkSession, label: str, *, stream: TextIO | None = None,
                 interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self._context = spark.sparkContext
        self._label = label
        self._progress = Progress(label, stream=stream)
        self._interval_s = interval_s
        self._group = f"rocketha-progress-{uuid.uuid4().hex[:12]}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stages: dict[int, tuple[int, int]] = {}  # stage id -> (completed, tasks)

    def __enter__(self) -> Self:
        if self._progress.enabled:
            self._context.setJobGroup(self._group, self._label, False)
            self._thread = threading.Thread(target=self._poll, name="job-progress",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()
        self._progress.close()
        for key in ("spark.jobGroup.id", "spark.job.description"):  # None: unset
            self._context.setLocalProperty(key, None)  # type: ignore[arg-type]

    def _poll(self) -> None:
        while not self._stop.wait(self._interval_s):  # ends with the action (__exit__)
            self._sample()

    def _sample(self) -> None:
        tracker = self._context.statusTracker()
        for job_id in tracker.getJobIdsForGroup(self._group):
            job = tracker.getJobInfo(job_id)
            if job is None:
                continue
            for stage_id in job.stageIds:
                stage = tracker.getStageInfo(stage_id)
                if stage is None:
                    continue
                if job.status != "RUNNING" and stage.numCompletedTasks == 0 \
                        and stage.numActiveTasks == 0:
                    self._stages.pop(stage_id, None)  # skipped: its output was reused
                else:
                    self._stages[stage_id] = (stage.numCompletedTasks, stage.numTasks)
        if self._stages:
            done = sum(completed for completed, _ in self._stages.values())
            total = sum(tasks for _, tasks in self._stages.values())
            self._progress.update(done, total)
