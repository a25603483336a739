"""bench.scale: the synthetic lake opens like an ingested one and its rows are what it says."""

from __future__ import annotations

from pathlib import Path

from bench.scale import TASKS_PER_STEP, TRIALS_PER_STEP, TURNS, build
from wmo_lake.lake import connect


def test_synthetic_lake_has_the_trials_it_claims(tmp_path: Path) -> None:
    build(tmp_path / "lake", trials=2 * TRIALS_PER_STEP)
    con = connect(tmp_path / "lake")
    rows = con.sql("SELECT step, trials, trials_with_spans FROM rollout_stats").fetchall()
    assert rows == [(0, TRIALS_PER_STEP, TRIALS_PER_STEP), (1, TRIALS_PER_STEP, TRIALS_PER_STEP)]
    ((spans,),) = con.sql("SELECT count(*) FROM spans").fetchall()
    assert spans == 2 * TRIALS_PER_STEP * TURNS
    ((passed,),) = con.sql("SELECT avg(passed::INT) FROM cells").fetchall()
    assert 0.3 < passed < 0.5  # rewards drawn 1.0 with probability 0.4
    # harbor's task id (task_id_name): TASKS_PER_STEP tasks a step, each attempted alike
    tasks = con.sql(
        "SELECT step, count(DISTINCT task_id), max(attempt) FROM cells GROUP BY step ORDER BY step"
    ).fetchall()
    per_task = TRIALS_PER_STEP // TASKS_PER_STEP
    # attempts count from 1
    assert tasks == [(0, TASKS_PER_STEP, per_task), (1, TASKS_PER_STEP, per_task)]
