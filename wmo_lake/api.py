"""The Python API: `import wmo_lake as wl`. Every read returns a polars DataFrame (the way
Inspect AI's `evals_df` / `samples_df` do), and every error speaks Python (argument names, not
command-line options).

    import wmo_lake as wl
    summary = wl.ingest(["runs/"], lake="lake")          # IngestSummary (.line(), .as_dict())
    wl.stats("lake", run="exp1")                          # rollout_stats rows
    wl.trials("lake", reward_key="score")                 # trials joined with their scorer cell
    wl.records("lake")                                    # trial_records; with_spans=True for spans
    wl.query("lake", "SELECT batch, avg(reward) FROM cells GROUP BY ALL")
    con = wl.connect("lake", max_tokens=4096)             # a read-only DuckDB connection

Settings are keyword arguments named as the DuckDB variables without `wmo_` (reward_key,
reward_mode, max_turns, max_tokens, context_budget, max_datum_tokens); see the README's
"Query-time settings".
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmo_lake.selection import scope_sql
from wmo_lake.statements import file_it_writes
from wmo_lake.store import LakeError

if TYPE_CHECKING:
    import duckdb
    import polars as pl

    from wmo_lake.ingest import IngestSummary

DEFAULT_LAKE = "lake"

# The library's messages were written for the command line; from Python they name arguments.
_OPTION_AS_ARGUMENT = [
    ("--no-split-guard", "no_split_guard=True"),
    ("--tasks", "tasks="),
    ("--where", "where="),
    ("--batch", "batch="),
    ("--run", "run="),
    ("--filter", "outcome="),
    ("--episodes", "episodes="),
    ("--format", "fmt="),
    ("--out", "out="),
    ("--lake", "lake="),
]
# `wmo_lake.collect`'s own arguments, named first: its --tasks is a file of task ids.
_COLLECT_OPTION_AS_ARGUMENT = [
    ("--template", "template"),
    ("--run-dir", "run_dir"),
    ("--step", "step"),
    ("--attempts", "attempts"),
    ("--tasks", "tasks_file="),
    ("--task", "tasks="),
    ("--set", "sets entry"),
]


# The commands the API has a function for (`wmo-lake forget`, `tables`, ... have none: named in an
# error from Python, they stay command lines, which work from any shell)
_FUNCTION_OF_COMMAND = {
    "ingest": "ingest",
    "sql": "query",
    "stats": "stats",
    "collect": "collect",
    "export datums": "export_datums",
    "export conversations": "export_conversations",
}


# words of a message's prose after an option, never its value (`give --lake a directory`)
_PROSE = "(?:a|an|the|to|and|or|with|for|of|in|on|that|which|is|as|when|if|so|its|too|only)"


def _pythonic(error: Exception, own: list[tuple[str, str]] | None = None) -> Exception:
    """The same error, its message naming Python arguments instead of command-line options
    (`own`: the calling function's options, which take precedence). A command line in backticks
    becomes the API function's call when there is one that takes its options; else (`wmo-lake
    forget ...`, `wmo-lake ingest --prune`) it stays as written, options and all."""
    import re

    from wmo_lake.settings import SETTINGS

    message = str(error)
    settings = [(s.flag, f"{s.name}=") for s in SETTINGS.values()]
    options = [*(own or []), *_OPTION_AS_ARGUMENT, *settings]
    known = {option for option, _ in options}
    kept: list[str] = []

    def as_call(command: re.Match[str]) -> str:
        words = command.group(1).split()  # (a quoted word's spaces split it: only flags count)
        function = _FUNCTION_OF_COMMAND.get(" ".join(words[:2])) or _FUNCTION_OF_COMMAND.get(
            words[0] if words else ""
        )
        flags = [word.split("=")[0] for word in words if word.startswith("--")]
        if function is not None and all(flag in known for flag in flags):
            return f"wmo_lake.{function}()"
        kept.append(command.group(0))
        return f"\0{len(kept) - 1}\0"

    # (its words may be shell-quoted, a backtick in a quoted lake path among them)
    message = re.sub(r"""`wmo-lake ((?:'[^']*'|"[^"]*"|[^`'"])*)`""", as_call, message)
    for option, argument in options:
        word = rf"(?<![\w-]){re.escape(option)}(?![\w-])"
        if argument.endswith("="):
            # `--batch X` is `batch=X`; an option before prose or punctuation (`give --lake a
            # directory`, `--batch / --run`, `(--max-tokens)`) is the argument's bare name
            message = re.sub(rf"{word}\s(?!{_PROSE}\s|/\s)(?=[^\s,;)])", argument, message)
            argument = argument[:-1]
        message = re.sub(word, argument, message)
    message = re.sub("\0(\\d+)\0", lambda m: kept[int(m.group(1))], message)
    clone = type(error)(message)
    return clone


def _speaking_python(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except LakeError as error:
            raise _pythonic(error) from None
        except Exception as error:
            from wmo_lake.export import ExportError
            from wmo_lake.stopping import query_interrupted

            if isinstance(error, ExportError):
                raise _pythonic(error) from None
            if query_interrupted(error):  # (a Ctrl-C DuckDB took mid-query is one all the same)
                raise KeyboardInterrupt from error
            raise

    return wrapper


def collect(*args: Any, **kwargs: Any) -> Any:
    """`wmo_lake.collector.collect`, its errors naming this function's arguments."""
    from wmo_lake.collector import CollectError
    from wmo_lake.collector import collect as collect_step

    try:  # (a command line kept in a message, `wmo-lake forget`, names the lake given)
        result = collect_step(*args, **kwargs)
    except (CollectError, LakeError) as error:
        raise _pythonic(error, _COLLECT_OPTION_AS_ARGUMENT) from None
    # the notes in this function's terms too ("a task's group is its attempts (attempts=, ...)")
    result.notes = [
        str(_pythonic(LakeError(note), _COLLECT_OPTION_AS_ARGUMENT)) for note in result.notes
    ]
    return result


def _settings(settings: dict[str, Any]) -> dict[str, Any]:
    """Keyword settings as the DuckDB variables the views read; unknown names are a TypeError,
    as for any unexpected keyword argument."""
    from wmo_lake.settings import SETTINGS

    known = {name: setting.variable for name, setting in SETTINGS.items()}
    variables: dict[str, Any] = {}
    for name, value in settings.items():
        variable = known.get(name.removeprefix("wmo_"))
        if variable is None:
            raise TypeError(
                f"unknown setting {name!r}; the settings are {', '.join(sorted(known))}"
            )
        variables[variable] = value
    return variables


@_speaking_python
def ingest(
    paths: str | Path | Iterable[str | Path],
    lake: str | Path = DEFAULT_LAKE,
    *,
    sink_roots: Iterable[tuple[str | Path, str | Path]] = (),
    workers: int | None = None,
) -> IngestSummary:
    """Read harbor run trees into `lake` and return the summary (`.line()`, `.as_dict()`,
    `.problems`). Idempotent: unchanged trial dirs are not parsed again. `sink_roots`: (OLD, NEW)
    pairs, as `--sink-root OLD=NEW`: a pi-bridge job's sinks recorded under OLD are read from
    NEW."""
    from wmo_lake.ingest import ingest as run_ingest

    if isinstance(paths, str | Path):
        paths = [paths]
    folders = [Path(p) for p in paths]
    if Path(lake).exists() and not Path(lake).is_dir():
        raise ValueError(
            f"ingest(): lake={str(lake)!r} is a file; give a lake directory (an existing lake, "
            "or a path where one is to be made)"
        )
    if not folders:
        raise ValueError("ingest() needs at least one path to a harbor run tree")
    for folder in folders:
        if not folder.is_dir():
            raise FileNotFoundError(f"ingest(): {folder} is not a directory")
    roots = tuple(_sink_root(pair) for pair in sink_roots)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)):
        raise TypeError(f"ingest(): workers must be an int >= 1 or None, got {workers!r}")
    if workers is not None and workers < 1:
        raise ValueError(f"ingest(): workers must be >= 1 (or None: one per core), got {workers}")
    summary = run_ingest(folders, Path(lake), sink_roots=roots, workers=workers)
    from wmo_lake.checks import NoTrialsWarning, warn_from_caller

    for path in summary.paths_without_trials:  # (a mistyped path read as a success)
        warn_from_caller(f"ingest(): no trial dirs under {path}", NoTrialsWarning)
    return summary


def _check_selection(batch: Any, run: Any) -> None:
    """`batch` (a glob) and `run` are text or None."""
    for name, value in (("batch", batch), ("run", run)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a str (or None: every batch), got {value!r}")


def _sink_root(pair: Any) -> tuple[str, str]:
    """One (OLD, NEW) pair of `sink_roots` as strings; a string ('/old=/new', or 'ab', which
    unpacked as a pair of characters) is refused, naming the form."""
    if isinstance(pair, str | bytes) or not isinstance(pair, tuple | list) or len(pair) != 2:
        raise TypeError(
            f"ingest(): each of sink_roots must be an (OLD, NEW) pair of paths, got {pair!r}"
        )
    old, new = pair
    return str(old), str(new)


def _warn_on_scope(
    con: duckdb.DuckDBPyConnection,
    batch: str | None = None,
    run: str | None = None,
    batches: list[str] | None = None,
    *,
    exporting: bool = False,
) -> None:
    """The shared reward-key check over the selection (`batch`, `run`, `batches`), told in
    Python; `exporting`: also the rewards that are no measurement (exported as 0.0 stand-ins,
    where WMO's scorer refuses their batch), and batches that are a part of their step (a harbor
    job not finished, or finished short of its trials)."""
    from wmo_lake.checks import warn_on_unused_reward_key
    from wmo_lake.incomplete_jobs import warn_on_incomplete_jobs

    warn_on_unused_reward_key(
        con,
        batch_glob=batch,
        run=run,
        batches=batches,
        rewrite=_in_python_terms,
        invalid_rewards=exporting,
    )
    if exporting:
        warn_on_incomplete_jobs(
            con, batch_glob=batch, run=run, batches=batches, rewrite=_in_python_terms
        )


def _in_python_terms(text: str) -> str:
    """A warning's text naming Python arguments and functions (see `_pythonic`)."""
    return str(_pythonic(LakeError(text)))


def _open(
    lake: str | Path,
    settings: dict[str, Any],
    batch: str | None = None,
    run: str | None = None,
    *,
    incomplete_jobs: bool = False,
) -> duckdb.DuckDBPyConnection:
    """`incomplete_jobs`: also warn of batches in scope whose harbor job has not finished, or
    finished short of its trials (a query of per-batch figures, then of a part of the step)."""
    from wmo_lake.incomplete_jobs import warn_on_incomplete_jobs
    from wmo_lake.lake import connect as open_lake

    con = open_lake(lake, _settings(settings), check=False, rewrite=_in_python_terms)
    try:
        with _naming_damage(lake):  # (the checks are the first queries of the lake)
            _warn_on_scope(con, batch, run)
            if incomplete_jobs:
                warn_on_incomplete_jobs(con, batch_glob=batch, run=run, rewrite=_in_python_terms)
    except BaseException:  # (warnings turned into errors)
        con.close()
        raise
    return con


@_speaking_python
def connect(lake: str | Path = DEFAULT_LAKE, **settings: Any) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection with every table and view of `lake`, settings applied."""
    return _open(lake, settings)


def _query(
    lake: str | Path,
    sql: str,
    params: dict[str, Any] | None,
    settings: dict[str, Any],
    batch: str | None = None,
    run: str | None = None,
    *,
    incomplete_jobs: bool = False,
) -> pl.DataFrame:
    if not isinstance(sql, str):
        raise TypeError(f"query(): sql must be a str of SQL, got {type(sql).__name__}")
    _check_selection(batch, run)
    if not sql.strip():
        raise ValueError("query(): the query is empty; give one SQL statement")
    con = _open(lake, settings, batch, run, incomplete_jobs=incomplete_jobs)
    try:
        with _naming_damage(lake):
            return _query_on(con, sql, params, batch, run)
    finally:
        con.close()


@contextlib.contextmanager
def _naming_damage(lake: str | Path) -> Iterator[None]:
    """A query's DuckDB error (or an export's, which wraps it), as the lake's damage when it has
    any (a segment deleted or cut short by hand: DuckDB's own words are a glob that matched
    nothing, or "No magic bytes"), as the commands say it."""
    import duckdb

    from wmo_lake.export import ExportError
    from wmo_lake.store import Store, may_be_damage

    try:
        yield
    except (duckdb.Error, ExportError) as error:
        # (as `wmo-lake sql` asks: a glob that matched nothing is an IO error, a confined one a
        # permission error, and a cut file's error names it; `export` asks after any failure)
        kinds = (duckdb.IOException, duckdb.PermissionException, ExportError)
        damaged = None
        if isinstance(error, kinds) or may_be_damage(error):
            damaged = Store(Path(lake)).damage(error)
        if damaged is None:
            raise
        raise damaged from error


def _query_on(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: dict[str, Any] | None,
    batch: str | None,
    run: str | None,
) -> pl.DataFrame:
    statements = con.extract_statements(sql)
    for statement in statements:
        # the database is read-only, but a COPY TO writes any file (the lake's own
        # manifest too), an ATTACH another database, and a PREPARE may hold either
        # (EXECUTE runs it): refused, as `wmo-lake sql` refuses them
        if statement.type.name in _FILE_WRITERS:
            raise ValueError(
                f"query(): {statement.type.name} may write a file, and the lake is "
                "read-only to query() (its parameters are `params=`); write the DataFrame "
                "it returns instead (df.write_parquet(...)), or use `wmo-lake sql QUERY "
                "--output FILE`"
            )
        setting = file_it_writes(statement)
        if setting is not None:  # (a profile written over the lake's manifest breaks the lake)
            raise ValueError(
                f"query(): {setting} would have DuckDB write files, and the lake is read-only "
                "to query(); EXPLAIN ANALYZE gives a query's profile as rows"
            )
    result = con.sql(sql, params=params)
    if result is None or statements[-1].type.name in _NO_ROWS:  # only comments; a SET
        raise ValueError(
            f"query(): {sql.strip()[:60]!r} returns no rows: give a SELECT (a query that "
            "is only comments is empty)"
        )
    frame = _polars(result)
    if frame.is_empty() and (batch is not None or run is not None):
        from wmo_lake.checks import warn_on_no_match

        warn_on_no_match(con, batch, run)
    return frame


# DuckDB types whose values polars would get changed, or not at all, and how.
CHANGED_ON_THE_WAY = {
    "bit": "as DuckDB's internal bytes",
    "bignum": "as DuckDB's internal bytes",
    "time with time zone": "without its UTC offset",
    "union": "polars reads no union",
    "variant": "as Parquet Variant bytes, which polars does not decode",
}


def _polars(result: duckdb.DuckDBPyRelation) -> pl.DataFrame:
    """The result as polars, with no value changed on the way: a UHUGEINT (which DuckDB hands
    to Arrow as a signed 128-bit value: 2^128 - 1 came out -1) as Decimal(38, 0), exact or an
    error past 10^38. (Times keep the connection's zone name, 'Etc/UTC' or 'UTC': the frame's
    dtype is the one `wl.connect(...).sql(...).pl()` gives on the same machine.)"""
    from wmo_lake.output import _quote, distinct_names, type_ids

    kinds = [str(kind).upper() for kind in result.types]
    for name, kind in zip(result.columns, result.types, strict=True):
        held = type_ids(kind)
        if "interval" in held:  # (polars cannot read Arrow's month-day-nano interval)
            raise ValueError(
                f"query(): column {name!r} is or holds an INTERVAL, which polars cannot hold; "
                "give it as a number in the SQL: epoch(finished_at - started_at) is its "
                "seconds, or keep both times and subtract them in polars"
            )
        changed = sorted(held & CHANGED_ON_THE_WAY.keys())
        if changed:
            raise ValueError(
                f"query(): column {name!r} is or holds a {changed[0].upper()}, which would reach "
                f"polars changed ({CHANGED_ON_THE_WAY[changed[0]]}); cast it to VARCHAR in the "
                "SQL"
            )
    if "UHUGEINT" in kinds:
        result = distinct_names(result)  # (a projection by name reads N and n as one)
        result = result.project(
            ", ".join(
                f"{_quote(name)}::DECIMAL(38, 0) AS {_quote(name)}"
                if kind == "UHUGEINT"
                else _quote(name)
                for name, kind in zip(result.columns, kinds, strict=True)
            )
        )
    return result.pl()


@_speaking_python
def query(
    lake: str | Path, sql: str, params: dict[str, Any] | None = None, **settings: Any
) -> pl.DataFrame:
    """The result of one read-only query over `lake` as a polars DataFrame (`$name` parameters
    bound from `params`)."""
    return _query(lake, sql, params, settings)


# Statements query() refuses (by DuckDB's StatementType name): each may write a file.
_FILE_WRITERS = frozenset({"COPY", "EXPORT", "ATTACH", "COPY_DATABASE", "PREPARE"})

# Statements that return no rows: query() has nothing to give for them.
_NO_ROWS = frozenset({"SET", "VARIABLE_SET", "TRANSACTION", "LOAD", "PREPARE"})

_SCOPE = f"""
WHERE {scope_sql()}
"""


@_speaking_python
def stats(
    lake: str | Path = DEFAULT_LAKE,
    *,
    batch: str | None = None,
    run: str | None = None,
    **settings: Any,
) -> pl.DataFrame:
    """WMO's `rollout_stats`, one row per batch in run/step order (rates as fractions; the
    columns are exactly the `rollout_stats` view's). `batch` is a glob ('*' crosses '/').
    Warns `UnfinishedJobWarning` when a batch comes from a harbor job that has not finished,
    `ShortJobWarning` when from a finished one holding fewer trials than it plans."""
    from wmo_lake.stats import STATS_QUERY

    params = {"batch_glob": batch, "run": run}
    return _query(lake, STATS_QUERY, params, settings, batch, run, incomplete_jobs=True)


@_speaking_python
def trials(
    lake: str | Path = DEFAULT_LAKE,
    *,
    batch: str | None = None,
    run: str | None = None,
    **settings: Any,
) -> pl.DataFrame:
    """One row per trial: every `trials` column, then the scorer's reading from `cells`
    (task_id, attempt, reward, passed, infra_failed, graded_score) and the stop reason."""
    sql = f"""
        SELECT t.*, c.task_id, c.attempt, c.reward, c.passed, c.infra_failed, c.graded_score,
               r.stop_reason
        FROM trials AS t
        JOIN cells AS c USING (trial_key)
        JOIN trial_stop_reasons AS r USING (trial_key)
        WHERE {scope_sql("t.batch", "t.run")}
        ORDER BY t.run NULLS LAST, t.step NULLS LAST, t.batch, t.trial_name
    """
    return _query(lake, sql, {"batch_glob": batch, "run": run}, settings, batch, run)


@_speaking_python
def records(
    lake: str | Path = DEFAULT_LAKE,
    *,
    with_spans: bool = False,
    batch: str | None = None,
    run: str | None = None,
    **settings: Any,
) -> pl.DataFrame:
    """WMO's `TrialRecord`s, one row per trial (`trial_records`); `with_spans=True` adds the
    token spans with full prompts (`trial_records_with_spans`, much heavier)."""
    view = "trial_records_with_spans" if with_spans else "trial_records"
    sql = (
        f"SELECT * FROM {view} {_SCOPE} ORDER BY run NULLS LAST, step NULLS LAST, batch, trial_name"
    )
    return _query(lake, sql, {"batch_glob": batch, "run": run}, settings, batch, run)


@_speaking_python
def export_datums(
    lake: str | Path,
    out: str | Path,
    *,
    tasks: str | Path | None = None,
    no_split_guard: bool = False,
    batch: str | None = None,
    run: str | None = None,
    where: str | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Write the `datums` view to the Parquet file `out` (and `out`.manifest.json); returns the
    manifest. Pass `tasks=REGISTRY` (only train tasks) or `no_split_guard=True`, not both."""
    from wmo_lake.datums import export_datums as run_export

    options = _export_options(tasks, no_split_guard, batch, run, settings)
    _format_of(out, None, ("parquet",), lake)
    with _naming_damage(lake):
        return run_export(Path(lake), Path(out), where=where, **options)


@_speaking_python
def export_conversations(
    lake: str | Path,
    out: str | Path,
    *,
    tasks: str | Path | None = None,
    no_split_guard: bool = False,
    fmt: str | None = None,
    episodes: str = "all",
    outcome: str = "all",
    subagents: bool = True,
    batch: str | None = None,
    run: str | None = None,
    **settings: Any,
) -> dict[str, Any]:
    """Write agent conversations (SFT data) to `out` (jsonl or parquet: `fmt`, else what `out`'s
    extension says, else jsonl) with its manifest; returns the manifest. Pass `tasks=REGISTRY`
    or `no_split_guard=True`, not both."""
    from wmo_lake.conversations import export_conversations as run_export

    options = _export_options(tasks, no_split_guard, batch, run, settings)
    fmt = _format_of(out, fmt, ("jsonl", "parquet"), lake)
    with _naming_damage(lake):
        return run_export(
            Path(lake),
            Path(out),
            fmt=fmt,
            episodes=episodes,
            outcome=outcome,
            subagents=subagents,
            **options,
        )


def _export_options(
    tasks: str | Path | None,
    no_split_guard: bool,
    batch: str | None,
    run: str | None,
    settings: dict[str, Any],
) -> dict[str, Any]:
    """The arguments both exports take, checked: the split guard (one of `tasks` and
    `no_split_guard`), the selection, the settings, and the reward-key check on the export."""
    _require_guard(tasks, no_split_guard)
    _check_selection(batch, run)
    return {
        "tasks": Path(tasks) if tasks is not None else None,
        "no_split_guard": no_split_guard,
        "batch_glob": batch,
        "run": run,
        "settings": _settings(settings),
        "check": functools.partial(_warn_on_scope, batch=batch, run=run, exporting=True),
    }


def _format_of(out: str | Path, fmt: str | None, allowed: tuple[str, ...], lake: str | Path) -> str:
    """The export's format for `out`, by the CLI's rule (`file_formats.format_for`): an
    extension that names another format than the export writes is refused, not written over,
    and so is a file of the lake's own (`file_formats.refuse_lake_file`)."""
    from wmo_lake.export import ExportError
    from wmo_lake.file_formats import FormatError, format_for, refuse_lake_file

    try:
        chosen = format_for(Path(out), fmt, allowed, option="--out", writer="this export")
        refuse_lake_file(Path(out), Path(lake), option="--out")
    except FormatError as error:
        raise ExportError(str(error)) from None
    return chosen


def _require_guard(tasks: str | Path | None, no_split_guard: bool) -> None:
    from wmo_lake.export import ExportError

    if tasks is not None and no_split_guard:
        raise ExportError("pass tasks=REGISTRY or no_split_guard=True, not both")
    if tasks is None and not no_split_guard:
        raise ExportError(
            "refusing to export without a split guard: pass tasks='tasks.json' (only train "
            "tasks are exported) or no_split_guard=True to export every task"
        )


@_speaking_python
def load_datums(path: str | Path, tasks: str | Path | None = None) -> pl.DataFrame:
    """A datums export, verified against its manifest (and the registry `tasks`)."""
    from wmo_lake.datums import load_verified

    return load_verified(path, tasks=tasks)


@_speaking_python
def load_conversations(path: str | Path, tasks: str | Path | None = None) -> pl.DataFrame:
    """A conversations export, verified against its manifest (and the registry `tasks`), as a
    DataFrame (`messages` a list of {role, content} structs)."""
    from wmo_lake.conversations import load_verified

    return load_verified(path, tasks=tasks)


__all__ = [
    "LakeError",
    "connect",
    "export_conversations",
    "export_datums",
    "ingest",
    "load_conversations",
    "load_datums",
    "query",
    "records",
    "stats",
    "trials",
]
