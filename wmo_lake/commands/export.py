"""`wmo-lake export ...`: training datasets out of the lake, each with a manifest beside it.

Each dataset kind is a subcommand of the `export` group (`datums`, `conversations`): its options,
then one call into its module in `wmo_lake.exports`, and that module's summary. The discipline
they share (split guard, no overwrite, atomic write, manifest) is `wmo_lake.exports.discipline`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import duckdb

from wmo_lake.commands.options import (
    datum_options,
    exit_quickly_when_done,
    exit_quickly_when_stopped,
    fail,
    fail_if_damaged,
    format_for,
    guard_options,
    lake_failure,
    lake_hint,
    lake_option,
    refuse_lake_file,
    reward_options,
    selection_options,
    settings_from,
)
from wmo_lake.exports.discipline import ExportError, ExportUsageError, require_guard_choice
from wmo_lake.stopping import sigterm_stops
from wmo_lake.store import LakeError


def _require_guard_choice(tasks: Path | None, no_split_guard: bool) -> None:
    """--tasks or --no-split-guard, exactly one: a usage error (exit 2) before anything is read."""
    try:
        require_guard_choice(tasks, no_split_guard)
    except ExportError as error:
        fail(str(error), 2)


def _scope_check(
    settings: dict[str, Any], batch_glob: str | None, run: str | None, strict: bool
) -> Callable[[duckdb.DuckDBPyConnection], None]:
    """What the export runs on its connection before reading: warn when no trial in scope has
    the reward key, or some carry a reward that is no measurement, and when a batch in scope
    is a part of its step (a harbor job not finished, or finished short of its trials:
    `incomplete_jobs`); under --strict exit 1 before writing."""

    def check(con: duckdb.DuckDBPyConnection, batches: list[str] | None = None) -> None:
        from wmo_lake.checks import scope_warning
        from wmo_lake.incomplete_jobs import incomplete_job_warnings

        found = scope_warning(
            con, batch_glob=batch_glob, run=run, batches=batches, invalid_rewards=True
        )
        found_jobs = incomplete_job_warnings(con, batch_glob=batch_glob, run=run, batches=batches)
        incomplete = [text for text, _ in found_jobs]
        said = ([found[0]] if found else []) + incomplete
        for message in said:
            click.echo(f"warning: {message}", err=True)
        if said and strict:
            fail("--strict: nothing was written", 1)

    return check


def _run_export(
    kind: str,
    write: Callable[..., dict[str, Any]],
    summary: Callable[[dict[str, Any], Path], str],
    *,
    out: Path,
    lake: Path,
    tasks: Path | None,
    no_split_guard: bool,
    batch_glob: str | None,
    run: str | None,
    strict: bool,
    as_json: bool,
    options: dict[str, Any],
    **kind_options: Any,
) -> None:
    """What every export command does around its kind's `write`: the split-guard choice and the
    reward-key check before anything is read, each failure said in one line, then the manifest
    (--json) or its summary."""
    _require_guard_choice(tasks, no_split_guard)
    settings = settings_from(options)
    exit_quickly_when_stopped()  # (its partial files are removed before the stop is said)
    try:
        with sigterm_stops():  # (its hidden partial files removed, as on Ctrl-C)
            manifest = write(
                lake,
                out,
                tasks=tasks,
                no_split_guard=no_split_guard,
                batch_glob=batch_glob,
                run=run,
                settings=settings,
                check=_scope_check(settings, batch_glob, run, strict),
                lake_args=lake_hint(click.get_current_context(), lake),
                **kind_options,
            )
    except ExportUsageError as error:
        fail_if_damaged(lake, error)  # (a --where that names a column of a missing segment's table)
        fail(str(error), 2)
    except (ExportError, LakeError) as error:
        fail_if_damaged(lake, error)  # (an ExportError wraps the query's own error)
        lake_failure(None, lake, error)
    except duckdb.Error as error:
        fail_if_damaged(lake, error)
        fail(f"the {kind} query failed: {error}")
    except OSError as error:
        fail(f"cannot write {out}: {error.strerror or error}")
    click.echo(
        json.dumps(manifest, indent=2, ensure_ascii=False) if as_json else summary(manifest, out)
    )
    # the dataset and its manifest are synced and linked, the connection closed
    exit_quickly_when_done()


strict_option = click.option(
    "--strict",
    is_flag=True,
    help="Exit 1 and write nothing when a warning is given (a reward key no trial in scope has).",
)


@click.group()
def export() -> None:
    """Export training data from the lake: a dataset file plus FILE.manifest.json.

    Every export needs --tasks REGISTRY.json (only train-split tasks are written) or an explicit
    --no-split-guard, never overwrites FILE or its manifest, and writes both atomically.

    \b
    Examples:
      wmo-lake export datums --out step7.parquet --tasks tasks.json --batch 'exp1/*/step-0007/*'
      wmo-lake export conversations --out sft.jsonl --tasks tasks.json --filter success
    """


@export.command("datums")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The Parquet file to write (it and FILE.manifest.json must not exist).",
)
@lake_option
@selection_options
@click.option(
    "--where",
    default=None,
    help='A SQL condition over the datums columns, e.g. "passed AND fragment_index = 0".',
)
@guard_options
@datum_options
@reward_options
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def datums(
    out: Path,
    lake: Path,
    batch_glob: str | None,
    run: str | None,
    where: str | None,
    tasks: Path | None,
    no_split_guard: bool,
    strict: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Write the `datums` view (prefix-merged training sequences, unshifted) to a Parquet file.

    One row per training sequence: model_input_tokens, loss_mask, sampled_logprobs, reward,
    advantage (reward minus the batch's mean for the task) and where it came from. Episodes that
    overflow the context budget or hold an overlong sequence are dropped whole and counted.
    Load it back with `wmo_lake.exports.datums.load_verified(FILE, tasks=REGISTRY)`, and hand it
    to tinker with `wmo_lake.exports.datums.to_tinker(rows)`.

    \b
    Examples:
      wmo-lake export datums --out step7.parquet --tasks tasks.json --batch 'exp1/*/step-0007/*'
      wmo-lake export datums --out all.parquet --no-split-guard --where "NOT infra_failed"
    """
    from wmo_lake.exports.datums import export_datums, summary

    format_for(out, None, ("parquet",), option="--out", writer="this export")
    refuse_lake_file(out, lake, "--out")
    _run_export(
        "datums",
        export_datums,
        summary,
        out=out,
        lake=lake,
        tasks=tasks,
        no_split_guard=no_split_guard,
        batch_glob=batch_glob,
        run=run,
        strict=strict,
        as_json=as_json,
        options=options,
        where=where,
    )


@export.command("conversations")
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The file to write (it and FILE.manifest.json must not exist).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "parquet"]),
    default=None,
    help='jsonl: one {"messages": [...], ...} object per line; parquet: the same columns '
    "[default: what --out's extension says (.jsonl / .parquet), else jsonl].",
)
@click.option(
    "--episodes",
    type=click.Choice(["all", "last"]),
    default="all",
    show_default=True,
    help="Every agent episode of a trial, or only its last one (harbor's --episodes).",
)
@click.option(
    "--filter",
    "outcome",
    type=click.Choice(["success", "failure", "all"]),
    default="all",
    show_default=True,
    help="Only episodes of passed (success) or not passed (failure) trials.",
)
@lake_option
@selection_options
@guard_options
@click.option(
    "--subagents/--no-subagents",
    default=True,
    show_default=True,
    help="Also export each subagent trajectory (context summarization) as one conversation.",
)
@reward_options
@strict_option
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def conversations(
    out: Path,
    fmt: str | None,
    episodes: str,
    outcome: str,
    lake: Path,
    batch_glob: str | None,
    run: str | None,
    tasks: Path | None,
    no_split_guard: bool,
    subagents: bool,
    strict: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """Write agent conversations (SFT data) from the trials' ATIF trajectories.

    One row per agent episode, as harbor's `traces export` defines it: the conversation up to and
    including that agent turn, `messages` as [{role, content}], plus task, trial_name, batch,
    model, reward, passed, trace_source and episode. Exact duplicates are written once and
    counted; trials without a trajectory (oracle / nop) are counted, not errors. Load it back with
    `wmo_lake.exports.conversations.load_verified(FILE, tasks=REGISTRY)`.

    \b
    Examples:
      wmo-lake export conversations --out sft.jsonl --tasks tasks.json --filter success
      wmo-lake export conversations --out last.parquet --format parquet --episodes last \\
          --no-split-guard --batch 'exp1/*'
    """
    from wmo_lake.exports.conversations import export_conversations, summary

    fmt = format_for(out, fmt, ("jsonl", "parquet"), option="--out", writer="this export")
    refuse_lake_file(out, lake, "--out")
    _run_export(
        "conversations",
        export_conversations,
        summary,
        out=out,
        lake=lake,
        tasks=tasks,
        no_split_guard=no_split_guard,
        batch_glob=batch_glob,
        run=run,
        strict=strict,
        as_json=as_json,
        options=options,
        fmt=fmt,
        episodes=episodes,
        outcome=outcome,
        subagents=subagents,
    )
