"""bench.synthetic: the benches' 100k-trial lakes say what their generator meant them to say.

The generator draws each trial's outcome first (stop reason, graded or not, passed or not, spans,
truncated turns, unreadable dirs) and `intended_stats` states WMO's rules on those draws in plain
Python; the lake, read through the views, must agree batch by batch, column by column."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.synthetic import Spec, build, intended_stats, steps_of
from wmo_lake.incomplete_jobs import incomplete_jobs, job_rows
from wmo_lake.lake import connect
from wmo_lake.stats import query_stats

SPEC = Spec(steps=4, trials_per_step=150, tasks=7, seed=3)


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("synthetic") / "lake"
    build(root, SPEC)
    return root


def test_rollout_stats_equal_what_the_generator_intended(lake: Path) -> None:
    got = query_stats(connect(lake))
    want = intended_stats(steps_of(SPEC))
    assert [row["batch"] for row in got] == [row["batch"] for row in want]
    for ours, meant in zip(got, want, strict=True):
        for key, value in meant.items():
            if isinstance(value, float):
                assert math.isclose(ours[key], value, rel_tol=0, abs_tol=1e-15), (key, ours)
            else:
                assert ours[key] == value, (ours["batch"], key)


def test_the_draws_give_every_view_work(lake: Path) -> None:
    """Not a lake of zeros: every stop reason, infra failures, truncation, unreadable dirs."""
    want = intended_stats(steps_of(SPEC))
    reasons = set().union(*(row["stop_reason_counts"] for row in want))
    assert reasons == {"budget", "error", "max_turns", "provider_error", "submitted"}
    for key in ("infra_failed_trials", "truncated_spans", "empty_span_trials", "unreadable_trials"):
        assert all(row[key] > 0 for row in want), key
    con = connect(lake)
    ((tasks, steps),) = con.sql(
        "SELECT count(DISTINCT task_id), count(DISTINCT step) FROM cells"
    ).fetchall()
    assert (tasks, steps) == (SPEC.tasks, SPEC.steps)
    ((datums,),) = con.sql("SELECT sum(datums) FROM datum_stats").fetchall()
    assert datums > 0  # the prompts chain as terminus-2 records them: datums can be built
    ((tests,),) = con.sql("SELECT count(*) FROM tests").fetchall()
    assert tests == 3 * sum(row["graded_trials"] for row in want)


def test_its_steps_are_finished_harbor_jobs_holding_every_trial(lake: Path) -> None:
    """A lake of whole steps, as the stats bench means to time: no job check fires."""
    found = incomplete_jobs(job_rows(connect(lake)))
    assert (found.unfinished, found.short) == ([], [])


def test_the_same_spec_builds_the_same_draws() -> None:
    first, second = steps_of(SPEC), steps_of(SPEC)
    assert [s.trial_keys for s in first] == [s.trial_keys for s in second]
    assert Spec(seed=1).key() != Spec(seed=2).key()
