"""Writing harbor-shaped trial and job dirs for tests, starting from REAL harbor 0.25 output.

Every generated file is a copy of the bundled real terminus-2 trial (fixtures/harbor/...)
with only the fields a test names changed, so shapes we did not think about stay real.

    job = write_job(tmp_path / "run/harbor/step-0003/job", max_turns=30, max_tokens=512)
    write_trial(job, "task-a__1", task_name="demo/a", reward=1.0,
                turns=[([1, 2, 3], [10, 11], [-0.1, -0.2])], declared_complete=True)
"""

from __future__ import annotations

import copy
import json
import uuid
from functools import cache
from pathlib import Path
from typing import Any

REAL_JOB = Path(__file__).resolve().parent.parent / "fixtures" / "harbor" / "offline-terminus2"
REAL_TRIAL = REAL_JOB / "hello-offline__haymH7n"
UNSET: Any = object()
TERMINUS_DONE = "mark_task_complete"
PI_BRIDGE_AGENT = "wmo.distill.agents:WmoDistillHarborAgent"  # upstream agents.py


def write_sink(
    sink_dir: Path, trial_name: str, turns: list[tuple[list[int], list[int], list[float]]]
) -> Path:
    """A pi-bridge token sink: one TokenSpan JSON per line, as upstream's TokenRecorder writes."""
    sink_dir.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {
                "call_index": index,
                "prompt_token_ids": prompt,
                "sampled_token_ids": sampled,
                "sampled_logprobs": logprobs,
            }
        )
        for index, (prompt, sampled, logprobs) in enumerate(turns)
    ]
    path = sink_dir / f"{trial_name}.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@cache
def _real(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def real_result() -> dict[str, Any]:
    return copy.deepcopy(_real(REAL_TRIAL / "result.json"))


def real_trajectory() -> dict[str, Any]:
    return copy.deepcopy(_real(REAL_TRIAL / "agent" / "trajectory.json"))


def dump(path: Path, value: Any) -> Path:
    """Write JSON the way harbor does (indent=4)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=4), encoding="utf-8")
    return path


def write_job(
    job_dir: Path,
    *,
    max_turns: int | None = None,
    max_tokens: int | None = None,
    context_limit: int | None = None,
    context_window: int | None = None,
    model_path: str | None = None,
    token_sink_dir: str | None = None,
) -> Path:
    """A job dir with harbor's JobConfig / JobResult, the agent kwargs a distill collector sets.
    `token_sink_dir` makes it a pi-bridge job: upstream's WmoDistillHarborAgent, whose kwargs
    name the dir each trial's token sink `{token_sink_dir}/{trial}.jsonl` is written to."""
    config = copy.deepcopy(_real(REAL_JOB / "config.json"))
    kwargs = config["agents"][0]["kwargs"]
    if token_sink_dir is not None:
        agent = config["agents"][0]
        del agent["name"]
        agent["import_path"] = PI_BRIDGE_AGENT
        kwargs["token_sink_dir"] = token_sink_dir
    llm_kwargs = {}
    if max_tokens is not None:
        llm_kwargs["max_tokens"] = max_tokens
    if context_limit is not None:
        llm_kwargs["context_limit"] = context_limit
    if model_path is not None:
        llm_kwargs["model_path"] = model_path
    if llm_kwargs:
        kwargs["llm_kwargs"] = llm_kwargs
    if max_turns is not None:
        kwargs["max_turns"] = max_turns
    if context_window is not None:  # the scorer's own kwarg (the pi bridge's context budget)
        kwargs["context_window"] = context_window
    config["job_name"] = job_dir.name
    dump(job_dir / "config.json", config)
    # a job id of its own, as every harbor job has (a copy of the dir keeps it)
    result = _real(REAL_JOB / "result.json")
    name = f"job:{job_dir}".encode(errors="surrogateescape")  # (a non-UTF-8 dir name too)
    result["id"] = str(uuid.uuid5(uuid.NAMESPACE_URL, name))
    dump(job_dir / "result.json", result)
    return job_dir


def _job_agent(job_dir: Path) -> Any:
    """The job's `agents[0]` from its config.json, UNSET when it has none."""
    try:
        config = json.loads((job_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return UNSET
    agents = config.get("agents") if isinstance(config, dict) else None
    if isinstance(agents, list) and agents and isinstance(agents[0], dict):
        return copy.deepcopy(agents[0])
    return UNSET


def write_trial(
    job_dir: Path,
    trial_name: str,
    *,
    trial_id: str | None = None,
    task_name: str = "demo/hello-offline",
    reward: Any = UNSET,
    rewards: Any = UNSET,
    verifier_result: Any = UNSET,
    exception_type: str | None = None,
    n_episodes: Any = UNSET,
    turns: list[tuple[list[int], list[int], list[float]]] | None = None,
    rollout_details: Any = UNSET,
    declared_complete: bool | None = None,
    ctrf: Any = UNSET,
    trace: Any = UNSET,
    trace_at_root: bool = False,
    step_results: Any = UNSET,
    result_overrides: dict[str, Any] | None = None,
    never_ran: bool = False,
    agent: Any = UNSET,
) -> Path:
    """One trial dir. Unset arguments keep the real sample's values (reward 1.0, 3 turns, a
    completed trajectory, a 2-test CTRF report, no trace). `turns` replaces rollout_details with
    one segment of (prompt, completion, logprobs) turns; `reward` sets rewards = {"reward": r};
    `ctrf=None` removes the report; `trace` writes a wmo-run.json (a dict, or raw text).
    `never_ran`: the environment never started (harbor's shape for EnvironmentStartTimeoutError:
    no agent result, no verifier result, no agent/ or verifier/ files).
    `agent`: the AgentConfig the trial records in its config.json and result.json (`config.agent`);
    by default its job's `agents[0]`, as harbor records it (the real sample's when the job dir
    has no config.json yet); None records none."""
    trial_dir = job_dir / trial_name
    result = real_result()
    trial_config = {**_real(REAL_TRIAL / "config.json"), "trial_name": trial_name}
    if agent is UNSET:
        agent = _job_agent(job_dir)
    if agent is None:
        del result["config"]["agent"], trial_config["agent"]
    elif agent is not UNSET:
        result["config"]["agent"] = trial_config["agent"] = agent
    result["trial_name"] = trial_name
    result["task_name"] = task_name
    # harbor's task id is the task dir; its last part (not task_name) is the scorer's task id
    result["task_id"] = {"path": f"/home/user/harbor-demo/tasks/{task_name}"}
    # harbor ids are UUIDs; a stable one per (job, trial) unless a test names its own
    result["id"] = trial_id or str(uuid.uuid5(uuid.NAMESPACE_URL, f"{job_dir}/{trial_name}"))
    result["config"]["trial_name"] = trial_name
    if reward is not UNSET:
        result["verifier_result"] = {"rewards": {"reward": reward}}
    if rewards is not UNSET:
        result["verifier_result"] = {"rewards": rewards}
    if verifier_result is not UNSET:
        result["verifier_result"] = verifier_result
    if exception_type is not None:
        result["exception_info"] = {
            "exception_type": exception_type,
            "exception_message": f"{exception_type} raised",
            "exception_traceback": "Traceback (most recent call last): ...",
            "occurred_at": "2026-11-29T19:20:35.000000Z",
        }
    if n_episodes is not UNSET:
        result["agent_result"]["metadata"]["n_episodes"] = n_episodes
    if turns is not None:
        result["agent_result"]["rollout_details"] = [
            {
                "prompt_token_ids": [list(t[0]) for t in turns],
                "completion_token_ids": [list(t[1]) for t in turns],
                "logprobs": [list(t[2]) for t in turns],
            }
        ]
    if rollout_details is not UNSET:
        result["agent_result"]["rollout_details"] = rollout_details
    if step_results is not UNSET:
        result["step_results"] = step_results
    if never_ran:
        result["exception_info"] = {
            "exception_type": "EnvironmentStartTimeoutError",
            "exception_message": "Environment start timed out after 600.0 seconds",
            "exception_traceback": "Traceback (most recent call last): ...",
            "occurred_at": "2026-11-29T19:30:35.000000Z",
        }
        result["agent_result"] = None
        result["verifier_result"] = None
        for phase in ("agent_setup", "agent_execution", "verifier"):
            result[phase] = None
    for key, value in (result_overrides or {}).items():
        result[key] = value
    dump(trial_dir / "result.json", result)
    dump(trial_dir / "config.json", trial_config)

    if never_ran:
        return trial_dir
    trajectory = real_trajectory()
    if declared_complete is False:
        for step in trajectory["steps"]:
            if step.get("source") == "agent":
                calls = step.get("tool_calls", [])
                step["tool_calls"] = [c for c in calls if c["function_name"] != TERMINUS_DONE]
    dump(trial_dir / "agent" / "trajectory.json", trajectory)

    ctrf_path = trial_dir / "verifier" / "ctrf.json"
    if ctrf is UNSET:
        ctrf_path.parent.mkdir(parents=True, exist_ok=True)
        ctrf_path.write_text((REAL_TRIAL / "verifier" / "ctrf.json").read_text())
    elif ctrf is not None:
        dump(ctrf_path, ctrf) if not isinstance(ctrf, str | bytes) else _raw(ctrf_path, ctrf)

    if trace is not UNSET:
        trace_path = trial_dir / ("wmo-run.json" if trace_at_root else "agent/wmo-run.json")
        dump(trace_path, trace) if not isinstance(trace, str | bytes) else _raw(trace_path, trace)
    return trial_dir


def _raw(path: Path, content: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)


def write_token_overflow_trial(job_dir: Path, trial_name: str) -> Path:
    """A trial whose three agent steps each record 2**62 prompt tokens: their total is past 64
    bits (the real trajectory's completions, 40 + 45 + 50, stay small)."""
    trial_dir = write_trial(job_dir, trial_name)
    trajectory = real_trajectory()
    for step in trajectory["steps"]:
        if step.get("source") == "agent":
            step["metrics"]["prompt_tokens"] = 2**62
    dump(trial_dir / "agent" / "trajectory.json", trajectory)
    return trial_dir


def add_agent(job_dir: Path, model_name: str, **kwargs: Any) -> dict[str, Any]:
    """Append to the job's config.json a second agent: a copy of its agents[0] with `model_name`
    and these kwargs changed (harbor runs every task x attempt under each of a job's agents).
    Returns the agent, for `write_trial(..., agent=...)`."""
    path = job_dir / "config.json"
    config = json.loads(path.read_text())
    agent = json.loads(json.dumps(config["agents"][0]))
    agent["model_name"] = model_name
    agent["kwargs"].update(kwargs)
    config["agents"].append(agent)
    path.write_text(json.dumps(config, indent=4))
    return agent
