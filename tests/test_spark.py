"""The views on Spark: every `sql/` view, transpiled by sqlglot and run on Spark local[2] over the
edge-case test trees with deliberately shuffled input, equals DuckDB's result (rows, floats to
1e-9, list order, map key order), with default and with non-default settings; and the
`--engine spark` door of `wmo-lake sql`. Slow: a JVM starts once for the module."""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from treegen import generate_tree

from wmo_lake.cli import main
from wmo_lake.ingest import ingest
from wmo_lake.lake import SETTINGS, connect, view_sources

pytestmark = [pytest.mark.slow, pytest.mark.spark]

pyspark = pytest.importorskip("pyspark", reason="the spark extra: pip install -e '.[spark]'")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
PENDING = {n for n in os.environ.get("WMO_SPARK_PENDING", "").split(",") if n}
VIEWS = [name for name, _ in view_sources() if name not in PENDING]
ORDERED_VIEWS = {"rollout_stats"}  # views whose row order is part of their definition
NON_DEFAULT = {
    "wmo_reward_key": "score",
    "wmo_reward_mode": "positive-binary",
    "wmo_max_turns": 2,
    "wmo_max_tokens": 3,
    "wmo_context_budget": 40,
    "wmo_max_datum_tokens": 24,
}


@pytest.fixture(scope="module")
def spark() -> Any:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("wmo-lake-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "3")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("OFF")
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def lakes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The seeded edge-case tree (every variant of every rule) and the real harbor fixtures."""
    base = tmp_path_factory.mktemp("spark")
    generated = generate_tree(base / "runs", 7, trials=40)
    shutil.copytree(FIXTURES / "harbor", base / "real")
    made = {}
    for name, root in [("generated", generated), ("real", base / "real")]:
        ingest([root], base / f"lake-{name}", workers=1)
        made[name] = base / f"lake-{name}"
    return made


def shuffled_register(spark: Any, lake: Path, settings: dict[str, Any], seed: int) -> None:
    """register(), but every table's rows in a random order across several partitions, so a view
    that leans on input order gives a different answer."""
    from pyspark.sql import functions as F

    from wmo_lake import spark as lake_spark

    for name, frame in lake_spark.table_frames(spark, lake).items():
        frame.orderBy(F.rand(seed)).repartition(3).createOrReplaceTempView(name)
    lake_spark.declare_settings(spark, settings)
    lake_spark.register_views(spark, set(VIEWS))


def plain(value: Any) -> Any:
    """One comparable Python form for both engines' Arrow output."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]  # Arrow maps arrive as ordered (key, value) lists
    return value


def sort_key(row: dict[str, Any]) -> str:
    def rounded(value: Any) -> Any:
        if isinstance(value, float):
            return None if math.isnan(value) else round(value, 6)
        if isinstance(value, dict):
            return {k: rounded(v) for k, v in value.items()}
        if isinstance(value, list):
            return [rounded(v) for v in value]
        return value

    return json.dumps(rounded(row), sort_keys=True, default=str)


def differences(got: Any, want: Any, path: str = "") -> list[str]:
    if isinstance(want, float) and isinstance(got, float):
        if math.isnan(want) and math.isnan(got):
            return []
        return [] if math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9) else [f"{path}: {got!r} != {want!r}"]
    if isinstance(want, dict) and isinstance(got, dict):
        if list(got) != list(want):
            return [f"{path}: keys {list(got)} != {list(want)}"]
        return [d for k in want for d in differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items != {len(want)}"]
        return [d for i, (g, w) in enumerate(zip(got, want, strict=True)) for d in differences(g, w, f"{path}[{i}]")]
    return [] if got == want and type(got) is type(want) or got == want and not isinstance(got, bool | float) else [f"{path}: {got!r} != {want!r}"]


def duckdb_rows(lake: Path, view: str, settings: dict[str, Any]) -> list[dict[str, Any]]:
    con = connect(lake, settings)
    try:
        return [plain(r) for r in con.sql(f"SELECT * FROM {view}").fetch_arrow_table().to_pylist()]
    finally:
        con.close()


def spark_rows(spark: Any, view: str) -> list[dict[str, Any]]:
    return [plain(r) for r in spark.sql(f"SELECT * FROM {view}").toArrow().to_pylist()]


def assert_view_equal(spark: Any, lake: Path, view: str, settings: dict[str, Any]) -> None:
    want = duckdb_rows(lake, view, settings)
    got = spark_rows(spark, view)
    if view not in ORDERED_VIEWS:
        want, got = sorted(want, key=sort_key), sorted(got, key=sort_key)
    found = differences(got, want)
    assert not found, f"{view}: Spark differs from DuckDB: {found[:5]}"


@pytest.mark.parametrize("settings", [{}, NON_DEFAULT], ids=["defaults", "non-default"])
@pytest.mark.parametrize("tree", ["generated", "real"])
def test_every_view_on_spark_equals_duckdb(
    spark: Any, lakes: dict[str, Path], tree: str, settings: dict[str, Any]
) -> None:
    shuffled_register(spark, lakes[tree], settings, seed=len(tree) + len(settings))
    for view in VIEWS:
        assert_view_equal(spark, lakes[tree], view, settings)
