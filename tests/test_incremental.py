"""Incremental, idempotent, atomic: unchanged trees parse nothing, changed trials replace their
rows, nothing is counted twice, a SIGKILL at any moment leaves the previous generation readable,
and two ingests into one lake never corrupt it."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harbor_shapes import write_job, write_trial
from unprivileged import needs_permissions, run_cli

from wmo_lake import extract
from wmo_lake.discover import TrialTask
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.readers import Readers
from wmo_lake.store import STAGING, TRIAL, Store


def _tree(root: Path, n_trials: int = 3, job: str = "job", prefix: str = "t") -> Path:
    job_dir = write_job(root / "runs" / "exp" / "harbor" / "step-0001" / job)
    for i in range(n_trials):
        write_trial(job_dir, f"{prefix}__{i}", trial_id=f"{job}-{prefix}-{i}")
    return root / "runs"


def _counts(lake: Path) -> dict[str, int]:
    con = connect(lake)
    return {
        table: con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]
        for table in ("trials", "spans", "stop_reasons", "tests", "jobs", "problems")
    }


def test_unchanged_reingest_parses_nothing_and_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    runs = _tree(tmp_path)
    first = ingest([runs], tmp_path / "lake", workers=1)
    manifest_before = (tmp_path / "lake" / "manifest.json").read_bytes()
    files_before = sorted(p for p in (tmp_path / "lake").rglob("*") if p.is_file())

    def no_parsing(task):
        raise AssertionError(f"parsed {task.path} although nothing changed")

    monkeypatch.setattr("wmo_lake.extract.extract_trial", no_parsing)
    again = ingest([runs], tmp_path / "lake", workers=1)
    assert (again.trials_unchanged, again.trials_new, again.committed) == (3, 0, False)
    assert again.generation == first.generation
    assert (tmp_path / "lake" / "manifest.json").read_bytes() == manifest_before
    assert sorted(p for p in (tmp_path / "lake").rglob("*") if p.is_file()) == files_before


# What an unchanged re-ingest never needs: it is mostly process start, so each import counts.
NOT_IMPORTED_BY_A_NO_OP = ("pyarrow", "duckdb", "shutil", "queue", "traceback")


def test_unchanged_reingest_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    runs = _tree(tmp_path)
    ingest([runs], tmp_path / "lake", workers=1)
    script = (
        "import sys; from pathlib import Path; from wmo_lake.ingest import ingest; "
        f"summary = ingest([Path({str(runs)!r})], Path({str(tmp_path / 'lake')!r})); "
        "print(summary.committed, summary.trials_unchanged, "
        f"sorted(m for m in {NOT_IMPORTED_BY_A_NO_OP!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(maxsplit=2) == ["False", "3", "[]\n"]


def test_changed_trial_replaces_its_rows(tmp_path: Path) -> None:
    runs = _tree(tmp_path)
    ingest([runs], tmp_path / "lake", workers=1)
    before = _counts(tmp_path / "lake")
    job_dir = runs / "exp" / "harbor" / "step-0001" / "job"
    write_trial(job_dir, "t__1", trial_id="job-t-1", reward=0.0, turns=[([1, 2], [3], [-0.5])])
    summary = ingest([runs], tmp_path / "lake", workers=1)
    assert (summary.trials_replaced, summary.trials_unchanged, summary.trials_new) == (1, 2, 0)
    after = _counts(tmp_path / "lake")
    assert after["trials"] == before["trials"] and after["spans"] == before["spans"] - 3 + 1
    con = connect(tmp_path / "lake")
    assert con.execute(
        "SELECT rewards['reward'], n_spans FROM trials WHERE trial_key = 'job-t-1'"
    ).fetchall() == [("0.0", 1)]


def test_a_trial_whose_file_broke_since_is_said_as_read_before(tmp_path: Path) -> None:
    """A trial the lake held whose result.json is cut short since leaves the lake, as a fresh
    ingest would have it; the line said only '1 unreadable trials', as for a dir never read."""
    runs = _tree(tmp_path)
    ingest([runs], tmp_path / "lake", workers=1)
    result = runs / "exp" / "harbor" / "step-0001" / "job" / "t__1" / "result.json"
    result.write_bytes(result.read_bytes()[:100])
    summary = ingest([runs], tmp_path / "lake", workers=1)
    assert (summary.unreadable_trials, summary.trials_now_unreadable) == (1, 1)
    assert "1 unreadable trials (1 of them read before: its rows left the lake" in summary.line()
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT count(*) FROM trials WHERE trial_name = 't__1'").fetchall() == [(0,)]
    again = ingest([runs], tmp_path / "lake", workers=1)  # (unchanged: nothing left the lake now)
    assert (again.unreadable_trials, again.trials_now_unreadable) == (1, 0)
    assert "read before" not in again.line()


def test_a_trial_a_copy_still_holds_is_not_said_as_lost(tmp_path: Path) -> None:
    """The original's file breaks while a copy of its job dir still holds the trial: the copy
    takes it back, so its rows stay in the lake, and the line must not say they left."""
    runs = _tree(tmp_path, n_trials=2)
    job = runs / "exp" / "harbor" / "step-0001" / "job"
    shutil.copytree(job, job.parent / "jobcopy")
    ingest([runs], tmp_path / "lake", workers=1)
    (job / "t__0" / "result.json").write_text('{"id": "job-t-0", ')
    summary = ingest([runs], tmp_path / "lake", workers=1)
    assert (summary.unreadable_trials, summary.trials_now_unreadable) == (1, 0)
    assert "read before" not in summary.line()
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT count(*) FROM trials WHERE trial_key = 'job-t-0'").fetchall() == [
        (1,)
    ]


def _views_of(lake: Path) -> dict[str, list[tuple]]:
    con = connect(lake)
    return {
        "trials": con.execute("SELECT trial_key, job_key FROM trials ORDER BY 1").fetchall(),
        "caps": con.execute("SELECT * FROM trial_caps ORDER BY trial_key").fetchall(),
        "stats": con.execute("SELECT * FROM rollout_stats ORDER BY batch").fetchall(),
        "problems": con.execute("SELECT unit_key, kind FROM problems ORDER BY 1").fetchall(),
    }


def test_a_job_dir_moved_and_linked_back_reads_as_a_fresh_ingest_does(tmp_path: Path) -> None:
    """A job dir moved to another disk and linked back (same labels, same files): a trial dir of
    it that is itself a link kept its real path, so it counted unchanged with its old job_key,
    which no jobs row has (its caps then the defaults: a truncated span not counted); and a
    walk problem met in the old job dir, whose path is a link now, was never dropped."""
    runs = tmp_path / "runs"
    job = write_job(runs / "exp" / "harbor" / "step-0001" / "job", max_turns=3, max_tokens=4)
    write_trial(job, "t__1", trial_id="t-1", agent=None, turns=[([1, 2], [3] * 5, [-0.1] * 5)])
    write_trial(job, "t__2", trial_id="t-2", turns=[([1, 2], [3], [-0.1])])
    (tmp_path / "store").mkdir()
    os.rename(job / "t__1", tmp_path / "store" / "t__1")
    os.symlink(tmp_path / "store" / "t__1", job / "t__1")
    os.symlink(".", job / "loop")  # (a walk problem of the job dir)
    ingest([runs], tmp_path / "lake", workers=1)
    os.rename(job, tmp_path / "moved-job")
    os.symlink(tmp_path / "moved-job", job)
    ingest([runs], tmp_path / "lake", workers=1, prune=True)
    ingest([runs], tmp_path / "fresh", workers=1)
    incremental, fresh = _views_of(tmp_path / "lake"), _views_of(tmp_path / "fresh")
    assert fresh["trials"] == [
        ("t-1", f"job:{tmp_path / 'moved-job'}"),
        ("t-2", f"job:{tmp_path / 'moved-job'}"),
    ]
    assert incremental == fresh


def test_same_tree_through_another_path_neither_relabels_nor_doubles(tmp_path: Path) -> None:
    runs = _tree(tmp_path)
    ingest([runs], tmp_path / "lake", workers=1)
    before = _counts(tmp_path / "lake")
    os.symlink(runs, tmp_path / "alias")
    summary = ingest([tmp_path / "alias" / "exp" / "harbor"], tmp_path / "lake", workers=1)
    # A job under <run>/harbor/step-NNNN/ keeps its run-anchored batch whatever PATH reached it,
    # so the same trials through another PATH are neither doubled nor even re-read.
    assert (summary.trials_new, summary.trials_replaced, summary.trials_unchanged) == (0, 0, 3)
    assert _counts(tmp_path / "lake") == before
    batches = connect(tmp_path / "lake").execute("SELECT DISTINCT batch FROM trials").fetchall()
    assert batches == [("exp/harbor/step-0001/job",)]


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "reader-processes"])
def test_a_copied_trial_is_stored_once(tmp_path: Path, workers: int) -> None:
    runs = _tree(tmp_path, n_trials=2)
    ingest([runs], tmp_path / "lake", workers=workers)
    # The same trials (same TrialResult ids) copied elsewhere and ingested: replaced, not doubled.
    backup = _tree(tmp_path / "backup", n_trials=2)
    summary = ingest([backup], tmp_path / "lake", workers=workers)
    assert (summary.trials_new, summary.trials_replaced) == (0, 2)
    assert _counts(tmp_path / "lake")["trials"] == 2
    # Both trees at once: each trial is read once, the second dir reported as a duplicate.
    fresh = tmp_path / "lake2"
    summary = ingest([runs, backup], fresh, workers=workers)
    assert summary.trials_new == 2
    con = connect(fresh)
    assert con.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]
    # every table holds each trial once (from the dir walked first)
    for table, n in {"spans": 3, "stop_reasons": 1, "tests": 2, "trajectories": 1}.items():
        per_trial = con.execute(
            f"SELECT trial_key, count(*) FROM {table} GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        assert per_trial == [("job-t-0", n), ("job-t-1", n)], table
    assert con.execute(
        "SELECT count(*) FROM problems WHERE kind = 'duplicate_trial'"
    ).fetchall() == [(2,)]


def test_a_copy_taking_a_trial_over_is_counted_once_in_the_summary(tmp_path: Path) -> None:
    """The original dir is unchanged (counted before the copy is read), then the copy takes its
    trial over: the summary counts what the lake holds, one trial and its one problem, in that
    ingest and in the next, unchanged one."""
    runs = tmp_path / "runs"
    job_dir = write_job(runs / "exp" / "harbor" / "step-0001" / "job")
    write_trial(job_dir, "t__0", trial_id="only", ctrf={"results": 5})  # one not_ctrf problem
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    shutil.copytree(job_dir / "t__0", job_dir / "t__0-copy")
    took_over = ingest([runs], lake, workers=1)
    counts = (took_over.trials_new, took_over.trials_replaced, took_over.trials_unchanged)
    assert (counts, took_over.problems) == ((0, 1, 0), 1)
    assert (_counts(lake)["trials"], _counts(lake)["problems"]) == (1, 1)
    again = ingest([runs], lake, workers=1)
    counts = (again.trials_new, again.trials_replaced, again.trials_unchanged)
    assert (counts, again.problems, again.committed) == ((0, 0, 1), 1, False)
    # the original dir, walked each time, is said as held by another dir, as a fresh ingest
    # of the same tree says of the dir it finds second
    fresh = ingest([runs], tmp_path / "fresh", workers=1)
    held = [summary.trials_held_elsewhere for summary in (took_over, again, fresh)]
    assert held == [1, 1, 1]
    assert "1 trial dir whose trial another dir holds" in again.line()


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "reader-processes"])
def test_a_tree_a_copy_took_over_is_said_as_held_elsewhere_not_as_no_trials(
    tmp_path: Path, workers: int
) -> None:
    """After a copy of a run tree took its trials over, ingesting the original again walks
    its trial dirs and stores nothing from them: the summary says so, instead of "0 trials"
    as if the tree held none."""
    runs = _tree(tmp_path, n_trials=2)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=workers)
    copy = tmp_path / "copy"
    shutil.copytree(runs, copy)
    took_over = ingest([copy], lake, workers=workers)
    assert (took_over.trials_replaced, took_over.trials_held_elsewhere) == (2, 0)
    again = ingest([runs], lake, workers=workers)
    counts = (again.trials_new, again.trials_replaced, again.trials_unchanged)
    assert (counts, again.trials_held_elsewhere) == ((0, 0, 0), 2)
    said = "0 trials (0 new, 0 replaced, 0 unchanged) in 1 jobs, 2 trial dirs whose trials other"
    assert said in again.line()
    assert _counts(lake)["trials"] == 2
    # a plain ingest of the copy: its own trials, nothing held elsewhere
    mine = ingest([copy], lake, workers=workers)
    assert (mine.trials_unchanged, mine.trials_held_elsewhere) == (2, 0)


def test_a_copy_under_another_run_name_says_which_batch_it_took_trials_from(
    tmp_path: Path,
) -> None:
    """`cp -r exp exp-fork`: the copy's trials are the same trials, so reading it takes them from
    the batch of `exp`, which then counts none of them. The summary says so, by batch; a copy
    of the same tree through another PATH (the same batch labels) takes nothing from anyone."""
    runs = tmp_path / "runs"
    for name in ("t__0", "t__1"):
        write_trial(write_job(runs / "exp" / "harbor" / "step-0001" / "job"), name)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    shutil.copytree(runs / "exp", runs / "exp-fork")
    forked = ingest([runs], lake, workers=1)
    assert forked.trials_taken_from == {"exp/harbor/step-0001/job": 2}
    assert "2 of them taken over from another batch's dirs (it no longer counts them)" in (
        forked.line()
    )
    # the fork again from another PATH: the same batch labels, so taken from no other batch
    shutil.copytree(runs / "exp-fork", tmp_path / "elsewhere" / "exp-fork")
    same_batches = ingest([tmp_path / "elsewhere"], lake, workers=1)
    assert same_batches.trials_replaced == 2 and same_batches.trials_taken_from == {}


def test_a_trial_two_dirs_hold_is_the_first_dirs_in_the_walk_whichever_reader_answers_first(
    tmp_path: Path, monkeypatch
) -> None:
    """Reader processes answer in the order they finish: a job dir and its copy (the same trial
    ids) must give the lake a one-process ingest gives, the trials in the dir walked first
    (`job`, before `job-copy`) and the copy's dirs the duplicates, however the race goes."""
    import importlib

    runs = _tree(tmp_path, n_trials=2)
    step_dir = runs / "exp" / "harbor" / "step-0001"
    shutil.copytree(step_dir / "job", step_dir / "job-copy")

    class LastAnswerFirst(Readers):  # the reader of the copy's chunk finishes first
        def __iter__(self):
            return reversed(list(super().__iter__()))

    # (the module itself: `wmo_lake.ingest` by name is the wl.ingest API proxy)
    monkeypatch.setattr(importlib.import_module("wmo_lake.ingest"), "Readers", LastAnswerFirst)
    summary = ingest([runs], tmp_path / "lake", workers=2)
    assert summary.trials_new == 2
    con = connect(tmp_path / "lake")
    held = con.execute("SELECT batch, count(*) FROM trials GROUP BY ALL").fetchall()
    assert held == [("exp/harbor/step-0001/job", 2)]
    duplicates = con.execute(
        "SELECT path FROM problems WHERE kind = 'duplicate_trial' ORDER BY 1"
    ).fetchall()
    assert duplicates == [(str(step_dir / "job-copy" / f"t__{i}"),) for i in range(2)]


def test_a_copy_holding_another_trial_now_gives_the_original_its_trial_back(
    tmp_path: Path,
) -> None:
    """The backup took the trials over; when a backup dir comes to hold another trial, the
    original dir (unchanged, so never read again) holds its trial again: the lake lost it."""
    runs = _tree(tmp_path, n_trials=2)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    backup = _tree(tmp_path / "backup", n_trials=2)
    ingest([backup], lake, workers=1)
    both = ingest([runs, backup], lake, workers=1)
    # the lake holds 2 trials; the originals' dirs hold none of its rows (it said 4 unchanged)
    assert (both.trials_unchanged, both.trials_new, both.committed) == (2, 0, False)
    job_dir = backup / "exp" / "harbor" / "step-0001" / "job"
    shutil.rmtree(job_dir / "t__0")
    write_trial(job_dir, "t__0", trial_id="job-t-other")
    ingest([runs, backup], lake, workers=1)
    keys = connect(lake).execute("SELECT trial_key FROM trials ORDER BY 1").fetchall()
    assert keys == [("job-t-0",), ("job-t-1",), ("job-t-other",)]
    assert ingest([runs, backup], lake, workers=1).committed is False


def test_unreadable_trial_that_completes_later_is_replaced(tmp_path: Path) -> None:
    runs = _tree(tmp_path, n_trials=1)
    job_dir = runs / "exp" / "harbor" / "step-0001" / "job"
    running = write_trial(job_dir, "late__1", trial_id="late")
    result = (running / "result.json").read_bytes()
    (running / "result.json").unlink()
    first = ingest([runs], tmp_path / "lake", workers=1)
    assert first.unreadable_trials == 1
    (running / "result.json").write_bytes(result)
    second = ingest([runs], tmp_path / "lake", workers=1)
    assert (second.unreadable_trials, second.trials_new, second.problems) == (0, 1, 0)
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT count(*) FROM problems").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]


def _refused(real, target: Path, error: int = errno.EACCES):  # type: ignore[no-untyped-def]
    """`real` (os.open, os.listdir, a reader) failing for `target` as the OS would (tests run as
    root, who reads any file, so a chmod refuses nothing here), however the path is spelled."""
    resolved = os.path.realpath(target)

    def call(path=".", *args, **kwargs):  # type: ignore[no-untyped-def]
        if not isinstance(path, int) and os.path.realpath(os.fspath(path)) == resolved:
            raise OSError(error, os.strerror(error), str(path))
        return real(path, *args, **kwargs)

    return call


@pytest.mark.parametrize(
    "name", ["result.json", "verifier/ctrf.json", "agent/trajectory.json", "../config.json"]
)
def test_a_file_that_could_not_be_read_is_read_again_once_it_can_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A file the ingest could not read for its permissions (EACCES: recorded as an unreadable
    trial or a problem) was fingerprinted by its size and mtime, which granting the permission
    (a chmod, a group the user joins) leaves as they were: the lake kept the failure for good.
    (Tests run as root, who reads any file: the refusal is the os.open of that file.)"""
    runs = _tree(tmp_path, n_trials=2)
    target = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0" / name
    with monkeypatch.context() as patched:
        patched.setattr(os, "open", _refused(os.open, target))
        ingest([runs], tmp_path / "lake", workers=1)
        assert _counts(tmp_path / "lake")["problems"] >= 1
        # still refused: left as it is (no read, no new generation, nothing "replaced")
        still = ingest([runs], tmp_path / "lake", workers=1)
        assert not still.committed and still.trials_replaced == 0, still.line()
        assert still.problems >= 1
    again = ingest([runs], tmp_path / "lake", workers=1)
    assert again.committed, again.line()
    ingest([runs], tmp_path / "fresh", workers=1)
    assert _counts(tmp_path / "lake") == _counts(tmp_path / "fresh")
    assert _counts(tmp_path / "lake")["problems"] == 0
    assert not ingest([runs], tmp_path / "lake", workers=1).committed  # (then left alone)


def test_a_dir_whose_trial_a_copy_took_keeps_it_there_while_its_file_still_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial dir with a file that could not be read is tried again on later ingests; once a
    copy of the tree (another run name) took its trial over, an ingest of the original with
    nothing changed read it again and took the trial back, without the copy's graded tests."""
    runs = _tree(tmp_path, n_trials=2)
    target = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0" / "verifier" / "ctrf.json"
    monkeypatch.setattr(os, "open", _refused(os.open, target))
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    copy = tmp_path / "copy"
    shutil.copytree(runs / "exp", copy / "exp2")
    taken = ingest([copy], lake, workers=1)
    assert taken.trials_taken_from == {"exp/harbor/step-0001/job": 2}, taken.line()
    again = ingest([runs], lake, workers=1)
    assert not again.committed, again.line()
    rows = connect(lake).execute("SELECT batch, count(*) FROM tests GROUP BY ALL").fetchall()
    assert rows == [("exp2/harbor/step-0001/job", 4)]


def test_a_socket_where_a_file_should_be_is_not_read_again_and_again(tmp_path: Path) -> None:
    """A socket's open fails (ENXIO) for as long as it is one, like a FIFO's: no retry."""
    import socket

    short = Path(tempfile.mkdtemp(prefix="wl", dir="/tmp"))  # (a socket path is <= 107 bytes)
    try:
        runs = _tree(short, n_trials=1)
        ctrf = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0" / "verifier" / "ctrf.json"
        ctrf.unlink()
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(ctrf))
            ingest([runs], tmp_path / "lake", workers=1)
            again = ingest([runs], tmp_path / "lake", workers=1)
    finally:
        shutil.rmtree(short)
    assert not again.committed, again.line()


def test_a_trial_dir_that_could_not_be_listed_is_read_again_once_it_can_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial dir that may be entered but not listed is read (its files by name) with an
    unreadable_dir problem; made listable, with no file of it changed, it kept the problem."""
    runs = _tree(tmp_path, n_trials=2)
    trial = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0"
    with monkeypatch.context() as patched:
        patched.setattr(os, "scandir", _refused(os.scandir, trial))
        patched.setattr(os, "listdir", _refused(os.listdir, trial))
        ingest([runs], tmp_path / "lake", workers=1)
    kinds = connect(tmp_path / "lake").execute("SELECT kind FROM problems").fetchall()
    assert ("unreadable_dir",) in kinds
    again = ingest([runs], tmp_path / "lake", workers=1)
    assert again.committed, again.line()
    assert _counts(tmp_path / "lake")["problems"] == 0


def test_a_failed_file_reached_by_another_path_next_time_is_still_tried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failed file was kept as the walk reached it: after an ingest of `runs` from its
    parent dir, an ingest by the absolute path from elsewhere tried the relative name there,
    never opened it, and kept the failure."""
    runs = _tree(tmp_path, n_trials=2)
    target = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0" / "verifier" / "ctrf.json"
    with monkeypatch.context() as patched:
        patched.chdir(tmp_path)
        patched.setattr(os, "open", _refused(os.open, target))
        ingest([Path("runs")], tmp_path / "lake", workers=1)
    assert _counts(tmp_path / "lake")["problems"] == 1
    monkeypatch.chdir("/")
    again = ingest([runs], tmp_path / "lake", workers=1)
    assert again.committed and _counts(tmp_path / "lake")["problems"] == 0, again.line()


def test_a_file_that_opens_but_cannot_be_read_is_left_alone_until_it_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file that opens and whose read fails (EIO, a bad sector) was read again on every
    ingest: the check tried only to open it."""
    from wmo_lake import jsonfile

    runs = _tree(tmp_path, n_trials=2)
    target = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0" / "verifier" / "ctrf.json"
    with monkeypatch.context() as patched:
        patched.setattr(jsonfile, "_read_file", _refused(jsonfile._read_file, target, errno.EIO))
        ingest([runs], tmp_path / "lake", workers=1)
        still = ingest([runs], tmp_path / "lake", workers=1)
        assert not still.committed, still.line()
    again = ingest([runs], tmp_path / "lake", workers=1)
    assert again.committed and _counts(tmp_path / "lake")["problems"] == 0, again.line()


def test_an_agent_dir_that_cannot_be_listed_is_read_again_to_see_its_continuations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial whose agent/ cannot be listed is read with the continuations trajectory.json
    names, which no fingerprint can know in advance: each ingest reads it again, so a
    continuation that changed is read (an unchanged fixed marker kept the old steps)."""
    runs = _tree(tmp_path, n_trials=1)
    agent = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0" / "agent"
    main = _with_continuation(agent, "trajectory.cont-1.json")
    monkeypatch.setattr(os, "listdir", _refused(os.listdir, agent))
    ingest([runs], tmp_path / "lake", workers=1)
    last = main | {"continued_trajectory_ref": None, "steps": main["steps"][:1]}
    (agent / "trajectory.cont-1.json").write_text(json.dumps(last))
    ingest([runs], tmp_path / "lake", workers=1)
    ingest([runs], tmp_path / "fresh", workers=1)
    assert _table_count(tmp_path / "lake", "steps") == _table_count(tmp_path / "fresh", "steps")


def _with_continuation(agent: Path, name: str) -> dict:
    """agent/trajectory.json continued in `name` (a copy of it); the main trajectory."""
    main = json.loads((agent / "trajectory.json").read_text())
    main["continued_trajectory_ref"] = name
    (agent / "trajectory.json").write_text(json.dumps(main))
    (agent / name).write_text(json.dumps(main | {"continued_trajectory_ref": None}))
    return main


@pytest.mark.parametrize(
    "name", ["part2.json", "PART2.JSON", "trajectory.part2", "cont-1", "notes.txt"]
)
def test_a_continuation_of_any_name_is_watched(tmp_path: Path, name: str) -> None:
    """A trajectory's continued_trajectory_ref may name any file of agent/ (harbor's
    traces_utils follows it); one not named trajectory* was read but not watched, so a change
    to it was never read (nor one of a name no rule watches: the read's chain is kept)."""
    runs = _tree(tmp_path, n_trials=1)
    agent = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0" / "agent"
    main = _with_continuation(agent, name)
    ingest([runs], tmp_path / "lake", workers=1)
    steps = _table_count(tmp_path / "lake", "steps")
    last = main | {"continued_trajectory_ref": None, "steps": main["steps"][:1]}
    (agent / name).write_text(json.dumps(last))
    again = ingest([runs], tmp_path / "lake", workers=1)
    assert again.committed, again.line()
    assert _table_count(tmp_path / "lake", "steps") == steps - len(main["steps"]) + 1


@pytest.mark.parametrize("workers", [1, 2])
def test_a_continuation_named_before_it_exists_is_read_once_it_does(
    tmp_path: Path, workers: int
) -> None:
    """A reference to a continuation not written yet is a missing_continuation problem; once
    the file is there, the trial is read again (its steps, no problem), as a fresh ingest has
    it, with reader processes too (their summaries carry the names the chain met)."""
    runs = _tree(tmp_path, n_trials=2)
    agent = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0" / "agent"
    main = _with_continuation(agent, "cont-2")
    (agent / "cont-2").unlink()
    ingest([runs], tmp_path / "lake", workers=workers)
    assert _counts(tmp_path / "lake")["problems"] == 1
    assert not ingest([runs], tmp_path / "lake", workers=workers).committed
    (agent / "cont-2").write_text(json.dumps(main | {"continued_trajectory_ref": None}))
    again = ingest([runs], tmp_path / "lake", workers=workers)
    assert again.committed, again.line()
    ingest([runs], tmp_path / "fresh", workers=workers)
    assert _counts(tmp_path / "lake")["problems"] == 0
    for table in ("steps", "trajectories", "tool_calls"):
        assert _table_count(tmp_path / "lake", table) == _table_count(tmp_path / "fresh", table)
    assert not ingest([runs], tmp_path / "lake", workers=workers).committed


def test_a_dry_run_counts_a_changed_job_dir(tmp_path: Path) -> None:
    """`--dry-run` says how many dirs an ingest would read: a changed job dir was left out
    ("would read 0 ... nothing changed") of an ingest that then read it and committed."""
    runs = _tree(tmp_path, n_trials=2)
    ingest([runs], tmp_path / "lake", workers=1)
    result = runs / "exp" / "harbor" / "step-0001" / "job" / "result.json"
    result.write_text(result.read_text() + "\n")
    dry = ingest([runs], tmp_path / "lake", workers=1, dry_run=True)
    assert dry.would_read == 1, dry.line()
    assert ingest([runs], tmp_path / "lake", workers=1).committed


def _table_count(lake: Path, table: str) -> int:
    return connect(lake).execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]


def test_a_chmod_or_a_hard_link_that_changes_no_content_reads_nothing_again(
    tmp_path: Path,
) -> None:
    """What moves a file's ctime but not its content (a no-op `chmod -R`, a hard-link snapshot
    of the runs) must not make every trial read again and a new generation."""
    runs = _tree(tmp_path, n_trials=3)
    ingest([runs], tmp_path / "lake", workers=1)
    for path in runs.rglob("*"):
        if path.is_file():
            path.chmod(path.stat().st_mode)
            os.link(path, tmp_path / f"link-{path.stat().st_ino}")
    again = ingest([runs], tmp_path / "lake", workers=1)
    assert (again.committed, again.trials_unchanged) == (False, 3), again.line()


def test_many_small_ingests_keep_few_segment_files(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    job_dir = write_job(runs / "r" / "harbor" / "step-0001" / "job")
    for n in range(20):  # twenty commits into one partition
        write_trial(job_dir, f"t__{n}", trial_id=f"s{n}")
        ingest([runs], tmp_path / "lake", workers=1)
    manifest = Store(tmp_path / "lake").read_manifest()
    partitions = [files for table in manifest.tables.values() for files in table.values()]
    assert partitions and all(len(files) <= 12 for files in partitions)
    assert _counts(tmp_path / "lake")["trials"] == 20


def _run_ingest(
    runs: Path, lake: Path, env: dict[str, str] | None = None, args: tuple[str, ...] = (), **kwargs
):
    return subprocess.Popen(
        [sys.executable, "-m", "wmo_lake.cli", "ingest", str(runs), "--lake", str(lake), *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _lake_then_new_trials(tmp_path: Path, n_new: int) -> tuple[Path, Path, dict[str, int]]:
    """A lake of a 2-trial tree, then `n_new` more trials in the tree: (the tree, the lake, its
    row counts before they are ingested)."""
    runs = _tree(tmp_path, n_trials=2, prefix="old")
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    before = _counts(lake)
    job_dir = runs / "exp" / "harbor" / "step-0001" / "job"
    for i in range(n_new):
        write_trial(job_dir, f"new__{i}", trial_id=f"new-{i}")
    return runs, lake, before


@pytest.mark.parametrize(
    ("point", "committed"),
    [
        ("mid_extract", False),
        ("after_manifest", True),
        ("after_commit", True),  # (the commit returned, its summary not yet told)
        ("before_duckdb_file", True),
        ("sweep_wait", True),  # (lake.duckdb built, the replaced files' sweep not yet done)
        ("after_duckdb_file", True),  # (all done but the lock's release and the summary)
    ],
)
@pytest.mark.parametrize(
    ("env_name", "code", "said"),
    [
        ("WMO_LAKE_INTERRUPT_AT", 130, "interrupted"),
        # SIGTERM (a scheduler's, `timeout`'s) ended the process without a word (exit -15)
        ("WMO_LAKE_TERMINATE_AT", 143, "stopped by SIGTERM"),
    ],
    ids=["ctrl-c", "sigterm"],
)
def test_ctrl_c_says_whether_the_ingest_had_committed(
    tmp_path: Path, point: str, committed: bool, env_name: str, code: int, said: str
) -> None:
    """Ctrl-C after the manifest swap said `nothing was written or changed`, over a lake whose
    new generation was in (and whose lake.duckdb, for a plain DuckDB client, was not). So did
    one right after the commit returned, or once lake.duckdb was built too."""
    runs, lake, _ = _lake_then_new_trials(tmp_path, 3)
    stopped = _run_ingest(
        runs,
        lake,
        {env_name: point},
        # a shell's background job ignores SIGINT; the user's terminal does not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _, err = stopped.communicate(timeout=120)
    assert stopped.returncode == code, err
    assert _counts(lake)["trials"] == (5 if committed else 2)
    if point == "after_duckdb_file":
        assert err.strip() == (
            f"{said} after the command had finished: generation 2 is the lake at {lake}, and "
            "lake.duckdb is up to date"
        )
    elif point == "sweep_wait":
        assert err.strip() == (
            f"{said} after the commit: generation 2 is the lake at {lake}, and lake.duckdb is "
            "up to date"
        )
    elif committed:
        assert err.strip() == (
            f"{said} after the commit: generation 2 is the lake at {lake}, but lake.duckdb "
            "was not rebuilt (wmo-lake reads the lake as it is; for a plain DuckDB client, run "
            "the same ingest again: it rebuilds lake.duckdb and changes nothing else)"
        )
    else:
        assert err.strip() == f"{said}: nothing was written or changed"
        assert not (lake / STAGING).exists()
    rerun = _run_ingest(runs, lake)
    out, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert ("nothing changed" in out) is committed
    import duckdb

    with duckdb.connect(str(lake / "lake.duckdb"), read_only=True) as db:
        db.execute("SET file_search_path = ?", [str(lake)])
        assert db.execute("SELECT count(*) FROM trials").fetchall() == [(5,)]


def test_the_python_api_says_lake_duckdb_is_up_to_date_when_it_is(tmp_path: Path) -> None:
    """Stopped once all was done (lake.duckdb rebuilt), the library's InterruptedAfterCommit
    said lake.duckdb was not rebuilt and to run the ingest again."""
    runs, lake, _ = _lake_then_new_trials(tmp_path, 3)
    script = (
        "from pathlib import Path; from wmo_lake.ingest import ingest\n"
        "try:\n"
        f"    ingest([Path({str(runs)!r})], Path({str(lake)!r}), workers=1)\n"
        "except KeyboardInterrupt as error:\n"
        "    print(error.message)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "WMO_LAKE_INTERRUPT_AT": "after_duckdb_file"},
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == (
        f"interrupted after the commit: generation 2 is the lake at {lake}, and lake.duckdb is "
        "up to date"
    ), out.stderr


def test_a_ctrl_c_inside_the_rebuilds_query_after_the_commit_says_the_change_is_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C inside one of lake.duckdb's rebuild queries is DuckDB's own error
    (RuntimeError('Query interrupted') in duckdb 2.0), not KeyboardInterrupt: after the commit
    it said "nothing was written or changed" over a lake whose new generation was in."""
    from click.testing import CliRunner

    from wmo_lake import lake as lake_module
    from wmo_lake.cli import cli

    runs, lake, _ = _lake_then_new_trials(tmp_path, 3)

    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(lake_module, "ensure_duckdb_file", interrupted)
    stopped = CliRunner().invoke(cli, ["ingest", str(runs), "--lake", str(lake), "--workers", "1"])
    assert stopped.exit_code == 130, stopped.output
    assert f"interrupted after the commit: generation 2 is the lake at {lake}, but" in (
        stopped.output
    )
    assert _counts(lake)["trials"] == 5


@pytest.mark.parametrize(
    "point", ["mid_extract", "before_manifest", "after_manifest", "before_duckdb_file"]
)
def test_sigkill_leaves_a_readable_lake_and_rerun_completes(tmp_path: Path, point: str) -> None:
    runs, lake, before = _lake_then_new_trials(tmp_path, 3)
    killed = _run_ingest(runs, lake, {"WMO_LAKE_CRASH_AT": point})
    killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL
    # Readable, at the previous generation or (killed after the swap) the next, never a mix.
    after_kill = _counts(lake)
    assert after_kill in (
        before,
        {**before, "trials": 5, "spans": 15, "stop_reasons": 5, "tests": 10},
    )
    import duckdb

    with duckdb.connect(str(lake / "lake.duckdb"), read_only=True) as db:
        db.execute("SET file_search_path = ?", [str(lake)])  # what a plain client sets
        assert db.execute("SELECT count(*) FROM trials").fetchall()[0][0] in (2, 5)
    rerun = _run_ingest(runs, lake)
    _, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert _counts(lake)["trials"] == 5
    with duckdb.connect(str(lake / "lake.duckdb"), read_only=True) as db:
        db.execute("SET file_search_path = ?", [str(lake)])
        assert db.execute("SELECT count(*) FROM trials").fetchall() == [(5,)]
    live = set(Store(lake).read_manifest().live_files())
    previous = set(Store(lake).read_manifest().previous)
    on_disk = {p.relative_to(lake).as_posix() for p in lake.rglob("*.parquet")}
    assert on_disk <= live | previous, "an interrupted ingest's files were never cleaned up"
    assert not (lake / STAGING).exists(), "the killed ingest's copies of stored rows stayed"


def test_sigterm_stops_the_readers_and_commits_nothing(tmp_path: Path) -> None:
    """SIGTERM to the ingest alone (a scheduler's, `timeout`'s) while its reader processes work:
    it ended without a word (exit -15). Now it stops as Ctrl-C does: the readers are stopped,
    nothing is committed, one line, exit 143. The readers are held at their first chunk by the
    pause point (WMO_LAKE_PAUSE_FIFO: its write end opens once a reader waits on it)."""
    runs, lake, before = _lake_then_new_trials(tmp_path, 6)
    fifo_path = tmp_path / "pause.fifo"
    os.mkfifo(fifo_path)
    proc = _run_ingest(runs, lake, {"WMO_LAKE_PAUSE_FIFO": str(fifo_path)}, args=("--workers", "2"))
    fifo = None
    try:
        deadline = time.monotonic() + 60
        while fifo is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            try:
                fifo = os.open(fifo_path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as error:
                if error.errno != errno.ENXIO:  # ENXIO: no reader waits yet
                    raise
                time.sleep(0.05)
        readers = _children(proc.pid)
        assert readers, "the ingest started no reader process"
        proc.send_signal(signal.SIGTERM)  # the ingest only, not its process group
        _, err = proc.communicate(timeout=60)
    finally:
        if fifo is not None:
            os.close(fifo)
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    assert err.strip() == "stopped by SIGTERM: nothing was written or changed"
    assert not [pid for pid in readers if Path(f"/proc/{pid}").exists()], "readers left running"
    assert _counts(lake) == before
    assert not (lake / STAGING).exists()
    fifo_path.unlink()
    rerun = _run_ingest(runs, lake)
    _, err = rerun.communicate(timeout=120)
    assert rerun.returncode == 0, err
    assert _counts(lake)["trials"] == 8


def _children(pid: int) -> list[int]:
    """The child processes of `pid` (Linux: /proc/PID/task/*/children)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sigkill_at_random_moments(tmp_path: Path, workers: str) -> None:
    """With --workers 2 the CLI forks reader processes: killing it must not leave them behind
    (communicate() would wait for their open pipes forever)."""
    runs = _tree(tmp_path, n_trials=12, prefix="a")
    lake = tmp_path / "lake"
    for delay in (0.3, 0.6, 0.9, 1.2):
        proc = _run_ingest(runs, lake, args=("--workers", workers))
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=120)
        if Store(lake).exists():
            assert _counts(lake)["trials"] in (0, 12)
    proc = _run_ingest(runs, lake, args=("--workers", workers))
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert _counts(lake)["trials"] == 12


def test_a_second_ingest_waits_for_the_lock(tmp_path: Path) -> None:
    runs = _tree(tmp_path, n_trials=2)
    lake = tmp_path / "lake"
    with Store(lake).lock():
        waiting = _run_ingest(runs, lake)
        deadline = time.monotonic() + 60
        line = ""
        while "waiting for" not in line and time.monotonic() < deadline:
            line = waiting.stderr.readline()
        assert "waiting for" in line and str(lake) in line
        assert waiting.poll() is None
    out, _ = waiting.communicate(timeout=120)
    assert waiting.returncode == 0 and "2 new" in out


def test_concurrent_ingests_never_double_a_row(tmp_path: Path) -> None:
    runs_a = _tree(tmp_path / "a", n_trials=4, job="ja")
    runs_b = _tree(tmp_path / "b", n_trials=4, job="jb")
    lake = tmp_path / "lake"
    procs = [_run_ingest(r, lake) for r in (runs_a, runs_b, runs_a, runs_b)]
    for proc in procs:
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
    counts = _counts(lake)
    assert counts["trials"] == 8 and counts["jobs"] == 2 and counts["spans"] == 24
    keys = connect(lake).execute("SELECT count(DISTINCT trial_key) FROM trials").fetchall()
    assert keys == [(8,)]


def test_extract_is_pure_and_picklable(tmp_path: Path) -> None:
    """Workers receive TrialTasks and return Extracted over a process boundary."""
    import pickle

    runs = _tree(tmp_path, n_trials=1)
    trial_dir = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0"
    task = TrialTask(str(trial_dir), str(trial_dir), "b", None, None, "job:x", True)
    result = pickle.loads(pickle.dumps(extract.extract_trial(pickle.loads(pickle.dumps(task)))))
    assert result.kind == TRIAL and result.tables["spans"].num_rows == 3
    assert json.loads(json.dumps(result.unit_key)) == "job-t-0"


@pytest.mark.parametrize("n_trials", [6, 40])
def test_worker_pool_gives_the_same_lake_as_one_process(tmp_path: Path, n_trials: int) -> None:
    runs = _tree(tmp_path, n_trials=n_trials)
    ingest([runs], tmp_path / "serial", workers=1)
    # Here (a threaded pytest process) the workers come from a fork server; the CLI, still
    # single-threaded when it starts them, forks them directly (next test).
    summary = ingest([runs], tmp_path / "pooled", workers=2)
    assert summary.trials_new == n_trials
    query = "SELECT * EXCLUDE (artifact_dir) FROM trials ORDER BY trial_key"
    spans = "SELECT * FROM spans_full ORDER BY trial_key, call_index"
    for sql in (query, spans):
        assert (
            connect(tmp_path / "serial").execute(sql).fetchall()
            == connect(tmp_path / "pooled").execute(sql).fetchall()
        )


def test_small_trials_travel_to_the_readers_in_chunks(tmp_path: Path) -> None:
    """One queue message per small trial cost as much as extracting it: small trials go in
    chunks (few enough that both readers get work), a big trial alone."""
    from wmo_lake.discover import discover
    from wmo_lake.readers import reader_count

    runs = _tree(tmp_path, n_trials=40)
    tasks = [TrialTask.of(c) for c in discover(runs).candidates]
    processes, chunk = reader_count(tasks, 2)
    assert processes == 2 and chunk == 40 // (4 * 2)
    big = Path(tasks[0].path) / "result.json"
    big.write_bytes(big.read_bytes() + b" " * (8 * 2**20))  # a 8 MB trial
    assert reader_count(tasks[:1] * 40, 2) == (2, 1)
    assert reader_count(tasks[:1], 2) == (0, 1)  # one trial is read in this process


def test_the_pool_is_chosen_from_a_sample_of_the_tasks(monkeypatch) -> None:
    """Whether to start readers is decided from at most SIZED_TASKS tasks spread over the list,
    scaled to all of them: sizing every small trial cost more than it told."""
    import wmo_lake.readers as readers

    sized: list[int] = []

    def size(task: int) -> int:
        sized.append(task)
        return 10_000  # a small trial's JSON

    monkeypatch.setattr(readers, "_bytes_to_read", size)
    many = list(range(10_000))  # ~100 MB in all: worth the readers
    processes, chunk = readers.reader_count(many, None)  # type: ignore[arg-type]
    cores = os.cpu_count() or 1
    assert processes == (cores if cores > 1 else 0)
    assert chunk == readers.MAX_CHUNK
    assert len(sized) == readers.SIZED_TASKS
    assert sized[0] == 0 and sized[-1] >= 9_000  # (spread over the whole list)

    sized.clear()
    few = list(range(1_000))  # ~10 MB: read in this process
    assert readers.reader_count(few, None)[0] == 0  # type: ignore[arg-type]
    assert len(sized) == readers.SIZED_TASKS


def test_a_first_ingest_leaves_fingerprints_to_the_readers(tmp_path: Path, monkeypatch) -> None:
    """Dirs the catalog does not know are read whatever their fingerprint: the ingest process
    fingerprints none of them; the reader's fingerprint (taken before it reads) is stored, and
    it is the one the next ingest compares with."""
    import importlib

    # the module itself (`import wmo_lake.ingest as m` gives the wl.ingest API proxy)
    ingest_module = importlib.import_module("wmo_lake.ingest")
    runs = _tree(tmp_path, n_trials=4)
    calls: list[str] = []
    real = ingest_module.trial_fingerprint

    def counted(candidate, **kwargs):
        calls.append(str(candidate.path))
        return real(candidate, **kwargs)

    monkeypatch.setattr(ingest_module, "trial_fingerprint", counted)
    assert ingest([runs], tmp_path / "lake", workers=1).trials_new == 4
    assert calls == []
    again = ingest([runs], tmp_path / "lake", workers=1)
    assert (again.trials_unchanged, again.committed, len(calls)) == (4, False, 4)


def test_a_trial_that_finishes_between_the_walk_and_its_read_keeps_no_walk_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ingesting while harbor writes: the walk caught a trial's config.json half-written (and no
    result.json yet), and the trial finished before a reader reached it. Its rows were right,
    but the walk's `invalid_json` was stored with them under the finished files' fingerprint,
    so every later ingest called the dir unchanged and kept the problem (and `--strict`
    failed) for a trial a one-shot ingest finds nothing wrong with."""
    ingest_module = sys.modules["wmo_lake.ingest"]  # (the module, not the API's `ingest`)
    runs = _tree(tmp_path, n_trials=1)
    trial = next((runs / "exp" / "harbor" / "step-0001" / "job").glob("t__*"))
    config, result = (trial / "config.json").read_bytes(), (trial / "result.json").read_bytes()
    (trial / "config.json").write_bytes(config[:100])  # harbor still writing it
    (trial / "result.json").unlink()
    walk = ingest_module.discover

    def walk_then_the_trial_finishes(*args, **kwargs):
        found = walk(*args, **kwargs)
        (trial / "config.json").write_bytes(config)
        (trial / "result.json").write_bytes(result)
        return found

    monkeypatch.setattr(ingest_module, "discover", walk_then_the_trial_finishes)
    first = ingest([runs], tmp_path / "lake", workers=1)
    monkeypatch.setattr(ingest_module, "discover", walk)
    assert (first.trials_new, first.problems) == (1, 0)
    again = ingest([runs], tmp_path / "lake", workers=1)
    assert (again.trials_unchanged, again.problems) == (1, 0)
    assert _counts(tmp_path / "lake") == _counts_of_a_fresh_ingest(runs, tmp_path / "fresh")


def _counts_of_a_fresh_ingest(runs: Path, lake: Path) -> dict[str, int]:
    ingest([runs], lake, workers=1)
    return _counts(lake)


def _lone_broken_config(runs: Path) -> Path:
    """A job dir caught as harbor starts writing its config.json: a walk problem."""
    job = runs / "exp" / "harbor" / "step-0001" / "job"
    job.mkdir(parents=True)
    (job / "config.json").write_text('{"job_name": "job", "agen')
    return job


def test_a_walk_problem_is_one_row_whatever_path_reached_it(tmp_path: Path) -> None:
    """Keyed by the PATH as typed, one broken file reached as `runs`, as its absolute path and
    through a link was three rows (trials were one each way)."""
    runs = tmp_path / "runs"
    _lone_broken_config(runs)
    (tmp_path / "alias").symlink_to(runs, target_is_directory=True)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for path in ("runs", str(runs), "alias"):
            ingest([Path(path)], tmp_path / "lake", workers=1)
    finally:
        os.chdir(cwd)
    assert _counts(tmp_path / "lake")["problems"] == 1


@pytest.mark.parametrize("prune", [False, True])
def test_a_walk_problem_that_no_longer_holds_leaves_the_lake(tmp_path: Path, prune: bool) -> None:
    """The job's config.json is whole at the next ingest: its walk problem went only with
    --prune, and not even then under a relative PATH (the key was the PATH as typed, never under
    --prune's real roots), while every summary said 0 problems."""
    runs = tmp_path / "runs"
    job = _lone_broken_config(runs)
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        ingest([Path("runs")], tmp_path / "lake", workers=1)
        assert _counts(tmp_path / "lake")["problems"] == 1
        shutil.rmtree(job)
        _tree(tmp_path, n_trials=1)
        summary = ingest([Path("runs")], tmp_path / "lake", workers=1, prune=prune)
    finally:
        os.chdir(cwd)
    assert summary.problems == 0
    assert _counts(tmp_path / "lake")["problems"] == 0


def test_an_interrupted_ingest_leaves_no_segment_of_its_own_in_the_table_dirs(
    tmp_path: Path,
) -> None:
    """A direct read of a table dir (README, "Lake layout") took the rows of segments the readers
    wrote for a commit that never came, until the next ingest swept them."""
    runs, lake, _ = _lake_then_new_trials(tmp_path, 12)
    stopped = _run_ingest(
        runs,
        lake,
        {"WMO_LAKE_INTERRUPT_AT": "before_manifest"},  # every reader has written its segments
        ("--workers", "2"),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    _, err = stopped.communicate(timeout=120)
    assert stopped.returncode == 130, err
    manifest = Store(lake).read_manifest()
    named = {rel for table in manifest.tables for rel in manifest.table_files(table)}
    on_disk = {str(p.relative_to(lake)) for p in (lake / "tables").rglob("*.parquet")}
    assert on_disk == named | set(manifest.previous) & on_disk
    assert _counts(lake)["trials"] == 2


@pytest.mark.parametrize("config", ["gone", "back"])
def test_a_missing_sink_dir_is_the_problem_of_whoever_records_it_now(
    tmp_path: Path, config: str
) -> None:
    """A pi-bridge job's missing sink dir is the job's problem when its config.json names the
    agent, else the trial's own. The job's config.json going (or coming back) changes whose it
    is with no file of the trial's changing: the trial kept its old reading, so the lake lost
    the problem (or held it twice) where a fresh ingest has it once."""
    runs = tmp_path / "runs"
    job = write_job(
        runs / "exp" / "harbor" / "step-0000" / "job",
        token_sink_dir=str(runs / "exp" / "tokens" / "step-0000"),  # (never written)
    )
    write_trial(job, "pi__0", reward=1.0)
    job_config, away = job / "config.json", tmp_path / "config.json"
    if config == "back":
        job_config.rename(away)
    ingest([runs], tmp_path / "lake", workers=1)
    if config == "back":
        away.rename(job_config)
    else:
        job_config.rename(away)
    ingest([runs], tmp_path / "lake", workers=1)
    ingest([runs], tmp_path / "fresh", workers=1)
    query = "SELECT unit_key LIKE 'job:%' AS the_jobs, kind FROM problems ORDER BY ALL"
    (fresh,) = connect(tmp_path / "fresh").execute(query).fetchall()
    assert fresh == (config == "back", "sink_dir_missing")
    assert connect(tmp_path / "lake").execute(query).fetchall() == [fresh]


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the trial dirs and job dirs an in-process ingest reads."""
    reads = {"trial": 0, "job": 0}

    def counted(kind: str, read: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            reads[kind] += 1
            return read(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(extract, "read_task", counted("trial", extract.read_task))
    monkeypatch.setattr(extract, "extract_job", counted("job", extract.extract_job))
    return reads


def test_a_dry_run_of_a_trial_dir_counts_its_changed_job_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PATH that is a trial dir reaches its job dir too, which the ingest reads when it
    changed: the dry run said "would read 1" of an ingest that read 2."""
    runs = _tree(tmp_path, n_trials=2)
    job_dir = runs / "exp" / "harbor" / "step-0001" / "job"
    ingest([runs], tmp_path / "lake", workers=1)
    for changed in (job_dir / "config.json", job_dir / "t__0" / "result.json"):
        changed.write_text(changed.read_text() + "\n")
    dry = ingest([job_dir / "t__0"], tmp_path / "lake", workers=1, dry_run=True)
    reads = _counting_reads(monkeypatch)
    ingest([job_dir / "t__0"], tmp_path / "lake", workers=1)
    assert reads == {"trial": 1, "job": 1}
    assert dry.would_read == 2, dry.line()


@pytest.mark.parametrize("trial_result", [False, True], ids=["another-tools", "trial-result"])
def test_a_dry_run_counts_the_parent_of_a_lone_result_json_only_when_it_is_a_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, trial_result: bool
) -> None:
    """A dir with a result.json and no config.json outside any job dir is read to see whether
    it is a trial; only a TrialResult makes its parent a job dir, read too. The dry run counted
    that parent for another tool's result.json as well: "would read 3" of an ingest that read 2."""
    runs = _tree(tmp_path, n_trials=1)
    lone = runs / "tools" / "mlflow" / "run1"
    lone.mkdir(parents=True)
    result = {"trial_name": "run1", "task_name": "t"} if trial_result else {"accuracy": 0.5}
    (lone / "result.json").write_text(json.dumps(result))
    dry = ingest([runs / "tools"], tmp_path / "lake", workers=1, dry_run=True)
    reads = _counting_reads(monkeypatch)
    ingest([runs / "tools"], tmp_path / "lake", workers=1)
    assert reads == {"trial": 1, "job": 1 if trial_result else 0}
    assert dry.would_read == sum(reads.values()), dry.line()


def test_a_dry_run_says_the_copies_a_changed_dir_may_hand_its_trial_back_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy's dir that took a trial over, changed to hold another trial, gives it back to the
    dir it took it from, read again in the same ingest: only its read can tell, so the dry run
    says how many such dirs it may read besides the changed ones."""
    runs = _tree(tmp_path, n_trials=1)
    ingest([runs], tmp_path / "lake", workers=1)
    shutil.copytree(runs / "exp", runs / "exp-fork")
    ingest([runs / "exp-fork"], tmp_path / "lake", workers=1)
    result = runs / "exp-fork" / "harbor" / "step-0001" / "job" / "t__0" / "result.json"
    result.write_text(result.read_text().replace('"job-t-0"', '"another-id"'))
    dry = ingest([runs], tmp_path / "lake", workers=1, dry_run=True)
    assert (dry.would_read, dry.may_also_read) == (1, 1), dry.line()
    assert "and up to 1 dirs holding copies of trials that changed dirs hold" in dry.line()
    reads = _counting_reads(monkeypatch)
    done = ingest([runs], tmp_path / "lake", workers=1)
    assert reads["trial"] == 2 and done.trials_replaced == 2, done.line()
    untouched = ingest([runs], tmp_path / "lake", workers=1, dry_run=True)
    assert (untouched.would_read, untouched.may_also_read) == (0, 0), untouched.line()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_copy_of_a_trial_with_a_named_continuation_stays_unchanged(
    tmp_path: Path, workers: int
) -> None:
    """The second dir of a trial is kept as a duplicate: its catalog entry lost the names its
    continuation chain met while keeping the fingerprint that watched them, so every ingest
    read it again, and the copy took the trial over from the dir a fresh ingest keeps."""
    runs = _tree(tmp_path, n_trials=2)
    agent = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0" / "agent"
    _with_continuation(agent, "cont-1")
    shutil.copytree(runs / "exp", runs / "exp-copy")
    ingest([runs], tmp_path / "lake", workers=workers)
    again = ingest([runs], tmp_path / "lake", workers=workers)
    assert not again.committed, again.line()
    ingest([runs], tmp_path / "fresh", workers=workers)
    query = "SELECT batch, trial_name FROM trials ORDER BY ALL"
    lake, fresh = (connect(tmp_path / name).execute(query).fetchall() for name in ("lake", "fresh"))
    assert lake == fresh and {batch for batch, _ in lake} == {"exp/harbor/step-0001/job"}


def test_a_dry_run_counts_no_job_dir_of_a_copy_it_would_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PATH that is the dir of a copy (its trial held from the original) reads nothing when
    only the copy's job config.json changed: the dry run said it would read 1."""
    runs = _tree(tmp_path, n_trials=1)
    shutil.copytree(runs / "exp", runs / "exp-copy")
    ingest([runs], tmp_path / "lake", workers=1)
    copy_job = runs / "exp-copy" / "harbor" / "step-0001" / "job"
    (copy_job / "config.json").write_text((copy_job / "config.json").read_text() + "\n")
    dry = ingest([copy_job / "t__0"], tmp_path / "lake", workers=1, dry_run=True)
    reads = _counting_reads(monkeypatch)
    done = ingest([copy_job / "t__0"], tmp_path / "lake", workers=1)
    assert reads == {"trial": 0, "job": 0} and not done.committed
    assert dry.would_read == 0, dry.line()


def test_a_dry_run_with_prune_counts_the_job_dir_of_a_copy_it_reads_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trial dirs as PATHs, the second a copy (a duplicate) in a job dir of its own: once the
    first is gone, `--prune` reads the copy back and, its trial now, the copy's job dir, which
    no other count holds: the dry run said it would read 1 of the 2."""
    step = tmp_path / "runs" / "exp" / "harbor" / "step-0001"
    original = write_job(step / "job")
    write_trial(original, "t__0", trial_id="trial-0")
    copy = write_job(step / "job-copy")
    shutil.copytree(original / "t__0", copy / "t__0")
    paths = [original / "t__0", copy / "t__0"]
    ingest(paths, tmp_path / "lake", workers=1)
    shutil.rmtree(original / "t__0")
    dry = ingest(paths, tmp_path / "lake", workers=1, dry_run=True, prune=True)
    reads = _counting_reads(monkeypatch)
    ingest(paths, tmp_path / "lake", workers=1, prune=True)
    assert reads == {"trial": 1, "job": 1}
    assert dry.would_read == 2, dry.line()


@pytest.mark.parametrize(
    ("cwd", "path"),
    [("t__0", "."), ("t__0/agent", ".."), ("elsewhere", "alink/.."), ("elsewhere", "tlink")],
)
def test_a_trial_dir_given_as_dot_or_dot_dot_is_read_in_its_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cwd: str, path: str
) -> None:
    """`wmo-lake ingest .` inside a trial dir took the trial dir for its own job (pathlib's
    parent of '.' is '.'): another batch, and its result.json read as a job's. A link to the
    trial's agent/ then '..' is the trial dir (as the OS reads it, not the link's dir), and a
    link to the trial dir is in the trial's job, not in the link's dir."""
    runs = _tree(tmp_path, n_trials=1)
    job_dir = runs / "exp" / "harbor" / "step-0001" / "job"
    elsewhere = tmp_path / "elsewhere"
    write_trial(write_job(elsewhere / "other-job"), "x__9")  # (what a text '..' would reach)
    (elsewhere / "alink").symlink_to(job_dir / "t__0" / "agent")
    (elsewhere / "tlink").symlink_to(job_dir / "t__0")
    monkeypatch.chdir(elsewhere if cwd == "elsewhere" else job_dir / cwd)
    ingest([Path(path)], tmp_path / "lake", workers=1)
    query = "SELECT batch, job_key FROM trials"
    expected = [("exp/harbor/step-0001/job", f"job:{os.path.realpath(job_dir)}")]
    assert connect(tmp_path / "lake").execute(query).fetchall() == expected
    again = ingest([job_dir / "t__0"], tmp_path / "lake", workers=1)
    assert not again.committed, again.line()


def test_a_plain_ingest_says_the_trial_dirs_gone_that_it_keeps(tmp_path: Path) -> None:
    """harbor's job resume deletes a trial dir it runs again: a plain ingest keeps the lake's
    rows of the gone dir (--prune is opt-in), so the batch counted one trial more than is on
    disk without a word; the line now says how many such dirs it kept."""
    runs = _tree(tmp_path, n_trials=3)
    job_dir = runs / "exp" / "harbor" / "step-0001" / "job"
    shutil.copytree(job_dir / "t__2", job_dir / "t__3")  # (a dir whose result.json is unreadable)
    (job_dir / "t__3" / "result.json").unlink()
    ingest([runs], tmp_path / "lake", workers=1)
    shutil.rmtree(job_dir / "t__1")
    shutil.rmtree(job_dir / "t__3")
    kept = ingest([runs], tmp_path / "lake", workers=1)
    assert kept.gone_kept == 2, kept.line()
    assert "2 gone from disk but kept: --prune drops them" in kept.line()
    dry = ingest([runs], tmp_path / "lake", workers=1, dry_run=True)
    assert "2 trial dirs the lake holds are gone (kept without --prune" in dry.line()
    pruned = ingest([runs], tmp_path / "lake", workers=1, prune=True)
    assert pruned.pruned_trials == 2 and pruned.gone_kept == 0, pruned.line()
    assert "gone from disk" not in ingest([runs], tmp_path / "lake", workers=1).line()
    # a dir moved under the PATHs is read where it is now and its old entry dropped: none kept
    (job_dir / "t__0").rename(job_dir / "t__0-moved")
    moved = ingest([runs], tmp_path / "lake", workers=1)
    assert moved.trials_replaced == 1 and moved.gone_kept == 0, moved.line()


@pytest.mark.parametrize("path", ["runs/exp/harbor/step-0001/job/..", "tlink"])
def test_a_path_through_a_linked_step_dir_keeps_the_step_s_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """A step dir that is a link (the growth bench makes one): `job/..` resolved as a whole
    path lost the `<run>/harbor/step-N` its labels are read from, and a link to a trial dir in
    it too, so the step's trials moved to batch `job` (run and step NULL)."""
    job = write_job(tmp_path / "scratch" / "s1" / "job")
    write_trial(job, "t__0", trial_id="id-0")
    (tmp_path / "runs" / "exp" / "harbor").mkdir(parents=True)
    (tmp_path / "runs" / "exp" / "harbor" / "step-0001").symlink_to(tmp_path / "scratch" / "s1")
    (tmp_path / "tlink").symlink_to(
        tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job" / "t__0"
    )
    monkeypatch.chdir(tmp_path)
    ingest([Path("runs")], tmp_path / "lake", workers=1)
    again = ingest([Path(path)], tmp_path / "lake", workers=1)
    assert not again.committed, again.line()
    query = "SELECT batch, run, step FROM trials"
    assert connect(tmp_path / "lake").execute(query).fetchall() == [
        ("exp/harbor/step-0001/job", "exp", 1)
    ]


def test_trials_under_a_job_dir_that_cannot_be_searched_are_not_said_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job dir that cannot be listed or searched (chmod 000) hides its trials from the walk,
    which says so; they are on disk, so the line must not call them gone (nor point at
    --prune for them)."""
    runs = _tree(tmp_path, n_trials=2)
    other = write_job(runs / "exp" / "harbor" / "step-0001" / "job2")
    write_trial(other, "u__0", trial_id="u-0")
    ingest([runs], tmp_path / "lake", workers=1)
    job_dir = runs / "exp" / "harbor" / "step-0001" / "job"
    monkeypatch.setattr(os, "scandir", _refused(os.scandir, job_dir))
    real_lstat = os.lstat

    def lstat(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if os.fspath(path).startswith(f"{job_dir}/"):  # (no search permission on job/)
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", lstat)
    hidden = ingest([runs], tmp_path / "lake", workers=1)
    assert hidden.gone_kept == 0 and "gone from disk" not in hidden.line(), hidden.line()


def test_the_gone_count_takes_an_emptied_dir_and_only_the_steps_walked(tmp_path: Path) -> None:
    """A trial dir left empty holds no trial the walk finds, yet the lake keeps it: counted
    (an lstat of the dir alone called it on disk). A step deleted whole is no step walked: not
    counted, also when another change makes the ingest load that step's catalog."""
    runs = _tree(tmp_path, n_trials=2)
    step2 = write_job(runs / "exp" / "harbor" / "step-0002" / "job")
    write_trial(step2, "u__0", trial_id="u-0")
    ingest([runs], tmp_path / "lake", workers=1)
    job_dir = runs / "exp" / "harbor" / "step-0001" / "job"
    for child in (job_dir / "t__0").iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    shutil.rmtree(runs / "exp" / "harbor" / "step-0002")
    (job_dir / "t__1" / "result.json").write_text("{")  # (an unrelated change, read again)
    dry = ingest([runs], tmp_path / "lake", workers=1, dry_run=True)
    done = ingest([runs], tmp_path / "lake", workers=1)
    assert (dry.gone_kept, done.gone_kept) == (1, 1), (dry.line(), done.line())


def test_a_link_cycle_in_a_path_ends_at_once(tmp_path: Path) -> None:
    """Each '..' had a budget of its own for the links it follows: a link whose target goes
    back through itself took ~2^40 steps (the kernel counts the links of one lookup)."""
    import threading

    from wmo_lake.discover import as_the_os_reads

    (tmp_path / "fan").symlink_to("../" + tmp_path.name + "/fan/../fan")
    done: list[str] = []
    worker = threading.Thread(
        target=lambda: done.append(as_the_os_reads(str(tmp_path / "fan" / ".."))), daemon=True
    )
    worker.start()
    worker.join(timeout=10)
    assert done, "as_the_os_reads did not return"


def _ingest_summary(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@needs_permissions
@pytest.mark.parametrize("mode", [0o600, 0o000], ids=["listable", "closed"])
def test_a_trial_dir_that_cannot_be_searched_is_not_read_again_while_it_stays_so(
    tmp_path: Path, mode: int
) -> None:
    """A trial dir that cannot be searched: its agent/ dir could not be listed, which made its
    fingerprint new on every ingest, so each ingest of an unchanged tree committed a generation.
    Once it can be read again, it is."""
    runs = _tree(tmp_path, n_trials=2)
    lake = tmp_path / "lake"
    trial = runs / "exp" / "harbor" / "step-0001" / "job" / "t__0"
    trial.chmod(mode)
    try:
        first = _ingest_summary(run_cli("ingest", runs, "--lake", lake, "--json"))
        again = _ingest_summary(run_cli("ingest", runs, "--lake", lake, "--json"))
    finally:
        trial.chmod(0o755)
    assert first["unreadable_trials"] == 1 and first["committed"], first
    assert (again["committed"], again["unreadable_trials"]) == (False, 1), again
    assert again["problems"] == first["problems"] > 0, again
    (message,) = (
        connect(lake)
        .execute("SELECT message FROM problems WHERE kind = 'unreadable_trial'")
        .fetchall()[0]
    )
    # (re-running a trial this user may not read would not help)
    assert "readable and ingest again" in message and "re-run" not in message, message
    readable = _ingest_summary(run_cli("ingest", runs, "--lake", lake, "--json"))
    assert (readable["trials_new"], readable["problems"]) == (1, 0), readable


@needs_permissions
@pytest.mark.parametrize("prune", [False, True], ids=["ingest", "prune"])
def test_a_job_dir_read_as_a_trial_dir_leaves_no_problem_once_it_reads(
    tmp_path: Path, prune: bool
) -> None:
    """A job dir whose names can be listed but not searched is read as a trial dir (its
    config.json cannot be read to say it is a job's): a problem, committed once, not on every
    ingest. Once it can be searched again the walk finds it a job dir, and that problem must
    go: it stayed in the problems table while the summary counted none (and --prune, which
    also found it gone, dropped it twice: a KeyError)."""
    runs = _tree(tmp_path, n_trials=2)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    job = runs / "exp" / "harbor" / "step-0001" / "job"
    job.chmod(0o600)
    try:
        first = _ingest_summary(run_cli("ingest", runs, "--lake", lake, "--json"))
        again = _ingest_summary(run_cli("ingest", runs, "--lake", lake, "--json"))
    finally:
        job.chmod(0o755)
    assert first["committed"] and first["problems"] > 0, first
    assert (again["committed"], again["problems"]) == (False, first["problems"]), again
    readable = ingest([runs], lake, workers=1, prune=prune)
    assert readable.problems == 0, readable.line()
    assert connect(lake).execute("SELECT kind, path FROM problems").fetchall() == []
    assert _counts(lake)["trials"] == 2


@needs_permissions
def test_a_dry_run_prunes_no_job_dir_that_was_read_as_an_unreadable_trial(tmp_path: Path) -> None:
    """A job dir inside a job dir, listable but not searchable, is read as one of its trials,
    an unreadable one. Once searchable, the walk finds it a job dir and the real ingest --prune
    drops that entry without calling it pruned; the dry run said it would prune it."""
    runs = _tree(tmp_path, n_trials=2)
    lake = tmp_path / "lake"
    inner = write_job(runs / "exp" / "harbor" / "step-0001" / "job" / "inner")
    write_trial(inner, "i__0", trial_id="inner-i-0")
    ingest([runs], lake, workers=1)
    inner.chmod(0o600)
    try:
        shut = _ingest_summary(run_cli("ingest", runs, "--lake", lake, "--json"))
    finally:
        inner.chmod(0o755)
    assert shut["unreadable_trials"] == 1, shut
    dry = ingest([runs], lake, workers=1, prune=True, dry_run=True)
    real = ingest([runs], lake, workers=1, prune=True)
    assert (real.pruned_trials, real.pruned, real.unreadable_trials) == (0, [], 0), real.line()
    assert (dry.pruned_trials, dry.pruned) == (0, []), dry.line()
