"""`trial_records_with_spans`: WMO's TrialRecord per trial (stop reason, spans with full prompts,
the cell's columns), held against hand-worked stop-reason and span cases and against the oracle;
`trial_records` is the same rows without the spans (issue 9: light)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
from conftest import ingested_rows
from edge_case_trees import generate_tree
from harbor_shapes import add_agent, write_job, write_trial
from spec import RECORD_COLUMNS

from reference import oracle
from wmo_lake.ingest import ingest
from wmo_lake.lake import DUCKDB_FILE, connect
from wmo_lake.output import rows_as_dicts

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harbor"
MAX_TURNS = 5
CHAINED = [
    ([1, 2, 3], [10, 11], [-0.1, -0.2]),
    ([1, 2, 3, 10, 11, 4], [12], [-0.3]),
    ([1, 2, 3, 10, 11, 4, 12, 5, 6], [13, 14, 15], [-0.4, -0.5, -0.6]),
]
UNCHAINED = [([7, 8], [9], [-1.0]), ([1], [2, 3], [-0.5, -0.25])]


def detail(turns: list[tuple[list[int], list[int], list[float]]]) -> dict[str, Any]:
    """A rollout-details segment holding copies of `turns` (callers corrupt them)."""
    return {
        "prompt_token_ids": [list(t[0]) for t in turns],
        "completion_token_ids": [list(t[1]) for t in turns],
        "logprobs": [list(t[2]) for t in turns],
    }


# name -> (write_trial arguments, the stop reason seed 000 gives it, worked out by hand)
STOP_CASES: dict[str, tuple[dict[str, Any], str | None]] = {
    "timeout": ({"exception_type": "AgentTimeoutError", "n_episodes": 2}, "budget"),
    "context": ({"exception_type": "ContextLengthExceededError"}, "provider_error"),
    "unknown-exception": ({"exception_type": "SandboxCrashedError"}, "error"),
    "verifier-exception": ({"exception_type": "RewardFileNotFoundError"}, "error"),
    "at-cap-declared": ({"n_episodes": MAX_TURNS, "declared_complete": True}, "max_turns"),
    "over-cap": ({"n_episodes": MAX_TURNS + 3, "declared_complete": False}, "max_turns"),
    "below-cap-declared": ({"n_episodes": MAX_TURNS - 1, "declared_complete": True}, "submitted"),
    "below-cap-silent": ({"n_episodes": 1, "declared_complete": False}, "error"),
    "episodes-null": ({"n_episodes": None}, None),
    "episodes-bool": ({"n_episodes": True}, None),
    "episodes-string": ({"n_episodes": "3"}, None),
    "episodes-float": ({"n_episodes": 3.0}, None),
    # seed 000 compares Python ints: past 64 bits still >= max_turns (or below it)
    "episodes-past-64-bits": ({"n_episodes": 2**63}, "max_turns"),
    "episodes-below-64-bits": (
        {"n_episodes": -(2**63) - 1, "declared_complete": True},
        "submitted",
    ),
    # the terminus-2 path ignores a wmo-run.json: reconstructed all the same
    "trace-ignored": (
        {"trace": {"stop_reason": "submitted"}, "exception_type": "AgentTimeoutError"},
        "budget",
    ),
    "never-ran": ({"never_ran": True}, "error"),  # EnvironmentStartTimeoutError
}
# The pi-bridge path (the job records token_sink_dir): the trace's stop reason, never rebuilt.
TRACE_CASES: dict[str, tuple[dict[str, Any], str | None]] = {
    "trace-agent": (
        {"trace": {"stop_reason": "no_tool_call"}, "exception_type": "AgentTimeoutError"},
        "no_tool_call",
    ),
    "trace-root": ({"trace": {"stop_reason": "budget"}, "trace_at_root": True}, "budget"),
    "trace-unreadable": ({"trace": '{"stop_reason": "sub', "n_episodes": 1}, None),
    "trace-non-string": ({"trace": {"stop_reason": ["submitted"]}}, None),
    "trace-not-object": ({"trace": ["submitted"]}, None),
    "trace-empty-string": ({"trace": {"stop_reason": ""}}, ""),
    # seed 000 reads a trace as json.loads(read_text("utf-8")): a byte-order mark is not JSON
    # there (the file is unreadable: no stop reason, and the root file is not tried)
    "trace-bom": ({"trace": b'\xef\xbb\xbf{"stop_reason": "submitted"}'}, None),
    "no-trace-exception": ({"exception_type": "AgentTimeoutError", "n_episodes": 2}, None),
    "no-trace-complete": ({"n_episodes": 1, "declared_complete": True}, None),
    "never-ran": ({"never_ran": True}, None),  # no trace: null, never `error`
}


def query(lake: Path, sql: str, settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    con = connect(lake, settings)
    try:
        return rows_as_dicts(con.sql(sql))
    finally:
        con.close()


@pytest.fixture(scope="module")
def cases_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("records") / "runs"
    job = write_job(root / "exp/harbor/step-0004/job", max_turns=MAX_TURNS, max_tokens=16)
    for name, (arguments, _) in STOP_CASES.items():
        write_trial(job, f"stop-{name}", **arguments)
    sinks = root.parent / "tokens" / "step-0006"
    sinks.mkdir(parents=True)
    pi_job = write_job(
        root / "exp/harbor/step-0006/job", max_turns=MAX_TURNS, token_sink_dir=str(sinks)
    )
    for name, (arguments, _) in TRACE_CASES.items():
        write_trial(pi_job, f"pi-{name}", **arguments)
    both = write_trial(pi_job, "stop-trace-both", trace={"stop_reason": "max_turns"})
    (both / "wmo-run.json").write_text(json.dumps({"stop_reason": "submitted"}))
    bom = write_trial(pi_job, "stop-trace-bom-both", trace=b'\xef\xbb\xbf{"stop_reason": "a"}')
    (bom / "wmo-run.json").write_text(json.dumps({"stop_reason": "submitted"}))
    # a completion declared in a trajectory.json seed 000 cannot read (a byte-order mark)
    declared = write_trial(job, "stop-trajectory-bom", n_episodes=1, declared_complete=True)
    trajectory = declared / "agent" / "trajectory.json"
    trajectory.write_bytes(b"\xef\xbb\xbf" + trajectory.read_bytes())
    # agent/wmo-run.json that is a directory is no trace: the root file is read.
    shadow = write_trial(
        pi_job, "stop-trace-agent-dir", trace={"stop_reason": "budget"}, trace_at_root=True
    )
    (shadow / "agent" / "wmo-run.json").mkdir()
    uncapped = write_job(root / "exp/harbor/step-0005/job")  # records no max_turns
    write_trial(uncapped, "stop-no-cap", n_episodes=1000, declared_complete=True)
    write_trial(uncapped, "stop-no-cap-silent", n_episodes=1000, declared_complete=False)

    write_trial(job, "spans-chained", turns=CHAINED)
    write_trial(job, "spans-two-segments", rollout_details=[detail(UNCHAINED), detail(CHAINED)])
    unaligned = detail(CHAINED)
    unaligned["logprobs"] = unaligned["logprobs"][:2]
    write_trial(job, "spans-unaligned", rollout_details=[unaligned])
    malformed = detail(CHAINED)
    malformed["prompt_token_ids"][0][1] = "2"
    write_trial(job, "spans-malformed", rollout_details=[malformed])
    mismatch = detail(CHAINED)
    mismatch["logprobs"][2] = [-0.4]
    write_trial(job, "spans-logprob-mismatch", rollout_details=[mismatch])
    write_trial(job, "spans-empty", rollout_details=[])
    write_trial(job, "spans-null", rollout_details=None)
    write_trial(job, "spans-detail-null", rollout_details=[None])
    write_trial(
        job,
        "spans-multi-step",
        result_overrides={"agent_result": None, "step_results": [{"name": "a"}, {"name": "b"}]},
    )
    lake = root.parent / "lake"
    ingest([root], lake, workers=1)
    return lake


@pytest.fixture(scope="module")
def records(cases_lake: Path) -> dict[str, dict[str, Any]]:
    return {
        row["trial_name"]: row
        for row in query(cases_lake, "SELECT * FROM trial_records_with_spans")
    }


@pytest.mark.parametrize("name", list(STOP_CASES))
def test_stop_reason_terminus_2_path(records: dict[str, dict[str, Any]], name: str) -> None:
    assert records[f"stop-{name}"]["stop_reason"] == STOP_CASES[name][1]


@pytest.mark.parametrize("name", list(TRACE_CASES))
def test_stop_reason_pi_bridge_path(records: dict[str, dict[str, Any]], name: str) -> None:
    assert records[f"pi-{name}"]["stop_reason"] == TRACE_CASES[name][1]


def test_a_never_ran_trial_is_error_on_terminus_2_and_unknown_on_pi_bridge(
    cases_lake: Path,
) -> None:
    rows = query(
        cases_lake,
        "SELECT t.trial_name, r.stop_reason, r.stop_source, j.collection_path, s.stop_reason_counts"
        " FROM trial_stop_reasons AS r JOIN trials AS t USING (trial_key)"
        " JOIN jobs AS j USING (job_key) JOIN rollout_stats AS s ON s.batch = r.batch"
        " WHERE t.trial_name LIKE '%never-ran'",
    )
    got = {
        (row["trial_name"], row["stop_reason"], row["stop_source"], row["collection_path"])
        for row in rows
    }
    assert got == {
        ("stop-never-ran", "error", "reconstructed", "terminus-2"),
        ("pi-never-ran", None, "trace", "pi-bridge"),
    }
    pi_counts = next(r["stop_reason_counts"] for r in rows if r["trial_name"] == "pi-never-ran")
    # never-ran, the two traceless trials, five unreadable traces (two with a byte-order mark)
    # and one empty reason
    assert pi_counts["unknown"] == 9


def test_trace_under_agent_wins_over_the_root(records: dict[str, dict[str, Any]]) -> None:
    assert records["stop-trace-both"]["stop_reason"] == "max_turns"
    assert records["stop-trace-agent-dir"]["stop_reason"] == "budget"
    # an unreadable trace under agent/ is the trace: seed 000 stops at the first file there is
    assert records["stop-trace-bom-both"]["stop_reason"] is None


def test_a_trajectory_seed_000_cannot_read_declares_nothing(
    records: dict[str, dict[str, Any]],
) -> None:
    """Seed 000 reads trajectory.json as json.loads(read_text("utf-8")), where a byte-order mark
    is invalid JSON: no declared completion, so a trial below the cap reads `error`."""
    assert records["stop-trajectory-bom"]["stop_reason"] == "error"


def test_no_max_turns_recorded_skips_the_cap(records: dict[str, dict[str, Any]]) -> None:
    assert records["stop-no-cap"]["stop_reason"] == "submitted"
    assert records["stop-no-cap-silent"]["stop_reason"] == "error"


def test_max_turns_override(cases_lake: Path) -> None:
    rows = {
        row["trial_name"]: row["stop_reason"]
        for row in query(
            cases_lake, "SELECT trial_name, stop_reason FROM trial_records", {"wmo_max_turns": 1000}
        )
    }
    assert rows["stop-no-cap"] == "max_turns"  # 1000 episodes >= the override
    assert rows["stop-at-cap-declared"] == "submitted"  # 5 < 1000, declared
    assert rows["stop-below-cap-silent"] == "error"
    assert rows["stop-timeout"] == "budget"  # the exception decides before the cap


def spans_of(turns: list[tuple[list[int], list[int], list[float]]]) -> list[dict[str, Any]]:
    return [
        {
            "call_index": index,
            "prompt_token_ids": prompt,
            "sampled_token_ids": sampled,
            "sampled_logprobs": logprobs,
        }
        for index, (prompt, sampled, logprobs) in enumerate(turns)
    ]


def test_spans_give_back_full_prompts(records: dict[str, dict[str, Any]]) -> None:
    record = records["spans-chained"]
    assert record["n_spans"] == 3
    assert record["spans"] == spans_of(CHAINED)


def test_only_the_first_rollout_segment_counts(records: dict[str, dict[str, Any]]) -> None:
    record = records["spans-two-segments"]
    assert record["spans"] == spans_of(UNCHAINED)
    assert record["n_spans"] == 2


@pytest.mark.parametrize(
    "name",
    [
        "spans-unaligned",
        "spans-malformed",
        "spans-logprob-mismatch",
        "spans-empty",
        "spans-null",
        "spans-detail-null",
        "spans-multi-step",
    ],
)
def test_untrustworthy_or_missing_details_give_no_spans(
    records: dict[str, dict[str, Any]], name: str
) -> None:
    assert records[name]["spans"] == []
    assert records[name]["n_spans"] == 0


def test_record_columns(records: dict[str, dict[str, Any]]) -> None:
    record = records["spans-chained"]
    assert list(record) == [*RECORD_COLUMNS, "trial_key"]
    assert (record["batch"], record["run"], record["step"]) == (
        "exp/harbor/step-0004/job",
        "exp",
        4,
    )
    assert record["artifact_dir"].endswith("exp/harbor/step-0004/job/spans-chained")


SETTINGS = [
    oracle.Settings(),
    oracle.Settings(reward_key="score", reward_mode="positive-binary", max_turns=3),
]


def as_variables(settings: oracle.Settings) -> dict[str, Any]:
    return {
        "wmo_reward_key": settings.reward_key,
        "wmo_reward_mode": settings.reward_mode,
        "wmo_max_turns": settings.max_turns,
        "wmo_max_tokens": settings.max_tokens,
    }


@pytest.mark.parametrize("seed", [201, 202, 203])
def test_every_record_matches_the_oracle_on_generated_trees(tmp_path: Path, seed: int) -> None:
    root = generate_tree(tmp_path / "runs", seed)
    ingest([root], tmp_path / "lake", workers=1)
    for settings in SETTINGS:
        got = {
            (row["batch"], row["trial_name"]): row
            for row in query(
                tmp_path / "lake",
                "SELECT * FROM trial_records_with_spans",
                as_variables(settings),
            )
        }
        expected = oracle.read_tree(root, settings).records
        assert len(got) == len(expected)
        for record in expected:
            row = got[(record["batch"], record["trial_name"])]
            for column in RECORD_COLUMNS:
                assert row[column] == record[column], (seed, settings, record["trial_name"], column)


def test_the_duckdb_file_at_the_lake_root_has_the_same_records(tmp_path: Path) -> None:
    root = generate_tree(tmp_path / "runs", 204, trials=24)
    ingest([root], tmp_path / "lake", workers=1)
    settings = SETTINGS[1]
    expected = oracle.read_tree(root, settings).records
    con = duckdb.connect(str(tmp_path / "lake" / DUCKDB_FILE), read_only=True)
    try:
        con.execute("SET file_search_path = ?", [str(tmp_path / "lake")])
        con.execute("SET VARIABLE wmo_reward_key = 'score'")
        con.execute("SET VARIABLE wmo_reward_mode = 'positive-binary'")
        con.execute("SET VARIABLE wmo_max_turns = 3")
        got = {
            (row["batch"], row["trial_name"]): row
            for row in rows_as_dicts(con.sql("SELECT * FROM trial_records_with_spans"))
        }
    finally:
        con.close()
    assert len(got) == len(expected)
    for record in expected:
        row = got[(record["batch"], record["trial_name"])]
        assert {c: row[c] for c in RECORD_COLUMNS} == {c: record[c] for c in RECORD_COLUMNS}


def test_trial_records_is_the_record_without_spans(cases_lake: Path) -> None:
    light = {row["trial_name"]: row for row in query(cases_lake, "SELECT * FROM trial_records")}
    full = query(cases_lake, "SELECT * FROM trial_records_with_spans")
    assert "spans" not in next(iter(light.values()))
    assert len(light) == len(full)
    for row in full:
        assert light[row["trial_name"]] == {k: v for k, v in row.items() if k != "spans"}


def test_trial_records_does_not_rebuild_prompts(cases_lake: Path) -> None:
    """The light view's plan never touches the recursive prompt rebuild (spans_full) and reads
    no token list; the spans view's does."""
    con = connect(cases_lake)
    try:

        def plan(sql: str) -> str:
            return "\n".join(value for _, value in con.execute(f"EXPLAIN {sql}").fetchall())

        light = plan("SELECT * FROM trial_records")
        assert "RECURSIVE" not in light.upper() and "prompt_new_ids" not in light
        heavy = plan("SELECT * FROM trial_records_with_spans")
        assert "RECURSIVE" in heavy.upper() or "prompt_new_ids" in heavy
    finally:
        con.close()


def test_every_trace_that_gives_no_stop_reason_says_why(cases_lake: Path) -> None:
    """A pi-bridge trace read as no stop reason is a `problems` row naming the file, whatever
    its shape (upstream reads each as None; the lake also says so)."""
    rows = query(
        cases_lake,
        "SELECT trial_name, kind, path FROM problems WHERE trial_name LIKE 'pi-trace-%'",
    )
    assert {row["trial_name"]: row["kind"] for row in rows} == {
        "pi-trace-unreadable": "invalid_json",
        "pi-trace-non-string": "wrong_type",
        "pi-trace-not-object": "not_an_object",
        "pi-trace-bom": "invalid_json",
    }
    assert all(row["path"].endswith("agent/wmo-run.json") for row in rows)


def _job_with_kwargs(job_dir: Path, kwargs: dict[str, Any]) -> Path:
    """A job whose agents[0] kwargs are exactly `kwargs` (the trials written after it record the
    same agent, as harbor writes it into each trial's config.json and result.json)."""
    job = write_job(job_dir)
    config = json.loads((job / "config.json").read_text())
    config["agents"][0]["kwargs"] = kwargs
    (job / "config.json").write_text(json.dumps(config, indent=4))
    return job


def _only_stop_row(lake: Path, columns: str) -> dict[str, Any]:
    """`columns` and the stop reason of the lake's one trial (r: trial_stop_reasons, t: trials,
    j: jobs)."""
    (row,) = query(
        lake,
        f"SELECT {columns}, r.stop_reason FROM trial_stop_reasons AS r"
        " JOIN trials AS t USING (trial_key) JOIN jobs AS j USING (job_key)",
    )
    return row


# terminus-2 kwargs -> the turn cap its __init__ runs under (harbor terminus_2.py: max_turns when
# not None, elif max_episodes is not None, elif episodes), worked out by hand
TURN_CAP_CASES: dict[str, tuple[dict[str, Any], int]] = {
    "max_episodes": ({"max_episodes": 5}, 5),
    "episodes": ({"episodes": 5}, 5),
    "max_turns-first": ({"max_turns": 8, "max_episodes": 5, "episodes": 4}, 8),
    "max_episodes-before-episodes": ({"max_episodes": 5, "episodes": 8}, 5),
    "null-max_turns": ({"max_turns": None, "max_episodes": 5}, 5),
    # max_turns goes through Terminus2Options (pydantic, lax): "5" and 5.0 are 5
    "string-max_turns": ({"max_turns": "5"}, 5),
    "float-max_turns": ({"max_turns": 5.0}, 5),
}


@pytest.mark.parametrize("case", list(TURN_CAP_CASES))
def test_terminus_2_older_turn_cap_names_are_the_cap(tmp_path: Path, case: str) -> None:
    """A trial that ran 5 episodes and declared completion on the last: seed 000 reads
    `max_turns` when 5 >= the cap it ran under, `submitted` when the cap is 8."""
    kwargs, cap = TURN_CAP_CASES[case]
    job = _job_with_kwargs(tmp_path / "runs/exp/harbor/step-0000/job", kwargs)
    write_trial(job, "hello__1", n_episodes=5, declared_complete=True)
    ingest([tmp_path / "runs"], tmp_path / "lake")
    row = _only_stop_row(
        tmp_path / "lake", "j.max_turns AS job_cap, t.max_turns AS trial_cap, r.max_turns"
    )
    want = "max_turns" if cap <= 5 else "submitted"
    assert row == {"job_cap": cap, "trial_cap": cap, "max_turns": cap, "stop_reason": want}


def test_each_agent_of_a_job_is_judged_by_its_own_caps(tmp_path: Path) -> None:
    """harbor runs every task x attempt under each of a job's agents, and each trial records its
    own agent: a trial of agents[1] (cap 3) that ran 3 episodes hit its cap although agents[0]'s
    is 5; one of agents[0] that ran 3 and declared completion is `submitted`. A trial that
    records no agent is held to agents[0]'s caps (5 episodes: its cap). Each trial's datums are
    held to its own agent's context budget (data.py drops an episode whose largest call is over
    the budget of the run that sampled it: 5 tokens over agents[1]'s 4, within agents[0]'s 64)."""
    job = write_job(
        tmp_path / "runs/exp/harbor/step-0000/job", max_turns=5, max_tokens=64, context_limit=64
    )
    second = add_agent(
        job, "openai/gpt-4o-mini", max_turns=3, llm_kwargs={"max_tokens": 2, "context_limit": 4}
    )
    sampled = [([1, 2, 3], [4, 5], [-0.1, -0.2])]  # one turn of 2 sampled tokens, 5 in all
    write_trial(job, "hello__first", n_episodes=3, declared_complete=True, turns=sampled)
    write_trial(
        job, "hello__second", n_episodes=3, declared_complete=True, turns=sampled, agent=second
    )
    write_trial(job, "hello__none", n_episodes=5, declared_complete=True, agent=None)
    ingest([tmp_path / "runs"], tmp_path / "lake")
    rows = query(
        tmp_path / "lake",
        "SELECT t.trial_name, r.stop_reason, r.max_turns FROM trial_stop_reasons AS r"
        " JOIN trials AS t USING (trial_key) ORDER BY 1",
    )
    assert [(r["trial_name"], r["stop_reason"], r["max_turns"]) for r in rows] == [
        ("hello__first", "submitted", 5),
        ("hello__none", "max_turns", 5),
        ("hello__second", "max_turns", 3),
    ]
    # a span that sampled >= its agent's max_tokens (2) is truncated; under agents[0]'s 64 not
    (stats,) = query(tmp_path / "lake", "SELECT truncated_spans FROM rollout_stats")
    assert stats["truncated_spans"] == 1
    episodes = query(
        tmp_path / "lake",
        "SELECT trial_name, context_budget, drop_reason FROM datum_episodes"
        " WHERE trial_name <> 'hello__none' ORDER BY 1",
    )
    assert [tuple(row.values()) for row in episodes] == [
        ("hello__first", 64, None),
        ("hello__second", 4, "overflow"),
    ]


# Where completion is declared (seed 000 `_terminus_declared_complete`): the last step whose
# source is `agent` (a later user or system step is skipped), and a call whose function_name is
# exactly `mark_task_complete`. name -> (the last agent step's call names, a trailing step's
# source or None, the stop reason seed 000 gives under max_turns 5 with 3 episodes)
COMPLETION_CASES: dict[str, tuple[str, str | None, str]] = {
    "exact": ("mark_task_complete", None, "submitted"),
    "then-a-user-step": ("mark_task_complete", "user", "submitted"),
    "then-a-system-step": ("mark_task_complete", "system", "submitted"),
    "longer-name": ("mark_task_complete_draft", None, "error"),
    "other-case": ("Mark_Task_Complete", None, "error"),
    "other-tool": ("done", None, "error"),
}


@pytest.mark.parametrize("case", list(COMPLETION_CASES))
def test_completion_is_the_last_agent_steps_exact_call(tmp_path: Path, case: str) -> None:
    name, trailing, expected = COMPLETION_CASES[case]
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job", max_turns=MAX_TURNS)
    trial = write_trial(job, "hello__1", n_episodes=3, declared_complete=True)
    path = trial / "agent" / "trajectory.json"
    trajectory = json.loads(path.read_text())
    steps = trajectory["steps"]
    for call in [step for step in steps if step.get("source") == "agent"][-1]["tool_calls"]:
        call["function_name"] = name
    if trailing is not None:
        steps.append({"step_id": steps[-1]["step_id"] + 1, "source": trailing, "message": "ok?"})
    path.write_text(json.dumps(trajectory))
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    (row,) = query(tmp_path / "lake", "SELECT stop_reason FROM trial_stop_reasons")
    assert row["stop_reason"] == expected
    (record,) = oracle.read_tree(tmp_path / "runs").records
    assert record["stop_reason"] == expected


# llm_kwargs caps -> (the context budget TinkerLLM ran under, the overflow drops and datums of
# the trial below), by hand from harbor llms/tinker.py and data.py
CAP_SPELLINGS: dict[str, tuple[Any, Any, int, int, int]] = {
    "int": (4, 10, 10, 1, 0),
    "float": (4.0, 10.0, 10, 1, 0),
    "str": ("4", "10", 10, 1, 0),
    # `prompt_tokens > 10.5` holds exactly when `> 10` does
    "fractional-budget": (4, 10.5, 10, 1, 0),
    # `context_limit or DEFAULT_CONTEXT_LIMIT`: no budget of the run's, the lake's default
    "zero-budget": (4, 0, 65536, 0, 1),
    "float-zero-budget": (4, 0.0, 65536, 0, 1),
    "false-budget": (4, False, 65536, 0, 1),
    "string-zero-budget": (4, "0", 65536, 0, 1),
    "negative-fractional-budget": (4, -10.5, -11, 1, 0),  # (every prompt passes it)
}


@pytest.mark.parametrize("case", list(CAP_SPELLINGS))
def test_output_and_context_caps_are_read_as_harbors_sampler_reads_them(
    tmp_path: Path, case: str
) -> None:
    """terminus-2 hands llm_kwargs to TinkerLLM, which samples under tinker's SamplingParams (a
    pydantic model, lax: 4.0 and "4" are 4) and measures prompts against `context_limit or
    DEFAULT_CONTEXT_LIMIT` as a number. Written 4.0 or "4", the caps were left null and the
    defaults (8192, 65536) stood in: no truncated span, and an episode over its context budget
    exported as a datum. Each turn here samples 4 tokens (both reach a cap of 4: seed 003
    counts 2 truncated spans), and the second's 9 + 4 tokens pass a budget of 10 (data.py drops
    the episode: 1 overflow drop)."""
    max_tokens, context_limit, budget, overflow_drops, datums = CAP_SPELLINGS[case]
    job = write_job(
        tmp_path / "runs/exp/harbor/step-0000/job",
        max_tokens=max_tokens,
        context_limit=context_limit,
    )
    turns = [
        ([1, 2, 3], [10, 11, 12, 13], [-0.1] * 4),
        ([1, 2, 3, 10, 11, 12, 13, 5, 6], [14, 15, 16, 17], [-0.2] * 4),
    ]
    write_trial(job, "hello__1", n_episodes=2, turns=turns)
    ingest([tmp_path / "runs"], tmp_path / "lake")
    (row,) = query(
        tmp_path / "lake",
        "SELECT c.max_tokens, c.context_budget, r.truncated_spans, d.overflow_drops, d.datums"
        " FROM trial_caps AS c, rollout_stats AS r, datum_stats AS d",
    )
    assert row == {
        "max_tokens": 4,
        "context_budget": budget,
        "truncated_spans": 2,
        "overflow_drops": overflow_drops,
        "datums": datums,
    }


def test_a_job_dir_without_its_config_keeps_each_trials_caps(tmp_path: Path) -> None:
    """The real kit-e2e job (terminus-2, max_turns 5, recorded in every trial's result.json and
    config.json) copied without its config.json: a trial that ran 5 episodes reads `max_turns`
    (seed 000: 5 >= 5), the rest as they would with the config."""
    job = tmp_path / "runs/exp/harbor/step-0000/job"
    shutil.copytree(FIXTURES / "kit-e2e", job)
    (job / "config.json").unlink()
    result_path = job / "hello-file__36A2F8u" / "result.json"
    result = json.loads(result_path.read_text())
    result["agent_result"]["metadata"]["n_episodes"] = 5
    result_path.write_text(json.dumps(result, indent=4))
    ingest([tmp_path / "runs"], tmp_path / "lake")
    rows = query(
        tmp_path / "lake",
        "SELECT t.trial_name, r.stop_reason, r.max_turns FROM trial_stop_reasons AS r"
        " JOIN trials AS t USING (trial_key) ORDER BY 1",
    )
    assert {r["trial_name"]: (r["stop_reason"], r["max_turns"]) for r in rows} == {
        "hello-file__36A2F8u": ("max_turns", 5),  # 5 episodes >= 5
        "hello-file__JocikwR": ("submitted", 5),  # 4 < 5, declared
        "hello-file__NGUPexS": ("submitted", 5),
        "no-reward__KaKH5Qe": ("error", 5),  # RewardFileNotFoundError
        "no-reward__LRR9k9g": ("error", 5),
        "no-reward__tQufDTt": ("error", 5),
    }


def test_a_job_of_one_agent_judges_its_trials_by_its_own_record(tmp_path: Path) -> None:
    """A job whose config.json names one agent ran every trial under it: the job's record of its
    caps is the one read, also when a trial's own record leaves them out (a hand-made tree whose
    trials record a bare agent). Seed 000 with the job's cap 5: 5 episodes -> `max_turns`; a
    sampled turn of 2 tokens under max_tokens 2 is truncated."""
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job", max_turns=5, max_tokens=2)
    bare = {"name": "terminus-2", "kwargs": {}}
    sampled = [([1, 2], [3, 4], [-0.1, -0.2])]
    write_trial(job, "hello__1", n_episodes=5, declared_complete=True, turns=sampled, agent=bare)
    ingest([tmp_path / "runs"], tmp_path / "lake")
    row = _only_stop_row(tmp_path / "lake", "j.n_agents, t.max_turns AS trial_cap, r.max_turns")
    assert row == {"n_agents": 1, "trial_cap": None, "max_turns": 5, "stop_reason": "max_turns"}
    (stats,) = query(tmp_path / "lake", "SELECT truncated_spans FROM rollout_stats")
    assert stats["truncated_spans"] == 1


# The turn cap terminus-2 runs under, at two edges its __init__ decides (harbor
# agents/terminus_2/terminus_2.py, Terminus2.__init__):
#
#     if self.options.max_turns is not None: final = self.options.max_turns
#     elif max_episodes_from_kwargs is not None: final = max_episodes_from_kwargs
#     elif episodes_from_kwargs is not None: ...
#     ...  for episode in range(self._max_episodes):
#
# - `max_turns: 0` is not None: the cap is 0 (not the next name's 5). Pins `is not None` in
#   agent_caps.turn_cap (a truthiness test falls through to max_episodes).
# - `max_episodes: "3"` reaches `range("3")` as it is (no pydantic model reads the older names):
#   no run is held to a cap of 3, so the lake records none. Pins `agent.int` for the older names
#   (`model_int` would read "3" as 3).
#
# Stop reasons by seed 000's read_terminus_stop_reason (copied rule: `n_episodes >= max_turns ->
# "max_turns"`, else the final mark_task_complete -> "submitted"; the test is skipped when no cap
# is known). The trial ran 3 episodes and declared completion.
CASES: dict[str, tuple[dict[str, Any], int | None, str]] = {
    # kwargs -> the cap harbor's __init__ runs under, seed 000's stop reason for 3 episodes
    "zero-max_turns": ({"max_turns": 0, "max_episodes": 5}, 0, "max_turns"),
    "string-max_episodes": ({"max_episodes": "3"}, None, "submitted"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_turn_cap_edges(tmp_path: Path, case: str) -> None:
    kwargs, cap, reason = CASES[case]
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
    config = json.loads((job / "config.json").read_text())
    config["agents"][0]["kwargs"] = kwargs
    (job / "config.json").write_text(json.dumps(config, indent=4))
    write_trial(job, "hello__1", n_episodes=3, declared_complete=True)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    try:
        (row,) = rows_as_dicts(
            con.sql(
                "SELECT j.max_turns AS job_cap, t.max_turns AS trial_cap, r.stop_reason "
                "FROM trial_stop_reasons AS r JOIN trials AS t USING (trial_key) "
                "JOIN jobs AS j USING (job_key)"
            )
        )
    finally:
        con.close()
    assert row == {"job_cap": cap, "trial_cap": cap, "stop_reason": reason}


# The context budget a trial recorded: `llm_kwargs.context_limit`, and `context_window` only when
# there is none. README, settings table, `wmo_context_budget`: "each trial's recorded
# `llm_kwargs.context_limit (or context_window)`, else `65536`". Pins the order in
# agent_caps.context_budget (the window first would make a budget of 4 out of a limit of 64).
def test_context_limit_wins_over_context_window(tmp_path: Path) -> None:
    both = write_job(
        tmp_path / "runs/exp/harbor/step-0000/both", context_limit=64, context_window=4
    )
    write_trial(both, "a__1", reward=1.0)
    window = write_job(tmp_path / "runs/exp/harbor/step-0000/window", context_window=4)
    write_trial(window, "b__1", reward=1.0)
    jobs, trials, caps = ingested_rows(
        tmp_path,
        "SELECT job_name, context_limit FROM jobs ORDER BY job_name",
        "SELECT trial_name, context_limit FROM trials ORDER BY trial_name",
        "SELECT t.trial_name, c.context_budget FROM trial_caps AS c JOIN trials AS t USING "
        "(trial_key) ORDER BY t.trial_name",
    )
    assert jobs == [("both", 64), ("window", 4)]
    assert trials == [("a__1", 64), ("b__1", 4)]
    assert caps == [("a__1", 64), ("b__1", 4)]


# terminus-2's `llm_kwargs.context_limit` as TinkerLLM runs under it: `context_limit or
# DEFAULT_CONTEXT_LIMIT`, then `prompt_tokens > context_limit` (agent_caps._tinker_context_limit's
# docstring). A limit of Infinity (JSON `Infinity`, which Python's json module, harbor's reader,
# takes) is a limit no count of tokens passes: no budget of the run's, so the column is null and
# the trial is read like any other (not a crash, not an unreadable job). Pins `math.isfinite(value)`
# in agent_caps (without it math.floor(inf) raises OverflowError).
def test_an_infinite_context_limit_is_no_budget(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job", max_tokens=64)
    config = json.loads((job / "config.json").read_text())
    config["agents"][0]["kwargs"]["llm_kwargs"]["context_limit"] = float("inf")
    (job / "config.json").write_text(json.dumps(config, indent=4))  # writes `Infinity`
    assert "Infinity" in (job / "config.json").read_text()
    write_trial(job, "t__1", reward=1.0, agent=None)
    jobs, trials = ingested_rows(
        tmp_path,
        "SELECT max_tokens, context_limit FROM jobs",
        "SELECT trial_name FROM trials",
    )
    assert jobs == [(64, None)]
    assert trials == [("t__1",)]
