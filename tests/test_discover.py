"""Discovery: trial dirs at any depth, batch/run/step labels, unreadable trials, symlink loops,
and paths no SQL quoting could survive."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import ingested_rows
from harbor_shapes import dump, write_job, write_trial

from wmo_lake.discover import discover, job_labels
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.tidy import forget


def test_collector_layout_labels(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "exp-1" / "harbor" / "step-0007" / "job-a")
    write_trial(job, "t__1")
    ingest([tmp_path / "runs"], tmp_path / "lake")
    rows = connect(tmp_path / "lake").execute("SELECT batch, run, step FROM trials").fetchall()
    assert rows == [("exp-1/harbor/step-0007/job-a", "exp-1", 7)]
    jobs = connect(tmp_path / "lake").execute("SELECT batch, run, step FROM jobs").fetchall()
    assert jobs == rows


def test_a_step_past_64_bits_is_null_and_a_problem(tmp_path: Path) -> None:
    """collect_rollouts names step dirs f"step-{i:04d}" from an unbounded int: a step no int64
    holds labels nothing (one problem), and the batch beside it is ingested as ever."""
    huge = "step-" + "9" * 20  # 10^20 - 1 > 2^63 - 1
    assert job_labels(Path(f"/r/x/harbor/{huge}/j"), Path("/r")) == (
        f"x/harbor/{huge}/j",
        "x",
        None,
    )
    assert job_labels(Path(f"/r/{huge}/j"), Path("/r")) == (f"{huge}/j", None, None)
    write_trial(
        write_job(tmp_path / "runs" / "x" / "harbor" / "step-0001" / "j"), "a__1", trial_id="a"
    )
    write_trial(write_job(tmp_path / "runs" / "x" / "harbor" / huge / "j"), "b__1", trial_id="b")
    summary = ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert summary.trials_new == 2
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT trial_key, step FROM trials ORDER BY 1").fetchall() == [
        ("a", 1),
        ("b", None),
    ]
    problems = con.execute("SELECT kind, path, message FROM problems").fetchall()
    assert [(kind, path) for kind, path, _ in problems] == [
        ("out_of_range", str(tmp_path / "runs" / "x" / "harbor" / huge / "j"))
    ]
    assert huge in problems[0][2]


def test_batch_is_the_job_dir_name_when_path_is_the_job_dir(tmp_path: Path) -> None:
    job = write_job(tmp_path / "somewhere" / "my-job")
    write_trial(job, "t__1")
    ingest([job], tmp_path / "lake")
    rows = connect(tmp_path / "lake").execute("SELECT batch, run, step FROM trials").fetchall()
    assert rows == [("my-job", None, None)]


@pytest.mark.parametrize(
    ("job_dir", "path", "labels"),
    [
        ("/d/expA/step-0001/job", "/d/expA/step-0001", ("step-0001/job", None, 1)),
        ("/d/expA/step-0002/job", "/d/expA/step-0002/job", ("step-0002/job", None, 2)),
        ("/d/step-5/runs/exp/job", "/d/step-5/runs", ("exp/job", None, 5)),
        ("/d/expA/step-0001", "/d/expA/step-0001", ("step-0001", None, 1)),
    ],
)
def test_a_step_dir_given_as_path_starts_the_label(
    job_dir: str, path: str, labels: tuple[str, None, int]
) -> None:
    """A step dir outside any `<run>/harbor/` given as the PATH (or a job dir in one) labelled
    its job dirs from below it: `job`, for every step given so. The step dir starts the label;
    a step dir further up labels as before (the PATH's own layout is the label)."""
    assert job_labels(Path(job_dir), Path(path)) == labels


def test_labels_without_harbor_or_step() -> None:
    assert job_labels(Path("/data/a/b/job"), Path("/data")) == ("a/b/job", None, None)
    assert job_labels(Path("/r/x/harbor/step-0012/j"), Path("/r")) == (
        "x/harbor/step-0012/j",
        "x",
        12,
    )
    # A job under <run>/harbor/step-NNNN/ is labelled from its run dir whatever PATH was given
    # (the collector ingests one job dir; `ingest runs/` must give the same batch).
    for path in ("/r/x/harbor", "/r/x/harbor/step-0002", "/r/x/harbor/step-0002/j", "/r/x"):
        assert job_labels(Path("/r/x/harbor/step-0002/j"), Path(path)) == (
            "x/harbor/step-0002/j",
            "x",
            2,
        )
    assert job_labels(Path("/r/x/harbor/step-0002/a/j"), Path("/r/x/harbor/step-0002/a")) == (
        "x/harbor/step-0002/a/j",
        "x",
        2,
    )
    # a job dir that is the step dir itself is labelled from its run dir too
    for path in ("/r", "/r/x/harbor/step-0004"):
        assert job_labels(Path("/r/x/harbor/step-0004"), Path(path)) == (
            "x/harbor/step-0004",
            "x",
            4,
        )
    # a `harbor` dir not followed by step-NNNN is no anchor
    assert job_labels(Path("/r/x/harbor/j"), Path("/r")) == ("x/harbor/j", "x", None)
    # under an anchor, a job dir named like a step or `harbor` (a template's job_name) labels
    # nothing: run and step are the anchor's
    for job in ("step-0009", "harbor", "harbor/step-0009"):
        assert job_labels(Path(f"/r/x/harbor/step-0003/{job}"), Path("/r")) == (
            f"x/harbor/step-0003/{job}",
            "x",
            3,
        )


@pytest.mark.parametrize("name", ["step-\u0663", "step-0003\n", "step-\uff13"])
def test_a_step_is_ascii_digits_only(name: str) -> None:
    """`step-` and ASCII digits, the whole name: an Arabic-Indic or full-width digit, or a
    trailing newline, is no step number (int() would read both digit forms as 3)."""
    assert job_labels(Path(f"/r/{name}/j"), Path("/r")) == (f"{name}/j", None, None)
    assert job_labels(Path(f"/r/x/harbor/{name}/j"), Path("/r")) == (
        f"x/harbor/{name}/j",
        "x",
        None,
    )


def test_any_depth_and_trial_dirs_are_not_searched_further(tmp_path: Path) -> None:
    deep = write_job(tmp_path / "a" / "b" / "c" / "d" / "job")
    write_trial(deep, "deep__1")
    shallow = write_job(tmp_path / "job2")
    write_trial(shallow, "shallow__1")
    found = discover(tmp_path)
    names = sorted(c.path.name for c in found.candidates if c.trial_shaped_config)
    assert names == ["deep__1", "shallow__1"]


def test_unreadable_trial_is_counted_not_stored(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    write_trial(job, "good__1")
    broken = write_trial(job, "broken__1")
    (broken / "result.json").unlink()
    summary = ingest([tmp_path], tmp_path / "lake")
    assert (summary.trials_new, summary.unreadable_trials) == (1, 1)
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT trial_name FROM trials").fetchall() == [("good__1",)]
    problems = con.execute("SELECT kind, batch, trial_name, message FROM problems").fetchall()
    assert [row[:3] for row in problems] == [("unreadable_trial", "job", "broken__1")]  # one row
    assert f"(missing_result: {broken / 'result.json'} does not exist)" in problems[0][3]


def test_symlink_loop_does_not_hang_and_is_recorded(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "t__1")
    os.symlink(tmp_path / "runs", tmp_path / "runs" / "job" / "loop")
    os.symlink(tmp_path / "runs" / "job", tmp_path / "runs" / "again")  # a second way in, no loop
    summary = ingest([tmp_path / "runs"], tmp_path / "lake")
    assert summary.trials_new == 1
    con = connect(tmp_path / "lake")
    kinds = con.execute("SELECT kind, path FROM problems").fetchall()
    assert kinds == [("symlink_loop", str(tmp_path / "runs" / "job" / "loop"))]
    assert con.execute("SELECT count(*) FROM trials").fetchall() == [(1,)]


def test_a_loop_the_system_reports_is_recorded_too(tmp_path: Path) -> None:
    """A link to itself, or two links to each other, is a loop the system reports (ELOOP) when
    the walk asks whether it is a dir: those were skipped without a word (`--strict` passed),
    where a link back to an ancestor was a `symlink_loop` row."""
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "t__1")
    os.symlink("self__1", job / "self__1")
    os.symlink("b", tmp_path / "runs" / "a")
    os.symlink("a", tmp_path / "runs" / "b")
    for link in ("runs/job/self__1", "runs/a"):
        with pytest.raises(OSError, match="Too many levels of symbolic links"):
            os.stat(tmp_path / link)
    summary = ingest([tmp_path / "runs"], tmp_path / "lake")
    assert summary.trials_new == 1
    con = connect(tmp_path / "lake")
    rows = con.execute("SELECT kind, path, message FROM problems ORDER BY path").fetchall()
    assert [row[:2] for row in rows] == [
        ("symlink_loop", str(tmp_path / "runs" / "a")),
        ("symlink_loop", str(tmp_path / "runs" / "b")),
        ("symlink_loop", str(job / "self__1")),
    ]
    assert all("is a symlink loop (Too many levels of symbolic links)" in row[2] for row in rows)


def test_a_loop_inside_a_trial_dir_is_the_trials_file_not_a_walk_problem(tmp_path: Path) -> None:
    """The walk lists a trial dir before it knows it is one: a link loop in it (or in the agent/
    of a trial without config.json) became a `symlink_loop` row, which failed `--strict`."""
    job = write_job(tmp_path / "runs" / "job")
    trial = write_trial(job, "t__0")
    os.symlink("loop", trial / "loop")
    other = write_trial(job, "t__1")
    (other / "config.json").unlink()
    os.symlink("self", other / "agent" / "self")
    summary = ingest([tmp_path / "runs"], tmp_path / "lake")
    assert (summary.trials_new, summary.problems) == (2, 0)


def test_hostile_paths_work_everywhere(tmp_path: Path) -> None:
    root = tmp_path / 'it\'s a "run"; DROP TABLE trials; -- ünïcødé 試験'
    job = write_job(root / "harbor" / "step-0001" / "jöb 'x'")
    write_trial(job, "t__1")
    lake = root / "lake 'dir'"
    ingest([root], lake)
    con = connect(lake)
    assert con.execute("SELECT batch, run, artifact_dir FROM trials").fetchall() == [
        (f"{root.name}/harbor/step-0001/jöb 'x'", root.name, str(job / "t__1"))
    ]
    # The DuckDB file at the lake root reads the same rows from the same hostile path.
    import duckdb

    with duckdb.connect(str(lake / "lake.duckdb"), read_only=True) as db:
        db.execute("SET file_search_path = ?", [str(lake)])  # what a plain client sets
        assert db.execute("SELECT trial_name FROM trials").fetchall() == [("t__1",)]


def test_result_without_trial_name_is_not_a_trial(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    write_trial(job, "t__1")
    dump(tmp_path / "job" / "notes" / "result.json", {"hello": "world"})
    summary = ingest([tmp_path], tmp_path / "lake")
    assert (summary.trials_new, summary.unreadable_trials, summary.problems) == (1, 0, 0)


def test_a_step_ingested_alone_then_with_its_run_keeps_its_batch(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for step in (1, 2):
        write_trial(write_job(runs / "exp1" / "harbor" / f"step-{step:04d}" / "job"), "t__1")
    lake = tmp_path / "lake"
    ingest([runs / "exp1" / "harbor" / "step-0001"], lake)
    first = connect(lake).execute("SELECT batch, run, step FROM trials").fetchall()
    assert first == [("exp1/harbor/step-0001/job", "exp1", 1)]
    summary = ingest([runs], lake)
    # the step read before is neither relabelled nor parsed again; only step 2 is new
    assert (summary.trials_unchanged, summary.trials_new, summary.trials_replaced) == (1, 1, 0)
    rows = connect(lake).execute("SELECT batch FROM trials ORDER BY 1").fetchall()
    assert rows == [("exp1/harbor/step-0001/job",), ("exp1/harbor/step-0002/job",)]
    jobs = connect(lake).execute("SELECT batch FROM jobs ORDER BY 1").fetchall()
    assert jobs == rows


@pytest.mark.parametrize("layout", ["step-dir-is-the-job-dir", "run-dir-alias"])
def test_a_step_keeps_its_batch_however_it_is_reached(tmp_path: Path, layout: str) -> None:
    """Two layouts that relabelled and re-parsed a step ingested alone, then with its run: trial
    dirs right in the step dir (`harbor run --jobs-dir RUN/harbor --job-name step-0003`), and a
    PATH through an alias of the run dir (`latest -> exp`, which `collect` resolves)."""
    runs = tmp_path / "runs"
    step_dir = runs / "exp" / "harbor" / "step-0003"
    job = step_dir if layout == "step-dir-is-the-job-dir" else step_dir / "job"
    write_trial(write_job(job), "t__1")
    expected = "exp/harbor/step-0003" + ("" if job == step_dir else "/job")
    first_path = step_dir
    if layout == "run-dir-alias":
        (runs / "latest").symlink_to("exp")
        first_path = runs / "latest" / "harbor" / "step-0003"
    lake = tmp_path / "lake"
    ingest([first_path], lake)
    first = connect(lake).execute("SELECT batch, run, step FROM trials").fetchall()
    assert first == [(expected, "exp", 3)]
    summary = ingest([runs / "exp"], lake)
    assert (summary.trials_unchanged, summary.trials_new, summary.trials_replaced) == (1, 0, 0)
    assert connect(lake).execute("SELECT batch FROM jobs").fetchall() == [(expected,)]


def test_a_dir_name_that_is_not_utf8_is_a_problem_and_the_rest_goes_on(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_trial(write_job(runs / "good"), "t__1")
    write_trial(write_job(runs / "café-job"), "t__3", trial_id="t-3")  # UTF-8, not ASCII: walked
    bad = os.fsencode(runs) + b"/bad-\xff-job"
    write_trial(write_job(Path(os.fsdecode(bad))), "t__2", trial_id="t-2")
    summary = ingest([runs], tmp_path / "lake")
    assert (summary.trials_new, summary.problems) == (2, 1)
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT trial_name FROM trials ORDER BY 1").fetchall() == [
        ("t__1",),
        ("t__3",),
    ]
    shown = f"{runs}/bad-\\xff-job"
    assert con.execute(
        "SELECT unit_key, batch, trial_name, path, kind, message FROM problems"
    ).fetchall() == [
        (
            f"walk:{shown}",
            None,
            None,
            shown,
            "not_utf8_name",
            f"directory name {shown} is not valid UTF-8 (bad bytes shown as \\xNN); it was not "
            "walked. Rename it (e.g. with convmv) and ingest again",
        )
    ]
    again = ingest([runs], tmp_path / "lake")  # recorded once, not again and again
    assert (again.committed, again.problems) == (False, 1)


def test_a_trial_dir_name_that_is_not_utf8_counts_in_its_batch(tmp_path: Path) -> None:
    """Inside a job dir, where harbor puts only trial dirs, a dir whose name is not UTF-8 is an
    unreadable trial of the job's batch, as one that cannot be listed is: it was a walk problem
    of no batch, so the batch's figures read as if the trial had never run (a 50% step read
    100%), and a job planning it was said short, advising an ingest that changed nothing."""
    runs = tmp_path / "runs"
    job = write_job(runs / "exp" / "harbor" / "step-0001" / "job")
    write_trial(job, "good__1", reward=1.0)
    bad = os.fsencode(job) + b"/bad-\xff__1"
    write_trial(job, "tmp__1", reward=0.0, trial_id="t-2")
    os.rename(os.fsencode(job / "tmp__1"), bad)
    summary = ingest([runs], tmp_path / "lake")
    assert (summary.trials_new, summary.unreadable_trials, summary.problems) == (1, 1, 1)
    con = connect(tmp_path / "lake")
    shown = f"{job}/bad-\\xff__1"
    ((batch, name, path, kind, message),) = con.execute(
        "SELECT batch, trial_name, path, kind, message FROM problems"
    ).fetchall()
    assert (batch, name, path, kind) == (
        "exp/harbor/step-0001/job",
        "bad-\\xff__1",
        shown,
        "unreadable_trial",
    )
    assert "not valid UTF-8" in message and "Rename it" in message, message
    assert con.execute("SELECT trials, unreadable_trials FROM rollout_stats").fetchall() == [(1, 1)]
    again = ingest([runs], tmp_path / "lake")
    assert (again.committed, again.unreadable_trials, again.problems) == (False, 1, 1)
    # (review: its row is in its job's partition, with its run and step, and `forget` of the
    # batch removes it: it stayed, and the forgotten batch came back in rollout_stats)
    assert con.execute("SELECT run, step FROM problems").fetchall() == [("exp", 1)]
    removal = forget(tmp_path / "lake", "exp/*")
    assert (removal.trials, removal.unreadable_trials) == (1, 1)
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT count(*) FROM problems").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM rollout_stats").fetchall() == [(0,)]


def test_a_bad_trial_name_under_two_paths_counts_once(tmp_path: Path) -> None:
    """One job dir under two PATHs of one ingest: its unreadable trial was stored twice, under
    each PATH's label (a made-up batch of 0 trials and 1 unreadable); it is the first PATH's,
    as its trials and job are. A PATH holding only such a trial dir holds trial dirs."""
    runs = tmp_path / "runs"
    job = write_job(runs / "jobs" / "job-a")
    write_trial(job, "tmp__1", reward=0.0, trial_id="t-2")
    os.rename(os.fsencode(job / "tmp__1"), os.fsencode(job) + b"/bad-\xff__1")
    summary = ingest([runs, job], tmp_path / "lake")
    assert (summary.unreadable_trials, summary.paths_without_trials) == (1, [])
    assert connect(tmp_path / "lake").execute(
        "SELECT batch, trials, unreadable_trials FROM rollout_stats"
    ).fetchall() == [("jobs/job-a", 0, 1)]


def test_a_candidate_keeps_its_path_as_the_walk_spelled_it(tmp_path: Path, monkeypatch) -> None:
    """The task a reader gets carries the candidate's path text from the walk (parsing it again
    costs ~5 us a trial): the same text str(path) gives, however the root was written."""
    from wmo_lake.discover import TrialTask

    runs = tmp_path / "runs"
    write_trial(write_job(runs / "harbor" / "step-0001" / "jöb 'x'"), "t__1")
    write_trial(write_job(runs / "other" / "job"), "u__2")
    (tmp_path / "linked").symlink_to(runs / "other", target_is_directory=True)
    write_trial(write_job(tmp_path / "linked" / "job2"), "v__3")
    monkeypatch.chdir(tmp_path)
    for root in (runs, Path("runs/"), Path("./runs//harbor/.."), Path("linked")):
        candidates = discover(root).candidates
        assert candidates
        for candidate in candidates:
            assert candidate.text == str(candidate.path)
            assert TrialTask.of(candidate).path == str(candidate.path)


@pytest.mark.parametrize(
    ("config", "kind"),
    [
        (b"", "empty_file"),
        (b'{"trial_name": "broken__1", "ag', "invalid_json"),
        (b"[]", "not_an_object"),
    ],
    ids=["empty", "truncated", "array"],
)
def test_a_trial_whose_config_and_result_are_both_unreadable_is_counted(
    tmp_path: Path, config: bytes, kind: str
) -> None:
    """In a job dir, a dir with a config.json that is no JobConfig is a trial dir, even when that
    config cannot be read: without its result.json it is an unreadable trial of the batch, not a
    dir skipped without a word (and so not 'gone' to --prune either)."""
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "good__1")
    broken = write_trial(job, "broken__1")
    (broken / "result.json").unlink()
    (broken / "config.json").write_bytes(config)
    summary = ingest([tmp_path / "runs"], tmp_path / "lake")
    assert (summary.trials_new, summary.unreadable_trials) == (1, 1)
    con = connect(tmp_path / "lake")
    problems = con.execute("SELECT kind, batch, trial_name, path, message FROM problems")
    (row,) = problems.fetchall()
    assert row[:4] == ("unreadable_trial", "job", "broken__1", str(broken))
    assert "missing_result: " in row[4] and f"; {kind}: " in row[4]
    assert "its config.json cannot be read either" in row[4]
    stats = con.execute("SELECT trials, unreadable_trials FROM rollout_stats").fetchall()
    assert stats == [(1, 1)]
    again = ingest([tmp_path / "runs"], tmp_path / "lake", prune=True, dry_run=True)
    assert again.pruned_trials == 0


def test_a_trial_with_a_broken_config_beside_a_good_result_is_read_and_the_config_reported(
    tmp_path: Path,
) -> None:
    job = write_job(tmp_path / "job")
    trial = write_trial(job, "t__1")
    (trial / "config.json").write_bytes(b"{")
    summary = ingest([tmp_path], tmp_path / "lake")
    assert (summary.trials_new, summary.unreadable_trials) == (1, 0)
    problems = connect(tmp_path / "lake").execute("SELECT kind, path FROM problems").fetchall()
    assert problems == [("invalid_json", str(trial / "config.json"))]


@pytest.mark.parametrize("config", [None, b"\xff"], ids=["no-config", "non-utf8-config"])
def test_a_dir_holding_trials_is_their_job_even_with_a_broken_result(
    tmp_path: Path, config: bytes | None
) -> None:
    """A job dir whose result.json is broken and whose config.json is missing or unreadable is
    still the job of the trials inside it: its result.json is reported once, with the job, not
    read a second time as a candidate trial of a batch named after its parent."""
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "t__1")
    (job / "result.json").write_bytes(b'{"id": "j", "n_total_tri')
    if config is None:
        (job / "config.json").unlink()
    else:
        (job / "config.json").write_bytes(config)
    summary = ingest([tmp_path / "runs"], tmp_path / "lake")
    assert (summary.trials_new, summary.unreadable_trials) == (1, 0)
    con = connect(tmp_path / "lake")
    problems = con.execute("SELECT batch, path, kind FROM problems ORDER BY path").fetchall()
    expected = [("job", str(job / "result.json"), "invalid_json")]
    if config is not None:
        expected.insert(0, ("job", str(job / "config.json"), "not_utf8"))
    assert problems == expected
    assert con.execute("SELECT DISTINCT batch FROM trials").fetchall() == [("job",)]


def _refuse_to_list(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """scandir refuses `directory`, as it does a chmod 000 dir for anyone but root."""
    real_scandir = os.scandir

    def scandir(path):  # type: ignore[no-untyped-def]
        if path == str(directory):
            raise PermissionError(13, "Permission denied", str(directory))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_trial_dir_that_cannot_be_listed_is_an_unreadable_trial_of_its_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dir in a job dir that cannot be listed (here: scandir refuses it, as it does a chmod 000
    dir for anyone but root, and its result.json is gone as a read would fail) counts in its
    batch's unreadable_trials, instead of a walk problem with no batch."""
    job = write_job(tmp_path / "job")
    write_trial(job, "good__1")
    locked = write_trial(job, "locked__1")
    (locked / "result.json").unlink()
    _refuse_to_list(monkeypatch, locked)
    summary = ingest([tmp_path], tmp_path / "lake", workers=1)
    assert (summary.trials_new, summary.unreadable_trials) == (1, 1)
    con = connect(tmp_path / "lake")
    problems = con.execute("SELECT kind, batch, path, message FROM problems ORDER BY kind")
    rows = problems.fetchall()
    assert [row[:3] for row in rows] == [("unreadable_trial", "job", str(locked))]
    assert "Permission denied" in rows[0][3] and "cannot be listed" in rows[0][3]
    assert con.execute("SELECT unreadable_trials FROM rollout_stats").fetchall() == [(1,)]


def test_a_dir_of_a_trial_that_cannot_be_listed_is_said_by_its_trial_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial dir whose files cannot be read (mode 0444: listed, not entered) has dirs the walk
    cannot list (its agent/ and verifier/): each was also a walk problem worded for a job dir
    ('its trials were not read'), two more rows for one trial. The trial's own row says it: what
    lies in a trial dir is never a trial or a job."""
    job = write_job(tmp_path / "job")
    write_trial(job, "good__1")
    trial = write_trial(job, "bad__1")
    (trial / "result.json").unlink()
    (trial / "config.json").write_text("{")
    for name in ("agent", "verifier"):
        _refuse_to_list(monkeypatch, trial / name)
    summary = ingest([tmp_path / "job"], tmp_path / "lake", workers=1)
    assert (summary.trials_new, summary.unreadable_trials) == (1, 1)
    rows = connect(tmp_path / "lake").execute("SELECT kind, path FROM problems").fetchall()
    assert rows == [("unreadable_trial", str(trial))]


def test_an_unlistable_dir_of_a_job_dir_read_to_see_is_still_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job dir whose config.json and result.json are both cut off is read to see whether it is
    a trial; an unlistable trial dir in it lost its `unreadable_dir` row when dirs of kept
    candidates were taken for a trial's own."""
    job = write_job(tmp_path / "job")
    trial = write_trial(job, "t__0")
    for name in ("config.json", "result.json"):
        (job / name).write_bytes((job / name).read_bytes()[:40])
    _refuse_to_list(monkeypatch, trial)
    ingest([tmp_path / "job"], tmp_path / "lake", workers=1)
    rows = connect(tmp_path / "lake").execute("SELECT kind, path FROM problems ORDER BY 1")
    assert rows.fetchall() == [
        ("invalid_json", str(job / "result.json")),
        ("unreadable_dir", str(trial)),
    ]


def _counts(tmp_path: Path, root: Path) -> tuple[int, int, list[tuple[str, str, str]]]:
    """(trials read, unreadable trials, the problems' (kind, batch, path)) of a fresh ingest."""
    summary = ingest([root], tmp_path / "lake", workers=1)
    problems = connect(tmp_path / "lake").execute(
        "SELECT kind, batch, path FROM problems ORDER BY path, kind"
    )
    return summary.trials_new, summary.unreadable_trials, problems.fetchall()


def _job_of_three(root: Path) -> tuple[Path, Path]:
    """A job dir of three trials; (the job dir, the trial the case breaks)."""
    job = write_job(root / "job")
    write_trial(job, "a__1")
    victim = write_trial(job, "b__1")
    write_trial(job, "c__1")
    return job, victim


@pytest.mark.parametrize("result", [None, b"{"], ids=["no-result", "truncated-result"])
def test_a_broken_trial_counts_when_its_job_is_known_only_by_its_trials(
    tmp_path: Path, result: bytes | None
) -> None:
    """The job's own config.json is broken, so only its readable trials show it is a job dir:
    a sibling whose config.json and result.json cannot be read is still one of its trials,
    counted as unreadable, not walked past (nothing named it) or left uncounted."""
    job, victim = _job_of_three(tmp_path / "runs")
    (job / "config.json").write_bytes(b'{"job_name": "x", ')
    (victim / "config.json").write_bytes(b"{")
    if result is None:
        (victim / "result.json").unlink()
    else:
        (victim / "result.json").write_bytes(result)
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (2, 1)
    victim_problems = [row for row in problems if row[2].startswith(str(victim))]
    assert victim_problems == [("unreadable_trial", "job", str(victim))]
    message = connect(tmp_path / "lake").execute(
        "SELECT message FROM problems WHERE kind = 'unreadable_trial'"
    )
    assert f"invalid_json: {victim / 'config.json'}" in message.fetchone()[0]


def test_a_trial_dir_without_config_whose_result_is_broken_counts_in_its_job(
    tmp_path: Path,
) -> None:
    """Harbor puts only trial dirs in a job dir: one that lost its config.json and whose
    result.json is truncated is an unreadable trial of the batch, said as such."""
    _, victim = _job_of_three(tmp_path / "runs")
    (victim / "config.json").unlink()
    (victim / "result.json").write_bytes(b'{"trial_name": "b__1", ')
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (2, 1)
    assert problems == [("unreadable_trial", "job", str(victim))]
    message = (
        connect(tmp_path / "lake")
        .execute("SELECT message FROM problems WHERE kind = 'unreadable_trial'")
        .fetchone()[0]
    )
    assert "no config.json" in message and f"(invalid_json: {victim / 'result.json'}" in message


def test_a_result_that_is_a_trials_makes_its_dir_a_trial_whatever_its_config_says(
    tmp_path: Path,
) -> None:
    """A trial dir whose config.json looks like a JobConfig, beside a valid TrialResult: the
    result.json decides (README, Discovery), so the trial is read, not taken for an empty job."""
    _, victim = _job_of_three(tmp_path / "runs")
    dump(victim / "config.json", {"job_name": "x", "agents": [{"name": "terminus-2"}]})
    trials, unreadable, _ = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (3, 0)
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT count(*) FROM jobs").fetchone() == (1,)
    names = con.execute("SELECT trial_name FROM trials ORDER BY 1").fetchall()
    assert names == [("a__1",), ("b__1",), ("c__1",)]


def test_a_job_config_with_a_stray_trial_name_still_holds_its_trials(tmp_path: Path) -> None:
    """A JobConfig that also has a trial_name key is ambiguous; the dir holds trial dirs, so it
    is their job dir and each of its trials is read, not one unreadable trial in their place."""
    job, _ = _job_of_three(tmp_path / "runs")
    config = json.loads((job / "config.json").read_text())
    dump(job / "config.json", {**config, "trial_name": "x"})
    trials, unreadable, _ = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (3, 0)
    batches = connect(tmp_path / "lake").execute("SELECT DISTINCT batch FROM trials")
    assert batches.fetchall() == [("job",)]


def test_an_unlistable_dir_counts_in_a_job_known_only_by_its_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job, victim = _job_of_three(tmp_path / "runs")
    (job / "config.json").write_bytes(b"{")
    (victim / "result.json").unlink()
    _refuse_to_list(monkeypatch, victim)
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (2, 1)
    assert ("unreadable_trial", "job", str(victim)) in problems
    message = (
        connect(tmp_path / "lake")
        .execute("SELECT message FROM problems WHERE kind = 'unreadable_trial'")
        .fetchone()[0]
    )
    assert "unreadable_dir: " in message and "cannot be listed" in message


def test_a_dir_with_a_broken_config_outside_any_job_is_said_not_counted(tmp_path: Path) -> None:
    """Without a job dir around it (no JobConfig, no sibling trial), a dir whose config.json
    cannot be read may be a job that died as it started, or another tool's: no trial or job is
    counted for it, and the file is said (a readable one of another tool's is not)."""
    _job_of_three(tmp_path / "runs")
    crashed = tmp_path / "runs" / "crashed"
    crashed.mkdir()
    (crashed / "config.json").write_bytes(b'{"job_name": "cra')
    dump(tmp_path / "runs" / "mlflow" / "config.json", {"lr": 0.1})
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (3, 0)
    assert problems == [("invalid_json", None, str(crashed / "config.json"))]
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT count(*) FROM jobs").fetchone() == (1,)
    message = con.execute("SELECT message FROM problems").fetchone()[0]
    assert "was not ingested" in message


def test_a_dir_is_read_again_when_a_new_sibling_proves_its_parent_a_job(tmp_path: Path) -> None:
    """Whether a broken dir counts as a trial can change with no file of its own changing: the
    job dir's config.json is broken, and only a readable trial beside it, written later, shows
    the parent is a job dir. The next ingest reads the broken dir again and counts it."""
    job = write_job(tmp_path / "runs" / "job")
    (job / "config.json").write_bytes(b"{")
    (job / "result.json").unlink()  # (a JobResult would show the job itself)
    broken = job / "b__1"
    broken.mkdir()
    (broken / "config.json").write_bytes(b"{")
    (broken / "result.json").write_bytes(b"{")
    first = ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert (first.trials_new, first.unreadable_trials) == (0, 0)
    write_trial(job, "a__1")
    second = ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert (second.trials_new, second.unreadable_trials) == (1, 1)
    con = connect(tmp_path / "lake")
    stats = con.execute("SELECT trials, unreadable_trials FROM rollout_stats")
    assert stats.fetchall() == [(1, 1)]


def test_files_in_the_artifacts_of_a_trial_without_a_config_leave_it_a_trial(
    tmp_path: Path,
) -> None:
    """A trial dir that lost its config.json is walked into; a config.json or result.json its
    artifacts hold (the agent's workspace, copied out) is no trial, and does not make it a job
    dir (dropped, its own trial lost without a word)."""
    _, victim = _job_of_three(tmp_path / "runs")
    (victim / "config.json").unlink()
    dump(victim / "artifacts" / "config.json", {"model": "x"})
    (victim / "artifacts" / "app").mkdir()
    (victim / "artifacts" / "app" / "config.json").write_bytes(b"{")
    dump(victim / "verifier" / "result.json", {"passed": 3})
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable, problems) == (3, 0, [])


def test_a_job_with_a_broken_config_inside_a_job_is_the_job_of_its_trials(tmp_path: Path) -> None:
    """A dir with a broken config.json in a job dir is taken for a trial only when it holds no
    trial dirs: one that does is a job of its own (nested), and its trials are read."""
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "a__1")
    inner = write_job(job / "inner")
    write_trial(inner, "x__1")
    write_trial(inner, "y__1")
    (inner / "config.json").write_bytes(b'{"job_name": "in')
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (3, 0)
    assert problems == [("invalid_json", "job/inner", str(inner / "config.json"))]


def test_a_stray_trial_dir_in_a_runs_dir_makes_no_job_of_it(tmp_path: Path) -> None:
    """A trial dir lying loose in a runs dir (no files of its own) does not make the runs dir a
    job dir whose other dirs, another tool's, would count as its unreadable trials."""
    runs = tmp_path / "runs"
    write_trial(write_job(runs / "job"), "a__1")
    write_trial(runs, "loose__1")
    dump(runs / "mlflow" / "config.json", {"lr": 0.1})
    (runs / "cache").mkdir()
    (runs / "cache" / "result.json").write_bytes(b'{"hits": ')
    trials, unreadable, _ = _counts(tmp_path, runs)
    assert (trials, unreadable) == (2, 0)


@pytest.mark.parametrize("stray", ["trial_name", None], ids=["stray-trial-name", "plain"])
def test_a_job_holding_only_a_broken_trial_counts_it(tmp_path: Path, stray: str | None) -> None:
    """A JobConfig with a stray trial_name, holding one broken trial dir (config.json cut short,
    no result.json), is that trial's job, as a plain JobConfig is: one unreadable trial."""
    job = write_job(tmp_path / "runs" / "job")
    if stray:
        config = json.loads((job / "config.json").read_text())
        dump(job / "config.json", {**config, stray: "x"})
    broken = job / "b__1"
    broken.mkdir()
    (broken / "config.json").write_bytes(b"{")
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (0, 1)
    assert ("unreadable_trial", "job", str(broken)) in problems


@pytest.mark.parametrize("name", ["result.json", "config.json"])
@pytest.mark.parametrize("config", ["job-shaped", "trial-with-agents"])
def test_a_trial_with_a_job_like_config_and_files_in_its_artifacts_is_read(
    tmp_path: Path, name: str, config: str
) -> None:
    """A trial dir whose config.json reads as a JobConfig (or as a TrialConfig with a JobConfig's
    `agents`) is walked into; a file of another tool in its artifacts/ does not make it a job,
    empty or of broken trials: its result.json, a TrialResult, decides."""
    _, victim = _job_of_three(tmp_path / "runs")
    if config == "job-shaped":
        dump(victim / "config.json", {"job_name": "x", "agents": [{"name": "terminus-2"}]})
    else:
        trial_config = json.loads((victim / "config.json").read_text())
        dump(victim / "config.json", {**trial_config, "agents": [{"name": "terminus-2"}]})
    dump(victim / "artifacts" / name, {"model": "x"})
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable, problems) == (3, 0, [])


@pytest.mark.parametrize("config", ["trial-with-agents", "job-shaped"])
@pytest.mark.parametrize(
    "job", ["healthy", "broken-job-trials-without-configs", "broken-config-beside-a-job-result"]
)
def test_a_dir_in_a_job_whose_config_reads_as_a_jobs_and_has_no_result_is_an_unreadable_trial(
    tmp_path: Path, config: str, job: str
) -> None:
    """In a job dir, where harbor puts only trials, a dir whose config.json reads as a job's
    (a trial_name and a JobConfig's `agents`, or a JobConfig) and that has no result.json is an
    unreadable trial, not an empty job: also when the job is known only by its trials' results
    (its config.json broken, theirs gone)."""
    job_dir, victim = _job_of_three(tmp_path / "runs")
    if job != "healthy":  # (the job's result.json, a JobResult, shows it a job in the last case)
        (job_dir / "config.json").write_bytes(b"{")
    if job == "broken-job-trials-without-configs":
        (job_dir / "result.json").unlink()
        for trial in job_dir.iterdir():
            if trial.is_dir() and trial != victim:
                (trial / "config.json").unlink()
    if config == "job-shaped":
        dump(victim / "config.json", {"job_name": "x", "agents": [{"name": "terminus-2"}]})
    else:
        trial_config = json.loads((victim / "config.json").read_text())
        dump(victim / "config.json", {**trial_config, "agents": [{"name": "terminus-2"}]})
    (victim / "result.json").unlink()
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (2, 1)
    assert ("unreadable_trial", "job", str(victim)) in problems
    jobs = connect(tmp_path / "lake").execute("SELECT batch FROM jobs").fetchall()
    assert jobs == [("job",)]


@pytest.mark.parametrize("broken", ["config", "result"])
def test_a_broken_job_whose_trials_lost_their_configs_is_still_their_job(
    tmp_path: Path, broken: str
) -> None:
    """A job dir whose own config.json (or result.json, with no config.json) is broken, and
    whose trial dirs have only their result.json: one of those, read, shows the dir is their
    job. Its broken file is reported once, with the job, and a broken sibling counts."""
    job, victim = _job_of_three(tmp_path / "runs")
    for trial in job.iterdir():
        if trial.is_dir():
            (trial / "config.json").unlink()
    if broken == "config":
        (job / "result.json").unlink()
        (job / "config.json").write_bytes(b'{"job_name": ')
        path = job / "config.json"
    else:
        (job / "config.json").unlink()
        (job / "result.json").write_bytes(b'{"id": ')
        path = job / "result.json"
    (victim / "result.json").write_bytes(b'{"trial_name": ')
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (2, 1)
    assert [row for row in problems if row[2] == str(path)] == [("invalid_json", "job", str(path))]


def test_a_job_result_shows_a_job_whose_config_is_broken(tmp_path: Path) -> None:
    """A JobResult result.json beside a config.json that cannot be read is a job dir by its own
    files: its only dir, a broken trial with no TrialConfig to show it, counts in its batch,
    and an empty one is an empty batch."""
    job = write_job(tmp_path / "runs" / "job")
    (job / "config.json").write_bytes(b'{"job_name": ')
    victim = job / "b__1"
    victim.mkdir()
    dump(victim / "config.json", {"trial_name": "b__1", "agents": [{"name": "terminus-2"}]})
    empty = write_job(tmp_path / "runs" / "empty")
    (empty / "config.json").write_bytes(b"{")
    trials, unreadable, problems = _counts(tmp_path, tmp_path / "runs")
    assert (trials, unreadable) == (0, 1)
    assert ("unreadable_trial", "job", str(victim)) in problems
    jobs = connect(tmp_path / "lake").execute("SELECT batch FROM jobs ORDER BY 1").fetchall()
    assert jobs == [("empty",), ("job",)]


# A job's step label read as the project's independent oracle reads it (reference/oracle.py
# `labels`: the LAST `step-N` component of the job dir's path, N as an integer), here at two
# edges: a path holding two step dirs outside any `<run>/harbor/` anchor, and the largest step a
# 64-bit `step` column holds (2**63 - 1). Expected values are `reference.oracle.labels` on the same
# paths: ('a/step-0001/b/step-0002/job', None, 2) and ('exp/harbor/step-9223372036854775807/job',
# 'exp', 9223372036854775807); a path with two `harbor` dirs and no step dir takes its run from
# the LAST: ('r1/harbor/r2/harbor/job', 'r2', None). Kills discover.py's job_labels reading the
# FIRST step component, `_step_number` refusing exactly INT64_MAX (`<` for `<=`), and the run
# read from the first `harbor` dir.
@pytest.mark.parametrize(
    ("job_path", "expected"),
    [
        ("a/step-0001/b/step-0002/job", ("a/step-0001/b/step-0002/job", None, 2)),
        (
            "exp/harbor/step-9223372036854775807/job",
            ("exp/harbor/step-9223372036854775807/job", "exp", 2**63 - 1),
        ),
        ("r1/harbor/r2/harbor/job", ("r1/harbor/r2/harbor/job", "r2", None)),
    ],
    ids=["two-step-dirs", "int64-max", "two-harbor-dirs"],
)
def test_step_labels(tmp_path: Path, job_path: str, expected: tuple) -> None:
    job = write_job(tmp_path / "runs" / job_path)
    write_trial(job, "hello__1", reward=1.0)
    jobs, trials = ingested_rows(
        tmp_path, "SELECT batch, run, step FROM jobs", "SELECT batch, run, step FROM trials"
    )
    assert jobs == trials == [expected]
