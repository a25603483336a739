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
