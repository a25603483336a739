"""`wmo-lake forget --batch GLOB` and `ingest --prune`: what they remove, --dry-run, atomicity."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial
from unprivileged import needs_permissions, run_cli

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect, duckdb_file_current
from wmo_lake.store import Store

STEP1 = "exp/harbor/step-0001/job"
STEP2 = "exp/harbor/step-0002/job"
OTHER = "other/harbor/step-0001/job"


def _tree(root: Path) -> Path:
    runs = root / "runs"
    for batch, names in ((STEP1, ["a__1", "b__1"]), (STEP2, ["c__1"]), (OTHER, ["d__1"])):
        job = write_job(runs / batch)
        for name in names:
            write_trial(job, name, reward=1)
    broken = runs / STEP2 / "broken__1"
    broken.mkdir()
    (broken / "config.json").write_text('{"trial_name": "broken__1"}')
    return runs


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    ingest([_tree(tmp_path)], tmp_path / "lake", workers=1)
    return tmp_path / "lake"


def _rows(lake: Path, sql: str) -> list[tuple]:
    con = connect(lake, check=False)
    try:
        return sorted(con.execute(sql).fetchall())
    finally:
        con.close()


def _everything(lake: Path) -> dict[str, list]:
    con = connect(lake, check=False)
    try:
        return {
            name: sorted(con.execute(f"SELECT batch FROM {name}").fetchall())
            for name in ("trials", "spans", "jobs", "problems", "cells", "rollout_stats")
        }
    finally:
        con.close()


def _invoke(*args: object):
    return CliRunner().invoke(cli, [str(a) for a in args])


def test_forget_removes_the_matching_batches_and_says_what(lake: Path) -> None:
    result = _invoke("forget", "--batch", "exp/*", "--lake", lake)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert f"removed batch {STEP1}" in lines and f"removed batch {STEP2}" in lines
    assert any(line.strip().endswith("a__1") for line in lines)
    assert lines[-1].startswith("removed 3 trials, 1 unreadable trials and 2 jobs in 2 batches")
    everything = _everything(lake)
    assert all(batch == OTHER for rows in everything.values() for (batch,) in rows if batch)
    assert _rows(lake, "SELECT trial_name FROM trials") == [("d__1",)]
    assert _rows(lake, "SELECT batch, unreadable_trials FROM rollout_stats") == [(OTHER, 0)]


def test_forget_dry_run_changes_nothing(lake: Path) -> None:
    before = Store(lake).read_manifest()
    result = _invoke("forget", "--batch", f"{STEP1}", "--lake", lake, "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    removal = json.loads(result.stdout)
    assert removal["batches"] == [STEP1] and removal["trials"] == 2 and not removal["committed"]
    assert Store(lake).read_manifest().generation == before.generation
    assert len(_rows(lake, "SELECT * FROM trials")) == 4


def test_forget_nothing_matched(lake: Path) -> None:
    result = _invoke("forget", "--batch", "nope/*", "--lake", lake)
    assert result.exit_code == 0
    assert "removed 0 trials" in result.stdout and "nothing changed" in result.stdout


def test_forgotten_batches_come_back_on_ingest(lake: Path, tmp_path: Path) -> None:
    _invoke("forget", "--batch", "*", "--lake", lake)
    assert _rows(lake, "SELECT count(*) FROM trials") == [(0,)]
    summary = ingest([tmp_path / "runs"], lake, workers=1)
    assert summary.trials_new == 4
    assert len(_rows(lake, "SELECT * FROM trials")) == 4


def test_forget_is_atomic(lake: Path) -> None:
    """A crash just before the manifest swap leaves the previous generation whole."""
    before = _everything(lake)
    env = {**os.environ, "WMO_LAKE_CRASH_AT": "before_manifest"}
    crashed = subprocess.run(
        [sys.executable, "-m", "wmo_lake.cli", "forget", "--batch", "exp/*", "--lake", str(lake)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert crashed.returncode != 0
    assert _everything(lake) == before


def _forget_in_a_process(lake: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "wmo_lake.cli", "forget", "--batch", "exp/*"]
    return subprocess.run(
        [*command, "--lake", str(lake)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        # a shell's background job ignores SIGINT; the user's terminal does not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


# a Ctrl-C, and SIGTERM (a scheduler's, `timeout`'s: it ended the process without a word)
stop_signals = pytest.mark.parametrize(
    ("env_name", "code", "said"),
    [
        ("WMO_LAKE_INTERRUPT_AT", 130, "interrupted"),
        ("WMO_LAKE_TERMINATE_AT", 143, "stopped by SIGTERM"),
    ],
    ids=["ctrl-c", "sigterm"],
)


@stop_signals
@pytest.mark.parametrize("point", ["after_manifest", "before_sweep", "after_commit"])
def test_forget_stopped_after_its_commit_says_so_and_again_rebuilds_lake_duckdb(
    lake: Path, env_name: str, code: int, said: str, point: str
) -> None:
    """Ctrl-C just after the manifest swap said "nothing was written or changed" over a lake
    whose batches were gone; the same forget again said "nothing matched" and left lake.duckdb
    a generation behind. It now says the change is in, and the rerun rebuilds the file. So
    did one during the sweep of the replaced files, or right after the commit returned."""
    stopped = _forget_in_a_process(lake, {env_name: point})
    assert stopped.returncode == code, stopped.stderr
    assert stopped.stderr.strip() == (
        f"{said} after the commit: generation 2 is the lake at {lake}, but lake.duckdb was "
        "not rebuilt (wmo-lake reads the lake as it is; for a plain DuckDB client, run the same "
        "forget again: it rebuilds lake.duckdb and changes nothing else)"
    )
    assert _rows(lake, "SELECT DISTINCT batch FROM trials") == [(OTHER,)]
    store = Store(lake)
    assert not duckdb_file_current(store, store.read_manifest())
    again = _forget_in_a_process(lake, {})
    assert again.returncode == 0 and "nothing matched" in again.stdout, again.stderr
    assert duckdb_file_current(store, store.read_manifest())


@stop_signals
def test_forget_stopped_once_done_says_the_change_is_in(
    lake: Path, env_name: str, code: int, said: str
) -> None:
    """A stop once the commit and lake.duckdb were done (the lock's release, the lines printed)
    said "nothing was written or changed"."""
    stopped = _forget_in_a_process(lake, {env_name: "after_duckdb_file"})
    assert stopped.returncode == code, stopped.stderr
    assert stopped.stderr.strip() == (
        f"{said} after the command had finished: generation 2 is the lake at {lake}, and "
        "lake.duckdb is up to date"
    )
    assert _rows(lake, "SELECT DISTINCT batch FROM trials") == [(OTHER,)]
    store = Store(lake)
    assert duckdb_file_current(store, store.read_manifest())


def test_a_ctrl_c_inside_the_rebuilds_query_after_the_commit_says_the_change_is_in(
    lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C inside one of lake.duckdb's rebuild queries is DuckDB's own error
    (RuntimeError('Query interrupted') in duckdb 2.0), not KeyboardInterrupt: after the commit
    it said "nothing was written or changed" over a lake whose batches were gone."""
    from wmo_lake import lake as lake_module

    def interrupted(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(lake_module, "ensure_duckdb_file", interrupted)
    stopped = CliRunner().invoke(cli, ["forget", "--batch", "exp/*", "--lake", str(lake)])
    assert stopped.exit_code == 130, stopped.output
    assert f"interrupted after the commit: generation 2 is the lake at {lake}, but" in (
        stopped.output
    )
    assert _rows(lake, "SELECT DISTINCT batch FROM trials") == [(OTHER,)]


def test_forget_killed_while_building_lake_duckdb_is_finished_by_the_same_forget(
    lake: Path,
) -> None:
    killed = _forget_in_a_process(lake, {"WMO_LAKE_CRASH_AT": "after_manifest"})
    assert killed.returncode == -signal.SIGKILL
    store = Store(lake)
    assert not duckdb_file_current(store, store.read_manifest())
    again = _forget_in_a_process(lake, {})
    assert again.returncode == 0, again.stderr
    assert duckdb_file_current(store, store.read_manifest())
    with duckdb.connect(str(lake / "lake.duckdb"), read_only=True) as db:
        db.execute("SET file_search_path = ?", [str(lake)])
        assert db.execute("SELECT DISTINCT batch FROM trials").fetchall() == [(OTHER,)]


@pytest.mark.parametrize("holder", ["ingest", "forget"])
def test_forget_waits_for_the_lock_naming_its_holder(lake: Path, holder: str) -> None:
    """A writer waiting behind another is told which command holds the lake (a forget's lock
    said "ingest")."""
    with Store(lake).lock(command=holder):
        proc = subprocess.Popen(
            [sys.executable, "-m", "wmo_lake.cli", "forget", "--batch", OTHER, "--lake", lake],
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        waiting = proc.stderr.readline()
        assert waiting.startswith(f"waiting for wmo-lake {holder} pid "), waiting
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "removed 1 trials" in out


def test_ingest_prune_drops_trials_whose_dirs_are_gone(lake: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.rmtree(runs / STEP1 / "a__1")
    shutil.rmtree(runs / "exp" / "harbor" / "step-0002")  # a whole job, with its broken trial
    dry = _invoke("ingest", runs, "--lake", lake, "--prune", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would prune" in dry.stdout and "nothing changed" in dry.stdout
    # the job dir too (it was dropped without a word, and left out of the dry run's count)
    assert "prune 3 trials and 1 job dir(s) whose dirs are gone" in dry.stdout
    assert len(_rows(lake, "SELECT * FROM trials")) == 4
    result = _invoke("ingest", runs, "--lake", lake, "--prune")
    assert result.exit_code == 0, result.output
    pruned = [line for line in result.stdout.splitlines() if line.startswith("pruned ")]
    assert len(pruned) == 4 and any(line.endswith("a__1") for line in pruned)
    assert f"pruned {os.path.realpath(runs / STEP2)}" in pruned
    assert "3 pruned and 1 job dir(s)" in result.stdout.splitlines()[-1]
    assert _rows(lake, "SELECT trial_name FROM trials") == [("b__1",), ("d__1",)]
    assert _rows(lake, "SELECT batch FROM jobs") == [(STEP1,), (OTHER,)]
    assert _rows(
        lake, "SELECT count(*) FROM problems WHERE batch = ?".replace("?", f"'{STEP2}'")
    ) == [(0,)]


def test_prune_only_touches_the_given_path(lake: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    shutil.rmtree(runs / "other")
    summary = ingest([runs / "exp"], lake, workers=1, prune=True)
    assert summary.pruned_trials == 0  # other/ is not under runs/exp
    assert len(_rows(lake, "SELECT * FROM trials")) == 4


def test_without_prune_gone_dirs_stay(lake: Path, tmp_path: Path) -> None:
    shutil.rmtree(tmp_path / "runs" / STEP1 / "a__1")
    summary = ingest([tmp_path / "runs"], lake, workers=1)
    assert summary.pruned_trials == 0 and not summary.committed
    assert len(_rows(lake, "SELECT * FROM trials")) == 4


@pytest.mark.parametrize("hidden", ["runs", "exp/harbor/step-0001", STEP1])
@pytest.mark.parametrize("dry_run", [False, True], ids=["prune", "dry-run"])
def test_prune_keeps_what_is_under_a_dir_the_walk_cannot_list(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hidden: str, dry_run: bool
) -> None:
    """A dir that cannot be listed for a moment (scandir refuses it, as it does a chmod 000 dir
    for anyone but root) hides its trials; they are not gone: --prune dropped them all (the
    whole lake, for a PATH that cannot be listed), and without --prune they counted as gone."""
    runs = tmp_path / "runs"
    refused = str(runs / hidden) if hidden != "runs" else str(runs)
    _refusing_to_list(monkeypatch, refused)
    kept = ingest([runs], lake, workers=1, dry_run=dry_run)
    assert kept.gone_kept == 0, kept.line()
    summary = ingest([runs], lake, workers=1, prune=True, dry_run=dry_run)
    assert (summary.pruned_trials, summary.pruned_jobs) == (0, 0), summary.pruned
    assert len(_rows(lake, "SELECT * FROM trials")) == 4
    if not dry_run:
        problems = _rows(lake, "SELECT path, message FROM problems WHERE kind = 'unreadable_dir'")
        assert [path for path, _ in problems] == [refused]
        assert "the lake keeps those it holds, even with --prune" in problems[0][1]


def _refusing_to_list(monkeypatch: pytest.MonkeyPatch, refused: str) -> None:
    """scandir refuses `refused`, as it does a chmod 000 dir for anyone but root."""
    real_scandir = os.scandir

    def scandir(path):  # type: ignore[no-untyped-def]
        if path == refused:
            raise PermissionError(13, "Permission denied", refused)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)


def test_an_unlistable_dir_above_the_path_hides_nothing_the_walk_listed(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A link in the tree back up to a dir that cannot be listed (runs/up -> .., a home dir
    others may enter but not list): that dir holds the PATH, whose every dir the walk listed,
    so a trial deleted there is still gone (--prune kept it, and every one after it)."""
    runs = tmp_path / "runs"
    (runs / "up").symlink_to("..")
    shutil.rmtree(runs / STEP1 / "a__1")
    _refusing_to_list(monkeypatch, str(runs / "up"))
    summary = ingest([runs], lake, workers=1, prune=True)
    assert summary.pruned == [os.path.realpath(runs / STEP1 / "a__1")]
    assert _rows(lake, "SELECT kind FROM problems WHERE kind = 'unreadable_dir'") == [
        ("unreadable_dir",)
    ]


def test_a_trial_gone_from_a_job_dir_listed_through_a_link_is_gone_though_above_it_is_dark(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """runs/exp cannot be listed (a 711 dir, to others), yet its step-0002 is listed through the
    link runs/latest: a trial deleted there is gone (it was kept as hidden, and not counted)."""
    runs = tmp_path / "runs"
    (runs / "latest").symlink_to("exp/harbor/step-0002")
    shutil.rmtree(runs / STEP2 / "c__1")
    _refusing_to_list(monkeypatch, str(runs / "exp"))
    kept = ingest([runs], lake, workers=1)
    assert kept.gone_kept == 1, kept.line()
    summary = ingest([runs], lake, workers=1, prune=True)
    assert summary.pruned == [os.path.realpath(runs / STEP2 / "c__1")]


@pytest.mark.parametrize("prune", [False, True], ids=["no-prune", "prune"])
def test_a_walk_problem_under_a_dir_that_cannot_be_listed_goes_prune_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prune: bool
) -> None:
    """A walk problem is what the last walk found: one under a dir that cannot be listed now
    goes, as the summary counts it (--prune kept its row, uncounted)."""
    runs = _tree(tmp_path)
    step = runs / "exp" / "harbor" / "step-0001"
    (step / "junk").mkdir()
    (step / "junk" / "config.json").write_text('{"half')
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    _refusing_to_list(monkeypatch, str(step))
    summary = ingest([runs], lake, workers=1, prune=prune)
    kinds = _rows(lake, "SELECT kind FROM problems")
    assert ("invalid_json",) not in kinds and ("unreadable_dir",) in kinds
    assert summary.problems == len(kinds)


@needs_permissions
@pytest.mark.parametrize("mode", [0o600, 0o644], ids=["0600", "0644"])
def test_prune_keeps_a_job_dir_that_can_be_listed_but_not_searched(
    lake: Path, tmp_path: Path, mode: int
) -> None:
    """A job dir whose trial dirs' names can be read but nothing in it (no search permission):
    its config.json cannot be read, so the walk finds no job there, yet it is on disk. --prune
    dropped its jobs row (its trials stayed, read with no job: their stop reasons changed)."""
    job = tmp_path / "runs" / STEP1
    job.chmod(mode)
    try:
        done = run_cli("ingest", tmp_path / "runs", "--lake", lake, "--prune", "--json")
    finally:
        job.chmod(0o755)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["pruned_trials"], summary["pruned_jobs"]) == (0, 0), summary["pruned"]
    assert _rows(lake, "SELECT batch FROM jobs") == sorted([(STEP1,), (STEP2,), (OTHER,)])
    assert len(_rows(lake, "SELECT * FROM trials")) == 4


def _catalog_sources(lake: Path) -> set[str]:
    store = Store(lake)
    return set(store.read_catalog(store.read_manifest()))


def test_a_trial_moved_to_another_step_leaves_no_entry_to_prune(lake: Path, tmp_path: Path) -> None:
    """The moved trial is replaced from its new dir (another partition); the old dir's entry
    goes with that ingest, so --prune finds nothing gone (it said "1 pruned" on every run)."""
    runs = tmp_path / "runs"
    old = runs / STEP1 / "a__1"
    shutil.move(old, runs / STEP2 / "a__moved")
    moved = ingest([runs], lake, workers=1)
    assert (moved.trials_new, moved.trials_replaced) == (0, 1)
    assert os.path.realpath(old) not in _catalog_sources(lake)
    # (trial_name is result.json's, so the moved trial keeps its name)
    assert _rows(lake, "SELECT batch FROM trials WHERE trial_name = 'a__1'") == [(STEP2,)]
    pruned = _invoke("ingest", runs, "--lake", lake, "--prune", "--json")
    assert pruned.exit_code == 0, pruned.output
    summary = json.loads(pruned.stdout)
    assert (summary["pruned_trials"], summary["committed"]) == (0, False)


def test_prune_drops_the_entry_of_a_gone_dir_whose_trial_another_dir_holds(
    lake: Path, tmp_path: Path
) -> None:
    """A copy took the trial over (the original's entry keeps no rows); once the original is
    deleted, one --prune drops its entry for good: the next one finds nothing."""
    runs = tmp_path / "runs"
    shutil.copytree(runs / STEP1 / "a__1", runs / STEP2 / "a__copy")
    ingest([runs], lake, workers=1)
    shutil.rmtree(runs / STEP1 / "a__1")
    first = ingest([runs], lake, workers=1, prune=True)
    assert first.pruned == [os.path.realpath(runs / STEP1 / "a__1")] and first.committed
    assert os.path.realpath(runs / STEP1 / "a__1") not in _catalog_sources(lake)
    second = ingest([runs], lake, workers=1, prune=True)
    assert (second.pruned_trials, second.committed) == (0, False)
    assert _rows(lake, "SELECT batch FROM trials WHERE trial_name = 'a__1'") == [(STEP2,)]


def test_lake_duckdb_follows(lake: Path) -> None:
    _invoke("forget", "--batch", OTHER, "--lake", lake)
    con = duckdb.connect(str(lake / "lake.duckdb"), read_only=True)
    con.execute("SET file_search_path = ?", [str(lake)])  # its views name files relative to it
    try:
        assert sorted(con.execute("SELECT trial_name FROM trials").fetchall()) == [
            ("a__1",),
            ("b__1",),
            ("c__1",),
        ]
    finally:
        con.close()


def _trial_dirs(lake: Path) -> list[str]:
    """The dirs whose rows the lake holds for a trial, by trial name."""
    store = Store(lake)
    catalog = store.read_catalog(store.read_manifest())
    return sorted(
        Path(entry.source).name + " in " + Path(entry.source).parents[4].name
        for entry in catalog.values()
        if entry.kind == "trial" and entry.unit_key
    )


# What `tree/runs` holds (see _tree), whichever way it was ingested: one trial row per trial,
# read from tree/runs, and no duplicate_trial problem (no other dir holds these trials now).
ON_DISK = [f"{name} in runs" for name in ("a__1", "b__1", "c__1", "d__1")]


def _same_as_a_fresh_ingest(lake: Path, tree: Path) -> None:
    fresh = tree.parent / "fresh-lake"
    shutil.rmtree(fresh, ignore_errors=True)
    ingest([tree], fresh, workers=1)
    assert _everything(lake) == _everything(fresh)
    assert _trial_dirs(lake) == _trial_dirs(fresh) == ON_DISK
    assert _rows(lake, "SELECT count(*) FROM problems WHERE kind = 'duplicate_trial'") == [(0,)]


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "reader-processes"])
def test_pruning_the_copy_that_took_trials_over_brings_the_originals_back(
    tmp_path: Path, workers: int
) -> None:
    """A copy of a run tree, ingested after it, takes its trials over (the originals are kept
    in the catalog, unchanged, holding no rows); once the copy is deleted and pruned, the
    originals, still on disk, hold the trials again. The lake lost them all, and every later
    ingest called the originals unchanged."""
    tree = tmp_path / "tree"
    runs = _tree(tree)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=workers)
    shutil.copytree(runs, tree / "copy")
    copied = ingest([tree / "copy"], lake, workers=workers)
    assert (copied.trials_new, copied.trials_replaced) == (0, 4)
    shutil.rmtree(tree / "copy")
    pruned = ingest([tree], lake, workers=workers, prune=True)
    assert pruned.pruned_trials == 5  # the copy's 4 trials and its unreadable one
    _same_as_a_fresh_ingest(lake, tree)
    assert _rows(lake, "SELECT batch, trials, solve_rate FROM rollout_stats") == [
        (STEP1, 2, 1.0),
        (STEP2, 1, 1.0),
        (OTHER, 1, 1.0),
    ]
    again = ingest([tree], lake, workers=workers)
    assert (again.trials_unchanged, again.committed) == (4, False)
    _same_as_a_fresh_ingest(lake, tree)


def test_pruning_the_first_of_two_dirs_read_together_brings_the_duplicate_back(
    tmp_path: Path,
) -> None:
    """Both dirs in one ingest: the first read holds each trial, the other is a duplicate_trial
    problem. Once the first is gone and pruned, the other holds the trials, without the
    problems (which stayed, over a lake with no trial)."""
    tree = tmp_path / "tree"
    runs = _tree(tree)
    shutil.copytree(runs, tree / "copy")  # "copy" is walked before "runs"
    lake = tmp_path / "lake"
    ingest([tree], lake, workers=1)
    assert _rows(lake, "SELECT count(*) FROM problems WHERE kind = 'duplicate_trial'") == [(4,)]
    shutil.rmtree(tree / "copy")
    ingest([tree], lake, workers=1, prune=True)
    _same_as_a_fresh_ingest(lake, tree)
    assert ingest([tree], lake, workers=1).committed is False
    _same_as_a_fresh_ingest(lake, tree)


def test_an_original_outside_the_pruned_path_is_read_by_its_next_ingest(tmp_path: Path) -> None:
    """--prune never touches what lies outside its PATHs: an original there is not read by it,
    but it leaves the catalog, so the next ingest of its tree reads it again."""
    tree = tmp_path / "tree"
    runs = _tree(tree)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    shutil.copytree(runs, tree / "backup" / "runs")
    ingest([tree / "backup"], lake, workers=1)
    shutil.rmtree(tree / "backup" / "runs")
    ingest([tree / "backup"], lake, workers=1, prune=True)
    assert _rows(lake, "SELECT count(*) FROM trials") == [(0,)]  # as a fresh ingest of backup/
    back = ingest([runs], lake, workers=1)
    assert (back.trials_new + back.trials_replaced, back.trials_unchanged) == (4, 0)
    _same_as_a_fresh_ingest(lake, tree)


def test_forget_counts_the_trials_the_lake_holds_after_a_copy_took_them_over(
    tmp_path: Path,
) -> None:
    """The copy has the same batches (they are anchored at the run dir): the lake holds each
    trial once, and forget removes (and says) that much, not the originals' superseded dirs."""
    tree = tmp_path / "tree"
    runs = _tree(tree)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    shutil.copytree(runs, tree / "copy")
    ingest([tree / "copy"], lake, workers=1)
    dry = _invoke("forget", "--batch", "exp/*", "--lake", lake, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    removal = json.loads(dry.stdout)
    # exp/ holds a__1, b__1 and c__1 once each (read from the copy), and broken__1 of each tree
    # (an unreadable trial has no id: each dir is one of its own); a jobs row per job dir of
    # both trees (2 batches x 2 dirs)
    assert (removal["trials"], removal["unreadable_trials"], removal["jobs"]) == (3, 2, 4)
    trees = sorted(Path(d).parents[4].name + "/" + Path(d).name for d in removal["dirs"])
    assert trees == ["copy/a__1", "copy/b__1", "copy/broken__1", "copy/c__1", "runs/broken__1"]
    assert _invoke("forget", "--batch", "exp/*", "--lake", lake).exit_code == 0
    # the runs tree ingested again brings the batches back, read from it
    back = ingest([runs], lake, workers=1)
    assert back.trials_new + back.trials_replaced == 3
    names = _rows(lake, "SELECT trial_name FROM trials")
    assert names == [("a__1",), ("b__1",), ("c__1",), ("d__1",)]


def test_forgetting_the_batch_a_trial_moved_to_lets_its_original_come_back(
    tmp_path: Path,
) -> None:
    """A copy of a trial in another step took it over; forgetting that step's batch leaves
    the original (in a batch not forgotten) to be read by the next ingest."""
    tree = tmp_path / "tree"
    runs = _tree(tree)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    shutil.copytree(runs / STEP1 / "a__1", runs / STEP2 / "a__copy")
    ingest([runs], lake, workers=1)
    assert _rows(lake, "SELECT batch FROM trials WHERE trial_name = 'a__1'") == [(STEP2,)]
    _invoke("forget", "--batch", STEP2, "--lake", lake)
    assert _rows(lake, "SELECT count(*) FROM trials WHERE trial_name = 'a__1'") == [(0,)]
    shutil.rmtree(runs / STEP2 / "a__copy")
    ingest([runs], lake, workers=1)
    assert _rows(lake, "SELECT batch FROM trials WHERE trial_name = 'a__1'") == [(STEP1,)]


@pytest.mark.parametrize(
    ("glob", "matches"),
    [("exp[a/*", False), ("exp\\[a/*", True), ("exp[[]a/*", True), ("*", True)],
)
def test_forget_matches_as_stats_batch_does(tmp_path: Path, glob: str, matches: bool) -> None:
    """forget matched by Python's fnmatch, every other --batch by DuckDB's GLOB: they differ on
    an unclosed '[' and on '\\' (an escape in GLOB), so the preview (`stats --batch G`) and the
    removal picked other batches. Both are now DuckDB's."""
    write_trial(write_job(tmp_path / "runs" / "exp[a" / "harbor" / "step-0001" / "job"), "a__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    stats = _invoke("stats", "--batch", glob, "--lake", tmp_path / "lake", "--json")
    assert stats.exit_code == (0 if matches else 2), stats.output  # (no match: a usage error)
    shown = [row["batch"] for row in json.loads(stats.stdout)] if matches else []
    forget = _invoke("forget", "--batch", glob, "--lake", tmp_path / "lake", "--json", "--dry-run")
    assert json.loads(forget.stdout)["batches"] == shown
    assert shown == (["exp[a/harbor/step-0001/job"] if matches else [])


def test_forget_says_the_problems_of_other_dirs_it_removes(tmp_path: Path) -> None:
    """A stray result.json that is not a trial's has a `problems` row under its dir's label:
    forget removed it while saying '0 trials ... in 0 batches', word for word a glob that
    matched nothing."""
    runs = _tree(tmp_path)
    (runs / "stray" / "x").mkdir(parents=True)
    (runs / "stray" / "x" / "result.json").write_text("nope")
    ingest([runs], tmp_path / "lake", workers=1)
    assert _rows(tmp_path / "lake", "SELECT batch, kind FROM problems WHERE batch = 'stray'") == [
        ("stray", "invalid_json")
    ]
    for dry in (["--dry-run"], []):
        result = _invoke("forget", "--batch", "stray", "--lake", tmp_path / "lake", *dry)
        lines = result.stdout.splitlines()
        assert lines[:2] == [
            f"{'would remove' if dry else 'removed'} batch stray",
            f"  {runs / 'stray' / 'x'} (not a trial: its problems)",
        ]
        assert "0 jobs, and the problems of 1 other dirs in 1 batches" in lines[-1]
    assert _rows(tmp_path / "lake", "SELECT * FROM problems WHERE batch = 'stray'") == []


def test_forget_prints_names_escaped(tmp_path: Path) -> None:
    """A newline in a trial dir's name printed a line of its own ('removed batch FAKE'), and an
    ANSI sequence in a run's name reached the terminal: names are escaped, as other commands
    print them."""
    job = write_job(tmp_path / "runs" / "r\x1b[31m" / "harbor" / "step-0001" / "job")
    write_trial(job, "evil\nremoved batch FAKE")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = _invoke("forget", "--batch", "*", "--lake", tmp_path / "lake", "--dry-run")
    assert "\x1b" not in result.stdout
    assert [line for line in result.stdout.splitlines() if "FAKE" in line] == [
        f"  {tmp_path / 'runs'}/r\\x1b[31m/harbor/step-0001/job/evil\\nremoved batch FAKE"
    ]


def test_forget_with_an_empty_glob_is_a_usage_error(lake: Path) -> None:
    result = _invoke("forget", "--batch", "", "--lake", lake)
    assert result.exit_code == 2
    assert "Usage: " in result.output and "an empty glob matches nothing" in result.output


@pytest.mark.parametrize("command", ["forget", "ingest"])
def test_a_failure_after_the_commit_says_the_change_is_in(
    lake: Path, tmp_path: Path, command: str
) -> None:
    """A segment of a partition the change does not touch, deleted by hand, fails lake.duckdb's
    rebuild once the change is committed: the error read as if nothing had happened (exit 1,
    only "the lake is missing 1 of its Parquet files"), though the new generation was the lake."""
    for segment in (lake / "tables" / "spans" / "run=other" / "step=1").glob("*.parquet"):
        segment.unlink()
    if command == "forget":
        result = _invoke("forget", "--batch", "exp/*", "--lake", lake)
    else:
        write_trial(write_job(tmp_path / "more" / "exp" / "harbor" / "step-0003" / "job"), "e__1")
        result = _invoke("ingest", tmp_path / "more", "--lake", lake)
    assert result.exit_code == 1
    assert f"Error: the {command} is committed (generation 2 is the lake at {lake}), but " in (
        result.output
    )
    assert "is missing 1 of its Parquet files (tables/spans/run=other/step=1/" in result.output
    assert Store(lake).read_manifest().generation == 2


def _writable(root: Path, writable: bool) -> None:
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode & 0o777
        path.chmod(mode | 0o200 if writable else mode & ~0o222)


@needs_permissions
def test_a_dry_run_reads_a_lake_it_may_not_write(lake: Path, tmp_path: Path) -> None:
    """A dry run writes nothing, yet it took the write lock: on a read-only lake (a read-only
    mount, a lake shared read-only) `ingest --dry-run` and `forget --dry-run` failed with
    "cannot write the lake ... .lock", where `sql` and `stats` worked. A real forget still says
    it cannot write."""
    _writable(lake, False)
    try:
        forget = run_cli("forget", "--batch", STEP1, "--lake", lake, "--dry-run")
        dry = run_cli("ingest", tmp_path / "runs", "--lake", lake, "--dry-run", "--json")
        real = run_cli("forget", "--batch", STEP1, "--lake", lake)
    finally:
        _writable(lake, True)
    assert forget.returncode == 0, forget.stderr
    assert STEP1 in forget.stdout
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["would_read"] == 0
    assert real.returncode == 1 and "cannot write" in real.stderr, real.stderr
    assert _rows(lake, "SELECT DISTINCT batch FROM jobs ORDER BY 1")[0] == (STEP1,)
