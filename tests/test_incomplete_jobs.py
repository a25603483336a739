"""Steps the lake holds a part of (`wmo_lake/incomplete_jobs.py`). A harbor job not finished
(still running, or stopped by a kill or Ctrl-C): harbor writes the job's result.json when the
job starts and sets finished_at at its end, and upstream's scorer refuses a job without it
(`scorer.py` `_project`: "harbor job did not finish"). A finished job the lake holds fewer
trials of than it plans (below). The lake reads what is there; `stats`, `compare`, `report` and
the exports say the figures are of a part of the step, never show them as a whole step."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import FIXTURES
from edge_case_trees import write_unreadable_trial
from harbor_shapes import write_job, write_trial
from unprivileged import needs_permissions, run_cli

import wmo_lake as wl
from wmo_lake.checks import ShortJobWarning, UnfinishedJobWarning
from wmo_lake.cli import cli
from wmo_lake.ingest import ingest

DONE = "exp/harbor/step-0001/job"
STOPPED = "exp/harbor/step-0002/job"
OTHER = "base/harbor/step-0001/job"


def stop(job_dir: Path, planned: int) -> None:
    """The job's result.json as harbor leaves it when the job is killed: no finished_at."""
    path = job_dir / "result.json"
    result = json.loads(path.read_text())
    result.update(finished_at=None, n_total_trials=planned)
    path.write_text(json.dumps(result, indent=4))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("unfinished") / "runs"
    for batch in (DONE, OTHER):
        done = write_job(root / batch)
        write_trial(done, "t__1", reward=1.0)
    stopped = write_job(root / STOPPED)
    write_trial(stopped, "t__1", reward=1.0)
    write_trial(stopped, "t__2", reward=0.0)
    write_unreadable_trial(stopped, "t__3", "missing")  # cut off mid-write
    stop(stopped, planned=8)
    lake = root.parent / "lake"
    ingest([root], lake, workers=1)
    return lake


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def test_stats_says_which_step_harbor_has_not_finished(lake: Path) -> None:
    result = run("stats", "--lake", str(lake), "--notes", "full")
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stdout.splitlines() if "has not finished" in line]
    job_dir = lake.parent / "runs" / STOPPED
    assert notes == [
        f"note: {STOPPED}: harbor has not finished its job: its result.json records no "
        "finished_at. The lake holds 2 trial(s) and 1 unreadable dir(s) of the 8 it plans, and "
        "upstream's scorer refuses a job that did not finish, so these figures are of the "
        "trials written so far. Finish or resume it, then ingest it again: `harbor job resume "
        f"-p {shlex.quote(str(job_dir.resolve()))}`, or the same `wmo-lake collect` command"
    ]


def test_stats_of_finished_steps_says_nothing_of_it(lake: Path) -> None:
    result = run("stats", "--lake", str(lake), "--run", "base")
    assert result.exit_code == 0, result.output
    assert "has not finished" not in result.output


UNFINISHED_WARNING = (
    f"warning: 1 batch(es) in scope come from a harbor job that has not finished (its "
    f"result.json records no finished_at, or was cut off): {STOPPED}; what the lake holds "
    "of them is the trials written so far, a part of the step"
)


@pytest.mark.parametrize("form", [("--json",), ("--by", "task"), ("--by", "task", "--json")])
def test_stats_without_its_notes_warns_on_stderr(lake: Path, form: tuple[str, ...]) -> None:
    """--json and --by task print no notes: the warning says it, and stdout stays the data."""
    result = run("stats", "--lake", str(lake), *form)
    assert result.exit_code == 0, result.output
    assert UNFINISHED_WARNING in result.stderr
    assert "has not finished" not in result.stdout
    if "--json" in form:
        json.loads(result.stdout)
    finished = run("stats", "--lake", str(lake), "--run", "base", *form)
    assert finished.exit_code == 0 and "has not finished" not in finished.stderr


def test_stats_table_says_it_once_in_its_notes(lake: Path) -> None:
    result = run("stats", "--lake", str(lake))
    assert result.exit_code == 0, result.output
    assert "has not finished" not in result.stderr and "has not finished" in result.stdout


@pytest.mark.parametrize("form", [(), ("--json",)])
def test_stats_strict_exits_1_for_a_step_not_finished(lake: Path, form: tuple[str, ...]) -> None:
    stopped = run("stats", "--lake", str(lake), "--strict", *form)
    assert stopped.exit_code == 1
    assert run("stats", "--lake", str(lake), "--strict", "--run", "base", *form).exit_code == 0
    # a narrowing that leaves the stopped step out leaves its warning out too
    assert run("stats", "--lake", str(lake), "--strict", "--steps", ":1", *form).exit_code == 0


def test_python_stats_warns(lake: Path, recwarn: pytest.WarningsRecorder) -> None:
    with pytest.warns(UnfinishedJobWarning, match=f"or was cut off\\): {STOPPED};"):
        rows = wl.stats(lake)
    assert STOPPED in rows["batch"].to_list()
    recwarn.clear()
    wl.stats(lake, run="base")
    assert not [w for w in recwarn if issubclass(w.category, UnfinishedJobWarning)]


def test_compare_warns_of_a_side_with_an_unfinished_step(lake: Path) -> None:
    result = run("compare", "--lake", str(lake), "base", "exp")
    assert result.exit_code == 0, result.output
    assert (
        f"warning: 1 batch(es) in scope come from a harbor job that has not finished (its "
        f"result.json records no finished_at, or was cut off): {STOPPED}; what the lake holds "
        "of them is the trials written so far, a part of the step"
    ) in result.stderr
    finished = run("compare", "--lake", str(lake), "base", DONE)
    assert finished.exit_code == 0, finished.output
    assert "has not finished" not in finished.stderr


def test_report_marks_the_page_and_warns(lake: Path, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    result = run("report", "--lake", str(lake), "--out", str(page))
    assert result.exit_code == 0, result.output
    assert "has not finished" in result.stderr
    html = page.read_text()
    assert (
        "<p class='warn'>1 batch(es) come from a harbor job that has not finished (its "
        "result.json records no finished_at, or was cut off), so their points are of the trials "
        f"written so far: {STOPPED}."
    ) in html
    finished = tmp_path / "base.html"
    result = run("report", "--lake", str(lake), "--out", str(finished), "--run", "base")
    assert result.exit_code == 0, result.output
    assert "class='warn'" not in finished.read_text() and "has not finished" not in result.stderr


def test_export_datums_warns_and_strict_writes_nothing(lake: Path, tmp_path: Path) -> None:
    """A step cut short trains on partial task groups (advantages centred over the trials
    written so far): the export says so, and --strict stops it before anything is written."""
    out = tmp_path / "d.parquet"
    args = ("export", "datums", "--lake", str(lake), "--out", str(out), "--no-split-guard")
    result = run(*args)
    assert result.exit_code == 0, result.output
    assert (
        f"come from a harbor job that has not finished (its result.json records no "
        f"finished_at, or was cut off): {STOPPED};" in result.stderr
    )
    assert out.exists()
    strict = tmp_path / "strict.parquet"
    stopped = run(*args[:4], "--out", str(strict), "--no-split-guard", "--strict")
    assert stopped.exit_code == 1 and "--strict: nothing was written" in stopped.stderr
    assert not strict.exists()
    base = tmp_path / "base.parquet"
    finished = run(*args[:4], "--out", str(base), "--no-split-guard", "--run", "base")
    assert finished.exit_code == 0 and "has not finished" not in finished.stderr


def test_python_export_warns(lake: Path, tmp_path: Path) -> None:
    with pytest.warns(UnfinishedJobWarning, match=f"or was cut off\\): {STOPPED};"):
        wl.export_datums(lake, tmp_path / "d.parquet", no_split_guard=True, batch="exp/*")


def test_a_job_result_cut_off_mid_write_is_unfinished(tmp_path: Path) -> None:
    """harbor rewrites the job's result.json in place as trials end: a kill can cut it off."""
    job = write_job(tmp_path / "runs" / STOPPED)
    write_trial(job, "t__1", reward=1.0)
    (job / "result.json").write_text('{"id": "x", "started_at": "2026-')
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = run("stats", "--lake", str(tmp_path / "lake"))
    assert (
        f"note: {STOPPED}: harbor has not finished its job: its result.json could not be read "
        "(a kill cuts it off mid-write). The lake holds 1 trial(s), and" in result.stdout
    )


def test_the_row_of_a_job_dir_that_moved_is_not_an_unfinished_job(tmp_path: Path) -> None:
    """Ingested while running, then finished and moved: the old dir's row (no finished_at, no
    trial any more) is no unfinished job of the batch, and does not count its planned trials."""
    job = write_job(tmp_path / "first" / STOPPED)
    write_trial(job, "t__1", reward=1.0)
    stop(job, planned=2)
    ingest([tmp_path / "first"], tmp_path / "lake", workers=1)
    running = run("stats", "--lake", str(tmp_path / "lake"))
    assert "holds 1 trial(s) of the 2 it plans" in running.stdout
    write_trial(job, "t__2", reward=0.0)
    finished = json.loads((job / "result.json").read_text())
    finished.update(finished_at="2026-12-01T00:10:00Z")
    (job / "result.json").write_text(json.dumps(finished))
    (tmp_path / "first").rename(tmp_path / "moved")
    ingest([tmp_path / "moved"], tmp_path / "lake", workers=1)
    result = run("stats", "--lake", str(tmp_path / "lake"))
    assert "2 job dirs carry this batch label" in result.stdout  # (the moved dir, said)
    assert "has not finished" not in result.output
    args = ("export", "datums", "--lake", str(tmp_path / "lake"), "--no-split-guard", "--strict")
    exported = run(*args, "--out", str(tmp_path / "d.parquet"))
    assert exported.exit_code == 0 and "has not finished" not in exported.stderr


def test_short_notes_keep_each_resume_command_whole(tmp_path: Path) -> None:
    """The short notes range a number across batches and drop a parenthesis holding a digit:
    done to a command's path, it names a dir that does not exist ('runs (2)/...step-0001..0002')."""
    root = tmp_path / "runs (2)"
    for step in (1, 2):
        job = write_job(root / f"exp/harbor/step-000{step}/job")
        write_trial(job, "t__1", reward=1.0)
        stop(job, planned=4)
    ingest([root], tmp_path / "lake", workers=1)
    result = run("stats", "--lake", str(tmp_path / "lake"))
    commands = re.findall(r"`harbor job resume -p ([^`]*)`", result.stdout)
    expected = [root.resolve() / f"exp/harbor/step-000{step}/job" for step in (1, 2)]
    assert [Path(shlex.split(command)[0]) for command in commands] == expected


@pytest.mark.parametrize("trials", ["none", "unreadable"])
def test_a_killed_job_pooled_with_a_finished_one_is_unfinished(tmp_path: Path, trials: str) -> None:
    """Two run trees with one run name pool a step; the second's job was killed before any
    trial ended (harbor writes a trial's result.json at its end), or with its one trial dir
    half-written. Its dir is on disk, so it is no moved dir: the step is unfinished."""
    done = write_job(tmp_path / "a" / STOPPED)
    write_trial(done, "t__1", reward=1.0, trial_id="a-1")
    killed = write_job(tmp_path / "b" / STOPPED)
    stop(killed, planned=4)
    if trials == "unreadable":
        write_unreadable_trial(killed, "t__9", "truncated")
    ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "lake", workers=1)
    result = run("stats", "--lake", str(tmp_path / "lake"), "--notes", "full")
    [note] = [line for line in result.stdout.splitlines() if "has not finished" in line]
    assert f"resume -p {shlex.quote(str(killed.resolve()))}`" in note
    assert " of the 5 it plans" in note  # (the finished job's 1 and the killed one's 4)
    args = ("export", "datums", "--lake", str(tmp_path / "lake"), "--no-split-guard", "--strict")
    assert run(*args, "--out", str(tmp_path / "d.parquet")).exit_code == 1


# A finished job the lake holds fewer trials of than it plans: trial dirs removed after the run
# (upstream's scorer prunes invalid ones before a resume), not ingested, or held by another dir.
# Upstream gives no figures for it ("harbor returned N trials; expected M"). Real harbor jobs have
# an id of their own each; the hand-made ones copy one real result.json, so `plan` sets it.
KIT_JOB = FIXTURES / "harbor" / "kit-e2e"


def plan(job_dir: Path, planned: int, job_id: str | None = None) -> None:
    """The finished job's result.json planning `planned` trials (the template's job plans 1)."""
    path = job_dir / "result.json"
    result = json.loads(path.read_text())
    assert result["finished_at"] is not None
    result.update(n_total_trials=planned, id=job_id or result["id"])
    path.write_text(json.dumps(result, indent=4))


def finished_job(
    root: Path,
    planned: int,
    trials: int,
    unreadable: int = 0,
    batch: str = DONE,
    job_id: str | None = None,
) -> Path:
    job = write_job(root / batch)
    for n in range(1, trials + 1):
        write_trial(job, f"t__{n}", reward=float(n % 2), trial_id=f"{root.name}-{n}")
    for n in range(unreadable):
        write_unreadable_trial(job, f"u__{n}", "missing")
    plan(job, planned, job_id)
    return job


def short_notes(lake: Path, *args: str) -> list[str]:
    result = run("stats", "--lake", str(lake), "--notes", "full", *args)
    assert result.exit_code == 0, result.output
    return [line for line in result.stdout.splitlines() if "trials it plans" in line]


def test_a_finished_job_short_of_its_trials_is_said(tmp_path: Path) -> None:
    job = finished_job(tmp_path / "runs", planned=6, trials=3, unreadable=1)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert short_notes(tmp_path / "lake") == [
        f"note: {DONE}: its harbor job finished, but the lake holds 3 trial(s) and 1 unreadable "
        "dir(s) of the 6 trials it plans: 2 trial dir(s) are gone from its job dir (removed "
        "after the run): to run them again, resume the job and ingest it again: `harbor job "
        f"resume -p {shlex.quote(str(job.resolve()))}`, or the same `wmo-lake collect` command. "
        "Upstream's scorer would not score the step as it is (scoring it again resumes the "
        "job), so these figures are of a part of it"
    ]


def test_a_real_harbor_job_with_trial_dirs_removed_is_said(tmp_path: Path) -> None:
    """harbor's own job dir (6 trials, finished), two trial dirs removed after the run."""
    job = tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "kit-e2e"
    shutil.copytree(KIT_JOB, job)
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    assert short_notes(lake) == []
    for trial in sorted(p for p in job.iterdir() if p.is_dir())[:2]:
        shutil.rmtree(trial)
    assert run("ingest", str(tmp_path / "runs"), "--lake", str(lake), "--prune").exit_code == 0
    [note] = short_notes(lake)
    assert "the lake holds 4 trial(s) of the 6 trials it plans: 2 trial dir(s) are gone" in note


def resume(job: Path, trial: Path, new_name: str) -> None:
    """What `harbor job resume` leaves after running `trial` again: its dir deleted, the task's
    new trial in a dir of its own (a new trial id)."""
    rerun = job / new_name
    shutil.copytree(trial, rerun)
    shutil.rmtree(trial)
    result = json.loads((rerun / "result.json").read_text())
    result.update(id="00000000-0000-4000-8000-000000000001", trial_name=new_name)
    (rerun / "result.json").write_text(json.dumps(result, indent=4))


def test_a_resumed_job_whose_deleted_trial_the_lake_kept_is_said(tmp_path: Path) -> None:
    """harbor's own job dir (6 trials, finished), one trial run again by a resume: an ingest
    without --prune keeps the deleted trial, so the lake holds 7 trials of the job where
    upstream's scorer scores the 6 of the job dir ("harbor returned 7 trials; expected 6" had it
    been given all seven). Said by stats' notes, its --strict, the other commands' warning."""
    job = tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "kit-e2e"
    shutil.copytree(KIT_JOB, job)
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    resume(job, sorted(p for p in job.iterdir() if p.is_dir())[0], "rerun__1")
    assert run("ingest", str(tmp_path / "runs"), "--lake", str(lake)).exit_code == 0
    [note] = [line for line in short_notes(lake)]
    assert note == (
        f"note: {DONE.rsplit('/', 1)[0]}/kit-e2e: its harbor job finished, and the lake holds "
        "7 trial(s) of the 6 trials it plans: 1 of them are trials whose dirs are gone from its "
        "job dir (removed after the run: harbor's job resume deletes a trial dir it runs "
        "again), kept without --prune and counted in these figures, where upstream's scorer "
        "scores the job dir as it is. Drop them: `wmo-lake ingest --prune "
        f"{shlex.quote(str(job.resolve()))}`"
    )
    assert run("stats", "--lake", str(lake), "--strict").exit_code == 1
    as_json = run("stats", "--lake", str(lake), "--json")
    assert "1 batch(es) in scope hold more trials of a finished harbor job than it plans" in (
        as_json.stderr
    )
    with pytest.warns(ShortJobWarning, match="trials whose dirs are gone from its job dir"):
        wl.stats(lake)
    assert run("ingest", str(tmp_path / "runs"), "--lake", str(lake), "--prune").exit_code == 0
    assert short_notes(lake) == []
    assert run("stats", "--lake", str(lake), "--strict").exit_code == 0


def test_the_prune_the_note_advises_keeps_the_batch_label(tmp_path: Path) -> None:
    """Under no `<run>/harbor/`, a job dir given as the PATH labels its batch by its own name:
    the note's `ingest --prune JOB_DIR` relabelled `exp/kit-e2e` as `kit-e2e`. It names the dir
    the label is relative to, so following it prunes the trial and keeps the batch."""
    job = tmp_path / "runs" / "exp" / "kit-e2e"
    shutil.copytree(KIT_JOB, job)
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    resume(job, sorted(p for p in job.iterdir() if p.is_dir())[0], "rerun__1")
    ingest([tmp_path / "runs"], lake, workers=1)
    [note] = short_notes(lake)
    command = note[note.index("`wmo-lake ingest --prune ") + 1 : -1]
    assert command == f"wmo-lake ingest --prune {shlex.quote(str((tmp_path / 'runs').resolve()))}"
    assert run(*shlex.split(command)[1:], "--lake", str(lake)).exit_code == 0
    assert short_notes(lake) == []
    rows = json.loads(run("stats", "--lake", str(lake), "--json").stdout)
    assert [(row["batch"], row["trials"]) for row in rows] == [("exp/kit-e2e", 6)]


def test_more_trials_than_planned_with_every_dir_there_says_nothing(tmp_path: Path) -> None:
    """Hand-made trees copy one real result.json, so a job may hold more trial dirs than it
    plans: with every dir of them on disk, nothing is gone and nothing is said."""
    finished_job(tmp_path / "runs", planned=2, trials=4)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert short_notes(tmp_path / "lake") == []


@needs_permissions
def test_a_trial_dir_this_user_may_not_search_is_not_gone(tmp_path: Path) -> None:
    """A job planning 2 holds 3 trials, all on disk, one dir of mode 000: its files could not be
    looked at, so it counted as gone, with a note advising a --prune that would drop it."""
    job = finished_job(tmp_path / "runs", planned=2, trials=3)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    (job / "t__3").chmod(0)
    try:
        result = run_cli("stats", "--lake", tmp_path / "lake", "--notes", "full", "--strict")
    finally:
        (job / "t__3").chmod(0o755)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gone" not in result.stdout


def test_a_copy_of_a_run_tree_is_the_same_job_not_a_short_one(tmp_path: Path) -> None:
    """A backup copy under the same run name pools its step with the original: both dirs hold
    one harbor job (one id), whose 6 trials the lake holds once."""
    job = tmp_path / "data" / "exp" / "harbor" / "step-0001" / "kit-e2e"
    shutil.copytree(KIT_JOB, job)
    lake = tmp_path / "lake"
    ingest([tmp_path / "data"], lake, workers=1)
    shutil.copytree(tmp_path / "data", tmp_path / "scratch")
    ingest([tmp_path / "scratch"], lake, workers=1)
    assert short_notes(lake) == []
    args = ("export", "datums", "--lake", str(lake), "--no-split-guard", "--strict")
    assert run(*args, "--out", str(tmp_path / "d.parquet")).exit_code == 0


def test_a_job_dir_that_moved_and_is_gone_plans_its_trials_once(tmp_path: Path) -> None:
    """Ingested, moved and ingested again without --prune, then both places gone from this
    machine (the lake copied away): the two rows are one job."""
    finished_job(tmp_path / "first", planned=2, trials=2)
    ingest([tmp_path / "first"], tmp_path / "lake", workers=1)
    (tmp_path / "first").rename(tmp_path / "moved")
    ingest([tmp_path / "moved"], tmp_path / "lake", workers=1)
    assert short_notes(tmp_path / "lake") == []
    shutil.rmtree(tmp_path / "moved")
    assert short_notes(tmp_path / "lake") == []


def test_a_copy_taken_mid_run_is_the_same_job_finished_since(tmp_path: Path) -> None:
    """A backup of the run tree taken while the job ran (no finished_at, 3 of 6 trials), then
    the job finished in place: one harbor job, finished, whole."""
    job = write_job(tmp_path / "runs" / DONE)
    for n in range(1, 4):
        write_trial(job, f"t__{n}", reward=1.0, trial_id=f"t-{n}")
    stop(job, planned=6)
    shutil.copytree(tmp_path / "runs", tmp_path / "backup")
    for n in range(4, 7):
        write_trial(job, f"t__{n}", reward=0.0, trial_id=f"t-{n}")
    finished = json.loads((job / "result.json").read_text())
    finished.update(finished_at="2026-12-01T00:10:00Z")
    (job / "result.json").write_text(json.dumps(finished))
    ingest([tmp_path / "runs", tmp_path / "backup"], tmp_path / "lake", workers=1)
    result = run("stats", "--lake", str(tmp_path / "lake"), "--notes", "full", "--strict")
    assert result.exit_code == 0, result.output
    assert "has not finished" not in result.stdout and "trials it plans" not in result.stdout


def test_a_dir_in_the_job_dir_that_is_no_trial_dir_is_not_counted(tmp_path: Path) -> None:
    """Only a dir holding harbor's result.json or config.json is a trial dir left on disk."""
    job = finished_job(tmp_path / "runs", planned=4, trials=4)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    (job / "sinks").mkdir()
    (job / "sinks" / "t__1.jsonl").write_text("{}\n")
    shutil.rmtree(job / "t__3")
    shutil.rmtree(job / "t__4")
    args = ("ingest", str(tmp_path / "runs"), "--lake", str(tmp_path / "lake"), "--prune")
    assert run(*args).exit_code == 0
    [note] = short_notes(tmp_path / "lake")
    assert "of the 4 trials it plans: 2 trial dir(s) are gone from its job dir" in note
    assert "not counted" not in note


def test_trial_dirs_not_ingested_are_said_as_such(tmp_path: Path) -> None:
    """One trial dir of a finished 6-trial job ingested by its own path: the other five are on
    disk, so resuming would run nothing; ingesting the job dir counts them."""
    job = tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "kit-e2e"
    shutil.copytree(KIT_JOB, job)
    lake = tmp_path / "lake"
    first = sorted(p for p in job.iterdir() if p.is_dir())[0]
    assert run("ingest", str(first), "--lake", str(lake)).exit_code == 0
    [note] = short_notes(lake)
    assert (
        "the lake holds 1 trial(s) of the 6 trials it plans: 5 trial dir(s) in its job dir are "
        f"not counted in this batch: not ingested (`wmo-lake ingest {shlex.quote(str(job))}`)"
    ) in note
    assert "resume" not in note.split("Upstream")[0]
    assert run("ingest", str(job), "--lake", str(lake)).exit_code == 0
    assert short_notes(lake) == []


def test_a_job_dir_not_on_this_machine_is_said_as_unknown(tmp_path: Path) -> None:
    job = finished_job(tmp_path / "runs", planned=4, trials=2)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    shutil.rmtree(tmp_path / "runs")
    [note] = short_notes(tmp_path / "lake")
    assert (
        f"the lake holds 2 trial(s) of the 4 trials it plans: its job dir "
        f"`{shlex.quote(str(job.resolve()))}` is not on this machine (or cannot be listed), so "
        "the lake cannot tell"
    ) in note


def test_each_job_of_a_pooled_batch_is_checked_on_its_own(tmp_path: Path) -> None:
    """Two run trees pool a step. Tree a is whole and holds one more trial than it plans; tree
    b lost a trial dir. The note names b's job dir, and a's surplus does not hide b's loss."""
    finished_job(tmp_path / "a", planned=2, trials=3, job_id="job-a")
    b = finished_job(tmp_path / "b", planned=3, trials=3, job_id="job-b")
    shutil.rmtree(b / "t__3")
    ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "lake", workers=1)
    [note] = short_notes(tmp_path / "lake")
    assert "the lake holds 2 trial(s) of the 3 trials it plans: 1 trial dir(s) are gone" in note
    assert f"resume -p {shlex.quote(str(b.resolve()))}`" in note


@pytest.mark.parametrize(("planned", "trials"), [(3, 3), (1, 3), (0, 2)])
def test_a_finished_job_holding_its_trials_says_nothing(
    tmp_path: Path, planned: int, trials: int
) -> None:
    """As many trials as planned, or more (hand-made trees copy a real job planning 1)."""
    finished_job(tmp_path / "runs", planned=planned, trials=trials)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert short_notes(tmp_path / "lake") == []


def test_an_empty_finished_job_has_the_empty_batch_note_alone(tmp_path: Path) -> None:
    finished_job(tmp_path / "runs", planned=4, trials=0)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = run("stats", "--lake", str(tmp_path / "lake"), "--notes", "full")
    assert "empty batch" in result.stdout and "trials it plans" not in result.stdout


def test_a_killed_job_beside_a_finished_one_has_the_unfinished_note_alone(tmp_path: Path) -> None:
    finished_job(tmp_path / "a", planned=4, trials=1)
    killed = write_job(tmp_path / "b" / DONE)
    stop(killed, planned=4)
    ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "lake", workers=1)
    result = run("stats", "--lake", str(tmp_path / "lake"), "--notes", "full")
    assert "has not finished" in result.stdout and "trials it plans" not in result.stdout


SHORT = f"come from a finished harbor job the lake holds fewer trials of than it plans: {DONE};"


def test_stats_json_and_python_warn_of_a_job_short_of_its_trials(tmp_path: Path) -> None:
    finished_job(tmp_path / "runs", planned=6, trials=3)
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    result = run("stats", "--lake", str(lake), "--json")
    assert result.exit_code == 0 and f"warning: 1 batch(es) in scope {SHORT}" in result.stderr
    assert [row["trials"] for row in json.loads(result.stdout)] == [3]
    assert SHORT not in run("stats", "--lake", str(lake)).stderr  # (the table's note says it)
    assert run("stats", "--lake", str(lake), "--json", "--strict").exit_code == 1
    with pytest.warns(ShortJobWarning, match=SHORT):
        wl.stats(lake)


def test_no_short_job_warning_for_a_whole_or_empty_job(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    finished_job(tmp_path / "runs", planned=3, trials=3)
    finished_job(tmp_path / "runs", planned=3, trials=0, batch=STOPPED)
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    result = run("stats", "--lake", str(lake), "--json", "--strict")
    assert result.exit_code == 0 and "fewer trials" not in result.stderr, result.stderr
    wl.stats(lake)
    assert not [w for w in recwarn if issubclass(w.category, ShortJobWarning)]


@pytest.fixture(scope="module")
def short_lake(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("short")
    finished_job(root / "runs", planned=6, trials=3)
    finished_job(root / "runs", planned=2, trials=2, batch=OTHER)
    ingest([root / "runs"], root / "lake", workers=1)
    return str(root / "lake")


def test_compare_warns_of_a_job_short_of_its_trials(short_lake: str) -> None:
    compared = run("compare", "--lake", short_lake, "base", "exp")
    assert compared.exit_code == 0 and SHORT in compared.stderr, compared.output
    whole = run("compare", "--lake", short_lake, "base", OTHER)
    assert whole.exit_code == 0 and "fewer trials" not in whole.stderr


def test_report_marks_a_job_short_of_its_trials(short_lake: str, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    reported = run("report", "--lake", short_lake, "--out", str(page))
    assert reported.exit_code == 0 and SHORT in reported.stderr
    assert (
        "<p class='warn'>1 batch(es) come from a finished harbor job the lake holds fewer trials "
        "of than it plans (trial dirs removed after the run, not ingested, or held by another "
        f"dir), so their points are of a part of the step: {DONE}."
    ) in page.read_text()


def test_exports_say_a_job_short_of_its_trials(short_lake: str, tmp_path: Path) -> None:
    args = ("export", "datums", "--lake", short_lake, "--no-split-guard")
    exported = run(*args, "--out", str(tmp_path / "d.parquet"))
    assert exported.exit_code == 0 and SHORT in exported.stderr
    strict = run(*args, "--out", str(tmp_path / "s.parquet"), "--strict")
    assert strict.exit_code == 1 and not (tmp_path / "s.parquet").exists()
    whole = run(*args, "--out", str(tmp_path / "b.parquet"), "--strict", "--run", "base")
    assert whole.exit_code == 0 and "fewer trials" not in whole.stderr, whole.output


def test_python_export_warns_of_a_job_short_of_its_trials(short_lake: str, tmp_path: Path) -> None:
    with pytest.warns(ShortJobWarning, match=SHORT):
        wl.export_datums(short_lake, tmp_path / "p.parquet", no_split_guard=True)
