"""The lake on Spark: its tables and views registered in a SparkSession.

    from pyspark.sql import SparkSession
    from wmo_lake.spark import register
    spark = SparkSession.builder.master("local[*]").getOrCreate()    # or the cluster's session
    register(spark, "lake", {"wmo_reward_key": "score"})
    spark.sql("SELECT * FROM rollout_stats").show()

Tables are temporary views over the manifest's Parquet files; the `sql/` views are the same text
DuckDB runs, transpiled by sqlglot (the views are written in the portable subset that
`wmo_lake.portable` lints). The one rewrite of our own: `getvariable('x')` becomes the Spark
session variable `session.x`, declared here once per setting, so `SET VAR x = ...` in Spark SQL
does what `SET VARIABLE x = ...` does in DuckDB. pyspark and sqlglot come with the extra
`wmo-lake[spark]`.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmo_lake.lake import BadSettingError, view_sources
from wmo_lake.settings import SETTINGS, SettingError, variables
from wmo_lake.store import LakeError, Store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# The Spark type each setting's session variable is declared with (NULL = the default), from the
# registry's SQL type.
SPARK_TYPES = {"VARCHAR": "STRING", "BIGINT": "BIGINT"}
SETTING_TYPES: dict[str, str] = {s.variable: SPARK_TYPES[s.sql_type] for s in SETTINGS.values()}

MISSING_EXTRA = (
    "the Spark engine needs the optional extra: pip install 'wmo-lake[spark]' "
    "(pyspark, sqlglot; Java 17 on PATH)"
)


MISSING_JAVA = (
    "the Spark engine needs Java 17: put `java` on PATH or set JAVA_HOME "
    "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
)


SPARK_RESET = re.compile(r"RESET VARIABLE (\w+)")


def transpile(view_sql: str) -> str:
    """One `sql/*.sql` view (DuckDB) as Spark SQL: a temporary view, settings as session
    variables."""
    try:
        import sqlglot
        from sqlglot import exp
    except ImportError as error:  # pragma: no cover - the extra is installed in CI
        raise LakeError(MISSING_EXTRA) from error

    tree = sqlglot.parse_one(view_sql, read="duckdb")

    def session_variable(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous) and node.name.lower() == "getvariable":
            (name,) = node.expressions
            if not isinstance(name, exp.Literal) or name.name not in SETTING_TYPES:
                raise LakeError(f"getvariable({name.sql()}) names no setting of wmo_lake.lake")
            return exp.column(name.name, table="session")
        return node

    def spark_function(node: exp.Expression) -> exp.Expression:
        node = session_variable(node)
        if isinstance(node, exp.Anonymous) and node.name.lower() == "error":
            return exp.Anonymous(this="raise_error", expressions=node.expressions)
        return node

    def spark_advice(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Literal) and node.is_string and "RESET VARIABLE" in node.name:
            # an error's advice, said as Spark takes it (it has no RESET VARIABLE)
            return exp.Literal.string(SPARK_RESET.sub(r"SET VAR \1 = DEFAULT", node.name))
        return node

    # (two passes: a transform does not look inside a node it replaced)
    tree = tree.transform(spark_advice).transform(spark_function)
    if isinstance(tree, exp.Create):
        tree.set("properties", exp.Properties(expressions=[exp.TemporaryProperty()]))
    return tree.sql(dialect="spark", comments=False)


def spark_views() -> list[tuple[str, str]]:
    """(view name, Spark SQL) for every view, in dependency order."""
    return [(name, transpile(sql)) for name, sql in view_sources()]


def declare_settings(spark: SparkSession, settings: dict[str, Any] | None = None) -> None:
    """The settings as Spark sees them: the one-row `setting_defaults` the `settings` view reads
    (the registry's defaults), and one session variable per setting, NULL unless `settings`
    ({variable or name: value}) sets it."""
    import pyarrow as pa

    try:
        values = variables(settings or {})
    except SettingError as error:
        raise BadSettingError(str(error)) from None
    arrow_types = {"VARCHAR": pa.string(), "BIGINT": pa.int64()}
    defaults = pa.table(
        {s.name: pa.array([s.default], arrow_types[s.sql_type]) for s in SETTINGS.values()}
    )
    spark.createDataFrame(defaults).createOrReplaceTempView("setting_defaults")
    for variable, spark_type in SETTING_TYPES.items():
        spark.sql(f"DECLARE OR REPLACE VARIABLE {variable} {spark_type} DEFAULT NULL")
        if variable in values:
            spark.sql(f"SET VAR {variable} = :value", args={"value": values[variable]})


def table_frames(spark: SparkSession, lake: Path | str) -> dict[str, DataFrame]:
    """Each table of the lake as a DataFrame over the manifest's live files."""
    from wmo_lake.lake import _require
    from wmo_lake.tables import TABLES

    store = Store(lake)
    manifest = _require(store)
    frames: dict[str, DataFrame] = {}
    for name, table in TABLES.items():
        files = [str(p.resolve()) for p in store.files(manifest, name)]
        empty = spark.createDataFrame(table.schema.empty_table())
        if not files:  # a lake written before this table existed: empty, with its schema
            frames[name] = empty
            continue
        frame = _read_files(spark, files)
        if _shape(frame) != _shape(empty):
            # Files of another schema (a "mixed" table): Spark's merge put a column the first
            # file lacks last, one no file has was missing, and an older type stayed. As the
            # DuckDB lake reads them: this schema's columns in its order (null where no file has
            # one, widened as a union widens), then the others.
            frame = empty.unionByName(frame, allowMissingColumns=True)
        frames[name] = frame
    return frames


def _shape(frame: DataFrame) -> list[tuple[str, str]]:
    """A frame's column names and types (not their nullability, which files do not keep)."""
    return [(field.name, field.dataType.simpleString()) for field in frame.schema.fields]


def _read_files(spark: SparkSession, files: list[str]) -> DataFrame:
    """The files as one frame, their schemas merged; files whose types differ (which Spark's
    merge refuses) are read a schema at a time and unioned by name, widening as DuckDB does."""
    try:
        return spark.read.option("mergeSchema", "true").parquet(*files)
    except Exception as error:  # (pyspark's own exception family, raised from the JVM)
        if "CANNOT_MERGE" not in str(error):
            raise
    import pyarrow.parquet as pq

    by_schema: dict[str, list[str]] = {}
    for path in files:
        by_schema.setdefault(str(pq.read_schema(path).remove_metadata()), []).append(path)
    frames = [spark.read.parquet(*group) for group in by_schema.values()]
    merged = frames[0]
    for frame in frames[1:]:
        merged = merged.unionByName(frame, allowMissingColumns=True)
    return merged


def raised_by_spark(error: BaseException) -> bool:
    """Whether `error` is pyspark's or py4j's (a failed Spark job, a query Spark refused): their
    exceptions share no base class a caller could catch."""
    return type(error).__module__.startswith(("pyspark", "py4j"))


def register_views(spark: SparkSession) -> None:
    """Create the `sql/` views (transpiled) over the tables and settings already registered in
    `spark` (register_tables, declare_settings)."""
    for name, sql in spark_views():
        try:
            spark.sql(sql)
        except Exception as error:  # pyspark raises its own AnalysisException family
            first_line = str(error).strip().splitlines()[0]
            raise LakeError(f"view {name} does not run on Spark: {first_line}") from error


def register(
    spark: SparkSession, lake: Path | str, settings: dict[str, Any] | None = None
) -> list[str]:
    """Register the lake's tables and views as temporary views in `spark`; return their names.

    Settings are Spark session variables afterwards: `spark.sql("SET VAR wmo_max_tokens = 4096")`.
    A reward key that no trial of the lake has is a `RewardKeyWarning`, as with `connect()`.
    The views read the lake's current generation: call it again after an ingest (they replace).
    """
    frames = table_frames(spark, lake)
    for name, frame in frames.items():
        frame.createOrReplaceTempView(name)
    declare_settings(spark, settings)
    register_views(spark)
    warn_on_unused_reward_key(lake, settings)
    return [*frames, *(name for name, _ in view_sources())]


def warn_on_unused_reward_key(lake: Path | str, settings: dict[str, Any] | None) -> None:
    """`connect()`'s reward key check, asked of DuckDB over the same files (~10 ms; it stops at
    the first trial that has the key): a typo in a Spark session reads as a batch of infra
    failures just the same."""
    import duckdb

    from wmo_lake import checks
    from wmo_lake.lake import connect

    # (the lake's damage, a lake.duckdb changed in place among it, said as the DuckDB engine does)
    with Store(lake).saying_damage(duckdb.Error), connect(lake, settings, check=False) as con:
        checks.warn_on_unused_reward_key(con)


DEFAULT_DRIVER_MEMORY = "4g"
DRIVER_MEMORY_ENV = "WMO_LAKE_SPARK_DRIVER_MEMORY"


def session_settings(master: str | None = None) -> tuple[str | None, dict[str, str]]:
    """The master `local_session` sets (`master`, else SPARK_MASTER, else none when spark-submit
    names one, else local[*]) and the settings it adds: a local session's tasks run in the
    driver's JVM, and Spark's 1g default cannot broadcast the join sides of a million-trial
    lake (rollout_stats fails there), so a local driver gets WMO_LAKE_SPARK_DRIVER_MEMORY
    (default 4g), and logs only Spark's errors (LOG_CONFIG) unless PYSPARK_SUBMIT_ARGS sets
    the driver's Java options. A cluster's own settings are left alone."""
    import os

    submitted = "spark.master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    master = master or os.environ.get("SPARK_MASTER") or (None if submitted else "local[*]")
    config: dict[str, str] = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(max(2, os.cpu_count() or 2)),
        "spark.sql.session.timeZone": "UTC",
    }
    if master is not None and master.startswith("local"):
        config["spark.driver.memory"] = os.environ.get(DRIVER_MEMORY_ENV) or DEFAULT_DRIVER_MEMORY
        # Spark's start-up warnings off (errors still print): unless Java options are set
        if "spark.driver.extraJavaOptions" not in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
            config["spark.driver.extraJavaOptions"] = f'-Dlog4j2.configurationFile="{LOG_CONFIG}"'
    return master, config


# Spark's logging in a local session: errors only (see the file)
LOG_CONFIG = Path(__file__).resolve().with_name("spark_log4j2.properties")


def local_session(master: str | None = None) -> SparkSession:
    """A SparkSession for the CLI's `--engine spark`: on `master` when given (`--master`), else
    on the one the environment names (spark-submit, SPARK_MASTER), else `local[*]`."""
    import os
    import shutil
    import sys

    try:
        from pyspark.sql import SparkSession
    except ImportError as error:
        raise LakeError(MISSING_EXTRA) from error
    java_home = os.environ.get("JAVA_HOME")
    if java_home and not Path(java_home, "bin", "java").exists():  # (Spark takes it over PATH's)
        raise LakeError(
            f"JAVA_HOME={java_home} has no bin/java: point it at a Java 17 install, or unset it "
            "to use the java on PATH"
        )
    if not java_home and not shutil.which("java"):
        raise LakeError(MISSING_JAVA)
    # Python tasks (the Spark ingest) run in this interpreter, where wmo_lake is installed, not
    # in whatever `python3` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("wmo-lake")
    master, config = session_settings(master)
    if master is not None:
        builder = builder.master(master)
    for key, value in config.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)  # errors reach the CLI
    root = logging.getLogger()
    if _py4j_at_the_root not in root.filters:
        root.addFilter(_py4j_at_the_root)
    return spark


def _py4j_at_the_root(record: logging.LogRecord) -> bool:
    """False for what py4j logs at the root logger: each JVM call a Ctrl-C or SIGTERM cuts short,
    as an ERROR with its traceback, before the command's own one line (py4j's other messages
    go to its named loggers)."""
    return "/py4j/" not in record.pathname.replace("\\", "/")


def ingest(spark: SparkSession, paths: list[Path | str], lake: Path | str, **options: Any) -> Any:
    """`wmo_lake.ingest.ingest` with the changed dirs read as Spark tasks on `spark` (see
    `wmo_lake/spark_ingest.py`); the same options (sink_roots, prune, dry_run, progress) and the
    same IngestSummary.

        summary = ingest(local_session("local[*]"), ["runs/"], "lake")
    """
    from wmo_lake.ingest import ingest as run_ingest

    return run_ingest([Path(p) for p in paths], Path(lake), spark=spark, **options)
