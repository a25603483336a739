"""A plain-Python oracle for issue 3: seed 000's TrialRecord assembly and seed 003's
`rollout_stats`, written from the rules in the issue and the seeds, reading trial dirs with `json`
only (never through wmo_lake), so the SQL views have something independent to be held against.
The tests hold the views to it; `make bench` times it as the `wmo-lake stats` anchor and checks the
lake's stats equal it.

    tree = read_tree(root, Settings(reward_key="score"))
    tree.records                   # one dict per trial, the trial_records columns (spans included)
    batch_stats(tree)              # {batch: the rollout_stats row}
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

try:
    import orjson
except ImportError:  # the `dev` extra has it; json alone gives the same values, slower
    orjson = None  # type: ignore[assignment]

DEFAULT_MAX_TOKENS = 8192
EXCEPTION_STOP_REASONS = {
    "AgentTimeoutError": "budget",
    "ContextLengthExceededError": "provider_error",
}
STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class Settings:
    reward_key: str = "reward"
    reward_mode: str = "raw"
    max_turns: int | None = None
    max_tokens: int | None = None


@dataclass
class Tree:
    records: list[dict[str, Any]] = field(default_factory=list)
    unreadable: dict[str, int] = field(default_factory=dict)
    jobs: set[str] = field(default_factory=set)  # batches of job dirs (with trials or none)
    labels: dict[str, tuple[str | None, int | None]] = field(default_factory=dict)


def scorer_task_id(result: dict[str, Any]) -> str | None:
    """The task id WMO's scorer groups trials by: harbor's own `trial.task_id.get_name()`, of the
    TrialResult it reads from result.json (JSON mode, where a union's tie goes to its first
    member)."""
    from harbor.models.trial.result import TrialResult

    if result.get("task_id") is None:
        return result.get("task_name")
    task_id_type = TrialResult.model_fields["task_id"].annotation
    return TypeAdapter(task_id_type).validate_json(json.dumps(result["task_id"])).get_name()


def load(path: Path) -> Any:
    """json.loads of a file; None when it is missing or unreadable (the seeds' reader). orjson
    first when it is installed, only for speed: it accepts a subset of what json.loads does (no
    NaN, no lone surrogates, ints within 64 bits) and reads that subset the same way."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return None


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


# -- cells: the scorer's reading -----------------------------------------------------------------
# harbor's `VerifierResult.rewards` (tests/test_views_cells.py holds harbor's model to this type):
# upstream's scorer reads result.json through harbor's `TrialResult`, so it sees each reward as
# pydantic's lax mode makes it (a bool or a numeric string is a number by then).
HARBOR_REWARDS = TypeAdapter(dict[str, float | int])


def measured_reward(result: dict[str, Any], key: str) -> float | None:
    """The reward under `key` as upstream's scorer reads it (harbor's model, then `scorer.py`'s
    test: a finite non-bool number in [0, 1]), else None."""
    verifier = result.get("verifier_result")
    rewards = verifier.get("rewards") if isinstance(verifier, dict) else None
    if not isinstance(rewards, dict) or key not in rewards:
        return None
    value = rewards[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = HARBOR_REWARDS.validate_json(json.dumps({key: value}))[key]
        except ValidationError:
            return None
    if is_int(value):
        return float(value) if 0 <= value <= 1 else None
    if isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= 1.0:
        return value
    return None


class _CtrfTest(BaseModel):  # upstream ctrf.py's models, field for field
    model_config = ConfigDict(extra="ignore")
    status: str = ""


class _CtrfSummary(BaseModel):
    model_config = ConfigDict(extra="ignore")
    passed: int | None = Field(default=None, ge=0)
    failed: int | None = Field(default=None, ge=0)
    skipped: int = Field(default=0, ge=0)
    pending: int = Field(default=0, ge=0)
    other: int = Field(default=0, ge=0)


class _CtrfResults(BaseModel):
    model_config = ConfigDict(extra="ignore")
    summary: _CtrfSummary | None = None
    tests: list[_CtrfTest] = Field(default_factory=list)


class _CtrfReport(BaseModel):
    model_config = ConfigDict(extra="ignore")
    results: _CtrfResults


def _int64_or_none(value: int) -> int | None:
    return value if value <= 2**63 - 1 else None


def graded_tests(trial_dir: Path) -> tuple[int, int, int] | None:
    """(passed, resolved, unresolved) from verifier/ctrf.json: upstream ctrf.py's
    `read_trial_graded_tests` (the itemized reading wins when the two disagree)."""
    try:
        text = (trial_dir / "verifier" / "ctrf.json").read_text(encoding="utf-8")
        results = _CtrfReport.model_validate_json(text).results
    except (OSError, UnicodeDecodeError, ValidationError):
        return None
    summary_reading = None
    summary = results.summary
    if summary is not None and any(
        (getattr(summary, name) or 0) > 2**63 - 1 for name in ("passed", "failed")
    ):
        # the lake's one deliberate difference: a passed / failed count no int64 holds leaves the
        # summary out; upstream grades the items too (that summary disagrees with them), but the
        # summary alone, which the lake cannot hold, when they resolve nothing. (An unresolved
        # count that big only makes the unresolved sum null, as `_int64_or_none` does.)
        summary = None
    if summary is not None and summary.passed is not None and summary.failed is not None:
        resolved = summary.passed + summary.failed
        if resolved:
            summary_reading = (
                summary.passed,
                resolved,
                summary.skipped + summary.pending + summary.other,
            )
    passed = sum(1 for test in results.tests if test.status == "passed")
    resolved = sum(1 for test in results.tests if test.status in ("passed", "failed"))
    items_reading = (passed, resolved, len(results.tests) - resolved) if resolved else None
    return items_reading or summary_reading


# -- spans (seed 000 load_trial_rollout_spans) ---------------------------------------------------
def _int_lists(value: Any) -> list[list[int]] | None:
    if not isinstance(value, list):
        return None
    if not all(isinstance(row, list) and all(is_int(x) for x in row) for row in value):
        return None
    return value


def _number_lists(value: Any) -> list[list[float]] | None:
    if not isinstance(value, list):
        return None
    rows = []
    for row in value:
        if not isinstance(row, list):
            return None
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in row):
            return None
        rows.append([float(x) for x in row])
    return rows


def spans(result: dict[str, Any]) -> list[dict[str, Any]]:
    agent_result = result.get("agent_result")
    if not isinstance(agent_result, dict):
        return []
    details = agent_result.get("rollout_details")
    if not isinstance(details, list) or not details:
        return []
    detail = details[0]  # later segments are subagent chats
    if not isinstance(detail, dict):
        return []
    prompts = _int_lists(detail.get("prompt_token_ids"))
    completions = _int_lists(detail.get("completion_token_ids"))
    logprobs = _number_lists(detail.get("logprobs"))
    if prompts is None or completions is None or logprobs is None:
        return []
    if not len(prompts) == len(completions) == len(logprobs):
        return []
    if any(len(c) != len(lp) for c, lp in zip(completions, logprobs, strict=True)):
        return []
    return [
        {
            "call_index": index,
            "prompt_token_ids": prompt,
            "sampled_token_ids": completion,
            "sampled_logprobs": row,
        }
        for index, (prompt, completion, row) in enumerate(
            zip(prompts, completions, logprobs, strict=True)
        )
    ]


# -- stop reason (seed 000 read_trial_stop_reason / read_terminus_stop_reason) ------------------
def declared_complete(trial_dir: Path) -> bool:
    doc = load(trial_dir / "agent" / "trajectory.json")
    steps = doc.get("steps") if isinstance(doc, dict) else None
    if not isinstance(steps, list):
        return False
    for step in reversed(steps):
        if not isinstance(step, dict) or step.get("source") != "agent":
            continue
        calls = step.get("tool_calls")
        if not isinstance(calls, list):
            return False
        return any(
            isinstance(c, dict) and c.get("function_name") == "mark_task_complete" for c in calls
        )
    return False


def trace_stop_reason(trial_dir: Path) -> str | None:
    """The pi-bridge path (seed 000 `read_trial_stop_reason`): the trace's, else None."""
    for trace in (trial_dir / "agent" / "wmo-run.json", trial_dir / "wmo-run.json"):
        if trace.is_file():
            payload = load(trace)
            reason = payload.get("stop_reason") if isinstance(payload, dict) else None
            return reason if isinstance(reason, str) else None
    return None


def terminus_stop_reason(result: dict[str, Any], trial_dir: Path, max_turns: int | None) -> Any:
    """The terminus-2 path (seed 000 `read_terminus_stop_reason`); a wmo-run.json is ignored."""
    exception = result.get("exception_info")
    if isinstance(exception, dict) and isinstance(exception.get("exception_type"), str):
        return EXCEPTION_STOP_REASONS.get(exception["exception_type"], "error")
    agent_result = result.get("agent_result")
    metadata = agent_result.get("metadata") if isinstance(agent_result, dict) else None
    episodes = metadata.get("n_episodes") if isinstance(metadata, dict) else None
    if not is_int(episodes):
        return None
    if max_turns is not None and episodes >= max_turns:
        return "max_turns"
    return "submitted" if declared_complete(trial_dir) else "error"


# -- beside the seeds: dropped turns and verifier-side exceptions (issue 11) ---------------------
def dropped_turns(trial_dir: Path) -> int:
    """trial.log lines terminus-2 writes for a turn cut at max_tokens (0 without a log)."""
    try:
        text = (trial_dir / "trial.log").read_text(encoding="utf-8")
    except OSError:
        return 0
    return sum(1 for line in text.splitlines() if "Output length exceeded: " in line)


def exception_type(result: dict[str, Any]) -> str | None:
    exception = result.get("exception_info")
    value = exception.get("exception_type") if isinstance(exception, dict) else None
    return value if isinstance(value, str) else None


@functools.cache
def verifier_exceptions() -> frozenset[str]:
    """The exceptions harbor's verifier phase raises, from harbor's own modules."""
    import inspect

    import harbor.trial.errors
    import harbor.verifier.verifier

    def defined_in(module: Any) -> set[str]:
        return {
            name
            for name, value in inspect.getmembers(module, inspect.isclass)
            if issubclass(value, BaseException) and value.__module__ == module.__name__
        }

    timeouts = {n for n in defined_in(harbor.trial.errors) if n.startswith("Verifier")}
    return frozenset(defined_in(harbor.verifier.verifier) | timeouts)


# -- the collection path of a job (its config's agents[0].kwargs.token_sink_dir) ---------------
def token_sink_dir(job_dir: Path) -> str | None:
    config = load(job_dir / "config.json")
    agents = config.get("agents") if isinstance(config, dict) else None
    agent = agents[0] if isinstance(agents, list) and agents else None
    kwargs = agent.get("kwargs") if isinstance(agent, dict) else None
    recorded = kwargs.get("token_sink_dir") if isinstance(kwargs, dict) else None
    return recorded if isinstance(recorded, str) and recorded else None


def sink_dir(job_dir: Path, recorded: str) -> Path | None:
    """The recorded dir; a relative one under the nearest ancestor of the job dir holding it."""
    if os.path.isabs(recorded):
        return Path(recorded)
    for ancestor in Path(os.path.abspath(job_dir)).parents:
        if (ancestor / recorded).is_dir():
            return ancestor / recorded
    return None


class _TokenSpan(BaseModel):
    """WMO's `TokenSpan` (`wmo.providers.tinker`, not among the seeds) as its closest public
    source declares it (the sibling `wmh` package's `providers/tinker.py`: these fields and an
    alignment check, no strict config): a plain pydantic model, so lax (`"2"` and `2.0` are
    token id 2)."""

    call_index: int
    prompt_token_ids: list[int]
    sampled_token_ids: list[int]
    sampled_logprobs: list[float]


def sink_spans(sink: Path | None, trial_name: str) -> list[dict[str, Any]]:
    """Seed 000 `load_trial_spans` (a corrupt sink: the seed raises; the lake keeps no spans)."""
    if sink is None:
        return []
    try:
        text = (sink / f"{trial_name}.jsonl").read_text(encoding="utf-8")
    except OSError:
        return []
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            span = _TokenSpan.model_validate_json(line)
        except ValidationError:
            return []
        if len(span.sampled_token_ids) != len(span.sampled_logprobs):
            return []
        rows.append(span.model_dump())
    if [row["call_index"] for row in rows] != list(range(len(rows))):
        return []
    return rows


# -- the tree ------------------------------------------------------------------------------------
def job_caps(job_dir: Path, settings: Settings) -> tuple[int | None, int]:
    """(max_turns, max_tokens) for a job: the override, else agents[0].kwargs, else defaults."""
    config = load(job_dir / "config.json")
    agents = config.get("agents") if isinstance(config, dict) else None
    agent = agents[0] if isinstance(agents, list) and agents else None
    kwargs = agent.get("kwargs") if isinstance(agent, dict) else None
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    llm_kwargs = kwargs.get("llm_kwargs")
    llm_kwargs = llm_kwargs if isinstance(llm_kwargs, dict) else {}
    recorded_turns = kwargs.get("max_turns") if is_int(kwargs.get("max_turns")) else None
    recorded_tokens = llm_kwargs.get("max_tokens") if is_int(llm_kwargs.get("max_tokens")) else None
    max_turns = settings.max_turns if settings.max_turns is not None else recorded_turns
    if settings.max_tokens is not None:
        return max_turns, settings.max_tokens
    return max_turns, recorded_tokens if recorded_tokens is not None else DEFAULT_MAX_TOKENS


def labels(job_dir: Path, root: Path) -> tuple[str, str | None, int | None]:
    """(batch, run, step): the job dir from its run dir when it lies under
    `<run>/harbor/step-NNNN/`, else relative to root; the dir before harbor/; step-NNNN."""
    batch = job_dir.relative_to(root).as_posix()
    parts = Path(os.path.abspath(job_dir)).parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == "harbor" and STEP_DIR.match(parts[i + 1]):
            batch = "/".join(parts[i - 1 :])
            break
    run = next((parts[i - 1] for i in range(len(parts) - 1, 0, -1) if parts[i] == "harbor"), None)
    step = next((int(m.group(1)) for p in reversed(parts) if (m := STEP_DIR.match(p))), None)
    return batch, run, step


def read_tree(root: Path, settings: Settings = Settings()) -> Tree:
    tree = Tree()
    by_task: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for dirpath, _, filenames in sorted(os.walk(root)):
        trial_dir = Path(dirpath)
        result = load(trial_dir / "result.json") if "result.json" in filenames else None
        # (harbor's TrialResult takes trial_name "": its record is named by its dir, as seed
        # 000's TrialRecord names one, artifact_dir.name)
        is_trial = isinstance(result, dict) and isinstance(result.get("trial_name"), str)
        config = load(trial_dir / "config.json") if "config.json" in filenames else None
        if isinstance(config, dict) and "job_name" in config and "trial_name" not in config:
            batch, run, step = labels(trial_dir, root)  # a job dir: a batch, trials or not
            tree.labels.setdefault(batch, (run, step))
            tree.jobs.add(batch)
        if not is_trial:
            if isinstance(config, dict) and "trial_name" in config:
                batch, run, step = labels(trial_dir.parent, root)
                tree.unreadable[batch] = tree.unreadable.get(batch, 0) + 1
                tree.labels.setdefault(batch, (run, step))
            continue
        assert isinstance(result, dict)
        batch, run, step = labels(trial_dir.parent, root)
        tree.labels[batch] = (run, step)
        max_turns, max_tokens = job_caps(trial_dir.parent, settings)
        reward = measured_reward(result, settings.reward_key)
        stand_in = 0.0 if reward is None else reward
        passed = stand_in == 1.0 if settings.reward_mode == "raw" else stand_in > 0.0
        tests = graded_tests(trial_dir)
        recorded = token_sink_dir(trial_dir.parent)
        if recorded is None:  # terminus-2 path
            trial_spans = spans(result)
            reason = terminus_stop_reason(result, trial_dir, max_turns)
        else:  # pi-bridge path: the job's own sink dir, keyed by the trial dir's name
            trial_spans = sink_spans(sink_dir(trial_dir.parent, recorded), trial_dir.name)
            reason = trace_stop_reason(trial_dir)
        record = {
            "batch": batch,
            "run": run,
            "step": step,
            "task_id": scorer_task_id(result),
            "trial_name": result["trial_name"] or trial_dir.name,
            "reward": stand_in,
            "passed": passed,
            "infra_failed": reward is None,
            # (a sum of counts past 64 bits reads null, as the BIGINT column cannot hold it)
            "tests_passed": None if tests is None else _int64_or_none(tests[0]),
            "tests_resolved": None if tests is None else _int64_or_none(tests[1]),
            "tests_unresolved": None if tests is None else _int64_or_none(tests[2]),
            "graded_score": None if tests is None else tests[0] / tests[1],
            "stop_reason": reason,
            "n_spans": len(trial_spans),
            "spans": trial_spans,
            "artifact_dir": str(trial_dir),
            "max_tokens": max_tokens,  # not a column: the cap rollout_stats judges it by
            # not trial_records columns: what rollout_stats adds beside the seed's
            "dropped_turns": dropped_turns(trial_dir),
            "verifier_error": exception_type(result) in verifier_exceptions(),
        }
        by_task.setdefault((batch, record["task_id"]), []).append(record)
        tree.records.append(record)
    for group in by_task.values():
        for attempt, record in enumerate(sorted(group, key=lambda r: r["trial_name"]), 1):
            record["attempt"] = attempt
    return tree


# -- seed 003 rollout_stats ----------------------------------------------------------------------
def rollout_stats(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Seed 003's `rollout_stats` over one batch's records (each carrying its max_tokens)."""
    # The scorer's task x attempt order: the order graded scores are summed in.
    records = sorted(
        records, key=lambda r: (r["task_id"] is None, r["task_id"] or "", r["attempt"])
    )
    with_spans = sum(1 for r in records if r["spans"])
    truncated = [
        sum(1 for s in r["spans"] if len(s["sampled_token_ids"]) >= r["max_tokens"])
        for r in records
    ]
    executed = [r for r in records if not r["infra_failed"]]
    graded = [r["graded_score"] for r in executed if r["graded_score"] is not None]
    counts: dict[str, int] = {}
    for r in records:
        key = r["stop_reason"] or "unknown"
        counts[key] = counts.get(key, 0) + 1
    with_reason = [r for r in records if r["stop_reason"]]
    submitted = sum(1 for r in with_reason if r["stop_reason"] == "submitted")
    return {
        "trials": len(records),
        "trials_with_spans": with_spans,
        "solve_rate": sum(1 for r in executed if r["passed"]) / len(executed) if executed else 0.0,
        "graded_solve_rate": sum(graded) / len(graded) if graded else 0.0,
        "graded_trials": len(graded),
        "raw_solve_rate": sum(1 for r in records if r["passed"]) / len(records) if records else 0.0,
        "executed_trials": len(executed),
        "infra_failed_trials": len(records) - len(executed),
        "empty_span_trials": len(records) - with_spans,
        "truncated_spans": sum(truncated),
        "truncated_span_trials": sum(1 for n in truncated if n),
        "stop_reason_counts": dict(sorted(counts.items())),
        "scaffold_loss_rate": (
            (len(with_reason) - submitted) / len(with_reason) if with_reason else 0.0
        ),
    }


def batch_stats(tree: Tree) -> dict[str, dict[str, Any]]:
    """{batch: the rollout_stats row}, every batch with trials or unreadable trials."""
    batches = {r["batch"] for r in tree.records} | set(tree.unreadable) | tree.jobs
    rows = {}
    for batch in batches:
        run, step = tree.labels[batch]
        stats = rollout_stats([r for r in tree.records if r["batch"] == batch])
        rows[batch] = {
            "batch": batch,
            "run": run,
            "step": step,
            **stats,
            "unreadable_trials": tree.unreadable.get(batch, 0),
            **beside_the_seed([r for r in tree.records if r["batch"] == batch]),
        }
    return rows


def beside_the_seed(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The rollout_stats columns issue 11 adds after the seed's."""
    with_reason = [r for r in records if r["stop_reason"]]
    verifier_lost = [
        r for r in with_reason if r["stop_reason"] != "submitted" and r["verifier_error"]
    ]
    return {
        "dropped_turns": sum(r["dropped_turns"] for r in records),
        "dropped_turn_trials": sum(1 for r in records if r["dropped_turns"]),
        "verifier_error_trials": sum(1 for r in records if r["verifier_error"]),
        "verifier_scaffold_loss_rate": (
            len(verifier_lost) / len(with_reason) if with_reason else 0.0
        ),
    }
