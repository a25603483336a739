"""Every `trials` and `stop_reasons` column that comes from result.json, as the typed msgspec
decode fills it, equals a plain `json.loads` reading of the same file: on the real harbor output,
on generated trees of every odd shape, and on git and package task ids. A column added to either
table without a reading here fails the coverage check."""

from __future__ import annotations

import itertools
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from conftest import ingested_rows
from edge_case_trees import generate_tree
from harbor.models.trial.config import AgentConfig
from harbor.models.trial.result import TrialResult
from harbor_shapes import UNSET, write_job, write_trial
from pydantic import TypeAdapter

from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.tables import TABLES

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harbor"
PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")
# Columns that do not come from result.json (labels, other files, the lake's own reading).
NOT_FROM_RESULT = {
    "trials": {
        "trial_key",
        "batch",
        "run",
        "step",
        "job_key",
        "artifact_dir",
        "spans_status",
        "n_spans",
        "dropped_turns",  # trial.log
        *(name for name in TABLES["trials"].schema.names if name.startswith("ctrf_")),
    },
    "stop_reasons": {
        "trial_key",
        "batch",
        "trajectory_status",
        "declared_complete",
        "has_trace",
        "trace_path",
        "trace_stop_reason",
        "run",  # the partition's
        "step",
    },
}


def harbor_task_id_name(doc: dict[str, Any]) -> str | None:
    """What WMO's scorer groups by: harbor's own `trial.task_id.get_name()`, of the TrialResult
    harbor reads from result.json (JSON mode: a dict validated in Python mode breaks a tie of
    the union's members otherwise)."""
    if not isinstance(doc.get("task_id"), dict):
        return None
    adapter = TypeAdapter(TrialResult.model_fields["task_id"].annotation)
    return adapter.validate_json(json.dumps(doc["task_id"])).get_name()


def _get(doc: Any, *keys: str) -> Any:
    for key in keys:
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


def _str(doc: Any, *keys: str) -> str | None:
    value = _get(doc, *keys)
    return value if isinstance(value, str) else None


def _int(doc: Any, *keys: str) -> int | None:
    value = _get(doc, *keys)
    ok = isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63
    return value if ok else None


def _number(doc: Any, *keys: str) -> float | None:
    value = _get(doc, *keys)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def _seconds(doc: Any, phase: str) -> float | None:
    start, end = _time(_get(doc, phase, "started_at")), _time(_get(doc, phase, "finished_at"))
    return None if start is None or end is None else (end - start).total_seconds()


HARBOR_REWARD = TypeAdapter(float | int)  # harbor's VerifierResult.rewards values


def _as_harbor_reads(value: Any) -> Any:
    """A reward value as harbor's TrialResult (pydantic, lax) reads it; as written when it
    cannot (the lake keeps such a value as written)."""
    if not isinstance(value, bool) and isinstance(value, int | float):
        return value
    try:
        return HARBOR_REWARD.validate_json(json.dumps(value))
    except ValueError:
        return value


def expected_trial(path: Path) -> dict[str, Any]:
    """The result.json columns of `trials`, read with json.loads and nothing of wmo_lake."""
    data = path.read_bytes()
    doc = json.loads(data)
    rewards = _get(doc, "verifier_result", "rewards")
    details = _get(doc, "agent_result", "rollout_details")
    org, name = _str(doc, "task_id", "org"), _str(doc, "task_id", "name")
    return {
        "trial_id": _str(doc, "id"),
        "trial_name": _str(doc, "trial_name"),
        "task_name": _str(doc, "task_name"),
        "trial_uri": _str(doc, "trial_uri"),
        "source": _str(doc, "source"),
        "task_checksum": _str(doc, "task_checksum"),
        "task_id_path": _str(doc, "task_id", "path"),
        "task_id_git_url": _str(doc, "task_id", "git_url"),
        "task_id_git_commit_id": _str(doc, "task_id", "git_commit_id"),
        "task_id_package": None if org is None or name is None else f"{org}/{name}",
        "task_id_ref": _str(doc, "task_id", "ref"),
        "task_id_name": harbor_task_id_name(doc),
        "agent_name": _str(doc, "agent_info", "name"),
        "agent_version": _str(doc, "agent_info", "version"),
        "model_name": _str(doc, "agent_info", "model_info", "name"),
        "model_provider": _str(doc, "agent_info", "model_info", "provider"),
        "n_input_tokens": _int(doc, "agent_result", "n_input_tokens"),
        "n_cache_tokens": _int(doc, "agent_result", "n_cache_tokens"),
        "n_output_tokens": _int(doc, "agent_result", "n_output_tokens"),
        "cost_usd": _number(doc, "agent_result", "cost_usd"),
        "rewards": None
        if not isinstance(rewards, dict)
        else {
            key: json.dumps(_as_harbor_reads(value), ensure_ascii=False, separators=(",", ":"))
            for key, value in rewards.items()
        },
        "exception_type": _str(doc, "exception_info", "exception_type"),
        "exception_message": _str(doc, "exception_info", "exception_message"),
        "n_episodes": _int(doc, "agent_result", "metadata", "n_episodes"),
        "started_at": _time(doc.get("started_at")),
        "finished_at": _time(doc.get("finished_at")),
        **{f"{phase}_sec": _seconds(doc, phase) for phase in PHASES},
        "multi_step": bool(doc.get("step_results")),
        "n_rollout_segments": len(details) if isinstance(details, list) else 0,
        "result_bytes": len(data),
        **expected_agent(path, doc),
    }


def _json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def harbor_turn_cap(kwargs: Any) -> Any:
    """terminus-2's `final_max_episodes` (harbor agents/terminus_2/terminus_2.py __init__):
    max_turns when not None, elif max_episodes is not None, elif episodes."""
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    if kwargs.get("max_turns") is not None:
        return kwargs["max_turns"]
    if kwargs.get("max_episodes") is not None:
        return kwargs["max_episodes"]
    return kwargs.get("episodes")


def expected_agent(path: Path, doc: dict[str, Any]) -> dict[str, Any]:
    """The agent columns: the AgentConfig result.json's config records, else the trial's
    config.json's; its identity as harbor's own model dumps it without defaults; the collection
    path from it, else from the job's agents[0]."""
    agent, source = _get(doc, "config", "agent"), "result.json"
    if not isinstance(agent, dict):
        agent, source = _get(_json_file(path.parent / "config.json"), "agent"), "config.json"
    if not isinstance(agent, dict):
        agent, source = None, None
    job_agents = _get(_json_file(path.parent.parent / "config.json"), "agents")
    job_agent = job_agents[0] if isinstance(job_agents, list) and job_agents else None
    sink = _get(agent if agent is not None else job_agent, "kwargs", "token_sink_dir")
    cap = harbor_turn_cap(_get(agent, "kwargs"))
    limit = _int(agent, "kwargs", "llm_kwargs", "context_limit")
    identity = None
    if agent is not None:
        dumped = AgentConfig.model_validate(agent).model_dump(mode="json", exclude_defaults=True)
        identity = json.dumps(dumped, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return {
        "agent_source": source,
        "agent_config": identity,
        "max_turns": cap if isinstance(cap, int) and not isinstance(cap, bool) else None,
        "max_tokens": _int(agent, "kwargs", "llm_kwargs", "max_tokens"),
        "context_limit": limit if limit is not None else _int(agent, "kwargs", "context_window"),
        "collection_path": "pi-bridge" if isinstance(sink, str) and sink else "terminus-2",
    }


def expected_stop_evidence(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_bytes())
    return {
        "trial_name": _str(doc, "trial_name"),
        "exception_type": _str(doc, "exception_info", "exception_type"),
        "n_episodes": _int(doc, "agent_result", "metadata", "n_episodes"),
    }


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, float) and math.isnan(want):
        return math.isnan(got)
    return got == want


def test_every_column_has_a_plain_reading() -> None:
    for table, reading in (("trials", expected_trial), ("stop_reasons", expected_stop_evidence)):
        keys = set(
            reading(FIXTURES / "offline-terminus2" / "hello-offline__haymH7n" / "result.json")
        )
        names = set(TABLES[table].schema.names)
        assert keys | NOT_FROM_RESULT[table] == names, table
        assert not keys & NOT_FROM_RESULT[table]


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("columns")
    import shutil

    shutil.copytree(FIXTURES, root / "runs" / "fixtures")
    generate_tree(root / "runs" / "generated", 401, trials=30)
    job = write_job(root / "runs" / "task-ids" / "job")
    write_trial(
        job,
        "git__1",
        result_overrides={
            "task_id": {
                "git_url": "https://example.com/tasks.git",
                "git_commit_id": "abc123",
                "path": "tasks/hello",
            },
            "source": "terminal-bench@2.0",
        },
    )
    write_trial(
        job,
        "pkg__1",
        result_overrides={"task_id": {"org": "acme", "name": "hello", "ref": "sha256:feed"}},
    )
    write_trial(
        job, "odd__1", result_overrides={"task_id": "hello", "source": 5, "trial_uri": None}
    )
    ingest([root / "runs"], root / "lake", workers=1)
    return root


@pytest.mark.parametrize("table", ["trials", "stop_reasons"])
def test_typed_decode_equals_json_loads(trees: Path, table: str) -> None:
    reading = expected_trial if table == "trials" else expected_stop_evidence
    con = connect(trees / "lake")
    rows = con.sql(
        f"SELECT x.*, t.artifact_dir AS _dir FROM {table} AS x JOIN trials AS t USING (trial_key)"
    ).fetchall()
    names = [d[0] for d in con.sql(f"SELECT x.*, 1 AS _dir FROM {table} AS x").description]
    assert len(rows) > 50
    for values in rows:
        row = dict(zip(names, values, strict=True))
        want = reading(Path(row["_dir"]) / "result.json")
        for column, value in want.items():
            assert _same(row[column], value), (row["_dir"], column, row[column], value)


def test_local_task_path_resolved_afresh_by_each_reader(tmp_path: Path) -> None:
    """A local task path is resolved once per reader (the trials of a batch share a few), but a
    link re-pointed between two readers' runs is resolved again, never answered from before."""
    from wmo_lake.extract import begin_reading
    from wmo_lake.tables.fields import Fields, ProblemLog
    from wmo_lake.tables.trials import task_id_name

    for name in ("task-a", "task-b"):
        (tmp_path / name).mkdir()
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "task-a", target_is_directory=True)
    doc = {"task_id": {"path": str(link)}}

    def name_now() -> str | None:
        return task_id_name(Fields(doc, tmp_path / "result.json", ProblemLog("k", "b")))

    begin_reading()
    assert name_now() == "task-a"
    link.unlink()
    link.symlink_to(tmp_path / "task-b", target_is_directory=True)
    begin_reading()
    assert name_now() == "task-b"


@pytest.mark.parametrize(
    "task_id",
    [
        {"path": "tasks/hello"},
        {"git_url": "https://x/r.git", "git_commit_id": None, "path": "a/b/../c"},
        {"org": "acme", "name": "pkg", "ref": None},
        # objects harbor never writes but reads, by its union's rules (most fields given)
        {"org": "acme", "name": "pkg", "path": "/tasks/hello-local"},
        {"git_url": "https://x/r.git", "path": "p/q", "org": "acme", "name": "pkg"},
        {
            "git_url": "https://x/r.git",
            "path": "p/q",
            "git_commit_id": None,
            "org": "a",
            "name": "b",
        },
        {"git_url": "https://x/r.git", "path": "x/../.."},
        {"git_url": "https://x/r.git", "path": "/abs/q"},
        {"path": "p", "org": "acme", "name": "pkg", "ref": None},
    ],
)
def test_task_id_name_is_harbors_get_name(task_id: dict[str, Any], tmp_path: Path) -> None:
    from wmo_lake.extract import begin_reading
    from wmo_lake.tables.fields import Fields, ProblemLog
    from wmo_lake.tables.trials import task_id_name

    begin_reading()
    doc = {"task_id": task_id}
    ours = task_id_name(Fields(doc, tmp_path / "result.json", ProblemLog("k", "b")))
    assert ours == harbor_task_id_name(doc)


def test_task_id_name_is_harbors_for_every_mix_of_fields(tmp_path: Path) -> None:
    """Every mix of the three members' fields (absent, a value, null, a path harbor's git id
    refuses), against harbor's union as it reads result.json: a tie of a git id and a package
    (`{git_url, path, org, name}`) is the git id there."""
    from pydantic import ValidationError

    from wmo_lake.extract import begin_reading
    from wmo_lake.tables.fields import Fields, ProblemLog
    from wmo_lake.tables.trials import task_id_name

    absent = object()
    values: dict[str, list[Any]] = {
        "path": [absent, "p/q", "/abs/q", "x/../..", None, 3],
        "git_url": [absent, "https://x/r.git", None],
        "git_commit_id": [absent, "abc", None],
        "org": [absent, "acme", None],
        "name": [absent, "pkg", None],
        "ref": [absent, "v1", None],
    }
    begin_reading()
    differing = []
    for combination in itertools.product(*values.values()):
        task_id = {k: v for k, v in zip(values, combination, strict=True) if v is not absent}
        doc = {"task_id": task_id}
        try:
            theirs = harbor_task_id_name(doc)
        except ValidationError:
            theirs = None
        ours = task_id_name(Fields(doc, tmp_path / "result.json", ProblemLog("k", "b")))
        if ours != theirs:
            differing.append((task_id, ours, theirs))
    assert not differing, differing[:5]


@pytest.mark.parametrize(
    "written",
    [
        "2026-11-29T19:20:34.716395Z",
        "2026-11-29T19:20:34+02:00",
        "2026-11-29 19:20:34",
        "2026-11-29T19:20:34.1234567Z",
        "2026-11-29t19:20:34.716395z",
        1796066434,
        "1796066434",
        1796066434123,
        "20261129T192034Z",
        "yesterday",
        True,
        # fromisoformat takes these and pydantic refuses them: the fast path stored them
        "2026-12-01T01",
        "2026-12-01T01:25:50+05",
        "2026-12-01T012550Z",
        "2026-12-01T01:25:50+05:30:15",
        "2026-12-01+0530",
    ],
)
def test_trial_times_read_as_harbors_model_reads_them(written: Any, tmp_path: Path) -> None:
    """started_at as harbor's TrialResult (pydantic datetime) reads it, in UTC; a value the model
    refuses is null and a wrong_type problem."""
    from harbor.models.trial.result import TimingInfo
    from pydantic import ValidationError

    from wmo_lake.tables.fields import Fields, ProblemLog

    try:
        parsed = TimingInfo.model_validate_json(json.dumps({"started_at": written})).started_at
    except ValidationError:
        parsed = None
    if parsed is not None:
        parsed = parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    problems = ProblemLog("k", "b")
    ours = Fields({"started_at": written}, tmp_path / "result.json", problems).time("started_at")
    assert ours == parsed
    assert [row["kind"] for row in problems.rows] == ([] if parsed else ["wrong_type"])


def _harbor_time(written: Any) -> datetime | None:
    from harbor.models.trial.result import TimingInfo
    from pydantic import ValidationError

    try:
        parsed = TimingInfo.model_validate_json(json.dumps({"started_at": written})).started_at
    except ValidationError:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def test_every_time_spelling_reads_as_harbors_model_reads_it(tmp_path: Path) -> None:
    """Dates, separators, times and zones in every combination (1,760 strings): a time is read
    exactly when harbor's TrialResult reads it, as the same instant."""
    from wmo_lake.tables.fields import Fields, ProblemLog

    dates = ["2026-12-01", "20261201", "2026-W48-2", "2026-335"]
    separators = ["T", " ", "t", ""]
    times = ["", "01", "01:25", "0125", "01:25:50", "012550", "01:25:50.5"]
    times += ["01:25:50,123456789", "24:00", "24:00:00"]
    zones = ["", "Z", "z", "+00:00", "+0530", "+05", "-08:00:00", "+05:30:15.5", " Z", "UTC"]
    zones += ["Z+00:00", "+05:60", "-05:99", "+23:59", "+24:00"]
    differing = []
    for date, separator, time, zone in itertools.product(dates, separators, times, zones):
        written = date + (separator + time if time else "") + zone
        ours = Fields({"t": written}, tmp_path / "result.json", ProblemLog("k", "b")).time("t")
        if ours != _harbor_time(written):
            differing.append((written, ours, _harbor_time(written)))
    assert not differing, differing[:5]


@pytest.mark.parametrize("written", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_a_time_harbor_reads_past_the_years_a_datetime_holds_is_null_and_said(
    written: str, tmp_path: Path
) -> None:
    """harbor reads it, and its UTC falls in year 0 or 10000: the OverflowError lost the whole
    trial (extract_failed). Now the one column is null, with a problem naming the value."""
    from harbor.models.trial.result import TimingInfo

    from wmo_lake.tables.fields import Fields, ProblemLog

    assert TimingInfo.model_validate_json(json.dumps({"started_at": written})).started_at
    problems = ProblemLog("k", "b")
    fields = Fields({"started_at": written}, tmp_path / "result.json", problems)
    assert fields.time("started_at") is None
    [row] = problems.rows
    assert row["kind"] == "wrong_type" and repr(written) in row["message"]
    assert "years 1 to 9999" in row["message"]


def test_a_phase_duration_is_harbors_even_where_a_time_has_no_utc_datetime(
    tmp_path: Path,
) -> None:
    """A phase that started at `0001-01-01T00:00:00+01:00` (year 0 in UTC): harbor's model
    reads both times, and its duration (finished_at - started_at) is a finite number of seconds;
    the duration column was null."""
    from harbor.models.trial.result import TimingInfo

    from wmo_lake.tables.fields import Fields, ProblemLog
    from wmo_lake.tables.trials import row

    phase = {"started_at": "0001-01-01T00:00:00+01:00", "finished_at": "2026-12-06T10:00:00Z"}
    timing = TimingInfo.model_validate_json(json.dumps(phase))
    assert timing.started_at is not None and timing.finished_at is not None
    expected = (timing.finished_at - timing.started_at).total_seconds()
    problems = ProblemLog("k", "b")
    doc = Fields({"agent_execution": phase}, tmp_path / "result.json", problems)
    assert row(doc)["agent_execution_sec"] == expected
    assert not [p for p in problems.rows if "agent_execution" in p["message"]]


# Seed 000's `load_trial_rollout_spans` calls a trial MULTI-STEP only when its result's
# `agent_result` is not an object AND `payload.get("step_results")` is truthy (a non-empty list):
# an agent_result of null with no (or an empty) step_results is a trial that recorded no rollout
# details (the lake's `absent`), not a multi-step one. The `trials.multi_step` column is documented
# as "whether [step_results] is non-empty", the same test. Expected values are that seed condition
# evaluated on these results (no step_results / [] -> not multi-step; [{"step": 1}] -> multi-step).
# Kills spans.py returning MULTI_STEP whenever agent_result is no object, and trials.py's
# multi_step read as `step_results is not None`.
@pytest.mark.parametrize(
    ("step_results", "expected"),
    [
        (UNSET, ("absent", False, 0)),
        ([], ("absent", False, 0)),
        ([{"step": 1}], ("multi_step", True, 0)),
    ],
    ids=["none", "empty-list", "one-step"],
)
def test_multi_step_only_for_non_empty_step_results(
    tmp_path: Path, step_results: Any, expected: tuple[str, bool, int]
) -> None:
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
    write_trial(
        job,
        "hello__1",
        reward=0.0,
        step_results=step_results,
        result_overrides={"agent_result": None},
    )
    [rows] = ingested_rows(tmp_path, "SELECT spans_status, multi_step, n_spans FROM trials")
    assert rows == [expected]


# A task_id that names a git repo but whose git_commit_id is no string is NOT a git task to
# harbor: its TrialResult's `task_id` union (LocalTaskId | GitTaskId | PackageTaskId, JSON mode)
# refuses GitTaskId there and takes LocalTaskId, whose get_name() is the resolved path's last part.
# For path "." that is the working directory's name. Expected values: harbor's own
# `TypeAdapter(TrialResult.model_fields["task_id"].annotation).validate_json(...).get_name()` run
# from a dir named `wd` on these task ids gave "wd" (commit 5) and "wd" (commit true), and ""
# with a string commit (a git task: the normalized path has no parts). Kills trials.py's
# task_id_name without its `_optional_str(task_id, "git_commit_id")` check.
GIT = "https://example.com/tasks.git"


@pytest.mark.parametrize(
    ("task_id", "expected"),
    [
        ({"git_url": GIT, "git_commit_id": 5, "path": "."}, "wd"),
        ({"git_url": GIT, "git_commit_id": True, "path": "."}, "wd"),
        ({"git_url": GIT, "git_commit_id": "abc", "path": "."}, ""),
    ],
    ids=["int-commit", "bool-commit", "string-commit"],
)
def test_a_non_string_commit_makes_a_local_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, task_id: dict[str, Any], expected: str
) -> None:
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
    trial = write_trial(job, "hello__1", reward=1.0)
    path = trial / "result.json"
    result = json.loads(path.read_text())
    result["task_id"] = task_id
    path.write_text(json.dumps(result, indent=4))
    (tmp_path / "wd").mkdir()
    monkeypatch.chdir(tmp_path / "wd")  # harbor resolves a local task's path where it runs
    [rows] = ingested_rows(tmp_path, "SELECT task_id_name FROM trials")
    assert rows == [(expected,)]
