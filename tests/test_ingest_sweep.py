"""An ingest removes the files no generation names while lake.duckdb is built, not before it, and
is done with them when it returns (wmo_lake.ingest.LakeUpdate.sweep)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from harbor_shapes import write_job, write_trial

from wmo_lake import lake as lake_module
from wmo_lake.ingest import ingest
from wmo_lake.store import Store


def _tree(root: Path, trials: int = 2) -> Path:
    job_dir = write_job(root / "runs" / "exp" / "harbor" / "step-0001" / "job")
    for i in range(trials):
        write_trial(job_dir, f"t__{i}", trial_id=f"job-t-{i}")
    return root / "runs"


def _a_partition_dir(lake: Path) -> Path:
    return next((lake / "tables" / "trials").glob("run=*/step=*"))


def test_the_sweep_runs_while_lake_duckdb_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, lake = _tree(tmp_path), tmp_path / "lake"
    ingest([runs], lake, workers=1)
    stray = _a_partition_dir(lake) / "left-by-a-killed-writer.parquet"
    stray.write_bytes(b"PAR1")
    write_trial(runs / "exp" / "harbor" / "step-0001" / "job", "t__new", trial_id="job-t-new")

    building = threading.Event()
    sweeping = threading.Event()
    sweep = Store.collect_garbage

    def collect_garbage(self: Store, *args: object, **kwargs: object) -> None:
        sweeping.set()
        # a sweep run before the build (as it once was) never sees the build start: it fails
        assert building.wait(timeout=30), "the sweep ran before lake.duckdb's build"
        sweep(self, *args, **kwargs)  # type: ignore[arg-type]

    build = lake_module.ensure_duckdb_file

    def ensure_duckdb_file(*args: object, **kwargs: object) -> Path:
        building.set()
        assert sweeping.wait(timeout=30), "the sweep did not start with the build"
        return build(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Store, "collect_garbage", collect_garbage)
    monkeypatch.setattr(lake_module, "ensure_duckdb_file", ensure_duckdb_file)
    summary = ingest([runs], lake, workers=1)
    assert summary.committed and summary.trials_new == 1
    assert not stray.exists()  # swept by the time ingest returned


def test_temporary_files_go_after_the_build(tmp_path: Path) -> None:
    runs, lake = _tree(tmp_path), tmp_path / "lake"
    ingest([runs], lake, workers=1)
    leftover = lake / ".manifest.json.deadbeef.tmp"
    leftover.write_bytes(b"{")
    write_trial(runs / "exp" / "harbor" / "step-0001" / "job", "t__new", trial_id="job-t-new")
    assert ingest([runs], lake, workers=1).committed
    assert not leftover.exists()


def test_a_failed_sweep_is_not_silent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs, lake = _tree(tmp_path), tmp_path / "lake"

    def collect_garbage(self: Store, *args: object, **kwargs: object) -> None:
        raise RuntimeError("sweep failed")

    monkeypatch.setattr(Store, "collect_garbage", collect_garbage)
    with pytest.raises(RuntimeError, match="sweep failed"):
        ingest([runs], lake, workers=1)
    monkeypatch.undo()
    # the generation was committed before the sweep: the lake is whole and queryable
    assert lake_module.connect(lake).execute("SELECT count(*) FROM trials").fetchall() == [(2,)]
