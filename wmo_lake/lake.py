"""Opening a lake for queries: DuckDB views over the live Parquet files, then the `sql/` views.

- `LAKE/lake.duckdb`: a database file any DuckDB client as new as its writer can open,
  rebuilt at every commit: the light tables' rows stored in it, kept incrementally, the heavy
  tables views over their files (wmo_lake.lakefile). Its file views must name their files in
  SQL (DuckDB cannot bind parameters in DDL), so one place quotes them (`sql_string`); they
  name them relative to the lake dir, so the lake can be moved or copied (a client sets
  `file_search_path` to the lake dir, or runs from inside it).
- `connect(lake)` (the CLI and the Python API) opens that file read-only, or, when it is stale,
  a private copy (brought up to date from it, or every table a view over its files): every
  connection is read-only by how it is opened.
"""

from __future__ import annotations

import contextlib
import functools
import graphlib
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmo_lake import lakefile
from wmo_lake.output import sql_string
from wmo_lake.settings import SettingError, defaults_query, variables
from wmo_lake.store import (
    DUCKDB_FILE,
    LakeError,
    Manifest,
    Store,
    atomic_write_bytes,
    fsync_path,
    refuse_shadowed_files,
)

if TYPE_CHECKING:
    import duckdb

    from wmo_lake.stored_copies import StoredCopies


def sql_dir() -> Path:
    """The view definitions: wmo_lake/sql/ when installed (pyproject.toml ships the checkout's
    top-level sql/ as package wmo_lake.sql), else the checkout's sql/. (Not importlib.resources:
    sql/ has no __init__.py, and the path of such a package was a MultiplexedPath, whose text
    named no folder: every query of an installed wheel failed.)"""
    package = Path(__file__).resolve().parent
    installed = package / "sql"
    return installed if installed.is_dir() else package.parent / "sql"


def view_sources() -> list[tuple[str, str]]:
    """(view name, SQL) for every `sql/*.sql`, ordered so each view follows the views it reads
    (a topological order of the references DuckDB's parser finds in each view)."""
    texts = {p.stem: p.read_text(encoding="utf-8") for p in sorted(sql_dir().glob("*.sql"))}
    return [(name, texts[name]) for name in _view_order(tuple(texts.items()))]


@functools.cache  # parsed once per process (and per set of view texts)
def _view_order(texts: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    import duckdb

    names = {name for name, _ in texts}
    with duckdb.connect() as parser:
        graph = {
            name: sorted(view_dependencies(sql, parser) & names - {name}) for name, sql in texts
        }
    try:
        return tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        raise LakeError(f"views {error.args[1]} depend on each other in a cycle") from None


_CREATE_VIEW = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?VIEW\s+\w+\s+AS\s", re.I | re.M)


def view_dependencies(sql: str, con: duckdb.DuckDBPyConnection) -> set[str]:
    """The tables and views a `CREATE VIEW name AS <query>` reads: every table its query names
    (in FROM, JOIN or a subquery), its own CTEs excepted. Parsed by DuckDB, not matched as words,
    so a column that shares a view's name (`datum_stats.datums`) is not a dependency."""
    match = _CREATE_VIEW.search(sql)
    if match is None:
        raise LakeError(f"not a CREATE VIEW statement: {sql[:80]!r}")
    row = con.execute("SELECT json_serialize_sql(?)", [sql[match.end() :]]).fetchone()
    tree = json.loads(row[0]) if row else {"error": True, "error_message": "no result"}
    if tree.get("error"):
        raise LakeError(f"cannot parse view SQL: {tree.get('error_message')}")
    tables: set[str] = set()
    ctes: set[str] = set()
    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and isinstance(node.get("table_name"), str):
                tables.add(node["table_name"])
            cte_map = node.get("cte_map")
            if isinstance(cte_map, dict):
                ctes.update(entry["key"] for entry in cte_map.get("map", []))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return tables - ctes


class NoLakeError(LakeError):
    """The directory holds no lake (no manifest.json): nothing was ingested into it."""

    advice = ": ingest into it first"  # (a command says how instead: commands.options)


def _require(store: Store) -> Manifest:
    if store.root.is_file():  # (no ingest makes a lake of it)
        raise NoLakeError(f"no lake at {store.root}: it is a file, not a lake directory")
    if not store.exists():
        raise NoLakeError(f"no lake at {store.root} (no manifest.json){NoLakeError.advice}")
    return store.read_manifest()


class BadSettingError(LakeError, ValueError):
    """A setting the views cannot take: a LakeError to the commands, a ValueError to Python code
    (as any bad argument value is)."""


def set_settings(con: duckdb.DuckDBPyConnection, values: dict[str, Any]) -> None:
    """Set query-time settings ({variable: value}, wmo_lake.settings.SETTINGS; None leaves a
    setting at its default). BadSettingError on an unknown setting or a value it cannot take."""
    try:
        checked = variables(values)
    except SettingError as error:
        raise BadSettingError(str(error)) from None
    for variable, value in checked.items():
        con.execute(f"SET VARIABLE {variable} = ?", [value])


def settings_row(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """`SELECT * FROM settings`: every setting as the views read it now (for export manifests)."""
    relation = con.sql("SELECT * FROM settings")
    (row,) = relation.fetchall()
    return dict(zip(relation.columns, row, strict=True))


def create_settings(con: duckdb.DuckDBPyConnection) -> None:
    """The `settings` view, and the one-row `setting_defaults` table it reads (the registry's
    defaults, bound): every other view reads its settings there."""
    query, defaults = defaults_query()
    con.execute(f"CREATE OR REPLACE TABLE setting_defaults AS {query}", defaults)
    con.execute((sql_dir() / "settings.sql").read_text(encoding="utf-8"))


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """The settings, then the `sql/` views over the lake's tables (already in `con`)."""
    create_settings(con)
    for name, sql in view_sources():
        if name != "settings":
            con.execute(sql)


@functools.cache  # the views ship with the package: they do not change while it runs
def views_digest() -> str:
    """What lake.duckdb's views are built from (the view texts and the settings' defaults): part
    of its stamp, so a file built by another wmo-lake version is rebuilt, not trusted."""
    digest = hashlib.sha256()
    for path in sorted(sql_dir().glob("*.sql")):  # not view_sources(): that imports duckdb
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(repr(defaults_query()).encode())
    digest.update(lakefile.LAYOUT.encode())  # how lake.duckdb holds the tables
    return digest.hexdigest()[:16]


# A query's memory is bounded: past DuckDB's memory_limit, sorts, joins and aggregates spill to
# temp_directory instead of failing or taking the machine (DuckDB's own default is 80% of RAM).
DEFAULT_MEMORY_LIMIT = "4GB"
MEMORY_LIMIT_ENV = "WMO_LAKE_MEMORY_LIMIT"
TEMP_DIRECTORY_ENV = "WMO_LAKE_TEMP_DIR"


def engine_config() -> dict[str, str]:
    """DuckDB settings every lake connection gets: memory_limit (WMO_LAKE_MEMORY_LIMIT, default
    4GB), parquet_metadata_cache, and the temp_directory it spills to (WMO_LAKE_TEMP_DIR,
    default a per-user dir under the system temp dir: readers need no write access to the
    lake). `SET memory_limit` in a query changes it for that connection."""
    import tempfile

    spill = os.environ.get(TEMP_DIRECTORY_ENV) or str(
        Path(tempfile.gettempdir()) / f"wmo-lake-spill-{os.getuid()}"
    )
    return {
        "memory_limit": os.environ.get(MEMORY_LIMIT_ENV) or DEFAULT_MEMORY_LIMIT,
        "temp_directory": spill,
        # a query names a table's files once per view that reads it; the lake's files never
        # change under a name (every commit writes new ones), so their footers are read once
        "parquet_metadata_cache": "true",
    }


# Names of UTC a machine's zone may already have: kept as they are, so a connection's times read
# exactly as a plain DuckDB client's on that machine (time zone name included).
UTC_NAMES = frozenset(
    {"UTC", "Etc/UTC", "Etc/Universal", "Universal", "Etc/Zulu", "Zulu", "UCT", "Etc/UCT"}
    | {"GMT", "Etc/GMT", "GMT0", "Etc/GMT0", "Etc/GMT+0", "Etc/GMT-0", "Greenwich", "UTC0"}
)


def _machine_zone_is_utc() -> bool:
    """Whether the zone DuckDB (ICU) takes for this machine is UTC by name: $TZ, else the
    /etc/localtime link's zoneinfo name. Read here, not asked of DuckDB: asking loads its ICU
    extension, ~4-7 ms of a `wmo-lake sql` that needs no zone (measured: 3.5% of a csv copy)."""
    zone = os.environ.get("TZ")
    if zone is None:
        try:
            zone = os.path.realpath("/etc/localtime")
        except OSError:
            return False
    return zone.lstrip(":").rsplit("zoneinfo/", 1)[-1] in UTC_NAMES


def times_in_utc(con: duckdb.DuckDBPyConnection) -> None:
    """The lake's times are UTC instants: shown, cast to a date and truncated in UTC, as Spark's
    session is, not in each machine's own zone (a trial's day moved with $TZ). A machine whose
    zone already is UTC keeps it as named."""
    if not _machine_zone_is_utc():
        con.execute("SET TimeZone = 'UTC'")


def apply_engine_config(con: duckdb.DuckDBPyConnection) -> None:
    """Set engine_config() on an open connection (SET, not connect(config=...): a process may
    already hold lake.duckdb open through plain duckdb.connect, and DuckDB refuses a second
    connection to one file with another configuration). A temp dir already in use stays."""
    import duckdb

    for name, value in engine_config().items():
        # (temp_directory cannot move once the database has spilled)
        with contextlib.suppress(duckdb.NotImplementedException):
            try:
                con.execute(f"SET {name} = {sql_string(value)}")
            except (duckdb.ParserException, duckdb.InvalidInputException) as error:
                if name != "memory_limit":
                    raise
                raise LakeError(
                    f"{MEMORY_LIMIT_ENV}={value!r} is not a memory size DuckDB takes "
                    f"({str(error).splitlines()[0]}); give one such as 4GB or 500MB, or unset it"
                ) from None


def connect(
    lake: Path | str,
    settings: dict[str, Any] | None = None,
    *,
    check: bool = True,
    files_only: bool = False,
    writable: list[str] | None = None,
    rewrite: Callable[[str], str] | None = None,
) -> duckdb.DuckDBPyConnection:
    """A read-only DuckDB connection with every table and view of the lake.

    It opens LAKE/lake.duckdb read-only when that file is current (its views are already bound:
    ~10 ms). Otherwise (an older lake, another process holding the file open for writing, or a
    read-only lake dir) it builds the same tables and views into a private database file in the
    temp dir (from a copy of the stale lake.duckdb when it can, else every table a view over its
    files) and opens that read-only, so no connection this returns can change a lake. Temporary
    tables still work (DuckDB keeps them in memory). With `check`, a reward key that no trial of
    the lake has is a `RewardKeyWarning` (wmo_lake.checks); rows an older wmo-lake read are a
    `StaleRulesWarning` either way. `rewrite` turns the warnings' text into a caller's terms
    (the Python API's: `wmo_lake.ingest()`, not `wmo-lake ingest`).

    `files_only=True` also confines the connection's file access to the lake's live Parquet
    files (DuckDB's `enable_external_access = false` with `allowed_paths`): no COPY TO, ATTACH or
    read_csv of other files, except the paths in `writable` (where `wmo-lake sql` has DuckDB's
    COPY write its --output, or /dev/stdout). `wmo-lake sql` opens the lake this way."""
    import duckdb

    store = Store(lake)
    manifest = _require(store)
    con = None
    if duckdb_file_current(store, manifest):
        try:
            con = duckdb.connect(str(store.root / DUCKDB_FILE), read_only=True)
        except duckdb.Error:
            con = None
        if con is not None and not _holds_generation(
            con, store.duckdb_stamp(manifest, views_digest())
        ):
            # DuckDB hands this process the database it already has open at that path: a
            # connection still held (a notebook's `con`) to the lake.duckdb an ingest has since
            # replaced. Its rows are an older generation's: build our own instead.
            con.close()
            con = None
        elif con is not None and _confined(con):
            # ... or one a file-confined connection (`wmo-lake sql`'s, run in this process while
            # another connection kept the database open) left with external access off, which
            # DuckDB never turns back on: it takes no temp dir and no new allowed paths.
            con.close()
            con = None
    if con is None:
        con = connect_private_copy(store, manifest)
    try:
        _set_up(con, store, manifest, settings, files_only, writable)
        from wmo_lake.checks import warn_on_stale_rules, warn_on_unused_reward_key

        warn_on_stale_rules(manifest, str(lake), rewrite)
        if check:
            with store.naming_damage(manifest, duckdb.Error):  # (its query reads `trials`)
                warn_on_unused_reward_key(con, rewrite=rewrite)
    except BaseException:
        # A connection not given out is closed now: DuckDB shares one database per file in a
        # process, and a confined one left to the garbage collector (a bad setting raised) kept
        # its `enable_external_access = false` for the process's next connect to the same file.
        con.close()
        raise
    return con


def _on_a_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # (None, closed, or no isatty)
        return False


def _set_up(
    con: duckdb.DuckDBPyConnection,
    store: Store,
    manifest: Manifest,
    settings: dict[str, Any] | None,
    files_only: bool,
    writable: list[str] | None,
) -> None:
    """`connect`'s configuration of a connection it opened (see there)."""
    apply_engine_config(con)
    times_in_utc(con)
    if not _on_a_terminal(sys.stdout):
        # DuckDB draws its progress bar on fd 1 after 2 s of a query: into the data of a
        # `> file` or a pipe (`wmo-lake sql` turns it off for its own output on a terminal too)
        con.execute("SET enable_progress_bar = false")
    # Both doors' views name their files relative to the lake dir, wherever that is now (the
    # setting is per connection: lake.duckdb does not keep it).
    refuse_shadowed_files(store.root, manifest)
    root = str(store.root.resolve())
    con.execute("SET file_search_path = ?", [root])
    if files_only:
        # every live segment, from the manifest (not wmo_lake.tables: that would load pyarrow).
        # The views name them relative to the lake dir, and DuckDB checks a file twice: its name
        # as the view gives it, made absolute against the working directory (so this connection
        # is for this process's working directory: wmo-lake sql never changes it), then the
        # path it opens (the search path joined with that name). Both are allowed (DuckDB does
        # not resolve symlinks: a table dir linked to another disk needs nothing more).
        live = list(
            dict.fromkeys(
                path
                for table in manifest.tables
                for rel in manifest.table_files(table)
                for path in (os.path.join(root, rel), os.path.abspath(rel))
            )
        )
        con.execute("SET allowed_paths = ?", [live + list(writable or [])])
        con.execute("SET enable_external_access = false")  # DuckDB refuses to turn it back on
    set_settings(con, settings or {})


def _confined(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether `con`'s database has external access off (a file-confined connection's)."""
    ((value,),) = con.execute("SELECT current_setting('enable_external_access')").fetchall()
    return value is False or str(value).lower() == "false"


def _holds_generation(con: duckdb.DuckDBPyConnection, stamp: str) -> bool:
    """Whether the lake.duckdb `con` opened was built for `stamp` (its `_wmo_lake` row says)."""
    import duckdb

    try:
        row = con.execute("SELECT stamp FROM _wmo_lake").fetchone()
    except duckdb.Error:
        return False
    return row is not None and row[0] == stamp


def session_beside(
    con: duckdb.DuckDBPyConnection, settings: dict[str, Any] | None = None
) -> duckdb.DuckDBPyConnection:
    """A second session on the database of `con` (a `connect` connection), set up as `connect`
    sets up its own: the same search path and `settings` (DuckDB keeps both per session). Its
    queries may run on another thread while `con` runs one: a query that leaves a core idle
    (`rollout_stats` runs 1.1x faster on two threads than on one) has another beside it."""
    session = con.cursor()
    ((search_path,),) = con.sql("SELECT current_setting('file_search_path')").fetchall()
    session.execute("SET file_search_path = ?", [search_path])
    set_settings(session, settings or {})
    return session


def connect_private_copy(store: Store, manifest: Manifest) -> duckdb.DuckDBPyConnection:
    """The lake's views built into a database file of our own, opened read-only; the file is
    unlinked once open (DuckDB keeps its descriptor), so nothing is left behind."""
    import tempfile

    import duckdb

    folder = Path(tempfile.mkdtemp(prefix="wmo-lake-"))
    path = folder / DUCKDB_FILE
    try:
        # from the lake's own (stale) lake.duckdb when it has the stored tables' layout: only
        # the partitions that changed since are read; else every table a view over its files
        lakefile.build(
            store,
            manifest,
            path,
            store.duckdb_stamp(manifest, views_digest()),
            base=store.root / DUCKDB_FILE,
            stored=False,
        )
        con = duckdb.connect(str(path), read_only=True)
        # its views name their files relative to the lake dir, as lake.duckdb's do
        con.execute("SET file_search_path = ?", [str(store.root.resolve())])
        return con
    except (
        OSError,
        duckdb.IOException,
        duckdb.TransactionException,
        duckdb.FatalException,
    ) as error:
        # a full or unwritable temp dir: say which dir, not a DuckDB traceback
        raise LakeError(
            f"cannot build the lake's views in the temp dir {folder.parent} ({error}), which "
            f"is needed while {store.root / DUCKDB_FILE} is not current: free space there, "
            "set TMPDIR to a dir with room, or run `wmo-lake ingest` into the lake to bring "
            f"{DUCKDB_FILE} up to date"
        ) from error
    finally:
        for leftover in folder.iterdir():
            leftover.unlink(missing_ok=True)
        folder.rmdir()


def duckdb_file_current(store: Store, manifest: Manifest | None = None) -> bool:
    """Whether LAKE/lake.duckdb holds the current generation (`manifest`'s, read when None)
    with these views."""
    return store.duckdb_file_current(views_digest(), manifest)


# A first ingest's lake.duckdb, with no rows yet, built while the readers work (`prepare_...`)
SKELETON = f".{DUCKDB_FILE}.skeleton"
# Where skeletons are kept between lakes (one per wmo-lake, DuckDB and views version); empty:
# none kept. Default: $XDG_CACHE_HOME/wmo-lake, else ~/.cache/wmo-lake.
CACHE_DIR_ENV = "WMO_LAKE_CACHE_DIR"


def _empty_manifest() -> Manifest:
    from wmo_lake.commit import schema_digest
    from wmo_lake.tables import TABLES

    return Manifest(schemas={name: schema_digest(spec.schema) for name, spec in TABLES.items()})


def cached_skeleton() -> Path | None:
    """Where this code's skeleton is kept for any lake's first build, or None (no cache dir).
    A skeleton holds nothing of a lake (empty stored tables, views over empty stand-ins), only
    what this code builds, so one file serves every lake: built once per version, copied
    (~2 ms) instead of built (~0.3 s of CPU, most of it binding the views)."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured is not None and not configured:
        return None
    if configured:
        root = Path(configured)
    else:
        try:
            root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wmo-lake"
        except RuntimeError:  # no home directory
            return None
    import duckdb

    from wmo_lake import __version__

    key = hashlib.sha256(
        "\0".join(
            [
                __version__,
                duckdb.__version__,
                views_digest(),
                builder_digest(),
                *_empty_manifest().schemas.values(),
            ]
        ).encode()
    ).hexdigest()[:16]
    return root / f"skeleton-{key}.duckdb"


def builder_digest() -> str:
    """The code that builds a lake.duckdb (this module and lakefile.py), as the skeleton cache
    keys it: the version string does not move with every change of it, and another checkout or
    install of the same version shares the cache dir (~0.1 ms: two files read)."""
    from wmo_lake import lakefile

    digest = hashlib.sha256()
    for module in (__file__, lakefile.__file__):
        digest.update(Path(module).read_bytes())
    return digest.hexdigest()


def _copy_atomically(source: Path, target: Path) -> bool:
    """Copy `source` to `target` through a temporary name; False when it cannot."""
    import shutil  # (here: an unchanged re-ingest loads this module, but copies nothing)

    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)
    except OSError:  # none kept yet, or a cache dir that cannot be read or written
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return False
    return True


def prepare_duckdb_file(store: Store) -> None:
    """For a lake with no lake.duckdb yet: build, ahead of the commit, the file an empty lake of
    this code's schemas would have (its stored tables empty, every view created and bound), so
    that `ensure_duckdb_file` only fills it, as it brings any earlier file up to date. Binding
    the views is most of a first build's cost, and it needs no rows; an ingest calls this in a
    thread while its readers work. Anything it gets wrong is corrected by that update (which
    checks the layout, each stored table's schema and the views' digest), so it is only ever
    a head start. The skeleton comes from the cache (`cached_skeleton`) when it is there, and
    goes there once built."""
    if (store.root / DUCKDB_FILE).exists():
        return
    target = store.root / SKELETON
    cached = cached_skeleton()
    if cached is not None and _copy_from_cache(cached, target):  # (False when none is kept)
        return
    lakefile.build(store, _empty_manifest(), target, "skeleton")
    if cached is not None:
        _copy_into_cache(target, cached)  # (a cache dir that cannot be written is no cache)


def _digest_file(path: Path) -> Path:
    """Where the sha256 of a cached skeleton is kept: every lake's first lake.duckdb starts as a
    copy of it, so a block of it changed in place (a disk error) would damage each one."""
    return path.with_name(f"{path.name}.sha256")


def _copy_into_cache(source: Path, cached: Path) -> None:
    if _copy_atomically(source, cached):
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        with contextlib.suppress(OSError):
            atomic_write_bytes(_digest_file(cached), digest.encode())


def _copy_from_cache(cached: Path, target: Path) -> bool:
    """Copy the cached skeleton to `target` when its bytes are the ones kept (its digest file
    says); else False, and a cached file that is not is removed (the next build keeps a good
    one). Another process writing the cache meanwhile costs no more than a build."""
    try:
        data = cached.read_bytes()
        kept = _digest_file(cached).read_text(encoding="ascii").strip()
    except (OSError, ValueError):
        return False
    if hashlib.sha256(data).hexdigest() != kept:
        with contextlib.suppress(OSError):
            cached.unlink()
        return False
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        return False
    return True


def ensure_duckdb_file(
    store: Store, copies: StoredCopies | None = None, manifest: Manifest | None = None
) -> Path:
    """(Re)build LAKE/lake.duckdb when it does not match the current generation. `copies`: an
    ingest's copies of the rows it wrote to the stored tables (not read back from Parquet).
    `manifest`: the lake's current one, when the caller has it (the writer that just committed
    it, holding the lock): a lake of 1,000 steps has a 0.8 MB manifest, ~7 ms a read."""
    manifest = _require(store) if manifest is None else manifest
    target = store.root / DUCKDB_FILE
    views = views_digest()
    if duckdb_file_current(store, manifest):
        return target
    stamp = store.duckdb_stamp(manifest, views)
    tmp = target.with_name(f".{DUCKDB_FILE}.building")
    skeleton = store.root / SKELETON
    import duckdb

    try:
        if not target.exists() and not skeleton.exists() and cached_skeleton() is not None:
            prepare_duckdb_file(store)  # a first build with no head start: the cached skeleton
        # from the current file (or a first ingest's skeleton): only the partitions whose
        # files changed are read again
        base = target if target.exists() or not skeleton.exists() else skeleton
        report = lakefile.build(store, manifest, tmp, stamp, base=base, copies=copies)
    # a full or read-only disk: DuckDB's errors, or the OSError of copying the current file
    except (duckdb.IOException, duckdb.FatalException, OSError) as error:
        for partial in (tmp, skeleton):  # (their space is what the next try needs)
            for name in (partial.name, f"{partial.name}.wal"):
                with contextlib.suppress(OSError):
                    partial.with_name(name).unlink(missing_ok=True)
        raise LakeError(
            f"generation {manifest.generation} of the lake at {store.root} is committed, but "
            f"{target} could not be written ({error}); every command reads the lake without "
            "it (slower) until it is: free space, or make the lake dir writable, and run "
            "`wmo-lake ingest` again"
        ) from error
    kept = cached_skeleton() if base == skeleton and not report.incremental else None
    if kept is not None:  # a skeleton that could not be filled is not kept for the next lake
        with contextlib.suppress(OSError):
            kept.unlink(missing_ok=True)
    skeleton.unlink(missing_ok=True)
    os.replace(tmp, target)  # one rename: a reader opens the old file or the new one
    fsync_path(store.root)
    store.write_duckdb_stamp(stamp)
    return target


def one_schema(manifest: Manifest, table: str) -> str | None:
    """The digest of the schema all of `table`'s files have, when it is this code's: then a
    view reads them without union_by_name (which reads every file's footer when a query binds,
    and a partitioned lake has a file per step); None when they may differ."""
    from wmo_lake.commit import schema_digest
    from wmo_lake.tables import TABLES

    digest = schema_digest(TABLES[table].schema)
    return digest if manifest.schemas.get(table) == digest else None
