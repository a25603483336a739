"""Empty batches exist: a job dir with harbor's JobConfig / JobResult and no trial dirs gets a
`jobs` row and a `rollout_stats` row with trials = 0 and every rate 0.0 (seed 003: "An empty batch
... report[s] a 0.0 solve rate over zero executed trials"); `stats` shows it with a note."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from harbor_shapes import REAL_JOB, dump, write_job, write_trial
from spec import ROLLOUT_STATS_COLUMNS, ROLLOUT_STATS_EXTRA_COLUMNS

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

RATES = (
    "solve_rate",
    "graded_solve_rate",
    "raw_solve_rate",
    "scaffold_loss_rate",
    "verifier_scaffold_loss_rate",
)


def _empty_job(job_dir: Path, keep: str) -> Path:
    """A job dir as harbor leaves it when no trial ran: config.json, result.json or both."""
    write_job(job_dir, max_turns=4)
    if keep == "config":
        (job_dir / "result.json").unlink()
    elif keep == "result":
        (job_dir / "config.json").unlink()
        result = json.loads((REAL_JOB / "result.json").read_text())
        dump(job_dir / "result.json", {**result, "n_total_trials": 0})
    return job_dir


@pytest.mark.parametrize("keep", ["both", "config", "result"])
def test_an_empty_job_dir_is_a_batch_with_zero_trials(tmp_path: Path, keep: str) -> None:
    runs = tmp_path / "runs"
    _empty_job(runs / "exp" / "harbor" / "step-0002" / "job", keep)
    write_trial(write_job(runs / "exp" / "harbor" / "step-0001" / "job"), "t__1", reward=1.0)
    summary = ingest([runs], tmp_path / "lake")
    assert summary.jobs == 2 and summary.problems == 0
    con = connect(tmp_path / "lake")
    jobs = con.sql("SELECT batch, step, config_status, result_status FROM jobs ORDER BY 1")
    assert jobs.fetchall() == [
        ("exp/harbor/step-0001/job", 1, "ok", "ok"),
        (
            "exp/harbor/step-0002/job",
            2,
            "absent" if keep == "result" else "ok",
            "absent" if keep == "config" else "ok",
        ),
    ]
    rows = con.sql("SELECT * FROM rollout_stats ORDER BY step").fetchall()
    columns = [d[0] for d in con.sql("SELECT * FROM rollout_stats").description]
    assert columns == ROLLOUT_STATS_COLUMNS + ROLLOUT_STATS_EXTRA_COLUMNS
    empty = dict(zip(columns, rows[1], strict=True))
    assert empty == {
        "batch": "exp/harbor/step-0002/job",
        "run": "exp",
        "step": 2,
        **{column: 0 for column in columns[3:] if column not in RATES},
        **{rate: 0.0 for rate in RATES},
        "stop_reason_counts": {},
    }
    assert all(isinstance(empty[rate], float) for rate in RATES)
    assert dict(zip(columns, rows[0], strict=True))["trials"] == 1


def test_stats_shows_an_empty_batch_with_a_note(tmp_path: Path) -> None:
    _empty_job(tmp_path / "runs" / "exp" / "harbor" / "step-0003" / "job", "both")
    ingest([tmp_path / "runs"], tmp_path / "lake")
    result = CliRunner().invoke(cli, ["stats", "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 0, result.output
    table = result.output.splitlines()
    assert table[2].split()[:4] == ["exp/harbor/step-0003/job", "3", "0", "-"]
    assert (
        "note: exp/harbor/step-0003/job: empty batch: the lake holds no trial of it (its job dir "
        "holds no trial dirs, or dirs ingested later hold the same trials), so its 0.0 rates are "
        "null measurements over zero executed trials"
    ) in result.output
    as_json = CliRunner().invoke(cli, ["stats", "--lake", str(tmp_path / "lake"), "--json"])
    (row,) = json.loads(as_json.output)
    assert (row["trials"], row["solve_rate"], row["executed_trials"]) == (0, 0.0, 0)


def test_a_dir_that_is_no_job_is_no_batch(tmp_path: Path) -> None:
    """Only harbor's job files make a batch: other JSON (a notes dir, a trial config) does not."""
    dump(tmp_path / "runs" / "notes" / "config.json", {"title": "my notes"})
    dump(tmp_path / "runs" / "other" / "result.json", {"hello": "world"})
    write_trial(write_job(tmp_path / "runs" / "job"), "t__1")
    ingest([tmp_path / "runs"], tmp_path / "lake")
    batches = connect(tmp_path / "lake").sql("SELECT batch FROM rollout_stats").fetchall()
    assert batches == [("job",)]
