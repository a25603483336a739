"""One lake generation in the making: new Parquet segments, removed units, an atomic swap.

See wmo_lake/store.py for the layout. Rows arrive per trial and are buffered into row groups;
replaced units are filtered out of the earlier segments that hold them; a table with too many
segments has its small ones merged; then the catalog and manifest.json are written, the manifest
last, in one rename.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from wmo_lake import __version__
from wmo_lake.pending import PendingRows
from wmo_lake.store import (
    FORMAT,
    FORMAT_VERSION,
    CatalogEntry,
    Manifest,
    Store,
    atomic_write_bytes,
    crash_point,
    fsync_dir,
    segment_prefix,
)
from wmo_lake.tables import TABLES

MAX_SEGMENTS = 12  # per table; more are merged (small ones first) so queries open few files
COMPACT_BELOW_BYTES = 256 * 2**20
FLUSH_BYTES = 8 * 2**20  # Arrow bytes buffered per table before a row group is written
FLUSH_PIECES = 512  # ... or this many appended tables, whichever comes first
FLUSH_PENDING_ROWS = 4096  # rows kept as Python lists (PendingRows) before Arrow is built


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


def open_writer(path: Path, table: str) -> pq.ParquetWriter:
    """zstd; dictionaries only for strings (token-id lists gain nothing from one but the time
    spent building it); float columns byte-stream-split, which compresses logprobs well."""
    schema = TABLES[table].schema
    return pq.ParquetWriter(
        path,
        schema,
        compression="zstd",
        compression_level=1,
        use_dictionary=[f.name for f in schema if pa.types.is_string(f.type)] or False,
        use_byte_stream_split=[f.name for f in schema if pa.types.is_floating(f.type)] or False,
    )


class SegmentWriter:
    """One process's new segments of a generation: a buffered Parquet writer per table.

    Rows are written in row groups of up to FLUSH_BYTES: a row group per trial would make every
    later scan slow, and a buffer of the whole ingest would not be flat. The ingest process has
    one; each reader process of a parallel ingest has its own, so rows never cross a pipe."""

    def __init__(self, root: Path, prefix: str) -> None:
        self.root = root
        self.prefix = prefix
        self.files: dict[str, str] = {}
        self._writers: dict[str, pq.ParquetWriter] = {}
        self._buffers: dict[str, list[pa.Table]] = {}
        self._buffered: dict[str, int] = {}
        self._pending: dict[str, PendingRows] = {}

    def append(self, table: str, rows: pa.Table | PendingRows) -> None:
        if rows.num_rows == 0:
            return
        if table not in self._writers:
            rel = f"tables/{table}/{self.prefix}.parquet"
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            self._writers[table] = open_writer(self.root / rel, table)
            self.files[table] = rel
            self._buffers[table] = []
            self._buffered[table] = 0
        if isinstance(rows, PendingRows):  # one Arrow build per many trials, at the flush
            pending = self._pending.get(table)
            if pending is None:
                names = TABLES[table].schema.names
                pending = self._pending[table] = PendingRows({n: [] for n in names}, 0)
            pending.extend(rows)
            if pending.num_rows >= FLUSH_PENDING_ROWS:
                self._flush(table)
            return
        self._buffers[table].append(conform(rows, TABLES[table].schema))
        self._buffered[table] += rows.nbytes
        # Small tables cost far more than their bytes (buffers, schema), so their count is
        # bounded too: memory stays flat however many trials one ingest reads.
        if self._buffered[table] >= FLUSH_BYTES or len(self._buffers[table]) >= FLUSH_PIECES:
            self._flush(table)

    def _flush(self, table: str) -> None:
        pending = self._pending.pop(table, None)
        if pending is not None and pending.num_rows:
            self._buffers[table].append(pending.to_table(TABLES[table].schema))
        if self._buffers.get(table):
            self._writers[table].write_table(pa.concat_tables(self._buffers[table]))
        self._buffers[table] = []
        self._buffered[table] = 0

    def close(self) -> dict[str, str]:
        """Finish every file; table -> its path relative to the lake."""
        for table, writer in self._writers.items():
            self._flush(table)
            writer.close()
        self._writers = {}
        return self.files

    def abort(self) -> None:
        for writer in self._writers.values():
            with contextlib.suppress(Exception):
                writer.close()


class Commit:
    """One generation in the making: new segments, removed units, then an atomic swap."""

    def __init__(self, store: Store, base: Manifest, token: str | None = None) -> None:
        self.store = store
        self.base = base
        self.generation = base.generation + 1
        self.token = token or secrets.token_hex(4)
        self.writer = SegmentWriter(store.root, self.segment_prefix())
        self.added: dict[str, list[str]] = {}  # segments other processes wrote for this commit
        self.removed: set[str] = set()
        self.excluded_from_added: set[str] = set()

    def segment_prefix(self, label: str = "") -> str:
        return segment_prefix(self.generation, self.token, label)

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.writer.files or self.added)

    def _segment_path(self, table: str, label: str) -> tuple[Path, str]:
        rel = f"tables/{table}/{self.segment_prefix(label)}.parquet"
        path = self.store.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path, rel

    def append(self, table: str, rows: pa.Table) -> None:
        """Add rows of new units to this generation's segment of `table`."""
        self.writer.append(table, rows)

    def add_files(self, files: dict[str, str]) -> None:
        """Take segments a reader process wrote for this commit (table -> relative path)."""
        for table, rel in files.items():
            self.added.setdefault(table, []).append(rel)

    def exclude_from_added(self, keys: Iterable[str]) -> None:
        """Drop these units' rows from the segments reader processes wrote (a trial read twice
        in one ingest is stored once, through this process's own writer)."""
        self.excluded_from_added.update(keys)

    def remove_units(self, keys: Iterable[str]) -> None:
        """Drop these units' rows from the segments of earlier generations."""
        self.removed.update(keys)

    def _rewrite_without(self, table: str, files: list[str], keys: set[str]) -> list[str]:
        """`files`, each one holding a unit in `keys` rewritten without that unit's rows."""
        if not keys:
            return files
        import pyarrow.compute as pc  # only a replacing commit needs it

        unit_column = TABLES[table].unit_column
        dropped = pa.array(sorted(keys), pa.string())
        kept: list[str] = []
        for rel in files:
            source = self.store.root / rel
            units = pq.read_table(source, columns=[unit_column]).column(unit_column)
            if not pc.any(pc.is_in(units, value_set=dropped)).as_py():
                kept.append(rel)
                continue
            path, new_rel = self._segment_path(table, f"-r{secrets.token_hex(3)}")
            with open_writer(path, table) as writer:
                for batch in pq.ParquetFile(source).iter_batches(batch_size=2048):
                    rows = pa.Table.from_batches([batch])
                    rows = rows.filter(pc.invert(pc.is_in(rows[unit_column], value_set=dropped)))
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
        with open_writer(path, table) as writer:
            for rel in small:
                for batch in pq.ParquetFile(self.store.root / rel).iter_batches(batch_size=2048):
                    writer.write_table(
                        conform(pa.Table.from_batches([batch]), TABLES[table].schema)
                    )
        return [rel for rel in files if rel not in small] + [new_rel]

    def finish(self, catalog: Iterable[CatalogEntry]) -> Manifest:
        """Write the catalog and swap the manifest: the commit point."""
        own = self.writer.close()
        tables: dict[str, list[str]] = {}
        for name in TABLES:
            files = self._rewrite_without(name, list(self.base.tables.get(name, [])), self.removed)
            files += self._rewrite_without(name, self.added.get(name, []), self.excluded_from_added)
            if name in own:
                files.append(own[name])
            files = self._compact(name, files)
            if not files:  # an empty table still needs a file to carry its schema
                path, rel = self._segment_path(name, "-empty")
                pq.write_table(TABLES[name].schema.empty_table(), path)
                files = [rel]
            tables[name] = files
        catalog_rel = f"catalog/{self.generation:06d}-{self.token}.msgpack"
        self.store.write_catalog(catalog_rel, catalog)
        manifest = Manifest(
            generation=self.generation,
            tables=tables,
            catalog=catalog_rel,
            previous=self.base.live_files(),
            updated_at=datetime.now(UTC).isoformat(),
        )
        fsync_dir(self.store.root)
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
        self.store.collect_garbage(manifest)
        return manifest

    def abort(self) -> None:
        self.writer.abort()
