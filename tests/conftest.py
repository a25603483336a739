"""Shared fixtures: paths to the bundled real harbor output, a lake of two runs, the Spark
session."""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
# Started in the background by a non-interactive shell (`make test &` in a script, `nohup`), the
# tests inherit SIGINT ignored, and Python then installs no KeyboardInterrupt handler: the Ctrl-C
# tests would send signals nothing takes (their subprocesses inherit the ignoring too). They are
# about the Ctrl-C a user sends, so the default handler is put back.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# The skeleton lake.duckdb cache (wmo_lake.lake.cached_skeleton): one for the session, not the
# user's ~/.cache (subprocesses inherit it), removed when the session ends. A test about the
# cache sets its own.
if "WMO_LAKE_CACHE_DIR" not in os.environ:
    os.environ["WMO_LAKE_CACHE_DIR"] = tempfile.mkdtemp(prefix="wmo-lake-test-cache-")
    atexit.register(shutil.rmtree, os.environ["WMO_LAKE_CACHE_DIR"], ignore_errors=True)


def ingested_rows(tmp_path: Path, *queries: str) -> list[list[tuple[Any, ...]]]:
    """Ingest `tmp_path/runs` into `tmp_path/lake` (one reader) and give each query's rows."""
    from wmo_lake.ingest import ingest
    from wmo_lake.lake import connect

    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    try:
        return [con.sql(query).fetchall() for query in queries]
    finally:
        con.close()


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def two_runs_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lake of two 6-step training runs (tests/run_shapes.py): exp-a learns, has a regression,
    a newly solved task, an unreadable trial and a step of only unreadable trials; exp-b is flat."""
    from run_shapes import write_two_runs

    from wmo_lake.ingest import ingest

    root = tmp_path_factory.mktemp("two-runs")
    write_two_runs(root / "runs")
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"


@pytest.fixture(scope="session")
def spark() -> Any:
    """One SparkSession (one JVM) for every Spark test of the session: local[2], UI off, two
    shuffle partitions (the test tables are tiny; the default 200 costs seconds a query), no
    adaptive re-planning, no code generation."""
    if os.environ.get("CI"):  # CI installs the extra (make setup): a skip there would hide it
        import pyspark
        import pyspark.sql
    else:
        pyspark = pytest.importorskip("pyspark", reason="the extra: pip install -e '.[spark]'")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark ingest tasks import wmo_lake
    session = (
        pyspark.sql.SparkSession.builder.master("local[2]")
        .appName("wmo-lake-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        # Tiny inputs: re-planning (AQE) and compiling Java for every query cost more than they
        # save; the interpreted expressions compute the same values (Spark tests both paths).
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    yield session
    session.stop()
