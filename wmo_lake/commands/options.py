"""Options shared by the commands (the sqlite-utils way: one decorator per option family)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
from click.core import ParameterSource

from wmo_lake import file_formats
from wmo_lake.output import FORMATS
from wmo_lake.settings import from_options, options_decorator

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


# Set by a command whose every file is written, synced and closed and whose connections are
# closed: `wmo-lake` (wmo_lake.cli.main, the process's entry point, never an in-process caller)
# then ends the process at once on success instead of tearing the interpreter down (freeing the
# query engine's and Arrow's memory, unloading modules: 50-100 ms of an export's wall time).
QUICK_EXIT: list[bool] = []


def exit_quickly_when_done() -> None:
    """Call once nothing is left open: see QUICK_EXIT."""
    QUICK_EXIT.append(True)


def exit_quickly_when_stopped() -> None:
    """Call before the work whose stop is to end the process at once, when the process is the
    program's own: see stopping.QUICK_EXIT_ON_STOP."""
    from wmo_lake.stopping import QUICK_EXIT_ON_STOP

    if OWN_PROCESS:
        QUICK_EXIT_ON_STOP.append(True)


# Set by wmo_lake.cli.main before the command runs when this process is the `wmo-lake` program
# (its console script, `python -m wmo_lake.cli`), not a caller's (a harness that called main(), a
# test's CliRunner, a notebook), so a command may change how the process loads modules.
OWN_PROCESS: list[bool] = []


def fail(message: str, code: int = 1) -> NoReturn:
    """Stop with click's own error style: `Error: message` and exit 1 for a failure; for a usage
    error (code 2) click's usage line and `Try '... -h' for help.` come first."""
    if code == 2:
        raise click.UsageError(message)
    raise click.ClickException(message)


def fail_if_damaged(lake: Path, error: BaseException | None = None) -> None:
    """Exit 1 naming the lake's missing segments, if any. Asked after a read or write of the
    lake failed: DuckDB's own error for a missing segment is a glob that matched nothing (or,
    with file access confined, a refused read), a commit's a bare FileNotFoundError. `error`,
    the failure's own: DuckDB's checksum failure is a damaged lake.duckdb, said with the fix."""
    from wmo_lake.store import Store

    damaged = Store(lake).damage(error)
    if damaged is not None:
        fail(str(damaged))


def say_stale_rules(lake: Path) -> None:
    """The stale-rules `warning:` line the reading commands print (from `connect`), for the
    commands that change the lake: after an ingest of part of it, or a forget, some partitions
    may still hold rows an older wmo-lake read."""
    from wmo_lake.checks import stale_rules_warning
    from wmo_lake.store import LakeError, Store

    try:
        message = stale_rules_warning(Store(lake).read_manifest(), str(lake))
    except (LakeError, OSError):
        return  # (the command said what went wrong with the lake already)
    if message is not None:
        click.echo(f"warning: {message}", err=True)


def lake_write_failure(lake: Path, error: OSError) -> NoReturn:
    """Stop on an OSError while a command changed the lake (the previous generation stays
    whole): a segment deleted by hand, a read-only or full lake dir."""
    fail_if_damaged(lake)
    fail(f"cannot write the lake at {lake}: {error.filename or lake}: {error.strerror or error}")


def lake_hint(ctx: click.Context, lake: Path) -> str:
    """` --lake DIR` (shell-quoted) for a hint to repeat, only when --lake was given on the
    command line; '' when the lake came from the default or $WMO_LAKE (the hint works as is)."""
    if ctx.get_parameter_source("lake") is not ParameterSource.COMMANDLINE:
        return ""
    from wmo_lake.store import hint_lake_option

    return hint_lake_option(lake)


def lake_failure(ctx: click.Context | None, lake: Path, error: Exception) -> NoReturn:
    """Stop on a LakeError (or any error: it is said as it is), adding the command that helps
    when the lake does not exist yet."""
    from wmo_lake.lake import NoLakeError

    message = str(error)
    if isinstance(error, NoLakeError) and message.endswith(NoLakeError.advice):
        ctx = ctx or click.get_current_context()
        where = lake_hint(ctx, lake)
        message = message.removesuffix(NoLakeError.advice)
        message += f": run `wmo-lake ingest RUNS_DIR{where}` first" + (
            "" if where else " (or choose the lake you ingested into with --lake DIR or WMO_LAKE)"
        )
    fail(message)


def refuse_no_match(lake: Path, message: str) -> None:
    """Exit 2 with `message` and the lake's runs (as `compare` lists them) for a --batch / --run
    / --steps that matches no batch of a lake that has some: a typo, not an empty result.
    Returns when the lake has no batches (the caller says so as before)."""
    from wmo_lake.checks import runs_held
    from wmo_lake.lake import connect
    from wmo_lake.terminal import printable

    con = connect(lake, check=False)
    try:
        runs = runs_held(con)
    finally:
        con.close()
    if runs:
        fail(f"{message} (runs: {printable(', '.join(runs))})", 2)


class LakeDir(click.Path):
    """--lake's type: a directory. A file that $WMO_LAKE names, or ./lake when no lake is given,
    is said so, not as the --lake option's (click's "Invalid value for '--lake'" blamed an
    option not given)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        named = param.name if param is not None else None
        source = ctx.get_parameter_source(named) if ctx is not None and named else None
        if os.path.exists(value) and not os.path.isdir(value):
            if source is ParameterSource.ENVIRONMENT:
                raise click.UsageError(
                    f"WMO_LAKE={value}: {str(value)!r} is a file, not a lake directory", ctx
                )
            if source is ParameterSource.DEFAULT:  # (no --lake given: ./lake is the default)
                raise click.UsageError(
                    f"./{value} is a file, not a lake directory: give the lake with --lake DIR "
                    "(or WMO_LAKE)",
                    ctx,
                )
        return super().convert(value, param, ctx)


def lake_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--lake, as on every command that reads or writes a lake (./lake, or $WMO_LAKE)."""
    return click.option(
        "--lake",
        type=LakeDir(file_okay=False, path_type=Path),
        default=Path("lake"),
        envvar="WMO_LAKE",
        show_default="./lake, or $WMO_LAKE",
        help="The lake directory.",
    )(command)


def output_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--format and --output, for commands that print a query result (`fmt` is None when not
    given: `format_for` decides it from --output)."""
    command = click.option(
        "--output",
        "-o",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write to this file instead of stdout ('-': stdout; its extension names the format: "
        ".csv, .json, .jsonl, .parquet; .txt or none is the table; any other is refused).",
    )(command)
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(FORMATS),
        default=None,
        show_default="table, or what --output's extension names",
        help="Output format (parquet needs --output).",
    )(command)


def format_for(
    path: Path, fmt: str | None, allowed: tuple[str, ...], *, option: str, writer: str
) -> str:
    """`file_formats.format_for`, a refusal as a usage error (exit 2)."""
    try:
        return file_formats.format_for(path, fmt, allowed, option=option, writer=writer)
    except file_formats.FormatError as error:
        fail(str(error), 2)


def refuse_lake_file(path: Path, lake: Path, option: str) -> None:
    """`file_formats.refuse_lake_file`, a refusal as a usage error (exit 2)."""
    try:
        file_formats.refuse_lake_file(path, lake, option=option)
    except file_formats.FormatError as error:
        fail(str(error), 2)


def selection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--batch GLOB and --run RUN: which batches a command reads."""
    command = click.option(
        "--run",
        metavar="RUN",
        help="Only batches of this run (the dir before harbor/); '(no run)' for those outside one.",
    )(command)
    return click.option(
        "--batch",
        "batch_glob",
        metavar="GLOB",
        help="Only batches matching this glob ('*' crosses '/'), e.g. 'exp1/harbor/step-00*/*'.",
    )(command)


reward_options = options_decorator("reward_key", "reward_mode")
"""--reward-key, --reward-mode: how a trial's reward and passed are read (the `cells` view)."""

setting_options = options_decorator("reward_key", "reward_mode", "max_turns", "max_tokens")
"""The query-time settings of the stats views (see `wmo-lake sql --help`)."""

datum_options = options_decorator("context_budget", "max_datum_tokens")
"""--context-budget, --max-datum-tokens: the `datums` view's drop rules."""

settings_from = from_options
"""The DuckDB variables (wmo_lake.settings.SETTINGS) set by a command's options."""


def guard_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--tasks / --no-split-guard: every export must choose one (wmo_lake.exports.discipline)."""
    command = click.option(
        "--no-split-guard",
        is_flag=True,
        help="Export every task, whatever its split (no registry). Say so explicitly.",
    )(command)
    return click.option(
        "--tasks",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help='Task registry JSON (a list, or {"tasks": [...]}, of {id, split}); only train '
        "tasks are exported.",
    )(command)


def refuse_fd_output(output: Path, option: str, streams: tuple[int, ...] = ()) -> None:
    """Refuse an `option` path that reaches a file descriptor (`/dev/fd/3`, `/dev/stdin`, a link
    to a dir of them, the file `3>> log` appends to) other than the `streams` (1, 2) the caller
    writes as streams (`fd_reached`): its file was renamed over (the lake's own lake.duckdb, when
    the lake was opened on that number), or the write waited on its own stdin for ever. A closed
    stream is held by something else (`cli._hold_closed_fds`): a result written there would be
    lost."""
    from wmo_lake.stopping import (
        CLOSED_FDS,
        STREAM_NAMES,
        StdoutClosedError,
        fd_named,
        fd_reached,
    )

    fd = fd_reached(output)
    named = fd if fd in CLOSED_FDS else fd_named(output)  # (stderr's /dev/null: by its name)
    if named in CLOSED_FDS:
        if named == 1 and 1 in streams:
            raise StdoutClosedError
        fail(f"{option} {output} names {STREAM_NAMES[named]}, which is closed", 2)
    if fd is not None and fd not in streams:
        import os
        import stat

        try:
            regular = stat.S_ISREG(os.stat(output).st_mode)
        except OSError:  # (an fd not open yet, named through /proc)
            regular = False
        what = (
            f"is the file open for writing on file descriptor {fd} (as `{fd}>> log` opens one): "
            "writing it would replace what is written there"
            if regular
            else f"names file descriptor {fd}, not a file"
        )
        fail(
            f"{option} {output} {what}; give another file name"
            + (" (or leave --output out: the result goes to stdout)" if streams else ""),
            2,
        )


# Longest file name an output may have: file systems take 255 bytes (NAME_MAX), and an output is
# first written under a hidden temporary name (`.NAME.PID.tmp`, output.OutputFile) beside it.
OUTPUT_NAME_MAX = 255 - len(".") - len(".4194304.tmp")


def refuse_long_name(output: Path, option: str) -> None:
    """Exit 2 for an `option` file name no file system takes (it was an OSError traceback)."""
    size = len(output.name.encode("utf-8", "surrogateescape"))
    if size > OUTPUT_NAME_MAX:
        fail(
            f"{option}: the file name is {size} bytes; a file system takes 255, and wmo-lake "
            f"first writes it under a temporary name: keep it to {OUTPUT_NAME_MAX}",
            2,
        )


def missing_dir_text(directory: Path) -> str:
    """Why an output's `directory` cannot take it: it is a file, or it does not exist."""
    there = directory.exists() or directory.is_symlink()
    return f"{directory} is not a directory" if there else f"directory {directory} does not exist"
