"""The lake on disk: Parquet segments, a catalog of what was ingested, and an atomic manifest.

    LAKE/manifest.json                 the current generation: every live file, by table
    LAKE/tables/<table>/<gen>-<id>.parquet   segments: rows of the units one commit wrote
    LAKE/catalog/<gen>-<id>.parquet    one row per ingested dir: its unit, fingerprint, problems
    LAKE/lake.duckdb                   views over the live files, for any DuckDB client
    LAKE/.lock                         held by the one ingest that may write

A commit writes new files under fresh names, then replaces manifest.json in one rename: a reader
or a SIGKILL at any moment sees the previous generation or the next, never a mix. Files no
manifest (current or previous) names are garbage, removed by the next commit.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from wmo_lake import __version__
from wmo_lake.tables import TABLES

MANIFEST = "manifest.json"
FORMAT = "wmo-lake"
FORMAT_VERSION = 1
MAX_SEGMENTS = 12  # per table; more are merged (small ones first) so queries open few files
COMPACT_BELOW_BYTES = 256 * 2**20
FLUSH_BYTES = 8 * 2**20  # Arrow bytes buffered per table before a row group is written
FLUSH_PIECES = 512  # ... or this many appended tables, whichever comes first

CATALOG_SCHEMA = pa.schema(
    [
        ("source", pa.string()),  # the real path of the dir (or walk:PATH for a walk problem)
        ("unit_key", pa.string()),  # the unit its rows belong to; null once another dir owns it
        ("kind", pa.string()),  # trial | unreadable_trial | other | job | walk | duplicate
        ("job_key", pa.string()),
        ("batch", pa.string()),
        ("fingerprint", pa.string()),
        ("n_problems", pa.int32()),
    ]
)


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: SIGKILL ourselves at a named point of a commit when
    WMO_LAKE_CRASH_AT names it. Costs one dict lookup otherwise."""
    if os.environ.get("WMO_LAKE_CRASH_AT") == name:
        os.kill(os.getpid(), 9)


class LakeError(Exception):
    """A lake that cannot be used as asked; the message says what to do."""


@dataclass
class Manifest:
    generation: int = 0
    tables: dict[str, list[str]] = field(default_factory=dict)
    catalog: str | None = None
    previous: list[str] = field(default_factory=list)
    updated_at: str | None = None

    def live_files(self) -> list[str]:
        files = [f for paths in self.tables.values() for f in paths]
        return files + ([self.catalog] if self.catalog else [])


@dataclass
class CatalogEntry:
    source: str
    unit_key: str | None
    kind: str
    job_key: str | None
    batch: str | None
    fingerprint: str
    n_problems: int = 0


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `path` so that it holds the old or the new content, never a torn one."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with exactly `schema`'s columns: missing ones null, extra ones dropped."""
    if table.schema.equals(schema):  # the common case: rows built with the schema
        return table
    columns = [
        table.column(f.name).cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


class Store:
    """One lake directory."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def read_manifest(self) -> Manifest:
        if not self.exists():
            return Manifest()
        try:
            raw = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise LakeError(f"cannot read {self.manifest_path}: {error}") from error
        if raw.get("format") != FORMAT or raw.get("format_version") != FORMAT_VERSION:
            raise LakeError(
                f"{self.root} is not a wmo-lake lake of format version {FORMAT_VERSION} "
                f"(manifest says {raw.get('format')!r} {raw.get('format_version')!r}); "
                "ingest into a new --lake directory"
            )
        return Manifest(
            generation=raw["generation"],
            tables=raw["tables"],
            catalog=raw.get("catalog"),
            previous=raw.get("previous", []),
            updated_at=raw.get("updated_at"),
        )

    def files(self, manifest: Manifest, table: str) -> list[Path]:
        return [self.root / rel for rel in manifest.tables.get(table, [])]

    def read_catalog(self, manifest: Manifest) -> dict[str, CatalogEntry]:
        if not manifest.catalog:
            return {}
        rows = pq.read_table(self.root / manifest.catalog, schema=CATALOG_SCHEMA).to_pylist()
        return {row["source"]: CatalogEntry(**row) for row in rows}

    @contextlib.contextmanager
    def lock(self, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Hold the lake's write lock; `on_wait` is told who holds it while we wait."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / ".lock"
        with open(path, "a+") as stream:
            try:
                fcntl.flock(stream, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                stream.seek(0)
                holder = stream.read().strip() or "another process"
                if on_wait:
                    on_wait(
                        f"waiting for {holder} to finish writing {self.root} (lock: {path}) ..."
                    )
                fcntl.flock(stream, fcntl.LOCK_EX)
            stream.seek(0)
            stream.truncate()
            stream.write(f"wmo-lake ingest pid {os.getpid()}")
            stream.flush()
            try:
                yield
            finally:
                stream.seek(0)
                stream.truncate()
                fcntl.flock(stream, fcntl.LOCK_UN)


class Commit:
    """One generation in the making: new segments, removed units, then an atomic swap."""

    def __init__(self, store: Store, base: Manifest) -> None:
        self.store = store
        self.base = base
        self.generation = base.generation + 1
        self.token = secrets.token_hex(4)
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._new_files: dict[str, str] = {}
        self._buffers: dict[str, list[pa.Table]] = {}
        self._buffered: dict[str, int] = {}
        self.removed: set[str] = set()

    @property
    def changed(self) -> bool:
        return bool(self.removed or self._new_files)

    def _segment_path(self, table: str, label: str = "") -> tuple[Path, str]:
        rel = f"tables/{table}/{self.generation:06d}-{self.token}{label}.parquet"
        path = self.store.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path, rel

    def _open_writer(self, table: str, path: Path) -> pq.ParquetWriter:
        return pq.ParquetWriter(
            path,
            TABLES[table].schema,
            compression="zstd",
            compression_level=1,
            use_byte_stream_split=[
                f.name for f in TABLES[table].schema if pa.types.is_floating(f.type)
            ]
            or False,
        )

    def append(self, table: str, rows: pa.Table) -> None:
        """Add rows of new units to this generation's segment of `table`.

        Rows are buffered and written in row groups of up to FLUSH_BYTES: a row group per trial
        would make every later scan slow, and a buffer of the whole ingest would not be flat."""
        if rows.num_rows == 0:
            return
        if table not in self._writers:
            path, rel = self._segment_path(table)
            self._writers[table] = self._open_writer(table, path)
            self._new_files[table] = rel
            self._buffers[table] = []
            self._buffered[table] = 0
        self._buffers[table].append(conform(rows, TABLES[table].schema))
        self._buffered[table] += rows.nbytes
        # Small tables cost far more than their bytes (buffers, schema), so their count is
        # bounded too: memory stays flat however many trials one ingest reads.
        if self._buffered[table] >= FLUSH_BYTES or len(self._buffers[table]) >= FLUSH_PIECES:
            self._flush(table)

    def _flush(self, table: str) -> None:
        if self._buffers.get(table):
            self._writers[table].write_table(pa.concat_tables(self._buffers[table]))
        self._buffers[table] = []
        self._buffered[table] = 0

    def remove_units(self, keys: Iterable[str]) -> None:
        """Drop these units' rows from the segments of earlier generations."""
        self.removed.update(keys)

    def _rewrite_without_removed(self, table: str, files: list[str]) -> list[str]:
        if not self.removed:
            return files
        unit_column = TABLES[table].unit_column
        removed = pa.array(sorted(self.removed), pa.string())
        kept: list[str] = []
        for index, rel in enumerate(files):
            source = self.store.root / rel
            units = pq.read_table(source, columns=[unit_column]).column(unit_column)
            if not pc.any(pc.is_in(units, value_set=removed)).as_py():
                kept.append(rel)
                continue
            path, new_rel = self._segment_path(table, f"-r{index}")
            with self._open_writer(table, path) as writer:
                for batch in pq.ParquetFile(source).iter_batches(batch_size=2048):
                    rows = pa.Table.from_batches([batch])
                    rows = rows.filter(pc.invert(pc.is_in(rows[unit_column], value_set=removed)))
                    writer.write_table(conform(rows, TABLES[table].schema))
            kept.append(new_rel)
        return kept

    def _compact(self, table: str, files: list[str]) -> list[str]:
        """Merge small segments once a table has too many, so every query opens few files."""
        if len(files) <= MAX_SEGMENTS:
            return files
        sizes = {rel: (self.store.root / rel).stat().st_size for rel in files}
        small = [rel for rel in files if sizes[rel] < COMPACT_BELOW_BYTES]
        if len(small) < 2:
            return files
        path, new_rel = self._segment_path(table, "-c")
        with self._open_writer(table, path) as writer:
            for rel in small:
                for batch in pq.ParquetFile(self.store.root / rel).iter_batches(batch_size=2048):
                    writer.write_table(
                        conform(pa.Table.from_batches([batch]), TABLES[table].schema)
                    )
        return [rel for rel in files if rel not in small] + [new_rel]

    def finish(self, catalog: Iterable[CatalogEntry]) -> Manifest:
        """Write the catalog and swap the manifest: the commit point."""
        for table, writer in self._writers.items():
            self._flush(table)
            writer.close()
        tables: dict[str, list[str]] = {}
        for name in TABLES:
            files = self._rewrite_without_removed(name, list(self.base.tables.get(name, [])))
            if name in self._new_files:
                files.append(self._new_files[name])
            files = self._compact(name, files)
            if not files:  # an empty table still needs a file to carry its schema
                path, rel = self._segment_path(name)
                pq.write_table(TABLES[name].schema.empty_table(), path)
                files = [rel]
            tables[name] = files
        catalog_rel = f"catalog/{self.generation:06d}-{self.token}.parquet"
        (self.store.root / "catalog").mkdir(parents=True, exist_ok=True)
        entries = [vars(entry) for entry in catalog]
        pq.write_table(
            pa.Table.from_pylist(entries, schema=CATALOG_SCHEMA),
            self.store.root / catalog_rel,
            compression="zstd",
        )
        manifest = Manifest(
            generation=self.generation,
            tables=tables,
            catalog=catalog_rel,
            previous=self.base.live_files(),
            updated_at=datetime.now(UTC).isoformat(),
        )
        _fsync_dir(self.store.root)
        crash_point("before_manifest")
        payload = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "wmo_lake_version": __version__,
            "generation": manifest.generation,
            "updated_at": manifest.updated_at,
            "tables": manifest.tables,
            "catalog": manifest.catalog,
            "previous": manifest.previous,
        }
        atomic_write_bytes(self.store.manifest_path, json.dumps(payload, indent=2).encode())
        crash_point("after_manifest")
        self.collect_garbage(manifest)
        return manifest

    def abort(self) -> None:
        for writer in self._writers.values():
            with contextlib.suppress(Exception):
                writer.close()

    def collect_garbage(self, manifest: Manifest) -> None:
        """Remove files neither this generation nor the previous one names (readers of the
        previous generation may still be scanning)."""
        keep = set(manifest.live_files()) | set(manifest.previous)
        for folder in ("tables", "catalog"):
            for path in (self.store.root / folder).rglob("*.parquet"):
                if path.relative_to(self.store.root).as_posix() not in keep:
                    with contextlib.suppress(OSError):
                        path.unlink()
        for tmp in self.store.root.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
