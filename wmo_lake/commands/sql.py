"""`wmo-lake sql`: read-only SQL over the lake's tables and views."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
import duckdb

from wmo_lake.commands.options import (
    datum_options,
    fail,
    lake_option,
    output_options,
    setting_options,
    settings_from,
)
from wmo_lake.lake import connect
from wmo_lake.output import render
from wmo_lake.store import LakeError

READ_ONLY_STATEMENTS = {
    duckdb.StatementType.SELECT,
    duckdb.StatementType.EXPLAIN,
    duckdb.StatementType.SET,
}


SPARK_READ_ONLY = ("SELECT", "WITH", "SET", "EXPLAIN", "DESCRIBE", "DESC", "SHOW", "FROM")


@click.command()
@click.argument("query")
@lake_option
@output_options
@setting_options
@datum_options
@click.option(
    "--engine",
    type=click.Choice(["duckdb", "spark"]),
    default="duckdb",
    show_default=True,
    help="spark: register the tables and the transpiled views in a SparkSession (the cluster "
    "spark-submit or SPARK_MASTER names, else local[*]) and run QUERY there as Spark SQL. "
    "Needs the extra wmo-lake[spark] and Java 17.",
)
def sql(query: str, lake: Path, fmt: str, output: Path | None, engine: str, **options: Any) -> None:
    """Run read-only SQL over the lake's tables and views. QUERY '-' reads it from stdin.

    Tables: jobs, trials, spans, stop_reasons, tests, trajectories, steps, tool_calls,
    problems. Views: spans_full (full prompts back), cells, trial_records, rollout_stats,
    datums, datum_stats, episodes, conversations, and more (see the README). Several
    statements may be given; the last one's result is printed. Settings are DuckDB
    variables, so plain SQL (here, or in any DuckDB client on lake/lake.duckdb) sets them too:

    \b
      SET VARIABLE wmo_reward_key = 'score';            -- --reward-key
      SET VARIABLE wmo_reward_mode = 'positive-binary'; -- --reward-mode
      SET VARIABLE wmo_max_turns = 30;                  -- --max-turns
      SET VARIABLE wmo_max_tokens = 4096;               -- --max-tokens
      SET VARIABLE wmo_context_budget = 32768;          -- --context-budget
      SET VARIABLE wmo_max_datum_tokens = 32768;        -- --max-datum-tokens

    \b
    Examples:
      wmo-lake sql "SELECT batch, count(*) FROM trials GROUP BY ALL"
      wmo-lake sql --format json "SELECT * FROM rollout_stats"
      echo "SELECT * FROM problems" | wmo-lake sql - --format csv -o problems.csv
      wmo-lake sql --reward-key score "SELECT batch, avg(reward) FROM cells GROUP BY ALL"
      wmo-lake sql --engine spark "SET VAR wmo_max_tokens = 4096; SELECT * FROM rollout_stats"
    """
    if query == "-":
        query = sys.stdin.read()
    if engine == "spark":
        run_on_spark(query, lake, fmt, output, settings_from(options))
        return
    try:
        statements = duckdb.extract_statements(query)
    except duckdb.Error as error:
        fail(f"cannot parse the query: {error}", 2)
    if not statements:
        fail("the query is empty", 2)
    for statement in statements:
        if statement.type not in READ_ONLY_STATEMENTS:
            fail(
                f"only read-only statements run here (SELECT, EXPLAIN, SET); got "
                f"{statement.type.name}. To change the lake, use `wmo-lake ingest`",
                2,
            )
    try:
        con = connect(lake, settings_from(options))
        for statement in statements[:-1]:
            con.execute(statement)
        relation = con.sql(statements[-1].query)
        if relation is None:
            return
        render(relation, fmt, output, sys.stdout)
    except LakeError as error:
        fail(str(error))
    except duckdb.Error as error:
        fail(f"query failed: {error}")
    except ValueError as error:
        fail(str(error), 2)


def run_on_spark(
    query: str, lake: Path, fmt: str, output: Path | None, settings: dict[str, Any]
) -> None:
    """`wmo-lake sql --engine spark`: the same tables and views in a SparkSession (Spark SQL;
    settings are session variables: SET VAR wmo_reward_key = 'score')."""
    statements = [s.strip() for s in query.split(";") if s.strip()]
    if not statements:
        fail("the query is empty", 2)
    for statement in statements:
        if statement.split(None, 1)[0].upper() not in SPARK_READ_ONLY:
            fail(
                f"only read-only statements run here ({', '.join(SPARK_READ_ONLY)}); got "
                f"{statement.split(None, 1)[0]!r}. To change the lake, use `wmo-lake ingest`",
                2,
            )
    from wmo_lake import spark as lake_spark

    try:
        session = lake_spark.local_session()
        lake_spark.register(session, lake, settings)
        for statement in statements[:-1]:
            session.sql(statement).collect()
        table = session.sql(statements[-1]).toArrow()
        render(duckdb.connect().from_arrow(table), fmt, output, sys.stdout)
    except LakeError as error:
        fail(str(error))
    except ValueError as error:
        fail(str(error), 2)
    except Exception as error:  # pyspark's errors (AnalysisException, ...) share no base here
        if type(error).__module__.startswith(("pyspark", "py4j")):
            fail(f"query failed on Spark: {str(error).strip().splitlines()[0]}")
        raise
