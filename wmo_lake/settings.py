"""The query-time settings, declared once: everything else follows from this registry.

A setting is a DuckDB variable (`wmo_<name>`) the views read through the one-row `settings` view
(`sql/settings.sql`). From each `Setting` here come:

- the `setting_defaults` table the `settings` view reads its defaults from (built with bound
  values next to the views, by `wmo_lake.lake`), so no default is written in SQL;
- the click option (`--<name>`, its type, its help with the default) on every command that
  takes it (`wmo_lake.commands.options`);
- the check of a value set from Python (`check`), and the README's settings table
  (`markdown_table`, held to the README by tests/test_settings.py).

A setting with `recorded` set is per trial: the value the trial's agent recorded (a `trials`
column, else its job's `jobs` column when the trial records no agent) wins over the default, and
only an explicitly set value wins over the trial's. The `settings` view then shows the set value
(NULL: each trial's own) as `<name>` and the fallback as `<name>_default`; `trial_caps` takes
`coalesce(s.<name>, <recorded>, s.<name>_default)`.

    from wmo_lake.settings import SETTINGS
    SETTINGS["max_tokens"].default        # the fallback when a trial recorded none
    SETTINGS["max_tokens"].variable       # 'wmo_max_tokens'
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

SQL_TYPES = ("VARCHAR", "BIGINT")


class SettingError(ValueError):
    """A setting name or value that cannot be used; the message says what is expected (`what`:
    the same without the setting's names, for an option's usage error)."""

    what: str = ""


@dataclass(frozen=True)
class Setting:
    """One query-time setting.

    name: the `settings` view's column and the command option (`--reward-key` for reward_key).
    sql_type: VARCHAR or BIGINT (a BIGINT setting is a positive count).
    default: the value when nothing is set (None: no default).
    help: one line for --help, without the default (added from `default` and `recorded`).
    recorded: per-batch settings only: the `jobs` column and what harbor records there, which
      wins over the default.
    choices: the allowed values of a VARCHAR setting (None: any string).
    """

    name: str
    sql_type: str
    default: str | int | None
    help: str
    recorded: tuple[str, str] | None = None
    choices: tuple[str, ...] | None = None

    @property
    def variable(self) -> str:
        """The DuckDB variable: `SET VARIABLE wmo_<name> = ...`."""
        return f"wmo_{self.name}"

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def default_text(self) -> str:
        """The default as --help and the README say it."""
        fallback = "" if self.default is None else str(self.default)
        if self.recorded is None:
            return fallback
        recorded = f"each trial's {self.recorded[1]}"
        return f"{recorded}, else {fallback}" if fallback else recorded

    def check(self, value: Any) -> Any:
        """`value` if this setting can take it, else SettingError saying what it takes."""
        if value is None:
            return None
        if self.sql_type == "BIGINT":
            whole = None if isinstance(value, bool) else _whole(value)  # (numpy's too)
            if whole is None or not 1 <= whole < 2**63:
                raise self._refused(f"must be a positive integer (a 64-bit one), got {value!r}")
            return whole
        if not isinstance(value, str):
            raise self._refused(f"must be text, got {value!r}")
        if not value.isascii() and not _is_utf8(value):  # DuckDB binds UTF-8 only
            raise self._refused(f"must be UTF-8 text, got {value!r}")
        if not value:  # (upstream's HarborScorer: "reward_key must be nonempty")
            raise self._refused("must be nonempty text")
        if self.choices is not None and value not in self.choices:
            raise self._refused(f"must be one of {', '.join(self.choices)}, got {value!r}")
        return value

    def _refused(self, what: str) -> SettingError:
        error = SettingError(f"setting {self.variable} ({self.flag}) {what}")
        error.what = what
        return error


def _whole(value: Any) -> int | None:
    """An integer value as an int (a numpy integer too: it has __index__), else None."""
    try:
        return operator.index(value)
    except TypeError:
        return None


def _is_utf8(text: str) -> bool:
    """False for bytes no UTF-8 decodes that Python kept as lone surrogates (a command-line
    argument of another encoding: b'\\xff' -> '\\udcff')."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in [
        Setting(
            "reward_key",
            "VARCHAR",
            "reward",
            "Reward key in verifier_result.rewards.",
        ),
        Setting(
            "reward_mode",
            "VARCHAR",
            "raw",
            "raw: passed means reward = 1.0; positive-binary: reward > 0.",
            choices=("raw", "positive-binary"),
        ),
        Setting(
            "max_turns",
            "BIGINT",
            None,
            "Turn cap for stop reasons (pass THIS run's cap when re-reading another run's "
            "records).",
            recorded=("max_turns", "kwargs.max_turns (or max_episodes, episodes)"),
        ),
        Setting(
            "max_tokens",
            "BIGINT",
            8192,
            "Output cap for truncated spans.",
            recorded=("max_tokens", "llm_kwargs.max_tokens"),
        ),
        Setting(
            "context_budget",
            "BIGINT",
            65536,
            "Drop episodes with a span (prompt + sampled) longer than this.",
            recorded=("context_limit", "llm_kwargs.context_limit (or context_window)"),
        ),
        Setting(
            "max_datum_tokens",
            "BIGINT",
            65536,
            "Drop episodes with a merged sequence longer than this.",
        ),
    ]
}
BY_VARIABLE: dict[str, Setting] = {s.variable: s for s in SETTINGS.values()}


def variables(values: Mapping[str, Any]) -> dict[str, Any]:
    """Checked {variable: value} from {variable or name: value}; None values are left out
    (a setting left out keeps its default). SettingError on an unknown name or a bad value."""
    checked: dict[str, Any] = {}
    for key, value in values.items():
        setting = BY_VARIABLE.get(key) or SETTINGS.get(key)
        if setting is None:
            raise SettingError(f"unknown setting {key!r}; known: {', '.join(BY_VARIABLE)}")
        if value is not None:
            checked[setting.variable] = setting.check(value)
    return checked


def defaults_query() -> tuple[str, dict[str, Any]]:
    """The one-row `setting_defaults` table the `settings` view reads: (SELECT with one bound
    parameter per setting, its parameters). Bound, so no default is ever pasted into SQL."""
    columns = ", ".join(f"CAST(${s.name} AS {s.sql_type}) AS {s.name}" for s in SETTINGS.values())
    return f"SELECT {columns}", {s.name: s.default for s in SETTINGS.values()}


def view_columns() -> list[str]:
    """The `settings` view's columns, in order: each setting, and `<name>_default` after a
    per-batch one."""
    columns: list[str] = []
    for s in SETTINGS.values():
        columns.append(s.name)
        if s.recorded is not None:
            columns.append(f"{s.name}_default")
    return columns


def whole_number(minimum: int) -> Any:
    """click's `IntRange(min=minimum)`, whose error for `abc` says "is not a valid integer" (click
    names the type "integer range" there), refusing past 2^63 - 1 as the settings do: DuckDB
    takes no larger integer (a --limit past it failed in DuckDB, as an INT128 cast)."""
    import click

    class WholeNumber(click.IntRange):
        name = "integer"

        def convert(self, value: Any, param: Any, ctx: Any) -> Any:
            number = super().convert(value, param, ctx)
            if number >= 2**63:
                what = {0: "a whole number", 1: "a positive integer"}.get(minimum, "an integer")
                self.fail(f"must be {what} (a 64-bit one), got {value}", param, ctx)
            return number

    return WholeNumber(min=minimum)


def options_decorator(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A click decorator adding the options of these settings (each `--name`, default None: a
    setting not given keeps its default). Their values reach the views through `from_options`."""
    import click

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for name in reversed(names):
            setting = SETTINGS[name]
            kind: Any
            metavar = None
            if setting.sql_type == "BIGINT":
                kind, metavar = whole_number(1), "N"
            elif setting.choices is not None:
                kind = click.Choice(setting.choices)
            else:
                kind = str
            help_text = f"{setting.help} [default: {setting.default_text()}]"
            command = click.option(
                setting.flag,
                setting.name,
                type=kind,
                default=None,
                help=help_text,
                metavar=metavar,
                callback=_checked_option(setting),
            )(command)
        return command

    return decorate


def _checked_option(setting: Setting) -> Callable[[Any, Any, Any], Any]:
    """A click callback holding an option to what the API takes (`Setting.check`): a usage
    error (exit 2) where the views would read nonsense (an empty reward key, a count past 64
    bits, which reached DuckDB and failed there)."""
    import click

    def check(ctx: Any, param: Any, value: Any) -> Any:
        try:
            return setting.check(value)
        except SettingError as error:
            raise click.BadParameter(error.what or str(error)) from None

    return check


def from_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """{variable: value} for the settings among a command's options (None: not given)."""
    return {s.variable: options.get(s.name) for s in SETTINGS.values() if s.name in options}


def markdown_table() -> str:
    """The README's settings table (tests/test_settings.py holds the README to it)."""
    lines = ["| variable | option | default | what |", "| --- | --- | --- | --- |"]
    for s in SETTINGS.values():
        default = "none" if s.default is None else f"`{s.default}`"
        if s.recorded is not None:
            recorded = f"each trial's recorded `{s.recorded[1]}`"
            default = recorded if s.default is None else f"{recorded}, else {default}"
        if s.choices:
            default += " (or " + ", ".join(f"`{c}`" for c in s.choices if c != s.default) + ")"
        lines.append(f"| `{s.variable}` | `{s.flag}` | {default} | {s.help} |")
    return "\n".join(lines)
