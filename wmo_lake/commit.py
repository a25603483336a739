"""One lake generation in the making: new Parquet segments, removed units, an atomic swap.

See wmo_lake/store.py for the layout. Rows arrive per trial and are buffered into row groups;
replaced units are filtered out of the earlier segments that hold them; a table with too many
segments has its small ones merged; then the catalog and manifest.json are written, the manifest
last, in one rename.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from wmo_lake import __version__
from wmo_lake.catalog import CatalogEntry
from wmo_lake.parquet_encodings import list_encodings
from wmo_lake.pending import PendingRows
from wmo_lake.store import (
    FORMAT,
    FORMAT_VERSION,
    MIXED,
    NO_PARTITION,
    InterruptedAfterCommit,
    Manifest,
    PartitionedFiles,
    Store,
    atomic_write_bytes,
    crash_point,
    first_line,
    fsync_path,
    partition_values,
    segment_prefix,
)
from wmo_lake.stored_copies import CopyWriter
from wmo_lake.tables import TABLES

MAX_SEGMENTS = 12  # per table; more are merged (small ones first) so queries open few files
COMPACT_BELOW_BYTES = 256 * 2**20
FLUSH_BYTES = 8 * 2**20  # Arrow bytes buffered per table before a row group is written
FLUSH_PIECES = 512  # ... or this many appended tables, whichever comes first
FLUSH_PENDING_ROWS = 4096  # rows kept as Python lists (PendingRows) before Arrow is built
EMPTY_LABEL = "-empty"  # a table with no rows yet: one empty file carries its schema


def schema_digest(schema: pa.Schema) -> str:
    return hashlib.sha256(schema.to_string().encode()).hexdigest()[:16]


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


def _writer_options(table: str, small: bool = False) -> dict[str, Any]:
    """zstd; dictionaries only for strings that repeat (token-id lists and free text gain
    nothing from one but the time spent building it); float columns byte-stream-split, which
    compresses logprobs well, and token id lists delta-packed (`list_encodings`). A `small`
    file (one row group of few rows and bytes: a step of small trials) has no dictionaries
    (each costs a page of its own, encoded and compressed apart, more time than it saves bytes
    for a few dozen rows) and is LZ4_RAW: zstd starts a context per column chunk, which made it
    ~4 ms of a step's 7 ms to encode its 8 small files, against 3 ms in all with lz4, for files
    ~20% bigger. DuckDB, pyarrow and Spark read either."""
    schema = TABLES[table].schema
    split = [f.name for f in schema if pa.types.is_floating(f.type)] or False
    free_text = TABLES[table].free_text
    # No min / max statistics for free text: a page's min and max of long, all-distinct texts
    # prune no query, and comparing every value for them was ~15% of a trajectory's write.
    statistics = [f.name for f in schema if f.name not in free_text] if free_text else True
    # token id and logprob lists: see wmo_lake/parquet_encodings.py
    encodings = list_encodings(schema) or None
    if small:
        return {
            "compression": "lz4",
            "use_dictionary": False,
            "use_byte_stream_split": split,
            "write_statistics": statistics,
            "column_encoding": encodings,
        }
    dictionary = [f.name for f in schema if pa.types.is_string(f.type) and f.name not in free_text]
    return {
        "compression": "zstd",
        "compression_level": 1,
        "use_dictionary": dictionary or False,
        "use_byte_stream_split": split,
        "write_statistics": statistics,
        "column_encoding": encodings,
    }


def open_writer(path: Path, table: str) -> pq.ParquetWriter:
    return pq.ParquetWriter(path, TABLES[table].schema, **_writer_options(table))


# A segment written in one go with fewer rows than this is a small file (see _writer_options):
# what a step of small trials puts in a partition.
SMALL_FILE_ROWS = 4096
# ... and fewer Arrow bytes than this: a big trial's few hundred turns are megabytes of token
# ids, which zstd stores in ~3/4 of lz4's bytes (the spans of the bench's 128 big trials:
# 13 MB, 17 MB as lz4), at a cost that is per byte, not per column chunk
SMALL_FILE_BYTES = 2**20


MAX_OPEN_PARTITIONS = 4  # per writer; tasks arrive grouped by step, so older ones are done


class SegmentWriter:
    """One process's new segments of a generation: a buffered Parquet writer per table and
    partition (`tables/<table>/<partition>/<prefix>.parquet`).

    Rows are written in row groups of up to FLUSH_BYTES: a row group per trial would make every
    later scan slow, and a buffer of the whole ingest would not be flat. The ingest process has
    one; each reader process of a parallel ingest has its own, so rows never cross a pipe. At most
    MAX_OPEN_PARTITIONS partitions are open at once (the least recently written is closed; rows
    that reach it later start another segment there), so memory stays flat over many steps."""

    def __init__(self, root: Path, prefix: str, copies: CopyWriter | None = None) -> None:
        self.root = root
        self.prefix = prefix
        self.files: PartitionedFiles = {}
        # the stored tables' rows, copied as they are written (see wmo_lake/stored_copies.py)
        self.copies = copies
        self._rels: dict[tuple[str, str], str] = {}
        # A slot's writer opens at its first flush; a slot whose only flush is its last is
        # written in one call (with the small-file options when it is small): no writer at all.
        self._writers: dict[tuple[str, str], pq.ParquetWriter | None] = {}
        self._paths: dict[tuple[str, str], Path] = {}
        self._buffers: dict[tuple[str, str], list[pa.Table]] = {}
        self._buffered: dict[tuple[str, str], int] = {}
        # table -> its PendingRows of every open partition, built into Arrow together (the build
        # costs ~15 us per column however few rows: once per partition was ~4 ms a step)
        self._pending: dict[str, _Pending] = {}
        self._open: dict[str, int] = {}  # open partition -> segments opened there (LRU order)
        self._reopened: dict[str, int] = {}

    def append(
        self, table: str, rows: pa.Table | PendingRows, partition: str = NO_PARTITION
    ) -> None:
        """Add rows of one unit to `partition` (`store.partition_of` its run and step): their
        run and step columns are set from it."""
        if rows.num_rows == 0:
            return
        slot = (table, partition)
        if slot not in self._writers:
            self._open_slot(slot)
        self._open[partition] = self._open.pop(partition)  # most recently used last
        if isinstance(rows, PendingRows):  # one Arrow build per many trials, at the flush
            pending = self._pending.get(table)
            if pending is None:
                pending = self._pending[table] = _Pending(table)
            pending.add(rows, partition)
            if pending.rows.num_rows >= FLUSH_PENDING_ROWS:
                self._build(table)
            return
        self._buffers[slot].append(labelled(conform(rows, TABLES[table].schema), partition))
        self._buffered[slot] += rows.nbytes
        # Small tables cost far more than their bytes (buffers, schema), so their count is
        # bounded too: memory stays flat however many trials one ingest reads.
        if self._buffered[slot] >= FLUSH_BYTES or len(self._buffers[slot]) >= FLUSH_PIECES:
            self._flush(slot)

    def _open_slot(self, slot: tuple[str, str]) -> None:
        table, partition = slot
        if partition not in self._open:
            if len(self._open) >= MAX_OPEN_PARTITIONS:
                self._close_partition(next(iter(self._open)))
            self._open[partition] = self._reopened.get(partition, 0)
        suffix = f"-{self._open[partition]}" if self._open[partition] else ""
        rel = f"tables/{table}/{partition}/{self.prefix}{suffix}.parquet"
        (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
        self._writers[slot] = None
        self._paths[slot] = self.root / rel
        self._rels[slot] = rel
        self.files.setdefault(table, {}).setdefault(partition, []).append(rel)
        self._buffers[slot] = []
        self._buffered[slot] = 0

    def _close_partition(self, partition: str) -> None:
        for slot in [slot for slot in self._writers if slot[1] == partition]:
            self._close_slot(slot)
        self._reopened[partition] = self._open.pop(partition) + 1

    def _close_slot(self, slot: tuple[str, str]) -> None:
        self._flush(slot, last=True)
        writer = self._writers.pop(slot)
        if writer is not None:
            writer.close()
        del self._paths[slot], self._rels[slot]

    def _build(self, table: str) -> None:
        """Build `table`'s pending rows into Arrow, each partition's rows going to its buffer;
        a buffer holding enough rows is written."""
        pending = self._pending.pop(table, None)
        if pending is None:
            return
        for partition, rows in pending.tables():
            slot = (table, partition)
            self._buffers[slot].append(rows)
            self._buffered[slot] += rows.nbytes
            if sum(t.num_rows for t in self._buffers[slot]) >= FLUSH_PENDING_ROWS:
                self._flush(slot)

    def _flush(self, slot: tuple[str, str], last: bool = False) -> None:
        pending = self._pending.get(slot[0])
        if pending is not None and slot[1] in pending.partitions:
            self._build(slot[0])  # (with the other partitions' rows: steps arrive in turn)
        if self._buffers.get(slot):
            rows = pa.concat_tables(self._buffers[slot])
            writer = self._writers[slot]
            if writer is None and last:  # the file's only row group: one call writes it
                small = rows.num_rows < SMALL_FILE_ROWS and rows.nbytes < SMALL_FILE_BYTES
                options = _writer_options(slot[0], small=small)
                # encoded in memory, then written at once: Arrow's file stream makes a write
                # call per page (~100 for a trials file)
                encoded = pa.BufferOutputStream()
                pq.write_table(rows, encoded, **options)
                with open(self._paths[slot], "wb") as stream:
                    stream.write(encoded.getvalue())
            else:
                if writer is None:
                    writer = self._writers[slot] = open_writer(self._paths[slot], slot[0])
                writer.write_table(rows)
            if self.copies is not None:
                self.copies.add(slot[0], rows, self._rels[slot], slot[1])
        self._buffers[slot] = []
        self._buffered[slot] = 0

    def close(self) -> PartitionedFiles:
        """Finish every file; table -> partition -> paths relative to the lake."""
        for slot in list(self._writers):
            self._close_slot(slot)
        self._open = {}
        if self.copies is not None:
            self.copies.close()
        return self.files

    def abort(self) -> None:
        if self.copies is not None:
            self.copies.abort()
        for writer in self._writers.values():
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()


def labelled(rows: pa.Table, partition: str) -> pa.Table:
    """`rows` with the run and step columns of `partition`."""
    run, step = partition_values(partition)
    for name, value, kind in (("run", run, pa.string()), ("step", step, pa.int64())):
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(index, name, pa.array([value] * rows.num_rows, kind))
    return rows


class _Pending:
    """One table's PendingRows of several partitions, in the order they came: built into one
    Arrow table, then sliced back into each partition's runs of rows."""

    def __init__(self, table: str) -> None:
        self.schema = TABLES[table].schema
        names = [n for n in self.schema.names if n not in ("run", "step")]  # from the partition
        self.rows = PendingRows({n: [] for n in names}, 0)
        self.runs: list[list[Any]] = []  # [partition, rows] in order
        self.partitions: set[str] = set()

    def add(self, rows: PendingRows, partition: str) -> None:
        if not self.runs and rows.holds_row_dicts:  # kept as row dicts too (see pending.py)
            self.rows = rows.empty_like()
        self.rows.extend(rows)
        self.partitions.add(partition)
        if self.runs and self.runs[-1][0] == partition:
            self.runs[-1][1] += rows.num_rows
        else:
            self.runs.append([partition, rows.num_rows])

    def tables(self) -> Iterable[tuple[str, pa.Table]]:
        """(partition, its rows) per run, with the run and step columns of the partition."""
        runs, steps = [], []
        for partition, n in self.runs:
            run, step = partition_values(partition)
            runs += [run] * n
            steps += [step] * n
        self.rows.columns["run"], self.rows.columns["step"] = runs, steps
        built = self.rows.to_table(self.schema)
        start = 0
        for partition, n in self.runs:
            yield partition, built.slice(start, n)
            start += n


class Commit:
    """One generation in the making: new segments, removed units, then an atomic swap."""

    def __init__(
        self, store: Store, base: Manifest, token: str | None = None, copy_stored: bool = False
    ) -> None:
        """`copy_stored`: copy the stored tables' rows as they are written, for the lake.duckdb
        build that follows (an ingest's; see wmo_lake/stored_copies.py)."""
        self.store = store
        self.base = base
        self.generation = base.generation + 1
        self.token = token or secrets.token_hex(4)
        prefix = self.segment_prefix()
        copies = CopyWriter(store.root, prefix) if copy_stored else None
        self.writer = SegmentWriter(store.root, prefix, copies)
        self.added: PartitionedFiles = {}  # segments other processes wrote for this commit
        self.removed: dict[str, set[str]] = {}  # partition -> units to drop from its segments
        self.excluded_from_added: set[str] = set()
        self.touched: set[str] = set()  # partitions whose files or catalog this commit changes
        # once finished: the manifest and the partitions to sweep (None: all)
        self._swept: tuple[Manifest, set[str] | None] | None = None

    def segment_prefix(self, label: str = "") -> str:
        return segment_prefix(self.generation, self.token, label)

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.writer.files or self.added)

    def _segment_path(self, table: str, partition: str, label: str) -> tuple[Path, str]:
        rel = f"tables/{table}/{partition}/{self.segment_prefix(label)}.parquet"
        path = self.store.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path, rel

    def append(self, table: str, rows: pa.Table, partition: str = NO_PARTITION) -> None:
        """Add rows of new units to this generation's segment of `table` in `partition`."""
        self.writer.append(table, rows, partition)

    def add_files(self, files: PartitionedFiles) -> None:
        """Take segments a reader process wrote for this commit (table -> partition -> paths
        relative to the lake)."""
        for table, partitions in files.items():
            for partition, rels in partitions.items():
                self.added.setdefault(table, {}).setdefault(partition, []).extend(rels)

    def exclude_from_added(self, keys: Iterable[str]) -> None:
        """Drop these units' rows from the segments reader processes wrote (a trial read twice
        in one ingest is stored once, through this process's own writer)."""
        self.excluded_from_added.update(keys)

    def remove_units(self, keys: Iterable[str], partition: str) -> None:
        """Drop these units' rows from the segments earlier generations wrote in `partition`
        (where the catalog says their rows are)."""
        self.removed.setdefault(partition, set()).update(keys)

    def _rewrite_without(
        self, table: str, partition: str, files: list[str], keys: set[str]
    ) -> list[str]:
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
            path, new_rel = self._segment_path(table, partition, f"-r{secrets.token_hex(3)}")
            with open_writer(path, table) as writer:
                for batch in pq.ParquetFile(source).iter_batches(batch_size=2048):
                    rows = pa.Table.from_batches([batch])
                    rows = rows.filter(pc.invert(pc.is_in(rows[unit_column], value_set=dropped)))
                    writer.write_table(conform(rows, TABLES[table].schema))
            kept.append(new_rel)
        return kept

    def _compact(self, table: str, partition: str, files: list[str]) -> list[str]:
        """Merge small segments once a partition has too many, so every query opens few
        files; segments of different partitions are never merged."""
        if len(files) <= MAX_SEGMENTS:
            return files
        sizes = {rel: (self.store.root / rel).stat().st_size for rel in files}
        small = [rel for rel in files if sizes[rel] < COMPACT_BELOW_BYTES]
        if len(small) < 2:
            return files
        path, new_rel = self._segment_path(table, partition, "-c")
        with open_writer(path, table) as writer:
            for rel in small:
                for batch in pq.ParquetFile(self.store.root / rel).iter_batches(batch_size=2048):
                    writer.write_table(
                        conform(pa.Table.from_batches([batch]), TABLES[table].schema)
                    )
        return [rel for rel in files if rel not in small] + [new_rel]

    def _table_partitions(self, name: str, own: PartitionedFiles) -> dict[str, list[str]]:
        """`name`'s partitions in this generation: the base's, untouched ones as they were."""
        base = self.base.tables.get(name, {})
        added = self.added.get(name, {})
        written = own.get(name, {})
        partitions: dict[str, list[str]] = {}
        for partition in dict.fromkeys([*base, *added, *written]):
            files = list(base.get(partition, []))
            removed = self.removed.get(partition, set())
            if partition not in added and partition not in written and not removed:
                partitions[partition] = files
                continue
            self.touched.add(partition)
            # (a segment cut short or overwritten by hand, or an interrupted copy of the lake:
            # pyarrow's ArrowInvalid, its OSError naming the thrift it could not decode, a
            # UnicodeDecodeError of a column's name... any error, looked into, or raised as it is)
            with self.store.naming_damage(self.base, Exception, [partition], _unread_by_pyarrow):
                files = self._rewrite_without(name, partition, files, removed)
                files += self._rewrite_without(
                    name, partition, added.get(partition, []), self.excluded_from_added
                )
            files += written.get(partition, [])
            if len(files) > 1:  # an empty table's schema file, once rows have come
                files = [
                    rel for rel in files if not rel.endswith(f"{EMPTY_LABEL}.parquet")
                ] or files[:1]
            with self.store.naming_damage(self.base, Exception, [partition], _unread_by_pyarrow):
                partitions[partition] = self._compact(name, partition, files)
        return partitions

    def finish(
        self,
        catalog: Iterable[CatalogEntry],
        touched: Iterable[str] | None = None,
        *,
        sweep: bool = True,
        extractions: Mapping[str, str] | None = None,
        sink_roots: list[tuple[str, str]] | None = None,
    ) -> Manifest:
        """Write the catalog and swap the manifest: the commit point. `catalog`: the entries
        after this commit; only the partitions in `touched` (all when None) have changed
        entries, and only their catalog files are written again. Then the files no generation
        names are removed, or, with `sweep=False`, left for the caller's `sweep()` (an ingest
        sweeps while lake.duckdb is built). `extractions`: the extract version of the partitions
        whose rows this commit read (Manifest.extractions); the others keep the base's.
        `sink_roots`: the remaps to remember (Manifest.sink_roots); None keeps the base's."""
        own = self.writer.close()
        tables: PartitionedFiles = {}
        for name in TABLES:
            partitions = self._table_partitions(name, own)
            if not any(partitions.values()):  # an empty table still needs a file for its schema
                path, rel = self._segment_path(name, NO_PARTITION, EMPTY_LABEL)
                pq.write_table(TABLES[name].schema.empty_table(), path)
                partitions = {NO_PARTITION: [rel]}
                self.touched.add(NO_PARTITION)
            tables[name] = {p: files for p, files in sorted(partitions.items()) if files}
        manifest = Manifest(
            generation=self.generation,
            tables=tables,
            catalog=self._write_catalog(catalog, touched),
            updated_at=datetime.now(UTC).isoformat(),
            schemas={name: self._schema_of(name) for name in TABLES},
        )
        manifest.extractions = {
            partition: version
            for partition, version in {**self.base.extractions, **(extractions or {})}.items()
            if partition in manifest.catalog
        }
        manifest.sink_roots = self.base.sink_roots if sink_roots is None else sink_roots
        live = set(manifest.live_files())
        # what readers of the previous generation may still be scanning: kept one more commit
        manifest.previous = [rel for rel in self.base.live_files() if rel not in live]
        fsync_path(self.store.root)
        crash_point("before_manifest")
        payload = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "wmo_lake_version": __version__,
            "generation": manifest.generation,
            "updated_at": manifest.updated_at,
            "tables": manifest.tables,
            "catalog": manifest.catalog,
            "schemas": manifest.schemas,
            "extractions": manifest.extractions,
            "sink_roots": manifest.sink_roots,
            "previous": manifest.previous,
        }
        # msgspec: json.dumps(indent=2)'s bytes (but UTF-8 where it escapes), ~5x faster for the
        # ~0.8 MB manifest of a 1,000-step lake
        manifest_bytes = msgspec.json.format(msgspec.json.encode(payload), indent=2)
        try:
            atomic_write_bytes(self.store.manifest_path, manifest_bytes)
            crash_point("after_manifest")
        except KeyboardInterrupt:  # once the new manifest is in place, the change is committed
            if self._manifest_in_place(manifest_bytes):
                raise InterruptedAfterCommit(self.store.root, manifest.generation) from None
            raise
        try:
            self._swept = (manifest, None if self.store.interrupted else self.touched)
            if sweep:
                crash_point("before_sweep")
                self.sweep()
        except KeyboardInterrupt:  # (the sweep's: a forget's, after its commit)
            raise InterruptedAfterCommit(self.store.root, manifest.generation) from None
        return manifest

    def _manifest_in_place(self, written: bytes) -> bool:
        try:
            return self.store.manifest_path.read_bytes() == written
        except OSError:
            return False

    def sweep(self, temporaries: bool = True) -> None:
        """After `finish`: remove the files neither this generation nor the previous one names
        (`Store.collect_garbage`: in the partitions this commit touched, or all of them after
        an interrupted writer), with the lake's temporary files when `temporaries`."""
        if self._swept is None:
            raise RuntimeError("sweep() comes after finish()")
        manifest, partitions = self._swept
        self.store.collect_garbage(
            manifest, partitions, self.base.previous, temporaries=temporaries
        )

    def _schema_of(self, name: str) -> str:
        """What every file of `name` was written with: this code's schema (every file a commit
        writes has it), unless the base holds files of another one (a lake written by an
        earlier version), then MIXED for good. The lake's views read a table of one schema
        without union_by_name, which would read every file's footer at each query."""
        current = schema_digest(TABLES[name].schema)
        previous = self.base.schemas.get(name)
        if previous is None and not self.base.table_files(name):
            return current
        return current if previous == current else MIXED

    def _write_catalog(
        self, catalog: Iterable[CatalogEntry], touched: Iterable[str] | None
    ) -> dict[str, str]:
        """Write the catalog files of the touched partitions; partition -> catalog file."""
        by_partition: dict[str, list[CatalogEntry]] = {}
        rewrite = None if touched is None else set(touched)
        for entry in catalog:
            if rewrite is None or entry.partition in rewrite:
                by_partition.setdefault(entry.partition, []).append(entry)
        files = dict(self.base.catalog)
        written: list[str] = []
        for partition in rewrite if rewrite is not None else set(files) | set(by_partition):
            self.touched.add(partition)
            entries = by_partition.get(partition)
            if not entries:
                files.pop(partition, None)
                continue
            rel = f"catalog/{partition}/{self.generation:06d}-{self.token}.msgpack"
            self.store.write_catalog(rel, entries, sync=False)
            files[partition] = rel
            written.append(rel)
        self.store.sync_files(written)  # all at once: one journal commit, not one per partition
        return dict(sorted(files.items()))

    def abort(self) -> None:
        self.writer.abort()


def _unread_by_pyarrow(path: str) -> str | None:
    """pyarrow's words when it cannot read the segment at `path` whole (what a rewrite reads it
    with), else None."""
    try:
        pq.read_table(path)
    except Exception as failure:  # (ArrowInvalid, OSError, a UnicodeDecodeError of a name...)
        return f"pyarrow: {first_line(failure)}"
    return None
