"""Turns harbor drops (a completion stopped at max_tokens, `finish_reason: length`): no span, no
trajectory step, only trial.log's "Output length exceeded" line. Counted per trial at ingest
(`trials.dropped_turns`) and per batch beside the seed's rollout_stats columns, with a note.

Held against real harbor output: fixtures/harbor/kit-e2e, one step of the offline kit
(tests/harbor_e2e) with hello-file and no-reward x 3 attempts. The kit's mock cuts hello-file's
first answer at max tokens on attempts with attempt % 3 == 2 (tests/harbor_kit.py reads that
from its script), so exactly one hello-file trial dropped one turn.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from harbor_kit import hello_dropped_turns, mock_llm
from harbor_shapes import write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.stats import collect_stats

KIT_JOB = FIXTURES / "harbor" / "kit-e2e"
BATCH = "kit-e2e"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = tmp_path_factory.mktemp("kit") / "lake"
    ingest([KIT_JOB], lake)
    return lake


def _log_lines(trial_dir: Path) -> int:
    """The trial.log lines harbor's terminus-2 writes for a dropped turn, read here plainly."""
    text = (trial_dir / "trial.log").read_text()
    return sum(1 for line in text.splitlines() if line.startswith("Output length exceeded: "))


def test_each_trial_counts_its_dropped_turns_from_trial_log(lake: Path) -> None:
    rows = dict(connect(lake).execute("SELECT trial_name, dropped_turns FROM trials").fetchall())
    trial_dirs = [p.parent for p in KIT_JOB.glob("*/result.json")]
    assert rows == {d.name: _log_lines(d) for d in trial_dirs}
    # what the kit's script makes the mock do on attempts 0, 1, 2
    assert sorted(rows.values()) == sorted([0, 0, 0] + [hello_dropped_turns(a) for a in range(3)])
    assert sum(rows.values()) == 1


def test_a_dropped_turn_has_no_span_and_no_step(lake: Path) -> None:
    con = connect(lake)
    ((name, n_spans, completions),) = con.execute(
        """SELECT t.trial_name, t.n_spans, e.agent_turns
           FROM trials t JOIN episodes e USING (trial_key) WHERE t.dropped_turns > 0"""
    ).fetchall()
    # hello-file on attempt 2 answers every scripted reply (the last confirms completion); one
    # of them was cut at max tokens, and harbor kept spans and agent steps of the others only
    answered = len(mock_llm.hello(2))
    assert hello_dropped_turns(2) == 1
    assert n_spans == answered - 1 and completions == answered - 1
    assert name.startswith("hello-file__")


def test_rollout_stats_adds_the_columns_and_keeps_the_seeds(lake: Path) -> None:
    con = connect(lake)
    row = dict(
        zip(
            ["dropped_turns", "dropped_turn_trials", "truncated_spans", "truncated_span_trials"],
            con.execute(
                "SELECT dropped_turns, dropped_turn_trials, truncated_spans, "
                "truncated_span_trials FROM rollout_stats WHERE batch = ?",
                [BATCH],
            ).fetchall()[0],
            strict=True,
        )
    )
    # the seed's truncated_spans cannot see them (no span): it stays 0
    assert row == {
        "dropped_turns": 1,
        "dropped_turn_trials": 1,
        "truncated_spans": 0,
        "truncated_span_trials": 0,
    }


def test_stats_warns_about_dropped_turns(lake: Path) -> None:
    notes = collect_stats(lake).notes
    assert any(
        note.startswith(f"{BATCH}: 1 turn(s) across 1/6 trial(s) stopped at max_tokens")
        for note in notes
    )
    result = CliRunner().invoke(cli, ["stats", "--lake", str(lake)])
    assert result.exit_code == 0 and "Output length exceeded" in result.output


def test_a_mark_after_a_log_formats_prefix_still_counts(tmp_path: Path) -> None:
    """The mark is matched anywhere in a line (tables/trial_log.py): a logging format that puts
    a time and a level first (`%(asctime)s - %(levelname)s - %(message)s`) still counts."""
    job = write_job(tmp_path / "runs" / "r" / "harbor" / "step-0000" / "job")
    trial = write_trial(job, "t__1")
    (trial / "trial.log").write_text(
        "2026-12-06 14:00:00,001 - DEBUG - Output length exceeded: Model x hit max_tokens.\n"
        "Output length exceeded: Model x hit max_tokens limit.\n"
        "Trajectory dumped to /tmp/x/agent/trajectory.json\n"
    )
    ingest([tmp_path / "runs"], tmp_path / "lake")
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT dropped_turns FROM trials").fetchall() == [(2,)]
    stats = con.execute("SELECT dropped_turns, dropped_turn_trials FROM rollout_stats")
    assert stats.fetchall() == [(2, 1)]
    con.close()


def test_without_trial_log_the_count_is_unknown_and_a_new_log_is_read(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "r" / "harbor" / "step-0000" / "job")
    trial = write_trial(job, "t__1")
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake)
    con = connect(lake)
    assert con.execute("SELECT dropped_turns FROM trials").fetchall() == [(None,)]
    assert con.execute("SELECT dropped_turns FROM rollout_stats").fetchall() == [(0,)]
    con.close()
    shutil.copy(next(KIT_JOB.glob("hello-file__*/trial.log")), trial / "trial.log")
    (trial / "trial.log").write_text(
        "Output length exceeded: Model x hit max_tokens limit.\n" * 2 + "other line\n"
    )
    summary = ingest([tmp_path / "runs"], lake)
    assert summary.trials_replaced == 1  # trial.log is part of the trial's fingerprint
    assert connect(lake).execute("SELECT dropped_turns FROM trials").fetchall() == [(2,)]
