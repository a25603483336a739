"""`wmo-lake stats`: seed 003's RolloutStats for every batch, from the `rollout_stats` view."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import duckdb

from wmo_lake.commands.options import (
    fail,
    lake_option,
    selection_options,
    setting_options,
    settings_from,
)
from wmo_lake.stats import StatsReport, collect_stats, table_lines
from wmo_lake.store import LakeError


@click.command()
@lake_option
@selection_options
@setting_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print one JSON array, one object per batch, keys exactly the rollout_stats columns "
    "(rates as fractions in [0, 1]).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 after printing when a warning was given (a reward key no trial has).",
)
def stats(
    lake: Path,
    batch_glob: str | None,
    run: str | None,
    as_json: bool,
    strict: bool,
    **options: Any,
) -> None:
    """Per-batch rollout health (seed 003's RolloutStats), one row per batch in run/step order.

    Rates are percentages of their own denominators: solve over executed trials (infra
    failures excluded), graded over executed trials with a CTRF report, raw over all trials,
    scaffold loss over trials with a stop reason. '-' marks an empty denominator (a null
    measurement, 0.0 in --json). The seed's warnings follow the table as short notes.

    The same numbers in SQL: SELECT * FROM rollout_stats. The options are DuckDB variables, so
    any DuckDB client sets them in plain SQL before querying:

    \b
      SET VARIABLE wmo_reward_key = 'score';            -- --reward-key
      SET VARIABLE wmo_reward_mode = 'positive-binary'; -- --reward-mode
      SET VARIABLE wmo_max_turns = 30;                  -- --max-turns
      SET VARIABLE wmo_max_tokens = 4096;               -- --max-tokens
      RESET VARIABLE wmo_max_tokens;                    -- back to the recorded cap

    \b
    Examples:
      wmo-lake stats
      wmo-lake stats --run exp1 --max-tokens 4096   # would exp1's turns truncate at 4096?
      wmo-lake stats --batch 'exp1/harbor/step-001*/*' --json
      wmo-lake stats --reward-key score --strict     # exit 1 if no trial has 'score'
    """
    try:
        report = collect_stats(lake, settings_from(options), batch_glob=batch_glob, run=run)
    except LakeError as error:
        fail(str(error))
    except duckdb.Error as error:
        fail(f"stats query failed: {error}")
    for warning in report.warnings:
        click.echo(f"warning: {warning}", err=True)
    if as_json:
        click.echo(json.dumps(report.rows, ensure_ascii=False, indent=2))
    else:
        _print_table(report, lake, batch_glob, run)
    if strict and report.warnings:
        sys.exit(1)


def _print_table(report: StatsReport, lake: Path, batch_glob: str | None, run: str | None) -> None:
    if not report.rows:
        filters = " ".join(
            f"{flag} {value!r}"
            for flag, value in (("--batch", batch_glob), ("--run", run))
            if value is not None
        )
        click.echo(
            f"no batch matches {filters}" if filters else f"the lake at {lake} has no trials yet",
            err=True,
        )
        return
    for line in table_lines(report.rows):
        click.echo(line)
    if report.notes:
        click.echo("")
        for note in report.notes:
            click.echo(f"note: {note}")
