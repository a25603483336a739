"""Ingest as a Spark job (`wmo-lake ingest --engine spark`, `wmo_lake.spark.ingest`): the same rows
as the single-machine ingest on the edge-case trees and the real fixtures, the segments written by
the Spark tasks themselves, and the commit's atomicity: a failed Spark task or a Ctrl-C leaves the
previous generation. Slow: it shares the session's one JVM (tests/conftest.py `spark`)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from edge_case_trees import generate_tree

from wmo_lake.checks import stale_rules_warning
from wmo_lake.cli import cli
from wmo_lake.discover import TrialTask
from wmo_lake.ingest import ingest
from wmo_lake.spark import ingest as spark_ingest
from wmo_lake.spark_ingest import job_groups
from wmo_lake.store import DEFAULT_PARTITION, Store
from wmo_lake.tables import TABLES

pytestmark = [pytest.mark.slow, pytest.mark.spark]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def table_rows(lake: Path) -> dict[str, list[str]]:
    """Every table's rows as sorted JSON lines (the comparison is order-insensitive)."""
    store = Store(lake)
    manifest = store.read_manifest()
    rows: dict[str, list[str]] = {}
    for name, table in TABLES.items():
        files = store.files(manifest, name)
        data = (
            pa.concat_tables([pq.read_table(f) for f in files], promote_options="permissive")
            if files
            else table.schema.empty_table()
        )
        rows[name] = sorted(json.dumps(r, sort_keys=True, default=repr) for r in data.to_pylist())
    return rows


def spark_segments(lake: Path) -> list[str]:
    """The live segments Spark tasks wrote (named `<generation>-<token>-s<task>`)."""
    manifest = Store(lake).read_manifest()
    return [f for f in manifest.live_files() if "-s" in Path(f).name]


def partitions(lake: Path) -> set[tuple[str, str]]:
    """(table, run=<run>/step=<step>) of every live segment."""
    manifest = Store(lake).read_manifest()
    return {
        (table, partition)
        for table, by_partition in manifest.tables.items()
        for partition, files in by_partition.items()
        if files
    }


def summary_counts(summary: Any) -> dict[str, Any]:
    kept = ("trials_new", "trials_replaced", "trials_unchanged", "unreadable_trials", "problems")
    return {name: getattr(summary, name) for name in kept} | {"jobs": summary.jobs}


@pytest.mark.parametrize("tree", ["edge-cases", "real"])
def test_spark_ingest_writes_the_same_rows(spark: Any, tmp_path: Path, tree: str) -> None:
    if tree == "real":
        root = tmp_path / "real"
        shutil.copytree(FIXTURES / "harbor", root)
    else:
        root = generate_tree(tmp_path / "runs", 11, trials=40)
    local = ingest([root], tmp_path / "local", workers=1)
    on_spark = spark_ingest(spark, [root], tmp_path / "spark")
    assert on_spark.committed
    assert summary_counts(on_spark) == summary_counts(local)
    want, got = table_rows(tmp_path / "local"), table_rows(tmp_path / "spark")
    for name in TABLES:
        assert got[name] == want[name], f"{name}: Spark ingest rows differ from the local ingest"
    assert sum(len(rows) for rows in got.values()) > 50
    # the rows came from the Spark tasks' own segments, not through the driver, written into the
    # Hive partitions (tables/<table>/run=<run>/step=<step>/) the local ingest writes
    written = spark_segments(tmp_path / "spark")
    assert {Path(f).parts[1] for f in written} >= {"trials", "spans", "stop_reasons"}
    for segment in written:
        run, step = Path(segment).parts[2:4]
        assert run.startswith("run=") and step.startswith("step="), segment
    assert partitions(tmp_path / "spark") == partitions(tmp_path / "local")
    # the manifest records the extraction rules the Spark tasks read by, as a local ingest's
    # does: the lake is not said to hold rows an older wmo-lake read
    spark_manifest = Store(tmp_path / "spark").read_manifest()
    assert spark_manifest.extractions == Store(tmp_path / "local").read_manifest().extractions
    assert stale_rules_warning(spark_manifest, "spark") is None
    if tree == "edge-cases":  # a tree of runs and steps: its rows spread over several
        stepped = {p for _, p in partitions(tmp_path / "spark") if DEFAULT_PARTITION not in p}
        assert len(stepped) >= 2, stepped


def test_spark_ingest_replaces_and_skips_like_local(spark: Any, tmp_path: Path) -> None:
    """Re-ingesting on Spark: an unchanged tree commits nothing, a changed trial replaces its
    rows (on both engines the same)."""
    root = generate_tree(tmp_path / "runs", 3, trials=36)
    spark_ingest(spark, [root], tmp_path / "spark")
    ingest([root], tmp_path / "local", workers=1)
    again = spark_ingest(spark, [root], tmp_path / "spark")
    assert not again.committed and again.trials_unchanged > 0 and again.trials_new == 0
    result = next(
        path
        for path in sorted(root.rglob("result.json"))
        if (path.parent / "agent").is_dir() and '"verifier_result"' in path.read_text()
    )
    result.write_text(result.read_text() + "\n")  # a changed file: the trial is read again
    changed = spark_ingest(spark, [root], tmp_path / "spark")
    local = ingest([root], tmp_path / "local", workers=1)
    assert changed.committed and changed.trials_replaced + changed.trials_new >= 1
    assert summary_counts(changed) == summary_counts(local)
    assert table_rows(tmp_path / "spark") == table_rows(tmp_path / "local")


def test_spark_ingest_command(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "real"
    shutil.copytree(FIXTURES / "harbor", root)
    lake = tmp_path / "lake"
    runner = CliRunner()
    args = ["ingest", str(root), "--lake", str(lake), "--engine", "spark", "--json"]
    result = runner.invoke(cli, [*args, "--master", "local[2]"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["committed"] and summary["trials_new"] > 0
    assert spark_segments(lake)
    query = runner.invoke(cli, ["sql", "--lake", str(lake), "SELECT count(*) FROM trials"])
    assert str(summary["trials_new"]) in query.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--master", "local[2]"], "--master is for --engine spark"),
        (["--engine", "spark", "--workers", "2"], "--workers sets local reader processes"),
    ],
)
def test_spark_ingest_usage_errors(tmp_path: Path, extra: list[str], message: str) -> None:
    result = CliRunner().invoke(
        cli, ["ingest", str(FIXTURES / "harbor"), "--lake", str(tmp_path / "lake"), *extra]
    )
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "lake").exists()


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from wmo_lake.spark import local_session
    from wmo_lake.store import LakeError

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no java on it
    with pytest.raises(LakeError, match="needs Java 17"):
        local_session()


def test_missing_pyspark_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark.sql", None)  # import pyspark.sql fails
    lake = tmp_path / "lake"
    result = CliRunner().invoke(
        cli, ["ingest", str(FIXTURES / "harbor"), "--lake", str(lake), "--engine", "spark"]
    )
    assert result.exit_code == 1
    assert "pip install 'wmo-lake[spark]'" in result.output
    assert not lake.exists()


def changed_tree(tmp_path: Path) -> tuple[Path, Path, dict[str, list[str]], int]:
    """A lake ingested once (generation 1), then one trial of its tree changed: (tree, lake, the
    lake's rows, its generation)."""
    root = tmp_path / "real"
    shutil.copytree(FIXTURES / "harbor", root)
    lake = tmp_path / "lake"
    ingest([root], lake, workers=1)
    for result in root.rglob("result.json"):  # every trial must be read again
        result.write_text(result.read_text() + "\n")
    return root, lake, table_rows(lake), Store(lake).read_manifest().generation


def assert_previous_generation(lake: Path, rows: dict[str, list[str]], generation: int) -> None:
    assert Store(lake).read_manifest().generation == generation
    assert table_rows(lake) == rows
    assert not spark_segments(lake)


def test_failed_spark_task_leaves_the_previous_generation(spark: Any, tmp_path: Path) -> None:
    root, lake, rows, generation = changed_tree(tmp_path)
    environment = spark.sparkContext.environment  # the Python workers' environment
    environment["WMO_LAKE_CRASH_AT"] = "spark_task"  # killed once its segments are written
    try:
        with pytest.raises(Exception, match=r"(?i)python worker|crash|exited"):
            spark_ingest(spark, [root], lake)
    finally:
        del environment["WMO_LAKE_CRASH_AT"]
    assert_previous_generation(lake, rows, generation)
    # The failed ingest swept what its tasks wrote; a task Spark had not yet stopped may write
    # one after that, which the next ingest (the lock is free) removes as it commits.
    orphans = [p for p in (lake / "tables").rglob("*-s*.parquet")]
    assert spark_ingest(spark, [root], lake).generation == generation + 1
    assert not any(p.exists() for p in orphans)


def test_ctrl_c_during_the_spark_job_leaves_the_previous_generation(
    spark: Any, tmp_path: Path
) -> None:
    """SIGINT while a Spark task is reading: pyspark's handler cancels the job and raises
    KeyboardInterrupt; the ingest aborts before its commit. The task is held at its first dir by
    the pause point (WMO_LAKE_PAUSE_FIFO, a FIFO): opening its write end succeeds only once a
    task waits on it."""
    root, lake, rows, generation = changed_tree(tmp_path)
    fifo_path = tmp_path / "pause.fifo"
    os.mkfifo(fifo_path)
    environment = spark.sparkContext.environment  # the Python workers' environment
    interrupted = threading.Event()

    def interrupt_once_a_task_reads() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                fifo = os.open(fifo_path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as error:
                if error.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
                time.sleep(0.05)
                continue
            os.kill(os.getpid(), signal.SIGINT)
            interrupted.set()
            time.sleep(0.5)
            fifo_path.unlink()  # no task waits again
            os.close(fifo)  # let the waiting ones go on (their job is cancelled anyway)
            return

    watcher = threading.Thread(target=interrupt_once_a_task_reads, daemon=True)
    watcher.start()
    environment["WMO_LAKE_PAUSE_FIFO"] = str(fifo_path)
    try:
        with pytest.raises(KeyboardInterrupt):
            spark_ingest(spark, [root], lake)
    finally:
        del environment["WMO_LAKE_PAUSE_FIFO"]
    watcher.join(timeout=10)
    assert interrupted.is_set()
    assert_previous_generation(lake, rows, generation)
    assert spark_ingest(spark, [root], lake).generation == generation + 1


def test_job_groups_split_by_job_dir() -> None:
    def task(job: str, i: int) -> TrialTask:
        return TrialTask(f"/r/{job}/{i}", f"/r/{job}/{i}", job, None, None, f"job:{job}", False)

    tasks = [task(job, i) for job in ("a", "b") for i in range(5)] + [task("c", 0)]
    groups = job_groups(tasks, parallelism=2)
    assert [[t.job_key for t in g] for g in groups] == [
        ["job:a"] * 5,
        ["job:b"] * 5,
        ["job:c"],
    ]
    split = job_groups(tasks[:5], parallelism=4)
    assert sorted(len(g) for g in split) == [1, 1, 1, 2]
    assert sorted(t.real for g in split for t in g) == sorted(t.real for t in tasks[:5])
    assert job_groups([], parallelism=4) == []


def test_local_tasks_run_this_interpreter(spark: Any, tmp_path: Path) -> None:
    """Whatever Python the context was started with (PYSPARK_PYTHON, or the `python3` on PATH, a
    minor version apart from this one in CI), local tasks run this interpreter, where wmo_lake is
    installed: Spark refuses workers of another minor version."""
    context = spark.sparkContext
    started_with = context.pythonExec
    context.pythonExec = str(tmp_path / "no-such-python")
    try:
        summary = spark_ingest(spark, [FIXTURES / "harbor"], tmp_path / "lake")
    finally:
        context.pythonExec = started_with
    assert summary.committed and summary.trials_new == 13
