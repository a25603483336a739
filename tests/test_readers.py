"""The reader processes (wmo_lake/readers.py): every chunk of tasks is theirs from the start, so
they never wait on a busy ingest process, and the last chunks are small, so they finish
together; they also write the rows of the changed job dirs their trials belong to, each once."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
from harbor_shapes import write_job, write_trial

from wmo_lake.discover import TrialTask, discover
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.readers import Readers, chunked, jobs_by_chunk
from wmo_lake.store import TRIAL, Store, partition_of
from wmo_lake.tables import TABLES

TABLES_JOBS = TABLES["jobs"].schema


def _trials(tmp_path: Path, count: int) -> tuple[list[TrialTask], Path]:
    """`count` trials of one job, as tasks, and an empty lake dir for their segments."""
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job")
    for n in range(count):
        write_trial(job, f"t__{n}", trial_id=f"t{n}")
    lake = tmp_path / "lake"
    lake.mkdir()
    return [TrialTask.of(candidate) for candidate in discover(tmp_path / "runs").candidates], lake


def test_chunks_hold_every_task_once_in_order_and_the_last_ones_are_small() -> None:
    tasks = list(range(1000))
    chunks = list(chunked(tasks, 64, 2))  # type: ignore[arg-type]
    assert [task for chunk in chunks for task in chunk] == tasks
    sizes = [len(chunk) for chunk in chunks]
    # the last 2 chunks' worth (128 tasks) in chunks of 16; before them, chunks of 64
    assert sizes[-8:] == [16] * 8 and set(sizes[:-8]) <= {64, 1000 - 128 - 64 * 13}
    assert [len(c) for c in chunked(list(range(10)), 64, 2)] == [10]  # type: ignore[arg-type]
    assert [len(c) for c in chunked(list(range(5)), 1, 2)] == [1] * 5  # type: ignore[arg-type]


def test_the_readers_take_every_chunk_while_the_ingest_process_is_busy(tmp_path: Path) -> None:
    """The ingest process may be busy between two results (its first one imports pyarrow):
    the readers must not wait for it to hand out the next chunk. Here it takes one result and
    then reads no more until both readers have read every task and exited."""
    tasks, lake = _trials(tmp_path, 48)
    readers = Readers(tasks, 2, lake, "test")
    assert readers.processes == 2 and len(tasks) // readers.chunk > 2 * 2
    others = set(multiprocessing.active_children())  # (any a test before this one left)

    def running() -> set:
        return set(multiprocessing.active_children()) - others

    results = iter(readers)
    first = next(results)
    deadline = time.monotonic() + 60
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(), "a reader waited for the ingest process"
    rest = list(results)
    assert sorted(task.path for task, _ in [first, *rest]) == sorted(t.path for t in tasks)
    assert len(readers.files) == 2


def test_readers_started_from_a_threaded_process_read_every_chunk(tmp_path: Path) -> None:
    """A process with other threads starts its readers from a fork server (forking it could
    deadlock a child): they get the chunks pickled, and read every one."""
    from wmo_lake.readers import _worker_context

    tasks, lake = _trials(tmp_path, 12)
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        assert _worker_context().get_start_method() == "forkserver"
        readers = Readers(tasks, 2, lake, "test")
        read = [task.path for task, extracted in readers if extracted.kind == TRIAL]
    finally:
        release.set()
        other.join()
    assert sorted(read) == sorted(task.path for task in tasks)
    assert len(readers.files) == 2


# A caller's script without the `if __name__ == "__main__":` guard, with a thread running (so its
# readers start from a fork server), that notes each time its top level runs.
UNGUARDED_SCRIPT = """
import sys, threading
from pathlib import Path
with open(sys.argv[3], "a") as runs:
    runs.write("ran\\n")
threading.Thread(target=threading.Event().wait, daemon=True).start()
from wmo_lake.ingest import ingest
print(ingest([Path(sys.argv[1])], Path(sys.argv[2]), workers=2).trials_new)
"""


def test_a_script_without_a_main_guard_is_not_run_again_by_its_readers(tmp_path: Path) -> None:
    """multiprocessing runs the caller's __main__ script again in each fork-server child: the
    script ingested again in its reader, which waited forever for the lake's lock its parent
    held (a training loop would have started over). The readers need nothing of it."""
    import subprocess
    import sys

    _trials(tmp_path, 6)
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED_SCRIPT)
    runs = tmp_path / "runs.txt"
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "runs"), str(tmp_path / "lake"), str(runs)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["6"]
    assert runs.read_text() == "ran\n"  # the script's top level ran once: here, not in a reader


def test_each_job_goes_with_the_first_chunk_of_its_trials(tmp_path: Path) -> None:
    for step in (1, 2, 3):
        job = write_job(tmp_path / "runs" / "exp" / "harbor" / f"step-{step:04d}" / "job")
        for n in range(4):
            write_trial(job, f"t__{n}", trial_id=f"t{step}{n}")
    tasks = [TrialTask.of(candidate) for candidate in discover(tmp_path / "runs").candidates]
    jobs = {task.job.real: task.job for task in tasks}
    wanted = dict(list(jobs.items())[1:])  # (the first job's row is not to be written)
    chunks = list(chunked(tasks, 3, 1))  # chunks cross jobs: 3, 3, 3, then the tail's
    per_chunk = jobs_by_chunk(chunks, wanted)
    assert [job.real for jobs_of in per_chunk for job in jobs_of] == list(wanted)
    for chunk, jobs_of in zip(chunks, per_chunk, strict=True):
        for job in jobs_of:
            earlier = chunks[: chunks.index(chunk)]
            assert job.real in {task.job.real for task in chunk}
            assert job.real not in {task.job.real for c in earlier for task in c}


def _jobs(lake: Path) -> list[tuple]:
    return connect(lake).execute("SELECT * FROM jobs ORDER BY job_key").fetchall()


def test_reader_processes_write_each_changed_job_once(tmp_path: Path) -> None:
    """With reader processes the jobs table is what an ingest in one process stores: a row per
    job dir, written by the reader of the job's first trials; a job whose files changed is
    written again once (by a reader when trials of it are read, else by the ingest process),
    and an unchanged one is left as it was."""
    runs = tmp_path / "runs"
    job_dirs = []
    for step in (1, 2):
        job = write_job(runs / "exp" / "harbor" / f"step-{step:04d}" / "job", max_tokens=8)
        for n in range(12):
            write_trial(job, f"t__{n}", trial_id=f"t{step}-{n}")
        job_dirs.append(job)
    pooled, here = tmp_path / "pooled", tmp_path / "here"
    ingest([runs], pooled, workers=2)
    ingest([runs], here, workers=1)
    assert len(_jobs(pooled)) == 2 and _jobs(pooled) == _jobs(here)
    files = [rel for rels in Store(pooled).read_manifest().tables["jobs"].values() for rel in rels]
    assert len(files) == 2 and all("-w" in rel for rel in files), files  # readers' segments

    # step 1's job changes and two of its trials with it; step 2's job changes alone
    write_job(job_dirs[0], max_tokens=16)
    for n in (0, 1):
        write_trial(job_dirs[0], f"t__{n}", trial_id=f"t1-{n}", reward=0.0)
    write_job(job_dirs[1], max_tokens=32)
    for lake, workers in ((pooled, 2), (here, 1)):
        summary = ingest([runs], lake, workers=workers)
        assert summary.trials_replaced == 2 and summary.trials_unchanged == 22
    rows = _jobs(pooled)
    assert rows == _jobs(here) and len(rows) == 2
    names = TABLES_JOBS.names
    assert [row[names.index("max_tokens")] for row in rows] == [16, 32]
    live = Store(pooled).read_manifest().tables["jobs"]
    step_1, step_2 = (  # the live files holding a row (the old one, rewritten, holds none)
        [rel for rel in live[partition_of("exp", step)] if pq.read_metadata(pooled / rel).num_rows]
        for step in (1, 2)
    )
    assert len(step_1) == 1 and "-w" in step_1[0]  # a reader's: it read the job's trials
    assert len(step_2) == 1 and "-w" not in step_2[0]  # the ingest process's: no trial read


# A reader whose segments the lake dir cannot take: every write fails as a full disk's does.
FULL_DISK_SCRIPT = """
import errno, sys
import wmo_lake.readers as readers

LAKE = sys.argv[2]

def full(task, writer):
    raise OSError(errno.ENOSPC, "No space left on device", LAKE + "/tables/x.parquet")

readers.extract_to_segments = full  # (the readers are forked: they run this one)
from wmo_lake.cli import main
sys.argv = ["wmo-lake", "ingest", sys.argv[1], "--lake", sys.argv[2], "--workers", "2"]
main()
"""


def test_a_reader_that_cannot_write_its_segments_is_the_ingests_own_write_failure(
    tmp_path: Path,
) -> None:
    """A full lake disk under reader processes ended in `RuntimeError: a reader process failed`
    with the reader's traceback; one process said `Error: cannot write the lake ...`. Both say
    the latter now, and nothing is committed."""
    import subprocess
    import sys

    _trials(tmp_path, 4)
    lake = tmp_path / "lake"
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK_SCRIPT, str(tmp_path / "runs"), str(lake)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip() == (
        f"Error: cannot write the lake at {lake}: {lake}/tables/x.parquet: No space left on device"
    )
    assert Store(lake).read_manifest().generation == 0
