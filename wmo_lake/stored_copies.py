"""Copies of the stored tables' rows, kept by the processes that write the segments, so the
lake.duckdb build after a commit inserts them from Arrow instead of reading the Parquet files
back (`lakefile`).

A lake.duckdb build reads every new segment of the light tables (`lakefile.STORED_TABLES`, and
the projection `span_lengths`): DuckDB pays ~1 ms a file for that, and a step of small trials has
a file per table, so a first ingest of 128 steps spent ~0.4 s after its readers had finished
(the serial tail of the ingest). The writer of a segment has the rows in hand: a `CopyWriter`
appends them, with the partition and the file they went to, to an Arrow IPC stream per stored
table under `LAKE/.staging/`, and the build takes the rows of every file a copy covers from it
(only those files: one the commit rewrote or merged is read from Parquet as before).

The Parquet files stay the source of truth: a copy holds exactly the rows written to the files
it names (the same Arrow table, at the same call), and a build without copies (any later one, a
build from scratch) reads the files. The staging dir belongs to the ingest holding the lake's
lock: it is emptied when an ingest starts and once lake.duckdb is built.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from wmo_lake.lakefile import FILE_COLUMN, PARTITION_COLUMN, STORED_PROJECTIONS, STORED_TABLES
from wmo_lake.store import STAGING

__all__ = ["CopyWriter", "StoredCopies"]


def _stored_of(table: str) -> list[tuple[str, tuple[str, ...] | None]]:
    """(stored name, its columns or None for all) of every stored table `table`'s rows fill."""
    names: list[tuple[str, tuple[str, ...] | None]] = []
    if table in STORED_TABLES:
        names.append((table, None))
    for name, (source, columns) in STORED_PROJECTIONS.items():
        if source == table:
            names.append((name, columns))
    return names


# A writer's copy of a stored table is written this many bytes at a time, as one record batch:
# written as its segments are (one small batch per segment, each buffer its own write call), the
# copies of 8,192 small trials took ~30,000 write calls, and the build read back ~1,300 batches.
COPY_BATCH_BYTES = 8 * 2**20


class CopyWriter:
    """One segment writer's copies: an IPC stream per stored table, written in batches of about
    COPY_BATCH_BYTES as rows come (so memory stays flat), named after the writer's segment
    prefix. The streams are complete once `close` returns."""

    def __init__(self, root: Path, prefix: str) -> None:
        self.dir = root / STAGING
        self.prefix = prefix
        self._streams: dict[str, tuple[pa.RecordBatchStreamWriter, pa.NativeFile]] = {}
        self._held: dict[str, list[pa.Table]] = {}  # stored table -> rows not yet written
        self._held_bytes: dict[str, int] = {}
        self.copies: StoredCopies = StoredCopies()

    def add(self, table: str, rows: pa.Table, rel: str, partition: str) -> None:
        """`rows`, just written to the segment `rel` of `partition`, to every stored table
        they fill."""
        for name, columns in _stored_of(table):
            part = rows if columns is None else rows.select(list(columns))
            n = part.num_rows
            part = part.append_column(PARTITION_COLUMN, pa.array([partition] * n, pa.string()))
            part = part.append_column(FILE_COLUMN, pa.array([rel] * n, pa.string()))
            self._held.setdefault(name, []).append(part)
            self._held_bytes[name] = self._held_bytes.get(name, 0) + part.nbytes
            self.copies.files.setdefault(name, {}).setdefault(self._path(name), set()).add(rel)
            if self._held_bytes[name] >= COPY_BATCH_BYTES:
                self._write(name)

    def _path(self, name: str) -> str:
        """The copy of stored table `name`: its stream's file."""
        return str(self.dir / f"{self.prefix}.{name}.arrow")

    def _write(self, name: str) -> None:
        """The rows held for `name`, as one record batch of its stream."""
        held = self._held.pop(name, None)
        self._held_bytes.pop(name, None)
        if not held:
            return
        rows = pa.concat_tables(held).combine_chunks()
        if name not in self._streams:
            self.dir.mkdir(exist_ok=True)
            sink = pa.OSFile(self._path(name), "wb")
            self._streams[name] = (pa.ipc.new_stream(sink, rows.schema), sink)
        stream, _ = self._streams[name]
        stream.write_table(rows)

    def close(self) -> StoredCopies:
        for name in list(self._held):
            self._write(name)
        for stream, sink in self._streams.values():
            stream.close()
            sink.close()
        self._streams = {}
        return self.copies

    def abort(self) -> None:
        self._held, self._held_bytes = {}, {}
        for stream, sink in self._streams.values():
            with contextlib.suppress(Exception):
                stream.close()
            with contextlib.suppress(Exception):
                sink.close()
        self._streams = {}


@dataclass
class StoredCopies:
    """stored table -> copy file (absolute path) -> the segments whose rows it holds."""

    files: dict[str, dict[str, set[str]]] = field(default_factory=dict)

    def merge(self, other: StoredCopies) -> None:
        for name, copies in other.files.items():
            for path, rels in copies.items():
                self.files.setdefault(name, {}).setdefault(path, set()).update(rels)

    def covering(
        self, name: str, wanted: list[str]
    ) -> tuple[list[tuple[str, list[str] | None]], list[str]]:
        """For the segments `wanted` of stored table `name`: the copies that hold some of them,
        each with the segments to take from it (None: all it holds), and the segments no copy
        holds (to be read from their files)."""
        needed = set(wanted)
        taken: list[tuple[str, list[str] | None]] = []
        covered: set[str] = set()
        for path, rels in self.files.get(name, {}).items():
            useful = rels & needed
            if not useful:
                continue
            taken.append((path, None if useful == rels else sorted(useful)))
            covered |= useful
        return taken, [rel for rel in wanted if rel not in covered]
