"""`rollout_stats`: seed 003's per-batch RolloutStats, held against a batch worked out by hand and
against the oracle on generated trees, exactly (floats included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest
from edge_case_trees import generate_tree, write_unreadable_trial
from harbor_shapes import write_job, write_trial
from spec import ROLLOUT_STATS_COLUMNS, ROLLOUT_STATS_EXTRA_COLUMNS

from reference import oracle
from wmo_lake.ingest import ingest
from wmo_lake.lake import DUCKDB_FILE, connect
from wmo_lake.output import rows_as_dicts

HAND = "exp/harbor/step-0007/job"
NO_CAP = "loose/job"
ONLY_UNREADABLE = "exp/harbor/step-0009/job"
OTHER_RUN = "alpha/harbor/step-0008/job"


def turn(prompt: list[int], n_sampled: int) -> tuple[list[int], list[int], list[float]]:
    return prompt, list(range(100, 100 + n_sampled)), [-0.5] * n_sampled


def query(lake: Path, settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    con = connect(lake, settings)
    try:
        return rows_as_dicts(con.sql("SELECT * FROM rollout_stats"))
    finally:
        con.close()


@pytest.fixture(scope="module")
def hand_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The batch of the comments below, a batch with no recorded max_tokens, a batch of only
    unreadable trials, and a batch of another run."""
    root = tmp_path_factory.mktemp("stats") / "runs"
    job = write_job(root / HAND, max_turns=5, max_tokens=4)
    # t1: passes, 2/2 tests, spans of 4 and 2 sampled tokens, 2 episodes, declared -> submitted
    write_trial(
        job,
        "a__1",
        task_name="demo/a",
        reward=1.0,
        turns=[turn([1, 2], 4), turn([1, 2, 100, 101, 102, 103, 3], 2)],
        n_episodes=2,
    )
    # t2: reward 0.25 (fails raw), items passed+failed = 0.5, no spans, 5 episodes -> max_turns
    write_trial(
        job,
        "a__2",
        task_name="demo/a",
        reward=0.25,
        rollout_details=None,
        n_episodes=5,
        ctrf={"results": {"tests": [{"status": "passed"}, {"status": "failed"}]}},
    )
    # t3: no verifier result (infra failed), agent timeout -> budget, one span of 3
    write_trial(
        job,
        "b__1",
        task_name="demo/b",
        verifier_result=None,
        exception_type="AgentTimeoutError",
        turns=[turn([1], 3)],
    )
    # t4: int reward 1 passes, no CTRF report, no episode count -> unknown, one span of 5 (its
    # unreadable wmo-run.json is ignored: this is the terminus-2 path)
    write_trial(
        job,
        "b__2",
        task_name="demo/b",
        reward=1,
        ctrf=None,
        n_episodes=None,
        trace='{"stop_reason": ',
        turns=[turn([2], 5)],
    )
    write_unreadable_trial(job, "b__3", "missing")

    no_cap = write_job(root / NO_CAP, max_turns=5)
    write_trial(no_cap, "c__1", task_name="demo/c", turns=[turn([1], 8192)])
    write_trial(no_cap, "c__2", task_name="demo/c", turns=[turn([1], 8191)])

    only = write_job(root / ONLY_UNREADABLE, max_turns=5, max_tokens=4)
    write_unreadable_trial(only, "d__1", "missing")
    write_unreadable_trial(only, "d__2", "truncated")

    other = write_job(root / OTHER_RUN, max_turns=5, max_tokens=4)
    write_trial(other, "e__1", task_name="demo/e")
    lake = root.parent / "lake"
    ingest([root], lake, workers=1)
    return lake


def by_batch(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["batch"]: row for row in rows}


def from_duckdb_file(lake: Path) -> list[dict[str, Any]]:
    """rollout_stats as any DuckDB client sees it: LAKE/lake.duckdb, no wmo_lake involved."""
    con = duckdb.connect(str(lake / DUCKDB_FILE), read_only=True)
    try:
        con.execute("SET file_search_path = ?", [str(lake)])  # the one thing a client sets
        return rows_as_dicts(con.sql("SELECT * FROM rollout_stats"))
    finally:
        con.close()


@pytest.mark.parametrize("door", [query, from_duckdb_file])
def test_hand_worked_batch(hand_lake: Path, door: Any) -> None:
    row = by_batch(door(hand_lake))[HAND]
    assert {column: row[column] for column in ROLLOUT_STATS_COLUMNS} == {
        "batch": HAND,
        "run": "exp",
        "step": 7,
        "trials": 4,
        "trials_with_spans": 3,  # a__1, b__1, b__2
        "solve_rate": 2 / 3,  # a__1, b__2 pass of the 3 executed
        "graded_solve_rate": 0.75,  # (1.0 + 0.5) / 2; b__1 is infra failed, b__2 has no report
        "graded_trials": 2,
        "raw_solve_rate": 0.5,  # 2 of 4
        "executed_trials": 3,
        "infra_failed_trials": 1,
        "empty_span_trials": 1,
        "truncated_spans": 2,  # a__1's 4 and b__2's 5 reach max_tokens = 4
        "truncated_span_trials": 2,
        "stop_reason_counts": {"budget": 1, "max_turns": 1, "submitted": 1, "unknown": 1},
        "scaffold_loss_rate": 2 / 3,  # budget, max_turns of 3 trials with a reason
        "unreadable_trials": 1,
    }
    # issue 11's columns come after the seed's: no trial.log here, and the one exception
    # (AgentTimeoutError) is the agent's
    assert list(row) == ROLLOUT_STATS_COLUMNS + ROLLOUT_STATS_EXTRA_COLUMNS
    assert [row[column] for column in ROLLOUT_STATS_EXTRA_COLUMNS] == [0, 0, 0, 0.0]


def test_overrides_change_what_they_should(hand_lake: Path) -> None:
    settings = {"wmo_max_tokens": 3, "wmo_max_turns": 2, "wmo_reward_mode": "positive-binary"}
    row = by_batch(query(hand_lake, settings))[HAND]
    assert (row["truncated_spans"], row["truncated_span_trials"]) == (3, 3)
    assert row["stop_reason_counts"] == {"budget": 1, "max_turns": 2, "unknown": 1}
    assert row["scaffold_loss_rate"] == 1.0
    assert (row["solve_rate"], row["raw_solve_rate"]) == (1.0, 0.75)  # 0.25 > 0 passes


def test_max_tokens_falls_back_to_8192(hand_lake: Path) -> None:
    row = by_batch(query(hand_lake))[NO_CAP]
    assert (row["truncated_spans"], row["truncated_span_trials"]) == (1, 1)
    assert (row["run"], row["step"]) == (None, None)


def test_a_batch_of_only_unreadable_trials_still_reports(hand_lake: Path) -> None:
    row = by_batch(query(hand_lake))[ONLY_UNREADABLE]
    assert row["unreadable_trials"] == 2
    assert (row["run"], row["step"], row["trials"]) == ("exp", 9, 0)
    assert row["stop_reason_counts"] == {}
    assert row["solve_rate"] == row["graded_solve_rate"] == row["scaffold_loss_rate"] == 0.0


def test_rows_come_in_run_then_step_order(hand_lake: Path) -> None:
    assert [row["batch"] for row in query(hand_lake)] == [OTHER_RUN, HAND, ONLY_UNREADABLE, NO_CAP]


SETTINGS = [
    oracle.Settings(),
    oracle.Settings(reward_key="score", reward_mode="positive-binary", max_turns=2, max_tokens=5),
    oracle.Settings(max_tokens=1),
]


@pytest.mark.parametrize("seed", [301, 302, 303, 304])
def test_every_batch_matches_the_oracle_on_generated_trees(tmp_path: Path, seed: int) -> None:
    root = generate_tree(tmp_path / "runs", seed)
    ingest([root], tmp_path / "lake", workers=1)
    for settings in SETTINGS:
        variables = {
            "wmo_reward_key": settings.reward_key,
            "wmo_reward_mode": settings.reward_mode,
            "wmo_max_turns": settings.max_turns,
            "wmo_max_tokens": settings.max_tokens,
        }
        got = query(tmp_path / "lake", variables)
        expected = oracle.batch_stats(oracle.read_tree(root, settings))
        assert sorted(row["batch"] for row in got) == sorted(expected)
        for row in got:
            assert row == expected[row["batch"]], (seed, settings, row["batch"])


def test_graded_solve_rate_sums_as_python_does(tmp_path: Path) -> None:
    """The seed's sum(graded) / len(graded) on Python >= 3.12 (compensated sum): scores 0.1, 0.2,
    0.3 sum to 0.6 there, where a left-to-right fold gives 0.6000000000000001, and any order of
    scores gives the same float (the view sums exactly, order-free)."""
    job = write_job(tmp_path / "runs" / HAND, max_turns=5)
    scores = [(1, 10), (2, 10), (3, 10), (1, 3), (2, 7), (5, 9), (1, 1000003)]
    for index, (passed, resolved) in enumerate(scores):
        summary = {"tests": resolved, "passed": passed, "failed": resolved - passed}
        summary |= {"skipped": 0, "pending": 0, "other": 0}
        write_trial(
            job,
            f"t__{index}",
            task_name=f"demo/{6 - index}",  # scored in an order other than the files'
            reward=0.0,
            ctrf={"results": {"tool": {"name": "pytest"}, "summary": summary, "tests": []}},
        )
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    (row,) = query(tmp_path / "lake")
    graded = [passed / resolved for passed, resolved in scores]
    assert row["graded_trials"] == len(graded)
    assert row["graded_solve_rate"] == sum(graded) / len(graded)  # to the last bit
    assert sum(graded[:3]) != graded[0] + graded[1] + graded[2]  # the case a fold gets wrong
