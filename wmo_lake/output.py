"""Writing a query result as table | csv | json | jsonl | parquet, to stdout or a file.

Results are streamed: DuckDB hands over Arrow record batches, and each batch is written before the
next is fetched, so memory is bounded by a batch, not the result. The text is made by DuckDB or
Arrow, never row by row in Python: csv by Arrow's CSV writer (nested values as DuckDB's JSON),
json/jsonl by DuckDB's `to_json`, parquet by Arrow's Parquet writer. A file is written under a
temporary name and renamed when complete, so an error or Ctrl-C leaves nothing half-written
(`written_atomically`: through a symlink to the file it names; a FIFO or device straight through).

`render_table` is the one terminal table renderer (rich): `wmo-lake sql`, `stats` (also `--by task`)
and `compare` draw with it, fitted to the terminal's width.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import io
import math
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:  # imported where used: `wmo-lake ingest` imports this module's FORMATS only
    import duckdb
    import pyarrow as pa

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
BATCH_ROWS = 8192  # rows per Arrow record batch: the unit of memory while streaming
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
}


def percent_text(rate: float, digits: int = 1) -> str:
    """A rate in [0, 1] as a percentage with `digits` decimals, whose rounding never reaches 0%
    from above nor 100% from below: 1 pass in 2,500 trials is '<0.1%', not '0.0%' (which reads
    as never solved), and 2,499 is '>99.9%'."""
    text = f"{100 * rate:.{digits}f}%"
    smallest = f"{10**-digits:.{digits}f}"
    if rate > 0 and float(text[:-1]) == 0:
        return f"<{smallest}%"
    if rate < 1 and float(text[:-1]) >= 100:
        return f">{100 - 10**-digits:.{digits}f}%"
    return text


def metric_text(value: float | int | None, percent: bool) -> str:
    """A metric as the CLI prints it: a rate as `percent_text`, a count as it is, '-' for a
    null measurement."""
    if value is None:
        return "-"
    return percent_text(value) if percent else str(value)


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


def _as_csv_ready(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """Nested columns as DuckDB's JSON text, numbers and booleans as they are, every other column
    as DuckDB's own text for it: for the Arrow path, whose CSV writer quotes text but not numbers
    (CSV_CELLS, all text, is for DuckDB's own COPY). Arrow would write no interval, bit or varint
    at all, and a blob's raw bytes, a TIMETZ without its offset."""

    def cell(c: str, t: str) -> str:
        if t in NESTED_TYPES:
            return f"to_json({c})::VARCHAR"
        # (a UHUGEINT too: Arrow's CSV writer prints its 128 bits as signed, 2^127 as negative)
        keep = (t in NUMERIC_TYPES and t != "uhugeint") or t == "boolean"
        return c if keep else f"{c}::VARCHAR"

    return _project(relation, cell)


def _as_finite(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """Non-finite floats as null (JSON has no NaN or Infinity), also inside lists, arrays,
    structs and maps (a span's sampled_logprobs may hold -inf): DuckDB's to_json and its JSON
    COPY would write them as bare NaN / -Infinity, which no JSON parser reads."""
    columns = [
        f"{_finite(_quote(name), kind)} AS {_quote(name)}"
        for name, kind in zip(relation.columns, relation.types, strict=True)
    ]
    return relation.project(", ".join(columns))


def _holds_float(kind: Any) -> bool:
    if _type_id(kind) in ("float", "double"):
        return True
    children = getattr(kind, "children", None) if _type_id(kind) in NESTED_TYPES else None
    return any(_holds_float(child) for _, child in children or () if not isinstance(child, int))


def _finite(value: str, kind: Any, depth: int = 0) -> str:
    """The SQL of `value` (of DuckDB type `kind`) with every non-finite float in it as NULL."""
    t = _type_id(kind)
    if t in ("float", "double"):
        return f"CASE WHEN isfinite({value}) THEN {value} END"
    if not _holds_float(kind):
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
        key = _finite(f"{item}.key", children["key"], inner)
        mapped = _finite(f"{item}.value", children["value"], inner)
        entry = f"struct_pack(key := {key}, value := {mapped})"
        return f"map_from_entries(list_transform(map_entries({value}), lambda {item}: {entry}))"
    return value  # (a union: left as DuckDB writes it)


def _as_json_lines(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """One column: each row as a JSON object made by DuckDB (non-finite floats as null)."""
    cleaned = _as_finite(relation)
    fields = ", ".join(f"{_quote(name)} := {_quote(name)}" for name in cleaned.columns)
    return cleaned.project(f"to_json(struct_pack({fields}))::VARCHAR AS j")


def _as_text(relation: duckdb.DuckDBPyRelation) -> duckdb.DuckDBPyRelation:
    """Every column as display text: NULL as 'NULL', nested values as JSON."""

    def text(c: str, t: str) -> str:
        inner = f"to_json({c})::VARCHAR" if t in NESTED_TYPES else f"{c}::VARCHAR"
        return f"coalesce({inner}, 'NULL')"

    return _project(relation, text)


def _read(reader: pa.RecordBatchReader) -> Iterator[pa.RecordBatch]:
    """The reader's batches. A query that fails partway (DuckDB raises while making a batch)
    reaches pyarrow's reader as a bare OSError: it is raised as the duckdb.Error it is, so it is
    not taken for a failed write."""
    import duckdb

    batches = iter(reader)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except OSError as error:
            raise duckdb.Error(str(error)) from error
        yield batch


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
        """The write failed or was stopped: remove the partial file (never a FIFO or device)."""
        if self.renamed:
            self.partial.unlink(missing_ok=True)


@contextlib.contextmanager
def written_atomically(output: Path) -> Iterator[OutputFile]:
    """Write `output` through an `OutputFile`: the caller writes its `partial` path, which is put
    in place when the block ends and removed on any error, Ctrl-C or SIGTERM. The one way every
    command (`sql --output`, `report --out`) writes a file it may replace."""
    target = OutputFile(output)
    with _exit_on_sigterm():
        try:
            yield target
            target.commit()
        except BaseException:
            target.discard()
            raise


STDOUT_DEVICE = "/dev/stdout"


def copy_target(output: Path | None, stdout: TextIO) -> str | None:
    """The path DuckDB's COPY can write this result to: the partial file of `output`, or the
    process's real stdout; None when stdout is a Python stream (tests capture it), which gets
    the Arrow path instead."""
    if output is not None:
        return str(OutputFile(output).partial)
    if stdout is sys.__stdout__ and os.path.exists(STDOUT_DEVICE):
        import stat

        try:
            fd = stdout.fileno()
            # a pipe or a terminal only: DuckDB opens the device afresh, which would truncate
            # a regular file (`>> file`) and write over what was already printed to it
            if stat.S_ISFIFO(os.fstat(fd).st_mode) or os.isatty(fd):
                return STDOUT_DEVICE
        except (OSError, ValueError):
            return None
    return None


@contextlib.contextmanager
def _sink(output: Path | None, stdout: TextIO) -> Iterator[IO[bytes]]:
    """A binary stream to write to: stdout, or `output` written under a temporary name and
    renamed into place only when everything was written (removed on any error or Ctrl-C)."""
    if output is None:
        stdout.flush()
        buffer = getattr(stdout, "buffer", None)
        if buffer is None:  # a text-only stream (tests): collect bytes, then write them as text
            yield _TextBridge(stdout)  # type: ignore[misc]  # write() is all the writers need
            return
        yield buffer
        buffer.flush()
        return
    with written_atomically(output) as target, open(target.partial, "wb") as stream:
        yield stream


@contextlib.contextmanager
def _exit_on_sigterm() -> Iterator[None]:
    """While a file is being written, SIGTERM unwinds like Ctrl-C (SystemExit 143), so the
    temporary file is removed instead of left behind."""

    def terminate(signum: int, frame: Any) -> None:
        sys.exit(128 + signum)

    with _on_sigterm(terminate):
        yield


@contextlib.contextmanager
def _on_sigterm(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """Within: `handler` takes SIGTERM (on the main thread only, where Python runs handlers),
    the previous one after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _TextBridge:
    """Bytes written to a text stream (for stdout replacements without a binary buffer)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, data: bytes) -> int:
        self.stream.write(bytes(data).decode("utf-8"))
        return len(data)

    def flush(self) -> None:
        self.stream.flush()

    @property
    def closed(self) -> bool:
        return False


def utc_labelled(schema: pa.Schema) -> pa.Schema:
    """`schema` with its times labelled `UTC`. DuckDB's Arrow labels them with the connection's
    zone, which the lake's connections keep as the machine names it when that is UTC already
    (`Etc/UTC` here, where DuckDB's own Parquet writer says `UTC`), and Spark's with the JVM's
    name for its session's zone: a reader showed the same instants in another zone by engine."""
    import pyarrow as pa

    def relabel(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_timestamp(kind) and kind.tz is not None:
            return pa.timestamp(kind.unit, "UTC")
        if pa.types.is_list(kind):
            return pa.list_(kind.value_field.with_type(relabel(kind.value_type)))
        if pa.types.is_large_list(kind):
            return pa.large_list(kind.value_field.with_type(relabel(kind.value_type)))
        if pa.types.is_struct(kind):
            return pa.struct([field.with_type(relabel(field.type)) for field in kind])
        if pa.types.is_map(kind):
            return pa.map_(
                kind.key_field.with_type(relabel(kind.key_type)),
                kind.item_field.with_type(relabel(kind.item_type)),
            )
        return kind

    return pa.schema([field.with_type(relabel(field.type)) for field in schema], schema.metadata)


def write_result(
    relation: duckdb.DuckDBPyRelation,
    fmt: str,
    output: Path | None,
    stdout: TextIO,
    *,
    limit: int | None = None,
    width: int | None = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> None:
    """Write `relation` in `fmt` to `output` (a file) or `stdout`, streamed: by DuckDB's own
    COPY when `con` is given and the destination is a file or the real stdout (`copy_target`;
    the connection must be allowed to write there), else Arrow record batch by batch."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "parquet" and output is None:
        raise ValueError("--format parquet needs --output FILE.parquet")
    if len(set(relation.columns)) < len(relation.columns):
        # Two columns of one name (`a.trials, b.trials`): every projection below names its
        # columns, and a name read twice is the first column twice. `*` gives them DuckDB's
        # own distinct names (trials, trials_1), the ones its COPY writes.
        relation = relation.project("*")
    if limit is not None:
        relation = relation.limit(limit)
    if fmt == "table":
        _write_table(relation, output, stdout, limit=limit, width=width)
        return
    target = copy_target(output, stdout) if con is not None else None
    if target is not None and con is not None:
        if fmt == "csv":
            query = f"SELECT {CSV_CELLS} FROM (\n{relation.sql_query()}\n)"
        elif fmt == "parquet":
            query = relation.sql_query()
        else:
            query = _as_finite(relation).sql_query()
        _copy(con, query, fmt, target, output, stdout)
        return
    with _cut_off_on_stdout(output), _sink(output, stdout) as sink:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            reader = relation.to_arrow_reader(BATCH_ROWS)
            schema = utc_labelled(reader.schema)  # (as DuckDB's own COPY labels them)
            relabel = not schema.equals(reader.schema)
            with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
                for batch in _read(reader):
                    writer.write_batch(batch.cast(schema) if relabel else batch)
        elif fmt == "csv":
            import pyarrow.csv as pacsv

            reader = _as_csv_ready(relation).to_arrow_reader(BATCH_ROWS)
            options = pacsv.WriteOptions(quoting_style="needed")
            with pacsv.CSVWriter(sink, reader.schema, write_options=options) as writer:
                for batch in _read(reader):
                    writer.write_batch(batch)
        else:
            _write_json(_as_json_lines(relation), sink, as_array=fmt == "json")


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
    if output is None:
        stdout.flush()
        with _exit_on_sigterm():
            _execute_interruptibly(con, copy, None)
        return
    with written_atomically(output) as file:  # whose partial is `target` (copy_target)
        _execute_interruptibly(con, copy, file.discard)


INTERRUPTED = "interrupted: nothing was written or changed"
# Ctrl-C while rows stream to stdout: what is there already stays (a pipe's reader took it, a
# redirected file holds it), and may read as a whole, shorter result (csv, jsonl).
CUT_OFF = (
    "interrupted: the rows printed so far are part of the result only, cut off where it "
    "stopped; nothing was changed"
)


# SIGTERM's number once `sigterm_stops` took it: the CLI then says the command was stopped by
# SIGTERM, and exits 143, where a Ctrl-C says "interrupted" and exits 130.
TERMINATED: list[int] = []


@contextlib.contextmanager
def sigterm_stops() -> Iterator[None]:
    """Within (on the main thread): SIGTERM, what a scheduler or `timeout` sends, stops the
    command as Ctrl-C does (an ingest's abort, nothing half-committed, its readers stopped, one
    line) instead of ending the process without a word. A second SIGTERM ends it at once."""
    import signal

    def stop(signum: int, frame: Any) -> None:
        TERMINATED.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
            raise KeyboardInterrupt  # (SIGINT ignored, as in a script's background job)
        # through SIGINT's own handler: pyspark's cancels its jobs (raised here, inside a py4j
        # call, the interrupt was logged as an error with a traceback), `ctrl_c_stops`
        # interrupts a DuckDB query; Python's default raises KeyboardInterrupt
        signal.raise_signal(signal.SIGINT)

    with _on_sigterm(stop):
        yield


def stopped_message(message: str) -> tuple[str, int]:
    """A Ctrl-C message ("interrupted...") and exit code, as said when SIGTERM stopped the
    command instead."""
    if not TERMINATED:
        return message, 130
    return "stopped by SIGTERM" + message.removeprefix("interrupted"), 128 + TERMINATED[0]


class OutputCutOff(KeyboardInterrupt):
    """Ctrl-C while a result streamed to stdout (the CLI says CUT_OFF, exit 130)."""

    message = CUT_OFF


@contextlib.contextmanager
def _cut_off_on_stdout(output: Path | None) -> Iterator[None]:
    """Within: a Ctrl-C (Python's, or DuckDB's own mid-query) while writing to stdout
    (`output` None) is `OutputCutOff`."""
    try:
        yield
    except KeyboardInterrupt:
        if output is None:
            raise OutputCutOff from None
        raise
    except Exception as error:
        if output is None and query_interrupted(error):
            raise OutputCutOff from None
        raise


@contextlib.contextmanager
def ctrl_c_stops(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Within: Ctrl-C stops the query `con` runs, always. Python's own SIGINT handler raises
    KeyboardInterrupt inside DuckDB's signal check, and DuckDB 2.0 turns that into an
    interruption only some of the time: in 5 of 27 tries here a long query ran on, and ignored
    every later Ctrl-C too. Interrupting the connection from the handler stopped 30 of 30.
    Left alone off the main thread and where SIGINT is not Python's default (a script's
    background job ignores it; a caller may have its own handler)."""
    import signal
    import threading

    default = signal.default_int_handler
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not default
    ):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        with contextlib.suppress(Exception):  # (a connection busy in another thread refuses)
            con.interrupt()
        default(signum, frame)

    signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, default)


def query_interrupted(error: BaseException) -> bool:
    """Ctrl-C that landed inside a DuckDB query: DuckDB takes the SIGINT itself and raises its
    own error instead of KeyboardInterrupt (RuntimeError('Query interrupted') in duckdb 2.0,
    InterruptException before)."""
    loaded = sys.modules.get("duckdb")  # (not imported: the error cannot be DuckDB's)
    if loaded is not None and isinstance(error, loaded.InterruptException):
        return True
    return isinstance(error, RuntimeError) and str(error) == "Query interrupted"


def _execute_interruptibly(
    con: duckdb.DuckDBPyConnection, sql: str, on_abort: Callable[[], None] | None
) -> None:
    """Run `sql` (a long COPY) in a worker thread while this one waits, so Ctrl-C or SIGTERM
    reaches Python at once. DuckDB's connection refuses a second call (even interrupt()) while
    the COPY runs, so an interrupted CLI removes the partial file (`on_abort`), says so in one
    line and ends the process there (exit 130, or 143 for SIGTERM) with the COPY unfinished.
    Without `on_abort` the COPY writes to stdout, whose rows so far stay: `CUT_OFF`."""
    from wmo_lake.background import Background

    try:
        # (started inside the try: a signal while Thread.start waits for the thread to run
        # would otherwise unwind to a close() of the connection the COPY is busy on: exit 1)
        Background(lambda: con.execute(sql), "wmo-lake-copy").wait(poll=0.1)
    except (KeyboardInterrupt, SystemExit) as stop:
        if on_abort is not None:
            on_abort()
        code = 130 if isinstance(stop, KeyboardInterrupt) else int(stop.code or 143)
        if code == 130:
            sys.stderr.write((INTERRUPTED if on_abort is not None else CUT_OFF) + "\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(code)


def _write_json(lines: duckdb.DuckDBPyRelation, sink: IO[bytes], *, as_array: bool) -> None:
    """The rows as JSON lines or one array; the array's "[" only with its first rows, so a query
    that fails when it starts leaves no stray "[" on stdout."""
    first = True
    for batch in _read(lines.to_arrow_reader(BATCH_ROWS)):
        texts = batch.column(0).to_pylist()
        if not texts:
            continue
        if as_array:
            joined = ",\n  ".join(texts)
            sink.write((("[\n  " if first else ",\n  ") + joined).encode("utf-8"))
        else:
            sink.write(("\n".join(texts) + "\n").encode("utf-8"))
        first = False
    if as_array:
        sink.write(b"[]\n" if first else b"\n]\n")


def terminal_width(stream: TextIO) -> int | None:
    """The width a table must fit: $COLUMNS, else the terminal's, else None (not a terminal:
    a file or a pipe gets every column)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        import shutil

        return shutil.get_terminal_size().columns
    return None


SQL_NARROWER = "select fewer columns or use --format csv"  # `sql`'s ways to see every column


def _write_table(
    relation: duckdb.DuckDBPyRelation,
    output: Path | None,
    stdout: TextIO,
    *,
    limit: int | None,
    width: int | None,
) -> None:
    columns = relation.columns
    if columns == ["explain_key", "explain_value"]:  # EXPLAIN [ANALYZE]: DuckDB's own drawing
        text = "\n".join(value for _, value in relation.fetchall())
        _write_text(text + "\n", output, stdout)
        return
    right = [_type_id(kind) in NUMERIC_TYPES for kind in relation.types]
    shown = limit if limit is not None else TABLE_ROWS
    rows = _as_text(relation).limit(shown + 1).fetchall()
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
    with _sink(output, stdout) as sink:
        rendered = io.StringIO()
        render_table(
            columns, rows, right_aligned=right, file=rendered, footer=footer, narrower=SQL_NARROWER
        )
        sink.write(rendered.getvalue().encode("utf-8"))


def _write_text(text: str, output: Path | None, stdout: TextIO) -> None:
    if output is None:
        stdout.write(text)
        return
    with _sink(output, stdout) as sink:
        sink.write(text.encode("utf-8"))


COLUMN_GAP = 3  # between columns: padding, a blank rule, padding
MIN_CELL = 8  # fitting a width cuts a column no narrower than this (or its header)


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right_aligned: Sequence[bool] | None = None,
    file: TextIO | None = None,
    width: int | None = None,
    footer: str | None = None,
    narrower: str,
) -> None:
    """Draw rows of text cells as one table (rich), headers never wrapped or cut.

    With a `width` (see `terminal_width`), long cells are cut with an ellipsis (a right-aligned
    column, a number, never is) and columns that still do not fit are left out, named in a line
    under the table with `narrower` (how to see them: what the calling command offers); without
    one, every cell is printed whole."""
    from rich import box
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    file = file if file is not None else sys.stdout
    right_aligned = right_aligned or [False] * len(headers)
    # measured as drawn: escaped (a newline takes two columns as `\n`), a wide character two
    headers = [printable(header) for header in headers]
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [
        max([cell_len(header), *(cell_len(row[i]) for row in rows)])
        for i, header in enumerate(headers)
    ]
    kept = len(headers)
    if width is not None:
        widths, kept = _fit(headers, widths, width, right_aligned)
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        header_style="",
        safe_box=True,
    )
    for i in range(kept):
        table.add_column(
            headers[i],
            justify="right" if right_aligned[i] else "left",
            no_wrap=True,
            overflow="ellipsis",
            width=widths[i],
        )
    for row in rows:
        table.add_row(*row[:kept])
    console = Console(
        width=sum(widths[:kept]) + 3 * kept + 2,
        # (in the encoding of `file`: rich draws the rules in ASCII where it is not UTF-8)
        file=_Capture(getattr(file, "encoding", None) or "utf-8"),
        force_terminal=False,
        no_color=True,
        highlight=False,
        soft_wrap=False,
        emoji=False,
        markup=False,
    )
    with console.capture() as capture:
        console.print(table)
    lines = [line.rstrip() for line in capture.get().splitlines()]
    left_out = headers[kept:]
    if left_out:
        lines.append(
            f"({len(left_out)} more column(s) not shown at width {width}: "
            f"{', '.join(left_out)}; {narrower})"
        )
    if footer:
        lines.append(footer)
    file.write("".join(line + "\n" for line in lines))


class _Capture(io.StringIO):
    """A text buffer that says the encoding of the stream its text is for."""

    def __init__(self, encoding: str) -> None:
        super().__init__()
        self._encoding = encoding

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding


def _fit(
    headers: Sequence[str], natural: list[int], width: int, whole: Sequence[bool]
) -> tuple[list[int], int]:
    """Column widths that fit `width` (the widest cut first, never below its header or
    MIN_CELL), and how many columns fit at all (the rest are left out). A `whole` column (a
    number: cut, 1234567890123.456 read '1234567890…', a smaller number) is never cut: it is
    shown whole or left out."""
    from rich.cells import cell_len

    floors = [
        n if keep else max(cell_len(h), min(n, MIN_CELL))
        for h, n, keep in zip(headers, natural, whole, strict=True)
    ]
    kept, used = 0, 0
    for floor in floors:
        if kept and used + COLUMN_GAP + floor > width:
            break
        used += floor + (COLUMN_GAP if kept else 0)
        kept += 1
    widths = natural[:kept]
    room = width - COLUMN_GAP * (kept - 1)
    while sum(widths) > room:
        widest = max(range(kept), key=lambda i: widths[i] - floors[i])
        if widths[widest] <= floors[widest]:
            break
        widths[widest] -= 1
    return widths + natural[kept:], kept


# A cell's control characters drawn as escapes: a terminal would act on them (a carriage return
# or an ANSI sequence in an agent's terminal output rewrites what it shows), rich drops some,
# and str.splitlines() breaks a row at others (\x1c-\x1e, \x85, U+2028, U+2029).
_CONTROL_ESCAPES = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]}
_CONTROL_ESCAPES |= {ord("\n"): "\\n", ord("\t"): "\\t", ord("\r"): "\\r"}
_CONTROL_ESCAPES |= {0x2028: "\\u2028", 0x2029: "\\u2029"}


def printable(text: str) -> str:
    """`text` with its control characters drawn as escapes (`_CONTROL_ESCAPES`): a table cell,
    or a name (a run, a batch, a task) in a line the CLI prints."""
    return text.translate(_CONTROL_ESCAPES)
