"""`wmo-lake stats`: WMO's `RolloutStats` for every batch, from the `rollout_stats` view."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import duckdb

from wmo_lake.commands.options import (
    fail,
    fail_if_damaged,
    lake_failure,
    lake_option,
    refuse_no_match,
    selection_options,
    setting_options,
    settings_from,
)
from wmo_lake.settings import whole_number
from wmo_lake.stats import StatsReport, collect_stats, print_table
from wmo_lake.store import LakeError
from wmo_lake.terminal import printable, terminal_width


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
    help="Exit 1 after printing when a warning was given (a reward key no trial has) or a "
    "batch shown comes from a harbor job that has not finished or holds fewer trials than it "
    "plans (or more, trial dirs gone since).",
)
@click.option(
    "--by",
    type=click.Choice(["batch", "task"]),
    default="batch",
    show_default=True,
    help="batch: one row per batch; task: the task x step pass-rate matrix per run.",
)
@click.option(
    "--last", type=whole_number(1), metavar="N", help="Only the last N batches of each run."
)
@click.option(
    "--steps",
    "steps_text",
    metavar="A:B",
    help="Only steps A through B (inclusive; 'A:' or ':B' leave an end open).",
)
@click.option(
    "--notes",
    "notes_mode",
    type=click.Choice(["short", "full"]),
    default="short",
    show_default=True,
    help="short: one line per kind of note, with counts; full: every batch's notes.",
)
@click.pass_context
def stats(
    ctx: click.Context,
    lake: Path,
    batch_glob: str | None,
    run: str | None,
    as_json: bool,
    strict: bool,
    by: str,
    last: int | None,
    steps_text: str | None,
    notes_mode: str,
    **options: Any,
) -> None:
    """Per-batch rollout health (WMO's `rollout_stats`), one row per batch in run/step order.

    Rates are percentages of their own denominators: solve over executed trials (infra
    failures excluded), graded over executed trials with a CTRF report, raw over all trials,
    scaffold loss over trials with a stop reason. '-' marks an empty denominator (a null
    measurement, 0.0 in --json). WMO's `collect_rollouts` warnings follow the table as short
    notes, one line per kind (--notes full: one per batch), then one sparkline per metric across
    the steps of each run (a gap for a null measurement). --by task prints each run's task x
    step pass rate (passed / executed trials), tasks ordered by trend, as the report's heatmap.
    A step whose harbor job has not finished (figures of the trials written so far), or holds
    fewer trials than it plans, is a note, or a warning on stderr where no notes are printed
    (--json, --by task).

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
      wmo-lake stats --run exp1 --last 10            # the latest 10 batches
      wmo-lake stats --steps 10:20 --notes full
      wmo-lake stats --run exp1 --by task            # which tasks climb, which regress
    """
    from wmo_lake import stats_views

    try:
        steps = stats_views.parse_steps(steps_text)
    except stats_views.StepsError as error:
        fail(str(error), 2)
    details = None
    try:
        report = collect_stats(
            lake, settings_from(options), batch_glob=batch_glob, run=run, steps=steps, last=last
        )
        if report.rows and (not as_json or by == "task"):
            from wmo_lake.report.data import stats_details

            details = stats_details(
                lake, settings_from(options), report.rows, with_tasks=by == "task"
            )
    except LakeError as error:
        lake_failure(ctx, lake, error)
    except duckdb.Error as error:
        fail_if_damaged(lake, error)
        fail(f"stats query failed: {error}")
    given = [
        (flag, value)
        for flag, value in (("--batch", batch_glob), ("--run", run), ("--steps", steps_text))
        if value is not None
    ]
    if not report.rows and given:
        refuse_no_match(lake, _no_match_text(given))
    warnings = list(report.warnings)
    if as_json or by == "task":
        warnings += report.job_warnings  # (the table's notes say them)
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)
    if by == "task" and details is not None:
        _print_tasks(report, details[1], as_json, terminal_width(sys.stdout))
    elif as_json:
        click.echo(json.dumps(report.rows, ensure_ascii=False, indent=2))
    else:
        _print_table(report, lake, given, notes_mode, details)
    if report.cut and not as_json:
        click.echo("")
        for line in report.cut:
            click.echo(f"note: {line}")
    if strict and (report.warnings or report.job_warnings):
        sys.exit(1)


def _print_tasks(
    report: StatsReport, trends: dict[str, Any], as_json: bool, width: int | None
) -> None:
    from wmo_lake import stats_views

    if as_json:
        matrix = stats_views.task_matrix_rows(report.rows, trends)
        click.echo(json.dumps(matrix, ensure_ascii=False, indent=2))
        return
    for line in stats_views.task_matrix_lines(report.rows, trends, width):
        click.echo(line)


def _print_table(
    report: StatsReport,
    lake: Path,
    filters: list[tuple[str, str]],
    notes_mode: str,
    details: tuple[dict[str, int], Any, dict[str, dict[str, Any]]] | None,
) -> None:
    from wmo_lake import stats_views

    if not report.rows:  # (a lake without batches: one with some refused the filters already)
        click.echo(
            _no_match_text(filters) if filters else f"the lake at {lake} has no trials yet",
            err=True,
        )
        return
    print_table(report.rows, sys.stdout, terminal_width(sys.stdout))
    if report.notes:
        click.echo("")
        notes = report.notes
        if notes_mode == "short":
            notes = stats_views.collapse_notes(notes, [row["batch"] for row in report.rows])
        for note in notes:
            click.echo(f"note: {printable(note)}")
    if details is not None:
        sparklines = stats_views.sparkline_lines(report.rows, details[0], details[2])
        if sparklines:
            click.echo("")
            for line in sparklines:
                click.echo(line)


def _no_match_text(filters: list[tuple[str, str]]) -> str:
    """The filters that select no batch (--steps too: a batch without a step is in no range)."""
    return "no batch matches " + " ".join(f"{flag} {_quoted(value)}" for flag, value in filters)


def _quoted(value: str) -> str:
    """`value` in single quotes, as a shell reads it back (even when it needs none)."""
    return "'" + value.replace("'", "'\\''") + "'"
