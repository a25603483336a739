"""The store's file durability: `Store.sync_files` syncs every file it is given and every dir
holding one (a new name is durable once its dir is synced), from threads when there are many,
and never hides a failure; an atomic write leaves no temp file when it fails."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from wmo_lake import store as store_module
from wmo_lake.store import SERIAL_SYNCS, Store, atomic_write_bytes


def _write(root: Path, count: int) -> list[str]:
    rels = []
    for n in range(count):
        rel = f"catalog/run=r/step={n % 7}/{n:06d}.msgpack"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"x" * n)
        rels.append(rel)
    return rels


@pytest.mark.parametrize("count", [1, SERIAL_SYNCS + 30])
def test_every_file_and_its_dir_is_synced(tmp_path: Path, monkeypatch, count: int) -> None:
    synced: list[Path] = []
    threads: set[str] = set()
    real = store_module.fsync_path

    def recording(path):
        real(path)
        synced.append(Path(path))
        threads.add(threading.current_thread().name.split("_")[0])

    monkeypatch.setattr(store_module, "fsync_path", recording)
    rels = _write(tmp_path, count)
    Store(tmp_path).sync_files(rels)
    files = {tmp_path / rel for rel in rels}
    assert sorted(synced) == sorted(files | {path.parent for path in files})
    # many paths are synced from the pool (their waits on the device overlap), few in place
    assert threads == ({"wmo-lake-sync"} if count > SERIAL_SYNCS else {"MainThread"})


def test_a_file_that_cannot_be_synced_fails_the_sync(tmp_path: Path) -> None:
    rels = _write(tmp_path, SERIAL_SYNCS + 10)
    (tmp_path / rels[5]).unlink()
    with pytest.raises(FileNotFoundError):
        Store(tmp_path).sync_files(rels)


def test_a_write_that_cannot_land_leaves_no_temp_file(tmp_path: Path) -> None:
    """A target that is a dir (or a full disk) failed the rename and left the temp file behind:
    the skeleton cache's digest file gained one a first ingest while its path was a dir."""
    target = tmp_path / "digest"
    target.mkdir()
    with pytest.raises(OSError):
        atomic_write_bytes(target, b"data")
    assert [p.name for p in tmp_path.iterdir()] == ["digest"]


def _lake_of_segments(
    root: Path, damaged: set[int], count: int = 9
) -> tuple[Store, store_module.Manifest, list[str]]:
    """A manifest of `count` one-row trials segments, one per step; those numbered in `damaged`
    with their pages overwritten in place (size and magic bytes kept)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rels = []
    for step in range(count):
        rel = f"tables/trials/run=r/step={step}/000001-x.parquet"
        (root / rel).parent.mkdir(parents=True)
        pq.write_table(pa.table({"trial_name": [f"t{step}" * 40], "n": [step]}), root / rel)
        if step in damaged:
            data = bytearray((root / rel).read_bytes())
            data[4:60] = bytes(range(56))
            (root / rel).write_bytes(bytes(data))
        rels.append(rel)
    partitions = {f"run=r/step={step}": [rel] for step, rel in enumerate(rels)}
    return Store(root), store_module.Manifest(generation=1, tables={"trials": partitions}), rels


def test_a_decoding_failure_finds_each_segment_overwritten_in_place(tmp_path: Path) -> None:
    """DuckDB's bare Error names no file: the segments are read together, halved while the read
    fails, down to each one that cannot be read."""
    import duckdb

    store, manifest, rels = _lake_of_segments(tmp_path, {2, 7})
    found = store.unreadable_segments(manifest, duckdb.Error("don't know what type"))
    assert [rel for rel, _ in found] == [rels[2], rels[7]]
    assert store.missing_segments(manifest) == []  # (what the cheap check cannot see)
    damaged = store.damaged_error(manifest, error=duckdb.Error("x"))
    said = f"holds 2 of its Parquet files that cannot be read ({rels[2]}: "
    assert damaged is not None and said in str(damaged) and "; ...)" in str(damaged)


def test_a_query_of_its_own_mistake_reads_no_segment(tmp_path: Path) -> None:
    """A Binder or Conversion error is the query's: no read of the lake (which costs a read of
    every file) before it is said; a file the error names is read, alone."""
    import duckdb

    store, manifest, rels = _lake_of_segments(tmp_path, {3})
    for mistake in (duckdb.BinderException("no column x"), duckdb.ConversionException("'a'")):
        assert store.unreadable_segments(manifest, mistake) == []
    named = duckdb.InvalidInputException(f'Failed to read file "{tmp_path}/{rels[3]}": boom')
    assert [rel for rel, _ in store.unreadable_segments(manifest, named)] == [rels[3]]
