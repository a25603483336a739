"""A reader process starts light (wmo_lake.readers.skip_numpy): pyarrow loads there without
numpy, which nothing a reader does needs, and the rows it writes are the same."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb

from wmo_lake.readers import skip_numpy

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
