"""Ingest as a Spark job: the changed trial dirs are read by Spark tasks, one group of job dirs a
task, each task writing its rows to Parquet segments of its own in the lake (as a reader process
of the parallel ingest does, through the same `readers.extract_to_segments`); the driver keeps
everything else of `wmo_lake.ingest` (discovery, fingerprints, the catalog, replacements) and
commits the manifest under the lake's one lock, in one rename.

    from wmo_lake.spark import ingest, local_session
    ingest(local_session("local[*]"), ["runs/"], "lake")

The executors write into the lake's directory, so on a cluster the lake and the run trees must be
on a filesystem every executor mounts at the same path, and wmo-lake must be installed on them.
A failed task fails the job, and a Ctrl-C cancels it (pyspark's SIGINT handler): either way the
ingest raises before its commit, the manifest still names the previous generation, and the
segments the tasks wrote are removed by the next commit's garbage collection.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmo_lake.discover import TrialTask
from wmo_lake.store import crash_point, pause_point

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from wmo_lake.extract import Extracted


def job_groups(tasks: list[TrialTask], parallelism: int) -> list[list[TrialTask]]:
    """The Spark tasks' inputs: one group per job dir, so a task's segments lie in one job's
    partition; while there are fewer groups than cores, the biggest is split in halves."""
    by_job: dict[str, list[TrialTask]] = {}
    for task in tasks:
        by_job.setdefault(task.job_key, []).append(task)
    groups = list(by_job.values())
    while len(groups) < parallelism:
        biggest = max(range(len(groups)), key=lambda i: len(groups[i]), default=None)
        if biggest is None or len(groups[biggest]) < 2:
            break
        group = groups.pop(biggest)
        half = len(group) // 2
        groups[biggest:biggest] = [group[:half], group[half:]]
    return groups


def read_partition(
    lake: str, prefix: str, cwd: str, index: int, tasks: Iterable[TrialTask]
) -> Iterator[tuple[str, Any, Extracted | None]]:
    """One Spark task: extract its dirs into segments named `<prefix>-s<index>` (a retried
    attempt gets its own names), yielding ("trial", real path, summary) per dir and finally
    ("closed", the segments written, None). Relative trial paths are the driver's: they are
    resolved from its working directory, as the local ingest does."""
    from pyspark import TaskContext

    from wmo_lake.commit import SegmentWriter
    from wmo_lake.readers import extract_to_segments

    context = TaskContext.get()
    attempt = context.attemptNumber() if context is not None else 0
    label = f"-s{index}" + (f"a{attempt}" if attempt else "")
    here = os.getcwd()
    if os.path.isdir(cwd) and cwd != here:
        os.chdir(cwd)
    from wmo_lake.extract import begin_reading

    begin_reading()
    writer = SegmentWriter(Path(lake), prefix + label)
    try:
        for task in tasks:
            pause_point()
            yield "trial", task.real, extract_to_segments(task, writer)
        files = writer.close()
        crash_point("spark_task")  # segments written, the driver not told: the orphan case
        yield "closed", files, None
    except BaseException:
        writer.abort()
        raise
    finally:
        if os.getcwd() != here:
            os.chdir(here)


class SparkReaders:
    """`wmo_lake.readers.Readers` on Spark: iterate for (task, its Extracted summary) once the job
    has finished; the rows are in the segments the tasks wrote, listed in `files` (one dict per
    task) for the commit to take."""

    write_rows = True

    def __init__(
        self, spark: SparkSession, tasks: list[TrialTask], lake: Path, segment_prefix: str
    ) -> None:
        self.spark = spark
        self.tasks = tasks
        self.lake = lake
        self.segment_prefix = segment_prefix
        self.files: list[Any] = []
        self.copies: list[Any] = []  # (Spark tasks copy no stored rows: the build reads them)
        # (job dirs' rows are written by the ingest process: see Readers.jobs_written)
        self.jobs_written: set[str] = set()
        self.jobs_read: list[tuple[Any, Extracted]] = []

    def __iter__(self) -> Iterator[tuple[TrialTask, Extracted]]:
        if not self.tasks:
            return
        context = self.spark.sparkContext
        if (context.master or "").startswith("local"):
            # Local tasks import wmo_lake: they run this interpreter, not whatever PYSPARK_PYTHON
            # or the `python3` on PATH held when the context started (a minor version apart,
            # Spark refuses to run them). A cluster's executors keep their configured Python.
            context.pythonExec = sys.executable
        groups = job_groups(self.tasks, context.defaultParallelism)
        lake, prefix, cwd = str(self.lake.resolve()), self.segment_prefix, os.getcwd()
        context.setJobDescription(f"wmo-lake ingest: {len(self.tasks)} trial dirs into {lake}")
        results = (
            context.parallelize(groups, len(groups))
            .mapPartitionsWithIndex(
                lambda index, part: read_partition(
                    lake, prefix, cwd, index, (task for group in part for task in group)
                )
            )
            .collect()
        )
        by_real = {task.real: task for task in self.tasks}
        for kind, payload, extracted in results:
            if kind == "closed":
                self.files.append(payload)
            else:
                assert extracted is not None
                yield by_real[payload], extracted
