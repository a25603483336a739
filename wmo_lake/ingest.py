"""`ingest`: run trees in, one atomic lake generation out.

    discover (walk, stat) -> fingerprint -> extract changed dirs (all cores) -> commit

A dir whose files (and labels) are unchanged since the last ingest is not parsed at all. A trial
is identified by its TrialResult `id` (or its resolved dir when it has none), so re-ingesting it,
from the same PATH or another, replaces its rows instead of doubling them.
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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


def _extract_all(
    tasks: list[TrialTask], workers: int | None, progress: Progress | None
) -> Iterator[tuple[TrialTask, Extracted]]:
    """Extract every task in completion order, at most 2 per worker in flight (flat memory).

    `workers` None means every core, when there is enough JSON to read to be worth it."""
    if not tasks:
        return
    total = len(tasks)
    if workers is None:
        small = sum(map(_bytes_to_read, tasks)) < POOL_ABOVE_BYTES
        workers = 1 if small else os.cpu_count() or 1
    if workers <= 1 or total < 2:
        from wmo_lake.extract import extract_trial

        for done, task in enumerate(tasks, 1):
            yield task, extract_trial(task)
            if progress:
                progress(done, total)
        return
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=_worker_context(),
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    ) as pool:
        pending: dict[Future[Extracted], TrialTask] = {}
        queue = iter(tasks)
        done = 0
        while True:
            while len(pending) < 2 * workers:
                task = next(queue, None)
                if task is None:
                    break
                pending[pool.submit(_extract_in_worker, task)] = task
            if not pending:
                return
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                task = pending.pop(future)
                yield task, future.result()
                done += 1
                if progress:
                    progress(done, total)


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


def _extract_in_worker(task: TrialTask) -> Extracted:
    """Runs in a worker: the extraction modules (pyarrow) are imported there, not before the
    fork, so the ingest process stays single-threaded until its workers exist."""
    from wmo_lake.extract import extract_trial

    return extract_trial(task)


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
            for task, extracted in _extract_all(tasks, workers, progress):
                run.add_trial(task, extracted, candidates[task.real][1])
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
        self.commit: Commit | None = None

    def _commit(self) -> Commit:
        if self.commit is None:
            from wmo_lake.commit import Commit

            self.commit = Commit(self.store, self.base)
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

    def add_trial(self, task: TrialTask, extracted: Extracted, fingerprint: str) -> None:
        """Store what one changed dir holds, replacing whatever it (or its trial) held before."""
        commit = self._commit()
        old = self.catalog.get(task.real)
        if old is not None and old.unit_key:
            commit.remove_units([old.unit_key])
            self.owner.pop(old.unit_key, None)
        if extracted.kind == TRIAL and extracted.unit_key in self.added:
            extracted = _duplicate(task, extracted, self.owner[extracted.unit_key])
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
        for table, rows in extracted.tables.items():
            commit.append(table, rows)
        self.catalog[task.real] = CatalogEntry(
            task.real, key, kind, task.job_key, task.batch, fingerprint, extracted.n_problems
        )

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
