"""`ingest`: run trees in, one atomic lake generation out, in the README's steps:

    discover (walk) -> fingerprint -> readers extract the changed dirs (all cores) -> commit

A dir whose files (and labels) are unchanged since the last ingest is not parsed at all
(`wmo_lake/fingerprint.py`). A trial is identified by its TrialResult `id` (or its resolved dir
when it has none), so re-ingesting it, from the same PATH or another, replaces its rows instead
of doubling them. This module decides what each dir's rows replace and keeps the catalog and the
summary; it builds no rows itself (`wmo_lake/extract.py` does) and writes no files itself
(`wmo_lake/readers.py` and `wmo_lake/commit.py` do).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from wmo_lake.catalog import CatalogEntry, is_shadow, shadows_of
from wmo_lake.collection import SinkRoots
from wmo_lake.discover import Candidate, Job, TrialTask, WalkProblem, discover, proves_a_trial
from wmo_lake.fingerprint import (
    EXTRACT_VERSION,
    job_fingerprint,
    matches,
    trial_fingerprint,
    walk_fingerprint,
    with_failed_reads,
)
from wmo_lake.readers import Readers, collecting_less
from wmo_lake.stopping import finished, stopped_by_user
from wmo_lake.store import (
    DUPLICATE,
    JOB,
    MIXED,
    NO_PARTITION,
    OTHER,
    TRIAL,
    UNREADABLE,
    WALK,
    InterruptedAfterCommit,
    LakeError,
    Manifest,
    PartitionedFiles,
    Store,
    committed_message,
    crash_point,
    failed_after_commit,
    partition_of,
    refuse_shadowed_files,
    segment_prefix,
)

if TYPE_CHECKING:  # the heavy modules (pyarrow) load only when something has changed
    from pyspark.sql import SparkSession

    from wmo_lake.commit import Commit
    from wmo_lake.extract import Extracted
    from wmo_lake.spark_ingest import SparkReaders
    from wmo_lake.stored_copies import StoredCopies

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
    # of those, dirs whose trial the lake held until now (a file broken since): its rows are gone
    # from the lake until the dir reads again, as a fresh ingest of the tree would have it
    trials_now_unreadable: int = 0
    # trial dirs walked whose trial the lake holds from another dir (a copy that took it over,
    # or a duplicate): not in `trials`, and said, so a tree a copy took over is not "0 trials"
    trials_held_elsewhere: int = 0
    # batch -> the trials this ingest took over from dirs of that batch that are still there (a
    # copy's, or the original's of a copy read now): that batch no longer counts them
    trials_taken_from: dict[str, int] = field(default_factory=dict)
    problems: int = 0
    jobs: int = 0
    seconds: float = 0.0
    pruned_trials: int = 0  # --prune: trials (and unreadable trials) whose dirs are gone
    pruned_jobs: int = 0  # --prune: job dirs that are gone
    pruned: list[str] = field(default_factory=list)  # their dirs (trials' and jobs')
    dry_run: bool = False
    would_read: int = 0  # --dry-run: the dirs an ingest would read
    # --dry-run: dirs that hold a copy of a trial a changed dir holds now, read too should that
    # dir no longer hold it once read (which only its read can tell)
    may_also_read: int = 0
    paths_without_trials: list[str] = field(default_factory=list)  # PATHs that held no trial dir
    # without --prune: trial dirs (and unreadable ones) of the steps walked that the lake holds
    # under these PATHs and the walk no longer finds (harbor's resume deletes some): kept
    gone_kept: int = 0
    # the `--sink-root` remaps earlier ingests were given, applied again (OLD=NEW)
    sink_roots_remembered: list[str] = field(default_factory=list)
    # --dry-run: the remaps given change what the lake remembers (an ingest commits for that)
    would_remember_remaps: bool = False

    def line(self) -> str:
        trials = self.trials_new + self.trials_replaced + self.trials_unchanged
        if self.dry_run:
            also = (
                f" (and up to {self.may_also_read} dirs holding copies of trials that changed "
                "dirs hold, should a changed dir no longer hold its trial)"
                if self.may_also_read
                else ""
            )
            kept = (
                f"; {self.gone_kept} trial dirs the lake holds are gone (kept without --prune, "
                "unless the ingest finds them moved under the PATHs)"
                if self.gone_kept
                else ""
            )
            remaps = (
                "; would remember the --sink-root remaps given (or undone)"
                if self.would_remember_remaps
                else ""
            )
            return (
                f"dry run: would read {self.would_read} changed or new dirs{also} and prune "
                f"{self.pruned_trials} trials{self._and_jobs()} whose dirs are gone from "
                f"{self.lake} "
                f"(generation {self.generation}){kept}{remaps}; nothing changed"
            )
        pruned = (
            f", {self.pruned_trials} pruned{self._and_jobs()}"
            if self.pruned_trials or self.pruned_jobs
            else ""
        )
        if self.gone_kept:
            pruned += f", {self.gone_kept} gone from disk but kept: --prune drops them"
        return (
            f"{trials} trials ({self.trials_new} new, {self.trials_replaced} replaced, "
            f"{self.trials_unchanged} unchanged{pruned}) in {self.jobs} jobs, "
            f"{self._taken()}{self._held_elsewhere()}"
            f"{self.unreadable_trials} unreadable trials{self._now_unreadable()}, "
            f"{self.problems} problems"
            f" -> {self.lake} generation {self.generation}"
            f"{'' if self.committed else ' (nothing changed)'} in {self.seconds:.1f}s"
        )

    def _taken(self) -> str:
        """The trials this ingest took over from another batch's dirs, which leaves them out."""
        n, batches = sum(self.trials_taken_from.values()), len(self.trials_taken_from)
        if not n:
            return ""
        if batches == 1:
            return f"{n} of them taken over from another batch's dirs (it no longer counts them), "
        return (
            f"{n} of them taken over from {batches} other batches' dirs (no longer counted there), "
        )

    def _now_unreadable(self) -> str:
        n = self.trials_now_unreadable
        if not n:
            return ""
        return (
            f" ({n} of them read before: {'its' if n == 1 else 'their'} rows left the lake "
            "until the files read again; `problems` says what broke)"
        )

    def _held_elsewhere(self) -> str:
        n = self.trials_held_elsewhere
        if not n:
            return ""
        if n == 1:
            return "1 trial dir whose trial another dir holds, "
        return f"{n} trial dirs whose trials other dirs hold, "

    def _and_jobs(self) -> str:
        return f" and {self.pruned_jobs} job dir(s)" if self.pruned_jobs else ""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def ingest(
    paths: list[Path],
    lake: Path,
    *,
    sink_roots: SinkRoots = (),
    workers: int | None = None,
    progress: Progress | None = None,
    on_wait: Callable[[str], None] | None = None,
    prune: bool = False,
    dry_run: bool = False,
    spark: SparkSession | None = None,
) -> IngestSummary:
    """Ingest run trees into `lake`; see the module docstring. `sink_roots`: (OLD, NEW) prefix
    remaps of the recorded token_sink_dirs (`--sink-root OLD=NEW`). `prune`: also drop what the
    lake holds from under these PATHs whose dirs are gone (trials, unreadable trials, jobs, walk
    problems). `dry_run`: change nothing; the summary says what would be read and pruned.
    `spark`: read the changed dirs as tasks of a job on this SparkSession instead of local reader
    processes (`wmo_lake/spark_ingest.py`); the commit is the same."""
    started = time.perf_counter()
    store = Store(lake)
    with store.read_lock(on_wait) if dry_run else store.lock(on_wait), collecting_less():
        if not dry_run:
            store.clear_staging()  # copies an interrupted ingest left
        update = LakeUpdate(store, store.read_manifest())
        refuse_shadowed_files(store.root, update.base)  # (before anything is committed)
        sink_roots = update.remember_sink_roots(sink_roots)
        # real path -> (candidate, fingerprint): only dirs the catalog knows are fingerprinted
        # here (to find the unchanged ones); a reader fingerprints each dir it reads.
        candidates: dict[str, tuple[Candidate, str | None]] = {}
        walk_problems: list[WalkProblem] = []
        under: dict[str, list[str]] = {}  # PATH -> the real paths of the candidates under it
        with_bad_trials: set[str] = set()  # PATHs holding trial dirs the walk could not read
        for path in paths:
            found = discover(path, sink_roots)
            # (one dir under two PATHs is one problem, labelled as the first PATH labels it,
            # as its trials and job are)
            known = {problem.key for problem in walk_problems}
            walk_problems += [problem for problem in found.problems if problem.key not in known]
            if any(problem.kind == "unreadable_trial" for problem in found.problems):
                with_bad_trials.add(str(path))
            under[str(path)] = [candidate.real for candidate in found.candidates]
            for job in found.jobs:  # job dirs with no trials are batches too (empty ones)
                update.jobs.setdefault(job.real, job)
            for candidate in found.candidates:
                candidates.setdefault(candidate.real, (candidate, None))
        walked = (
            {partition_of(c.job.run, c.job.step) for c, _ in candidates.values()}
            | {partition_of(job.run, job.step) for job in update.jobs.values()}
            | {NO_PARTITION}
        )
        # A segment of these partitions deleted by hand: its rows are gone, yet every dir would
        # count unchanged (none is read), so the ingest would say all is well. Said now.
        damaged = store.damaged_error(update.base, walked)
        if damaged is not None:
            raise damaged
        update.load(walked)
        for real, (candidate, _) in candidates.items():
            if real in update.catalog:
                entry = update.catalog[real]
                now = trial_fingerprint(candidate, read_sink=entry.read_sink, named=entry.named)
                candidates[real] = (candidate, now)
        tasks = [
            TrialTask.of(candidate)
            for candidate, fingerprint in candidates.values()
            if fingerprint is None or not update.unchanged(candidate, fingerprint)
        ]
        from wmo_lake.tidy import gone_entries

        found_walks = {problem.key for problem in walk_problems}
        unlisted = [p.path for p in walk_problems if p.kind == "unreadable_dir"]
        # (before what is gone is worked out: such an entry would be dropped twice)
        update.drop_read_as_job_dirs(candidates, dry_run=dry_run)
        if prune:
            update.load()  # what is gone may be in any partition
            gone = gone_entries(
                update.catalog,
                paths,
                set(candidates),
                update.found_job_keys(candidates),  # (empty job dirs are found too)
                found_walks,
                unlisted,
            )
        else:
            # A walk problem is what this walk says, not a dir's rows: one under these PATHs
            # that it no longer finds (a config.json caught half-written, now whole) goes, or the
            # lake would keep it while the summary counted none.
            walks = {source: e for source, e in update.catalog.items() if e.kind == WALK}
            gone = gone_entries(walks, paths, set(), set(), found_walks)
        update.prune(gone, dry_run=dry_run)
        if dry_run:
            update.summary.dry_run = True
            update.summary.would_remember_remaps = _remaps(update.sink_roots) != _remaps(
                update.base.sink_roots
            )
            if not prune:  # (a moved dir counts here: only its read would drop its old entry)
                update.summary.gone_kept = update.gone_kept(paths, walked, candidates, unlisted)
            # (the jobs of the dirs it would read too, also those a PATH below a job dir
            # reaches; an unchanged trial's job is among update.jobs already)
            shadows = update.shadows_to_read(candidates)
            reading = [c.job for task in tasks if proves_a_trial(c := candidates[task.real][0])]
            reading += [candidates[entry.source][0].job for entry in shadows]
            jobs = update.jobs | {job.real: job for job in reading}
            update.summary.would_read = (
                len(tasks)
                + len(shadows)
                + sum(update.job_would_change(job) for job in jobs.values())
            )
            update.summary.may_also_read = update.shadows_of_changed(tasks, candidates)
            update.summary.seconds = time.perf_counter() - started
            return update.summary
        try:
            # The commit (and pyarrow) only once the readers exist: see readers._worker_context.
            # The job dirs found by the walk, checked once: an unchanged one is counted now.
            changed: dict[str, tuple[Job, str]] = {}
            for job in update.jobs.values():
                fingerprint = update.job_changed(job)
                if fingerprint is not None:
                    changed[job.real] = (job, fingerprint)
            checked = set(update.jobs)
            readers: Readers | SparkReaders
            if spark is not None:
                from wmo_lake.spark_ingest import SparkReaders

                readers = SparkReaders(spark, tasks, store.root, update.segment_prefix())
            else:  # (reader processes write the rows of the changed jobs their trials are in)
                jobs = {real: job for real, (job, _) in changed.items()}
                readers = Readers(tasks, workers, store.root, update.segment_prefix(), jobs)
            # The other changed job dirs get their rows here while reader processes work, not
            # after them: spread evenly over the trial results (which come a chunk at a time),
            # so the readers are never kept waiting for their next chunk.
            own_jobs = [job for real, job in changed.items() if real not in readers.jobs_written]
            early_jobs = iter(own_jobs if readers.write_rows else [])
            every = max(1, len(tasks) // max(1, len(own_jobs)))
            head_start: threading.Thread | None = None
            # Readers answer in the order they finish; each summary (its rows already written)
            # is applied once every dir before it in the walk's order is, so a trial two dirs
            # hold is the first dir's, as a one-process ingest has it, whatever the timing.
            walk_order = {task.real: position for position, task in enumerate(tasks)}
            waiting: dict[int, tuple[TrialTask, Extracted, str]] = {}
            applied = 0
            for done, (task, extracted) in enumerate(readers, 1):
                if head_start is None and readers.write_rows:  # (the readers are forked now)
                    head_start = _prepare_duckdb_file_meanwhile(store)
                fingerprint = extracted.fingerprint or trial_fingerprint(
                    task, read_sink=extracted.read_sink, named=extracted.named
                )
                waiting[walk_order[task.real]] = (task, extracted, fingerprint)
                while applied in waiting:
                    update.add_trial(*waiting.pop(applied), written=readers.write_rows)
                    applied += 1
                crash_point("mid_extract")
                early = next(early_jobs, None) if done % every == 0 else None
                if early is not None:
                    update.read_job(*changed.pop(early[0].real))
                if progress:
                    progress(done, len(tasks))
            for job, extracted in readers.jobs_read:
                update.store_job(job, extracted, changed.pop(job.real)[1], written=True)
            update.add_reader_files(readers.files)
            for job, fingerprint in changed.values():
                update.read_job(job, fingerprint)
            update.restore_lost_trials(candidates)
            if not prune:
                update.summary.gone_kept = update.gone_kept(paths, walked, candidates, unlisted)
            for job in update.jobs.values():  # (jobs of trials the walk found no job dir for)
                if job.real not in checked:
                    update.add_job(job)
            for problem in walk_problems:
                update.add_walk_problem(problem)
            update.finish()
            update.summary.paths_without_trials = [
                path
                for path, reals in under.items()
                if path not in with_bad_trials
                and not any(update.holds_trial(real) for real in reals)
            ]
        except BaseException as error:
            if update.commit is not None:
                update.commit.abort()
            # (stopped once the manifest was in place, before the summary recorded it too)
            committed = store.committed_since(update.base)
            if isinstance(error, KeyboardInterrupt) and committed is not None:
                raise InterruptedAfterCommit(store.root, committed) from None
            # the segments the readers wrote for a commit that never came (the manifest is the
            # base's still): a direct read of a table dir (README, "Lake layout") took their
            # rows as the lake's
            with contextlib.suppress(Exception):
                if store.read_manifest().generation == update.base.generation:
                    store.collect_garbage(update.base, walked, temporaries=False)
            raise
        rebuilt = False
        try:
            from wmo_lake.lake import duckdb_file_current, ensure_duckdb_file

            swept = update.sweep()
            try:
                # (the manifest this ingest committed, or found unchanged: not read again)
                if update.summary.committed or not duckdb_file_current(store, update.manifest):
                    crash_point("before_duckdb_file")
                    if head_start is not None:
                        head_start.join()
                    ensure_duckdb_file(store, update.copies(readers.copies), update.manifest)
                rebuilt = update.summary.committed  # (a stop in the sweep's end says so)
            finally:
                swept()
            if update.summary.committed:  # a stop from here on (the lock's release, the
                # summary's print) says the change is in, not that nothing was changed
                finished(committed_message(store.root, update.manifest.generation))
                crash_point("after_duckdb_file")
        except LakeError as error:
            if update.summary.committed:
                generation = update.manifest.generation
                raise failed_after_commit(store.root, generation, "ingest", error) from error
            raise
        except BaseException as error:
            # (a Ctrl-C inside one of the rebuild's DuckDB queries is DuckDB's own error)
            if stopped_by_user(error) and update.summary.committed:
                generation = update.manifest.generation
                raise InterruptedAfterCommit(store.root, generation, rebuilt=rebuilt) from None
            raise
        store.clear_staging()
    update.summary.seconds = time.perf_counter() - started
    return update.summary


def _problems_held(entry: CatalogEntry) -> int:
    """The problems rows the lake holds for a dir's entry: none for a dir whose trial another
    dir took over (its rows, problems too, went with the trial; the entry keeps the count)."""
    return 0 if entry.kind == TRIAL and entry.unit_key is None else entry.n_problems


def _prepare_duckdb_file_meanwhile(store: Store) -> threading.Thread:
    """A first ingest's lake.duckdb is mostly views to bind, which need no rows: build them
    (`lake.prepare_duckdb_file`) in a thread while the reader processes work, instead of after
    the commit. A failure here costs nothing but the head start."""

    def prepare() -> None:
        from wmo_lake.lake import SKELETON, prepare_duckdb_file

        try:
            prepare_duckdb_file(store)
        except Exception:  # the build after the commit starts from scratch instead
            (store.root / SKELETON).unlink(missing_ok=True)

    thread = threading.Thread(target=prepare, daemon=True, name="wmo-lake-duckdb-head-start")
    thread.start()
    return thread


class LakeUpdate:
    """What one ingest changes: the catalog it updates, the commit it fills (created only when
    something changed), and the summary it reports."""

    def __init__(self, store: Store, base: Manifest) -> None:
        self.store = store
        self.base = base
        self.manifest = base  # the lake's manifest: the base until this ingest commits its own
        # The catalog is read per partition, as needed: the partitions of the dirs found for
        # the unchanged checks; the others' sources and unit keys once a trial is read (its id
        # may be stored from any dir: `owner`), and in full a partition whose entry a read
        # replaces, or every partition when a prune looks for what is gone.
        self.catalog: dict[str, CatalogEntry] = {}
        self.loaded: set[str] = set()
        self._owner: dict[str, str] | None = None
        self._elsewhere: dict[str, str] = {}  # source -> partition, of entries not loaded
        self.summary = IngestSummary(str(store.root), base.generation, committed=False)
        self.sink_roots: list[tuple[str, str]] = list(base.sink_roots)  # to remember
        self.jobs: dict[str, Job] = {}  # the job dirs of every trial seen, for the jobs table
        self.added: set[str] = set()  # trial keys stored by this ingest
        self.lost: set[str] = set()  # trial keys whose rows this ingest removed
        self.now_unreadable: set[str] = set()  # those of them whose dir is unreadable now
        self.restored: set[str] = set()  # duplicated keys re-stored through this process
        self.tasks: dict[str, TrialTask] = {}  # real path -> task, of the dirs read
        self.counted_unchanged: set[str] = set()  # dirs whose trial `unchanged` counted
        self.counted_elsewhere: set[str] = set()  # dirs `trials_held_elsewhere` counts
        self.touched: set[str] = set()  # partitions whose catalog entries change
        self.commit: Commit | None = None
        self.catalog_only = False  # a catalog entry was dropped that no rows belong to
        self.token = os.urandom(4).hex()  # names this ingest's files before its Commit exists

    def load(self, partitions: Iterable[str] | None = None) -> None:
        """Read the catalog of `partitions` (every partition when None) if not read yet; an
        entry this ingest already changed is kept as it is."""
        wanted = set(self.base.catalog if partitions is None else partitions) - self.loaded
        if not wanted:
            return
        self.loaded |= wanted
        read = self.store.read_catalog(self.base, wanted)
        for source in read:
            self._elsewhere.pop(source, None)
        if self._owner is not None:
            for source, entry in read.items():
                if source not in self.catalog and entry.unit_key:
                    self._owner.setdefault(entry.unit_key, source)
        read.update(self.catalog)  # (in one call: a lake of 1,000 steps has 100k entries)
        self.catalog = read

    @property
    def owner(self) -> dict[str, str]:
        """unit key -> the dir whose rows hold it, over the whole catalog. The partitions not
        loaded are read for their entries' source and unit key only (`_elsewhere` says where
        each is, for `_load_entry`): a lake of 1,000 steps has 100k entries, and decoding them
        whole took ~0.1 s of adding a step to it."""
        if self._owner is None:
            owner: dict[str, str] = {}
            unloaded = [p for p in self.base.catalog if p not in self.loaded]
            for partition, entries in self.store.read_catalog_keys(self.base, unloaded):
                self._elsewhere.update(dict.fromkeys([e.source for e in entries], partition))
                owner.update({e.unit_key: e.source for e in entries if e.unit_key})
            # the loaded entries as they are now (this ingest may have changed some)
            owner.update((e.unit_key, e.source) for e in self.catalog.values() if e.unit_key)
            self._owner = owner
        return self._owner

    def _load_entry(self, source: str) -> None:
        """Read in full the partition of `source`'s entry, if that is one `owner` only named."""
        partition = self._elsewhere.get(source)
        if partition is not None:
            self.load([partition])

    def prune(self, entries: list[CatalogEntry], dry_run: bool = False) -> None:
        """Drop these catalog entries' units (their dirs are gone) in this generation."""
        for entry in sorted(entries, key=lambda e: e.source):
            if entry.kind == TRIAL and entry.unit_key:
                self.lost.add(entry.unit_key)  # a dir it was copied to may hold it still
            if entry.kind in (TRIAL, UNREADABLE):
                self.summary.pruned_trials += 1
                self.summary.pruned.append(entry.source)
            elif entry.kind == JOB:  # (an empty batch left in stats, else)
                self.summary.pruned_jobs += 1
                self.summary.pruned.append(entry.source.removeprefix("job:"))
            if not dry_run:
                self._drop(entry)

    def drop_read_as_job_dirs(
        self, found: Mapping[str, tuple[Candidate, str | None]], dry_run: bool = False
    ) -> None:
        """Drop the entries of dirs an earlier ingest read as trial dirs that the walk now finds
        to be job dirs: a job dir that could be listed but not searched (its config.json
        unreadable) was taken for a trial dir. What that read recorded (a problem) is not the
        lake's any more, yet no --prune calls the dir gone, and no summary counted it. A dry
        run only takes the entry out of its view of the catalog, so that what it would prune
        leaves it out, as the real run does."""
        for job_key in self.found_job_keys(found):
            source = job_key.removeprefix("job:")
            entry = self.catalog.get(source)
            if entry is not None and entry.kind in (OTHER, UNREADABLE) and source not in found:
                if dry_run:
                    del self.catalog[source]
                else:
                    self._drop(entry)

    def _drop(self, entry: CatalogEntry) -> None:
        """Remove an entry and its unit's rows in this generation."""
        if entry.unit_key:
            self._commit().remove_units([entry.unit_key], entry.partition)
            if self.owner.get(entry.unit_key) == entry.source:
                del self.owner[entry.unit_key]
        else:  # (its trial is held by another dir) no rows go, but the catalog changes
            self.catalog_only = True
        del self.catalog[entry.source]
        self.touched.add(entry.partition)

    def segment_prefix(self) -> str:
        """The name stem of the new segments (the Commit's own, and the readers')."""
        return segment_prefix(self.base.generation + 1, self.token)

    def _commit(self) -> Commit:
        if self.commit is None:
            from wmo_lake.commit import Commit

            self.commit = Commit(self.store, self.base, self.token, copy_stored=True)
        return self.commit

    def unchanged(self, candidate: Candidate, fingerprint: str) -> bool:
        """Count an unchanged dir from its catalog entry; False when it must be read."""
        entry = self._unchanged_entry(candidate.real, fingerprint)
        if entry is None:
            return False
        if entry.job_key != candidate.job.key:
            return False  # (a trial dir that is a link, whose job dir moved: its rows name it)
        if entry.kind in (TRIAL, UNREADABLE):
            self.jobs[candidate.job.real] = candidate.job
        # (a dir whose trial another dir holds is no trial of the lake's)
        if entry.kind == TRIAL and entry.unit_key is not None:
            self.summary.trials_unchanged += 1
            self.counted_unchanged.add(candidate.real)
        elif is_shadow(entry):
            self._held_elsewhere(candidate.real)
        self.summary.unreadable_trials += entry.kind == UNREADABLE
        self.summary.problems += _problems_held(entry)
        return True

    def add_trial(
        self, task: TrialTask, extracted: Extracted, fingerprint: str, written: bool = False
    ) -> None:
        """Store what one changed dir holds, replacing whatever it (or its trial) held before.
        `written`: a reader process already wrote its rows (`extracted` has no tables)."""
        commit = self._commit()
        owner = self.owner  # who holds each unit, over the whole catalog
        self._load_entry(task.real)  # this dir's old entry, wherever it is
        if task.real in self.counted_elsewhere:  # a shadow read again: counted by what it holds
            self.counted_elsewhere.discard(task.real)
            self.summary.trials_held_elsewhere -= 1
        partition = partition_of(task.run, task.step)
        old = self.catalog.get(task.real)
        if old is not None:
            self.touched.add(old.partition)
        if old is not None and old.unit_key:
            commit.remove_units([old.unit_key], old.partition)
            owner.pop(old.unit_key, None)
            if old.kind == TRIAL:  # lost, unless the dir still holds it (see restore_lost_trials)
                self.lost.add(old.unit_key)
        trial_key = extracted.unit_key if extracted.kind == TRIAL else None
        if extracted.kind == TRIAL and extracted.unit_key in self.added:
            from wmo_lake.extract import duplicate

            first_source = owner[extracted.unit_key]
            if written:
                self._store_once(extracted.unit_key, first_source, partition)
            extracted = duplicate(task, extracted, first_source)
            self._held_elsewhere(task.real)
        key, kind = extracted.unit_key, extracted.kind
        if kind == TRIAL:
            previous_source = owner.get(key)
            if previous_source is not None:  # the same trial, read before from another dir
                self._load_entry(previous_source)
                previous = self.catalog[previous_source]  # its rows may be in another step
                commit.remove_units([key], previous.partition)
                self.touched.add(previous.partition)
                walked = previous_source in self.counted_unchanged
                if walked:  # its rows go: not counted twice
                    self.counted_unchanged.discard(previous_source)
                    self.summary.trials_unchanged -= 1
                    self.summary.problems -= previous.n_problems
                if os.path.lexists(previous_source):
                    previous.unit_key = None  # a copy: kept, so it is not read again as new
                    self._taken_from(previous.batch, task.batch)
                    if walked:
                        self._held_elsewhere(previous_source)
                else:  # moved here: an entry left for it would be "pruned" by every --prune
                    del self.catalog[previous_source]
            elif old is not None and old.kind == TRIAL and old.unit_key == key:
                # the same dir under another label (a run dir reached through a symlink)
                self._taken_from(old.batch, task.batch)
            replaced = previous_source is not None or (old is not None and old.kind == TRIAL)
            self.summary.trials_replaced += replaced
            self.summary.trials_new += not replaced
            self.added.add(key)
        if kind in (TRIAL, UNREADABLE):
            self.jobs[task.job.real] = task.job
        self.summary.unreadable_trials += kind == UNREADABLE
        if kind == UNREADABLE and old is not None and old.kind == TRIAL and old.unit_key:
            self.now_unreadable.add(old.unit_key)  # (counted once the lost are restored)
        self.summary.problems += extracted.n_problems
        owner[key] = task.real
        self.tasks[task.real] = task
        self._append(extracted, partition)
        self.catalog[task.real] = CatalogEntry(
            task.real,
            key,
            kind,
            task.job_key,
            task.batch,
            with_failed_reads(fingerprint, extracted.failed_reads),
            extracted.n_problems,
            partition,
            trial_key,
            EXTRACT_VERSION,
            extracted.read_sink,
            tuple(extracted.named),
        )
        self.touched.add(partition)

    def _taken_from(self, batch: str | None, new_batch: str) -> None:
        """Count a trial taken from `batch`'s dir (that batch no longer counts it)."""
        if batch is not None and batch != new_batch:
            taken = self.summary.trials_taken_from
            taken[batch] = taken.get(batch, 0) + 1

    def _held_elsewhere(self, real: str) -> None:
        """Count a walked trial dir whose trial the lake holds from another dir."""
        if real not in self.counted_elsewhere:
            self.counted_elsewhere.add(real)
            self.summary.trials_held_elsewhere += 1

    def shadows_to_read(
        self, candidates: dict[str, tuple[Candidate, str | None]]
    ) -> list[CatalogEntry]:
        """The dirs found by this ingest (and not read by it) whose trial another dir held
        until this ingest removed that dir's rows (`restore_lost_trials` reads them)."""
        lost = self.lost - self.added
        if not lost:
            return []
        self.load()  # (the shadows may be in any partition)
        return [
            entry
            for entry in shadows_of(self.catalog.values(), lost)
            if entry.source in candidates and entry.source not in self.tasks
        ]

    def shadows_of_changed(
        self, tasks: list[TrialTask], candidates: dict[str, tuple[Candidate, str | None]]
    ) -> int:
        """For a dry run: the dirs found (and not read) whose trial a changed dir holds now.
        Read, that dir may hold another trial, or none: then `restore_lost_trials` reads them."""
        held = {
            entry.unit_key
            for task in tasks
            if (entry := self.catalog.get(task.real)) is not None
            and entry.kind == TRIAL
            and entry.unit_key
        }
        if not held:
            return 0
        self.load()  # (the shadows may be in any partition)
        reading = {task.real for task in tasks}
        return sum(
            entry.source in candidates and entry.source not in reading
            for entry in shadows_of(self.catalog.values(), held)
        )

    def gone_kept(
        self,
        paths: list[Path],
        walked: set[str],
        found: Mapping[str, tuple[Candidate, str | None]],
        unlisted: list[str],
    ) -> int:
        """The trial dirs (and unreadable ones) under `paths`, of the partitions `walked`, whose
        trials the lake keeps though the walk no longer finds them (harbor's job resume deletes
        a trial dir it runs again; an emptied dir): --prune drops them. A dir that cannot be
        looked up (under a job dir that cannot be searched), or is under one the walk could not
        list (`unlisted`), is not known to be gone (`tidy.gone_entries`)."""
        from wmo_lake.tidy import gone_entries

        held = {
            source: entry
            for source, entry in self.catalog.items()
            if ((entry.kind == TRIAL and entry.unit_key) or entry.kind == UNREADABLE)
            and entry.partition in walked
        }
        jobs = self.found_job_keys(found)
        return len(gone_entries(held, paths, set(found), jobs, set(), unlisted))

    def found_job_keys(self, found: Mapping[str, tuple[Candidate, str | None]]) -> set[str]:
        """The catalog keys of the job dirs the walk found: its own, and those of its trials."""
        return {job.key for job in self.jobs.values()} | {c.job.key for c, _ in found.values()}

    def restore_lost_trials(self, candidates: dict[str, tuple[Candidate, str | None]]) -> None:
        """The trials whose rows this ingest removed (their dir is pruned, or holds another
        trial now) that a dir it once took them over from still holds: such a dir is unchanged,
        so it would never be read again, and the lake would lose a trial that is on disk. Those
        under this ingest's PATHs are read now, in the walk's order (so the lake is what a
        fresh ingest gives); the others leave the catalog, so the next ingest of them reads
        them as new."""
        shadows = {entry.source: entry for entry in self.shadows_to_read(candidates)}
        if shadows:
            from wmo_lake.extract import read_task

            for real, (candidate, _) in candidates.items():
                entry = shadows.get(real)
                if entry is None:
                    continue
                self.summary.problems -= _problems_held(entry)  # (`unchanged` counted them)
                task = TrialTask.of(candidate)
                extracted = read_task(task)
                fingerprint = extracted.fingerprint or trial_fingerprint(
                    task, read_sink=extracted.read_sink, named=extracted.named
                )
                self.add_trial(task, extracted, fingerprint)
        lost = self.lost - self.added
        # (a trial a copy still holds is in the lake: its rows did not leave)
        self.summary.trials_now_unreadable = len(self.now_unreadable - self.added)
        for entry in shadows_of(list(self.catalog.values()), lost):
            if entry.source in self.tasks:
                continue
            if entry.unit_key:  # a duplicate's problem, about a trial no dir holds now
                self._commit().remove_units([entry.unit_key], entry.partition)
            else:
                self.catalog_only = True
            del self.catalog[entry.source]
            self.touched.add(entry.partition)

    def holds_trial(self, real: str) -> bool:
        """Whether the dir at `real` is a trial dir (readable or not), after this ingest."""
        entry = self.catalog.get(real)
        return entry is not None and entry.kind in (TRIAL, UNREADABLE, DUPLICATE)

    def _append(self, extracted: Extracted, partition: str) -> None:
        for table, rows in extracted.tables.items():
            self._commit().append(table, rows, partition)

    def _store_once(self, key: str, first_source: str, partition: str) -> None:
        """A trial two dirs hold, both written by reader processes: drop both from their
        segments and store the first dir's rows again from here."""
        if key in self.restored:
            return
        self.restored.add(key)
        from wmo_lake.extract import extract_trial

        self._commit().exclude_from_added([key])
        first = self.tasks[first_source]
        self._append(extract_trial(first), partition_of(first.run, first.step))

    def add_reader_files(self, files: list[PartitionedFiles]) -> None:
        """The segments reader processes wrote (table -> partition -> paths relative to the
        lake, per reader)."""
        for reader_files in files:
            self._commit().add_files(reader_files)

    def add_job(self, job: Job) -> None:
        """The jobs row of a job dir with trials, when its files changed."""
        fingerprint = self.job_changed(job)
        if fingerprint is not None:
            self.read_job(job, fingerprint)

    def job_changed(self, job: Job) -> str | None:
        """The job dir's fingerprint when its row must be (re)written; None when its files are
        as the catalog has them (then its problems are counted)."""
        fingerprint = job_fingerprint(job)
        entry = self._unchanged_entry(job.key, fingerprint)
        if entry is not None:
            self.summary.problems += entry.n_problems
            return None
        return fingerprint

    def job_would_change(self, job: Job) -> bool:
        """`job_changed` for a dry run: whether the job dir would be read, nothing counted."""
        return self._unchanged_entry(job.key, job_fingerprint(job)) is None

    def _unchanged_entry(self, source: str, fingerprint: str) -> CatalogEntry | None:
        """The catalog's entry for `source` when its files are as it has them, else None."""
        entry = self.catalog.get(source)
        return entry if entry is not None and matches(entry.fingerprint, fingerprint) else None

    def read_job(self, job: Job, fingerprint: str) -> None:
        """A changed job dir's row (`job_changed` gave its fingerprint), read here."""
        from wmo_lake.extract import extract_job

        self.store_job(job, extract_job(job), fingerprint)

    def store_job(
        self, job: Job, extracted: Extracted, fingerprint: str, written: bool = False
    ) -> None:
        """A changed job dir's row, replacing the one it had. `written`: a reader process
        already wrote it (`extracted` has no tables)."""
        commit = self._commit()
        partition = partition_of(job.run, job.step)
        entry = self.catalog.get(job.key)
        if entry is not None:
            commit.remove_units([job.key], entry.partition)
            self.touched.add(entry.partition)
        if not written:
            self._append(extracted, partition)
        self.summary.problems += extracted.n_problems
        self.catalog[job.key] = CatalogEntry(
            job.key,
            job.key,
            JOB,
            job.key,
            job.batch,
            with_failed_reads(fingerprint, extracted.failed_reads),
            extracted.n_problems,
            partition,
            extraction=EXTRACT_VERSION,
        )
        self.touched.add(partition)

    def add_walk_problem(self, problem: WalkProblem) -> None:
        source = problem.key
        fingerprint = walk_fingerprint(problem)
        self.summary.problems += 1
        self.summary.unreadable_trials += problem.kind == "unreadable_trial"
        entry = self.catalog.get(source)
        if entry is not None and entry.fingerprint == fingerprint:
            return
        from wmo_lake.extract import extract_walk_problem

        extracted = extract_walk_problem(problem)
        if entry is not None:
            self._commit().remove_units([source], entry.partition)
            self.touched.add(entry.partition)
        # (an unreadable trial of a job dir is in its job's partition and batch: `forget` of the
        # batch removes it, and its row has the job's run and step)
        partition = (
            NO_PARTITION if problem.batch is None else partition_of(problem.run, problem.step)
        )
        self._append(extracted, partition)
        self.catalog[source] = CatalogEntry(
            source, source, WALK, None, problem.batch, fingerprint, 1, partition
        )
        self.touched.add(partition)

    def sweep(self) -> Callable[[], None]:
        """Start the committed generation's sweep (`Commit.sweep`) in a thread, if there is one
        to do; returns what waits for it to end (raising what it raised), then removes the
        lake's temporary files (not meanwhile: lake.duckdb's build writes some)."""
        commit = self.commit
        if commit is None or not self.summary.committed:
            return lambda: None
        from wmo_lake.background import Background

        sweep = Background(lambda: commit.sweep(temporaries=False), "wmo-lake-sweep")

        def wait() -> None:
            crash_point("sweep_wait")
            sweep.wait()
            self.store.remove_temporaries()

        return wait

    def copies(self, readers: Iterable[StoredCopies]) -> StoredCopies | None:
        """The copies of the stored tables' rows this ingest's writers made (its own and the
        readers'), for the lake.duckdb build; None when it committed nothing."""
        if self.commit is None or self.commit.writer.copies is None:
            return None
        from wmo_lake.stored_copies import StoredCopies

        copies = StoredCopies()
        for made in [self.commit.writer.copies.copies, *readers]:
            copies.merge(made)
        return copies

    def _extractions(self) -> dict[str, str]:
        """The touched partitions' extraction rules (Manifest.extractions): the extract version
        every dir with rows of the partition was read under, MIXED when they differ; left out
        when they were read before versions were recorded (the manifest then says: older)."""
        versions: dict[str, set[str | None]] = {partition: set() for partition in self.touched}
        for entry in self.catalog.values():
            # (walk problems follow no extraction rules; a shadow has no rows)
            if entry.partition in versions and entry.kind != WALK and not is_shadow(entry):
                versions[entry.partition].add(entry.extraction)
        extractions: dict[str, str] = {}
        for partition, found in versions.items():
            version = MIXED if len(found) > 1 else next(iter(found), EXTRACT_VERSION)
            if version is not None:
                extractions[partition] = version
        return extractions

    def remember_sink_roots(self, given: SinkRoots) -> SinkRoots:
        """The remaps this ingest applies: those `given`, then those earlier ingests were
        given (Manifest.sink_roots) for other OLD prefixes, so a re-read of a moved tree's
        trials without the option finds their sinks where they were found before. Committed
        with this ingest's generation, but for OLD=OLD, which undoes a remap; the summary
        names the remembered ones applied."""
        olds = {Path(old) for old, _ in given}  # (as paths: `/a/` is `/a`, as the remap reads)
        remembered = [(old, new) for old, new in self.base.sink_roots if Path(old) not in olds]
        self.summary.sink_roots_remembered = [f"{old}={new}" for old, new in remembered]
        applied = (*given, *remembered)
        self.sink_roots = [(old, new) for old, new in applied if old != new]  # (OLD=OLD: undone)
        return applied

    def finish(self) -> None:
        """Commit when anything changed (a first ingest always does, so even an empty tree
        leaves a queryable lake); otherwise only tidy what an interrupted ingest left."""
        self.summary.jobs = len(self.jobs)
        changed = self.catalog_only or (self.commit is not None and self.commit.changed)
        # (a remap given, or undone, is remembered even when it changed no trial's reading)
        changed = changed or _remaps(self.sink_roots) != _remaps(self.base.sink_roots)
        if changed or not self.store.exists():
            # the sweep of files no generation names is left to `sweep()`: while lake.duckdb
            # is built (a walk of every touched partition: ~0.1 s for a 128-step first ingest)
            self.manifest = self._commit().finish(
                self.catalog.values(),
                self.touched,
                sweep=False,
                extractions=self._extractions(),
                sink_roots=self.sink_roots,
            )
            crash_point("after_commit")
            self.summary.generation = self.manifest.generation
            self.summary.committed = True
        else:
            if self.commit is not None:
                self.commit.abort()
            if self.store.interrupted:  # only an interrupted ingest leaves files to remove
                self.store.collect_garbage(self.base)


def _remaps(roots: Iterable[tuple[str, str]]) -> set[tuple[Path, str]]:
    """Remaps as the remapping reads them: in no order (the longest OLD wins), OLD as a path."""
    return {(Path(old), new) for old, new in roots}


__all__ = ["IngestSummary", "ingest"]
