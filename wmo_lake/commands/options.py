"""Options shared by the commands (the sqlite-utils way: one decorator per option family)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

from wmo_lake.output import FORMATS
from wmo_lake.settings import from_options, options_decorator

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def fail(message: str, code: int = 1) -> NoReturn:
    """Print `error: message` to stderr and exit: 1 for a failure, 2 for a usage error."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def lake_option(command: Callable[..., Any]) -> Callable[..., Any]:
    """--lake, as on every command that reads or writes a lake (./lake, or $WMO_LAKE)."""
    return click.option(
        "--lake",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("lake"),
        envvar="WMO_LAKE",
        show_default="./lake, or $WMO_LAKE",
        help="The lake directory.",
    )(command)


def output_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--format and --output, for commands that print a query result."""
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


def selection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--batch GLOB and --run RUN: which batches a command reads."""
    command = click.option(
        "--run", metavar="RUN", help="Only batches of this run (the dir before harbor/)."
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
