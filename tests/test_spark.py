"""The views on Spark: every `sql/` view, transpiled by sqlglot and run on Spark local[2] over the
edge-case test trees with deliberately shuffled input, equals DuckDB's result (rows, floats to
1e-9, list order, map key order), with default and with non-default settings; and the
`--engine spark` door of `wmo-lake sql`. Slow: a JVM starts once for the module."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import shutil
import warnings
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from edge_case_trees import generate_tree

from wmo_lake.cli import cli
from wmo_lake.commands.sql import spark_write_word
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect, view_sources
from wmo_lake.output import to_arrow

pytestmark = [pytest.mark.slow, pytest.mark.spark]

pyspark = pytest.importorskip("pyspark", reason="the spark extra: pip install -e '.[spark]'")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
VIEWS = [name for name, _ in view_sources()]
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


def register_shuffled(spark: Any, lake: Path, seed: int, views: bool = True) -> None:
    """The lake's tables in Spark with every table's rows in a random order (split over the
    session's partitions), so a view that leans on input order gives a different answer; then
    (`views`) the transpiled views over them. A Spark temporary view keeps its SQL text and is
    analysed when queried, so views created once read whichever tables are registered now."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from wmo_lake import spark as lake_spark
    from wmo_lake.store import Store
    from wmo_lake.tables import TABLES

    store = Store(lake)
    manifest = store.read_manifest()
    rng = np.random.default_rng(seed)
    for name, table in TABLES.items():
        files = store.files(manifest, name)
        rows = (
            pa.concat_tables([pq.read_table(f) for f in files], promote_options="permissive")
            if files
            else table.schema.empty_table()
        )
        order = rng.permutation(rows.num_rows)
        if rows.num_rows > 1 and (order == np.arange(rows.num_rows)).all():
            order = order[::-1]  # never the stored order
        rows = rows.take(order)
        spark.createDataFrame(rows).createOrReplaceTempView(name)
    lake_spark.declare_settings(spark)
    if views:
        lake_spark.register_views(spark)


class OnSpark:
    """The session's tables are one tree's, shuffled: registered again only when a test asks
    for another tree (or after something else, the CLI's register, replaced them); the views
    are created once."""

    def __init__(self, spark: Any, lakes: dict[str, Path]) -> None:
        self.spark, self.lakes = spark, lakes
        self.tree: str | None = None
        self.views = False

    def __call__(self, tree: str) -> Path:
        if self.tree != tree:
            register_shuffled(self.spark, self.lakes[tree], seed=len(tree), views=not self.views)
            self.tree, self.views = tree, True
        return self.lakes[tree]

    def forget(self) -> None:
        self.tree = None


@pytest.fixture(scope="module")
def on_spark(spark: Any, lakes: dict[str, Path]) -> OnSpark:
    return OnSpark(spark, lakes)


def view_dependencies() -> dict[str, set[str]]:
    """Each view -> the views its SQL names (comments left out)."""
    sources = dict(view_sources())
    code = {name: re.sub(r"--[^\n]*", "", sql) for name, sql in sources.items()}
    return {
        name: {other for other in sources if other != name and re.search(rf"\b{other}\b", text)}
        for name, text in code.items()
    }


def setting_dependent_views() -> list[str]:
    """The views whose result can change with a setting: those that read a variable or
    (transitively) a view that does. The others' SQL names no setting, so a run with
    non-default settings would repeat their default run."""
    sources = dict(view_sources())
    depends = view_dependencies()
    dependent = {name for name, sql in sources.items() if "getvariable" in sql}
    while True:
        more = {name for name in sources if depends[name] & dependent} - dependent
        if not more:
            return [name for name in VIEWS if name in dependent]
        dependent |= more


def top_views() -> list[str]:
    """The views no other view reads: running them runs every view's SQL underneath."""
    read = set().union(*view_dependencies().values())
    return [name for name in VIEWS if name not in read]


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
        return (
            []
            if math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)
            else [f"{path}: {got!r} != {want!r}"]
        )
    if isinstance(want, dict) and isinstance(got, dict):
        if list(got) != list(want):
            return [f"{path}: keys {list(got)} != {list(want)}"]
        return [d for k in want for d in differences(got[k], want[k], f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return [f"{path}: {len(got)} items != {len(want)}"]
        return [
            d
            for i, (g, w) in enumerate(zip(got, want, strict=True))
            for d in differences(g, w, f"{path}[{i}]")
        ]
    same_kind = all(isinstance(got, kind) == isinstance(want, kind) for kind in (bool, float, str))
    return [] if same_kind and got == want else [f"{path}: {got!r} != {want!r}"]


def duckdb_rows(lake: Path, view: str, settings: dict[str, Any]) -> list[dict[str, Any]]:
    con = connect(lake, settings)
    try:
        return [plain(r) for r in to_arrow(con.sql(f"SELECT * FROM {view}")).to_pylist()]
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


@pytest.mark.parametrize(
    ("tree", "settings", "views"),
    [
        ("generated", {}, VIEWS),
        ("generated", NON_DEFAULT, setting_dependent_views()),
        ("real", {}, top_views()),
    ],
    ids=["generated-defaults", "generated-non-default-settings", "real-defaults"],
)
def test_every_view_on_spark_equals_duckdb(
    spark: Any, on_spark: OnSpark, tree: str, settings: dict[str, Any], views: list[str]
) -> None:
    """Every view over the edge-case tree with default settings; the views a setting can change
    with non-default ones; the real fixtures through the top views (which run all the others)."""
    from wmo_lake import spark as lake_spark

    lake = on_spark(tree)
    # the views were created before these variables were (re)declared: they read them per query
    lake_spark.declare_settings(spark, settings)
    for view in views:
        assert_view_equal(spark, lake, view, settings)


def test_the_view_selections_cover_what_they_claim() -> None:
    dependent = setting_dependent_views()
    assert {"settings", "cells", "rollout_stats", "datums"} <= set(dependent)
    assert "conversations" not in dependent  # reads no setting
    tops = top_views()
    assert "rollout_stats" in tops and "cells" not in tops
    covered = set(tops)
    depends = view_dependencies()
    while more := set().union(*(depends[name] for name in covered)) - covered:
        covered |= more
    assert covered == set(VIEWS)


def test_settings_are_session_variables(spark: Any, on_spark: OnSpark) -> None:
    from wmo_lake import spark as lake_spark

    lake = on_spark("generated")
    lake_spark.declare_settings(spark)
    spark.sql("SET VAR wmo_max_tokens = 1")
    spark.sql("SET VAR wmo_reward_mode = 'positive-binary'")
    changed = {"wmo_max_tokens": 1, "wmo_reward_mode": "positive-binary"}
    got = spark_rows(spark, "rollout_stats")
    assert not differences(got, duckdb_rows(lake, "rollout_stats", changed))
    assert differences(got, duckdb_rows(lake, "rollout_stats", {}))  # the variables took effect
    spark.sql("SET VAR wmo_max_tokens = NULL")  # back to each batch's recorded cap
    got = spark_rows(spark, "rollout_stats")
    assert not differences(
        got, duckdb_rows(lake, "rollout_stats", {"wmo_reward_mode": "positive-binary"})
    )
    spark.sql("SET VAR wmo_max_tokens = 0")  # refused by the settings view, as in DuckDB
    with pytest.raises(Exception, match="wmo_max_tokens must be a whole number >= 1, got 0") as no:
        spark_rows(spark, "rollout_stats")
    # the advice is Spark's statement (DuckDB's RESET VARIABLE is none there) and runs as written
    advice = re.search(r"or (SET VAR wmo_max_tokens = DEFAULT) for the default", str(no.value))
    assert advice, str(no.value)
    spark.sql(advice.group(1))
    assert not differences(
        spark_rows(spark, "rollout_stats"),
        duckdb_rows(lake, "rollout_stats", {"wmo_reward_mode": "positive-binary"}),
    )
    spark.sql("SET VAR wmo_reward_mode = 'bogus'")
    with pytest.raises(Exception, match="SET VAR wmo_reward_mode = DEFAULT for the default"):
        spark_rows(spark, "rollout_stats")
    spark.sql("SET VAR wmo_reward_mode = DEFAULT")


def test_sql_command_on_spark(spark: Any, lakes: dict[str, Path], on_spark: OnSpark) -> None:
    """`wmo-lake sql --engine spark`: register() over the manifest's Parquet files, settings from
    the options, the same rows as the DuckDB engine."""
    on_spark.forget()  # register() replaces the shuffled tables in this session
    lake = lakes["generated"]
    query = "SELECT batch, trials, solve_rate, stop_reason_counts FROM rollout_stats"
    runner = CliRunner()
    args = ["sql", "--lake", str(lake), "--format", "json", "--reward-key", "score", query]
    on_spark = runner.invoke(cli, [*args, "--engine", "spark"])
    assert on_spark.exit_code == 0, on_spark.output
    on_duckdb = runner.invoke(cli, args)
    assert on_duckdb.exit_code == 0, on_duckdb.output
    assert json.loads(on_spark.stdout) == json.loads(on_duckdb.stdout)
    assert len(json.loads(on_spark.stdout)) >= 3
    limited = runner.invoke(cli, [*args, "--engine", "spark", "--limit", "2"])  # (was ignored)
    assert limited.exit_code == 0, limited.output
    assert len(json.loads(limited.stdout)) == 2


def test_spark_draws_the_table_as_duckdb_does_past_1000_rows_and_in_a_narrow_terminal(
    lakes: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The table format's --limit above 1,000 rows and $COLUMNS: Spark's drawing took neither
    (1,000 rows and a footer asking for the --limit given; 85-character lines in 40 columns)."""
    monkeypatch.setenv("COLUMNS", "40")
    tens = ", ".join(f"({n})" for n in range(150))
    units = ", ".join(f"({n})" for n in range(10))
    query = (  # (1,500 rows as both engines spell them: VALUES with column aliases)
        "SELECT t.x * 10 + u.y AS id, 'a rather long text that cannot fit forty columns' AS "
        f"words FROM (VALUES {tens}) AS t(x) CROSS JOIN (VALUES {units}) AS u(y) ORDER BY id"
    )
    args = ["sql", "--lake", str(lakes["generated"]), "--limit", "1500", query]
    drawn = {}
    for engine in ("duckdb", "spark"):
        result = CliRunner().invoke(cli, [*args, "--engine", engine])
        assert result.exit_code == 0, result.output
        drawn[engine] = result.stdout
    assert drawn["spark"] == drawn["duckdb"]
    lines = drawn["spark"].splitlines()
    assert max(len(line) for line in lines) <= 40
    assert "1499" in drawn["spark"] and "first 1000 rows" not in drawn["spark"]


def test_spark_and_duckdb_draw_times_alike_in_any_zone(lakes: dict[str, Path]) -> None:
    """Spark's session reads times in UTC; its result was drawn by a DuckDB in the machine's
    zone, so under TZ=Asia/Tokyo a row said 04:19+09 beside a date and hour Spark took in UTC
    (the 29th, 19). Both engines now draw the same text, in UTC."""
    import os
    import subprocess
    import sys

    query = (
        "SELECT trial_name, started_at, CAST(started_at AS DATE) AS day, hour(started_at) AS h "
        "FROM trials WHERE started_at IS NOT NULL ORDER BY trial_name"
    )
    outputs, said = {}, {}
    for engine in ("duckdb", "spark"):
        args = ["sql", "--lake", str(lakes["real"]), "--format", "csv", query]
        run = subprocess.run(
            [sys.executable, "-m", "wmo_lake.cli", *args, "--engine", engine],
            env={**os.environ, "TZ": "Asia/Tokyo"},
            capture_output=True,
            text=True,
            check=True,
        )
        outputs[engine], said[engine] = run.stdout.splitlines(), run.stderr.splitlines()
    assert len(outputs["duckdb"]) > 2, outputs
    # Spark's start-up warnings (~8 lines: its log4j profile, the host's loopback address, the
    # native Hadoop library, "Setting default log level") are off; the JVM's own line about the
    # incubator module Spark's launcher adds cannot be
    jvm = "WARNING: Using incubator modules: jdk.incubator.vector"
    assert [line for line in said["spark"] if line != jvm] == [] == said["duckdb"]
    import csv

    for _name, started, day, hour in list(csv.reader(outputs["spark"]))[1:]:
        assert started.endswith("+00") and day == started[:10] and int(hour) == int(started[11:13])
    assert list(csv.reader(outputs["spark"])) == list(csv.reader(outputs["duckdb"]))


def test_register_warns_of_a_reward_key_no_trial_has(
    spark: Any, lakes: dict[str, Path], on_spark: OnSpark
) -> None:
    """As `connect()` does: a mistyped reward key reads as a batch of infra failures, so
    register() warns (pointing at its caller) and names the keys that occur; the sql command
    prints it; a key the trials have registers quietly."""
    from wmo_lake import spark as lake_spark
    from wmo_lake.checks import RewardKeyWarning

    on_spark.forget()  # register() replaces the shuffled tables in this session
    lake = lakes["real"]
    with pytest.warns(RewardKeyWarning, match=r"'rewrad' occurs in no trial.*'reward' \(") as got:
        lake_spark.register(spark, lake, {"wmo_reward_key": "rewrad"})
    assert [w.filename for w in got] == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RewardKeyWarning)
        lake_spark.register(spark, lake, {"wmo_reward_key": "reward"})
    args = ["sql", "--lake", str(lake), "--engine", "spark", "--reward-key", "rewrad"]
    result = CliRunner().invoke(cli, [*args, "SELECT count(*) AS n FROM cells"])
    assert result.exit_code == 0, result.output
    assert "warning: reward key 'rewrad' occurs in no trial" in result.stderr


def test_register_again_after_an_ingest_reads_the_new_generation(
    spark: Any, tmp_path: Path, on_spark: OnSpark
) -> None:
    """The README's advice: views registered before an ingest read the old generation's files;
    register() again reads the new one (its views replace the old)."""
    from harbor_shapes import write_job, write_trial

    from wmo_lake import spark as lake_spark

    on_spark.forget()  # register() replaces the shuffled tables in this session
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(write_job(runs / "r/harbor/step-0001/job"), "a__1", reward=1.0)
    ingest([runs], lake, workers=1)
    lake_spark.register(spark, lake)
    query = "SELECT step, trials FROM rollout_stats ORDER BY step"
    assert [tuple(row) for row in spark.sql(query).collect()] == [(1, 1)]
    write_trial(write_job(runs / "r/harbor/step-0002/job"), "b__1", reward=0.0)
    ingest([runs], lake, workers=1)
    lake_spark.register(spark, lake)
    assert [tuple(row) for row in spark.sql(query).collect()] == [(1, 1), (2, 1)]


@pytest.mark.parametrize(
    ("query", "word"),
    [
        ("DROP VIEW cells", "DROP"),
        # read-like openings that write: these replaced a table's files with Spark's
        (
            "WITH t AS (SELECT 1 AS x) INSERT OVERWRITE DIRECTORY '/tmp/x' USING parquet "
            "SELECT * FROM t",
            "INSERT",
        ),
        ("FROM trials INSERT INTO t SELECT *", "INSERT"),
        ("SELECT 1; CACHE TABLE trials", "CACHE"),
    ],
)
def test_sql_command_on_spark_refuses_writes(lakes: dict[str, Path], query: str, word: str) -> None:
    """Refused before Spark starts, wherever the writing word stands (not in a string)."""
    result = CliRunner().invoke(
        cli, ["sql", "--lake", str(lakes["generated"]), "--engine", "spark", query]
    )
    assert result.exit_code == 2
    assert f"only read-only statements run here, and {word} writes" in result.output
    # the word in a string, a quoted name or a comment writes nothing
    assert spark_write_word("SELECT 'drop', \"insert\" FROM t -- delete") is None


def test_sql_command_on_spark_says_a_typo_is_no_write(lakes: dict[str, Path]) -> None:
    """`SELEC 1` was told to change the lake with `wmo-lake ingest`; VALUES, TABLE and a
    parenthesised query, which read, were refused as writes."""
    base = ["sql", "--lake", str(lakes["generated"]), "--engine", "spark"]
    typo = CliRunner().invoke(cli, [*base, "SELEC 1"])
    assert typo.exit_code == 2 and "starts with one of SELECT" in typo.output
    assert "got 'SELEC'" in typo.output and "ingest" not in typo.output
    for query in ("VALUES (1)", "TABLE settings", "(SELECT 1 AS x)"):
        assert CliRunner().invoke(cli, [*base, "--format", "csv", query]).exit_code == 0, query


def test_sql_command_on_spark_exits_2_for_a_mistyped_name_as_duckdb_does(
    lakes: dict[str, Path],
) -> None:
    """A mistyped table, column or function exited 1 on Spark (a failure while reading), where
    the DuckDB engine exits 2 (a usage error); an error while computing the rows stays 1."""
    base = ["sql", "--lake", str(lakes["generated"])]
    mistyped = ["SELECT * FROM trialz", "SELECT nope FROM trials", "SELECT frobnicate(1)"]
    for query in mistyped:
        for engine in ("duckdb", "spark"):
            result = CliRunner().invoke(cli, [*base, "--engine", engine, query])
            assert result.exit_code == 2, (engine, query, result.output)
    result = CliRunner().invoke(cli, [*base, "--engine", "spark", "SELECT CAST('x' AS INT)"])
    assert result.exit_code == 1 and "query failed on Spark: [CAST_INVALID_INPUT]" in result.output


def test_sql_command_on_spark_says_a_lake_it_cannot_read_is_no_usage_error(
    lakes: dict[str, Path], tmp_path: Path
) -> None:
    """A segment whose column changed type outside wmo-lake (rewritten by hand) made Spark's
    union of the table's files fail with an AnalysisException before the query was read: that
    was said as a usage error (exit 2, with the usage line), as if the query were wrong."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    lake = tmp_path / "lake"
    shutil.copytree(lakes["generated"], lake)
    segment = sorted((lake / "tables" / "trials").rglob("*.parquet"))[0]
    table = pq.read_table(segment)
    at = table.schema.get_field_index("rewards")
    strings = pa.array(["{}"] * table.num_rows)
    pq.write_table(table.set_column(at, pa.field("rewards", pa.string()), strings), segment)
    args = ["sql", "--lake", str(lake), "--engine", "spark", "SELECT count(*) FROM trials"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and "Usage:" not in result.output, result.output
    assert f"cannot read the lake at {lake} on Spark: [" in result.output
    # a footer written over in place (its size kept): named as the DuckDB engine names it, with
    # the fix (the JVM's words name the file; py4j's own first line, "An error occurred while
    # calling o58.parquet.", did not, and Spark's gave no fix)
    whole = segment.read_bytes()
    footer = int.from_bytes(whole[-8:-4], "little")
    start = len(whole) - 8 - footer
    segment.write_bytes(whole[:start] + b"\xff" * footer + whole[-8:])
    result = CliRunner().invoke(cli, args)
    rel = segment.relative_to(lake).as_posix()
    assert result.exit_code == 1, result.output
    assert f"holds 1 of its Parquet files that cannot be read ({rel}: " in result.output
    assert "An error occurred while calling" not in result.output


def test_sql_command_on_spark_names_a_page_overwritten_in_place(
    lakes: dict[str, Path], tmp_path: Path
) -> None:
    """Pages of a segment overwritten in place fail only as Spark computes the rows: that was
    said as `query failed on Spark: org.apache.spark.SparkException: Exception thrown in
    awaitResult:`, naming nothing (the file is in the Java trace's causes)."""
    lake = tmp_path / "lake"
    shutil.copytree(lakes["generated"], lake)
    segment = sorted((lake / "tables" / "spans").rglob("*.parquet"))[0]
    data = bytearray(segment.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    for at in range(4, footer // 2):
        data[at] = (at * 37) & 0xFF
    segment.write_bytes(bytes(data))
    args = ["sql", "--lake", str(lake), "--engine", "spark"]
    result = CliRunner().invoke(cli, [*args, "SELECT count(*), sum(hash(*)) FROM spans"])
    rel = segment.relative_to(lake).as_posix()
    assert result.exit_code == 1, result.output
    assert f"holds 1 of its Parquet files that cannot be read ({rel}: " in result.output


def test_sql_command_on_spark_reads_no_other_file(lakes: dict[str, Path], tmp_path: Path) -> None:
    """Spark's SQL on files (`text.`/any/file``) printed any file the user could read, where the
    DuckDB engine is confined to the lake's files."""
    secret = tmp_path / "outside.txt"
    secret.write_text("secret\n")
    args = ["sql", "--lake", str(lakes["generated"]), "--engine", "spark"]
    result = CliRunner().invoke(cli, [*args, f"SELECT * FROM text.`{secret}`"])
    assert result.exit_code == 2 and "secret" not in result.stdout
    assert "reads the lake's tables and views, not other files" in result.output
    # nor after turning SQL on files back on: Spark's own configuration is not the query's
    loosened = f"SET spark.sql.runSQLOnFiles=true; SELECT * FROM text.`{secret}`"
    result = CliRunner().invoke(cli, [*args, loosened])
    assert result.exit_code == 2 and "secret" not in result.stdout
    assert "only SET VAR (a setting: SET VAR wmo_max_tokens = 4096) runs here" in result.output
    for allowed in ("SET VAR wmo_max_tokens = 4096", "set variable wmo_max_tokens = 4096"):
        result = CliRunner().invoke(cli, [*args, f"{allowed}; SELECT 1 AS x"])
        assert result.exit_code == 0, (allowed, result.output)


def test_spark_and_duckdb_label_times_alike_in_parquet(
    lakes: dict[str, Path], tmp_path: Path
) -> None:
    """Spark's Arrow labelled the session's zone by the JVM's name, `Etc/UTC`, where the DuckDB
    engine writes `UTC`: a reader showed the two engines' files in different zones."""
    import pyarrow.parquet as pq

    query = "SELECT trial_name, started_at FROM trials ORDER BY trial_name"
    tables = {}
    for engine in ("duckdb", "spark"):
        out = tmp_path / f"{engine}.parquet"
        args = ["sql", "--lake", str(lakes["real"]), "--engine", engine, "-o", str(out), query]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
        tables[engine] = pq.read_table(out)
    spark, duckdb_side = tables["spark"], tables["duckdb"]
    assert str(spark.schema.field("started_at").type) == "timestamp[us, tz=UTC]"
    assert spark.schema.types == duckdb_side.schema.types  # (Spark's says NOT NULL too)
    assert spark.to_pylist() == duckdb_side.to_pylist() and spark.num_rows > 2


def test_sql_command_on_spark_to_a_missing_dir_is_an_error_line(
    lakes: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "nodir" / "x.csv"
    args = ["sql", "--lake", str(lakes["generated"]), "--engine", "spark", "-o", str(out)]
    result = CliRunner().invoke(cli, [*args, "SELECT 1"])
    assert result.exit_code == 2  # (a usage error, as the DuckDB engine has it)
    assert f"directory {out.parent} does not exist" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def _by_name(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(({k: row[k] for k in sorted(row)} for row in rows), key=sort_key)


def test_spark_reads_each_partitioned_table_as_the_lake_does(spark: Any, tmp_path: Path) -> None:
    """`spark.read.parquet(LAKE/tables/<table>)` (partition discovery: run and step decoded from
    the escaped dir names) and the manifest's files read with the table dir as basePath give the
    lake's own rows, run and step, run labels with `=`, `%`, quotes and non-ASCII included."""
    from partition_trees import NASTY_RUNS, write_partition_tree

    from wmo_lake.store import Store
    from wmo_lake.tables import TABLES

    lake = tmp_path / "lake"
    ingest([write_partition_tree(tmp_path)], lake, workers=1)
    manifest = Store(lake).read_manifest()
    con = connect(lake)
    runs = {row[0] for row in con.execute("SELECT DISTINCT run FROM trials").fetchall()}
    assert runs == {*NASTY_RUNS, None}
    for table in TABLES:
        want = _by_name([plain(r) for r in to_arrow(con.sql(f"SELECT * FROM {table}")).to_pylist()])
        directory = str(lake / "tables" / table)
        frames = {
            "dir": spark.read.parquet(directory),
            "manifest files": spark.read.option("basePath", directory).parquet(
                *(str(lake / rel) for rel in manifest.table_files(table))
            ),
        }
        for how, frame in frames.items():
            got = _by_name([plain(r) for r in frame.toArrow().to_pylist()])
            found = differences(got, want)
            assert not found, f"{table} ({how}): Spark differs from the lake: {found[:5]}"


def test_a_token_total_past_64_bits_reads_as_in_duckdb(spark: Any, tmp_path: Path) -> None:
    """Spark's BIGINT sum raises on overflow (ANSI mode): `episodes` sums exactly and casts, so
    the view runs and gives DuckDB's answer (null for the total past 64 bits)."""
    from harbor_shapes import write_job, write_token_overflow_trial

    from wmo_lake import spark as lake_spark

    job = write_job(tmp_path / "runs" / "job")
    write_token_overflow_trial(job, "huge__1")
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    lake_spark.register(spark, lake)
    want = duckdb_rows(lake, "episodes", {})
    assert [row["prompt_tokens"] for row in want] == [None]
    found = differences(spark_rows(spark, "episodes"), want)
    assert not found, f"episodes: Spark differs from DuckDB: {found[:5]}"


def test_advantages_of_tiny_rewards_are_pythons_to_the_last_bit_on_spark(
    spark: Any, on_spark: OnSpark, tmp_path: Path
) -> None:
    """datum_episodes scales a task group's rewards by the power of two that brings the largest
    into [1, 2). log2 only comes near it: Spark computes it as log(x) / log(2), which floors
    exactly 2^-29 or 2^-31 one binade low (and just below 2^-4 one high), and DuckDB's rounds
    up to -3.0 just below 2^-3 and to -20.0 just below 2^-20. Scaled by half or twice the power
    meant, the exact sum's split moves and some means came out one bit off Python's; the view
    puts the exponent right, so every advantage is reward - sum(rewards) / len(rewards) as
    Python computes it, to the last bit, on both engines."""
    from harbor_shapes import write_job, write_trial

    from wmo_lake import spark as lake_spark

    groups = {
        "tiny": [9.420703536939998e-12, 2.3683039577615215e-15],
        "mixed": [9.311661184581528e-19, 3.0748508264780264e-12, 5e-324],
        "p29": [2.0**-29, 2.0**-29 * 0.3, 1e-20, 2.0**-29 / 3],
        "p31": [2.0**-31, 7e-19, 2.0**-31 * 0.1],
        "below-p4": [math.nextafter(2.0**-4, 0.0), 0.01, 3e-17],
        "thirds": [0.1, 0.2, 0.3],
        "below-p3": [
            0.12499999999999999,
            0.07294059832730818,
            0.08881834635705267,
            8.884342052953525e-30,
        ],
        "below-p20": [9.536743164062499e-07, 1.427005053460002e-34, 9.246548377034858e-07],
    }
    job = write_job(tmp_path / "runs" / "r" / "harbor" / "step-0001" / "job")
    for task, rewards in groups.items():
        for index, reward in enumerate(rewards):
            write_trial(
                job, f"{task}{index}", task_name=task, reward=reward, turns=[([1], [2], [-0.5])]
            )
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    on_spark.forget()  # register() replaces the shuffled tables in this session
    lake_spark.register(spark, lake)
    query = "SELECT trial_name, advantage FROM datum_episodes"
    pythons = {
        f"{task}{index}": reward - sum(rewards) / len(rewards)
        for task, rewards in groups.items()
        for index, reward in enumerate(rewards)
    }
    assert dict(connect(lake).sql(query).fetchall()) == pythons
    assert {row[0]: row[1] for row in spark.sql(query).collect()} == pythons


def test_ranks_are_bigint_on_spark_as_in_duckdb(spark: Any, on_spark: OnSpark) -> None:
    """row_number() is an int in Spark and a BIGINT in DuckDB: the views cast, so a rank column
    has one type whichever engine answers."""
    on_spark("real")
    for view, column in [("cells", "attempt"), ("trial_records", "attempt")]:
        assert spark.table(view).schema[column].dataType.simpleString() == "bigint", view
    assert spark.table("conversations").schema["episode"].dataType.simpleString() == "bigint"


def _older_schema(
    lake: Path, table: str, column: str, files: int | None = None, as_type: Any = None
) -> None:
    """Make `lake`'s first `files` (None: all) files of `table` lack `column` (or hold it as
    `as_type`), as a release before the column was added (or widened) wrote them."""
    import pyarrow.parquet as pq

    from wmo_lake.store import Store

    store = Store(lake)
    for old_file in store.files(store.read_manifest(), table)[:files]:
        rows = pq.read_table(old_file)
        if as_type is None:
            rows = rows.drop_columns([column])
        else:
            index = rows.schema.get_field_index(column)
            rows = rows.set_column(index, column, rows.column(column).cast(as_type))
        pq.write_table(rows, old_file)
    raw = json.loads(store.manifest_path.read_text())
    raw["schemas"][table] = "an-earlier-schema"
    store.manifest_path.write_text(json.dumps(raw))
    (lake / "lake.duckdb").unlink()


def test_a_table_of_files_of_two_schemas_reads_as_in_duckdb(spark: Any, tmp_path: Path) -> None:
    """A "mixed" table (files written before a column was added, beside newer ones): Spark's
    schema merge put the newer column last, so `SELECT *` gave another column order than the
    DuckDB engine; a column no file has was missing, and a view reading it failed to bind; a
    column of another type in one file failed the merge, and in every file kept its type. Each
    reads as the DuckDB lake reads it: the schema's columns in order, null where absent, the
    schema's type."""
    import pyarrow as pa
    from harbor_shapes import write_job, write_trial

    from wmo_lake.spark import register

    runs = tmp_path / "runs"
    write_trial(write_job(runs / "exp" / "harbor" / "step-0001" / "job"), "t__0", reward=1.0)
    mixed, older = tmp_path / "mixed", tmp_path / "older"
    ingest([runs], mixed, workers=1)
    ingest([runs], older, workers=1)
    _older_schema(mixed, "trials", "result_bytes")
    write_trial(write_job(runs / "exp" / "harbor" / "step-0002" / "job"), "t__0", reward=0.0)
    ingest([runs], mixed, workers=1)  # (the new step's file has every column)
    _older_schema(older, "trials", "agent_config")  # (no file has it)
    narrower, narrow = tmp_path / "narrower", tmp_path / "narrow"
    ingest([runs], narrower, workers=1)
    ingest([runs], narrow, workers=1)
    _older_schema(narrower, "trials", "max_turns", files=1, as_type=pa.int32())
    _older_schema(narrow, "trials", "max_turns", as_type=pa.int32())
    for lake in (mixed, older, narrower, narrow):
        register(spark, lake)
        for query in ("SELECT * FROM trials", "SELECT * FROM cells", "SELECT * FROM rollout_stats"):
            con = connect(lake)
            want = to_arrow(con.sql(query))
            con.close()
            got = spark.sql(query).toArrow()
            assert got.column_names == want.column_names, (lake.name, query)
            assert got.schema.field("step").type == want.schema.field("step").type
            if query.endswith("trials"):
                assert got.schema.field("max_turns").type == pa.int64(), lake.name
            found = differences(
                sorted([plain(r) for r in got.to_pylist()], key=sort_key),
                sorted([plain(r) for r in want.to_pylist()], key=sort_key),
            )
            assert not found, f"{lake.name}: {query}: {found[:5]}"
