"""The real harbor job dirs (fixtures/harbor, copied from harbor 0.25 output) ingest with exactly
the values those files hold. Expected values are read from the files here with plain json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wmo_lake.ingest import ingest
from wmo_lake.lake import connect


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from conftest import FIXTURES

    lake = tmp_path_factory.mktemp("lake") / "lake"
    summary = ingest([FIXTURES / "harbor"], lake, workers=2)
    assert summary.committed
    return lake


def _trial_dirs() -> list[Path]:
    from conftest import FIXTURES

    return sorted(p.parent for p in (FIXTURES / "harbor").glob("*/*/result.json"))


def test_every_real_trial_has_one_row(lake: Path) -> None:
    con = connect(lake)
    rows = con.sql("SELECT trial_name, batch FROM trials ORDER BY trial_name").fetchall()
    expected = sorted((d.name, d.parent.name) for d in _trial_dirs())
    assert rows == expected


@pytest.mark.parametrize("trial_dir", _trial_dirs(), ids=lambda d: d.name)
def test_trial_columns_equal_the_file(lake: Path, trial_dir: Path) -> None:
    doc = json.loads((trial_dir / "result.json").read_text())
    con = connect(lake)
    row = con.execute(
        """SELECT trial_id, task_name, agent_name, agent_version, model_name, model_provider,
                  n_input_tokens, n_cache_tokens, n_output_tokens, cost_usd, rewards,
                  exception_type, exception_message, n_episodes, n_spans, spans_status,
                  n_rollout_segments, multi_step, artifact_dir
           FROM trials WHERE trial_name = ?""",
        [trial_dir.name],
    ).fetchone()
    agent_result = doc["agent_result"] or {}
    model_info = doc["agent_info"]["model_info"] or {}
    exception = doc["exception_info"] or {}
    details = agent_result.get("rollout_details") or []
    rewards = (doc["verifier_result"] or {}).get("rewards")
    assert row == (
        doc["id"],
        doc["task_name"],
        doc["agent_info"]["name"],
        doc["agent_info"]["version"],
        model_info.get("name"),
        model_info.get("provider"),
        agent_result.get("n_input_tokens"),
        agent_result.get("n_cache_tokens"),
        agent_result.get("n_output_tokens"),
        agent_result.get("cost_usd"),
        None if rewards is None else {k: json.dumps(v) for k, v in rewards.items()},
        exception.get("exception_type"),
        exception.get("exception_message"),
        (agent_result.get("metadata") or {}).get("n_episodes"),
        len(details[0]["prompt_token_ids"]) if details else 0,
        "ok" if details else "absent",
        len(details),
        bool(doc["step_results"]),
        str(trial_dir),
    )


def test_int_rewards_stay_ints(lake: Path) -> None:
    con = connect(lake)
    (rewards,) = con.execute(
        "SELECT rewards FROM trials WHERE trial_name = 'multi-reward__QomZjoN'"
    ).fetchone()
    assert rewards == {"reward": "1", "file_exists": "1", "content_correct": "1"}


def test_spans_give_back_the_recorded_tokens(lake: Path) -> None:
    trial_dir = next(d for d in _trial_dirs() if d.name == "hello-offline__haymH7n")
    detail = json.loads((trial_dir / "result.json").read_text())["agent_result"]["rollout_details"][
        0
    ]
    con = connect(lake)
    rows = con.execute(
        """SELECT prompt_token_ids, sampled_token_ids, sampled_logprobs FROM spans_full
           WHERE trial_name = ? ORDER BY call_index""",
        [trial_dir.name],
    ).fetchall()
    assert [list(r) for r in rows] == [
        list(t)
        for t in zip(
            detail["prompt_token_ids"],
            detail["completion_token_ids"],
            detail["logprobs"],
            strict=True,
        )
    ]


def test_stored_prompts_do_not_repeat_the_context(lake: Path) -> None:
    con = connect(lake)
    stored, full = con.execute(
        """SELECT sum(len(prompt_new_ids)), sum(prompt_len) FROM spans
           WHERE trial_name = 'hello-offline__haymH7n'"""
    ).fetchone()
    # 600 + 750 + 900 recorded prompt tokens; each turn extends the last, so only the first
    # prompt and the two deltas are stored.
    assert full == 2250
    assert stored < full / 2


def test_tests_and_ctrf_summary(lake: Path) -> None:
    trial_dir = next(d for d in _trial_dirs() if d.name == "hello-offline__haymH7n")
    report = json.loads((trial_dir / "verifier" / "ctrf.json").read_text())["results"]
    con = connect(lake)
    rows = con.execute(
        "SELECT name, status, duration FROM tests WHERE trial_name = ? ORDER BY test_index",
        [trial_dir.name],
    ).fetchall()
    assert rows == [(t["name"], t["status"], t["duration"]) for t in report["tests"]]
    summary = con.execute(
        """SELECT ctrf_passed, ctrf_failed, ctrf_skipped, ctrf_pending, ctrf_other, ctrf_n_tests
           FROM trials WHERE trial_name = ?""",
        [trial_dir.name],
    ).fetchone()
    s = report["summary"]
    assert summary == (
        s["passed"],
        s["failed"],
        s["skipped"],
        s["pending"],
        s["other"],
        len(report["tests"]),
    )


def test_stop_reason_evidence(lake: Path) -> None:
    con = connect(lake)
    row = con.execute(
        """SELECT exception_type, n_episodes, trajectory_status, declared_complete, has_trace
           FROM stop_reasons WHERE trial_name = 'hello-offline__haymH7n'"""
    ).fetchone()
    # The real trajectory's last agent step calls mark_task_complete; n_episodes is 3.
    assert row == (None, 3, "ok", True, False)
    row = con.execute(
        """SELECT exception_type, trajectory_status, declared_complete
           FROM stop_reasons WHERE trial_name = 'no-reward__yajtC3i'"""
    ).fetchone()
    assert row == ("RewardFileNotFoundError", "absent", False)


def test_jobs_hold_the_job_files(lake: Path) -> None:
    from conftest import FIXTURES

    con = connect(lake)
    for job_dir in sorted((FIXTURES / "harbor").iterdir()):
        config = json.loads((job_dir / "config.json").read_text())
        result = json.loads((job_dir / "result.json").read_text())
        agent = config["agents"][0]
        row = con.execute(
            """SELECT job_name, job_id, agent_name, model_name, temperature, agent_kwargs,
                      n_total_trials, batch
               FROM jobs WHERE job_dir = ?""",
            [str(job_dir)],
        ).fetchone()
        kwargs = agent.get("kwargs")
        assert row == (
            config["job_name"],
            result["id"],
            agent["name"],
            agent.get("model_name"),
            (kwargs or {}).get("temperature"),
            None if kwargs is None else json.dumps(kwargs, separators=(",", ":")),
            result["n_total_trials"],
            job_dir.name,
        )


def test_real_samples_record_no_problems(lake: Path) -> None:
    assert connect(lake).execute("SELECT count(*) FROM problems").fetchall() == [(0,)]
