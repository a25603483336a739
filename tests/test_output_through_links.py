"""A file a command writes (`sql --output`, `report --out`) lands where its path points: a
symlink is written through (the link survives, its target gets the result, still through a
temporary file and a rename), a FIFO or device straight through; exports refuse both."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake import export
from wmo_lake.cli import cli
from wmo_lake.export import ExportError
from wmo_lake.ingest import ingest


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("through")
    write_trial(write_job(root / "runs" / "job"), "a__1", trial_id="a", reward=1)
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"


def _sql(lake: Path, *args: str) -> str:
    result = CliRunner().invoke(cli, ["sql", "--lake", str(lake), "SELECT 7 AS x", *args])
    assert result.exit_code == 0, result.output
    return result.output


def _read(path: Path) -> str:
    if path.suffix == ".parquet":
        return str(pq.read_table(path).to_pylist())
    return path.read_text()


@pytest.mark.parametrize("name", ["r.csv", "r.txt", "r.json", "r.parquet"])
def test_sql_output_through_a_symlink_writes_its_target(
    lake: Path, tmp_path: Path, name: str
) -> None:
    target = tmp_path / "data" / name
    target.parent.mkdir()
    target.write_text("old\n")
    link = tmp_path / name
    link.symlink_to(Path("data") / name)
    _sql(lake, "-o", str(link))
    assert link.is_symlink() and link.resolve() == target
    assert "7" in _read(target) and "old" not in _read(target)
    assert sorted(p.name for p in target.parent.iterdir()) == [name]  # no temporary file left


def test_sql_output_through_a_dangling_symlink_creates_its_target(
    lake: Path, tmp_path: Path
) -> None:
    link = tmp_path / "r.csv"
    link.symlink_to("made.csv")
    _sql(lake, "-o", str(link))
    assert link.is_symlink() and (tmp_path / "made.csv").read_text() == "x\n7\n"


@pytest.mark.parametrize("name", ["r.csv", "r.txt"])
def test_a_symlink_loop_is_refused_and_left_as_it_is(lake: Path, tmp_path: Path, name: str) -> None:
    loop = tmp_path / name
    loop.symlink_to(name)
    result = CliRunner().invoke(cli, ["sql", "--lake", str(lake), "SELECT 7 AS x", "-o", str(loop)])
    assert result.exit_code == 1 and "Error: cannot write" in result.output, result.output
    assert loop.is_symlink()


@pytest.mark.parametrize("name", ["r.csv", "r.txt", "r.jsonl"])
def test_sql_output_to_a_fifo_is_written_through(lake: Path, tmp_path: Path, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()), daemon=True)
    reader.start()
    _sql(lake, "-o", str(fifo))
    reader.join(timeout=30)
    assert received and "7" in received[0]
    assert fifo.is_fifo() and sorted(tmp_path.iterdir()) == [fifo]


def test_sql_output_to_dev_stdout_prints_the_result(lake: Path) -> None:
    """(A subprocess whose stdout is captured, a pipe: never the test runner's own stdout.)"""
    command = [sys.executable, "-m", "wmo_lake.cli", "sql", "--lake", str(lake), "SELECT 7 AS x"]
    for fmt in ("csv", "table"):
        printed = subprocess.run(
            [*command, "-o", "/dev/stdout", "--format", fmt],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert printed.split()[-1] == "7", (fmt, printed)


@pytest.mark.parametrize("fmt", ["csv", "table", "json"])
def test_sql_output_to_dev_stdout_appended_to_a_log_keeps_the_log(
    lake: Path, tmp_path: Path, fmt: str
) -> None:
    """`sql -o /dev/stdout >> log`: /dev/stdout named the log itself, a regular file, so the
    result was written beside it and renamed over it: what the log held was gone."""
    log = tmp_path / "run.log"
    log.write_text("before\n")
    command = [sys.executable, "-m", "wmo_lake.cli", "sql", "--lake", str(lake), "SELECT 7 AS x"]
    with log.open("a") as appended:
        subprocess.run(
            [*command, "-o", "/dev/stdout", "--format", fmt], stdout=appended, check=True
        )
    text = log.read_text()
    assert text.startswith("before\n") and "7" in text.split("before\n", 1)[1], text
    assert sorted(tmp_path.iterdir()) == [log]


def test_report_out_through_a_symlink_writes_its_target(
    two_runs_lake: Path, tmp_path: Path
) -> None:
    target = tmp_path / "kept.html"
    target.write_text("old")
    link = tmp_path / "report.html"
    link.symlink_to(target.name)
    result = CliRunner().invoke(
        cli, ["report", "--lake", str(two_runs_lake), "--out", str(link), "--run", "exp-b"]
    )
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and target.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "fifo"])
def test_an_export_refuses_a_path_that_exists_as_a_link_or_fifo(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "d.parquet"
    if kind == "fifo":
        os.mkfifo(out)
    else:
        (tmp_path / "kept.parquet").write_text("old") if kind == "symlink" else None
        out.symlink_to("kept.parquet")
    with pytest.raises(ExportError, match="already exists"):
        export.refuse_existing(out)
