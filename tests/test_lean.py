"""An ingest's own processes load pyarrow without numpy (wmo_lake.lean.skip_numpy): its reader
processes, and `wmo-lake ingest` run as the program; never a caller's process (CliRunner). The
program keeps numpy's and pyarrow's memory off huge pages, and numpy without a BLAS thread pool
(wmo_lake.lean.program_environment)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb

from wmo_lake.lean import PROGRAM_ENVIRONMENT, skip_numpy

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
    print(json.dumps({"read": summary.trials_new + summary.unreadable_trials, "pid": os.getpid()}))
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
    # reader processes read (both, or one that took every chunk before the other started)
    readers = {int(f.name) for f in (tmp_path / "p").iterdir()}
    assert 1 <= len(readers) <= 2 and pooled["pid"] not in readers
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


# `wmo-lake ingest` through CliRunner, in a process of its own: the lake.duckdb build (after
# every row is read and written) notes whether numpy was loadable.
RUNNER = textwrap.dedent(
    """
    import json, sys
    import wmo_lake.lakefile as lakefile
    from click.testing import CliRunner
    from wmo_lake.cli import cli

    build, seen = lakefile.build, []

    def noting(*args, **kwargs):
        seen.append(sys.modules.get("numpy", "absent"))
        return build(*args, **kwargs)

    lakefile.build = noting
    result = CliRunner().invoke(cli, ["ingest", sys.argv[1], "--lake", sys.argv[2]])
    assert result.exit_code == 0, result.output
    print(json.dumps([repr(m) for m in seen]))
    """
)

# A harness that imports `main` and calls it (as a test might), with an ingest that reads every
# trial and then fails (--strict, a problem): the process goes on, and must find numpy as it was.
HARNESS = textwrap.dedent(
    """
    import sys
    from wmo_lake.cli import main

    sys.argv = ["wmo-lake", "ingest", sys.argv[1], "--lake", sys.argv[2], "--strict"]
    try:
        main()
    except SystemExit as done:
        assert done.code == 1, done.code
    import numpy
    import pyarrow
    print(pyarrow.array([1, 2]).to_numpy().tolist())
    """
)


def run_python(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result


def test_the_ingest_program_goes_without_numpy(fixtures_dir: Path, tmp_path: Path) -> None:
    """`python -X importtime` lists every module the program (and its readers) loaded: pyarrow,
    and no numpy (a blocked attempt shows as a bare `numpy` line of a few microseconds; numpy
    itself loads numpy._core)."""
    lake = tmp_path / "lake"
    ingest = ["-X", "importtime", "-m", "wmo_lake.cli", "ingest", str(fixtures_dir / "harbor")]
    loaded = {
        line.rsplit("|", 1)[1].strip()
        for line in run_python(*ingest, "--lake", str(lake)).stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "pyarrow.lib" in loaded
    assert not {"numpy._core", "numpy.__config__"} & loaded
    con = duckdb.connect(str(lake / "lake.duckdb"), read_only=True)
    con.execute(f"SET file_search_path = '{lake}'")
    ((trials,),) = con.execute("SELECT count(*) FROM trials").fetchall()
    assert trials > 0


def test_an_in_process_caller_keeps_numpy(fixtures_dir: Path, tmp_path: Path) -> None:
    lake = str(tmp_path / "lake")
    (seen,) = json.loads(run_python("-c", RUNNER, str(fixtures_dir / "harbor"), lake).stdout)
    assert seen.startswith("<module 'numpy'")  # (pyarrow loaded it as usual)


def test_a_harness_calling_main_keeps_numpy(fixtures_dir: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(fixtures_dir / "harbor" / "offline-demo", runs)
    broken = next(p for p in sorted(runs.rglob("result.json")) if "__" in p.parent.name)
    broken.write_bytes(broken.read_bytes()[:100])  # a problem: --strict exits 1
    out = run_python("-c", HARNESS, str(runs), str(tmp_path / "lake")).stdout
    assert out.splitlines()[-1] == "[1, 2]"


# After `wmo-lake --version` (run as the program when the script is named `wmo-lake`, else as a
# harness calling main()), numpy and pyarrow load and allocate. Printed: the memory regions the
# kernel was asked to back with huge pages (madvise MADV_HUGEPAGE: `hg` in the region's
# VmFlags), and the process's threads once numpy is loaded (OpenBLAS starts its pool then).
PROGRAM = textwrap.dedent(
    """
    import json, os
    from wmo_lake.cli import main

    try:
        main()
    except SystemExit:
        pass
    import numpy
    import pyarrow

    threads = len(os.listdir("/proc/self/task"))
    array = numpy.ones(4 << 20)  # 32 MB: numpy madvises arrays of 4 MB or more
    buffer = pyarrow.allocate_buffer(64 << 20)  # in mimalloc's arena
    with open("/proc/self/smaps") as smaps:
        flags = [line.split()[1:] for line in smaps if line.startswith("VmFlags:")]
    print(json.dumps({"huge": sum("hg" in region for region in flags), "threads": threads}))
    """
)


def program_state(script: Path, **env: str) -> dict[str, int]:
    script.write_text(PROGRAM)
    result = subprocess.run(
        [sys.executable, str(script), "--version"],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k not in PROGRAM_ENVIRONMENT} | env,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_the_program_keeps_numpy_and_pyarrow_lean(tmp_path: Path) -> None:
    (tmp_path / "program").mkdir()
    program = tmp_path / "program" / "wmo-lake"
    harness = tmp_path / "harness.py"
    ours, theirs = program_state(program), program_state(harness)
    assert ours["huge"] == 0
    # a harness calling main() is left as it was: both allocators ask for huge pages (on a
    # kernel built with transparent huge pages: elsewhere madvise refuses), and OpenBLAS starts
    # its threads (one per core beyond the first: on one core, none)
    thp = Path("/sys/kernel/mm/transparent_hugepage").is_dir()
    assert theirs["huge"] >= (2 if thp else 0)
    assert theirs["threads"] > ours["threads"] or os.cpu_count() == 1
    # the user's own setting wins
    assert program_state(program, MIMALLOC_ALLOW_THP="1")["huge"] == (1 if thp else 0)
