"""An ingest's own processes load pyarrow without numpy (wmo_lake.lean.skip_numpy): its reader
processes, and `wmo-lake ingest` run as the program; never a caller's process (CliRunner)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb

from wmo_lake.lean import skip_numpy

# A real ingest with two reader processes, in a fresh (single-threaded) process, so the readers
# are forked as the CLI's are. Each reader notes, at every trial, whether numpy was loaded.
INGEST = textwrap.dedent(
    """
    import json, os, sys
    from pathlib import Path
    import wmo_lake.readers as readers
    from wmo_lake.ingest import ingest

    seen = Path(sys.argv[3])
    extract_to_segments = readers.extract_to_segments

    def noting(task, writer):
        numpy = sys.modules.get("numpy", "absent")
        with open(seen / str(os.getpid()), "a") as out:
            out.write(json.dumps("blocked" if numpy is None else str(numpy)) + "\\n")
        return extract_to_segments(task, writer)

    readers.extract_to_segments = noting
    summary = ingest([Path(sys.argv[1])], Path(sys.argv[2]), workers=int(sys.argv[4]))
    print(json.dumps({"read": summary.trials_new + summary.unreadable_trials}))
    """
)


def ingest_in_process(fixtures: Path, lake: Path, seen: Path, workers: int) -> dict[str, object]:
    seen.mkdir()
    result = subprocess.run(
        [sys.executable, "-c", INGEST, str(fixtures), str(lake), str(seen), str(workers)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def table_digest(lake: Path, table: str) -> tuple[int, str]:
    """(rows, a digest of every row) of one table's segments, whatever their order."""
    files = f"{lake}/tables/{table}/**/*.parquet"
    con = duckdb.connect()
    count, digest = con.execute(
        f"SELECT count(*), bit_xor(hash(t)) FROM read_parquet('{files}', union_by_name=true) t"
    ).fetchone()
    return count, str(digest)


def test_readers_write_without_numpy_and_the_same_rows(fixtures_dir: Path, tmp_path: Path) -> None:
    pooled = ingest_in_process(fixtures_dir / "harbor", tmp_path / "pooled", tmp_path / "p", 2)
    notes = [line for f in (tmp_path / "p").iterdir() for line in f.read_text().splitlines()]
    assert len(list((tmp_path / "p").iterdir())) == 2  # two reader processes read
    assert len(notes) == pooled["read"] > 0
    assert {json.loads(note) for note in notes} == {"blocked"}

    # read in the ingest process itself (pyarrow with numpy): the same rows
    here = ingest_in_process(fixtures_dir / "harbor", tmp_path / "here", tmp_path / "h", 1)
    assert here["read"] == pooled["read"]
    assert not list((tmp_path / "h").iterdir())  # (no reader process: nothing noted)
    for table in ("trials", "spans", "steps", "tests", "tool_calls"):
        assert table_digest(tmp_path / "pooled", table) == table_digest(tmp_path / "here", table)


def test_numpy_already_loaded_is_left_alone() -> None:
    import numpy

    assert skip_numpy() is False
    assert sys.modules["numpy"] is numpy


# `wmo-lake ingest` in a process of its own, as the program (`main`) or through CliRunner: the
# lake.duckdb build (after every row is read and written) notes whether numpy was loadable.
CLI = textwrap.dedent(
    """
    import json, sys
    import wmo_lake.lakefile as lakefile

    build, seen = lakefile.build, []

    def noting(*args, **kwargs):
        seen.append(sys.modules.get("numpy", "absent"))
        return build(*args, **kwargs)

    lakefile.build = noting
    how, runs, lake = sys.argv[1:]
    if how == "program":
        import atexit
        import wmo_lake.commands.options as options

        options.QUICK_EXIT.clear()  # (an exit without teardown would skip the note below)
        options.exit_quickly_when_done = lambda: None
        atexit.register(lambda: print(json.dumps([repr(m) for m in seen])))
        sys.argv = ["wmo-lake", "ingest", runs, "--lake", lake]
        from wmo_lake.cli import main

        main()
    else:
        from click.testing import CliRunner
        from wmo_lake.cli import cli

        result = CliRunner().invoke(cli, ["ingest", runs, "--lake", lake])
        assert result.exit_code == 0, result.output
        print(json.dumps([repr(m) for m in seen]))
    """
)


def cli_ingest(how: str, fixtures: Path, lake: Path) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", CLI, how, str(fixtures / "harbor"), str(lake)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_the_ingest_program_goes_without_numpy(fixtures_dir: Path, tmp_path: Path) -> None:
    assert cli_ingest("program", fixtures_dir, tmp_path / "lake") == ["None"]
    con = duckdb.connect(str(tmp_path / "lake" / "lake.duckdb"), read_only=True)
    con.execute(f"SET file_search_path = '{tmp_path / 'lake'}'")
    ((trials,),) = con.execute("SELECT count(*) FROM trials").fetchall()
    assert trials > 0


def test_an_in_process_caller_keeps_numpy(fixtures_dir: Path, tmp_path: Path) -> None:
    (seen,) = cli_ingest("runner", fixtures_dir, tmp_path / "lake")
    assert seen.startswith("<module 'numpy'")  # (pyarrow loaded it as usual)
