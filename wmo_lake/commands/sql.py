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


@click.command()
@click.argument("query")
@lake_option
@output_options
@setting_options
@datum_options
def sql(query: str, lake: Path, fmt: str, output: Path | None, **options: Any) -> None:
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
    """
    if query == "-":
        query = sys.stdin.read()
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
