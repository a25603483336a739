"""`wmo-lake ingest` through the real click command: summary line, --json, --strict, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.lake import connect


def _runs(tmp_path: Path, broken: bool = False) -> Path:
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0000" / "job")
    write_trial(job, "a__1")
    write_trial(job, "b__1")
    if broken:
        (write_trial(job, "c__1") / "result.json").write_text('{"trunc')
    return tmp_path / "runs"


def test_summary_line(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    result = CliRunner().invoke(cli, ["ingest", str(runs), "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 0, result.output
    assert "2 trials (2 new, 0 replaced, 0 unchanged)" in result.output
    assert "0 unreadable trials, 0 problems" in result.output
    again = CliRunner().invoke(cli, ["ingest", str(runs), "--lake", str(tmp_path / "lake")])
    assert "(0 new, 0 replaced, 2 unchanged)" in again.output and "nothing changed" in again.output


def test_json_summary(tmp_path: Path) -> None:
    runs = _runs(tmp_path, broken=True)
    result = CliRunner().invoke(
        cli, ["ingest", str(runs), "--lake", str(tmp_path / "lake"), "--json"]
    )
    assert result.exit_code == 0
    summary = json.loads(result.stdout)
    assert summary["trials_new"] == 2
    assert summary["unreadable_trials"] == 1
    assert summary["problems"] == 1  # the unreadable trial: one row, its cause in the message
    assert summary["committed"] is True


def test_strict_exits_1_on_problems_but_commits(tmp_path: Path) -> None:
    runs = _runs(tmp_path, broken=True)
    lake = tmp_path / "lake"
    result = CliRunner().invoke(cli, ["ingest", str(runs), "--lake", str(lake), "--strict"])
    assert result.exit_code == 1
    assert (lake / "manifest.json").is_file()
    clean = _runs(tmp_path / "clean")
    ok = CliRunner().invoke(cli, ["ingest", str(clean), "--lake", str(tmp_path / "l2"), "--strict"])
    assert ok.exit_code == 0


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    missing = CliRunner().invoke(cli, ["ingest", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "does not exist" in missing.output
    no_path = CliRunner().invoke(cli, ["ingest"])
    assert no_path.exit_code == 2


def test_lake_from_environment(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    lake = tmp_path / "env-lake"
    result = CliRunner().invoke(cli, ["ingest", str(runs)], env={"WMO_LAKE": str(lake)})
    assert result.exit_code == 0 and (lake / "manifest.json").is_file()


def test_help_teaches(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["ingest", "--help"])
    assert (
        "Examples:" in result.output
        and "--sink-root" in result.output
        and "--strict" in result.output
    )


def test_an_empty_tree_makes_an_empty_queryable_lake(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    lake = tmp_path / "lake"
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "empty"), "--lake", str(lake)])
    assert result.exit_code == 0, result.output
    assert "0 trials" in result.output
    rows = CliRunner().invoke(
        cli, ["sql", "SELECT count(*) AS n FROM trials", "--lake", str(lake), "--format", "json"]
    )
    assert json.loads(rows.stdout) == [{"n": 0}]


def test_a_path_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-runs"
    result = CliRunner().invoke(cli, ["ingest", str(missing), "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 2
    assert f"{missing} does not exist; give the run tree to read" in result.output
    assert not (tmp_path / "lake").exists()  # nothing was started
    afile = tmp_path / "result.json"
    afile.write_text("{}")
    result = CliRunner().invoke(cli, ["ingest", str(afile), "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 2 and "is a file; give the directory that holds it" in result.output


def test_a_path_with_no_trial_dirs_is_a_warning_and_strict_exits_1(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    write_trial(write_job(tmp_path / "runs" / "job"), "t__1")
    args = ["ingest", str(tmp_path / "empty"), str(tmp_path / "runs")]
    args += ["--lake", str(tmp_path / "lake")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0
    assert result.stderr.splitlines()[0] == f"warning: no trial dirs under {tmp_path / 'empty'}"
    assert "runs" not in result.stderr
    assert CliRunner().invoke(cli, [*args, "--strict"]).exit_code == 1
    assert CliRunner().invoke(cli, [*args[:1], *args[2:], "--strict"]).exit_code == 0


def _ingest_process(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, bool]:
    """`wmo-lake ingest` as its own process (the entry point, `wmo_lake.cli.main`), stdout a
    pipe; and whether the interpreter's teardown ran (an atexit hook leaves a mark)."""
    mark = tmp_path / "torn-down"
    mark.unlink(missing_ok=True)
    script = (
        "import atexit, pathlib, sys\n"
        f"atexit.register(pathlib.Path({str(mark)!r}).touch)\n"
        "from wmo_lake.cli import main\n"
        "sys.argv = ['wmo-lake', *sys.argv[1:]]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, "ingest", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    return done, mark.exists()


def test_a_finished_ingest_exits_without_the_teardown_and_its_output_whole(
    tmp_path: Path,
) -> None:
    """Once the lock is released and every file is closed, the process ends at once (the
    teardown of DuckDB and Arrow cost ~45 ms) with its buffered output flushed; a failing exit
    (--strict) still tears down as usual."""
    runs, lake = _runs(tmp_path, broken=True), str(tmp_path / "lake")
    done, torn_down = _ingest_process(tmp_path, str(runs), "--lake", lake, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["trials_new"] == 2 and not torn_down
    con = connect(Path(lake))
    assert con.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]
    con.close()
    done, torn_down = _ingest_process(tmp_path, str(runs), "--lake", lake, "--strict")
    assert done.returncode == 1 and "unchanged" in done.stdout and torn_down


def test_a_lake_whose_segments_were_deleted_by_hand_is_an_error_naming_them(
    tmp_path: Path,
) -> None:
    """lake.duckdb is rebuilt from the manifest's files; one of them gone is said, with what to
    do, by every command that rebuilds it (ingest, and sql on a private copy)."""
    runs, lake = _runs(tmp_path), tmp_path / "lake"
    assert CliRunner().invoke(cli, ["ingest", str(runs), "--lake", str(lake)]).exit_code == 0
    (segment,) = (lake / "tables" / "trials").rglob("*.parquet")
    segment.unlink()
    (lake / "lake.duckdb").unlink()
    rel = segment.relative_to(lake).as_posix()
    for args in (["ingest", str(runs)], ["sql", "SELECT count(*) FROM trials"], ["stats"]):
        result = CliRunner().invoke(cli, [*args, "--lake", str(lake)])
        assert result.exit_code == 1 and "Traceback" not in result.output, args
        assert f"is missing 1 of its Parquet files ({rel})" in result.output, args


@pytest.mark.parametrize("table", ["spans", "trials"])
@pytest.mark.parametrize("duckdb_file", [True, False], ids=["lake.duckdb", "no-lake.duckdb"])
def test_a_segment_cut_short_by_hand_is_an_error_naming_it(
    tmp_path: Path, table: str, duckdb_file: bool
) -> None:
    """A segment cut short outside wmo-lake (an interrupted copy of the lake, which may also
    have stopped before lake.duckdb): the ingest of the same runs said "nothing changed" over
    rows no query could read, `sql` gave DuckDB's bare "No magic bytes found", `tables` its
    "counting rows failed", and without lake.duckdb `sql` and `ingest` a traceback. Each names
    the file and what to do; so does `forget`, which rewrites the segment."""
    runs, lake = _runs(tmp_path), tmp_path / "lake"
    assert CliRunner().invoke(cli, ["ingest", str(runs), "--lake", str(lake)]).exit_code == 0
    (segment,) = (lake / "tables" / table).rglob("*.parquet")
    segment.write_bytes(segment.read_bytes()[:100])
    if not duckdb_file:
        (lake / "lake.duckdb").unlink()
    rel = segment.relative_to(lake).as_posix()
    commands = [["ingest", str(runs)], ["forget", "--batch", "*"]]
    if table == "spans" or not duckdb_file:  # (lake.duckdb holds a copy of trials' rows)
        commands += [["sql", f"SELECT count(*) FROM {table}"], ["tables"]]
    for args in commands:
        result = CliRunner().invoke(cli, [*args, "--lake", str(lake)])
        assert result.exit_code == 1, (args, result.output)
        assert isinstance(result.exception, SystemExit), (args, result.exception)
        assert f"holds 1 of its Parquet files cut short or unreadable ({rel})" in result.output
        assert "put them back whole, or ingest the runs again" in result.output, args


@pytest.mark.parametrize("damage", ["cut", "deleted", "a dir"])
def test_a_catalog_file_cut_short_or_deleted_by_hand_is_an_error_naming_it(
    tmp_path: Path, damage: str
) -> None:
    """A catalog file cut or left out by an interrupted copy of the lake: msgspec's traceback,
    or "cannot write the lake" (a dry run writes nothing) with nothing to do, before."""
    runs, lake = _runs(tmp_path), tmp_path / "lake"
    assert CliRunner().invoke(cli, ["ingest", str(runs), "--lake", str(lake)]).exit_code == 0
    (catalog,) = (lake / "catalog").rglob("*.msgpack")
    rel = catalog.relative_to(lake).as_posix()
    if damage == "cut":
        catalog.write_bytes(catalog.read_bytes()[: catalog.stat().st_size // 2])
        said = f"holds its catalog file {rel} cut short"
    elif damage == "deleted":
        catalog.unlink()
        said = f"is missing its catalog file {rel}"
    else:  # (a read that fails: it was "cannot write the lake", also from a dry run)
        catalog.unlink()
        catalog.mkdir()
        said = f"cannot read the lake's catalog file {lake / rel}: Is a directory"
    for args in (
        ["ingest", str(runs)],
        ["ingest", str(runs), "--dry-run"],
        ["forget", "--batch", "*"],
        ["forget", "--batch", "*", "--dry-run"],
    ):
        result = CliRunner().invoke(cli, [*args, "--lake", str(lake)])
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        assert said in result.output and "ingest the runs again" in result.output, args


def test_a_lake_duckdb_that_cannot_be_written_is_an_error_saying_the_commit_stands(
    tmp_path: Path, monkeypatch
) -> None:
    """A full disk while lake.duckdb is built (after the commit): one error line saying the
    generation is committed and what to do, no DuckDB traceback, no partial file left taking
    the space; the next ingest, with space, builds it."""
    import duckdb

    from wmo_lake import lakefile

    runs, lake = _runs(tmp_path), tmp_path / "lake"
    real_build = lakefile.build

    def full_disk(store, manifest, path, *args, **kwargs):
        path.write_bytes(b"partial")  # what DuckDB leaves when its checkpoint fails
        raise duckdb.IOException(f'Could not write file "{path}": No space left on device')

    monkeypatch.setattr(lakefile, "build", full_disk)
    result = CliRunner().invoke(cli, ["ingest", str(runs), "--lake", str(lake)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert f"generation 1 of the lake at {lake} is committed" in result.output
    assert (
        "No space left on device" in result.output
        and "run `wmo-lake ingest` again" in result.output
    )
    assert not list(lake.glob(".lake.duckdb.*")) and not (lake / "lake.duckdb").exists()
    monkeypatch.setattr(lakefile, "build", real_build)
    again = CliRunner().invoke(cli, ["ingest", str(runs), "--lake", str(lake)])
    assert again.exit_code == 0 and "(0 new, 0 replaced, 2 unchanged)" in again.output
    assert (lake / "lake.duckdb").is_file()
    assert connect(lake).execute("SELECT count(*) FROM trials").fetchone() == (2,)
