"""`cells`: the scorer's reading of each trial (reward, passed, infra_failed, attempt, graded
tests), held against hand-worked cases for every edge of issue 3 and against the oracle."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest
from edge_case_trees import _ctrf, generate_tree
from harbor_shapes import write_job, write_trial
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from reference import oracle
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect, create_settings, sql_dir
from wmo_lake.output import rows_as_dicts
from wmo_lake.tables.fields import Fields, ProblemLog
from wmo_lake.tables.trials import rewards

# (case, verifier_result, reward, infra_failed, passed raw, passed positive-binary)
REWARD_CASES: list[tuple[str, Any, float, bool, bool, bool]] = [
    ("float-1", {"rewards": {"reward": 1.0}}, 1.0, False, True, True),
    ("int-1", {"rewards": {"reward": 1}}, 1.0, False, True, True),
    ("int-0", {"rewards": {"reward": 0}}, 0.0, False, False, False),
    ("half", {"rewards": {"reward": 0.5}}, 0.5, False, False, True),
    # harbor's TrialResult (pydantic, lax) makes a bool or a numeric string a number before
    # upstream's scorer looks: true is a measured 1.0 (see test_reward_cases_are_harbors_reading)
    ("bool-true", {"rewards": {"reward": True}}, 1.0, False, True, True),
    ("bool-false", {"rewards": {"reward": False}}, 0.0, False, False, False),
    ("above-1", {"rewards": {"reward": 1.5}}, 0.0, True, False, False),
    ("negative", {"rewards": {"reward": -0.25}}, 0.0, True, False, False),
    # `0.0 <= -0.0` in upstream's scorer: a measured 0.0, not a reward below the range
    ("negative-zero", {"rewards": {"reward": -0.0}}, 0.0, False, False, False),
    ("negative-zero-string", {"rewards": {"reward": "-0"}}, 0.0, False, False, False),
    ("string", {"rewards": {"reward": "1"}}, 1.0, False, True, True),
    ("padded-string", {"rewards": {"reward": " 0.5 "}}, 0.5, False, False, True),
    ("word", {"rewards": {"reward": "abc"}}, 0.0, True, False, False),
    ("string-nan", {"rewards": {"reward": "nan"}}, 0.0, True, False, False),
    ("string-above-1", {"rewards": {"reward": "2"}}, 0.0, True, False, False),
    ("nan", {"rewards": {"reward": math.nan}}, 0.0, True, False, False),
    ("infinity", {"rewards": {"reward": math.inf}}, 0.0, True, False, False),
    ("null-value", {"rewards": {"reward": None}}, 0.0, True, False, False),
    ("missing-key", {"rewards": {"accuracy": 1.0}}, 0.0, True, False, False),
    ("rewards-null", {"rewards": None}, 0.0, True, False, False),
    ("verifier-null", None, 0.0, True, False, False),
]

# (ctrf variant of tests/edge_case_trees.py, (passed, resolved, unresolved) by hand, or None)
CTRF_CASES: list[tuple[str, tuple[int, int, int] | None]] = [
    ("real", (2, 2, 0)),  # the real harbor report: 2 items passed, summary 2/0 agrees
    ("absent", None),
    ("unreadable", None),
    ("empty-file", None),
    ("not-ctrf", None),
    ("results-not-object", None),
    ("summary-only", (3, 4, 2)),  # passed 3 failed 1 | skipped 1 pending 1 other 0
    ("items-only", (2, 3, 1)),  # passed failed skipped passed
    ("disagree", (1, 3, 1)),  # summary 5/0 loses to items passed failed failed other
    ("agree", (1, 2, 1)),
    ("unresolved-only", None),  # summary 0/0 + 3 skipped, items all unresolved
    ("summary-zero-items-resolved", (1, 2, 0)),
    ("items-zero-summary-resolved", (2, 4, 0)),  # items: one skipped -> the summary 2/2
    # upstream ctrf.py validates the report with a pydantic model: what it rejects grades nothing
    # (not even its items), what it coerces counts as coerced
    ("negative-count", None),  # ge=0 rejects the report
    ("string-count", (1, 1, 0)),  # "2" -> 2: summary 2/2 disagrees with items passed -> items
    ("float-count", (1, 1, 0)),  # 2.0 -> 2, likewise
    ("bool-count", (1, 1, 0)),  # skipped: true -> 1: summary (1, 1, 1) loses to the items
    ("null-optional", None),  # skipped: null is not an int: rejected
    ("summary-without-failed", (1, 3, 0)),  # no summary reading; items failed passed failed
    ("odd-items", None),  # a non-object test item (7) and a non-string status: rejected
    ("tests-not-list", None),  # results.tests must be a list
    ("tests-null", None),  # ... not null
    ("status-null", None),  # status must be a string
    ("status-absent", (1, 1, 1)),  # an absent status reads "": unresolved
    ("summary-not-object", None),
    ("string-summary-only", (2, 3, 1)),  # "2", 1.0, "1" -> 2/3 and one skipped
    ("underscore-count", (20, 20, 0)),  # pydantic reads "2_0" as 20
    ("fractional-count", None),  # 2.5 is no integer
    # a summary count no 64-bit integer holds leaves the summary out: upstream grades the items
    # too (that summary disagrees with them, and they win), but from the summary alone, which no
    # column here holds, when they resolve nothing
    ("huge-count", (1, 1, 0)),
    ("huge-count-only", None),
    # an unresolved count past 64 bits grades nothing: the summary grades, the unresolved sum
    # (upstream's Python int) is null in its BIGINT column
    ("huge-other", (4, 6, None)),
    # counts that fit, sums that do not: summed exactly, as upstream's Python ints are; a sum
    # past 64 bits reads null in its BIGINT column, the score is upstream's
    ("resolved-sum-overflow", (1, 2, 0)),  # the items win
    ("unresolved-sum-overflow", (1, 2, None)),
]

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harbor"


def query(lake: Path, sql: str, settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    con = connect(lake, settings)
    try:
        return rows_as_dicts(con.sql(sql))
    finally:
        con.close()


@pytest.fixture(scope="module")
def cases_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One job with a trial per hand-worked case, plus a second batch for attempt ranks."""
    root = tmp_path_factory.mktemp("cells") / "runs"
    job = write_job(root / "exp/harbor/step-0001/job", max_turns=5, max_tokens=8)
    for case, verifier, *_ in REWARD_CASES:
        write_trial(job, f"reward-{case}", task_name=f"reward/{case}", verifier_result=verifier)
    write_trial(
        job,
        "reward-timeout-measured",
        task_name="reward/timeout",
        reward=1.0,
        exception_type="AgentTimeoutError",
    )
    write_trial(
        job,
        "reward-1e400",
        task_name="reward/1e400",
        result_overrides={"verifier_result": {"rewards": {"reward": 1}}},
    )
    # 1e400 cannot be written by json.dumps: patch the text harbor-style.
    path = job / "reward-1e400" / "result.json"
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace('"reward": 1\n', '"reward": 1e400\n'), encoding="utf-8")
    write_trial(
        job,
        "reward-two-keys",
        task_name="reward/two-keys",
        rewards={"reward": 0.0, "score": 1},
    )
    rng = random.Random(0)
    for variant, _ in CTRF_CASES:
        content = _ctrf(variant, rng)
        write_trial(
            job,
            f"ctrf-{variant}",
            task_name=f"ctrf/{variant}",
            **({} if content is ... else {"ctrf": content}),
        )
    for name in ("rank__b", "rank__Z", "rank__a", "rank__B"):
        write_trial(job, name, task_name="demo/rank")
    write_trial(job, "rank__other", task_name="demo/other")
    other = write_job(root / "exp/harbor/step-0002/job")
    for name in ("rank__c", "rank__A"):
        write_trial(other, name, task_name="demo/rank")
    lake = root.parent / "lake"
    ingest([root], lake, workers=1)
    return lake


_CELLS: dict[tuple[Path, tuple[tuple[str, Any], ...]], dict[str, dict[str, Any]]] = {}


def cell(lake: Path, trial_name: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trial's cells row; one query per lake and settings (a connection costs ~0.2 s)."""
    key = (lake, tuple(sorted((settings or {}).items())))
    if key not in _CELLS:
        rows = query(lake, "SELECT * FROM cells", settings)
        by_name = {row["trial_name"]: row for row in rows}
        assert len(by_name) == len(rows)
        _CELLS[key] = by_name
    return _CELLS[key][trial_name]


@pytest.mark.parametrize(("case", "verifier", "reward", "infra", "raw", "binary"), REWARD_CASES)
def test_reward_edges(
    cases_lake: Path,
    case: str,
    verifier: Any,
    reward: float,
    infra: bool,
    raw: bool,
    binary: bool,
) -> None:
    got = cell(cases_lake, f"reward-{case}")
    assert (got["reward"], got["infra_failed"], got["passed"]) == (reward, infra, raw)
    got = cell(cases_lake, f"reward-{case}", {"wmo_reward_mode": "positive-binary"})
    assert (got["reward"], got["infra_failed"], got["passed"]) == (reward, infra, binary)


def _upstream_reward(verifier: Any) -> float | str | None:
    """What upstream's scorer reads for a trial with this `verifier_result`: harbor's own model
    loads it (as `TrialResult.model_validate_json` does), then `scorer.py`'s `_trial_reward`
    test. "unloadable" when harbor's model rejects it (upstream cannot read the trial at all)."""
    from harbor.models.verifier.result import VerifierResult
    from pydantic import ValidationError

    if verifier is None:
        return None
    try:
        rewards = VerifierResult.model_validate_json(json.dumps(verifier)).rewards
    except ValidationError:
        return "unloadable"
    if rewards is None or "reward" not in rewards:
        return None
    value = rewards["reward"]
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    reward = float(value)
    return reward if math.isfinite(reward) and 0.0 <= reward <= 1.0 else None


@pytest.mark.parametrize(("case", "verifier", "reward", "infra", "raw", "binary"), REWARD_CASES)
def test_reward_cases_are_harbors_reading(
    case: str, verifier: Any, reward: float, infra: bool, raw: bool, binary: bool
) -> None:
    """The expected cells above are what harbor's model and upstream's scorer read (where harbor
    can load the trial at all: a null or a word it cannot)."""
    upstream = _upstream_reward(verifier)
    if upstream == "unloadable":
        assert case in ("null-value", "word")
        return
    assert (0.0 if upstream is None else upstream, upstream is None) == (reward, infra)


@hypothesis_settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.text(alphabet="0123456789_.eE+- \t\xa0naifx", max_size=7), st.booleans()))
def test_the_oracle_reads_rewards_as_harbors_model_does(value: Any) -> None:
    """reference.oracle's reading (and so the views it holds) against harbor's model itself."""
    result = {"verifier_result": {"rewards": {"reward": value}}}
    upstream = _upstream_reward(result["verifier_result"])
    expected = None if upstream == "unloadable" else upstream
    assert oracle.measured_reward(result, "reward") == expected


def test_reward_1e400_is_not_finite(cases_lake: Path) -> None:
    got = cell(cases_lake, "reward-1e400")
    assert (got["reward"], got["infra_failed"], got["passed"]) == (0.0, True, False)


def test_measured_reward_is_a_real_outcome_whatever_the_exception(cases_lake: Path) -> None:
    got = cell(cases_lake, "reward-timeout-measured")
    assert (got["reward"], got["infra_failed"], got["passed"]) == (1.0, False, True)


def test_reward_key_setting(cases_lake: Path) -> None:
    assert cell(cases_lake, "reward-two-keys")["reward"] == 0.0
    got = cell(cases_lake, "reward-two-keys", {"wmo_reward_key": "score"})
    assert (got["reward"], got["infra_failed"], got["passed"]) == (1.0, False, True)
    # under that key, a trial that only has `reward` has no measured reward
    got = cell(cases_lake, "reward-float-1", {"wmo_reward_key": "score"})
    assert (got["reward"], got["infra_failed"]) == (0.0, True)


def test_settings_in_plain_sql(cases_lake: Path) -> None:
    con = connect(cases_lake)
    try:
        con.execute("SET VARIABLE wmo_reward_key = 'score'")
        con.execute("SET VARIABLE wmo_reward_mode = 'positive-binary'")
        got = con.sql(
            "SELECT reward, passed FROM cells WHERE trial_name = 'reward-two-keys'"
        ).fetchall()
        assert got == [(1.0, True)]
        con.execute("SET VARIABLE wmo_reward_mode = 'binary'")
        with pytest.raises(duckdb.Error, match="wmo_reward_mode must be 'raw' or"):
            con.sql("SELECT passed FROM cells").fetchall()
    finally:
        con.close()


@pytest.mark.parametrize(
    ("variant", "named"),
    [
        ("huge-count", "passed is 18446744073709551616"),
        ("huge-count-only", "passed is 18446744073709551616"),
    ],
)
def test_a_summary_past_64_bits_is_said_and_left_out(
    cases_lake: Path, variant: str, named: str
) -> None:
    rows = query(
        cases_lake,
        f"SELECT kind, message FROM problems WHERE trial_name = 'ctrf-{variant}'",
    )
    assert [row["kind"] for row in rows] == ["out_of_range"]
    assert f"results.summary.{named}, more than a 64-bit count holds" in rows[0]["message"]
    trial = query(
        cases_lake,
        "SELECT ctrf_status, ctrf_summary_present, ctrf_passed FROM trials "
        f"WHERE trial_name = 'ctrf-{variant}'",
    )
    assert trial == [{"ctrf_status": "ok", "ctrf_summary_present": False, "ctrf_passed": None}]


@pytest.mark.parametrize(
    ("summary", "present"),
    [
        ({"passed": 2, "failed": 1}, True),
        ({"passed": 2}, False),
        ({"failed": 1}, False),
        ({"passed": 2, "failed": None}, False),
    ],
)
def test_a_summary_is_present_with_both_passed_and_failed(
    tmp_path: Path, summary: dict[str, Any], present: bool
) -> None:
    """Upstream ctrf.py's `_from_summary` reads no summary unless both `passed` and `failed`
    are there (`summary.passed is None or summary.failed is None: return None`)."""
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
    write_trial(job, "t__1", ctrf={"results": {"summary": summary, "tests": []}})
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    rows = query(tmp_path / "lake", "SELECT ctrf_summary_present FROM trials")
    assert rows == [{"ctrf_summary_present": present}]


def test_an_unresolved_count_past_64_bits_is_left_out_alone(cases_lake: Path) -> None:
    rows = query(
        cases_lake, "SELECT kind, message FROM problems WHERE trial_name = 'ctrf-huge-other'"
    )
    assert [row["kind"] for row in rows] == ["out_of_range"]
    assert "results.summary.other is 18446744073709551616" in rows[0]["message"]
    assert "the summary still grades" in rows[0]["message"]
    trial = query(
        cases_lake,
        "SELECT ctrf_summary_present, ctrf_passed, ctrf_failed, ctrf_other FROM trials "
        "WHERE trial_name = 'ctrf-huge-other'",
    )
    assert trial == [
        {"ctrf_summary_present": True, "ctrf_passed": 4, "ctrf_failed": 2, "ctrf_other": None}
    ]


@pytest.mark.parametrize(("variant", "expected"), CTRF_CASES)
def test_graded_tests(
    cases_lake: Path, variant: str, expected: tuple[int, int, int] | None
) -> None:
    got = cell(cases_lake, f"ctrf-{variant}")
    counts = (got["tests_passed"], got["tests_resolved"], got["tests_unresolved"])
    if expected is None:
        assert counts == (None, None, None)
        assert got["graded_score"] is None  # never 0.0
    else:
        assert counts == expected
        assert got["graded_score"] == expected[0] / expected[1]


def test_attempt_is_the_code_point_rank_of_trial_name_per_batch_and_task(
    cases_lake: Path,
) -> None:
    rows = query(
        cases_lake,
        "SELECT batch, trial_name, task_id, attempt FROM cells "
        "WHERE trial_name LIKE 'rank__%' ORDER BY batch, trial_name",
    )
    got = {(row["batch"].split("/")[2], row["trial_name"]): row["attempt"] for row in rows}
    assert got == {
        ("step-0001", "rank__B"): 1,
        ("step-0001", "rank__Z"): 2,
        ("step-0001", "rank__a"): 3,
        ("step-0001", "rank__b"): 4,
        ("step-0001", "rank__other"): 1,
        ("step-0002", "rank__A"): 1,
        ("step-0002", "rank__c"): 2,
    }
    # the scorer's task id is harbor's task_id.get_name(), the task dir's name, not task_name
    assert {row["task_id"] for row in rows} == {"rank", "other"}


def test_two_dirs_recording_one_trial_name_rank_by_trial_key(tmp_path: Path) -> None:
    """A dir copied inside its job with a new id records the same trial_name as the original:
    the tie is broken by the trial key, so the ranks are the same whatever order the dirs were
    read in (a fresh ingest and an incremental one agreed on nothing before)."""
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0000" / "job")
    write_trial(job, "hello__1", trial_id="id-b", task_name="hello")
    write_trial(job, "hello__2", trial_id="id-a", task_name="hello")
    write_trial(job, "hello__0", trial_id="id-c", task_name="hello")
    result = job / "hello__2" / "result.json"
    result.write_text(result.read_text().replace('"hello__2"', '"hello__1"'))
    ingest([tmp_path / "runs"], tmp_path / "lake")
    rows = query(tmp_path / "lake", "SELECT trial_key, trial_name, attempt FROM cells ORDER BY 3")
    assert [(r["trial_key"], r["trial_name"], r["attempt"]) for r in rows] == [
        ("id-c", "hello__0", 1),
        ("id-a", "hello__1", 2),
        ("id-b", "hello__1", 3),
    ]


def test_a_job_of_several_agents_ranks_a_tasks_trials_across_its_agents(tmp_path: Path) -> None:
    """The bundled real harbor job of two agents (oracle and nop, n_attempts 1: harbor ran each
    task once per agent). Upstream's scorer ranks a task's trials by trial_name whatever agent
    ran them (scorer.py groups by task_id alone): attempts 1 and 2 at each task."""
    shutil.copytree(FIXTURES / "offline-demo", tmp_path / "runs" / "offline-demo")
    ingest([tmp_path / "runs"], tmp_path / "lake")
    rows = query(
        tmp_path / "lake",
        "SELECT trial_name, task_id, attempt, json_extract_string(agent_config, '$.name') AS agent"
        " FROM cells ORDER BY trial_name",
    )
    assert [(r["trial_name"], r["task_id"], r["agent"], r["attempt"]) for r in rows] == [
        ("hello-offline__QwEz8RQ", "hello-offline", "oracle", 1),
        ("hello-offline__smNZG96", "hello-offline", "nop", 2),
        ("multi-reward__QomZjoN", "multi-reward", "oracle", 1),
        ("multi-reward__UzQpiVz", "multi-reward", "nop", 2),
        ("no-reward__yajtC3i", "no-reward", "oracle", 1),
        ("no-reward__z2F85cb", "no-reward", "nop", 2),
    ]


CELL_COLUMNS = (
    "task_id",
    "attempt",
    "reward",
    "passed",
    "infra_failed",
    "tests_passed",
    "tests_resolved",
    "tests_unresolved",
    "graded_score",
)


@pytest.mark.parametrize(
    "settings",
    [
        oracle.Settings(),
        oracle.Settings(reward_key="score", reward_mode="positive-binary"),
    ],
)
@pytest.mark.parametrize("seed", [101, 102])
def test_cells_match_the_oracle_on_generated_trees(
    tmp_path: Path, seed: int, settings: oracle.Settings
) -> None:
    root = generate_tree(tmp_path / "runs", seed)
    ingest([root], tmp_path / "lake", workers=1)
    got = {
        (row["batch"], row["trial_name"]): row
        for row in query(
            tmp_path / "lake",
            "SELECT * FROM cells",
            {"wmo_reward_key": settings.reward_key, "wmo_reward_mode": settings.reward_mode},
        )
    }
    expected = oracle.read_tree(root, settings).records
    assert len(got) == len(expected)
    for record in expected:
        row = got[(record["batch"], record["trial_name"])]
        for column in CELL_COLUMNS:
            assert row[column] == record[column], (record["trial_name"], column)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=0.0, max_value=1.0)
    | st.sampled_from([0, 1, 0.0, 1.0, -0.0, 5e-324, 1 - 2**-53])
    | st.text(max_size=4)
    | st.text(alphabet="0123456789_.eE+- \t\xa0", max_size=6)
    | st.sampled_from(["1", "0.5", " 1 ", "1_0", "+.5", "0-0", " 0_0.0 ", "nan", "inf"]),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2)
    ),
    max_leaves=3,
)


def _stored_reward_text(value: Any) -> str:
    """The rewards map's text for `value`, as the ingest stores it (`tables/trials.rewards`)."""
    problems = ProblemLog("k", "b")
    doc = Fields({"verifier_result": {"rewards": {"reward": value}}}, Path("result.json"), problems)
    ((_, text),) = rewards(doc) or []
    return text


@hypothesis_settings(max_examples=80, deadline=None)
@given(values=st.lists(JSON_VALUES, min_size=1, max_size=8))
def test_reward_rule_matches_the_oracle_for_any_json_value(values: list[Any]) -> None:
    """The cells reward rule over arbitrary JSON values, straight on a `trials` table holding
    the rewards map as the ingest stores it (key -> the JSON text of the value harbor's model
    reads)."""
    con = duckdb.connect()
    try:
        con.execute(
            "CREATE TABLE trials AS SELECT 'k' || i AS trial_key, 'b' AS batch, NULL AS run, "
            "NULL::BIGINT AS step, NULL AS job_key, NULL AS agent_config, 't' || i AS trial_name, "
            "'task' AS task_name, "
            "'task' AS task_id_name, "
            "'' AS artifact_dir, MAP {'reward': texts[i + 1]} AS rewards, "
            "NULL AS exception_type, 'absent' AS ctrf_status, NULL::BOOLEAN AS "
            "ctrf_summary_present, NULL::BOOLEAN AS ctrf_summary_valid, NULL::BIGINT AS "
            "ctrf_passed, NULL::BIGINT AS ctrf_failed, NULL::BIGINT AS ctrf_skipped, NULL::BIGINT "
            "AS ctrf_pending, NULL::BIGINT AS ctrf_other, NULL::INT AS ctrf_n_tests "
            "FROM (SELECT ?::VARCHAR[] AS texts), range(?) AS r(i)",
            [[_stored_reward_text(v) for v in values], len(values)],
        )
        con.execute("CREATE TABLE tests (trial_key VARCHAR, status VARCHAR)")
        create_settings(con)
        con.execute((sql_dir() / "cells.sql").read_text(encoding="utf-8"))
        got = dict(
            con.sql("SELECT trial_name, reward FROM cells WHERE NOT infra_failed").fetchall()
        )
    finally:
        con.close()
    for index, value in enumerate(values):
        result = {"verifier_result": {"rewards": {"reward": value}}}
        assert got.get(f"t{index}") == oracle.measured_reward(result, "reward"), value


# (task_id as harbor records it) for every kind of harbor task id
TASK_ID_SHAPES: list[dict[str, Any]] = [
    {"path": "/home/user/tasks/hello-offline"},
    {"path": "tasks/with-slash/"},
    {"path": "~/tasks/under-home"},
    {"git_url": "https://example.com/repo.git", "path": "tasks/a/../b"},
    {"git_url": "https://example.com/repo.git", "path": "x", "git_commit_id": "abc"},
    {"org": "acme", "name": "pkg", "ref": "latest"},
    # not harbor's own writing, but what it reads: a git id and a package tie, the git id wins
    {"git_url": "https://example.com/repo.git", "path": "tasks/tied", "org": "acme", "name": "p"},
]


def test_task_id_is_harbors_get_name_for_every_kind_of_task_id(tmp_path: Path) -> None:
    """WMO's scorer groups a batch by `trial.task_id.get_name()`, not by task_name (the real
    sample is task_name "demo/hello-offline", task "hello-offline"): local, git and package ids."""
    from harbor.models.trial.result import TrialResult
    from pydantic import TypeAdapter

    adapter = TypeAdapter(TrialResult.model_fields["task_id"].annotation)
    runs = tmp_path / "runs"
    job = write_job(runs / "r" / "harbor" / "step-0001" / "job")
    for index, task_id in enumerate(TASK_ID_SHAPES):
        for attempt in range(2):
            write_trial(
                job,
                f"t{index}__{attempt}",
                task_name=f"shared/name-{attempt}",  # task_name differs within a task
                result_overrides={"task_id": task_id},
            )
    ingest([runs], tmp_path / "lake")
    got = query(
        tmp_path / "lake", "SELECT trial_name, task_id, attempt FROM cells ORDER BY trial_name"
    )
    expected = [
        {
            "trial_name": f"t{index}__{attempt}",
            "task_id": adapter.validate_json(json.dumps(task_id)).get_name(),
            "attempt": attempt + 1,
        }
        for index, task_id in enumerate(TASK_ID_SHAPES)
        for attempt in range(2)
    ]
    assert got == expected


# A reward outside [0, 1] is no measurement to upstream's scorer (scorer.py `_trial_reward`:
# `if not math.isfinite(reward) or not 0.0 <= reward <= 1.0: return None`; `_measured_reward`
# raises "must be finite and in [0, 1]"), so the lake must both count the trial as infra_failed
# AND record the `invalid_reward` problem its stats note and export warning point to ("problems
# kind 'invalid_reward'"). Expected validity per value is that scorer condition: -0.5 and 1.5
# invalid, 0.0 and 1.0 valid. Kills trials.py's `rewards` check relaxed to `number > 1`
# (a negative reward then leaves no problem row).
UPSTREAM_INVALID = {-0.5: True, 1.5: True, 0.0: False, 1.0: False}


@pytest.mark.parametrize("value", sorted(UPSTREAM_INVALID))
def test_out_of_range_rewards_are_reported(tmp_path: Path, value: float) -> None:
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
    write_trial(job, "hello__1", reward=value)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    try:
        ((infra_failed,),) = con.sql("SELECT infra_failed FROM cells").fetchall()
        kinds = [k for (k,) in con.sql("SELECT kind FROM problems").fetchall()]
    finally:
        con.close()
    invalid = UPSTREAM_INVALID[value]
    assert infra_failed is invalid
    assert ("invalid_reward" in kinds) is invalid
