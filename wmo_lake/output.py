"""Writing a query result as table | csv | json | jsonl | parquet, to stdout or a file.

Results are streamed by DuckDB's own COPY, never built row by row in Python, so the bytes are
the same wherever they go: to a file (`--output`), a pipe or a terminal directly, and to a
redirected stdout or a Python stream through a FIFO a thread relays (`copy_target`). csv cells are
DuckDB's text (nested values its JSON), json/jsonl DuckDB's JSON with non-finite floats as null,
parquet DuckDB's zstd Parquet. A file is written under a temporary name and renamed when
complete, so an error or Ctrl-C leaves nothing half-written (`written_atomically`: through a
symlink to the file it names; a FIFO or device straight through).

The table format is drawn by `terminal.render_table`; Ctrl-C and SIGTERM while writing are
handled as `stopping` says (a stdout result cut off, a file's partial removed).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import functools
import io
import math
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from wmo_lake.stopping import execute_interruptibly, exit_on_sigterm
from wmo_lake.terminal import render_table

if TYPE_CHECKING:  # imported where used: `wmo-lake ingest` imports this module's FORMATS only
    import duckdb
    import pyarrow as pa

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
TABLE_ROWS = 1000  # the table format shows at most this many rows unless --limit says otherwise
NESTED_TYPES = {"list", "struct", "map", "array", "union"}
NUMERIC_TYPES = {
    "tinyint",
    "smallint",
    "integer",
    "bigint",
    "hugeint",
    "utinyint",
    "usmallint",
    "uinteger",
    "ubigint",
    "uhugeint",
    "float",
    "double",
    "decimal",
    "bignum",
}


def _plain(value: Any) -> Any:
    """A JSON-ready copy of a value DuckDB returned (maps come back as dicts already)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def to_arrow(relation: duckdb.DuckDBPyRelation) -> pa.Table:
    """The relation as one Arrow table (DuckDB 1.x returns a table, 2.x a batch reader)."""
    import pyarrow as pa

    result = relation.arrow()
    return result.read_all() if isinstance(result, pa.RecordBatchReader) else result


def rows_as_dicts(relation: duckdb.DuckDBPyRelation) -> list[dict[str, Any]]:
    names = relation.columns
    return [dict(zip(names, (_plain(v) for v in row), strict=True)) for row in relation.fetchall()]


def distinct_names(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """The relation with no two columns whose names DuckDB reads as one. Two columns of one
    name (`a.trials, b.trials`), or of names that differ only in case (`N`, `n`: DuckDB's names
    are case-insensitive): a projection that names its columns reads the first one twice. `*`
    gives them DuckDB's own distinct names (trials, trials_1), the ones its COPY writes."""
    if len({name.lower() for name in relation.columns}) < len(relation.columns):
        return relation.project("*")
    return relation


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_string(text: str) -> str:
    """A SQL string literal, where DuckDB cannot bind a parameter (DDL, a COPY's target, a struct
    field's name)."""
    return "'" + text.replace("'", "''") + "'"


def _type_id(duckdb_type: Any) -> str:
    return str(getattr(duckdb_type, "id", duckdb_type)).lower()


def _project(relation: duckdb.DuckDBPyRelation, expression_of: Any) -> duckdb.DuckDBPyRelation:
    columns = [
        f"{expression_of(_quote(name), _type_id(kind))} AS {_quote(name)}"
        for name, kind in zip(relation.columns, relation.types, strict=True)
    ]
    return relation.project(", ".join(columns))


# A CSV cell holds text: a nested value (list, array, struct, map, union) as DuckDB's JSON text,
# any other as DuckDB's own text for it (what its CSV writer writes). Written over COLUMNS(*)
# with typeof(), which DuckDB folds while binding, so it needs no column types from Python: a
# query is copied to CSV with one bind, not a bind to learn its types and another to run it.
CSV_CELLS = (
    "CASE WHEN typeof(COLUMNS(*)) SIMILAR TO '(STRUCT|MAP|UNION)\\(.*|.*\\]' "
    "THEN to_json(COLUMNS(*))::VARCHAR ELSE COLUMNS(*)::VARCHAR END"
)


def _as_finite(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """Non-finite floats as null (JSON has no NaN or Infinity), also inside lists, arrays,
    structs and maps (a span's sampled_logprobs may hold -inf): DuckDB's to_json and its JSON
    COPY would write them as bare NaN / -Infinity, which no JSON parser reads."""
    columns = [
        f"{_finite(_quote(name), kind)} AS {_quote(name)}"
        for name, kind in zip(relation.columns, relation.types, strict=True)
    ]
    return relation.project(", ".join(columns))


def type_ids(kind: Any) -> set[str]:
    """The type ids of a DuckDB type and of every type nested in it (lists, structs, maps,
    unions), by the types themselves (a struct field named `interval` is no INTERVAL)."""
    own = _type_id(kind)
    children = getattr(kind, "children", None) if own in NESTED_TYPES else None
    found = {own}
    for _, child in children or ():
        if not isinstance(child, int):
            found |= type_ids(child)
    return found


def _finite(value: str, kind: Any, depth: int = 0) -> str:
    """The SQL of `value` (of DuckDB type `kind`) with every non-finite float in it as NULL."""
    t = _type_id(kind)
    if t in ("float", "double"):
        return f"CASE WHEN isfinite({value}) THEN {value} END"
    if not type_ids(kind) & {"float", "double"}:
        return value
    children = dict(kind.children)
    item = f"_v{depth}"  # (a lambda variable per depth: nested lambdas must not shadow)
    inner = depth + 1
    if t in ("list", "array"):
        return f"list_transform({value}, lambda {item}: {_finite(item, children['child'], inner)})"
    if t == "struct":
        fields = []
        for name, sub in kind.children:
            field = f"struct_extract({value}, {sql_string(name)})"
            fields.append(f"{_quote(name)} := {_finite(field, sub, depth)}")
        return f"CASE WHEN {value} IS NOT NULL THEN struct_pack({', '.join(fields)}) END"
    if t == "map":
        # (a key stays: JSON writes it as text, "-inf" too, and a map refuses a NULL key)
        mapped = _finite(f"{item}.value", children["value"], inner)
        entry = f"struct_pack(key := {item}.key, value := {mapped})"
        return f"map_from_entries(list_transform(map_entries({value}), lambda {item}: {entry}))"
    return value  # (a union: left as DuckDB writes it)


def _as_text(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """Every column as display text: NULL as 'NULL', nested values as JSON."""

    def text(c: str, t: str) -> str:
        inner = f"to_json({c})::VARCHAR" if t in NESTED_TYPES else f"{c}::VARCHAR"
        return f"coalesce({inner}, 'NULL')"

    return _project(relation, text)


class OutputFile:
    """Where a result meant for the path `output` is written: under a temporary name beside the
    file it names, renamed over that file only when complete. `final` is that file with every
    symlink resolved, so a link is written through, not replaced by a file. A path that is not a
    regular file (a FIFO, a character device such as /dev/stdout) has no content to keep and
    cannot be renamed over: it is written straight through (`partial` is `final`)."""

    def __init__(self, output: Path) -> None:
        import stat

        try:
            through = not stat.S_ISREG(os.stat(output).st_mode)
        except OSError:  # nothing there yet (or unreadable: then opening it says why)
            through = False
        self.final = self.partial = output  # as named: /dev/stdout resolves to no path
        if through:
            return
        # A symlink loop is left as named: opening it says so, and nothing replaces it. (Python
        # 3.12's resolve raises on one; 3.13's returns a path still a link, which the rename
        # replaced with a file.)
        try:
            final = output.resolve()  # also a dangling link's target: the file it creates
        except (OSError, RuntimeError):
            return
        if final.is_symlink():
            return
        self.final = final
        self.partial = self.final.with_name(f".{self.final.name}.{os.getpid()}.tmp")

    @property
    def renamed(self) -> bool:
        return self.partial != self.final

    def commit(self) -> None:
        """`partial` is complete: put it in place."""
        if self.renamed:
            os.replace(self.partial, self.final)

    def discard(self) -> None:
        """The write failed or was stopped: remove the partial file (never a FIFO or device).
        A dir where it cannot be removed either (read-only) leaves the first error to be said."""
        if self.renamed:
            with contextlib.suppress(OSError):
                self.partial.unlink(missing_ok=True)


@contextlib.contextmanager
def written_atomically(output: Path) -> Iterator[OutputFile]:
    """Write `output` through an `OutputFile`: the caller writes its `partial` path, which is put
    in place when the block ends and removed on any error, Ctrl-C or SIGTERM. The one way every
    command (`sql --output`, `report --out`) writes a file it may replace."""
    target = OutputFile(output)
    with exit_on_sigterm():
        try:
            yield target
            target.commit()
        except BaseException:
            target.discard()
            raise


STDOUT_DEVICE = "/dev/stdout"


def copy_target(output: Path | None, stdout: TextIO) -> str:
    """The path DuckDB's COPY writes this result to: the partial file of `output`, or the
    process's real stdout when it is a pipe or a terminal, else this process's stdout relay
    (`stdout_relay`: a FIFO whose bytes `_copy` passes on to stdout as they come). So the bytes
    are DuckDB's COPY's wherever they go: a pipe, `> file` or a test's captured stream."""
    if output is not None:
        return str(OutputFile(output).partial)
    if stdout is sys.__stdout__ and os.path.exists(STDOUT_DEVICE):
        import stat

        try:
            fd = stdout.fileno()
            # a pipe or a terminal only: DuckDB opens the device afresh, which would truncate
            # a regular file (`>> file`) and write over what was already printed to it
            if (stat.S_ISFIFO(os.fstat(fd).st_mode) or os.isatty(fd)) and _reopens(STDOUT_DEVICE):
                return STDOUT_DEVICE
        except (OSError, ValueError):
            pass
    return stdout_relay()


def _reopens(device: str) -> bool:
    """Whether DuckDB can open `device` (stdout) afresh without waiting: not a pipe whose reader
    has gone (its open would wait for a reader for ever, where a write fails at once), nor one
    this user may write but not open (another user's pipe or terminal, as under `sudo -u`)."""
    try:
        fd = os.open(device, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:  # (ENXIO: a pipe with no reader; EACCES)
        return False
    os.close(fd)
    return True


@functools.cache
def stdout_relay() -> str:
    """The path of this process's stdout relay FIFO: a private dir of a random name in the temp
    dir, made just before a COPY goes through it and removed right after (`_copy_through_relay`),
    so nothing is left when the process is stopped before or after. One path for the process:
    `wmo-lake sql` allows its connection to write there before it knows whether a result will."""
    import atexit
    import secrets
    import tempfile

    directory = os.path.join(tempfile.gettempdir(), f"wmo-lake-{secrets.token_hex(8)}")
    path = os.path.join(directory, "stdout")
    atexit.register(_remove_relay, path)
    return path


def _remove_relay(path: str) -> None:
    """The relay FIFO and its dir gone."""
    for remove in (os.unlink, os.rmdir):
        with contextlib.suppress(OSError):
            remove(path)
        path = os.path.dirname(path)


def _write_file(output: Path, data: bytes) -> None:
    """`data` as `output`, written under a temporary name and renamed into place only when
    whole (removed on any error or Ctrl-C)."""
    with written_atomically(output) as target, open(target.partial, "wb") as stream:
        stream.write(data)


def write_result(
    relation: duckdb.DuckDBPyRelation,
    fmt: str,
    output: Path | None,
    stdout: TextIO,
    *,
    con: duckdb.DuckDBPyConnection,
    limit: int | None = None,
    width: int | None = None,
    explain: bool = False,
) -> None:
    """Write `relation` (a query of `con`) in `fmt` to `output` (a file) or `stdout`, streamed
    by DuckDB's own COPY on `con`, which must be allowed to write to `copy_target`: the same
    bytes wherever they go. `explain`: the result of an EXPLAIN, whose table is DuckDB's own
    drawing of the plan."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "parquet" and output is None:
        raise ValueError("--format parquet needs --output FILE.parquet")
    relation = distinct_names(relation)
    if limit is not None:
        relation = relation.limit(limit)
    if fmt == "table":
        _write_table(relation, output, stdout, limit=limit, width=width, explain=explain)
        return
    if fmt == "csv":
        query = f"SELECT {CSV_CELLS} FROM (\n{relation.sql_query()}\n)"
    elif fmt == "parquet":
        query = relation.sql_query()
    else:
        query = _as_finite(relation).sql_query()
    _copy(con, query, fmt, copy_target(output, stdout), output, stdout)


def copy_query(
    con: duckdb.DuckDBPyConnection,
    query: str,
    fmt: str,
    output: Path | None,
    stdout: TextIO,
    *,
    limit: int | None = None,
) -> bool:
    """Write the result of `query` (one SELECT) as `write_result` would, by DuckDB's COPY of
    the query text itself: csv and parquet need no column types, so the query is bound once,
    by the COPY. False (nothing written) when that does not apply: another format, a
    destination COPY cannot write (`copy_target`), or a query DuckDB cannot take as a subquery
    (a parser or binder error; then `write_result` says what is wrong)."""
    import duckdb

    target = copy_target(output, stdout) if fmt in ("csv", "parquet") else None
    if target is None:
        return False
    # on lines of their own: a trailing -- comment in the query must not swallow the paren
    query = f"SELECT * FROM (\n{query}\n)" + ("" if limit is None else f" LIMIT {int(limit)}")
    if fmt == "csv":
        query = f"SELECT {CSV_CELLS} FROM (\n{query}\n)"
    try:
        _copy(con, query, fmt, target, output, stdout)
    except (duckdb.ParserException, duckdb.BinderException):
        return False  # before any row was written
    return True


def _copy(
    con: duckdb.DuckDBPyConnection,
    query: str,
    fmt: str,
    target: str,
    output: Path | None,
    stdout: TextIO,
) -> None:
    """DuckDB's COPY of `query` (already in fmt's cells) to `target`; a file target is the
    partial file of `written_atomically(output)`, renamed into place once complete and removed
    on any error, Ctrl-C or SIGTERM."""
    literal = sql_string(target)
    options = {
        "csv": "FORMAT csv, HEADER",
        "parquet": "FORMAT parquet, COMPRESSION zstd",
        "json": "FORMAT json, ARRAY true",
    }.get(fmt, "FORMAT json")
    copy = f"COPY ({query}) TO {literal} ({options})"
    if output is None and target == STDOUT_DEVICE:
        stdout.flush()
        with exit_on_sigterm():
            execute_interruptibly(con, copy, None)
        return
    if output is None:  # through the relay FIFO, to a Python stream or a regular file
        # (written in place: DuckDB's COPY over an existing file goes through a tmp_ name)
        copy = f"COPY ({query}) TO {literal} ({options}, USE_TMP_FILE false)"
        _copy_through_relay(con, copy, target, stdout)
        return
    with written_atomically(output) as file:  # whose partial is `target` (copy_target)
        execute_interruptibly(con, copy, file.discard)


def _copy_through_relay(
    con: duckdb.DuckDBPyConnection, copy: str, fifo: str, stdout: TextIO
) -> None:
    """Run `copy` (a COPY to `fifo`) while a thread passes the FIFO's bytes on to stdout, as
    they come: a result of any size streams, in bounded memory. A stdout that cannot be
    written (a full disk) closes the FIFO, which stops the COPY; that error is raised."""
    # SIGTERM from before the relay's dir is made unwinds through its removal (the real stdout's
    # COPY: a Python stream's host process keeps its own handler)
    with exit_on_sigterm() if _of_the_process(stdout) else contextlib.nullcontext():
        _relay_copy(con, copy, fifo, stdout)


def _relay_copy(con: duckdb.DuckDBPyConnection, copy: str, fifo: str, stdout: TextIO) -> None:
    import duckdb

    _remove_relay(fifo)  # (what an earlier COPY of this process left: killed mid-COPY)
    directory = os.path.dirname(fifo)
    try:
        os.mkdir(directory, 0o700)  # ours alone: fails on a dir someone else made
    except OSError as error:  # (said as the temp dir's, not as stdout's: a full /tmp, say)
        raise OSError(
            error.errno,
            f"{error.strerror} in the temp dir {os.path.dirname(directory)}, where the relay "
            "to stdout is made (set TMPDIR to another)",
        ) from None
    try:
        try:
            os.mkfifo(fifo, 0o600)
        except OSError:
            # a temp dir on a filesystem without FIFOs (some FUSE or network mounts): the
            # COPY writes a plain file there, passed on once whole (the same bytes, on disk)
            _run_copy(con, copy, fifo, stdout)
            _pass_on(fifo, stdout)
            return
        source = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        # a writer of our own until the COPY is over: the reader sees no end of file before
        # DuckDB opens the FIFO, nor waits for ever if the COPY fails before it does
        held = os.open(fifo, os.O_WRONLY)
        relay = _Relay(source, stdout)
        try:
            _run_copy(con, copy, fifo, stdout)
        except duckdb.Error:
            if relay.failed:  # (DuckDB's "Broken pipe": the relay had closed the FIFO)
                raise relay.failed[0] from None
            raise
        finally:
            os.close(held)
            relay.thread.join()
        relay.wait()
    finally:
        _remove_relay(fifo)


def _of_the_process(stream: TextIO) -> bool:
    """Whether `stream` is the process's own stdout or stderr (`-o /dev/stderr`), not a Python
    stream a host set (CliRunner's, a notebook's)."""
    return stream is sys.__stdout__ or stream is sys.__stderr__


def _run_copy(con: duckdb.DuckDBPyConnection, copy: str, fifo: str, stdout: TextIO) -> None:
    """`copy` (to the relay at `fifo`) run as its stdout needs: for the real stdout, SIGTERM
    and Ctrl-C end the process (the relay removed first); for a Python stream, on this thread."""
    if _of_the_process(stdout):
        with exit_on_sigterm():
            execute_interruptibly(con, copy, None, before_exit=lambda: _remove_relay(fifo))
    else:
        _copy_in_process(con, copy)


def _copy_in_process(con: duckdb.DuckDBPyConnection, copy: str) -> None:
    """The COPY for a Python stream (a test's, a notebook's), on this thread: Ctrl-C must not
    end the process as it does for the real stdout. DuckDB takes the signal mid-query (the CLI's
    `ctrl_c_stops` interrupts the connection), and the rows relayed so far stay: `OutputCutOff`.
    (On a thread of its own the COPY, once interrupted, left the connection busy at times.)"""
    from wmo_lake.stopping import OutputCutOff, query_interrupted

    try:
        con.execute(copy)
    except KeyboardInterrupt:
        raise OutputCutOff from None
    except Exception as error:
        if query_interrupted(error):
            raise OutputCutOff from None
        raise


class _Sink:
    """Bytes passed on to stdout as they come, each chunk flushed: to its binary buffer when it
    has one, else as UTF-8 text (a chunk may end inside a character)."""

    def __init__(self, stdout: TextIO) -> None:
        import codecs

        self.stdout = stdout
        self.binary = getattr(stdout, "buffer", None)
        self.text = codecs.getincrementaldecoder("utf-8")()

    def write(self, chunk: bytes) -> None:
        if self.binary is not None:
            self.binary.write(chunk)
            self.binary.flush()
        else:
            self.stdout.write(self.text.decode(chunk))
            self.stdout.flush()

    def close(self) -> None:
        if self.binary is None:
            self.stdout.write(self.text.decode(b"", final=True))


def _pass_on(path: str, stdout: TextIO) -> None:
    """The COPY's plain file (no FIFO in the temp dir) passed on to stdout, on this thread:
    Ctrl-C stops it, and the rows passed on so far stay (`OutputCutOff`)."""
    from wmo_lake.stopping import OutputCutOff

    sink = _Sink(stdout)
    try:
        with open(path, "rb") as source:
            stdout.flush()
            while chunk := source.read(1 << 16):
                sink.write(chunk)
        sink.close()
    except KeyboardInterrupt:
        raise OutputCutOff from None


class _Relay:
    """A thread passing `source`'s bytes (the FIFO's) to stdout as they come (`_Sink`). An error
    writing is kept in `failed`, and `source` closed, so the COPY writing the FIFO fails at its
    next write."""

    def __init__(self, source: int, stdout: TextIO) -> None:
        import threading

        self.source = source
        self.stdout = stdout
        self.failed: list[Exception] = []
        self.thread = threading.Thread(target=self._run, name="wmo-lake-stdout-relay", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        """Once every byte is passed on; the error writing stdout, if any, raised."""
        self.thread.join()
        if self.failed:
            raise self.failed[0]

    def _run(self) -> None:
        import select

        opened = False  # whether DuckDB has the FIFO open: it wrote to it
        try:
            try:
                sink = _Sink(self.stdout)
                self.stdout.flush()
                while True:
                    select.select([self.source], [], [])  # (`source` does not block)
                    chunk = os.read(self.source, 1 << 16)
                    if not chunk:
                        break
                    opened = True
                    sink.write(chunk)
                sink.close()
            except Exception as error:
                self.failed.append(error)
            if not opened and self.failed:
                # DuckDB's open of the FIFO for writing waits for a reader: one is kept until
                # it writes (closed then, its next write fails) or the COPY is over
                select.select([self.source], [], [])
        finally:
            os.close(self.source)


SQL_NARROWER = "select fewer columns or use --format csv"  # `sql`'s ways to see every column


def _write_table(
    relation: duckdb.DuckDBPyRelation,
    output: Path | None,
    stdout: TextIO,
    *,
    limit: int | None,
    width: int | None,
    explain: bool,
) -> None:
    columns = relation.columns
    # (EXPLAIN [ANALYZE] by its statement: a SELECT may name its columns as EXPLAIN's are)
    if explain and columns == ["explain_key", "explain_value"]:
        text = "\n".join(value for _, value in relation.fetchall())
        _write_text(text + "\n", output, stdout)
        return
    right = [_type_id(kind) in NUMERIC_TYPES for kind in relation.types]
    shown = limit if limit is not None else TABLE_ROWS
    # (one more row than shown tells a cut; a LIMIT holds at most 2^63 - 1)
    rows = _as_text(relation).limit(min(shown + 1, 2**63 - 1)).fetchall()
    footer = None
    if len(rows) > shown:
        rows = rows[:shown]
        footer = f"(first {shown} rows shown; --limit N for another count, --format csv for all)"
    if output is None:
        render_table(
            columns,
            rows,
            right_aligned=right,
            file=stdout,
            width=width,
            footer=footer,
            narrower=SQL_NARROWER,
        )
        return
    rendered = io.StringIO()
    render_table(
        columns, rows, right_aligned=right, file=rendered, footer=footer, narrower=SQL_NARROWER
    )
    _write_file(output, rendered.getvalue().encode("utf-8"))


def _write_text(text: str, output: Path | None, stdout: TextIO) -> None:
    if output is None:
        stdout.write(text)
        return
    _write_file(output, text.encode("utf-8"))
