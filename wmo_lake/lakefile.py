"""LAKE/lake.duckdb: the light tables stored in it, the heavy ones as views over their files.

A query that reads a column of a table costs DuckDB ~0.2-0.3 ms per Parquet file per table
reference (a lake holds a file per table per step), so `rollout_stats` over 1,000 steps spent
seconds opening files. The light tables (`STORED_TABLES`: jobs, trials, stop_reasons, tests,
problems; no token or text payloads) are therefore copied into lake.duckdb as native tables
(`_stored_<table>`, with the partition each row came from; the table's name is a view that
leaves that column out), together with `span_lengths` (spans without their tokens: what
`rollout_stats` counts truncation on). The heavy tables (spans, steps, trajectories, tool_calls)
stay views over their live files, as every table was before. The Parquet files remain the source
of truth: Spark, `hive_partitioning` readers and the private copy read them.

The copy is kept incrementally: a rebuild starts from the previous lake.duckdb (when its layout
is this code's) and, per stored table, deletes and re-inserts only the partitions whose file list
changed. Each partition's file-list digest is kept inside lake.duckdb (`_wmo_lake_partitions`),
so the diff needs no knowledge of the commit that changed the lake and corrects itself (a
partition whose files are the same is the same: files never change under a name).

    build(store, manifest, path, stamp, base=LAKE/lake.duckdb)  # -> BuildReport
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from wmo_lake.output import sql_string
from wmo_lake.store import Manifest, Store, decoding_failure, refuse_shadowed_files

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from wmo_lake.stored_copies import StoredCopies

# Tables stored in lake.duckdb: everything a batch-health query reads, nothing token- or
# text-heavy (spans, steps, trajectories, tool_calls stay views over their files).
STORED_TABLES = ("jobs", "trials", "stop_reasons", "tests", "problems")
# Derived tables stored the same way: name -> (the table it projects, its columns). Each is also
# a `sql/` view of that projection (what Spark and the private copy read); lake.duckdb holds its
# rows instead, one partition of the table at a time.
STORED_PROJECTIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "span_lengths": (
        "spans",
        (
            "trial_key",
            "batch",
            "trial_name",
            "run",
            "step",
            "call_index",
            "prompt_len",
            "n_sampled",
        ),
    ),
}
# What the stored tables' layout in lake.duckdb is: a file of another layout is built anew.
LAYOUT = "stored-tables-1"
PARTITION_COLUMN = "_wmo_partition"
FILE_COLUMN = "_wmo_file"  # in a copy of stored rows: the segment they were written to


def stored_name(table: str) -> str:
    return f"_stored_{table}"


def files_digest(files: Iterable[str]) -> str:
    """A partition's file list, as lake.duckdb remembers it (a file never changes its content
    under a name, so the same list is the same rows)."""
    return hashlib.sha256("\0".join(files).encode("utf-8")).hexdigest()[:24]


def read_files_sql(files: list[str], union_by_name: bool) -> str:
    """read_parquet over `files` (relative to the lake dir), run and step decoded from the
    run=/step= dirs (the values the files hold, typed as the files type them), so a filter on
    run or step skips the other partitions' files."""
    names = ", ".join(sql_string(rel) for rel in files)
    return (
        f"read_parquet([{names}], union_by_name = {union_by_name}, hive_partitioning = true, "
        "hive_types = {'run': VARCHAR, 'step': BIGINT})"
    )


@dataclass
class BuildReport:
    """What one build did (for tests and the bench): incremental or from scratch, and which
    partitions of which stored table it (re)read."""

    incremental: bool = False
    inserted: dict[str, list[str]] = field(default_factory=dict)  # table -> partitions read
    deleted: dict[str, list[str]] = field(default_factory=dict)  # table -> partitions dropped
    # table -> the segments whose rows came from the writers' copies, not from their files
    copied: dict[str, list[str]] = field(default_factory=dict)


def build(
    store: Store,
    manifest: Manifest,
    path: Path,
    stamp: str,
    *,
    base: Path | None = None,
    stored: bool = True,
    copies: StoredCopies | None = None,
) -> BuildReport:
    """Write lake.duckdb for `manifest` at `path`: from a copy of `base` (a previous
    lake.duckdb) when it has this layout, else from scratch, storing the light tables' rows
    or, with `stored=False`, keeping every table a view over its files (a private, one-off
    database: copying every row would cost more than the one query it is for). `copies`: the
    rows of some new segments, as their writers copied them (wmo_lake/stored_copies.py): those
    segments are not read back."""
    import duckdb

    # A build killed before its checkpoint leaves a write-ahead log beside its file: DuckDB
    # would replay it into the new file at this path (rows inserted twice).
    for stale in (path, path.with_name(f"{path.name}.wal")):
        stale.unlink(missing_ok=True)
    if base is not None and base.exists():
        import shutil  # (here: an unchanged re-ingest loads this module, but builds nothing)

        shutil.copyfile(base, path)
        try:
            con = duckdb.connect(str(path))
        except duckdb.Error:
            con = None
        if con is not None:
            try:
                if _layout(con) == LAYOUT:
                    return _update(con, store, manifest, stamp, copies)
            # (DuckDB's errors, or its bindings' UnicodeDecodeError of a column name that bytes
            # changed in place: the build anew says what it is); a stop (Ctrl-C, SIGTERM) inside
            # a query is DuckDB's RuntimeError, and stops the build
            except (duckdb.Error, UnicodeDecodeError, RuntimeError) as error:
                if _stopped_within(error):
                    raise KeyboardInterrupt from error
                if isinstance(error, RuntimeError) and not decoding_failure(error):
                    raise
                # a copy that cannot be brought up to date is built anew
            finally:
                con.close()
        path.unlink(missing_ok=True)
    con = duckdb.connect(str(path))
    try:
        # (a segment gone: DuckDB's glob matched nothing; cut short: "No magic bytes found";
        # overwritten in place: what its bytes decode to)
        with store.naming_damage(manifest, (duckdb.Error, UnicodeDecodeError, RuntimeError)):
            return _fresh(con, store, manifest, stamp, stored, copies)
    finally:
        con.close()


def _stopped_within(error: BaseException) -> bool:
    """Whether a stop (Ctrl-C, SIGTERM) landed in the query that raised `error`, whatever DuckDB
    made of it: its own error for it, a scan's KeyboardInterrupt in its words ("reading the
    schema of the object registered as '_wmo_copy' failed: KeyboardInterrupt"), or the aborted
    transaction the next statement met (the stop's error is its context). SIGTERM comes as
    Ctrl-C does (`stopping.sigterm_stops`)."""
    from wmo_lake.stopping import stopped_by_user

    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            break
        if stopped_by_user(seen) or "KeyboardInterrupt" in str(seen):
            return True
        seen = seen.__context__
    return False


def _layout(con: duckdb.DuckDBPyConnection) -> str | None:
    import duckdb

    try:
        row = con.execute("SELECT layout FROM _wmo_lake").fetchone()
    except duckdb.Error:
        return None
    return row[0] if row else None


def _plan(manifest: Manifest, stored: bool) -> dict[str, str]:
    """table (and stored projection) -> its schema digest when lake.duckdb stores its rows."""
    from wmo_lake.lake import one_schema

    plan: dict[str, str] = {}
    if not stored:
        return plan
    for name in STORED_TABLES:
        digest = one_schema(manifest, name)
        if digest is not None:  # a MIXED table stays a view that reads by name
            plan[name] = digest
    for name, (source, columns) in STORED_PROJECTIONS.items():
        digest = one_schema(manifest, source)
        if digest is not None:
            plan[name] = f"{digest}:{','.join(columns)}"
    return plan


def _source(name: str) -> tuple[str, tuple[str, ...] | None]:
    """(the lake table a stored table's rows come from, its columns or None for all)."""
    if name in STORED_PROJECTIONS:
        return STORED_PROJECTIONS[name]
    return name, None


def _create_stored(
    con: duckdb.DuckDBPyConnection,
    name: str,
    files: list[str],
    copies: StoredCopies | None = None,
    report: BuildReport | None = None,
) -> None:
    """`_stored_<name>`: the rows of `files` (or none, of the table's schema) with the partition
    column, and the view `<name>` over it without that column."""
    from wmo_lake.tables import TABLES

    source, columns = _source(name)
    if files and copies is None:
        con.execute(f"CREATE OR REPLACE TABLE {stored_name(name)} AS {_select(name, files)}")
        _check_partitions(con, name)
    else:
        empty = TABLES[source].schema.empty_table()
        con.register("_wmo_empty", empty if columns is None else empty.select(list(columns)))
        con.execute(
            f"CREATE OR REPLACE TABLE {stored_name(name)} AS SELECT *, "
            f"CAST(NULL AS VARCHAR) AS {PARTITION_COLUMN} FROM _wmo_empty"
        )
        con.unregister("_wmo_empty")
        if files:  # those its writers copied from their copies, the others from their files
            _fill(con, name, files, copies, report)
    con.execute(f"DROP VIEW IF EXISTS {name}")
    con.execute(
        f"CREATE VIEW {name} AS SELECT * EXCLUDE ({PARTITION_COLUMN}) FROM {stored_name(name)}"
    )


def _select(name: str, files: list[str]) -> str:
    """The rows `_stored_<name>` holds of `files`, in one scan: each row's partition is its
    file's dir below tables/<table>/ (DuckDB gives the file's path joined to the search path;
    the partition is the part every copy of the lake agrees on)."""
    _, columns = _source(name)
    select = "* EXCLUDE (filename)" if columns is None else ", ".join(columns)
    scan = read_files_sql(files, union_by_name=False).removesuffix(")") + ", filename = true)"
    return (
        f"SELECT {select}, regexp_extract(filename, {sql_string(_PARTITION_OF_PATH)}, 1) "
        f"AS {PARTITION_COLUMN} FROM {scan}"
    )


def _check_partitions(con: duckdb.DuckDBPyConnection, name: str) -> None:
    ((stray,),) = con.execute(
        f"SELECT count(*) FROM {stored_name(name)} WHERE {PARTITION_COLUMN} = ''"
    ).fetchall()  # (to the end: DuckDB refuses to register a copy's scan after a partial fetch)
    if stray:
        from wmo_lake.store import LakeError

        raise LakeError(f"{name}: segments outside tables/<table>/run=<run>/step=<step>/")


def _fill(
    con: duckdb.DuckDBPyConnection,
    name: str,
    files: list[str],
    copies: StoredCopies | None,
    report: BuildReport | None,
) -> None:
    """Insert the rows of `files` into `_stored_<name>`: those a writer's copy holds from the
    copy, the others read from their files, in one scan."""
    import pyarrow as pa

    taken, rest = copies.covering(name, files) if copies else ([], files)
    where, params = "", []
    if any(rels is not None for _, rels in taken):  # (a copy holds segments this build leaves out)
        where = f" WHERE {FILE_COLUMN} IN (SELECT unnest(?::VARCHAR[]))"
        params = [files]
    for batches in _copied_batches([path for path, _ in taken]):
        # (one chunk a column: DuckDB pays per chunk, and a copy has one per segment written)
        con.register("_wmo_copy", pa.Table.from_batches(batches).combine_chunks())
        try:
            con.execute(
                f"INSERT INTO {stored_name(name)} BY NAME SELECT * EXCLUDE ({FILE_COLUMN}) "
                f"FROM _wmo_copy{where}",
                params,
            )
        finally:
            con.unregister("_wmo_copy")
    if report is not None and taken:
        copied = set(files) - set(rest)
        report.copied.setdefault(name, []).extend(rel for rel in files if rel in copied)
    if rest:
        con.execute(f"INSERT INTO {stored_name(name)} BY NAME {_select(name, rest)}")
        _check_partitions(con, name)


# Copied rows are inserted this many bytes at a time: in one statement for every copy of a table
# (a statement costs ~3-5 ms, and DuckDB scans a table, unlike a stream, on every core), with
# memory still bounded for a big ingest.
INSERT_BYTES = 64 * 2**20


def _copied_batches(paths: list[str]) -> Iterator[list[pa.RecordBatch]]:
    """The record batches of the copies at `paths`, in order, in groups of about INSERT_BYTES
    and of one schema each."""
    import pyarrow as pa

    group: list[pa.RecordBatch] = []
    size = 0
    for path in paths:
        with pa.memory_map(path) as source:
            for batch in pa.ipc.open_stream(source):
                if group and not batch.schema.equals(group[0].schema):
                    yield group
                    group, size = [], 0
                group.append(batch)
                size += batch.nbytes
                if size >= INSERT_BYTES:
                    yield group
                    group, size = [], 0
    if group:
        yield group


def _insert(
    con: duckdb.DuckDBPyConnection,
    name: str,
    partitions: dict[str, list[str]],
    digests: dict,
    copies: StoredCopies | None = None,
    report: BuildReport | None = None,
) -> list[str]:
    """Insert the rows of `partitions` ({partition: files}) into `_stored_<name>`, in one scan
    (but for the segments `copies` holds); their file digests go to `digests`."""
    files = [rel for rels in partitions.values() for rel in rels]
    if files:
        _fill(con, name, files, copies, report)
    done = [partition for partition, rels in partitions.items() if rels]
    digests.update({partition: files_digest(partitions[partition]) for partition in done})
    return done


# the run=/step= dirs of a segment's path (run and step values are escaped: no '/' in them)
_PARTITION_OF_PATH = r"/tables/[^/]+/(run=[^/]*/step=[^/]*)/[^/]*$"


def _file_view(con: duckdb.DuckDBPyConnection, manifest: Manifest, name: str) -> None:
    from wmo_lake.lake import one_schema

    files = manifest.table_files(name)
    if not files:  # a lake written before this table existed: empty until an ingest
        _shapes(con, [name])
        return
    if one_schema(manifest, name) is None:
        # Files of another schema (a lake written before this code added a column, or mixed):
        # read by name, over this code's empty stand-in, so every column the views read exists,
        # null where no file holds it, until an ingest (a new extract version re-reads every
        # trial) rewrites them. Without it the views fail to bind on the missing column.
        _shapes(con, [name])
        scan = read_files_sql(files, union_by_name=True)
        con.execute(
            f"CREATE OR REPLACE VIEW {name} AS "
            f"SELECT * FROM _shape_{name} UNION ALL BY NAME SELECT * FROM {scan}"
        )
        return
    con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM {read_files_sql(files, False)}")
    con.execute(f"DROP TABLE IF EXISTS _shape_{name}")


def _shapes(con: duckdb.DuckDBPyConnection, names: Iterable[str]) -> None:
    """Empty stand-ins `_shape_<table>` of each table's schema, and `<table>` a view over it."""
    from wmo_lake.tables import TABLES

    for name in names:
        con.register(f"_empty_{name}", TABLES[name].schema.empty_table())
        con.execute(f"CREATE OR REPLACE TABLE _shape_{name} AS SELECT * FROM _empty_{name}")
        con.unregister(f"_empty_{name}")
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM _shape_{name}")


def _create_views(con: duckdb.DuckDBPyConnection, manifest: Manifest, plan: dict[str, str]) -> None:
    """The `sql/` views, created while every file-backed table is an empty stand-in (DuckDB
    binds a view when it is created, and binding read_parquet over a file list checks every
    file); then the file-backed tables are pointed at their files (a view is bound again when
    queried). Stored projections replace their `sql/` view."""
    from wmo_lake.lake import create_views
    from wmo_lake.tables import TABLES

    files_backed = [name for name in TABLES if name not in plan]
    _shapes(con, files_backed)
    # views of an earlier view set go: a view dropped from sql/ must not linger
    for (view,) in con.execute(
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND database_name = "
        "current_database() AND schema_name = 'main'"
    ).fetchall():
        if view not in TABLES and view not in plan:
            con.execute(f"DROP VIEW IF EXISTS {view}")
    create_views(con)
    for name in plan:
        if name in STORED_PROJECTIONS:
            con.execute(f"DROP VIEW IF EXISTS {name}")
            con.execute(
                f"CREATE VIEW {name} AS SELECT * EXCLUDE ({PARTITION_COLUMN}) "
                f"FROM {stored_name(name)}"
            )
    for name in files_backed:
        _file_view(con, manifest, name)


def _meta(con: duckdb.DuckDBPyConnection, stamp: str, views: str) -> None:
    con.execute("CREATE OR REPLACE TABLE _wmo_lake(stamp VARCHAR, layout VARCHAR, views VARCHAR)")
    con.execute("INSERT INTO _wmo_lake VALUES (?, ?, ?)", [stamp, LAYOUT, views])


def _fresh(
    con: duckdb.DuckDBPyConnection,
    store: Store,
    manifest: Manifest,
    stamp: str,
    stored: bool,
    copies: StoredCopies | None = None,
) -> BuildReport:
    from wmo_lake.lake import views_digest

    refuse_shadowed_files(store.root, manifest)
    con.execute("SET file_search_path = ?", [str(store.root.resolve())])
    con.execute("SET enable_progress_bar = false")  # an ingest prints its own
    plan = _plan(manifest, stored)
    con.execute(
        "CREATE TABLE _wmo_lake_tables(table_name VARCHAR PRIMARY KEY, schema_digest VARCHAR)"
    )
    con.execute(
        "CREATE TABLE _wmo_lake_partitions(table_name VARCHAR, part VARCHAR, files VARCHAR)"
    )
    report = BuildReport()
    rows: list[tuple[str, str, str]] = []
    for name in plan:
        source, _ = _source(name)
        partitions = manifest.tables.get(source, {})
        files = [rel for rels in partitions.values() for rel in rels]
        _create_stored(con, name, files, copies, report)
        report.inserted[name] = [part for part, rels in partitions.items() if rels]
        rows += [(name, part, files_digest(partitions[part])) for part in report.inserted[name]]
    _create_views(con, manifest, plan)
    if plan:
        con.execute(
            "INSERT INTO _wmo_lake_tables SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
            [list(plan), list(plan.values())],
        )
    if rows:
        con.execute(
            "INSERT INTO _wmo_lake_partitions SELECT unnest(?::VARCHAR[]), "
            "unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
            [list(column) for column in zip(*rows, strict=True)],
        )
    _meta(con, stamp, views_digest())
    con.execute("CHECKPOINT")
    return report


def _save_digests(
    con: duckdb.DuckDBPyConnection,
    saves: list[tuple[str, str, dict[str, str], list[str]]],
) -> None:
    """Record each stored table's schema and its partitions' file digests (per table: name,
    schema, the partitions just read with their digests, the partitions dropped), for every
    table at once: four statements in all (executemany runs row by row, and a statement per
    table cost ~5 ms each in a lake of 1,000 steps)."""
    if not saves:
        return
    names = [name for name, _, _, _ in saves]
    con.execute(
        "DELETE FROM _wmo_lake_tables WHERE table_name IN (SELECT unnest(?::VARCHAR[]))", [names]
    )
    con.execute(
        "INSERT INTO _wmo_lake_tables SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
        [names, [schema for _, schema, _, _ in saves]],
    )
    dropped = [(name, part) for name, _, read, gone in saves for part in [*gone, *read]]
    if dropped:
        con.execute(
            "DELETE FROM _wmo_lake_partitions WHERE (table_name, part) IN "
            "(SELECT (unnest(?::VARCHAR[]), unnest(?::VARCHAR[])))",
            [[name for name, _ in dropped], [part for _, part in dropped]],
        )
    rows = [(name, part, digest) for name, _, read, _ in saves for part, digest in read.items()]
    if rows:
        con.execute(
            "INSERT INTO _wmo_lake_partitions SELECT unnest(?::VARCHAR[]), "
            "unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
            [list(column) for column in zip(*rows, strict=True)],
        )


def _update(
    con: duckdb.DuckDBPyConnection,
    store: Store,
    manifest: Manifest,
    stamp: str,
    copies: StoredCopies | None = None,
) -> BuildReport:
    """Bring a copy of an earlier lake.duckdb (this layout) up to `manifest`."""
    from wmo_lake.lake import views_digest

    refuse_shadowed_files(store.root, manifest)
    con.execute("SET file_search_path = ?", [str(store.root.resolve())])
    con.execute("SET enable_progress_bar = false")  # an ingest prints its own
    # One transaction to the checkpoint: each statement of its own would commit, and sync, the
    # write-ahead log (~10-20 ms of a first ingest's build). The file is renamed into place only
    # once checkpointed, so what that log would keep is never needed: with the threshold this
    # low, the commit checkpoints at once, and DuckDB skips the log for a commit of more than
    # `auto_checkpoint_skip_wal_threshold` (8,192 small trials' commit and checkpoint: 0.10 s ->
    # 0.077 s, the rows written once instead of twice).
    con.execute("SET checkpoint_threshold = '1B'")
    con.execute("BEGIN TRANSACTION")
    plan = _plan(manifest, stored=True)
    had = dict(con.execute("SELECT table_name, schema_digest FROM _wmo_lake_tables").fetchall())
    ((views_then,),) = con.execute("SELECT views FROM _wmo_lake").fetchall()
    report = BuildReport(incremental=True)
    # tables no longer stored (their schema became MIXED), or stored under another schema
    for name, schema in had.items():
        if plan.get(name) != schema:
            con.execute(f"DROP VIEW IF EXISTS {name}")
            con.execute(f"DROP TABLE IF EXISTS {stored_name(name)}")
            con.execute("DELETE FROM _wmo_lake_tables WHERE table_name = ?", [name])
            con.execute("DELETE FROM _wmo_lake_partitions WHERE table_name = ?", [name])
    kept: dict[str, dict[str, str]] = {}  # table -> partition -> its file digest, as stored
    for name, part, files in con.execute(
        "SELECT table_name, part, files FROM _wmo_lake_partitions"
    ).fetchall():
        kept.setdefault(name, {})[part] = files
    saves: list[tuple[str, str, dict[str, str], list[str]]] = []
    if copies is not None:
        # The rows go in on one thread: DuckDB's parallel scan of an Arrow table in memory costs
        # more than it saves (the copies of 8,192 small trials: 43 -> 28 ms; of 100k: 0.44 ->
        # 0.26 s). The checkpoint, which does gain from a second thread, comes after the reset.
        con.execute("SET threads = 1")
    for name, schema in plan.items():
        source, _ = _source(name)
        partitions = manifest.tables.get(source, {})
        if had.get(name) != schema:
            _create_stored(con, name, [])
            old: dict[str, str] = {}
        else:
            old = kept.get(name, {})
        digests = {part: files_digest(files) for part, files in partitions.items() if files}
        gone = [part for part, digest in old.items() if digests.get(part) != digest]
        if gone:
            con.execute(
                f"DELETE FROM {stored_name(name)} WHERE {PARTITION_COLUMN} IN "
                f"(SELECT unnest(?::VARCHAR[]))",
                [gone],
            )
        changed = {part: partitions[part] for part, d in digests.items() if old.get(part) != d}
        read: dict[str, str] = {}
        report.deleted[name] = gone
        report.inserted[name] = _insert(con, name, changed, read, copies, report)
        saves.append((name, schema, read, gone))
    if copies is not None:
        con.execute("RESET threads")
    _save_digests(con, saves)
    if views_then != views_digest() or set(had) != set(plan):
        _create_views(con, manifest, plan)
    else:  # the sql/ views stand: only the file-backed tables' file lists moved
        from wmo_lake.tables import TABLES

        for name in TABLES:
            if name not in plan:
                _file_view(con, manifest, name)
    _meta(con, stamp, views_digest())
    con.execute("COMMIT")
    con.execute("CHECKPOINT")
    return report
