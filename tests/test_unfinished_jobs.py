"""A step whose harbor job has not finished (still running, or stopped by a kill or Ctrl-C):
harbor writes the job's result.json when the job starts and sets finished_at at its end, and
upstream's scorer refuses a job without it (`scorer.py` `_project`: "harbor job did not finish").
The lake reads the trials written so far; `stats`, `compare` and `report` say the figures are
of a part of the job, never show them as a whole step."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from edge_case_trees import write_unreadable_trial
from harbor_shapes import write_job, write_trial

import wmo_lake as wl
from wmo_lake.checks import UnfinishedJobWarning
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
        f"note: {STOPPED}: harbor has not finished its job (its result.json records no "
        "finished_at): the lake holds 2 trial(s) and 1 unreadable dir(s) of the 8 it plans, and "
        "upstream's scorer refuses a job that did not finish, so these figures are of the "
        "trials written so far; ingest again when the job ends (`harbor job resume -p "
        f"{shlex.quote(str(job_dir))}`, or the same `wmo-lake collect` command, finishes a "
        "stopped one)"
    ]


def test_stats_of_finished_steps_says_nothing_of_it(lake: Path) -> None:
    result = run("stats", "--lake", str(lake), "--run", "base")
    assert result.exit_code == 0, result.output
    assert "has not finished" not in result.output


def test_compare_warns_of_a_side_with_an_unfinished_step(lake: Path) -> None:
    result = run("compare", "--lake", str(lake), "base", "exp")
    assert result.exit_code == 0, result.output
    assert (
        f"warning: 1 batch(es) in scope come from a harbor job that has not finished (its "
        f"result.json records no finished_at): {STOPPED}; their trials are those written so "
        "far, so their figures, task groups and advantages are of a part of the step"
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
        "result.json records no finished_at), so their points are of the trials written so far: "
        f"{STOPPED}."
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
        f"finished_at): {STOPPED};" in result.stderr
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
    with pytest.warns(UnfinishedJobWarning, match=f"finished_at\\): {STOPPED};"):
        wl.export_datums(lake, tmp_path / "d.parquet", no_split_guard=True, batch="exp/*")
