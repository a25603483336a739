"""The `trajectories`, `steps` and `tool_calls` tables (issue 5, item 1), on one small tree built in
tmp_path from the real harbor trial, each trial's agent/ dir rewritten to show one rule. Expected
values are written out by hand from the trajectories the tests write."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import ingested_rows
from harbor_shapes import dump, real_trajectory, write_job, write_trial

from wmo_lake import jsonfile
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.tables import TABLES
from wmo_lake.tables import trajectories as trajectories_module
from wmo_lake.tables.trajectories import read_trial_trajectories


def step(step_id: int, source: str, message: Any = "", **fields: Any) -> dict[str, Any]:
    return {"step_id": step_id, "source": source, "message": message, **fields}


def trajectory(*steps: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "schema_version": "ATIF-v1.8",
        "session_id": "s",
        "agent": {"name": "terminus-2", "version": "2.0.0", "model_name": "m"},
        "steps": list(steps),
        **top,
    }


PARTS = trajectory(
    step(
        1,
        "user",
        [
            {"type": "text", "text": "Hello "},
            {"type": "image", "source": {"media_type": "image/png", "path": "img/a.png"}},
            {"type": "text", "text": "world"},
        ],
        timestamp="2026-11-29T19:20:34Z",
    ),
    step(
        2,
        "agent",
        "Plan: look.",
        timestamp="2026-11-29T19:20:36.500000+00:00",
        model_name="gpt-x",
        reasoning_content="think first",
        tool_calls=[
            {
                "tool_call_id": "c1",
                "function_name": "bash",
                "arguments": {"cmd": "echo é", "n": [1, 2.5], "ok": True},
            },
            {"tool_call_id": "c2", "function_name": "noargs"},
        ],
        observation={
            "results": [
                {"source_call_id": "c1", "content": "out one"},
                {"subagent_trajectory_ref": [{"session_id": "x"}]},
                {"source_call_id": "c2", "content": [{"type": "text", "text": "out two"}]},
            ]
        },
        metrics={
            "prompt_tokens": 120,
            "completion_tokens": 7,
            "cached_tokens": 20,
            "cost_usd": 0.25,
            "prompt_token_ids": [1, 2, 3],
            "completion_token_ids": [4],
            "logprobs": [-0.5],
        },
        llm_call_count=1,
    ),
    step(
        3,
        "system",
        "summarizing",
        observation={"results": [{"subagent_trajectory_ref": [{"session_id": "y"}]}]},
    ),
)


def linear(*sources_copied: tuple[str, bool], ref: str | None = None) -> dict[str, Any]:
    steps = [
        step(i, source, f"{source} {i}", is_copied_context=copied)
        for i, (source, copied) in enumerate(sources_copied, 1)
    ]
    return trajectory(*steps, **({"continued_trajectory_ref": ref} if ref else {}))


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("steps")
    job = write_job(root / "runs" / "job")

    write_trial(job, "real__1")

    agent = write_trial(job, "parts__1") / "agent"
    dump(agent / "trajectory.json", PARTS)

    agent = write_trial(job, "chain__1") / "agent"
    dump(
        agent / "trajectory.json",
        linear(("user", False), ("agent", False), ref="trajectory.cont-1.json"),
    )
    dump(
        agent / "trajectory.cont-1.json",
        linear(("user", True), ("agent", False), ref="trajectory.cont-2.json"),
    )
    dump(agent / "trajectory.cont-2.json", linear(("agent", False)))
    dump(agent / "trajectory.cont-5.json", linear(("agent", False)))  # nothing refers to it
    dump(
        agent / "trajectory.summarization-1-summary.json", linear(("user", True), ("agent", False))
    )
    dump(agent / "trajectory.summarization-1-answers.json", linear(("agent", False)))

    agent = write_trial(job, "badjson__1") / "agent"
    (agent / "trajectory.json").write_text('{"steps": [', encoding="utf-8")
    dump(agent / "trajectory.summarization-1-summary.json", linear(("agent", False)))

    agent = write_trial(job, "array__1") / "agent"
    dump(agent / "trajectory.json", [])

    agent = write_trial(job, "wrong__1") / "agent"
    dump(
        agent / "trajectory.json",
        trajectory(
            "not a step",
            step("x", "robot", 5, metrics={"prompt_tokens": "ten"}, tool_calls="nope"),
            step(3, "agent", "fine", metrics={"prompt_tokens": "eleven"}, timestamp="yesterday"),
        ),
    )

    agent = write_trial(job, "missingref__1") / "agent"
    dump(agent / "trajectory.json", linear(("agent", False), ref="trajectory.cont-9.json"))

    oracle = write_trial(job, "oracle__1")
    (oracle / "agent" / "trajectory.json").unlink()
    (oracle / "agent" / "oracle.txt").write_text("done\n", encoding="utf-8")

    lake_dir = root / "lake"
    ingest([root / "runs"], lake_dir, workers=1)
    return lake_dir


def query(lake: Path, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    con = connect(lake)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def test_token_ids_are_not_stored() -> None:
    names = set(TABLES["steps"].schema.names) | set(TABLES["tool_calls"].schema.names)
    assert not {n for n in names if "token_ids" in n or "logprob" in n}


def test_real_terminus_trial_steps(lake: Path) -> None:
    rows = query(
        lake,
        "SELECT step_index, step_id, source, model_name, n_tool_calls, prompt_tokens, "
        "completion_tokens, cached_tokens, cost_usd, length(observation), file, trace_source "
        "FROM steps WHERE trial_name = 'real__1' ORDER BY step_index",
    )
    real = real_trajectory()["steps"]
    assert [r[:5] for r in rows] == [
        (0, 1, "user", None, 0),
        (1, 2, "agent", "gpt-4o", 2),
        (2, 3, "agent", "gpt-4o", 1),
        (3, 4, "agent", "gpt-4o", 1),
    ]
    assert [r[5:9] for r in rows] == [
        (None, None, None, None),
        (600, 40, None, 0.0019),
        (750, 45, 100, pytest.approx(0.0022)),
        (900, 50, 200, pytest.approx(0.0025)),
    ]
    assert [r[9] for r in rows[1:]] == [
        len(s["observation"]["results"][0]["content"]) for s in real[1:]
    ]
    assert {(r[10], r[11]) for r in rows} == {("trajectory.json", "main")}


def test_content_parts_observations_and_metrics(lake: Path) -> None:
    rows = query(
        lake,
        "SELECT source, message, media, reasoning_content, observation, timestamp::VARCHAR, "
        "n_tool_calls, prompt_tokens, completion_tokens, cached_tokens, cost_usd, "
        "llm_call_count, model_name FROM steps WHERE trial_name = 'parts__1' ORDER BY step_index",
    )
    user, agent, system = rows
    assert user[:3] == ("user", "Hello world", ["image:img/a.png"])
    assert user[5] == "2026-11-29 19:20:34+00"
    assert agent[1:5] == ("Plan: look.", [], "think first", "out one\nout two")
    assert agent[5] == "2026-11-29 19:20:36.5+00"
    assert agent[6:] == (2, 120, 7, 20, 0.25, 1, "gpt-x")
    # a subagent reference carries no content: no observation text
    assert system[0] == "system" and system[4] is None


def test_tool_calls_keep_harbor_argument_text(lake: Path) -> None:
    rows = query(
        lake,
        "SELECT step_index, step_id, call_index, tool_call_id, function_name, arguments "
        "FROM tool_calls WHERE trial_name = 'parts__1' ORDER BY call_index",
    )
    assert rows == [
        (1, 2, 0, "c1", "bash", '{"cmd": "echo é", "n": [1, 2.5], "ok": true}'),
        (1, 2, 1, "c2", "noargs", "{}"),
    ]


def test_continuations_and_subagents_are_labelled_by_file(lake: Path) -> None:
    files = query(
        lake,
        "SELECT file_index, file, trace_source, status, n_steps, continued_trajectory_ref "
        "FROM trajectories WHERE trial_name = 'chain__1' ORDER BY file_index",
    )
    assert files == [
        (0, "trajectory.json", "main", "ok", 2, "trajectory.cont-1.json"),
        (1, "trajectory.cont-1.json", "main", "ok", 2, "trajectory.cont-2.json"),
        (2, "trajectory.cont-2.json", "main", "ok", 1, None),
        (3, "trajectory.cont-5.json", "main", "ok", 1, None),
        (4, "trajectory.summarization-1-answers.json", "summarization-1-answers", "ok", 1, None),
        (5, "trajectory.summarization-1-summary.json", "summarization-1-summary", "ok", 2, None),
    ]
    steps = query(
        lake,
        "SELECT file, step_index, source, message, is_copied_context FROM steps "
        "WHERE trial_name = 'chain__1' ORDER BY file_index, step_index",
    )
    assert steps == [
        ("trajectory.json", 0, "user", "user 1", False),
        ("trajectory.json", 1, "agent", "agent 2", False),
        ("trajectory.cont-1.json", 0, "user", "user 1", True),
        ("trajectory.cont-1.json", 1, "agent", "agent 2", False),
        ("trajectory.cont-2.json", 0, "agent", "agent 1", False),
        ("trajectory.cont-5.json", 0, "agent", "agent 1", False),
        ("trajectory.summarization-1-answers.json", 0, "agent", "agent 1", False),
        ("trajectory.summarization-1-summary.json", 0, "user", "user 1", True),
        ("trajectory.summarization-1-summary.json", 1, "agent", "agent 2", False),
    ]


def test_malformed_trajectories_are_problems_and_keep_the_trial(lake: Path) -> None:
    trials = {r[0] for r in query(lake, "SELECT trial_name FROM trials")}
    assert {"badjson__1", "array__1", "wrong__1", "missingref__1", "oracle__1"} <= trials
    statuses = query(
        lake,
        "SELECT trial_name, file, status FROM trajectories "
        "WHERE trial_name IN ('badjson__1', 'array__1') ORDER BY trial_name, file_index",
    )
    assert statuses == [
        ("array__1", "trajectory.json", "malformed"),
        ("badjson__1", "trajectory.json", "unreadable"),
        ("badjson__1", "trajectory.summarization-1-summary.json", "ok"),
    ]
    # the readable subagent file of a trial whose main file is broken is still in the lake
    assert query(lake, "SELECT count(*) FROM steps WHERE trial_name = 'badjson__1'") == [(1,)]
    problems = query(
        lake,
        "SELECT trial_name, kind, path FROM problems "
        "WHERE trial_name IN ('badjson__1', 'array__1', 'missingref__1') ORDER BY trial_name",
    )
    assert [(t, k, Path(p).name) for t, k, p in problems] == [
        ("array__1", "malformed_trajectory", "trajectory.json"),
        ("badjson__1", "invalid_json", "trajectory.json"),
        ("missingref__1", "missing_continuation", "trajectory.cont-9.json"),
    ]
    # each unreadable file is reported once, not once by stop_reasons and again by steps
    assert query(lake, "SELECT count(*) FROM problems WHERE trial_name = 'badjson__1'") == [(1,)]


def test_each_file_row_holds_the_size_of_its_file(lake: Path) -> None:
    """`bytes` is the file's size, for trajectory.json (the size its one read saw) as for the
    others, readable or not."""
    rows = query(
        lake,
        "SELECT t.artifact_dir, f.file, f.status, f.bytes FROM trajectories AS f "
        "JOIN trials AS t USING (trial_key) WHERE f.file NOT LIKE '%#%'",
    )
    statuses = {(file, status) for _, file, status, _ in rows}
    assert {("trajectory.json", "ok"), ("trajectory.json", "unreadable")} <= statuses
    assert ("trajectory.json", "malformed") in statuses
    for artifact_dir, file, _, size in rows:
        assert size == (Path(artifact_dir) / "agent" / file).stat().st_size, (artifact_dir, file)


def test_wrong_types_are_left_null_and_reported_once_per_field(lake: Path) -> None:
    rows = query(
        lake,
        "SELECT step_index, step_id, source, message, prompt_tokens, n_tool_calls, timestamp "
        "FROM steps WHERE trial_name = 'wrong__1' ORDER BY step_index",
    )
    # steps[0] is not an object: skipped; the others keep what is well typed
    assert rows == [(1, None, "robot", None, None, 0, None), (2, 3, "agent", "fine", None, 0, None)]
    messages = sorted(
        r[0] for r in query(lake, "SELECT message FROM problems WHERE trial_name = 'wrong__1'")
    )
    assert len(messages) == 7
    prompt = [m for m in messages if "metrics.prompt_tokens" in m]
    assert prompt == [
        "trajectory.json: steps[1, 2].metrics.prompt_tokens is a string, expected an integer "
        "(2 steps); the column is left null for those steps"
    ]
    joined = "\n".join(messages)
    assert "steps[0] is a string, expected an object (1 step); those steps are skipped" in joined
    for field in ("steps[1].step_id", "steps[1].source", "steps[1].message"):
        assert field in joined
    assert "steps[1].tool_calls" in joined and "steps[2].timestamp" in joined


def test_trial_without_trajectory_has_no_rows(lake: Path) -> None:
    for table in ("trajectories", "steps", "tool_calls"):
        assert query(lake, f"SELECT count(*) FROM {table} WHERE trial_name = 'oracle__1'") == [(0,)]


def test_extraction_reads_each_trajectory_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = write_job(tmp_path / "runs" / "job")
    agent = write_trial(job, "chain__1") / "agent"
    dump(agent / "trajectory.json", linear(("agent", False), ref="trajectory.cont-1.json"))
    dump(agent / "trajectory.cont-1.json", linear(("agent", False)))
    dump(agent / "trajectory.summarization-1-summary.json", linear(("agent", False)))
    reads: list[str] = []
    original = jsonfile.read_file  # what every JSON artifact is read through

    def counting(path: Path | str) -> bytes:
        reads.append(os.path.basename(path))
        return original(path)

    monkeypatch.setattr(jsonfile, "read_file", counting)
    stats: list[str] = []  # a read file's size is the read's: no stat of it after
    sized = trajectories_module._size

    def counted_size(path: Path) -> int | None:
        stats.append(path.name)
        return sized(path)

    monkeypatch.setattr(trajectories_module, "_size", counted_size)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    trajectory_reads = sorted(n for n in reads if n.startswith("trajectory"))
    assert trajectory_reads == [
        "trajectory.cont-1.json",
        "trajectory.json",
        "trajectory.summarization-1-summary.json",
    ]
    assert stats == []


def test_a_read_lists_the_agent_dir_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fingerprint taken before a read and the read itself share one listing of agent/."""
    from wmo_lake.discover import TrialTask, discover
    from wmo_lake.extract import read_task

    job = write_job(tmp_path / "runs" / "job")
    agent = write_trial(job, "chain__1") / "agent"
    dump(agent / "trajectory.json", linear(("agent", False), ref="trajectory.cont-1.json"))
    dump(agent / "trajectory.cont-1.json", linear(("agent", False)))
    (candidate,) = discover(tmp_path / "runs").candidates
    listings: list[str] = []
    listdir = os.listdir

    def counted_listdir(path: Any = ".") -> list[str]:
        listings.append(str(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", counted_listdir)
    extracted = read_task(TrialTask.of(candidate))
    assert [os.path.basename(p) for p in listings] == ["agent"]
    assert extracted.fingerprint is not None
    assert sorted(extracted.tables["trajectories"].columns["file"]) == [
        "trajectory.cont-1.json",
        "trajectory.json",
    ]


def test_schema_is_what_the_issue_lists() -> None:
    steps = set(TABLES["steps"].schema.names)
    assert {
        "batch",
        "trial_name",
        "step_id",
        "source",
        "timestamp",
        "model_name",
        "message",
        "reasoning_content",
        "n_tool_calls",
        "observation",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "cost_usd",
        "is_copied_context",
        "file",
    } <= steps
    assert {"step_id", "tool_call_id", "function_name", "arguments"} <= set(
        TABLES["tool_calls"].schema.names
    )


def test_read_trial_trajectories_for_the_bench(tmp_path: Path) -> None:
    """The one-trial entry point `make bench` times reads what ingest reads."""
    from wmo_lake.tables.trajectories import read_trial_trajectories

    job = write_job(tmp_path / "runs" / "job")
    agent = write_trial(job, "chain__1") / "agent"
    dump(agent / "trajectory.json", linear(("agent", False), ref="trajectory.cont-1.json"))
    dump(agent / "trajectory.cont-1.json", linear(("user", True), ("agent", False)))
    tables = read_trial_trajectories(agent.parent)
    assert {name: table.num_rows for name, table in tables.items()} == {
        "trajectories": 2,
        "steps": 3,
        "tool_calls": 0,
        "problems": 0,
    }
    (agent / "trajectory.json").write_text("{", encoding="utf-8")
    tables = read_trial_trajectories(agent.parent)
    assert tables["problems"].column("kind").to_pylist() == ["invalid_json"]
    assert tables["trajectories"].column("status").to_pylist() == ["unreadable", "ok"]


def test_a_lake_from_before_these_tables_opens_with_them_empty(tmp_path: Path) -> None:
    """A lake ingested before trajectories / steps / tool_calls existed has no files for them: it
    still opens (the tables empty, every view working) until the next ingest fills them."""
    import duckdb

    from wmo_lake.lake import ensure_duckdb_file
    from wmo_lake.store import Store

    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "real__1")
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    manifest_file = lake / "manifest.json"
    manifest = json.loads(manifest_file.read_text())
    for table in ("trajectories", "steps", "tool_calls"):
        manifest["tables"].pop(table)
    manifest_file.write_text(json.dumps(manifest))
    (lake / "lake.duckdb").unlink(missing_ok=True)
    assert query(lake, "SELECT (SELECT count(*) FROM steps), (SELECT count(*) FROM episodes)") == [
        (0, 1)
    ]
    con = duckdb.connect(str(ensure_duckdb_file(Store(lake))), read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM conversations").fetchall() == [(0,)]
    finally:
        con.close()


def test_embedded_subagents_are_their_own_traces(tmp_path: Path) -> None:
    """ATIF-v1.7 `subagent_trajectories` inside a document are flattened like subagent files."""
    from wmo_lake.tables.trajectories import read_trial_trajectories

    job = write_job(tmp_path / "runs" / "job")
    agent = write_trial(job, "embedded__1") / "agent"
    main = linear(("user", False), ("agent", False))
    main["subagent_trajectories"] = [
        {**linear(("user", False), ("agent", False)), "trajectory_id": "search-1"},
        linear(("agent", False)),  # no trajectory_id: named by its position
    ]
    dump(agent / "trajectory.json", main)
    tables = read_trial_trajectories(agent.parent)
    files = tables["trajectories"].select(["file", "file_index", "trace_source", "n_steps"])
    assert files.to_pylist() == [
        {"file": "trajectory.json", "file_index": 0, "trace_source": "main", "n_steps": 2},
        {
            "file": "trajectory.json#search-1",
            "file_index": 1,
            "trace_source": "search-1",
            "n_steps": 2,
        },
        {
            "file": "trajectory.json#subagent-1",
            "file_index": 2,
            "trace_source": "subagent-1",
            "n_steps": 1,
        },
    ]
    assert tables["steps"].column("file_index").to_pylist() == [0, 0, 1, 1, 2]


def _many_row_lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lake whose segments are written as big ones are (SMALL_FILE_ROWS at 0)."""
    from wmo_lake import commit

    monkeypatch.setattr(commit, "SMALL_FILE_ROWS", 0)
    job = write_job(tmp_path / "runs" / "job")
    dump(write_trial(job, "parts__1") / "agent" / "trajectory.json", PARTS)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    return tmp_path / "lake"


def _string_encodings(lake: Path, table: str) -> list[dict[str, tuple[str, ...]]]:
    import pyarrow.parquet as pq

    from wmo_lake.store import Store

    store = Store(lake)
    found = []
    for path in store.files(store.read_manifest(), table):
        meta = pq.ParquetFile(path).metadata
        if meta.num_row_groups:
            names = meta.schema.names
            found.append(
                {names[i]: meta.row_group(0).column(i).encodings for i in range(len(names))}
            )
    return found


def _codecs(lake: Path, table: str) -> set[str]:
    import pyarrow.parquet as pq

    from wmo_lake.store import Store

    store = Store(lake)
    found = set()
    for path in store.files(store.read_manifest(), table):
        meta = pq.ParquetFile(path).metadata
        for group in range(meta.num_row_groups):
            found |= {meta.row_group(group).column(i).compression for i in range(meta.num_columns)}
    return found


def test_a_small_segment_has_no_parquet_dictionary(lake: Path) -> None:
    """A segment written in one go with few rows (a step of small trials) has no dictionaries:
    each would be a page of its own, encoded and compressed apart, for a few dozen rows; and
    it is lz4 (zstd's context per column chunk cost more than the encoding)."""
    for table in ("steps", "tool_calls", "trials"):
        files = _string_encodings(lake, table)
        assert files
        for encodings in files:
            assert not any("DICT" in e for e in encodings["trial_key"]), (table, encodings)
        assert _codecs(lake, table) == {"LZ4"}, table  # (pyarrow names LZ4_RAW so)


def test_free_text_is_written_without_a_parquet_dictionary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a big segment, long, distinct text (observations, messages, call arguments) skips
    dictionary encoding (wasted hashing); the labels that repeat keep it."""
    import pyarrow.parquet as pq

    from wmo_lake.store import Store

    lake = _many_row_lake(tmp_path, monkeypatch)
    store = Store(lake)
    manifest = store.read_manifest()
    for table, free in (("steps", "observation"), ("tool_calls", "arguments")):
        assert free in TABLES[table].free_text
        for path in store.files(manifest, table):
            meta = pq.ParquetFile(path).metadata
            if not meta.num_row_groups:
                continue
            names = meta.schema.names
            encodings = {names[i]: meta.row_group(0).column(i).encodings for i in range(len(names))}
            assert not any("DICT" in e for e in encodings[free]), (table, encodings[free])
            assert any("DICT" in e for e in encodings["trial_key"]), (table, encodings)
            # no min / max for free text (they prune nothing); the labels keep theirs
            column = {names[i]: meta.row_group(0).column(i) for i in range(len(names))}
            assert not column[free].is_stats_set, (table, free)
            assert column["trial_key"].is_stats_set, table
        assert _codecs(lake, table) == {"ZSTD"}, table


@pytest.mark.parametrize(
    ("mutate", "says"),
    [
        (
            lambda t: t["steps"][1].__setitem__("observation", "the tool output"),
            "steps[1].observation is a string, expected an object with `results`",
        ),
        (
            lambda t: t["steps"][1].__setitem__("observation", {"results": "x"}),
            "steps[1].observation.results is a string, expected an array",
        ),
        (lambda t: t["steps"][0].pop("source"), "steps[0].source is null, expected one of"),
        (
            lambda t: t["steps"][1]["tool_calls"][0].pop("function_name"),
            "steps[1].tool_calls[].function_name is null, expected a string",
        ),
        (
            lambda t: t["steps"][1]["tool_calls"][0].pop("tool_call_id"),
            "steps[1].tool_calls[].tool_call_id is null, expected a string",
        ),
        (lambda t: t.pop("agent"), "agent is null, expected an object"),
        (
            lambda t: t.__setitem__("schema_version", "ATIF-v9"),
            "schema_version is 'ATIF-v9', expected one of ATIF-v1.0 to ATIF-v1.8",
        ),
        (
            lambda t: t.__setitem__("schema_version", None),
            "schema_version is null, expected one of ATIF-v1.0 to ATIF-v1.8",
        ),
        # (these were taken without a word)
        (
            lambda t: t["steps"][1]["tool_calls"][0].__setitem__("arguments", "ls -l"),
            "steps[1].tool_calls[].arguments is a string, expected an object (1 step); kept as "
            "recorded",
        ),
        (
            lambda t: t["steps"][1].__setitem__("observation", {"results": [{"content": {}}]}),
            "steps[1].observation.results[].content is an object, expected a string or a list of "
            "content parts (1 step); kept as its JSON text",
        ),
        (
            lambda t: t["agent"].__setitem__("tool_definitions", {"name": "bash"}),
            "agent.tool_definitions is an object, expected an array of objects; the column is "
            "left null",
        ),
        (
            lambda t: t.__setitem__("continued_trajectory_ref", 5),
            "continued_trajectory_ref is a number, expected a file name",
        ),
        (
            lambda t: t["steps"][0].__setitem__("message", [{"type": "text"}]),
            "steps[0].message[] is an object, expected a content part (text with a string "
            "`text`, or image / audio) (1 step); those parts are left out",
        ),
        (
            # (was a `media` entry: its episode excluded as multimodal, which harbor's export
            # reads as image / audio parts only)
            lambda t: t["steps"][0].__setitem__(
                "message", [{"type": "video", "source": {"path": "v.mp4"}}]
            ),
            "steps[0].message[] is an object, expected a content part",
        ),
        # (these too, session 43)
        (lambda t: t["agent"].__setitem__("name", 5), "agent.name is a number, expected a string"),
        (lambda t: t["agent"].pop("version"), "agent.version is null, expected a string"),
        (
            lambda t: t["agent"].__setitem__("model_name", 5),
            "agent.model_name is a number, expected a string",
        ),
        (lambda t: t.__setitem__("session_id", 5), "session_id is a number, expected a string"),
        (
            lambda t: t["steps"][0].__setitem__("message", None),
            "steps[0].message is null, expected a string or a list of content parts (1 step)",
        ),
        (lambda t: t["steps"][1].pop("step_id"), "steps[1].step_id is null, expected an integer"),
        (
            lambda t: t["steps"][1]["tool_calls"][0].__setitem__("arguments", None),
            "steps[1].tool_calls[].arguments is null, expected an object (1 step); kept as "
            "recorded",
        ),
    ],
    ids=[
        "observation-text",
        "results-text",
        "no-source",
        "no-name",
        "no-call-id",
        "no-agent",
        "v9",
        "null-version",
        "arguments-text",
        "content-object",
        "tools-object",
        "ref-number",
        "text-part-without-text",
        "video-part",
        "agent-name-number",
        "no-agent-version",
        "model-name-number",
        "session-id-number",
        "null-message",
        "no-step-id",
        "null-arguments",
    ],
)
def test_what_harbors_model_refuses_is_a_problem_and_the_trial_stays(
    tmp_path: Path, mutate: Any, says: str
) -> None:
    """Issue 5: malformed trajectories are recorded in problems without losing the trial. These
    shapes were taken without a word (an observation written as text was dropped silently)."""
    from harbor.models.trajectories import Trajectory
    from pydantic import ValidationError

    doc = trajectory(
        step(1, "user", "hi"),
        step(
            2,
            "agent",
            "yo",
            tool_calls=[{"tool_call_id": "a", "function_name": "f", "arguments": {}}],
        ),
    )
    Trajectory.model_validate(doc)  # (well-formed as written)
    mutate(doc)
    with pytest.raises(ValidationError):
        Trajectory.model_validate(doc)
    job = write_job(tmp_path / "runs" / "job")
    dump(write_trial(job, "t__1") / "agent" / "trajectory.json", doc)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    problems = con.execute("SELECT kind, message FROM problems").fetchall()
    assert [kind for kind, _ in problems] == ["wrong_type"] and says in problems[0][1], problems
    assert con.execute("SELECT count(*) FROM trials").fetchall() == [(1,)]
    assert con.execute("SELECT count(*) FROM steps").fetchall() == [(2,)]
    assert con.execute("SELECT media FROM steps WHERE len(media) > 0").fetchall() == []


def test_embedded_subagents_sharing_an_id_stay_two_traces(tmp_path: Path) -> None:
    """Two embedded subagents with one trajectory_id (harbor's Trajectory refuses the file) were
    two files of one trace: the conversation view read them as one conversation, their turns
    interleaved, and exported it as training data without a word."""
    job = write_job(tmp_path / "runs" / "job")
    agent = write_trial(job, "t__1") / "agent"
    main = linear(("user", False), ("agent", False))
    main["subagent_trajectories"] = [
        {**linear(("user", False), ("agent", False)), "trajectory_id": "helper"},
        {**linear(("user", False), ("agent", False)), "trajectory_id": "helper"},
    ]
    dump(agent / "trajectory.json", main)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    assert con.execute(
        "SELECT file, trace_source FROM trajectories ORDER BY file_index"
    ).fetchall() == [
        ("trajectory.json", "main"),
        ("trajectory.json#helper", "helper"),
        ("trajectory.json#subagent-1", "subagent-1"),
    ]
    [(kind, message)] = con.execute("SELECT kind, message FROM problems").fetchall()
    assert kind == "wrong_type"
    assert "subagent_trajectories[1] is named 'helper', as an earlier subagent is" in message
    assert message.endswith("it is read as 'subagent-1'"), message


def test_a_trace_name_is_one_trace_across_the_trial(tmp_path: Path) -> None:
    """Trace names were unique only within one document's embedded list: an embedded subagent
    or a subagent file named `main` was read as more episodes of the main trace (the trial's
    last episode lost to the subagent's), and the same embedded id in trajectory.json and its
    continuation, or an embedded id equal to a subagent file's name, made two traces one (the
    export then counted them as duplicates). Harbor's Trajectory takes each document."""
    from harbor.models.trajectories import Trajectory

    job = write_job(tmp_path / "runs" / "job")
    agent = write_trial(job, "t__1") / "agent"
    sub = linear(("user", False), ("agent", False))
    main = linear(("user", False), ("agent", False), ref="trajectory.cont-1.json")
    main["subagent_trajectories"] = [
        {**sub, "trajectory_id": "main"},
        {**sub, "trajectory_id": "summarizer"},
        {**sub, "trajectory_id": "compactor"},
    ]
    cont = linear(("user", True), ("agent", False))
    cont["subagent_trajectories"] = [{**sub, "trajectory_id": "summarizer"}]
    files = {
        "trajectory.json": main,
        "trajectory.cont-1.json": cont,
        "trajectory.main.json": sub,
        "trajectory.compactor.json": sub,
    }
    for name, doc in files.items():
        Trajectory.model_validate(doc)  # (each a valid document: nothing here is a problem)
        dump(agent / name, doc)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    assert con.execute(
        "SELECT file, trace_source FROM trajectories ORDER BY file_index"
    ).fetchall() == [
        ("trajectory.json", "main"),
        ("trajectory.json#main-2", "main-2"),
        ("trajectory.json#summarizer", "summarizer"),
        ("trajectory.json#compactor-2", "compactor-2"),  # (the file keeps harbor's name)
        ("trajectory.cont-1.json", "main"),
        ("trajectory.cont-1.json#summarizer-2", "summarizer-2"),
        ("trajectory.compactor.json", "compactor"),
        ("trajectory.main.json", "main-3"),
    ]
    assert con.execute("SELECT count(*) FROM problems").fetchall() == [(0,)]
    # the main trace is its two files' agent steps, each subagent one conversation of its own
    assert con.execute(
        "SELECT trace_source, count(*) FROM conversations GROUP BY ALL ORDER BY ALL"
    ).fetchall() == [
        ("compactor", 1),
        ("compactor-2", 1),
        ("main", 2),
        ("main-2", 1),
        ("main-3", 1),
        ("summarizer", 1),
        ("summarizer-2", 1),
    ]


def test_an_empty_trajectory_and_an_embedded_subagent_without_id_are_said(
    tmp_path: Path,
) -> None:
    """`steps: []` and an embedded subagent without a trajectory_id are documents harbor's
    Trajectory refuses: they were read without a word."""
    from harbor.models.trajectories import Trajectory
    from pydantic import ValidationError

    job = write_job(tmp_path / "runs" / "job")
    agent = write_trial(job, "t__1") / "agent"
    main = linear(("user", False), ("agent", False))
    main["subagent_trajectories"] = [linear(("user", False), ("agent", False))]
    empty = {**linear(("user", False)), "steps": []}
    for doc in (main, empty):
        with pytest.raises(ValidationError):
            Trajectory.model_validate(doc)
    dump(agent / "trajectory.json", main)
    dump(agent / "trajectory.empty.json", empty)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    messages = [m for (m,) in con.execute("SELECT message FROM problems ORDER BY path").fetchall()]
    assert messages == [
        "trajectory.empty.json: steps is an array, expected at least one step (harbor's "
        "Trajectory requires one); the file adds no step",
        "trajectory.json: subagent_trajectories[0].trajectory_id is null, expected a string "
        "(harbor requires one of an embedded subagent); it is read as 'subagent-0'",
    ]
    assert con.execute("SELECT count(*) FROM steps").fetchall() == [(4,)]


def test_a_trajectory_without_schema_version_is_harbors_default_and_no_problem(
    tmp_path: Path,
) -> None:
    """harbor's Trajectory takes an absent `schema_version` as ATIF-v1.8 (only a null or an
    unknown one is refused): it was said as `schema_version is null`."""
    from harbor.models.trajectories import Trajectory

    doc = trajectory(step(1, "user", "hi"), step(2, "agent", "yo"))
    doc.pop("schema_version")
    assert Trajectory.model_validate(doc).schema_version == "ATIF-v1.8"
    job = write_job(tmp_path / "runs" / "job")
    dump(write_trial(job, "t__1") / "agent" / "trajectory.json", doc)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT kind, message FROM problems").fetchall() == []
    assert con.execute("SELECT schema_version FROM trajectories").fetchall() == [(None,)]
    assert con.execute("SELECT count(*) FROM steps").fetchall() == [(2,)]


def test_step_times_are_read_as_harbors_step_validates_them() -> None:
    """A step's timestamp is a time exactly when harbor's ATIF `Step` accepts it (its validator
    reads `Z` as `+00:00` anywhere: `2026-12-01Z` is a time, which a plain fromisoformat refused),
    and is the instant that validator reads, in UTC (naive taken as UTC)."""
    import itertools
    from datetime import UTC, datetime

    from harbor.models.trajectories.step import Step
    from pydantic import ValidationError

    from wmo_lake.tables.fields import parse_time

    dates = ["2026-12-01", "20261201", "2026-W48-2", "2026-335"]
    times = ["", "T01", " 01:25", "t0125", "T01:25:50", "T012550", "T01:25:50.5", "T24:00"]
    times += ["T01:25:50,123456789"]
    zones = ["", "Z", "z", "+00:00", "+0530", "+05", "-08:00:00", "+05:30:15.5", " Z", "Z+00:00"]
    differing = []
    for date, time, zone in itertools.product(dates, times, zones):
        written = date + time + zone
        try:
            Step(step_id=1, source="user", message="", timestamp=written)
        except ValidationError:
            theirs = None
        else:
            theirs = datetime.fromisoformat(written.replace("Z", "+00:00"))
            theirs = theirs.replace(tzinfo=UTC) if theirs.tzinfo is None else theirs.astimezone(UTC)
        if parse_time(written) != theirs:
            differing.append((written, parse_time(written), theirs))
    assert not differing, differing[:5]


# JSON text of a number field's value -> read by harbor's FinalMetrics / Metrics (pydantic, lax)
NUMBER_TEXTS = ['"2250"', "300.0", "2250", "9223372036854775808", "true", "5.5", '"x"', "[1]"]
NUMBER_TEXTS += ["NaN", "Infinity", "1.8e308", "-0.0", '"0.5"', "1" + "0" * 400]


def _harbors(model: Any, field: str, text: str) -> tuple[Any, bool]:
    """(what `model` reads `field` as, or None; whether it reads it at all)."""
    from pydantic import ValidationError

    try:
        return getattr(model.model_validate_json(f'{{"{field}": {text}}}'), field), True
    except ValidationError:
        return None, False


def _same_number(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, float) and math.isnan(theirs):
        return isinstance(ours, float) and math.isnan(ours)
    return ours == theirs and str(ours) == str(theirs)  # (-0.0 keeps its sign)


@pytest.mark.parametrize("text", NUMBER_TEXTS)
def test_final_metrics_and_step_costs_read_as_harbors_models_read_them(
    tmp_path: Path, text: str
) -> None:
    """final_metrics' totals and a step's metrics.cost_usd as harbor's FinalMetrics and Metrics
    read them ("2250" is 2250, NaN a NaN, a 401-digit integer inf); what the model refuses, or a
    count past 64 bits, is null and a problem. The totals were null for all of these, without a
    word, and a step's NaN / inf / "0.5" cost was null ("expected a finite number")."""
    from harbor.models.trajectories.final_metrics import FinalMetrics
    from harbor.models.trajectories.metrics import Metrics

    fields = ("total_prompt_tokens", "total_cost_usd")
    doc = trajectory(step(1, "user", "hi"), step(2, "agent", "yo", metrics={"cost_usd": 0}))
    doc["final_metrics"] = {field: 0 for field in fields}
    raw = json.dumps(doc).replace('"cost_usd": 0', f'"cost_usd": {text}')
    for field in fields:
        raw = raw.replace(f'"{field}": 0', f'"{field}": {text}')
    job = write_job(tmp_path / "runs" / "job")
    (write_trial(job, "t__1") / "agent" / "trajectory.json").write_text(raw)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    [totals] = con.execute(f"SELECT {', '.join(fields)} FROM trajectories").fetchall()
    [(cost,)] = con.execute("SELECT cost_usd FROM steps WHERE step_index = 1").fetchall()
    said = {m for (m,) in con.execute("SELECT message FROM problems").fetchall()}
    for field, ours in zip(fields, totals, strict=True):
        theirs, read = _harbors(FinalMetrics, field, text)
        if isinstance(theirs, int) and not -(2**63) <= theirs < 2**63:
            theirs, read = None, False  # (no 64-bit column holds it: null, and said)
        assert _same_number(ours, theirs), (field, ours, theirs)
        exact = _exact(text, int_only=field != "total_cost_usd")
        assert any(f"final_metrics.{field} is" in m for m in said) != (read and exact), field
    if text == "300.0":  # an integer field given a float: said as one
        assert any("total_prompt_tokens is a number, 300.0, expected an integer" in m for m in said)
    if text == "9223372036854775808":  # an integer no 64-bit column holds: said as one
        assert any("expected an integer a 64-bit column holds" in m for m in said), said
    theirs, read = _harbors(Metrics, "cost_usd", text)
    assert _same_number(cost, theirs), (cost, theirs)
    assert any("metrics.cost_usd" in m for m in said) != (read and _exact(text, int_only=False))


def _exact(text: str, int_only: bool = True) -> bool:
    """Whether the JSON value is already of the field's type (no coercion said)."""
    value = json.loads(text)
    if int_only:
        return type(value) is int
    return type(value) in (int, float)


def _harbor_episodes(trial: Path) -> int:
    """How many conversation rows harbor's own trace export makes of a trial's main trace."""
    from harbor.utils.traces_utils import collect_conversations_from_trial

    metadata = {"agent_name": "terminus-2", "model_name": "m", "model_provider": None}
    metadata |= {"start_time": None, "run_id": "r", "task_name": "demo", "raw_metadata": {}}
    return len(collect_conversations_from_trial(trial, metadata | {"trial_name": trial.name}))


@pytest.mark.parametrize(
    ("ref", "place", "followed"),
    [
        ("parts/more.json", "parts/more.json", True),
        ("more\\part.json", "more\\part.json", True),  # (one file name, on Linux)
        # one file, spelled otherwise: read once, not again as a continuation nothing reached
        ("./trajectory.cont-1.json", "trajectory.cont-1.json", True),
        # under a dir named like a subagent's file: a continuation only, as harbor's glob has it
        ("trajectory.parts/more.json", "trajectory.parts/more.json", True),
        # harbor's `exists()` needs agent/parts for `parts/..`: there is none, so it stops
        ("parts/../more.json", "more.json", None),
        ("../outside.json", "../outside.json", False),
    ],
)
def test_a_continuation_is_followed_wherever_in_agent_it_is(
    tmp_path: Path, ref: str, place: str, followed: bool | None
) -> None:
    """harbor's export follows `agent_dir / continued_trajectory_ref` when that file exists: in
    a dir under agent/ too (the lake refused any ref with a separator and said the file was not
    there). A ref out of agent/ is not read here, and said as such."""
    job = write_job(tmp_path / "runs" / "job")
    trial = write_trial(job, "t__1", reward=1.0)
    main = real_trajectory() | {"continued_trajectory_ref": ref}
    dump(trial / "agent" / "trajectory.json", main)
    dump(trial / "agent" / place, real_trajectory())
    [files, [(conversations,)], problems] = ingested_rows(
        tmp_path,
        "SELECT file FROM trajectories ORDER BY file_index",
        "SELECT count(*) FROM conversations WHERE trace_source = 'main'",
        "SELECT message FROM problems",
    )
    if followed is not False:  # (out of agent/, harbor reads on: a deliberate difference)
        assert conversations == _harbor_episodes(trial)
    if followed:
        assert files == [("trajectory.json",), (ref,)] and problems == []
    else:
        assert files == [("trajectory.json",)]
        [(message,)] = problems
        said = "which is not a file in that dir" if followed is None else "which is outside it"
        assert said in message, message
    if followed and "/" in ref:  # (watched by name: an edit reads it again)
        dump(trial / "agent" / place, real_trajectory() | {"steps": real_trajectory()["steps"][:2]})
        assert ingest([tmp_path / "runs"], tmp_path / "lake", workers=1).trials_replaced == 1


def test_a_copied_context_flag_is_read_as_harbors_step_reads_it(tmp_path: Path) -> None:
    """`is_copied_context: 1` is true to harbor's Step model (pydantic, lax), and its export
    skips the step as an episode; the lake left it null and counted the step."""
    from harbor.models.trajectories.step import Step

    job = write_job(tmp_path / "runs" / "job")
    trial = write_trial(job, "t__1", reward=1.0)
    trajectory = real_trajectory()
    first_agent = next(s for s in trajectory["steps"] if s.get("source") == "agent")
    first_agent["is_copied_context"] = 1
    assert Step.model_validate(first_agent).is_copied_context is True
    dump(trial / "agent" / "trajectory.json", trajectory)
    [copied, [(conversations,)], problems] = ingested_rows(
        tmp_path,
        "SELECT is_copied_context FROM steps WHERE source = 'agent' ORDER BY step_index LIMIT 1",
        "SELECT count(*) FROM conversations WHERE trace_source = 'main'",
        "SELECT message FROM problems",
    )
    assert copied == [(True,)]
    assert conversations == _harbor_episodes(trial)
    [(message,)] = problems
    assert "is_copied_context is a number, expected a boolean (1 read as True" in message


# Continuations no `continued_trajectory_ref` reaches are read after the chain "by N", as the
# README's `trajectories` section says in so many words: "`agent/trajectory.json` is read with its
# continuations (`trajectory.cont-N.json`, followed through `continued_trajectory_ref` as harbor
# does, then any left over by N)". By N is numeric: cont-2 before cont-10 (a sort by name puts
# cont-10 first). Pins the `(int(m.group(1)), name)` sort key in tables/trajectories.py.
def test_leftover_continuations_are_read_in_numeric_order(tmp_path: Path) -> None:
    trial = write_trial(write_job(tmp_path / "runs" / "job"), "t__1", reward=1.0)
    agent = trial / "agent"
    for n in (10, 2, 1):  # written out of order; trajectory.json names none of them
        dump(agent / f"trajectory.cont-{n}.json", real_trajectory())
    tables = read_trial_trajectories(trial)
    files = tables["trajectories"].select(["file", "file_index"]).to_pylist()
    assert [(f["file"], f["file_index"]) for f in files] == [
        ("trajectory.json", 0),
        ("trajectory.cont-1.json", 1),
        ("trajectory.cont-2.json", 2),
        ("trajectory.cont-10.json", 3),
    ]
    steps = tables["steps"].to_pylist()
    # the steps follow their files: the main trace reads trajectory.json, cont-1, cont-2, cont-10
    order = [s["file"] for s in steps]
    assert order == sorted(order, key=[f["file"] for f in files].index)


# Subagent trajectory files are harbor's: every `trajectory.*.json` whose name does not contain
# ".cont-" (harbor/utils/traces_utils.py, collect_subagent_traces:
# `if ".cont-" in traj_file.name: continue`). A name such as
# `trajectory.summarization-1-summary.cont-1.json` is no subagent trace for harbor (nor a
# continuation: it is not `trajectory.cont-N.json`), so the lake holds no rows of it. Pins the
# `".cont-" in name` test in tables/trajectories.py (a fullmatch of `trajectory.cont-N.json` there
# would read such a file as a subagent trace).
def test_a_file_with_cont_in_its_name_is_no_subagent_trace(tmp_path: Path) -> None:
    trial = write_trial(write_job(tmp_path / "runs" / "job"), "t__1", reward=1.0)
    agent = trial / "agent"
    dump(agent / "trajectory.summarization-1-summary.json", real_trajectory())
    dump(agent / "trajectory.summarization-1-summary.cont-1.json", real_trajectory())
    tables = read_trial_trajectories(trial)
    files = tables["trajectories"].select(["file", "trace_source"]).to_pylist()
    assert [(f["file"], f["trace_source"]) for f in files] == [
        ("trajectory.json", "main"),
        ("trajectory.summarization-1-summary.json", "summarization-1-summary"),
    ]
    assert set(tables["steps"].column("file").to_pylist()) == {
        "trajectory.json",
        "trajectory.summarization-1-summary.json",
    }


@pytest.mark.parametrize(
    ("ref", "said"),
    [
        ("./trajectory.json", "a file its chain already read (a loop)"),
        ("parts/loop.json", "a file its chain already read (a loop)"),  # (a link to the main)
        ("", None),  # (harbor reads an empty ref as no continuation)
        (".", "which is not a file in that dir"),
    ],
)
def test_a_continuation_back_to_a_file_read_ends_the_chain(
    tmp_path: Path, ref: str, said: str | None
) -> None:
    """A ref that spells, or links to, a file the chain read (harbor's export loops on it for
    ever) was read again, every step twice; it now ends the chain, said in problems."""
    job = write_job(tmp_path / "runs" / "job")
    trial = write_trial(job, "t__1", reward=1.0)
    dump(trial / "agent" / "trajectory.json", real_trajectory() | {"continued_trajectory_ref": ref})
    (trial / "agent" / "parts").mkdir()
    (trial / "agent" / "parts" / "loop.json").symlink_to("../trajectory.json")
    [files, [(steps,)], problems] = ingested_rows(
        tmp_path,
        "SELECT file FROM trajectories",
        "SELECT count(*) FROM steps",
        "SELECT message FROM problems",
    )
    assert files == [("trajectory.json",)]
    assert steps == len(real_trajectory()["steps"])
    assert [said in message for (message,) in problems] == ([True] if said else [])


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_a_leftover_continuation_that_is_the_main_file_is_read_once(
    tmp_path: Path, link: str
) -> None:
    """No ref at all, and trajectory.cont-1.json a link to trajectory.json: the leftover scan read
    the main trace again (every step twice; harbor's export reads the main trace once)."""
    job = write_job(tmp_path / "runs" / "job")
    trial = write_trial(job, "t__1", reward=1.0)
    agent = trial / "agent"
    if link == "symlink":
        (agent / "trajectory.cont-1.json").symlink_to("trajectory.json")
    else:
        (agent / "trajectory.cont-1.json").hardlink_to(agent / "trajectory.json")
    [files, [(conversations,)]] = ingested_rows(
        tmp_path,
        "SELECT file FROM trajectories",
        "SELECT count(*) FROM conversations WHERE trace_source = 'main'",
    )
    assert files == [("trajectory.json",)]
    assert conversations == _harbor_episodes(trial)


def test_a_link_made_between_ingests_reads_the_trial_again(tmp_path: Path) -> None:
    """A continuation replaced by a hard link to the main file (same size and mtime as the copy
    it replaces) ends the chain in a fresh ingest; the incremental one saw nothing change."""
    job = write_job(tmp_path / "runs" / "job")
    trial = write_trial(job, "t__1", reward=1.0)
    agent = trial / "agent"
    dump(agent / "trajectory.json", real_trajectory() | {"continued_trajectory_ref": "c.json"})
    shutil.copy2(agent / "trajectory.json", agent / "c.json")
    [files] = ingested_rows(tmp_path, "SELECT file FROM trajectories")
    assert files == [("trajectory.json",), ("c.json",)]
    (agent / "c.json").unlink()
    (agent / "c.json").hardlink_to(agent / "trajectory.json")
    summary = ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert summary.trials_replaced == 1
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT file FROM trajectories").fetchall() == [("trajectory.json",)]
    con.close()


def test_a_renamed_subagent_takes_no_name_another_holds(tmp_path: Path) -> None:
    """The duplicate's new name `subagent-<position>` may be an earlier subagent's own id: the
    two were one trace again."""
    from wmo_lake.tables.trajectories import read_trial_trajectories

    agent = write_trial(write_job(tmp_path / "runs" / "job"), "t__1") / "agent"
    main = linear(("user", False), ("agent", False))
    main["subagent_trajectories"] = [
        {**linear(("agent", False)), "trajectory_id": name} for name in ("subagent-2", "x", "x")
    ]
    dump(agent / "trajectory.json", main)
    sources = read_trial_trajectories(agent.parent)["trajectories"].column("trace_source")
    assert sources.to_pylist() == ["main", "subagent-2", "x", "subagent-2-2"]


def test_an_image_part_with_text_is_media_as_harbors_export_reads_it(tmp_path: Path) -> None:
    """harbor's multimodal check reads a part's `type` alone: an image part that also carries
    `text` was read as text, and its episode exported as text-only."""
    from wmo_lake.tables.trajectories import read_trial_trajectories

    agent = write_trial(write_job(tmp_path / "runs" / "job"), "t__1") / "agent"
    image = {"type": "image", "text": "caption", "source": {"path": "shot.png"}}
    dump(agent / "trajectory.json", trajectory(step(1, "user", [image]), step(2, "agent", "ok")))
    rows = read_trial_trajectories(agent.parent)["steps"].select(["message", "media"])
    assert rows.to_pylist()[0] == {"message": "", "media": ["image:shot.png"]}


def test_a_wrong_type_in_two_calls_of_one_step_counts_one_step(tmp_path: Path) -> None:
    doc = trajectory(
        step(1, "user", "hi"),
        step(
            2,
            "agent",
            "yo",
            tool_calls=[
                {"tool_call_id": f"c{i}", "function_name": "f", "arguments": "ls"} for i in (1, 2)
            ],
        ),
    )
    dump(
        write_trial(write_job(tmp_path / "runs" / "job"), "t__1") / "agent" / "trajectory.json", doc
    )
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    [(message,)] = connect(tmp_path / "lake").execute("SELECT message FROM problems").fetchall()
    assert "steps[1].tool_calls[].arguments is a string, expected an object (1 step)" in message
