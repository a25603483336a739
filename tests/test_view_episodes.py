"""The `episodes` view (issue 5, item 2): one row per trial with the numbers people compute by hand
from its trajectories. Trials are built in tmp_path with hand-written trajectories; the expected
values are worked out by hand in each test from what the trajectory holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ingested_rows
from harbor_shapes import dump, write_job, write_token_overflow_trial, write_trial

from wmo_lake.ingest import ingest
from wmo_lake.lake import connect


def agent(
    step_id: int,
    calls: list[str | None],
    at: str,
    prompt: int | None = None,
    completion: int | None = None,
    cached: int | None = None,
    cost: float | None = None,
    copied: bool = False,
) -> dict[str, Any]:
    metrics = {
        k: v
        for k, v in {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "cached_tokens": cached,
            "cost_usd": cost,
        }.items()
        if v is not None
    }
    return {
        "step_id": step_id,
        "source": "agent",
        "timestamp": f"2026-11-29T10:{at}Z",
        "message": f"turn {step_id}",
        "tool_calls": [
            {"tool_call_id": f"c{step_id}_{i}", "function_name": name, "arguments": {}}
            for i, name in enumerate(calls)
        ],
        **({"metrics": metrics} if metrics else {}),
        **({"is_copied_context": True} if copied else {}),
    }


def user(step_id: int, at: str, copied: bool = False) -> dict[str, Any]:
    return {
        "step_id": step_id,
        "source": "user",
        "timestamp": f"2026-11-29T10:{at}Z",
        "message": "task",
        **({"is_copied_context": True} if copied else {}),
    }


def atif(*steps: dict[str, Any], ref: str | None = None) -> dict[str, Any]:
    return {
        "schema_version": "ATIF-v1.5",
        "session_id": "s",
        "agent": {"name": "terminus-2", "version": "1", "model_name": "m"},
        "steps": list(steps),
        **({"continued_trajectory_ref": ref} if ref else {}),
    }


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("episodes")
    job = write_job(root / "runs" / "job")

    dump(
        write_trial(job, "plain__1") / "agent" / "trajectory.json",
        atif(
            user(1, "00:00"),
            agent(2, ["bash", "bash", "read"], "00:05", 100, 10, 5, 0.25),
            agent(3, ["mark_task_complete"], "00:15.5", 200, 20, None, 0.5),
        ),
    )

    summarized = write_trial(job, "summarized__1") / "agent"
    dump(
        summarized / "trajectory.json",
        atif(user(1, "00:00"), agent(2, ["bash"], "00:10", 100, 10), ref="trajectory.cont-1.json"),
    )
    dump(
        summarized / "trajectory.cont-1.json",
        atif(
            user(1, "00:00", copied=True),
            agent(2, ["bash"], "00:10", 999, 999, copied=True),
            agent(3, ["mark_task_complete"], "02:00", 50, 5),
        ),
    )
    dump(
        summarized / "trajectory.summarization-1-summary.json",
        atif(user(1, "00:00", copied=True), agent(2, [], "01:00", 30, 3)),
    )

    dump(
        write_trial(job, "unfinished__1") / "agent" / "trajectory.json",
        atif(
            user(1, "00:00"),
            agent(2, ["mark_task_complete"], "00:01", 10, 1),
            agent(3, [None, "bash"], "00:02", 10, 1),
        ),
    )

    oracle = write_trial(job, "oracle__1")
    (oracle / "agent" / "trajectory.json").unlink()

    (write_trial(job, "broken__1") / "agent" / "trajectory.json").write_text("[1, 2]")

    lake = root / "lake"
    ingest([root / "runs"], lake, workers=1)
    con = connect(lake)
    try:
        cursor = con.execute("SELECT * FROM episodes")
        names = [d[0] for d in cursor.description]
        return {
            row[names.index("trial_name")]: dict(zip(names, row, strict=True))
            for row in cursor.fetchall()
        }
    finally:
        con.close()


def test_one_row_per_trial(episodes: dict[str, dict[str, Any]]) -> None:
    assert sorted(episodes) == [
        "broken__1",
        "oracle__1",
        "plain__1",
        "summarized__1",
        "unfinished__1",
    ]


def test_plain_trajectory(episodes: dict[str, dict[str, Any]]) -> None:
    row = episodes["plain__1"]
    assert row["has_trajectory"] is True and row["trajectory_status"] == "ok"
    assert (row["n_files"], row["n_subagent_files"], row["n_steps"]) == (1, 0, 3)
    assert (row["agent_turns"], row["subagent_turns"], row["tool_calls"]) == (2, 0, 4)
    assert row["tool_calls_by_function"] == {"bash": 2, "mark_task_complete": 1, "read": 1}
    assert (row["prompt_tokens"], row["completion_tokens"], row["cached_tokens"]) == (300, 30, 5)
    assert row["cost_usd"] == pytest.approx(0.75)
    assert row["declared_complete"] is True
    assert row["span_sec"] == pytest.approx(15.5)  # 10:00:00 -> 10:00:15.5


def test_summarized_trajectory_counts_continuations_and_subagents_once(
    episodes: dict[str, dict[str, Any]],
) -> None:
    """Copied-context steps repeat earlier ones: their 999 tokens and their bash call are not
    counted again. The last agent step is the continuation's, and it declares completion."""
    row = episodes["summarized__1"]
    assert (row["n_files"], row["n_subagent_files"]) == (3, 1)
    assert row["n_steps"] == 4  # user, agent (main) + agent (cont-1) + agent (subagent)
    assert (row["agent_turns"], row["subagent_turns"]) == (2, 1)
    assert row["tool_calls"] == 2
    assert row["tool_calls_by_function"] == {"bash": 1, "mark_task_complete": 1}
    assert (row["prompt_tokens"], row["completion_tokens"]) == (100 + 50 + 30, 10 + 5 + 3)
    assert row["declared_complete"] is True
    assert row["span_sec"] == pytest.approx(120.0)


def test_last_agent_step_decides_completion(episodes: dict[str, dict[str, Any]]) -> None:
    row = episodes["unfinished__1"]
    assert row["declared_complete"] is False  # an earlier step's mark_task_complete does not count
    assert row["tool_calls_by_function"] == {
        "<unnamed>": 1,
        "bash": 1,
        "mark_task_complete": 1,
    }


def test_trials_without_a_readable_trajectory(episodes: dict[str, dict[str, Any]]) -> None:
    oracle, broken = episodes["oracle__1"], episodes["broken__1"]
    assert (oracle["has_trajectory"], oracle["trajectory_status"]) == (False, "absent")
    assert (broken["has_trajectory"], broken["trajectory_status"]) == (True, "malformed")
    for row in (oracle, broken):
        assert (row["n_steps"], row["agent_turns"], row["tool_calls"], row["prompt_tokens"]) == (
            0,
            0,
            0,
            0,
        )
        assert row["tool_calls_by_function"] == {}
        assert row["declared_complete"] is False
        assert row["span_sec"] is None


def test_view_is_in_the_duckdb_file_too(tmp_path: Path) -> None:
    """Every view is present in every door of the lake, including LAKE/lake.duckdb."""
    import duckdb

    from wmo_lake.lake import ensure_duckdb_file
    from wmo_lake.store import Store

    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "plain__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    path = ensure_duckdb_file(Store(tmp_path / "lake"))
    con = duckdb.connect(str(path), read_only=True)
    try:
        con.execute("SET file_search_path = ?", [str(tmp_path / "lake")])
        assert con.execute("SELECT agent_turns, tool_calls FROM episodes").fetchall() == [(3, 4)]
    finally:
        con.close()


def test_a_total_past_64_bits_is_null_and_the_type_is_bigint(tmp_path: Path) -> None:
    """Sums are exact (no overflow error, which Spark's BIGINT sum raises) and BIGINT in both
    engines: a total no 64-bit integer holds is null, the other totals are untouched."""
    job = write_job(tmp_path / "runs" / "job")
    write_token_overflow_trial(job, "huge__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    row = (
        connect(tmp_path / "lake")
        .sql(
            "SELECT prompt_tokens, completion_tokens, tool_calls, typeof(prompt_tokens), "
            "typeof(completion_tokens), typeof(tool_calls), typeof(cached_tokens) FROM episodes"
        )
        .fetchall()
    )
    assert row == [(None, 135, row[0][2], "BIGINT", "BIGINT", "BIGINT", "BIGINT")]
    assert row[0][2] > 0


# `episodes.declared_complete` reads WMO's test (seed 000 `_terminus_declared_complete`): the
# LAST agent step of the trajectory, whatever it is; the seed walks `reversed(steps)` to the first
# `source == "agent"` step and never looks at `is_copied_context`. Here that last agent step is
# marked copied context and calls mark_task_complete: the seed returns True on this exact file
# (run on it: True), and the stop reason the lake derives agrees. Kills episodes.sql's
# last_agent_steps read from `original_steps` (copied steps left out).
def _call(call_id: str, name: str) -> dict:
    return {"tool_call_id": call_id, "function_name": name, "arguments": {}}


STEPS = [
    {
        "step_id": 1,
        "source": "user",
        "timestamp": "2026-11-29T10:00:00Z",
        "message": "task",
        "is_copied_context": True,
    },
    {
        "step_id": 2,
        "source": "agent",
        "timestamp": "2026-11-29T10:00:05Z",
        "message": "bash",
        "tool_calls": [_call("a", "bash")],
    },
    {
        "step_id": 3,
        "source": "agent",
        "timestamp": "2026-11-29T10:00:09Z",
        "message": "done",
        "is_copied_context": True,
        "tool_calls": [_call("b", "mark_task_complete")],
    },
]


def test_the_last_agent_step_counts_even_when_copied(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job", max_turns=10)
    trial = write_trial(job, "hello__1", reward=1.0, n_episodes=2)
    dump(
        trial / "agent" / "trajectory.json",
        {
            "schema_version": "ATIF-v1.5",
            "session_id": "s",
            "agent": {"name": "terminus-2", "version": "1", "model_name": "m"},
            "steps": STEPS,
        },
    )
    [rows] = ingested_rows(
        tmp_path,
        "SELECT e.declared_complete, r.stop_reason FROM episodes AS e "
        "JOIN trial_stop_reasons AS r USING (trial_key)",
    )
    # seed 000: _terminus_declared_complete -> True; read_terminus_stop_reason (2 < 10) -> submitted
    assert rows == [(True, "submitted")]
