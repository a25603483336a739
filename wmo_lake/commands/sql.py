"""`wmo-lake sql`: read-only SQL over the lake's tables and views."""

from __future__ import annotations

import difflib
import errno
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any, TextIO

import click
import duckdb

from wmo_lake.commands.options import (
    datum_options,
    fail,
    fail_if_damaged,
    format_for,
    lake_failure,
    lake_hint,
    lake_option,
    missing_dir_text,
    output_options,
    refuse_fd_output,
    refuse_lake_file,
    refuse_long_name,
    setting_options,
    settings_from,
)
from wmo_lake.lake import connect, times_in_utc
from wmo_lake.output import FORMATS, OutputFile, copy_query, copy_target, write_result
from wmo_lake.settings import BY_VARIABLE, whole_number
from wmo_lake.statements import file_it_writes, tokens
from wmo_lake.stopping import appends, ctrl_c_stops, finished
from wmo_lake.store import LakeError, Store, decoding_failure, may_be_damage
from wmo_lake.terminal import terminal_width

# Statements that write files outside the database. The connection cannot write anywhere but
_WRITTEN = "the result is written in full"
CLOSED_STDIN = "`-` reads the query from stdin, which is closed; give the query as an argument"
# the lake's own Parquet files (see connect(files_only=True)); these are refused before they run
# so that no statement can reach even those.
FILE_WRITERS = {duckdb.StatementType.COPY, duckdb.StatementType.EXPORT}
# Statements meant to change a database: when one fails (the read-only database refused it, or
# its binder did first, e.g. INSERT into a view), the message says which command does that.
WRITERS = FILE_WRITERS | {
    getattr(duckdb.StatementType, name)
    for name in (
        *("INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "ATTACH", "DETACH"),
        *("MERGE_INTO", "VACUUM", "LOAD", "COPY_DATABASE", "UPDATE_EXTENSIONS"),
    )
    if hasattr(duckdb.StatementType, name)
}


SPARK_READ_ONLY = (
    *("SELECT", "WITH", "SET", "EXPLAIN", "DESCRIBE", "DESC", "SHOW", "FROM", "VALUES", "TABLE"),
    "(",
)
# Words of Spark SQL that write, anywhere in a statement: `WITH t AS (...) INSERT OVERWRITE
# DIRECTORY 'lake/tables/trials' ...` starts like a read and replaces a table's files.
SPARK_WRITE_WORDS = frozenset(
    {"INSERT", "OVERWRITE", "DIRECTORY", "CREATE", "DROP", "ALTER", "DELETE", "UPDATE", "MERGE"}
    | {"TRUNCATE", "LOAD", "ADD", "REFRESH", "MSCK", "REPAIR", "CACHE", "UNCACHE", "COPY"}
    | {"ATTACH"}
)


def _read_only_message(what: str, ctx: click.Context, lake: Path) -> str:
    lake_args = lake_hint(ctx, lake)  # (only when said)
    return (
        f"the lake is read-only to `wmo-lake sql` ({what}). To add or replace trials run "
        f"`wmo-lake ingest PATH{lake_args}`; to remove batches `wmo-lake forget --batch "
        f"GLOB{lake_args}`; to save a result pass --output FILE"
    )


# DuckDB's error for a FROM of a quoted path it may not look at: "Table with name /x does not exist"
_PATH_AS_TABLE = re.compile(r"Table with name \S*/\S* does not exist")


# Spark's error for `text.`/a/file`` once SQL on files is off: a table named by a path
_SPARK_PATH_AS_TABLE = re.compile(r"`\w+`\.`[^`]*/[^`]*`")


def _spark_said(error: BaseException) -> str:
    """The line of a pyspark error that says what went wrong: its first, or for an error raised
    in the JVM (py4j's "An error occurred while calling o58.parquet.") the Java exception's,
    which names the file and the cause; for Spark's "Exception thrown in awaitResult:", which
    says nothing, its first cause's."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()] or [repr(error)]
    if lines[0].startswith("An error occurred while calling") and len(lines) > 1:
        lines = [line.removeprefix(": ") for line in lines[1:]]
    if lines[0].rstrip().endswith("Exception thrown in awaitResult:"):  # (says nothing: its cause)
        cause = next((line for line in lines if line.startswith("Caused by: ")), None)
        return lines[0] if cause is None else cause.removeprefix("Caused by: ")
    return lines[0]


def _confined_message(error: str, lake: Path) -> str:
    """A read of a file that is not one of the lake's (a glob too: DuckDB lists a directory for
    it): a read, so no advice about writing."""
    ctx = click.get_current_context(silent=True)
    return (
        f"`wmo-lake sql` reads the lake's tables and views, not other files or globs ({error}). "
        f"`wmo-lake tables{lake_hint(ctx, lake) if ctx else ''}` lists what there is "
        "to query; for other files use DuckDB itself or `wl.connect(LAKE)` in Python, whose "
        "file access is not confined"
    )


@click.command()
@click.argument("query")
@lake_option
@output_options
@click.option(
    "--limit",
    type=whole_number(0),
    metavar="N",
    default=None,
    help="At most N rows of the result [default: all; the table format shows 1000].",
)
@setting_options
@datum_options
@click.option(
    "--engine",
    type=click.Choice(["duckdb", "spark"]),
    default="duckdb",
    show_default=True,
    help="spark: register the tables and the transpiled views in a SparkSession (the cluster "
    "spark-submit or SPARK_MASTER names, else local[*]) and run QUERY there as Spark SQL. "
    "Needs the extra wmo-lake[spark] and Java 17.",
)
@click.pass_context
def sql(
    ctx: click.Context,
    query: str,
    lake: Path,
    fmt: str | None,
    output: Path | None,
    limit: int | None,
    engine: str,
    **options: Any,
) -> None:
    """Run read-only SQL over the lake's tables and views. QUERY '-' reads it from stdin;
    --output '-' writes to stdout.

    Any statement DuckDB runs that does not write works: SELECT, FROM-first queries, PIVOT /
    UNPIVOT, DESCRIBE, SUMMARIZE, SHOW TABLES, PRAGMA table_info, EXPLAIN ANALYZE, SET. The lake is
    opened as a read-only database that can read only its own files, so a write fails (exit 2)
    and says which command changes the lake. Several statements may be given; the last one's
    result is printed, streamed (memory bounded by a batch of rows, not the result).

    Tables: jobs, trials, spans, stop_reasons, tests, trajectories, steps, tool_calls,
    problems. Views: cells, trial_records (light), trial_records_with_spans, rollout_stats,
    spans_full, datums, datum_stats, episodes, conversations, and more: `wmo-lake tables`
    lists them all, `wmo-lake schema NAME` shows one. Settings are DuckDB variables, so plain SQL
    (here, or in any DuckDB client on lake/lake.duckdb) sets them too:

    \b
      SET VARIABLE wmo_reward_key = 'score';            -- --reward-key
      SET VARIABLE wmo_reward_mode = 'positive-binary'; -- --reward-mode
      SET VARIABLE wmo_max_turns = 30;                  -- --max-turns
      SET VARIABLE wmo_max_tokens = 4096;               -- --max-tokens
      SET VARIABLE wmo_context_budget = 32768;          -- --context-budget
      SET VARIABLE wmo_max_datum_tokens = 32768;        -- --max-datum-tokens

    \b
    Examples:
      wmo-lake sql "SELECT batch, count(*) FROM trials GROUP BY ALL"
      wmo-lake sql "FROM trial_records SELECT batch, passed" --limit 20
      wmo-lake sql "PIVOT cells ON passed USING count(*) GROUP BY batch"
      wmo-lake sql "SUMMARIZE trials"
      wmo-lake sql --format json "SELECT * FROM rollout_stats"
      echo "SELECT * FROM problems" | wmo-lake sql - -o problems.csv   # csv, from the name
      wmo-lake sql --reward-key score "SELECT batch, avg(reward) FROM cells GROUP BY ALL"
      wmo-lake sql --engine spark "SET VAR wmo_max_tokens = 4096; SELECT * FROM rollout_stats"
    """
    if query == "-":
        if sys.stdin is None:  # (`0<&-`: Python has no stdin at all)
            fail(CLOSED_STDIN, 2)
        try:
            query = sys.stdin.read()
        except UnicodeDecodeError as error:
            fail(f"the query on stdin is not UTF-8 text (byte {error.start})", 2)
    try:
        query.encode("utf-8")
    except UnicodeEncodeError as error:  # bytes no UTF-8 decodes, kept by Python as surrogates
        fail(f"the query is not UTF-8 text (character {error.start}); write it in UTF-8", 2)
    if output == Path("-"):  # stdout, as QUERY '-' is stdin (it wrote a file named '-')
        output = None
    if output is None:
        fmt = fmt or "table"
    else:
        fmt = format_for(output, fmt, FORMATS, option="--output", writer="`wmo-lake sql`")
        refuse_lake_file(output, lake, "--output")
    if not query.strip():
        fail("the query is empty", 2)
    if fmt == "parquet" and output is None:
        fail("--format parquet needs --output FILE.parquet", 2)
    stream = sys.stdout  # where a result with no --output goes
    if output is not None:
        refuse_long_name(output, "--output")
        refuse_fd_output(output, "--output", streams=(1, 2))
    named = _std_stream(output) if output is not None else None
    if fmt == "parquet" and named is not None and appends(named.fileno()):
        # (`>> log`: the rename would replace what the log holds)
        fail(
            f"--format parquet to {output}: {'stderr' if named is sys.stderr else 'stdout'} "
            "appends to that file (>>), and a Parquet file cannot be appended to; give "
            "--output FILE.parquet of its own",
            2,
        )
    if fmt != "parquet" and named is not None:
        # `-o /dev/stdout > log`, `-o /dev/stderr 2>> log`: the file that stream appends to,
        # written as that stream (a rename over it, or DuckDB's opening it afresh, would drop
        # what the shell had written there)
        output, stream = None, named
    if output is not None:
        directory = OutputFile(output).final.parent  # (a symlink's: its target is written)
        if not directory.is_dir():  # (a usage error, as the report's --out in a missing dir)
            fail(f"cannot write {output}: {missing_dir_text(directory)}", 2)
    if engine == "spark":
        run_on_spark(query, lake, fmt, output, settings_from(options), limit, stream)
        return
    try:
        target = copy_target(output, stream) if fmt != "table" else None
        with warnings.catch_warnings(record=True) as caught:  # said as `warning: ...` lines
            warnings.simplefilter("always")
            con = connect(
                lake, settings_from(options), files_only=True, writable=[target] if target else []
            )
        for warning in caught:
            click.echo(f"warning: {warning.message}", err=True)
        if output is None and target is not None:  # (DuckDB's bar among the rows it writes)
            con.execute("SET enable_progress_bar = false")
    except LakeError as error:
        lake_failure(ctx, lake, error)
    statements = _parse(con, query, ctx, lake)
    statement = statements[0]
    try:
        with ctrl_c_stops(con):
            for statement in statements[:-1]:
                con.execute(statement)
                if hasattr(con, "complete"):  # DuckDB 2 runs no query while a result is unread
                    con.complete()  # (to its end, its rows unread)
            if len(statements) > 1:
                _warn_of_unknown_settings(con)
            statement = statements[-1]
            text = _without_its_end(statement.query)
            if statement.type == duckdb.StatementType.SELECT and copy_query(
                con, text, fmt, output, stream, limit=limit
            ):
                finished(_WRITTEN)
                return
            relation = con.sql(text)
            if relation is None:
                return
            write_result(
                relation,
                fmt,
                output,
                stream,
                limit=limit,
                width=terminal_width(stream),
                con=con,
                explain=statement.type == duckdb.StatementType.EXPLAIN,
            )
            finished(_WRITTEN)
    except duckdb.InterruptException:
        raise  # Ctrl-C: one line, exit 130 (wmo_lake.cli)
    except duckdb.IOException as error:
        if "Broken pipe" in str(error):  # (`| head`: the reader went away; DuckDB's COPY says so)
            # as click ends any other command whose stdout closed: exit 1, no message
            raise BrokenPipeError(errno.EPIPE, "Broken pipe") from None
        if target is not None and output is not None and Path(target).name in str(error):
            fail(f"cannot write {output}: {error}")
        fail_if_damaged(lake, error)
        fail(f"query failed: {_numbered_as_given(str(error), query)}")
    except duckdb.PermissionException as error:
        fail_if_damaged(lake)  # a missing segment is globbed for, outside allowed_paths
        if statement.type in WRITERS:
            fail(_read_only_message(f"it reads no other files: {error}", ctx, lake), 2)
        fail(_confined_message(_numbered_as_given(str(error), query), lake), 2)
    except duckdb.Error as error:
        if statement.type in WRITERS or "read-only mode" in str(error):
            fail(_read_only_message(f"{statement.type.name} refused: {error}", ctx, lake), 2)
        as_option = _SETTING_AS_OPTION.search(str(error))  # `SET wmo_max_tokens = 4096`
        if as_option is not None:
            hint = f"a setting is a DuckDB variable: SET VARIABLE {as_option.group(1)} = ..."
            fail(f"query failed: {error}\n({hint})", 2)
        if isinstance(error, duckdb.CatalogException) and _PATH_AS_TABLE.search(str(error)):
            # `FROM '/etc/passwd'`: a confined connection cannot look for the file, and DuckDB
            # says there is no such table
            fail(_confined_message(_numbered_as_given(str(error), query), lake), 2)
        if may_be_damage(error):
            # (a segment cut short or overwritten by hand, or lake.duckdb changed)
            fail_if_damaged(lake, error)
        if isinstance(error, (duckdb.CatalogException, duckdb.BinderException)):
            fail_if_damaged(lake)
            # a mistyped table, view or column: the query is wrong, as one that does not parse
            fail(f"query failed: {_numbered_as_given(str(error), query)}", 2)
        fail(f"query failed: {_numbered_as_given(str(error), query)}")
    except (UnicodeDecodeError, RuntimeError) as error:
        if not decoding_failure(error):
            raise
        # (DuckDB's bindings decoding a column name a segment's bytes changed in place)
        fail_if_damaged(lake, error)
        fail(f"query failed: {error}")
    except BrokenPipeError:
        raise  # (`| head`, through the relay: click ends the command, exit 1, no message)
    except OSError as error:
        where = output or ("stderr" if stream is sys.stderr else "stdout")
        fail(f"cannot write {where}: {error.strerror or error}")
    finally:
        con.close()


# DuckDB's context line in an error: `LINE 3: <the line's text>`
_ERROR_LINE = re.compile(r"^LINE (\d+): (.*)$(\n^ *\^+ *$)?", re.MULTILINE)


def _numbered_as_given(message: str, query: str) -> str:
    """DuckDB's error with its `LINE n:` counted in the SQL as given, not as wmo-lake ran it (a
    LIMIT, csv cells or a COPY around it put a one-line query on line 2 or 3): the line whose
    text it shows, when exactly one line of the SQL given has that text. A line of none (the
    text wmo-lake put around the query) is left out, with its caret line."""
    lines = query.splitlines()

    def renumber(match: re.Match[str]) -> str:
        shown = match.group(2).removeprefix("...").removesuffix("...")
        found = [number for number, line in enumerate(lines, 1) if shown and shown in line]
        if not found:
            return ""
        if len(found) > 1:
            return match.group(0)
        return f"LINE {found[0]}: {match.group(2)}{match.group(3) or ''}"

    return _ERROR_LINE.sub(renumber, message).rstrip()


# DuckDB's error for `SET wmo_x = ...` (a setting set as a configuration option)
_SETTING_AS_OPTION = re.compile(r'unrecognized configuration parameter "(wmo_\w+)"')


def _warn_of_unknown_settings(con: duckdb.DuckDBPyConnection) -> None:
    """A `wmo_` variable no setting reads (`SET VARIABLE wmo_reward_keys = ...`, misspelt)
    changes nothing: said on stderr, as the API refuses an unknown setting."""
    found = con.execute(
        "SELECT name FROM duckdb_variables() WHERE starts_with(name, 'wmo_') ORDER BY name"
    ).fetchall()
    for (name,) in found:
        if name not in BY_VARIABLE:
            close = difflib.get_close_matches(name, list(BY_VARIABLE), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            click.echo(f"warning: {name} is no setting{hint}; it changes nothing", err=True)


def _parse(con: duckdb.DuckDBPyConnection, query: str, ctx: click.Context, lake: Path) -> list[Any]:
    """QUERY's statements, parsed by the lake's own connection (duckdb.extract_statements would
    start DuckDB's default in-memory database first: ~30-50 ms of every run), refusing any that
    writes a file before one runs."""
    try:
        statements = con.extract_statements(query)
    except duckdb.Error as error:
        con.close()
        fail(f"cannot parse the query: {error}", 2)
    if not statements:
        con.close()
        fail("the query is empty", 2)
    for statement in statements:
        if statement.type in FILE_WRITERS:
            con.close()
            fail(_read_only_message(f"{statement.type.name} would write a file", ctx, lake), 2)
        setting = file_it_writes(statement)
        if setting is not None:  # (DuckDB aborted the process on a confined enable_logging)
            con.close()
            fail(_read_only_message(f"{setting} would have DuckDB write files", ctx, lake), 2)
    return statements


def _is_semicolon(kind: Any, token: bytes) -> bool:
    return bool(kind == duckdb.token_type.operator and token == b";")


def _without_its_end(statement: str) -> str:
    """One statement's text (as DuckDB's statement splitting gives it) without its `;` and the
    comments after it, which would end the subquery it is wrapped in: `SELECT * FROM (SELECT 1;
    -- done)` is a syntax error."""
    end = None
    for position, kind, token in reversed(tokens(statement)):
        if kind != duckdb.token_type.comment and not _is_semicolon(kind, token):
            break
        end = position
    return statement.encode()[:end].decode().rstrip()


def spark_statements(query: str) -> list[tuple[str, str]]:
    """QUERY's statements for Spark, each with its first word (which says whether it writes):
    split at the `;`s DuckDB's tokenizer finds, so one in a string, a quoted name or a comment
    splits nothing, and a statement of only comments is none. (Spark's backslash escape in a
    string, 'it\\'s', is not DuckDB's: a `;` after one in the same string would split it.)"""
    text = query.encode()
    statements: list[tuple[str, str]] = []
    start, first_word = 0, ""
    for position, kind, token in [*tokens(query), (len(text), None, b";")]:
        if kind is None or _is_semicolon(kind, token):
            if first_word:
                statements.append((text[start:position].decode().strip(), first_word))
            start, first_word = position + 1, ""
        elif kind != duckdb.token_type.comment and not first_word:
            first_word = token.decode().split(None, 1)[0]
    return statements


def spark_write_word(statement: str) -> str | None:
    """The first word of `statement` (outside strings, quoted names and comments) that makes
    Spark write, or None."""
    for _, kind, token in tokens(statement):
        if kind in (duckdb.token_type.keyword, duckdb.token_type.identifier):
            word = token.decode().upper()
            if word in SPARK_WRITE_WORDS:
                return word
    return None


def _std_stream(output: Path) -> TextIO | None:
    """This process's stdout or stderr when `output` is the file it is (`/dev/stdout`,
    `/proc/self/fd/2`, or the very file it is redirected to); else None."""
    try:
        named = os.stat(output)
    except (OSError, ValueError):  # (nothing there yet)
        return None
    for stream in (sys.stdout, sys.stderr):
        try:
            ours = os.fstat(stream.fileno())
        except (OSError, ValueError, AttributeError):  # (a stream with no fd)
            continue
        if (named.st_dev, named.st_ino) == (ours.st_dev, ours.st_ino):
            return stream
    return None


def _sets_a_variable(statement: str) -> bool:
    """Whether a SET statement is Spark's SET VAR / SET VARIABLE (a session variable)."""
    words = [
        token.decode().upper()
        for _, kind, token in tokens(statement)
        if kind != duckdb.token_type.comment
    ]
    return len(words) > 1 and words[1] in ("VAR", "VARIABLE")


def run_on_spark(
    query: str,
    lake: Path,
    fmt: str,
    output: Path | None,
    settings: dict[str, Any],
    limit: int | None = None,
    stream: TextIO | None = None,
) -> None:
    """`wmo-lake sql --engine spark`: the same tables and views in a SparkSession (Spark SQL;
    settings are session variables: SET VAR wmo_reward_key = 'score')."""
    split = spark_statements(query)
    if not split:
        fail("the query is empty", 2)
    for statement, first_word in split:
        writes = spark_write_word(statement)
        if writes is not None:
            fail(
                f"only read-only statements run here, and {writes} writes. To change the lake, "
                "use `wmo-lake ingest`; to save a result, pass --output FILE",
                2,
            )
        if first_word.upper() not in SPARK_READ_ONLY:  # (a typo too: not said to be a write)
            fail(
                f"a statement here starts with one of {', '.join(SPARK_READ_ONLY)}; got "
                f"{first_word!r}",
                2,
            )
        if first_word.upper() == "SET" and not _sets_a_variable(statement):
            # (`SET spark.sql.runSQLOnFiles=true` would let a query read any file)
            fail(
                "only SET VAR (a setting: SET VAR wmo_max_tokens = 4096) runs here; the Spark "
                "session's own configuration is not the query's to change",
                2,
            )
    statements = [statement for statement, _ in split]
    from wmo_lake import spark as lake_spark
    from wmo_lake.lake import _require

    try:  # (before Spark starts: a missing lake was said only after its ~5 s of start-up)
        _require(Store(lake))
    except LakeError as error:
        lake_failure(None, lake, error)
    fail_if_damaged(lake)
    try:
        session = lake_spark.local_session()
        try:
            lake_spark.register(session, lake, settings)
        except Exception as error:  # (pyspark's, before the query is read: the lake's)
            if not lake_spark.raised_by_spark(error):
                raise
            fail_if_damaged(lake, error)
            first = _spark_said(error)
            fail(f"cannot read the lake at {lake} on Spark: {first}")
        # the lake's tables and views only, as the DuckDB engine: no `text.`/any/file``
        session.conf.set("spark.sql.runSQLOnFiles", "false")
        for statement in statements[:-1]:
            session.sql(statement).collect()
        result = session.sql(statements[-1])
        # (limited on Spark: only those rows come back to the driver)
        table = (result if limit is None else result.limit(limit)).toArrow()
        # drawn by DuckDB in UTC, as Spark's session (and every lake connection) reads times
        drawer = duckdb.connect()
        times_in_utc(drawer)
        drawer.register("spark_result", table)
        out = stream or sys.stdout
        write_result(
            drawer.table("spark_result"),
            fmt,
            output,
            out,
            limit=limit,
            width=terminal_width(out),
            con=drawer,
        )
    except LakeError as error:
        fail(str(error))
    except ValueError as error:
        fail(str(error), 2)
    except Exception as error:  # pyspark's errors (AnalysisException, ...) share no base here
        if lake_spark.raised_by_spark(error):
            # (a segment deleted or overwritten by hand: said as the DuckDB engine says it; a
            # read failure's Java trace names the file)
            fail_if_damaged(lake, error)
            first = _spark_said(error)
            if "TABLE_OR_VIEW_NOT_FOUND" in first and _SPARK_PATH_AS_TABLE.search(first):
                fail(_confined_message(first, lake), 2)
            from pyspark.errors import AnalysisException

            # a mistyped table, column or function (Spark's analysis refused the query, as
            # DuckDB's catalog and binder do) is a usage error, as on the DuckDB engine; an
            # error while the rows are computed (a cast, a division) stays 1
            refused = isinstance(error, AnalysisException)
            fail(f"query failed on Spark: {first}", 2 if refused else 1)
        raise
