"""The reader processes (wmo_lake/readers.py): every chunk of tasks is theirs from the start, so
they never wait on a busy ingest process, and the last chunks are small, so they finish
together."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

from harbor_shapes import write_job, write_trial

from wmo_lake.discover import TrialTask, discover
from wmo_lake.readers import Readers, chunked
from wmo_lake.store import TRIAL


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
    results = iter(readers)
    first = next(results)
    deadline = time.monotonic() + 60
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not multiprocessing.active_children(), "a reader waited for the ingest process"
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
