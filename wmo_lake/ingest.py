"""`ingest`: run trees in, one atomic lake generation out.

    discover (walk, stat) -> fingerprint -> extract changed dirs (all cores) -> commit

A dir whose files (and labels) are unchanged since the last ingest is not parsed at all. A trial
is identified by its TrialResult `id` (or its resolved dir when it has none), so re-ingesting it,
from the same PATH or another, replaces its rows instead of doubling them.

With enough JSON to read, reader processes (one per core) extract the changed dirs and write
their rows to Parquet segments of their own; this process keeps the catalog and commits.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import multiprocessing
import os
import secrets
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from queue import Empty
from typing import TYPE_CHECKING, Any

from wmo_lake.discover import Candidate, Job, TrialTask, WalkProblem, discover
from wmo_lake.store import (
    DUPLICATE,
    JOB,
    TRIAL,
    UNREADABLE,
    WALK,
    CatalogEntry,
    Manifest,
    Store,
    crash_point,
    segment_prefix,
)

if TYPE_CHECKING:  # the heavy modules (pyarrow) load only when something has changed
    from wmo_lake.commit import Commit
    from wmo_lake.extract import Extracted
    from wmo_lake.tables.fields import ProblemLog

# Bump when extraction changes what it writes: every dir is then re-read on the next ingest.
EXTRACT_VERSION = "2"  # 2: trajectories / steps / tool_calls
TRIAL_FILES = (
    "result.json",
    "config.json",
    "agent/wmo-run.json",
    "wmo-run.json",
    "verifier/ctrf.json",
)
# Below this much JSON to read, starting worker processes (~0.5 s, and every row crosses a pipe)
# costs more than the second core saves.
POOL_ABOVE_BYTES = 48 * 2**20

Progress = Callable[[int, int], None]


@dataclass
class IngestSummary:
    lake: str
    generation: int
    committed: bool
    trials_new: int = 0
    trials_replaced: int = 0
    trials_unchanged: int = 0
    unreadable_trials: int = 0
    problems: int = 0
    jobs: int = 0
    seconds: float = 0.0

    def line(self) -> str:
        trials = self.trials_new + self.trials_replaced + self.trials_unchanged
        return (
            f"{trials} trials ({self.trials_new} new, {self.trials_replaced} replaced, "
            f"{self.trials_unchanged} unchanged) in {self.jobs} jobs, "
            f"{self.unreadable_trials} unreadable trials, {self.problems} problems"
            f" -> {self.lake} generation {self.generation}"
            f"{'' if self.committed else ' (nothing changed)'} in {self.seconds:.1f}s"
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _stat_token(path: Path) -> str:
    try:
        st = path.stat()
    except OSError:
        return "-"
    return f"{st.st_size}:{st.st_mtime_ns}"


def _digest(parts: Iterable[str]) -> str:
    return hashlib.sha1("\x00".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def trial_fingerprint(candidate: Candidate, sinks: tuple[str, ...]) -> str:
    """What decides whether a trial dir must be re-read: its files' sizes and mtimes, the
    trajectories beside them, its sink files, and the labels it would be stored under."""
    job = candidate.job
    directory = candidate.path
    parts = [EXTRACT_VERSION, job.batch, str(job.run), str(job.step), *sinks]
    parts += [f"{name}={_stat_token(directory / name)}" for name in TRIAL_FILES]
    try:
        agent_files = sorted(
            n for n in os.listdir(directory / "agent") if n.startswith("trajectory")
        )
    except OSError:
        agent_files = []
    parts += [f"agent/{name}={_stat_token(directory / 'agent' / name)}" for name in agent_files]
    parts += [f"sink={_stat_token(Path(s) / f'{directory.name}.jsonl')}" for s in sinks]
    return _digest(parts)


def job_fingerprint(job: Job) -> str:
    return _digest(
        [
            EXTRACT_VERSION,
            job.batch,
            str(job.run),
            str(job.step),
            _stat_token(job.path / "config.json"),
            _stat_token(job.path / "result.json"),
        ]
    )


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


def _bytes_to_read(task: TrialTask) -> int:
    """The size of the JSON one task parses (result.json and the trajectories)."""
    trial_dir = Path(task.path)
    total = 0
    for path in [trial_dir / "result.json", *(trial_dir / "agent").glob("trajectory*.json")]:
        with contextlib.suppress(OSError):
            total += path.stat().st_size
    return total


def _reader_count(tasks: list[TrialTask], workers: int | None) -> int:
    """How many reader processes to start: none (read here) for little JSON."""
    if workers is None:
        small = sum(map(_bytes_to_read, tasks)) < POOL_ABOVE_BYTES
        workers = 1 if small else os.cpu_count() or 1
    return workers if workers > 1 and len(tasks) > 1 else 0


def _read_here(
    tasks: list[TrialTask], progress: Progress | None
) -> Iterator[tuple[TrialTask, Extracted]]:
    """Extract every task in this process; the caller writes the rows."""
    if not tasks:
        return
    from wmo_lake.extract import extract_trial

    for done, task in enumerate(tasks, 1):
        yield task, extract_trial(task)
        if progress:
            progress(done, len(tasks))


def _read_in_processes(
    tasks: list[TrialTask],
    readers: int,
    progress: Progress | None,
    lake: Path,
    segment_prefix: Callable[[str], str],
    on_files: Callable[[dict[str, str]], None],
) -> Iterator[tuple[TrialTask, Extracted]]:
    """Extract tasks in `readers` processes that write the rows to segments of their own (so no
    row crosses a pipe, and this process is free to keep them busy). Yields each task with its
    summary (no tables) in completion order, at most 2 tasks per reader in flight; hands the
    readers' files to `on_files` once all are done."""
    context = _worker_context()
    task_queue = context.Queue()
    results = context.Queue()
    processes = [
        context.Process(
            target=_reader_main,
            args=(task_queue, results, str(lake), segment_prefix(f"-w{i}"), os.getpid()),
            daemon=True,
        )
        for i in range(readers)
    ]
    for process in processes:
        process.start()
    # Now that the readers are forked, this process may start threads: load what the commit
    # and lake.duckdb need while the readers work, instead of after them.
    threading.Thread(target=_preload_commit_modules, daemon=True).start()
    queue = iter(tasks)
    in_flight = 0
    for task in itertools.islice(queue, 2 * readers):
        task_queue.put(task)
        in_flight += 1
    done = finished = 0
    try:
        while finished < readers:
            try:
                message = results.get(timeout=1.0)
            except Empty:
                dead = [p for p in processes if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(
                        f"a reader process died (exit code {dead[0].exitcode}; out of memory?); "
                        "nothing was committed: re-run the ingest"
                    ) from None
                continue
            kind, payload, extracted = message
            if kind == "error":
                raise RuntimeError(f"a reader process failed; nothing was committed:\n{payload}")
            if kind == "closed":
                on_files(payload)
                finished += 1
                continue
            in_flight -= 1
            task = next(queue, None)
            if task is not None:
                task_queue.put(task)
                in_flight += 1
            elif in_flight == 0:
                for _ in processes:
                    task_queue.put(None)
            done += 1
            yield payload, extracted
            if progress:
                progress(done, len(tasks))
    finally:
        for process in processes:
            if process.is_alive() and finished < readers:
                process.terminate()
            process.join(timeout=5)


def _preload_commit_modules() -> None:
    import duckdb  # noqa: F401

    import wmo_lake.commit  # noqa: F401


def _reader_main(tasks: Any, results: Any, lake: str, prefix: str, parent_pid: int) -> None:
    """A reader process: extract tasks until None, writing their rows to its own segments."""
    _exit_with_parent(parent_pid)
    try:
        from wmo_lake.commit import SegmentWriter
        from wmo_lake.extract import extract_trial

        writer = SegmentWriter(Path(lake), prefix)
        while (task := tasks.get()) is not None:
            extracted = extract_trial(task)
            for table, rows in extracted.tables.items():
                writer.append(table, rows)
            results.put(("trial", task, extracted.without_tables()))
        results.put(("closed", writer.close(), None))
    except BaseException:
        results.put(("error", traceback.format_exc(), None))


def _worker_context() -> multiprocessing.context.BaseContext:
    """`fork` while this process is still single-threaded (the CLI: workers start at once, with
    nothing to import but extraction); `forkserver` otherwise, since forking a process whose
    other threads may hold locks (pyarrow starts some on import) can deadlock the child."""
    try:
        single_threaded = len(os.listdir("/proc/self/task")) == 1
    except OSError:
        single_threaded = False
    if single_threaded and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["wmo_lake.extract"])
    return context


def ingest(
    paths: list[Path],
    lake: Path,
    *,
    sinks: Iterable[Path] = (),
    workers: int | None = None,
    progress: Progress | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> IngestSummary:
    """Ingest run trees into `lake`; see the module docstring."""
    started = time.perf_counter()
    store = Store(lake)
    sink_dirs = tuple(os.path.abspath(s) for s in sinks)
    with store.lock(on_wait):
        run = _Ingest(store, store.read_manifest())
        candidates: dict[str, tuple[Candidate, str]] = {}
        walk_problems: list[WalkProblem] = []
        for path in paths:
            found = discover(path)
            walk_problems += found.problems
            for candidate in found.candidates:
                if candidate.real not in candidates:
                    fingerprint = trial_fingerprint(candidate, sink_dirs)
                    candidates[candidate.real] = (candidate, fingerprint)
        tasks = [
            TrialTask.of(candidate, sink_dirs)
            for candidate, fingerprint in candidates.values()
            if not run.unchanged(candidate, fingerprint)
        ]
        try:
            readers = _reader_count(tasks, workers)
            if (
                readers
            ):  # the commit (and pyarrow) only after the readers exist: see _worker_context
                found = _read_in_processes(
                    tasks,
                    readers,
                    progress,
                    store.root,
                    run.segment_prefix,
                    lambda files: run._commit().add_files(files),
                )
            else:
                found = _read_here(tasks, progress)
            for task, extracted in found:
                run.add_trial(task, extracted, candidates[task.real][1], written=bool(readers))
                crash_point("mid_extract")
            for job in run.jobs.values():
                run.add_job(job)
            for problem in walk_problems:
                run.add_walk_problem(problem)
            run.finish()
        except BaseException:
            if run.commit is not None:
                run.commit.abort()
            raise
        if run.summary.committed or not store.duckdb_file_current():
            from wmo_lake.lake import ensure_duckdb_file

            crash_point("before_duckdb_file")
            ensure_duckdb_file(store)
    run.summary.seconds = time.perf_counter() - started
    return run.summary


class _Ingest:
    """The state of one ingest: the catalog it updates, the commit it fills (created only when
    something changed), and the summary it reports."""

    def __init__(self, store: Store, base: Manifest) -> None:
        self.store = store
        self.base = base
        self.catalog = store.read_catalog(base)
        self.owner = {e.unit_key: e.source for e in self.catalog.values() if e.unit_key}
        self.summary = IngestSummary(str(store.root), base.generation, committed=False)
        self.jobs: dict[str, Job] = {}  # the job dirs of every trial seen, for the jobs table
        self.added: set[str] = set()  # trial keys stored by this ingest
        self.restored: set[str] = set()  # duplicated keys re-stored through this process
        self.tasks: dict[str, TrialTask] = {}  # real path -> task, of the dirs read
        self.commit: Commit | None = None
        self.token = secrets.token_hex(4)  # names this ingest's files before its Commit exists

    def segment_prefix(self, label: str = "") -> str:
        return segment_prefix(self.base.generation + 1, self.token, label)

    def _commit(self) -> Commit:
        if self.commit is None:
            from wmo_lake.commit import Commit

            self.commit = Commit(self.store, self.base, self.token)
        return self.commit

    def unchanged(self, candidate: Candidate, fingerprint: str) -> bool:
        """Count an unchanged dir from its catalog entry; False when it must be read."""
        entry = self.catalog.get(candidate.real)
        if entry is None or entry.fingerprint != fingerprint:
            return False
        if entry.kind in (TRIAL, UNREADABLE):
            self.jobs[candidate.job.real] = candidate.job
        self.summary.trials_unchanged += entry.kind == TRIAL
        self.summary.unreadable_trials += entry.kind == UNREADABLE
        self.summary.problems += entry.n_problems
        return True

    def add_trial(
        self, task: TrialTask, extracted: Extracted, fingerprint: str, written: bool = False
    ) -> None:
        """Store what one changed dir holds, replacing whatever it (or its trial) held before.
        `written`: a reader process already wrote its rows (`extracted` has no tables)."""
        commit = self._commit()
        old = self.catalog.get(task.real)
        if old is not None and old.unit_key:
            commit.remove_units([old.unit_key])
            self.owner.pop(old.unit_key, None)
        if extracted.kind == TRIAL and extracted.unit_key in self.added:
            first_source = self.owner[extracted.unit_key]
            if written:
                self._store_once(extracted.unit_key, first_source)
            extracted = _duplicate(task, extracted, first_source)
        key, kind = extracted.unit_key, extracted.kind
        if kind == TRIAL:
            previous_source = self.owner.get(key)
            if previous_source is not None:  # the same trial, read before from another dir
                commit.remove_units([key])
                self.catalog[previous_source].unit_key = None
            replaced = previous_source is not None or (old is not None and old.kind == TRIAL)
            self.summary.trials_replaced += replaced
            self.summary.trials_new += not replaced
            self.added.add(key)
        if kind in (TRIAL, UNREADABLE):
            self.jobs[task.job.real] = task.job
        self.summary.unreadable_trials += kind == UNREADABLE
        self.summary.problems += extracted.n_problems
        self.owner[key] = task.real
        self.tasks[task.real] = task
        for table, rows in extracted.tables.items():
            commit.append(table, rows)
        self.catalog[task.real] = CatalogEntry(
            task.real, key, kind, task.job_key, task.batch, fingerprint, extracted.n_problems
        )

    def _store_once(self, key: str, first_source: str) -> None:
        """A trial two dirs hold, both written by reader processes: drop both from their
        segments and store the first dir's rows again from here."""
        if key in self.restored:
            return
        self.restored.add(key)
        from wmo_lake.extract import extract_trial

        commit = self._commit()
        commit.exclude_from_added([key])
        for table, rows in extract_trial(self.tasks[first_source]).tables.items():
            commit.append(table, rows)

    def add_job(self, job: Job) -> None:
        """The jobs row of a job dir with trials, when its files changed."""
        fingerprint = job_fingerprint(job)
        entry = self.catalog.get(job.key)
        if entry is not None and entry.fingerprint == fingerprint:
            self.summary.problems += entry.n_problems
            return
        import pyarrow as pa

        from wmo_lake.tables import TABLES, jobs
        from wmo_lake.tables.fields import ProblemLog

        problems = ProblemLog(unit_key=job.key, batch=job.batch)
        row = jobs.row(job.path, problems) | {
            "job_key": job.key,
            "batch": job.batch,
            "run": job.run,
            "step": job.step,
        }
        commit = self._commit()
        commit.remove_units([job.key])
        commit.append("jobs", pa.Table.from_pylist([row], schema=TABLES["jobs"].schema))
        self._append_problems(problems)
        self.summary.problems += len(problems.rows)
        self.catalog[job.key] = CatalogEntry(
            job.key, job.key, JOB, job.key, job.batch, fingerprint, len(problems.rows)
        )

    def add_walk_problem(self, problem: WalkProblem) -> None:
        source = f"walk:{problem.path}"
        fingerprint = _digest([problem.kind, problem.message])
        self.summary.problems += 1
        entry = self.catalog.get(source)
        if entry is not None and entry.fingerprint == fingerprint:
            return
        from wmo_lake.tables.fields import ProblemLog

        problems = ProblemLog(unit_key=source, batch=None)
        problems.add(problem.kind, problem.path, problem.message)
        self._commit().remove_units([source])
        self._append_problems(problems)
        self.catalog[source] = CatalogEntry(source, source, WALK, None, None, fingerprint, 1)

    def _append_problems(self, problems: ProblemLog) -> None:
        if problems.rows:
            import pyarrow as pa

            from wmo_lake.tables import TABLES

            schema = TABLES["problems"].schema
            self._commit().append("problems", pa.Table.from_pylist(problems.rows, schema=schema))

    def finish(self) -> None:
        """Commit when anything changed (a first ingest always does, so even an empty tree
        leaves a queryable lake); otherwise only tidy what an interrupted ingest left."""
        self.summary.jobs = len(self.jobs)
        if (self.commit is not None and self.commit.changed) or not self.store.exists():
            manifest = self._commit().finish(self.catalog.values())
            self.summary.generation = manifest.generation
            self.summary.committed = True
        else:
            if self.commit is not None:
                self.commit.abort()
            self.store.collect_garbage(self.base)


def _duplicate(task: TrialTask, extracted: Extracted, first_source: str) -> Extracted:
    """A second dir holding a trial this ingest already read: kept out, and said so."""
    import pyarrow as pa

    from wmo_lake.extract import Extracted
    from wmo_lake.tables import TABLES
    from wmo_lake.tables.fields import ProblemLog

    problems = ProblemLog(
        unit_key=f"dup:{task.real}", batch=task.batch, trial_name=extracted.trial_name
    )
    problems.add(
        "duplicate_trial",
        task.path,
        f"{task.path} holds trial {extracted.unit_key}, which {first_source} also holds; the "
        "trial is stored once, from the first dir read",
    )
    return Extracted(
        DUPLICATE,
        problems.unit_key,
        extracted.trial_name,
        {"problems": pa.Table.from_pylist(problems.rows, schema=TABLES["problems"].schema)},
    )


__all__ = ["IngestSummary", "ingest"]
