"""`wmo-lake export conversations` and `wmo_lake.exports.conversations.load_verified` (issue 5,
item 3), driven through the real CLI on one small lake built in tmp_path. Expected counts are
worked out by hand from the trials the fixture writes (listed in `lake`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result
from conftest import ingested_rows
from harbor_shapes import dump, real_trajectory, write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.exports.conversations import load_verified
from wmo_lake.exports.discipline import ExportError, manifest_path
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

EPISODES_PER_TRIAL = 3  # the real terminus-2 trajectory has three agent steps


def distinct_trajectory(tag: str, image: bool = False) -> dict[str, Any]:
    trajectory = real_trajectory()
    first = trajectory["steps"][0]
    first["message"] = f"{first['message']}\n[{tag}]"
    if image:
        first["message"] = [
            {"type": "text", "text": first["message"]},
            {"type": "image", "source": {"media_type": "image/png", "path": "screen.png"}},
        ]
    return trajectory


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Trials (task, reward -> passed):
    a__1 demo/a 1.0 passed, the real trajectory         3 episodes
    a__2 demo/a 1.0 passed, the SAME trajectory          3 episodes, all duplicates of a__1's
    b__1 demo/b 0.0 failed                               3 episodes
    c__1 demo/c 1.0 passed (dev split in the registry)   3 episodes
    img__1 demo/a 1.0 passed, an image in its first step 3 episodes, all multimodal
    noreward__1 demo/b, no verifier result: infra_failed, reward null, not passed; 3 episodes
    oracle__1 demo/a 1.0, no trajectory                  0 episodes
    plus other/x__1 (batch "other") demo/a 1.0           3 episodes
    """
    root = tmp_path_factory.mktemp("export")
    job = write_job(root / "runs" / "main")
    write_trial(job, "a__1", task_name="demo/a", reward=1.0)
    write_trial(job, "a__2", task_name="demo/a", reward=1.0)
    for name, task, reward, image in [
        ("b__1", "demo/b", 0.0, False),
        ("c__1", "demo/c", 1.0, False),
        ("img__1", "demo/a", 1.0, True),
    ]:
        trial = write_trial(job, name, task_name=task, reward=reward)
        dump(trial / "agent" / "trajectory.json", distinct_trajectory(name, image))
    trial = write_trial(job, "noreward__1", task_name="demo/b", verifier_result=None)
    dump(trial / "agent" / "trajectory.json", distinct_trajectory("noreward__1"))
    oracle = write_trial(job, "oracle__1", task_name="demo/a", reward=1.0)
    (oracle / "agent" / "trajectory.json").unlink()
    other = write_trial(write_job(root / "runs" / "other"), "x__1", task_name="demo/a", reward=1.0)
    dump(other / "agent" / "trajectory.json", distinct_trajectory("x__1"))
    lake_dir = root / "lake"
    ingest([root / "runs"], lake_dir, workers=1)
    return lake_dir


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.json"
    path.write_text(
        json.dumps(
            {
                # task ids (cells.task_id: the task dir's name), as the datums export's
                # registry: task_name "demo/a" is task "a"
                "tasks": [
                    {"id": "a", "split": "train"},
                    {"id": "b", "split": "train"},
                    {"id": "c", "split": "dev"},
                ]
            }
        )
    )
    return path


def run(lake: Path, out: Path, *args: str) -> Result:
    return CliRunner().invoke(
        cli, ["export", "conversations", "--lake", str(lake), "--out", str(out), "--json", *args]
    )


def exported(lake: Path, out: Path, *args: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    result = run(lake, out, *args)
    assert result.exit_code == 0, result.output
    return load_verified(out).to_dicts(), json.loads(result.output)


def test_all_episodes_no_guard(lake: Path, tmp_path: Path) -> None:
    rows, manifest = exported(lake, tmp_path / "all.jsonl", "--no-split-guard", "--batch", "main")
    # 6 trials with trajectories x 3 episodes = 18; img__1's 3 are multimodal; a__2's 3 repeat a__1
    assert manifest["rows"] == len(rows) == 18 - 3 - 3
    assert manifest["excluded"] == {"duplicate": 3, "multimodal": 3}
    assert manifest["trials"] == {
        "in_scope": 7,
        "without_episodes": {"no_trajectory": 1, "no_agent_turns": 0, "total": 1},
    }
    assert [(r["trial_name"], r["episode"]) for r in rows] == [
        (name, episode)
        for name in ("a__1", "b__1", "c__1", "noreward__1")
        for episode in range(EPISODES_PER_TRIAL)
    ]
    first = rows[0]
    assert set(first) == {
        "messages",
        "task",
        "task_id",
        "trial_name",
        "batch",
        "model",
        "reward",
        "passed",
        "trace_source",
        "episode",
    }
    assert (first["task"], first["batch"], first["model"]) == ("demo/a", "main", "openai/gpt-4o")
    assert (first["reward"], first["passed"], first["trace_source"]) == (1.0, True, "main")
    noreward = next(r for r in rows if r["trial_name"] == "noreward__1")
    assert (noreward["reward"], noreward["passed"]) == (None, False)  # no stand-in 0.0 reward
    assert [m["role"] for m in rows[2]["messages"]] == ["user", "assistant"] * 3


def test_jsonl_lines_are_conversation_file_rows(lake: Path, tmp_path: Path) -> None:
    """tinker-cookbook's FromConversationFileBuilder reads one {"messages": [...]} per line."""
    out = tmp_path / "sft.jsonl"
    exported(lake, out, "--no-split-guard", "--episodes", "last")
    lines = out.read_text(encoding="utf-8").splitlines()
    for line in lines:
        row = json.loads(line)
        assert next(iter(row)) == "messages"
        assert all(set(m) == {"role", "content"} for m in row["messages"])
        assert row["messages"][-1]["role"] == "assistant"


def test_last_episode_only(lake: Path, tmp_path: Path) -> None:
    rows, manifest = exported(
        lake, tmp_path / "last.jsonl", "--no-split-guard", "--episodes", "last"
    )
    # one per trial with a trajectory (7, both batches): img__1's is multimodal, a__2's a duplicate
    assert manifest["excluded"] == {"duplicate": 1, "multimodal": 1}
    assert [(r["trial_name"], r["episode"]) for r in rows] == [
        ("a__1", 2),
        ("b__1", 2),
        ("c__1", 2),
        ("noreward__1", 2),
        ("x__1", 2),
    ]
    assert all(len(r["messages"]) == 6 for r in rows)


def test_split_guard_keeps_train_tasks_and_counts_the_rest(
    lake: Path, tmp_path: Path, registry: Path
) -> None:
    rows, manifest = exported(lake, tmp_path / "train.jsonl", "--tasks", str(registry))
    assert {r["task"] for r in rows} == {"demo/a", "demo/b"}
    assert manifest["excluded"] == {"split_dev": 3, "duplicate": 3, "multimodal": 3}
    assert manifest["split"] == "train" and manifest["tasks_sha256"]
    assert load_verified(tmp_path / "train.jsonl", tasks=registry).to_dicts() == rows


def test_one_registry_of_task_ids_guards_both_exports(
    lake: Path, tmp_path: Path, registry: Path
) -> None:
    """The registry's ids are task ids (cells.task_id) for the datums export; the conversations
    export checks the same ids (its rows' task_id), not harbor's task_name (their task)."""
    rows, _ = exported(lake, tmp_path / "train.jsonl", "--tasks", str(registry))
    assert {(r["task"], r["task_id"]) for r in rows} == {("demo/a", "a"), ("demo/b", "b")}
    by_name = tmp_path / "by-name.json"
    by_name.write_text(json.dumps([{"id": "demo/a", "split": "train"}]))
    refused = run(lake, tmp_path / "n.jsonl", "--tasks", str(by_name))
    assert refused.exit_code == 1 and "'a'" in refused.output
    # (its advice names this export's options: it has no --where, which datums has)
    assert "narrow the export with --batch / --run) so no" in refused.output
    import wmo_lake as wl
    from wmo_lake.exports.discipline import ExportError

    with pytest.raises(ExportError, match=r"narrow the export with batch / run\) so no"):
        wl.export_conversations(lake, tmp_path / "p.jsonl", tasks=by_name)


def test_filters_success_and_failure(lake: Path, tmp_path: Path) -> None:
    rows, manifest = exported(
        lake, tmp_path / "ok.jsonl", "--no-split-guard", "--filter", "success", "--batch", "main"
    )
    assert {r["trial_name"] for r in rows} == {"a__1", "c__1"}
    assert manifest["excluded"] == {"not_passed": 6, "duplicate": 3, "multimodal": 3}
    rows, manifest = exported(
        lake, tmp_path / "bad.jsonl", "--no-split-guard", "--filter", "failure", "--batch", "main"
    )
    assert {r["trial_name"] for r in rows} == {"b__1", "noreward__1"}
    assert manifest["excluded"] == {"passed": 12}


def test_parquet_holds_the_same_rows(lake: Path, tmp_path: Path) -> None:
    jsonl, _ = exported(lake, tmp_path / "c.jsonl", "--no-split-guard")
    parquet, manifest = exported(
        lake, tmp_path / "c.parquet", "--no-split-guard", "--format", "parquet"
    )
    assert manifest["format"] == "parquet"
    assert pq.read_schema(tmp_path / "c.parquet").field("messages").type.value_type.names == [
        "role",
        "content",
    ]
    assert parquet == jsonl


def test_refuses_without_a_guard_choice(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    result = run(lake, out)
    assert result.exit_code == 2
    assert "--tasks" in result.output and "--no-split-guard" in result.output
    assert not out.exists() and not manifest_path(out).exists()


def test_unregistered_task_stops_the_export(lake: Path, tmp_path: Path) -> None:
    registry = tmp_path / "partial.json"
    registry.write_text(json.dumps([{"id": "a", "split": "train"}]))
    out = tmp_path / "x.jsonl"
    result = run(lake, out, "--tasks", str(registry))
    assert result.exit_code == 1
    assert "'b'" in result.output and "not in the task registry" in result.output
    assert not out.exists() and not manifest_path(out).exists()


def test_never_overwrites(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    out.write_text("mine\n")
    result = run(lake, out, "--no-split-guard")
    assert result.exit_code == 1 and "already exists" in result.output
    assert out.read_text() == "mine\n" and not manifest_path(out).exists()
    out.unlink()
    manifest_path(out).write_text("{}")
    result = run(lake, out, "--no-split-guard")
    assert result.exit_code == 1 and not out.exists()


def test_nothing_to_export_is_an_error_that_writes_nothing(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "none.jsonl"
    result = run(
        lake, out, "--no-split-guard", "--batch", "main", "--filter", "success", "--run", "nope"
    )
    assert result.exit_code == 2  # a typo'd selection: a usage error listing the runs
    assert "no batch matches --batch 'main' --run 'nope'; see" in result.output
    assert "for the batches (runs: (no run))" in result.output
    result = run(lake, out, "--no-split-guard", "--batch", "other", "--filter", "failure")
    assert result.exit_code == 1
    assert "no conversation to export" in result.output and "passed 3" in result.output
    assert not out.exists() and not manifest_path(out).exists()


@pytest.fixture
def good_export(lake: Path, tmp_path: Path) -> Path:
    out = tmp_path / "good.jsonl"
    exported(lake, out, "--no-split-guard", "--batch", "main")
    return out


def test_load_verified_refuses_a_changed_dataset(good_export: Path) -> None:
    text = good_export.read_text(encoding="utf-8")
    good_export.write_text(text.replace('"passed": false', '"passed": true', 1), encoding="utf-8")
    with pytest.raises(ExportError, match="sha256"):
        load_verified(good_export)


def test_load_verified_refuses_a_changed_manifest(good_export: Path) -> None:
    manifest = json.loads(manifest_path(good_export).read_text())
    manifest["rows"] += 1
    manifest_path(good_export).write_text(json.dumps(manifest))
    with pytest.raises(ExportError, match="rows"):
        load_verified(good_export)


def test_load_verified_refuses_another_registry(good_export: Path, registry: Path) -> None:
    with pytest.raises(ExportError, match="registry"):
        load_verified(good_export, tasks=registry)


def _tamper(dataset: Path, change: Any) -> None:
    """Rewrite a JSONL export's rows as `change(rows)` returns them, with its manifest's digest
    and row count matched: only the loader's row checks can catch it."""
    import hashlib

    rows = [json.loads(line) for line in dataset.read_text(encoding="utf-8").splitlines()]
    rows = change(rows)
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    manifest = json.loads(manifest_path(dataset).read_text())
    manifest["rows"] = len(rows)
    manifest["dataset_sha256"] = hashlib.sha256(dataset.read_bytes()).hexdigest()
    manifest_path(dataset).write_text(json.dumps(manifest))


def test_load_verified_refuses_a_duplicated_row_even_with_a_matching_manifest(
    good_export: Path,
) -> None:
    _tamper(good_export, lambda rows: [*rows, rows[0]])
    with pytest.raises(ExportError, match="appears twice"):
        load_verified(good_export)


def test_load_verified_refuses_a_bad_message(good_export: Path) -> None:
    def bad_role(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[0]["messages"][0]["role"] = "tool"
        return rows

    _tamper(good_export, bad_role)
    with pytest.raises(ExportError, match="role"):
        load_verified(good_export)


def test_chunked_writing_changes_nothing(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Messages are built a chunk of trials at a time (flat memory); one trial per chunk gives the
    same file, duplicates across chunks included."""
    from wmo_lake.exports import conversations

    whole, _ = exported(lake, tmp_path / "whole.jsonl", "--no-split-guard")
    monkeypatch.setattr(conversations, "CHUNK_TEXT_BYTES", 1)
    chunked, manifest = exported(lake, tmp_path / "chunked.jsonl", "--no-split-guard")
    assert chunked == whole
    assert manifest["excluded"]["duplicate"] == 3
    assert (tmp_path / "whole.jsonl").read_bytes() == (tmp_path / "chunked.jsonl").read_bytes()


@pytest.mark.parametrize("text", ["empty", "null", "absent"])
def test_trials_whose_trajectories_hold_no_text(tmp_path: Path, text: str) -> None:
    """The chunking once crashed (IndexError) when the first trial in export order had no text."""
    job = write_job(tmp_path / "runs" / "job")
    for name in ("a__1", "b__1"):
        trial = write_trial(job, name, task_name="demo/a", reward=1.0)
        trajectory = real_trajectory()
        for step in trajectory["steps"]:
            step.pop("observation", None)
            step.pop("reasoning_content", None)
            if text == "absent":
                step.pop("message", None)
            else:
                step["message"] = "" if text == "empty" else None
        dump(trial / "agent" / "trajectory.json", trajectory)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = run(tmp_path / "lake", tmp_path / "out.jsonl", "--no-split-guard")
    assert result.exit_code == 0, result.output
    rows = load_verified(tmp_path / "out.jsonl").to_dicts()
    # With no observation, no user message comes between agent steps: only each trial's first
    # episode answers one (the task's empty prompt), and the two trials' are identical, written
    # once; the rest are counted.
    assert len(rows) == 1
    assert [m["role"] for m in rows[0]["messages"]] == ["user", "assistant"]
    # no message text anywhere: only the agent turn's tool calls (as harbor renders them) remain
    assert rows[0]["messages"][0]["content"] == ""
    assert rows[0]["messages"][1]["content"].startswith("<tool_call>")
    assert json.loads(result.output)["excluded"] == {
        "duplicate": 1,
        "no_user_prompt": 2 * (EPISODES_PER_TRIAL - 1),
    }


@pytest.mark.parametrize(
    ("trajectory_model", "info_model", "config_model"),
    [
        (None, None, "openai/gpt-4o"),  # only the trial's config.agent names it
        ("", "gpt-4o", "openai/gpt-4o"),  # an empty name counts as none
        (None, None, None),  # harbor's stand-in
    ],
    ids=["config-agent", "empty-trajectory-name", "none"],
)
def test_the_model_is_the_one_harbor_export_names(
    tmp_path: Path, trajectory_model: str | None, info_model: str | None, config_model: str | None
) -> None:
    """The model field follows harbor's chain (traces_utils): the trajectory's agent.model_name,
    else agent_info.model_info.name, else config.agent.model_name, else 'unknown-model'."""
    from harbor.utils.traces_utils import collect_conversations_from_trial, load_run_metadata

    job = write_job(tmp_path / "runs" / "job")
    trial = write_trial(job, "a__1", task_name="demo/a", reward=1.0)
    result = json.loads((trial / "result.json").read_text())
    result["agent_info"]["model_info"] = None if info_model is None else {"name": info_model}
    result["config"]["agent"]["model_name"] = config_model
    (trial / "result.json").write_text(json.dumps(result, indent=4))
    trajectory_path = trial / "agent" / "trajectory.json"
    trajectory = json.loads(trajectory_path.read_text())
    trajectory["agent"]["model_name"] = trajectory_model
    if trajectory_model is None:
        del trajectory["agent"]["model_name"]
    trajectory_path.write_text(json.dumps(trajectory, indent=2))
    harbor = collect_conversations_from_trial(trial, load_run_metadata(trial))
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    rows, _ = exported(tmp_path / "lake", tmp_path / "out.jsonl", "--no-split-guard")
    assert [row["model"] for row in rows] == [conversation["model"] for conversation in harbor]


IMAGE = {"type": "image", "source": {"media_type": "image/png", "path": "screen.png"}}


def test_an_episode_is_multimodal_only_for_the_media_its_messages_hold(tmp_path: Path) -> None:
    """An episode ends with its agent step's turn; that step's observation opens the next one.
    So an image in the observation of an episode's last step is in the next episode, not in
    this one (which was left out as `multimodal`, with text only: the last episode of an agent
    whose final tool result is a screenshot was lost)."""

    def steps(image_in: str) -> list[dict[str, Any]]:
        with_image = [{"type": "text", "text": "shown"}, IMAGE]
        return [
            {"step_id": 1, "source": "system", "message": f"Task: look ({image_in})"},
            {
                "step_id": 2,
                "source": "agent",
                "message": "a1",
                "observation": {"results": [{"content": "text"}]},
            },
            {
                "step_id": 3,
                "source": "agent",
                "message": with_image if image_in == "message" else "a2",
                "observation": {
                    "results": [{"content": with_image if image_in == "observation" else "plain"}]
                },
            },
            {"step_id": 4, "source": "agent", "message": "a3"},
        ]

    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0000" / "job")
    for where in ("observation", "message"):
        trajectory = real_trajectory()
        trajectory["steps"] = steps(where)
        trajectory.pop("continued_trajectory_ref", None)
        dump(write_trial(job, f"{where}__1", reward=1.0) / "agent" / "trajectory.json", trajectory)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)

    media = connect(tmp_path / "lake").sql(
        "SELECT trial_name, list(has_media ORDER BY episode) FROM conversations GROUP BY ALL"
    )
    assert dict(media.fetchall()) == {
        "observation__1": [False, False, True],  # (the image opens episode 2)
        "message__1": [False, True, True],
    }
    rows, manifest = exported(tmp_path / "lake", tmp_path / "out.jsonl", "--no-split-guard")
    assert [(r["trial_name"], r["episode"]) for r in rows] == [
        ("message__1", 0),
        ("observation__1", 0),
        ("observation__1", 1),
    ]
    assert manifest["excluded"] == {"multimodal": 3}


def test_a_scope_of_only_oracle_and_nop_trials_exports_empty_counted_in_the_manifest(
    tmp_path: Path,
) -> None:
    """Issue 5: oracle and nop trials, which harbor's export refuses, export as empty episodes
    counted in the manifest instead of failing; here the real offline-demo job (oracle + nop)."""
    import shutil

    from wmo_lake.api import load_conversations

    fixtures = Path(__file__).resolve().parent.parent / "fixtures" / "harbor"
    shutil.copytree(fixtures / "offline-demo", tmp_path / "runs" / "offline-demo")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    for fmt in ("jsonl", "parquet"):
        out = tmp_path / f"empty.{fmt}"
        result = run(tmp_path / "lake", out, "--no-split-guard")
        assert result.exit_code == 0, result.output
        manifest = json.loads(manifest_path(out).read_text())
        assert manifest["rows"] == 0
        assert manifest["trials"]["in_scope"] == 6
        assert manifest["trials"]["without_episodes"]["no_trajectory"] == 6
        loaded = load_verified(out)
        assert loaded.height == 0 and "messages" in loaded.columns
        assert load_conversations(out).height == 0


def _long_trajectory(agent_steps: int) -> dict[str, Any]:
    """A trajectory of `agent_steps` agent turns, each 2 KB of text and a 2 KB observation."""
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": "the task"}]
    for i in range(agent_steps):
        steps.append(
            {
                "step_id": i + 2,
                "source": "agent",
                "message": f"turn {i} " + "x" * 2000,
                "observation": {"results": [{"content": "o" * 2000}]},
            }
        )
    trajectory = real_trajectory()
    trajectory["steps"] = steps
    return trajectory


@pytest.mark.parametrize("episodes", ["last", "all"])
def test_a_long_trajectory_exports_within_a_small_memory_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, episodes: str
) -> None:
    """Each episode holds every turn before it, so a long trajectory's conversations are
    quadratic in its turns. The export built a trial's every episode at once, even to keep only
    its last (2.5 GB for 800 turns; `--episodes all` failed out of memory at 3.7 GB). A large
    trial is built a range of episodes at a time now, and `--episodes last` builds only its
    last: both fit in 64 MB."""
    job = write_job(tmp_path / "runs" / "job")
    dump(write_trial(job, "long__1") / "agent" / "trajectory.json", _long_trajectory(150))
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    monkeypatch.setenv("WMO_LAKE_MEMORY_LIMIT", "64MB")
    out = tmp_path / f"{episodes}.jsonl"
    rows, manifest = exported(tmp_path / "lake", out, "--no-split-guard", "--episodes", episodes)
    assert manifest["rows"] == len(rows) == (1 if episodes == "last" else 150)
    last = rows[-1]["messages"]
    # the task, then per turn the assistant's message and its observation (but the last one's)
    assert len(last) == 1 + 150 * 2 - 1
    assert last[-1]["content"].startswith("turn 149 ")
    if episodes == "all":
        assert [row["episode"] for row in rows] == list(range(150))
        assert all(len(row["messages"]) == 2 * row["episode"] + 2 for row in rows)


def _agent_step(message: str, *, observed: bool = True) -> dict[str, Any]:
    """The real trajectory's first agent step saying `message`, without its tool calls, with or
    without its observation (the user message that follows it in a conversation)."""
    step = {k: v for k, v in real_trajectory()["steps"][1].items() if k != "tool_calls"}
    step["message"] = message
    if not observed:
        del step["observation"]
    return step


@pytest.mark.parametrize(
    ("agent_steps", "agent_first", "reason"),
    [
        # an agent step that said nothing: an empty or blank assistant turn is no response
        ([_agent_step("")], False, "no_response"),
        ([_agent_step("   \n")], False, "no_response"),
        # an agent step before any user message: episode 0 is the assistant's turn alone
        ([_agent_step("first", observed=False)], True, "no_user_prompt"),
        # two agent steps with no observation between: episode 1 is [user, assistant, assistant]
        # (episode 0, [user, assistant], is a row)
        ([_agent_step("one", observed=False), _agent_step("two")], False, "no_user_prompt"),
    ],
    ids=["empty", "blank", "agent-first", "two-agents"],
)
def test_rows_that_are_no_prompt_and_response_are_excluded_and_counted(
    tmp_path: Path, agent_steps: list[dict[str, Any]], agent_first: bool, reason: str
) -> None:
    """WMO's `training_data` holds every row to a prompt ending with a user message and a
    non-blank assistant response (its export refuses, its loader rejects, any other); the export
    wrote such rows and the loader took them. Each is now left out and counted by reason."""
    job = write_job(tmp_path / "runs" / "job")
    good = write_trial(job, "good__1", task_name="demo/a", reward=1.0)
    bad = write_trial(job, "bad__1", task_name="demo/a", reward=1.0)
    trajectory = real_trajectory()
    user = trajectory["steps"][0]
    steps = [*agent_steps, user] if agent_first else [user, *agent_steps]
    trajectory["steps"] = [{**step, "step_id": i} for i, step in enumerate(steps, 1)]
    dump(bad / "agent" / "trajectory.json", trajectory)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    rows, manifest = exported(tmp_path / "lake", tmp_path / "out.jsonl", "--no-split-guard")
    kept = [row["episode"] for row in rows if row["trial_name"] == bad.name]
    assert kept == ([0] if len(agent_steps) == 2 else [])
    assert any(row["trial_name"] == good.name for row in rows)
    assert manifest["excluded"] == {reason: 1}


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda messages: [*messages[:-1], {"role": "assistant", "content": " \n"}], "no_response"),
        (lambda messages: messages[:-1], "no_response"),  # (ends with the user's message)
        (lambda messages: messages[-1:], "no_user_prompt"),
    ],
    ids=["blank-response", "no-response", "no-prompt"],
)
def test_load_verified_refuses_a_row_that_is_no_prompt_and_response(
    good_export: Path, change: Any, reason: str
) -> None:
    """As WMO's `training_data` loader does ("Dataset requires final assistant response and
    preceding user prompt"); a subagent's row ending with a user message was taken."""

    def tampered(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[0]["messages"] = change(rows[0]["messages"])
        rows[0]["trace_source"] = "summarization-1-summary"  # (the check was for main rows)
        return rows

    _tamper(good_export, tampered)
    with pytest.raises(ExportError, match=rf"answering a user message \({reason}\)"):
        load_verified(good_export)


# The `conversations` view against harbor 0.26's own trace export (utils/traces_utils.py), on a
# hand-written trajectory: an agent message that already opens and closes <think> keeps it as it
# is (harbor prepends "<think>" only when "</think>" is there and "<think>" is not), and a subagent
# trajectory with no agent step gives no row (harbor's `_extract_complete_subagent_conversation`
# returns None: "Only return if we have at least one assistant turn"). Expected messages are what
# `traces_utils.extract_conversations_from_trajectory` returned on these exact files (copied
# below). Kills conversations.sql's orphan-</think> test without `AND NOT contains(s.message,
# '<think>')`, subagent_ends without `HAVING bool_or(source = 'agent')`, and the reasoning test
# relaxed to `reasoning_content IS NOT NULL` (harbor: `if reasoning_content:`, so "" adds no
# <think></think>), and first_system_steps without `AND trace_source = 'main'` (harbor embeds
# <tools> only in a main trace's first system message; `_extract_complete_subagent_conversation`
# never does).
MAIN = {
    "schema_version": "ATIF-v1.5",
    "session_id": "s",
    "agent": {"name": "terminus-2", "version": "1", "model_name": "m"},
    "steps": [
        {"step_id": 1, "source": "user", "timestamp": "2026-11-29T10:00:00Z", "message": "do it"},
        {
            "step_id": 2,
            "source": "agent",
            "timestamp": "2026-11-29T10:00:05Z",
            "message": "<think>plan</think>running ls",
            "tool_calls": [
                {"tool_call_id": "c1", "function_name": "bash", "arguments": {"cmd": "ls"}}
            ],
            "observation": {"results": [{"content": "a.txt"}]},
        },
        {
            "step_id": 3,
            "source": "agent",
            "timestamp": "2026-11-29T10:00:09Z",
            "message": "thought</think>done",
            "tool_calls": [
                {"tool_call_id": "c2", "function_name": "mark_task_complete", "arguments": {}}
            ],
        },
    ],
}
SUBAGENT = {
    "schema_version": "ATIF-v1.5",
    "session_id": "s2",
    "agent": {"name": "terminus-2-summarization-summary", "version": "1", "model_name": "m"},
    "steps": [
        {"step_id": 1, "source": "user", "timestamp": "2026-11-29T10:00:06Z", "message": "sum up"}
    ],
}
FIRST = {
    "role": "assistant",
    "content": '<think>plan</think>running ls\n<tool_call>\n{"name": "bash", "arguments": '
    '{"cmd": "ls"}}\n</tool_call>',
}
# harbor's extract_conversations_from_trajectory on MAIN (episode-0, episode-1)
HARBOR_EPISODES = [
    [{"role": "user", "content": "do it"}, FIRST],
    [
        {"role": "user", "content": "do it"},
        FIRST,
        {"role": "user", "content": "a.txt"},
        {
            "role": "assistant",
            "content": '<think>thought</think>done\n<tool_call>\n{"name": "mark_task_complete", '
            '"arguments": {}}\n</tool_call>',
        },
    ],
]


def test_conversations_equal_harbors_export(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
    trial = write_trial(job, "hello__1", reward=1.0)
    dump(trial / "agent" / "trajectory.json", MAIN)
    dump(trial / "agent" / "trajectory.summarization-1-summary.json", SUBAGENT)
    [rows] = ingested_rows(
        tmp_path,
        "SELECT trace_source, episode, messages FROM conversations ORDER BY trace_source, episode",
    )
    # no row for the subagent trace: harbor exports none for a file without an agent step
    assert [(source, episode) for source, episode, _ in rows] == [("main", 0), ("main", 1)]
    assert [
        [{"role": m["role"], "content": m["content"]} for m in messages] for *_, messages in rows
    ] == HARBOR_EPISODES


def test_empty_reasoning_adds_no_think_block(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
    trial = write_trial(job, "hello__1", reward=1.0)
    steps = [
        {"step_id": 1, "source": "user", "timestamp": "2026-11-29T10:00:00Z", "message": "task"},
        {
            "step_id": 2,
            "source": "agent",
            "timestamp": "2026-11-29T10:00:01Z",
            "message": "m",
            "reasoning_content": "",
        },
    ]
    dump(trial / "agent" / "trajectory.json", MAIN | {"steps": steps})
    [((messages,),)] = ingested_rows(tmp_path, "SELECT messages FROM conversations")
    # harbor's extract_conversations_from_trajectory on this file
    assert [{"role": m["role"], "content": m["content"]} for m in messages] == [
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "m"},
    ]


def test_a_subagents_system_message_gets_no_tools(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
    trial = write_trial(job, "hello__1", reward=1.0)
    tools = [{"type": "function", "function": {"name": "bash"}}]
    subagent = {
        "schema_version": "ATIF-v1.5",
        "session_id": "s2",
        "agent": SUBAGENT["agent"] | {"tool_definitions": tools},
        "steps": [
            {
                "step_id": 1,
                "source": "system",
                "timestamp": "2026-11-29T10:00:06Z",
                "message": "you summarize",
            },
            {
                "step_id": 2,
                "source": "user",
                "timestamp": "2026-11-29T10:00:06Z",
                "message": "sum up",
            },
            {
                "step_id": 3,
                "source": "agent",
                "timestamp": "2026-11-29T10:00:07Z",
                "message": "summary",
            },
        ],
    }
    dump(trial / "agent" / "trajectory.summarization-1-summary.json", subagent)
    [((messages,),)] = ingested_rows(
        tmp_path, "SELECT messages FROM conversations WHERE trace_source <> 'main'"
    )
    # harbor's _extract_complete_subagent_conversation on this file
    assert [{"role": m["role"], "content": m["content"]} for m in messages] == [
        {"role": "user", "content": "you summarize"},
        {"role": "user", "content": "sum up"},
        {"role": "assistant", "content": "summary"},
    ]
