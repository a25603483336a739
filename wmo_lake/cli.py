"""The `wmo-lake` command: a thin click layer over the library (ingest, lake, output).

Every command's docstring is its --help. Commands that read a lake share `--lake`, which
defaults to ./lake or $WMO_LAKE.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import duckdb

from wmo_lake import __version__
from wmo_lake.ingest import ingest as run_ingest
from wmo_lake.lake import connect
from wmo_lake.output import FORMATS, render
from wmo_lake.store import LakeError

READ_ONLY_STATEMENTS = {
    duckdb.StatementType.SELECT,
    duckdb.StatementType.EXPLAIN,
    duckdb.StatementType.SET,
}


def lake_option(command: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--lake",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("lake"),
        envvar="WMO_LAKE",
        show_default="./lake, or $WMO_LAKE",
        help="The lake directory.",
    )(command)


def output_options(command: Callable[..., Any]) -> Callable[..., Any]:
    command = click.option(
        "--output",
        "-o",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write to this file instead of stdout.",
    )(command)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default="table",
        show_default=True,
        help="Output format (parquet needs --output).",
    )(command)


def setting_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The query-time settings the views read (see `wmo-lake sql --help`)."""
    for flag, help_text, kind in reversed(
        [
            ("--reward-key", "Reward key in verifier_result.rewards [default: reward].", str),
            (
                "--reward-mode",
                "raw: passed means reward = 1.0; positive-binary: reward > 0 [default: raw].",
                click.Choice(["raw", "positive-binary"]),
            ),
            (
                "--max-turns",
                "Turn cap for stop reasons [default: each batch's recorded max_turns].",
                click.IntRange(min=1),
            ),
            (
                "--max-tokens",
                "Output cap for truncated spans [default: each batch's max_tokens, else 8192].",
                click.IntRange(min=1),
            ),
        ]
    ):
        command = click.option(flag, type=kind, default=None, help=help_text)(command)
    return command


def settings_from(options: dict[str, Any]) -> dict[str, Any]:
    return {
        "wmo_reward_key": options.get("reward_key"),
        "wmo_reward_mode": options.get("reward_mode"),
        "wmo_max_turns": options.get("max_turns"),
        "wmo_max_tokens": options.get("max_tokens"),
        "wmo_context_budget": options.get("context_budget"),
        "wmo_max_datum_tokens": options.get("max_datum_tokens"),
    }


def fail(message: str, code: int = 1) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wmo-lake")
def cli() -> None:
    """Harbor agent-training rollouts as a columnar lake, and every batch-health metric as SQL.

    \b
    wmo-lake ingest runs/                 read run trees into ./lake (Parquet)
    wmo-lake sql "SELECT ... FROM trials"  ask anything, across every batch
    wmo-lake stats                         per-batch RolloutStats

    The lake is also a DuckDB database: `duckdb lake/lake.duckdb`.
    """


@cli.command()
@click.argument(
    "paths", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path)
)
@lake_option
@click.option(
    "--sinks",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A pi-bridge token sink dir ({SINK}/{trial_name}.jsonl); repeatable. Read for trials "
    "whose result.json records no rollout details.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Parallel readers [default: all cores].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--strict", is_flag=True, help="Exit 1 when any problem was recorded.")
def ingest(
    paths: tuple[Path, ...],
    lake: Path,
    sinks: tuple[Path, ...],
    workers: int | None,
    as_json: bool,
    strict: bool,
) -> None:
    """Read harbor run trees into the lake.

    PATH is searched at any depth for trial dirs (a dir whose result.json is a TrialResult);
    each trial's parent is its job dir, and its batch is the job dir's path relative to PATH.
    Re-ingesting is cheap: unchanged trial dirs are not parsed, changed ones replace their rows,
    and nothing is counted twice. What cannot be read is recorded in the `problems` table.

    \b
    Examples:
      wmo-lake ingest runs/
      wmo-lake ingest runs/exp1 --lake /data/lake --sinks runs/exp1/sinks
      wmo-lake ingest runs/ --json --strict      # for scripts: exit 1 on any problem
    """
    bar: Any = None
    show_bar = sys.stderr.isatty() and not as_json

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if not show_bar:
            return
        if bar is None:
            bar = click.progressbar(length=total, label="reading trials", file=sys.stderr)
            bar.__enter__()
        bar.update(done - bar.pos)

    try:
        summary = run_ingest(
            list(paths),
            lake,
            sinks=sinks,
            workers=workers,
            progress=progress,
            on_wait=lambda message: click.echo(message, err=True),
        )
    except LakeError as error:
        fail(str(error))
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        click.echo(summary.line())
        if summary.problems:
            click.echo(
                f'see them: wmo-lake sql --lake {lake} "SELECT kind, path, message FROM problems"',
                err=True,
            )
    if strict and summary.problems:
        sys.exit(1)


@cli.command()
@click.argument("query")
@lake_option
@output_options
@setting_options
def sql(query: str, lake: Path, fmt: str, output: Path | None, **options: Any) -> None:
    """Run read-only SQL over the lake's tables and views. QUERY '-' reads it from stdin.

    Tables: jobs, trials, spans, stop_reasons, tests, problems. Views: spans_full (full
    prompts back), cells, trial_records, rollout_stats, and more (see the README).
    Several statements may be given; the last one's result is printed. Settings are DuckDB
    variables, so plain SQL (here, or in any DuckDB client on lake/lake.duckdb) sets them too:

    \b
      SET VARIABLE wmo_reward_key = 'score';            -- --reward-key
      SET VARIABLE wmo_reward_mode = 'positive-binary'; -- --reward-mode
      SET VARIABLE wmo_max_turns = 30;                  -- --max-turns
      SET VARIABLE wmo_max_tokens = 4096;               -- --max-tokens

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


# Commands in their own modules register themselves on `cli` when imported.
from wmo_lake import stats_command  # noqa: E402, F401
from wmo_lake.export_command import export  # noqa: E402

cli.add_command(export)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
