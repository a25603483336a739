"""`wmo-lake ingest`: run trees into the lake."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from wmo_lake.commands.options import fail, lake_hint, lake_option
from wmo_lake.store import LakeError


@click.command()
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
    help="Reader processes [default: all cores, once there are more than ~48 MB of JSON to "
    "read; below that one process is faster].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--strict", is_flag=True, help="Exit 1 when any problem was recorded.")
@click.option(
    "--prune",
    is_flag=True,
    help="Also drop the trials (and jobs) the lake holds from under PATH whose dirs are gone.",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Change nothing: say how many dirs would be read and which trials --prune would drop.",
)
@click.pass_context
def ingest(
    ctx: click.Context,
    paths: tuple[Path, ...],
    lake: Path,
    sinks: tuple[Path, ...],
    workers: int | None,
    as_json: bool,
    strict: bool,
    prune: bool,
    dry_run: bool,
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
      wmo-lake ingest runs/ --prune --dry-run    # which trials' dirs are gone from runs/?
      wmo-lake ingest runs/ --prune              # drop them (one atomic generation)
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
        from wmo_lake.ingest import ingest as run_ingest

        summary = run_ingest(
            list(paths),
            lake,
            sinks=sinks,
            workers=workers,
            progress=progress,
            on_wait=lambda message: click.echo(message, err=True),
            prune=prune,
            dry_run=dry_run,
        )
    except LakeError as error:
        fail(str(error))
    except OSError as error:  # a read-only or full lake dir: the previous generation stays whole
        where = error.filename or lake
        fail(f"cannot write the lake at {lake}: {where}: {error.strerror or error}")
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
    else:
        verb = "would prune" if dry_run else "pruned"
        for path in summary.pruned:
            click.echo(f"{verb} {path}")
        click.echo(summary.line())
        if summary.problems:
            query = shlex.quote("SELECT kind, path, message FROM problems")
            click.echo(f"see them: wmo-lake sql{lake_hint(ctx, lake)} {query}", err=True)
    if strict and summary.problems:
        sys.exit(1)
