"""`wmo-lake ingest`: run trees into the lake."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from wmo_lake.commands.options import (
    OWN_PROCESS,
    exit_quickly_when_done,
    fail,
    lake_hint,
    lake_option,
    lake_write_failure,
    say_stale_rules,
)
from wmo_lake.lean import skip_numpy
from wmo_lake.settings import whole_number
from wmo_lake.stopping import sigterm_stops
from wmo_lake.store import LakeError


def _sink_roots(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[tuple[str, str], ...]:
    from wmo_lake.collection import parse_sink_root

    try:
        return tuple(parse_sink_root(value) for value in values)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _existing_dirs(
    ctx: click.Context, param: click.Parameter, values: tuple[Path, ...]
) -> tuple[Path, ...]:
    for path in values:
        if not path.exists():
            raise click.BadParameter(
                f"{path} does not exist; give the run tree to read (a runs dir, a run, a step "
                "dir or a job dir)"
            )
        if not path.is_dir():
            raise click.BadParameter(f"{path} is a file; give the directory that holds it")
    return values


@click.command()
@click.argument("paths", nargs=-1, required=True, type=Path, callback=_existing_dirs)
@lake_option
@click.option(
    "--sink-root",
    "sink_roots",
    multiple=True,
    metavar="OLD=NEW",
    callback=_sink_roots,
    help="Read the pi-bridge token sinks a job config records under OLD (its token_sink_dir "
    "prefix) from NEW instead: for a tree moved or copied since it ran. Repeatable. The lake "
    "remembers it for later ingests (OLD=OLD undoes it).",
)
@click.option(
    "--workers",
    type=whole_number(1),
    metavar="N",
    default=None,
    help="Reader processes [default: all cores, once there are more than ~48 MB of JSON to "
    "read; below that one process is faster].",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "spark"]),
    default="local",
    show_default=True,
    help="spark: read the changed trial dirs as tasks of a Spark job (one group of job dirs a "
    "task, each writing its own segments), then commit here as usual. Needs the extra "
    "wmo-lake[spark] and Java 17; on a cluster the lake and the trees must be on a filesystem "
    "every executor mounts at the same path.",
)
@click.option(
    "--master",
    default=None,
    metavar="URL",
    help="With --engine spark: the Spark master [default: the one spark-submit or SPARK_MASTER "
    "names, else local[*]], e.g. local[4] or spark://host:7077.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 when any problem was recorded or a PATH held no trial dirs.",
)
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
    sink_roots: tuple[tuple[str, str], ...],
    workers: int | None,
    engine: str,
    master: str | None,
    as_json: bool,
    strict: bool,
    prune: bool,
    dry_run: bool,
) -> None:
    """Read harbor run trees into the lake.

    PATH is searched at any depth for trial dirs (a dir whose result.json is a TrialResult);
    each trial's parent is its job dir. A job dir's batch is `<run>/harbor/step-NNNN/<job>` when
    it is or lies under a run's harbor/step-NNNN/ dir (whatever PATH was, by its real path),
    else its path relative to PATH. Each job is read on its collection path: pi-bridge when its
    config records a token_sink_dir (spans from that dir's {trial}.jsonl), terminus-2 otherwise
    (spans from result.json). Re-ingesting is cheap: unchanged trial dirs are not parsed,
    changed ones replace their rows, and nothing is counted twice. What cannot be read is
    recorded in the `problems` table. A new lake's lake.duckdb starts from a skeleton kept in
    $WMO_LAKE_CACHE_DIR (default ~/.cache/wmo-lake; set it empty to keep none).

    \b
    Examples:
      wmo-lake ingest runs/
      wmo-lake ingest runs/exp1/harbor/step-0007 --lake /data/lake
      wmo-lake ingest copy/runs --sink-root /home/me/runs=copy/runs   # sinks moved with the tree
      wmo-lake ingest runs/ --json --strict      # for scripts: exit 1 on any problem or warning
      wmo-lake ingest runs/ --prune --dry-run    # which trials' dirs are gone from runs/?
      wmo-lake ingest runs/ --prune              # drop them (one atomic generation)
      wmo-lake ingest runs/ --engine spark       # Spark tasks on local[*] read the dirs
      wmo-lake ingest /shared/runs --lake /shared/lake --engine spark --master spark://head:7077
    """
    if engine != "spark" and master is not None:
        fail("--master is for --engine spark; add --engine spark or drop --master", 2)
    if engine == "spark" and workers is not None:
        fail(
            "--workers sets local reader processes; with --engine spark the master sets the "
            "cores (e.g. --master 'local[4]')",
            2,
        )
    if OWN_PROCESS and engine != "spark":  # (pyspark may want numpy)
        skip_numpy()  # nothing here uses it: see wmo_lake/lean.py
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

        spark = None
        if engine == "spark" and not dry_run:
            from wmo_lake.spark import local_session

            spark = local_session(master)
        with sigterm_stops():
            summary = run_ingest(
                list(paths),
                lake,
                sink_roots=sink_roots,
                workers=workers,
                progress=progress,
                on_wait=lambda message: click.echo(message, err=True),
                prune=prune,
                dry_run=dry_run,
                spark=spark,
            )
    except LakeError as error:
        fail(str(error))
    except OSError as error:
        lake_write_failure(lake, error)
    except Exception as error:  # a failed Spark job (Py4JJavaError, PySpark*Error)
        from wmo_lake.spark import raised_by_spark

        if not raised_by_spark(error):
            raise
        lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
        cause = next((line for line in lines if "Error" in line or "Exception" in line), "")
        fail(
            f"the Spark job failed, nothing was committed (the lake keeps its previous "
            f"generation): {cause or (lines[0] if lines else type(error).__name__)}"
        )
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    for path in summary.paths_without_trials:
        click.echo(f"warning: no trial dirs under {path}", err=True)
    if summary.sink_roots_remembered and not as_json:
        remaps = " ".join(f"--sink-root {shlex.quote(r)}" for r in summary.sink_roots_remembered)
        click.echo(f"note: sinks read with {remaps}, remembered from an earlier ingest", err=True)
    say_stale_rules(lake)
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
    if strict and (summary.problems or summary.paths_without_trials):
        sys.exit(1)
    if spark is None:  # (a Spark session's JVM is stopped by the interpreter's teardown)
        exit_quickly_when_done()  # the lock is released, every file synced and closed
