"""`wmo-lake forget --batch GLOB`: remove batches from the lake, atomically."""

from __future__ import annotations

import json
from pathlib import Path

import click

from wmo_lake.commands.options import (
    lake_failure,
    lake_option,
    lake_write_failure,
    say_stale_rules,
)
from wmo_lake.stopping import sigterm_stops
from wmo_lake.store import LakeError
from wmo_lake.terminal import printable


@click.command()
@click.option(
    "--batch",
    "batch_glob",
    metavar="GLOB",
    required=True,
    help="The batches to remove, matched as `stats --batch` matches (DuckDB's GLOB: '*' crosses "
    "'/', '\\' escapes), e.g. 'exp1/*'.",
)
@lake_option
@click.option("--dry-run", is_flag=True, help="Change nothing: list what would be removed.")
@click.option("--json", "as_json", is_flag=True, help="Print what was removed as JSON.")
@click.pass_context
def forget(ctx: click.Context, batch_glob: str, lake: Path, dry_run: bool, as_json: bool) -> None:
    """Remove every batch matching GLOB: its trials, unreadable trials, jobs and problems.

    The lake changes the way an ingest changes it: under the same lock, in one atomic generation
    (a crash leaves the previous one whole). The trial dirs themselves are not touched; ingesting
    them again brings the batches back. Lists each removed dir, then one summary line.

    \b
    Examples:
      wmo-lake forget --batch 'exp1/harbor/step-000[1-3]/*' --dry-run
      wmo-lake forget --batch 'scratch/*'
    """
    from wmo_lake.tidy import forget as run_forget

    if not batch_glob:
        raise click.BadParameter(
            "an empty glob matches nothing; name the batches to forget, e.g. 'exp1/*'",
            param_hint="'--batch'",
        )
    try:
        with sigterm_stops():
            removal = run_forget(
                lake,
                batch_glob,
                dry_run=dry_run,
                on_wait=lambda message: click.echo(message, err=True),
            )
    except LakeError as error:
        lake_failure(ctx, lake, error)
    except OSError as error:
        lake_write_failure(lake, error)
    say_stale_rules(lake)
    if as_json:
        click.echo(json.dumps(removal.as_dict(), indent=2))
        return
    verb = "would remove" if dry_run else "removed"
    for batch in removal.batches:
        click.echo(f"{verb} batch {printable(batch)}")
    for path in removal.dirs:
        click.echo(f"  {printable(path)}")
    for path in removal.other_dirs:
        click.echo(f"  {printable(path)} (not a trial: its problems)")
    click.echo(removal.line())
