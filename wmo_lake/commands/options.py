"""Options shared by the commands (the sqlite-utils way: one decorator per option family)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click

FORMATS = ("table", "csv", "json", "jsonl", "parquet")  # what wmo_lake.output.render writes

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


_REWARD_OPTIONS = [
    ("--reward-key", "Reward key in verifier_result.rewards [default: reward].", str),
    (
        "--reward-mode",
        "raw: passed means reward = 1.0; positive-binary: reward > 0 [default: raw].",
        click.Choice(["raw", "positive-binary"]),
    ),
]
_CAP_OPTIONS = [
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
_DATUM_OPTIONS = [
    (
        "--context-budget",
        "Drop episodes with a span (prompt + sampled) longer than this "
        "[default: each batch's llm_kwargs.context_limit, else 65536].",
        click.IntRange(min=1),
    ),
    (
        "--max-datum-tokens",
        "Drop episodes with a merged sequence longer than this [default: 65536].",
        click.IntRange(min=1),
    ),
]


def _options(specs: list[tuple[str, str, Any]]) -> Decorator:
    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for flag, help_text, kind in reversed(specs):
            command = click.option(flag, type=kind, default=None, help=help_text)(command)
        return command

    return decorate


reward_options = _options(_REWARD_OPTIONS)
"""--reward-key, --reward-mode: how a trial's reward and passed are read (the `cells` view)."""

setting_options = _options(_REWARD_OPTIONS + _CAP_OPTIONS)
"""The query-time settings of the stats views (see `wmo-lake sql --help`)."""

datum_options = _options(_DATUM_OPTIONS)
"""--context-budget, --max-datum-tokens: the `datums` view's drop rules."""


def settings_from(options: dict[str, Any]) -> dict[str, Any]:
    """The DuckDB variables (wmo_lake.lake.SETTINGS) set by a command's options."""
    return {
        "wmo_reward_key": options.get("reward_key"),
        "wmo_reward_mode": options.get("reward_mode"),
        "wmo_max_turns": options.get("max_turns"),
        "wmo_max_tokens": options.get("max_tokens"),
        "wmo_context_budget": options.get("context_budget"),
        "wmo_max_datum_tokens": options.get("max_datum_tokens"),
    }


def guard_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--tasks / --no-split-guard: every export must choose one (see wmo_lake.export)."""
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
