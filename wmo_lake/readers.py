"""The reader processes: changed trial dirs in, each dir's `Extracted` summary out.

With enough JSON to read, reader processes (one per core) extract the dirs and write their rows
to Parquet segments of their own, so no row crosses a pipe and the ingest process is free to keep
them busy; with little, starting processes costs more than the second core saves, so the dirs are
extracted in the ingest process and their rows come back with them.

Readers are forked while the CLI is still single-threaded (see `_worker_context`), so nothing
here imports pyarrow before they exist.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmo_lake.discover import Job, TrialTask
from wmo_lake.lean import skip_numpy
from wmo_lake.store import LakeError, PartitionedFiles, partition_of, pause_point

if TYPE_CHECKING:  # pyarrow loads only once the readers are forked
    import multiprocessing.context

    from wmo_lake.commit import SegmentWriter
    from wmo_lake.extract import Extracted
    from wmo_lake.stored_copies import StoredCopies

# Below this much JSON to read, starting worker processes (~0.5 s, and every row crosses a pipe)
# costs more than the second core saves.
POOL_ABOVE_BYTES = 48 * 2**20
# Tasks travel in chunks of about this much JSON: one queue message per small trial (pickling,
# a pipe write and a wake-up on both sides) cost as much as extracting it; a big trial still
# travels alone, so the readers finish together.
CHUNK_BYTES = 2 * 2**20
MAX_CHUNK = 64
SIZED_TASKS = 256  # tasks sized to choose both (spread over the list: see reader_count)


class Readers:
    """Reads `tasks`. Iterate for (task, its Extracted) in completion order. When `write_rows`,
    the readers wrote the rows to their own segments (the Extracted carry no tables) and, once
    the iteration ends, `files` lists those segments (table -> partition -> paths relative to
    the lake), one dict per reader, for the commit to take."""

    def __init__(
        self,
        tasks: list[TrialTask],
        workers: int | None,
        lake: Path,
        segment_prefix: str,
        jobs: Mapping[str, Job] | None = None,
    ) -> None:
        self.tasks = tasks
        self.lake = lake
        self.segment_prefix = segment_prefix  # a reader's segments are named <prefix>-w<i>
        self.processes, self.chunk = reader_count(tasks, workers)
        self.files: list[PartitionedFiles] = []
        self.copies: list[StoredCopies] = []  # each reader's copies of the stored tables' rows
        # Job dirs (by real path) whose rows the reader processes write, each with the first
        # chunk holding one of its tasks: written here, a job's row is a Parquet file of its
        # own (its step's), and 128 of them took the ingest process ~0.2 s beside the readers.
        # `jobs_written`: those given to a reader; `jobs_read`: each one's summary, once read.
        self.chunks = list(chunked(tasks, self.chunk, self.processes)) if self.processes else []
        self.chunk_jobs = jobs_by_chunk(self.chunks, jobs or {})
        self.jobs_written = {job.real for jobs in self.chunk_jobs for job in jobs}
        self.jobs_read: list[tuple[Job, Extracted]] = []

    @property
    def write_rows(self) -> bool:
        return self.processes > 0

    def __iter__(self) -> Iterator[tuple[TrialTask, Extracted]]:
        if self.processes:
            return self._read_in_processes()
        return self._read_here()

    def _read_here(self) -> Iterator[tuple[TrialTask, Extracted]]:
        """Extract every task in this process; the rows come back in each Extracted."""
        if not self.tasks:
            return
        from wmo_lake.extract import begin_reading, read_task

        begin_reading()
        for task in self.tasks:
            yield task, read_task(task)

    def _read_in_processes(self) -> Iterator[tuple[TrialTask, Extracted]]:
        """Every chunk is queued at once (see `chunked`); the readers' files are collected as
        each one closes."""
        from queue import Empty  # (here: an unchanged re-ingest starts no reader)

        readers = self.processes
        lake, parent = str(self.lake), os.getpid()
        context = _worker_context()
        task_queue = context.Queue()
        results = context.Queue()
        # Each reader holds every chunk from the start (a forked one shares this process's
        # memory; a forkserver one gets them pickled once), and the queue carries only chunk
        # numbers, which all fit in the pipe at once: the chunks themselves (~21 KB pickled for
        # 64 small trials) would be pickled here, by the queue's feeder thread, on the cores
        # the readers use, a few at a time as the pipe drained.
        chunks, chunk_jobs = self.chunks, self.chunk_jobs
        work = (chunks, chunk_jobs)
        processes = [
            context.Process(
                target=_reader_main,
                args=(work, task_queue, results, lake, f"{self.segment_prefix}-w{i}", parent),
                daemon=True,
            )
            for i in range(readers)
        ]
        with _caller_script_not_rerun(context.get_start_method()):
            for process in processes:
                process.start()
        # Now that the readers are forked, this process may start threads: load what the commit
        # and lake.duckdb need while the readers work, instead of after them.
        preload = threading.Thread(target=_preload_commit_modules, daemon=True)
        preload.start()
        # Every chunk's number is queued now, so no reader waits on this process again: a
        # reader takes the next number when it is done with a chunk, while this process may be
        # busy (its first result imports pyarrow, ~0.15 s, which kept both readers waiting
        # ~50 ms when the next chunk was sent only once a result came back). A reader answers
        # a chunk by its number with the Extracted of its tasks in order.
        for number in range(len(chunks)):
            task_queue.put(number)
        for _ in processes:
            task_queue.put(None)
        finished = 0
        try:
            while finished < readers:
                try:
                    message = results.get(timeout=1.0)
                except Empty:
                    dead = [p for p in processes if p.exitcode not in (None, 0)]
                    if dead:
                        raise LakeError(
                            f"a reader process died (exit code {dead[0].exitcode}; out of "
                            "memory, or killed?); nothing was committed: re-run the ingest"
                        ) from None
                    continue
                kind, payload = message
                if kind == "os_error":
                    number, text, filename = payload
                    raise OSError(number, text, filename) if number else OSError(text)
                if kind == "error":
                    raise RuntimeError(
                        f"a reader process failed; nothing was committed:\n{payload}"
                    )
                if kind == "closed":
                    files, copies = payload
                    self.files.append(files)
                    self.copies.append(copies)
                    finished += 1
                    continue
                number, summaries, job_summaries = payload
                self.jobs_read += zip(chunk_jobs[number], job_summaries, strict=True)
                yield from zip(chunks[number], summaries, strict=True)
        finally:
            task_queue.cancel_join_thread()  # (chunks no reader took are dropped at exit)
            for process in processes:
                if process.is_alive() and finished < readers:
                    process.terminate()
                process.join(timeout=5)
            # An ingest that fails at once exits while the preload may still be inside DuckDB's
            # first connect: the C++ runtime aborted the process at exit (SIGABRT, "FATAL:
            # exception not rethrown") after the error was said. It takes ~0.1 s; done by now
            # on any ingest that read a chunk.
            preload.join(timeout=10)


def _bytes_to_read(task: TrialTask) -> int:
    """The size of the JSON one task parses (result.json and agent/trajectory*.json)."""
    agent = f"{task.path}/agent"
    try:
        names = [n for n in os.listdir(agent) if n.startswith("trajectory") and n.endswith(".json")]
    except OSError:
        names = []
    total = 0
    for path in [f"{task.path}/result.json", *(f"{agent}/{name}" for name in names)]:
        with contextlib.suppress(OSError):
            total += os.stat(path).st_size
    return total


def reader_count(tasks: list[TrialTask], workers: int | None) -> tuple[int, int]:
    """How many reader processes to start (none: read here, for little JSON) and how many
    tasks each queue message carries (about CHUNK_BYTES of JSON). Both come from the JSON size
    of at most SIZED_TASKS tasks spread evenly over `tasks`, scaled to all of them: sizing every
    task of a tree of small ones (a listing and 2-3 stats each, all in this process before any
    reader starts) took ~0.1 s of an 8,192-trial ingest."""
    sample = tasks[:: max(1, len(tasks) // SIZED_TASKS)][:SIZED_TASKS]
    sized = total = 0
    for task in sample:
        total += _bytes_to_read(task)
        sized += 1
        if workers is None and total >= POOL_ABOVE_BYTES:
            break  # worth the pool already
    mean = total / sized if sized else 0
    if workers is None:
        workers = 1 if mean * len(tasks) < POOL_ABOVE_BYTES else os.cpu_count() or 1
    processes = workers if workers > 1 and len(tasks) > 1 else 0
    chunk = max(1, min(MAX_CHUNK, int(CHUNK_BYTES / max(mean, 1))))
    # never so big that a reader waits idle while another holds most of the tasks
    chunk = min(chunk, max(1, len(tasks) // (4 * max(processes, 1))))
    return processes, chunk


def chunked(tasks: list[TrialTask], size: int, readers: int) -> Iterator[tuple[TrialTask, ...]]:
    """`tasks` in chunks of `size`, but for the last ones: the tasks of the last `readers`
    chunks go in chunks a quarter that size, so the readers run out of work together (a
    reader done first waited up to ~20 ms for the other's last 64 small trials)."""
    tail = min(len(tasks), size * readers)
    head = len(tasks) - tail
    yield from itertools.batched(tasks[:head], size)
    yield from itertools.batched(tasks[head:], max(1, size // 4))


def jobs_by_chunk(
    chunks: list[tuple[TrialTask, ...]], jobs: Mapping[str, Job]
) -> list[tuple[Job, ...]]:
    """Per chunk, the jobs of `jobs` (by real path) that its tasks are the first to belong to."""
    assigned: set[str] = set()
    per_chunk: list[tuple[Job, ...]] = []
    for chunk in chunks:
        first: list[Job] = []
        for task in chunk:
            real = task.job.real
            if real in jobs and real not in assigned:
                assigned.add(real)
                first.append(jobs[real])
        per_chunk.append(tuple(first))
    return per_chunk


def _exit_with_parent(parent_pid: int) -> None:
    """Worker initializer: a SIGKILLed ingest must not leave its readers running forever (they
    would block on a queue nobody writes to), so each worker exits once the ingest is gone."""

    def alive() -> bool:
        try:  # a killed parent nobody reaped yet is a zombie: dead for our purpose
            with open(f"/proc/{parent_pid}/stat", "rb") as stat:
                return stat.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
        except FileNotFoundError:
            return False
        except OSError:
            try:
                os.kill(parent_pid, 0)
            except ProcessLookupError:
                return False
            return True

    def watch() -> None:
        while alive():
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="wmo-lake-parent-watch").start()


def _preload_commit_modules() -> None:
    import duckdb

    # DuckDB's first connection in a process sets it up (~10-20 ms more than any later one):
    # here, while the readers work, not in lake.duckdb's build after them.
    duckdb.connect().close()
    import wmo_lake.commit  # noqa: F401


def extract_to_segments(task: TrialTask, writer: SegmentWriter) -> Extracted:
    """Extract one dir, write its rows to `writer` (a reader's own segments), return the summary
    without rows. Every reader that writes its own segments reads through here: the reader
    processes below and the Spark tasks (`wmo_lake/spark_ingest.py`)."""
    from wmo_lake.extract import read_task

    extracted = read_task(task)  # (with the dir's fingerprint, taken just before reading it)
    partition = partition_of(task.run, task.step)  # the dir's run and step: its Hive partition
    return _written(extracted, partition, writer)


def job_to_segments(job: Job, writer: SegmentWriter) -> Extracted:
    """A job dir's rows (its config.json and result.json) to `writer`; the summary without rows."""
    from wmo_lake.extract import extract_job

    return _written(extract_job(job), partition_of(job.run, job.step), writer)


def _written(extracted: Extracted, partition: str, writer: SegmentWriter) -> Extracted:
    for table, rows in extracted.tables.items():
        writer.append(table, rows, partition)
    return extracted.without_tables()


def _reader_main(
    work: tuple[list[tuple[TrialTask, ...]], list[tuple[Job, ...]]],
    numbers: Any,
    results: Any,
    lake: str,
    prefix: str,
    parent_pid: int,
) -> None:
    """A reader process: extract the chunks whose numbers it takes from `numbers` until None,
    and each chunk's jobs (`jobs_by_chunk`), writing their rows to its own segments."""
    _exit_with_parent(parent_pid)
    # (forked: the parent's SIGTERM handler is the CLI's; a reader ends on SIGTERM, as always)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    skip_numpy()  # (before anything here loads pyarrow)
    try:
        from wmo_lake.commit import SegmentWriter
        from wmo_lake.extract import begin_reading
        from wmo_lake.stored_copies import CopyWriter

        begin_reading()  # (forked: what the parent may have cached is not this reader's)
        fewer_collections()
        keep_freed_memory()
        copies = CopyWriter(Path(lake), prefix)
        writer = SegmentWriter(Path(lake), prefix, copies)
        chunks, chunk_jobs = work
        while (number := numbers.get()) is not None:
            pause_point()  # (the signal tests' hold: one dict lookup a chunk otherwise)
            summaries = [extract_to_segments(task, writer) for task in chunks[number]]
            job_summaries = [job_to_segments(job, writer) for job in chunk_jobs[number]]
            results.put(("trials", (number, summaries, job_summaries)))
        files = writer.close()
        results.put(("closed", (files, copies.copies)))
    except OSError as error:  # its segments could not be written (a full or read-only lake dir):
        # the ingest's own write failure, said as such, not a reader's traceback
        results.put(("os_error", (error.errno, error.strerror or str(error), error.filename)))
    except BaseException:
        import traceback

        results.put(("error", traceback.format_exc()))


# The cyclic collector's thresholds while reading: a small trial allocates thousands of objects
# (its decoded JSON, its rows) and makes no cycles, and at the default 700 the collections cost
# ~10% of a reader's time. Objects alive before (the modules) are frozen out of every collection.
READING_GC_THRESHOLDS = (20_000, 20, 20)


def fewer_collections() -> None:
    """For a reader process: see READING_GC_THRESHOLDS."""
    gc.freeze()
    gc.set_threshold(*READING_GC_THRESHOLDS)


# glibc malloc's thresholds in a reader: a result.json (10-50 MB) and what it decodes to would
# each be a fresh mmap, its pages faulted in anew for every trial and unmapped after it (the
# kernel's page faults were ~40% of the time to read a big tree). Served from the heap and kept
# there when freed, the next trial reuses those pages: reading the bench's 1.3 GB of result.json
# took ~0.35-0.4 s instead of ~0.55 s. Bounded: a reader keeps at most TRIM_ABOVE freed bytes.
MMAP_ABOVE = 64 * 2**20
TRIM_ABOVE = 256 * 2**20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, <malloc.h>


def keep_freed_memory() -> bool:
    """For a reader process: see MMAP_ABOVE. False (nothing changed) where malloc is not
    glibc's (musl, macOS)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_ABOVE)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_ABOVE)
    )


@contextlib.contextmanager
def collecting_less() -> Iterator[None]:
    """READING_GC_THRESHOLDS for the block, then the caller's thresholds again."""
    before = gc.get_threshold()
    gc.set_threshold(*READING_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def _caller_script_not_rerun(start_method: str) -> Iterator[None]:
    """While readers start from a fork server: hide the caller's `__main__` script (or module)
    from multiprocessing, which would run it again in each reader (and in the server) before
    `_reader_main`, which needs nothing of it. A script without the `if __name__ == "__main__":`
    guard that called ingest() (or collect()) from a process with threads ran its ingest again
    in the reader, which waited forever for the lake's lock its parent held; a training script
    would have started over. A forked reader runs nothing again: nothing to hide."""
    main = sys.modules.get("__main__")
    if start_method == "fork" or main is None:
        yield
        return
    saved: dict[str, Any] = {
        name: vars(main)[name] for name in ("__file__", "__spec__") if name in vars(main)
    }
    vars(main).pop("__file__", None)
    main.__spec__ = None
    try:
        yield
    finally:
        vars(main).update(saved)
        if "__spec__" not in saved:
            del main.__spec__


def _worker_context() -> (
    multiprocessing.context.ForkContext | multiprocessing.context.ForkServerContext
):
    """`fork` while this process is still single-threaded (the CLI: workers start at once, with
    nothing to import but extraction); `forkserver` otherwise, since forking a process whose
    other threads may hold locks (pyarrow starts some on import) can deadlock the child."""
    import multiprocessing  # (here: an ingest with nothing to read starts no process)

    try:
        single_threaded = len(os.listdir("/proc/self/task")) == 1
    except OSError:
        single_threaded = False
    if single_threaded and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["wmo_lake.extract"])
    return context
