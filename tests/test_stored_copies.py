"""A segment writer's copies of the stored tables' rows (wmo_lake/stored_copies.py): each copy
holds exactly the rows added to it, with their partition and segment, written as few large
record batches (not one per segment), so writing and reading them back stays cheap."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from wmo_lake import stored_copies
from wmo_lake.lakefile import FILE_COLUMN, PARTITION_COLUMN
from wmo_lake.stored_copies import CopyWriter
from wmo_lake.tables import TABLES

JOBS = TABLES["jobs"].schema


def _segment_rows(n: int, segment: int) -> pa.Table:
    """`n` jobs rows of one segment (job keys name the segment and the row)."""
    rows = {name: [None] * n for name in JOBS.names}
    rows["job_key"] = [f"job:{segment}:{i}" for i in range(n)]
    return pa.Table.from_pydict(rows, schema=JOBS)


def _stream_batches(path: str) -> list[pa.RecordBatch]:
    with pa.memory_map(path) as source:
        return list(pa.ipc.open_stream(source))


def _add_segments(writer: CopyWriter, segments: int, rows_each: int) -> list[tuple[str, str]]:
    """Adds `segments` segments to the writer; their (file, partition) per row, in order."""
    expected = []
    for segment in range(segments):
        partition = f"run=r/step={segment % 3}"
        rel = f"tables/jobs/{partition}/seg-{segment}.parquet"
        writer.add("jobs", _segment_rows(rows_each, segment), rel, partition)
        expected += [(rel, partition)] * rows_each
    return expected


def test_a_copy_of_many_small_segments_is_written_as_one_batch(tmp_path: Path) -> None:
    writer = CopyWriter(tmp_path, "w0")
    expected = _add_segments(writer, segments=100, rows_each=2)
    copies = writer.close()
    [(path, rels)] = copies.files["jobs"].items()
    assert rels == {rel for rel, _ in expected}
    batches = _stream_batches(path)
    assert len(batches) == 1, "one record batch per segment: a write call per buffer each"
    table = pa.Table.from_batches(batches)
    labels = zip(table[FILE_COLUMN].to_pylist(), table[PARTITION_COLUMN].to_pylist(), strict=True)
    assert list(labels) == expected
    assert table["job_key"].to_pylist() == [f"job:{s}:{i}" for s in range(100) for i in range(2)]


def test_a_big_copy_is_written_in_bounded_batches(tmp_path: Path, monkeypatch) -> None:
    """Rows are held only up to COPY_BATCH_BYTES: memory stays flat however much is copied,
    and every row still arrives, in order."""
    monkeypatch.setattr(stored_copies, "COPY_BATCH_BYTES", 4096)
    writer = CopyWriter(tmp_path, "w0")
    expected = _add_segments(writer, segments=60, rows_each=5)
    [(path, _)] = writer.close().files["jobs"].items()
    batches = _stream_batches(path)
    assert len(batches) > 3
    assert all(batch.nbytes < 4096 + 4 * 2**10 for batch in batches[:-1])
    table = pa.Table.from_batches(batches)
    assert table[FILE_COLUMN].to_pylist() == [rel for rel, _ in expected]


def test_an_aborted_copy_writes_no_held_rows(tmp_path: Path) -> None:
    writer = CopyWriter(tmp_path, "w0")
    _add_segments(writer, segments=3, rows_each=1)
    writer.abort()
    assert not list(tmp_path.rglob("*.arrow"))
