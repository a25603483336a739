"""Steps the lake holds only a part of: a harbor job not finished, and a finished one the lake
holds fewer trials of than it plans.

Upstream's scorer gives no figures for either (`HarborScorer._project`: 'harbor job did not
finish'; 'harbor returned N trials; expected M'; scoring a candidate again resumes its job, which
runs the missing trials). The lake reads what is there and says so: `stats` in its notes,
`compare`, `report` and the exports as warnings (`UnfinishedJobWarning`, `ShortJobWarning`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from wmo_lake.checks import (
    LakeWarning,
    PooledBatchWarning,
    ShortJobWarning,
    UnfinishedJobWarning,
    warn_from_caller,
)
from wmo_lake.selection import scope_sql

if TYPE_CHECKING:
    import duckdb

# The job dirs of the batches in scope, each with: whether harbor has finished it (its
# result.json, written when the job starts, with no finished_at yet, or unreadable: harbor
# rewrites it in place as trials end, and a kill can cut it off); the harbor job it is (its
# JobResult id: a copy or a move of the dir keeps it, separate jobs never share it); the trials
# it plans and the lake holds of it; and its batch's unreadable trial dirs (a problem row names
# its dir as walked, so it is the batch's, not a job's). job_key holds the resolved path
# (`job:` + it), which a command can name from anywhere.
JOB_ROWS_QUERY = f"""
WITH scoped AS (
    SELECT *
    FROM jobs
    WHERE {scope_sql()}
      AND ($batches IS NULL OR list_contains(CAST($batches AS VARCHAR[]), batch))
),
held AS (
    SELECT job_key, count(*) AS trials
    FROM trials
    WHERE job_key IN (SELECT job_key FROM scoped)
    GROUP BY job_key
),
unreadable AS (
    SELECT batch, count(*) AS unreadable_dirs
    FROM problems
    WHERE kind = 'unreadable_trial' AND batch IN (SELECT batch FROM scoped)
    GROUP BY batch
)
SELECT
    s.batch,
    substr(s.job_key, 5) AS job_dir,
    coalesce(s.job_id, s.job_key) AS job,
    (s.result_status = 'ok' AND s.finished_at IS NULL) OR s.result_status = 'unreadable'
        AS unfinished,
    s.result_status = 'unreadable' AS unreadable,
    s.n_total_trials,
    coalesce(h.trials, 0) AS trials,
    coalesce(u.unreadable_dirs, 0) AS batch_unreadable
FROM scoped AS s
LEFT JOIN held AS h ON s.job_key = h.job_key
LEFT JOIN unreadable AS u ON s.batch = u.batch
ORDER BY s.batch, job_dir
"""


class JobRow(NamedTuple):
    """One job dir of JOB_ROWS_QUERY."""

    job_dir: str  # resolved
    job: str  # the harbor job it is (its id; its job_key when it records none)
    unfinished: bool
    unreadable: bool  # its result.json could not be read
    planned: int | None
    trials: int  # the lake holds of this dir
    batch_unreadable: int  # its batch's unreadable trial dirs


@dataclass(frozen=True)
class UnfinishedBatch:
    """A batch with a job harbor has not finished (`incomplete_jobs`)."""

    batch: str
    job_dirs: list[str]  # the unfinished ones, resolved
    unreadable: bool  # one's result.json could not be read (cut off by a kill mid-write)
    open: bool  # one's result.json records no finished_at
    planned: int | None  # the trials the batch's jobs plan; None when one does not say


@dataclass(frozen=True)
class ShortJob:
    """A finished harbor job the lake holds fewer trials of than it plans (`incomplete_jobs`)."""

    batch: str
    job_dirs: list[str]  # its dirs (a copy keeps the job's id), resolved, those on disk first
    planned: int
    trials: int  # the lake holds of it
    unreadable: int  # its batch's unreadable trial dirs (counted as its trials)
    removed: int | None  # trial dirs gone from its job dir; None: no dir of it on this machine
    not_counted: int  # trial dirs in its job dir the batch does not count
    # trials the lake holds whose dirs are gone from its job dir (kept without --prune): a job
    # holding more trials than it plans after `harbor job resume` ran a deleted one again
    gone: int = 0


def job_rows(
    con: duckdb.DuckDBPyConnection,
    *,
    batch_glob: str | None = None,
    run: str | None = None,
    batches: Sequence[str] | None = None,
) -> dict[str, list[JobRow]]:
    """The job dirs of the batches in scope, by batch."""
    params = {"batch_glob": batch_glob, "run": run, "batches": batches}
    by_batch: dict[str, list[JobRow]] = {}
    for batch, *job in con.execute(JOB_ROWS_QUERY, params).fetchall():
        by_batch.setdefault(batch, []).append(JobRow(*job))
    return by_batch


def counted_jobs(jobs: list[JobRow]) -> list[JobRow]:
    """A batch's job dirs less the rows of dirs that moved: a job dir gone from disk beside
    another job dir of its batch still there (`ingest --prune` drops it; the pooled-batch note
    names it) is neither a job nor its trials. On a machine where none of a batch's dirs exist
    (a lake copied away), every row counts."""
    on_disk = [os.path.isdir(job.job_dir) for job in jobs]
    return [job for job, here in zip(jobs, on_disk, strict=True) if here or not any(on_disk)]


def by_job(rows: list[JobRow]) -> list[list[JobRow]]:
    """A batch's job dirs grouped by the harbor job they hold: one id and one plan (a copy of
    the dir, or a dir that moved, holds the same job; one with no id is a job of its own)."""
    jobs: dict[tuple[str, int | None], list[JobRow]] = {}
    for row in rows:
        jobs.setdefault((row.job, row.planned), []).append(row)
    return list(jobs.values())


@dataclass(frozen=True)
class IncompleteJobs:
    """The batches that are a part of their step (`incomplete_jobs`)."""

    unfinished: list[UnfinishedBatch]
    short: list[ShortJob]  # fewer trials than planned, or more with trial dirs gone (`gone`)

    def warnings(self) -> list[tuple[str, type[LakeWarning]]]:
        return job_warnings(
            [found.batch for found in self.unfinished],
            [found.batch for found in self.short if not found.gone],
            [found.batch for found in self.short if found.gone],
        )


def incomplete_jobs(
    by_batch: dict[str, list[JobRow]], shown: Collection[str] | None = None
) -> IncompleteJobs:
    """Of the batches `shown` (all, when None): those with a harbor job not finished (still
    running, or stopped), and the finished jobs the lake holds fewer trials of than they plan,
    or more with trial dirs gone from disk. A batch with a job not finished has that said
    alone; an empty batch has a note of its own. A disk look happens only for a batch with a
    job not finished, or holding another count of trials than it plans."""
    unfinished: list[UnfinishedBatch] = []
    short: list[ShortJob] = []
    for batch, rows in by_batch.items():
        if shown is not None and batch not in shown:
            continue
        if any(row.unfinished for row in rows):
            found = _unfinished(batch, rows)
            if found is not None:
                unfinished.append(found)
                continue
        short += _short_jobs(batch, rows)
    return IncompleteJobs(unfinished, short)


def _unfinished(batch: str, rows: list[JobRow]) -> UnfinishedBatch | None:
    """The batch's jobs not finished: a job is finished when any dir of it records so (a copy
    taken mid-run, or the row of a dir that moved while running, keeps no finished_at)."""
    jobs = by_job(counted_jobs(rows))
    open_jobs = [dirs for dirs in jobs if all(row.unfinished for row in dirs)]
    if not open_jobs:
        return None
    plans = [dirs[0].planned for dirs in jobs]  # (one plan per job: by_job)
    dirs = [row for job in open_jobs for row in job]
    return UnfinishedBatch(
        batch,
        job_dirs=[row.job_dir for row in dirs],
        unreadable=any(row.unreadable for row in dirs),
        open=any(not row.unreadable for row in dirs),
        planned=None if None in plans else sum(p for p in plans if p is not None),
    )


def _short_jobs(batch: str, rows: list[JobRow]) -> list[ShortJob]:
    """The batch's finished jobs the lake holds fewer trials of than they plan, each job once
    however many dirs hold it. The batch's unreadable trial dirs count as each job's trials:
    never a false alarm, at the price of missing a job short by as many as another job of its
    batch has unreadable dirs."""
    unreadable = rows[0].batch_unreadable
    if not unreadable and not any(row.trials for row in rows):
        return []
    found = []
    for dirs in by_job(rows):
        if all(row.unfinished for row in dirs):
            continue  # (a moved dir's stale row: `_unfinished` found no job open)
        planned, trials = dirs[0].planned, sum(row.trials for row in dirs)
        if planned is not None and trials + unreadable < planned:  # (no disk look otherwise)
            found.append(_short_job(batch, dirs, trials, unreadable, _present(dirs)))
        elif planned is not None and trials > planned:
            present = _present(dirs)
            gone = _gone_trials(dirs, present)
            if gone:
                found.append(_short_job(batch, dirs, trials, unreadable, present, gone))
    return found


def _present(dirs: list[JobRow]) -> dict[str, int | None]:
    """Each job dir's trial dirs on disk (`_trial_dirs`), listed once."""
    return {row.job_dir: _trial_dirs(row.job_dir) for row in dirs}


def _gone_trials(dirs: list[JobRow], present: dict[str, int | None]) -> int:
    """Of a job holding more trials than it plans, the trials the lake holds whose dirs are gone
    from their job dir: harbor's `job resume` deletes a trial dir it runs again (upstream's
    scorer prunes the trials it cannot score first), and an ingest without --prune keeps the
    deleted trial's rows, where upstream scores the job dir as it is. Counted per job dir on
    disk (held trials beyond its trial dirs): never a false alarm, as a hand-made tree holding
    more trial dirs than its copied result.json plans has none gone."""
    return sum(
        max(0, row.trials - count) for row in dirs if (count := present[row.job_dir]) is not None
    )


def _short_job(
    batch: str,
    dirs: list[JobRow],
    trials: int,
    unreadable: int,
    present: dict[str, int | None],
    gone: int = 0,
) -> ShortJob:
    """What is missing of a job short of its trials, told from its job dirs on disk (`present`):
    trial dirs gone from them were removed after the run; those still there but not counted were
    not ingested, or are held by another dir. A job holding more than it plans has `gone` trials
    instead."""
    planned = dirs[0].planned or 0
    on_disk = [job_dir for job_dir, count in present.items() if count is not None]
    removed = not_counted = 0
    if on_disk and not gone:
        most = max(present[job_dir] or 0 for job_dir in on_disk)
        removed = max(0, planned - most)
        not_counted = max(0, planned - trials - unreadable - removed)
    return ShortJob(
        batch,
        job_dirs=on_disk + [job_dir for job_dir in present if job_dir not in on_disk],
        planned=planned,
        trials=trials,
        unreadable=unreadable,
        removed=removed if on_disk else None,
        not_counted=not_counted,
        gone=gone,
    )


def _trial_dirs(job_dir: str) -> int | None:
    """The trial dirs in a job dir (a dir holding harbor's result.json or config.json, or one
    this user may not search: not known to be gone), or None when it is not on this machine or
    cannot be listed."""
    try:
        with os.scandir(job_dir) as entries:
            return sum(1 for entry in entries if entry.is_dir() and _may_be_a_trial(entry.path))
    except OSError:
        return None


def _may_be_a_trial(path: str) -> bool:
    for name in ("result.json", "config.json"):
        try:
            if stat.S_ISREG(os.stat(os.path.join(path, name)).st_mode):
                return True
        except PermissionError:
            return True  # (a dir that cannot be searched: its trial is there as far as we know)
        except OSError:
            continue
    return False


def incomplete_job_warnings(
    con: duckdb.DuckDBPyConnection,
    *,
    batch_glob: str | None = None,
    run: str | None = None,
    batches: Sequence[str] | None = None,
) -> list[tuple[str, type[LakeWarning]]]:
    """What a command says of the batches in scope that are a part of their step, each with its
    warning's category."""
    rows = job_rows(con, batch_glob=batch_glob, run=run, batches=batches)
    return incomplete_jobs(rows).warnings()


def job_warnings(
    unfinished: Sequence[str], short: Sequence[str], gone: Sequence[str] = ()
) -> list[tuple[str, type[LakeWarning]]]:
    """The warnings for these batches: with a job not finished, with a finished job short of
    its trials, with a finished job's trials whose dirs are gone (held beyond its plan)."""
    said: list[tuple[str, type[LakeWarning]]] = []
    if unfinished:
        said.append((_unfinished_text(unfinished), UnfinishedJobWarning))
    short = list(dict.fromkeys(short))
    if short:
        said.append((_short_text(short), ShortJobWarning))
    gone = list(dict.fromkeys(gone))
    if gone:
        said.append((_gone_text(gone), ShortJobWarning))
    return said


def warn_on_incomplete_jobs(
    con: duckdb.DuckDBPyConnection,
    *,
    batch_glob: str | None = None,
    run: str | None = None,
    batches: Sequence[str] | None = None,
    rewrite: Callable[[str], str] | None = None,
) -> None:
    """`incomplete_job_warnings` as Python warnings, pointing at the first caller outside this
    package; `rewrite` turns a message into its caller's terms."""
    found = incomplete_job_warnings(con, batch_glob=batch_glob, run=run, batches=batches)
    for message, category in found:
        warn_from_caller(message, category, rewrite)


def pooled_batches(by_batch: dict[str, list[JobRow]]) -> list[str]:
    """The batches labelled from more than one job dir (the pooled-batch note of `stats`)."""
    return [batch for batch, rows in by_batch.items() if len({row.job_dir for row in rows}) > 1]


def pooled_warning(pooled: Sequence[str]) -> str:
    return (
        f"{len(pooled)} batch(es) in scope pool the trials of several job dirs that carry one "
        f"batch label: {_named(pooled)}; two run trees with the same run name, dirs of one "
        "name in two trees given as PATHs, or a job dir that moved, so their figures are of "
        "those dirs together. The notes of the wmo-lake stats command name the job dirs and what "
        "to do"
    )


def warn_on_pooled_batches(con: duckdb.DuckDBPyConnection, batches: Sequence[str]) -> None:
    """`PooledBatchWarning` for the batches of `batches` labelled from several job dirs."""
    pooled = pooled_batches(job_rows(con, batches=batches))
    if pooled:
        warn_from_caller(pooled_warning(pooled), PooledBatchWarning)


def _unfinished_text(unfinished: Sequence[str]) -> str:
    return (
        f"{len(unfinished)} batch(es) in scope come from a harbor job that has not finished "
        f"(its result.json records no finished_at, or was cut off): {_named(unfinished)}; what "
        "the lake holds of them is the trials written so far, a part of the step (upstream's "
        "scorer refuses such a job). Finish or resume the job (`harbor job resume -p JOB_DIR`) "
        "and ingest it again; the notes of the wmo-lake stats command name each job dir and "
        "the trials it plans"
    )


def _short_text(short: Sequence[str]) -> str:
    return (
        f"{len(short)} batch(es) in scope come from a finished harbor job the lake holds fewer "
        f"trials of than it plans: {_named(short)}; their figures are of a part of the step "
        "(upstream's scorer would not score it as it is). The notes of the wmo-lake stats "
        "command say, for each job dir, whether trial dirs were removed after the run (resume "
        "the job) or are on disk but not counted (not ingested, or held by another dir)"
    )


def _gone_text(gone: Sequence[str]) -> str:
    return (
        f"{len(gone)} batch(es) in scope hold more trials of a finished harbor job than it "
        f"plans, trials whose dirs are gone from its job dir: {_named(gone)}; harbor's job "
        "resume deletes a trial dir it runs again, and an ingest without --prune keeps the "
        "deleted trial, counted in these figures where upstream's scorer scores the job dir as "
        "it is. `wmo-lake ingest --prune JOB_DIR` drops them; the notes of the wmo-lake stats "
        "command name each job dir"
    )


def _named(batches: Sequence[str]) -> str:
    """The first three batches, and how many more."""
    named = ", ".join(batches[:3])
    return named + (f" and {len(batches) - 3} more" if len(batches) > 3 else "")
