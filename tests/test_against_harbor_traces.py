"""Held against harbor (issue 5, item 4): the conversations `wmo-lake export conversations` writes
carry the same episodes, roles and contents as harbor's own trace export.

Two references, both written by harbor, never by this project:
- fixtures/traces_export.parquet: harbor's `export_traces()` run on
  fixtures/harbor/offline-terminus2 (the trial this test ingests): compared EXACTLY, row by row;
- fixtures/golden/*/*.traces.json: harbor's test-suite goldens for its golden trajectories, which
  this test puts into trial dirs built around them. harbor's suite normalizes both files before
  saving them, differently (`normalize_traces` keeps `root@CONTAINER_ID:/app#` prompts and
  squeezes newlines; `normalize_trajectory` drops a trailing prompt), so contents are compared
  after `normalize_terminal`, which maps both forms to one. Where a golden was produced by an older
  harbor run than its trajectory (documented as deliberate differences in the report / README),
  the test pins exactly which turns differ and checks everything else.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.exports.conversations import load_verified
from wmo_lake.ingest import ingest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GOLDEN = FIXTURES / "golden"
REAL_TRIAL = "hello-offline__haymH7n"

# trial name -> {name in agent/: golden file}
GOLDEN_TRIALS: dict[str, dict[str, str]] = {
    "openhands-fc__1": {"trajectory.json": "openhands/hello-world.trajectory.json"},
    "openhands-nofc__1": {
        "trajectory.json": "openhands/hello-world.trajectory.no_function_calling.json"
    },
    "linear-history__1": {
        "trajectory.json": "terminus_2/hello-world-context-summarization-linear-history"
        ".trajectory.json",
        "trajectory.cont-1.json": "terminus_2/hello-world-context-summarization-linear-history"
        ".trajectory.cont-1.json",
    },
    "summarization__1": {
        "trajectory.json": "terminus_2/hello-world-context-summarization.trajectory.json",
        "trajectory.summarization-1-summary.json": "terminus_2/hello-world-context-summarization"
        ".trajectory.summarization-1-summary.json",
        "trajectory.summarization-1-answers.json": "terminus_2/hello-world-context-summarization"
        ".trajectory.summarization-1-answers.json",
    },
    "invalid-json__1": {"trajectory.json": "terminus_2/hello-world-invalid-json.trajectory.json"},
    "timeout__1": {"trajectory.json": "terminus_2/hello-world-timeout.trajectory.json"},
}


def normalize_terminal(text: str) -> str:
    """One form for the two ways harbor's suite normalizes terminal screens (see module doc)."""
    text = re.sub(r"root@[a-f0-9]{12}:", "root@CONTAINER_ID:", text)
    text = re.sub(r"New Terminal Output:\n+", "New Terminal Output:\n\n", text)
    text = re.sub(r"root@CONTAINER_ID:/app#\n\n+", "\n\n", text)
    return re.sub(r"\n{3,}", "\n\n", text)


@pytest.fixture(scope="module")
def golden_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The offline trials and the golden trajectories (continuations, subagents), ingested."""
    root = tmp_path_factory.mktemp("harbor")
    runs = root / "runs"
    shutil.copytree(FIXTURES / "harbor" / "offline-terminus2", runs / "offline-terminus2")
    shutil.copytree(FIXTURES / "harbor" / "offline-demo", runs / "offline-demo")
    job = write_job(runs / "golden")
    for trial, files in GOLDEN_TRIALS.items():
        agent = write_trial(job, trial, task_name="hello-world") / "agent"
        (agent / "trajectory.json").unlink()
        for name, golden in files.items():
            shutil.copy(GOLDEN / golden, agent / name)
    ingest([runs], root / "lake", workers=1)
    return root / "lake"


def _export(lake: Path, out: Path, *args: str) -> tuple[list[dict[str, Any]], dict]:
    command = ["export", "conversations", "--lake", str(lake), "--out", str(out)]
    result = CliRunner().invoke(cli, [*command, "--no-split-guard", "--json", *args])
    assert result.exit_code == 0, result.output
    return load_verified(out).to_dicts(), json.loads(result.output)


@pytest.fixture(scope="module")
def exported(golden_lake: Path) -> tuple[list[dict[str, Any]], dict]:
    return _export(golden_lake, golden_lake.parent / "conversations.jsonl")


@pytest.mark.parametrize("episodes", ["all", "last"])
def test_building_a_trial_in_ranges_of_episodes_changes_nothing(
    golden_lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, episodes: str
) -> None:
    """A trial larger than a chunk is built a range of its main episodes at a time, then its
    subagent traces: with every trial larger than a chunk, the file is the same, byte for byte,
    continuations and subagents included; --no-subagents leaves out just the subagents' rows."""
    from wmo_lake.exports import conversations

    whole = tmp_path / "whole.jsonl"
    rows, _ = _export(golden_lake, whole, "--episodes", episodes)
    assert {row["trace_source"] for row in rows} > {"main"}  # (subagents are in the lake)
    monkeypatch.setattr(conversations, "CHUNK_TEXT_BYTES", 1)
    ranged = tmp_path / "ranged.jsonl"
    _export(golden_lake, ranged, "--episodes", episodes)
    assert ranged.read_bytes() == whole.read_bytes()
    main_only, _ = _export(
        golden_lake, tmp_path / "main.jsonl", "--episodes", episodes, "--no-subagents"
    )
    assert main_only == [row for row in rows if row["trace_source"] == "main"]


def rows_of(
    rows: list[dict[str, Any]], trial: str, trace_source: str = "main"
) -> list[dict[str, Any]]:
    return [r for r in rows if r["trial_name"] == trial and r["trace_source"] == trace_source]


def golden_traces(name: str) -> list[dict[str, Any]]:
    return json.loads((GOLDEN / name).read_text(encoding="utf-8"))


def test_offline_terminus2_equals_harbors_parquet_export_exactly(exported: Any) -> None:
    rows, _ = exported
    ours = rows_of(rows, REAL_TRIAL)
    theirs = pq.read_table(FIXTURES / "traces_export.parquet").to_pylist()
    assert len(ours) == len(theirs) == 3
    for mine, harbor in zip(ours, theirs, strict=True):
        assert f"episode-{mine['episode']}" == harbor["episode"]
        assert mine["messages"] == harbor["conversations"]
        assert mine["task"] == harbor["task"]
        assert mine["trial_name"] == harbor["trial_name"]
        assert mine["model"] == harbor["model"]
        assert harbor["result"] == "1.0" and mine["reward"] == 1.0 and mine["passed"] is True


def test_openhands_without_tools_matches_golden(exported: Any) -> None:
    rows, _ = exported
    ours = rows_of(rows, "openhands-nofc__1")
    golden = golden_traces("openhands/hello-world-no_function_calling.traces.json")
    assert [f"episode-{r['episode']}" for r in ours] == [g["episode"] for g in golden]
    for mine, theirs in zip(ours, golden, strict=True):
        assert [normalize_terminal(m["content"]) for m in mine["messages"]] == [
            normalize_terminal(m["content"]) for m in theirs["conversations"]
        ]
        assert [m["role"] for m in mine["messages"]] == [m["role"] for m in theirs["conversations"]]


def test_openhands_with_tools_embeds_them_as_harbor_0_26_does(exported: Any) -> None:
    """The golden predates harbor's <tools> embedding (embed_tools_in_conversation, default on
    in harbor 0.26): everything after the embedded block is the golden's first message."""
    rows, _ = exported
    ours = rows_of(rows, "openhands-fc__1")
    golden = golden_traces("openhands/hello-world.traces.json")
    tools = json.loads((GOLDEN / "openhands/hello-world.trajectory.json").read_text())["agent"][
        "tool_definitions"
    ]
    block = f"<tools>\n{json.dumps(tools, ensure_ascii=False, indent=2)}\n</tools>\n\n"
    assert len(ours) == len(golden) == 2
    for mine, theirs in zip(ours, golden, strict=True):
        first, *rest = mine["messages"]
        assert first["content"].startswith(block)
        unembedded = [{**first, "content": first["content"][len(block) :]}, *rest]
        assert unembedded == theirs["conversations"]
        # only the first system message carries the block
        assert sum(m["content"].count("<tools>") for m in mine["messages"]) == 1


def test_linear_history_continuation_matches_golden(exported: Any) -> None:
    """trajectory.json + trajectory.cont-1.json: 3 + 4 episodes, numbered across the files, each
    continuation episode starting from the copied context, never from the first file."""
    rows, _ = exported
    ours = rows_of(rows, "linear-history__1")
    golden = golden_traces("terminus_2/hello-world-context-summarization.traces.json")
    assert [r["episode"] for r in ours] == list(range(7))
    assert [f"episode-{r['episode']}" for r in ours] == [g["episode"] for g in golden]
    for mine, theirs in zip(ours, golden, strict=True):
        assert [m["role"] for m in mine["messages"]] == [m["role"] for m in theirs["conversations"]]
        assert [normalize_terminal(m["content"]) for m in mine["messages"]] == [
            normalize_terminal(m["content"]) for m in theirs["conversations"]
        ]


@pytest.mark.parametrize("kind", ["summary", "answers"])
def test_summarization_subagents_match_golden_roles_and_own_turns(exported: Any, kind: str) -> None:
    """Each subagent trajectory is one conversation with every observation kept. The goldens come
    from harbor's linear-history run, whose two copied assistant turns (1 and 3) were recorded as
    raw JSON; ours come from the tool-calling run's subagent files. Every other turn is equal."""
    rows, _ = exported
    ours = rows_of(rows, "summarization__1", f"summarization-1-{kind}")
    (golden,) = golden_traces(
        f"terminus_2/hello-world-context-summarization.summarization-1-{kind}.traces.json"
    )
    assert len(ours) == 1
    mine, theirs = ours[0]["messages"], golden["conversations"]
    assert [m["role"] for m in mine] == [m["role"] for m in theirs]
    differing = [
        i
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True))
        if normalize_terminal(a["content"]) != normalize_terminal(b["content"])
    ]
    assert differing == [1, 3]


def test_invalid_json_matches_golden_but_for_assistant_message_rendering(exported: Any) -> None:
    """The golden's assistant turns were recorded (by an older harbor run) as the model's raw JSON;
    the golden trajectory records the same turns parsed (analysis / plan + tool calls), and harbor
    0.26 renders those exactly as we do. Roles, user turns and the <think> parts are equal."""
    rows, _ = exported
    ours = rows_of(rows, "invalid-json__1")
    golden = golden_traces("terminus_2/hello-world-invalid-json.traces.json")
    assert [f"episode-{r['episode']}" for r in ours] == [g["episode"] for g in golden]
    for mine, theirs in zip(ours, golden, strict=True):
        pairs = list(zip(mine["messages"], theirs["conversations"], strict=True))
        assert [a["role"] for a, _ in pairs] == [b["role"] for _, b in pairs]
        for a, b in pairs:
            if a["role"] == "user":
                assert normalize_terminal(a["content"]) == normalize_terminal(b["content"])
            else:
                think = b["content"].split("</think>")[0]
                assert a["content"].startswith(think + "</think>\n")


def test_timeout_trial_has_one_episode_per_agent_step(exported: Any) -> None:
    rows, _ = exported
    ours = rows_of(rows, "timeout__1")
    steps = json.loads((GOLDEN / "terminus_2/hello-world-timeout.trajectory.json").read_text())[
        "steps"
    ]
    agent_steps = [s for s in steps if s["source"] == "agent"]
    assert [r["episode"] for r in ours] == list(range(len(agent_steps))) == [0, 1, 2]
    assert [len(r["messages"]) for r in ours] == [2, 4, 6]


def test_oracle_and_nop_trials_are_counted_not_refused(exported: Any) -> None:
    """harbor's export raises on agents without ATIF support; ours counts them in the manifest."""
    rows, manifest = exported
    assert {r["batch"] for r in rows} == {"offline-terminus2", "golden"}
    without = manifest["trials"]["without_episodes"]
    assert without == {"no_trajectory": 6, "no_agent_turns": 0, "total": 6}
    assert manifest["trials"]["in_scope"] == 6 + 1 + len(GOLDEN_TRIALS)
