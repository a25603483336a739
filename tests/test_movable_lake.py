"""A lake that is moved or copied works with every command without re-ingesting, and a copy never
reads the original's files: LAKE/lake.duckdb names its Parquet files relative to the lake dir."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

CHAINED = [([1, 2], [3], [-0.5]), ([1, 2, 3, 4], [5, 6], [-0.1, -0.2])]


@pytest.fixture
def lakes(tmp_path: Path) -> tuple[Path, Path, dict]:
    """(the original lake, a copy elsewhere, what every command said on the original)."""
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job", max_turns=5)
    write_trial(job, "a__1", reward=1.0, turns=CHAINED)
    write_trial(job, "b__1", reward=0.0, turns=CHAINED[:1])
    original = tmp_path / "site-a" / "lake"
    ingest([tmp_path / "runs"], original)
    before = _answers(original)
    copy = tmp_path / "site-b" / "elsewhere" / "lake-copy"
    shutil.copytree(original, copy)
    return original, copy, before


def _answers(lake: Path) -> dict:
    con = connect(lake)
    try:
        return {
            "records": con.sql(
                "SELECT trial_name, reward, stop_reason, spans FROM trial_records_with_spans "
                "ORDER BY 1"
            ).fetchall(),
            "stats": con.sql("SELECT * FROM rollout_stats").fetchall(),
        }
    finally:
        con.close()


def _spoil(lake: Path) -> None:
    """Every Parquet file of `lake` overwritten with junk: a reader of it fails loudly."""
    for path in lake.rglob("*.parquet"):
        path.write_bytes(b"not parquet")


def test_lake_duckdb_names_no_absolute_path(lakes: tuple[Path, Path, dict]) -> None:
    original, _, _ = lakes
    data = (original / "lake.duckdb").read_bytes()
    # (the runs' paths are in it, as in the Parquet files: job_key, artifact_dir are data, and
    # lake.duckdb stores the light tables' rows; the lake's own dir is never named)
    for root in {str(original), os.path.realpath(original)}:
        assert root.encode() not in data
    assert b"tables/spans/" in data  # the views name their files relative to the lake


def test_a_copy_never_reads_the_originals_files(lakes: tuple[Path, Path, dict]) -> None:
    original, copy, before = lakes
    _spoil(original)
    assert _answers(copy) == before
    with pytest.raises(duckdb.Error):
        _answers(original)


def test_a_lake_path_with_a_comma_is_refused_never_read_elsewhere(
    lakes: tuple[Path, Path, dict], tmp_path: Path
) -> None:
    """DuckDB's file_search_path is a comma-separated list: a copy named `lake,copy` read the
    original `lake`'s files, and an ingest into `new,lake` failed half-way with a traceback."""
    original, _, before = lakes
    copy = original.parent / "lake,copy"
    shutil.copytree(original, copy)
    _spoil(copy)  # (were the copy read at all, this would fail differently)
    runner = CliRunner()
    result = runner.invoke(cli, ["sql", "--lake", str(copy), "SELECT count(*) FROM spans"])
    assert result.exit_code == 1 and "holds a comma" in result.output
    assert _answers(original) == before
    fresh = tmp_path / "new,lake"
    result = runner.invoke(cli, ["ingest", str(tmp_path / "runs"), "--lake", str(fresh)])
    assert result.exit_code == 1 and "holds a comma" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not fresh.exists()


def test_a_lake_path_with_a_backslash_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """DuckDB reads a backslash in a path as a separator: an ingest into `back\\slash` committed
    a lake, then failed to open `back/slash/lake.duckdb`, and no command could read it."""
    from conftest import FIXTURES

    lake = tmp_path / "back\\slash"
    result = CliRunner().invoke(cli, ["ingest", str(FIXTURES / "harbor"), "--lake", str(lake)])
    assert result.exit_code == 1 and "holds a backslash" in result.output, result.output
    assert not lake.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_every_command_works_on_a_moved_lake(lakes: tuple[Path, Path, dict], tmp_path) -> None:
    original, copy, before = lakes
    moved = tmp_path / "moved-lake"
    os.rename(copy, moved)
    shutil.rmtree(original)  # nothing of it is left to read
    runner = CliRunner()
    lake = ["--lake", str(moved)]
    sql = runner.invoke(cli, ["sql", *lake, "--format", "json", "SELECT count(*) AS n FROM spans"])
    assert sql.exit_code == 0, sql.output
    assert json.loads(sql.output) == [{"n": 3}]
    stats = runner.invoke(cli, ["stats", *lake, "--json"])
    assert stats.exit_code == 0, stats.output
    assert [row["trials"] for row in json.loads(stats.output)] == [2]
    for kind, out in (("datums", "d.parquet"), ("conversations", "c.jsonl")):
        args = ["export", kind, *lake, "--out", str(tmp_path / out), "--no-split-guard"]
        result = runner.invoke(cli, args)
        assert result.exit_code == 0, result.output
    again = runner.invoke(cli, ["ingest", str(tmp_path / "runs"), *lake, "--json"])
    assert again.exit_code == 0, again.output
    summary = json.loads(again.output)
    assert (summary["trials_unchanged"], summary["committed"]) == (2, False)  # no re-ingest
    assert _answers(moved) == before


def test_a_plain_duckdb_client_sets_file_search_path(lakes: tuple[Path, Path, dict]) -> None:
    """What the README tells a DuckDB client after a move: SET file_search_path to the lake dir
    (or run from inside it)."""
    original, copy, _ = lakes
    _spoil(original)
    with duckdb.connect(str(copy / "lake.duckdb"), read_only=True) as con:
        con.execute("SET file_search_path = ?", [str(copy)])
        assert con.sql("SELECT trials FROM rollout_stats").fetchall() == [(2,)]
    cwd = os.getcwd()
    os.chdir(copy)
    try:
        with duckdb.connect("lake.duckdb", read_only=True) as con:
            assert con.sql("SELECT count(*) FROM trial_records").fetchall() == [(2,)]
    finally:
        os.chdir(cwd)
