"""Seeded-random harbor run trees that exercise every rule of issue 3 (cells, trial_records,
rollout_stats), written through `harbor_shapes` so every file starts as real harbor output.

    root = generate_tree(tmp_path / "runs", seed=7)

Each rule is a *dimension* (reward, exception, episodes, trajectory, spans, trace, CTRF) with a
list of named variants. Every variant of every dimension appears at least once in each tree (a
tree has more trials than any dimension has variants); the rest are drawn at random, so different
seeds mix the variants differently. Expected values never come from here: the oracle
(`reference/oracle.py`) reads the written dirs back with plain `json`.
"""

from __future__ import annotations

import json
import random
import string
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harbor_shapes import dump, write_job, write_sink, write_trial

Result = dict[str, Any]
RAW_MARK = "__raw_json__:"  # a string value replaced by its raw JSON text after writing


def raw(text: str) -> str:
    """A placeholder for JSON text json.dumps cannot write (1e400 stays 1e400, not Infinity)."""
    return RAW_MARK + text


# -- rewards: (name, verifier_result) -----------------------------------------------------------
REWARDS: list[tuple[str, Any]] = [
    ("float-1", {"rewards": {"reward": 1.0}}),
    ("float-0", {"rewards": {"reward": 0.0}}),
    ("float-half", {"rewards": {"reward": 0.5}}),
    ("int-1", {"rewards": {"reward": 1}}),
    ("int-0", {"rewards": {"reward": 0}}),
    ("bool-true", {"rewards": {"reward": True}}),
    ("bool-false", {"rewards": {"reward": False}}),
    ("above-1", {"rewards": {"reward": 1.5}}),
    ("negative", {"rewards": {"reward": -0.25}}),
    ("string", {"rewards": {"reward": "1"}}),
    ("nan", {"rewards": {"reward": float("nan")}}),
    ("infinity", {"rewards": {"reward": float("inf")}}),
    ("1e400", {"rewards": {"reward": raw("1e400")}}),
    ("huge-int", {"rewards": {"reward": 10**30}}),
    ("tiny", {"rewards": {"reward": 1e-300}}),
    ("missing-key", {"rewards": {"accuracy": 1.0}}),
    ("null-value", {"rewards": {"reward": None}}),
    ("rewards-null", {"rewards": None}),
    ("rewards-not-object", {"rewards": [1.0]}),
    ("verifier-null", None),
    ("two-keys", {"rewards": {"reward": 0.0, "score": 1}}),
    ("score-only", {"rewards": {"score": 0.75}}),
]

# -- exceptions: (name, exception_info) ---------------------------------------------------------
EXCEPTIONS: list[tuple[str, Any]] = [
    ("none", None),
    ("AgentTimeoutError", "AgentTimeoutError"),
    ("ContextLengthExceededError", "ContextLengthExceededError"),
    ("RewardFileNotFoundError", "RewardFileNotFoundError"),
    ("unknown", "SandboxCrashedError"),
    ("empty-string", ""),
    ("non-string-type", {"exception_type": 5, "exception_message": "odd"}),
]

# -- n_episodes, relative to the job's max_turns (None: no max_turns recorded) -----------------
EPISODES = [
    "below",
    "equal",
    "above",
    "zero",
    "missing",
    "null",
    "bool",
    "string",
    "float",
    "no-agent-result",
]

TRAJECTORIES = ["declared", "not-declared", "missing", "malformed", "no-tool-calls"]

SPANS = [
    "chained",
    "unchained",
    "one-turn",
    "at-max-tokens",
    "absent",
    "null",
    "empty-list",
    "not-a-list",
    "detail-not-object",
    "two-segments",
    "unaligned",
    "bool-token",
    "float-token",
    "string-logprob",
    "logprob-mismatch",
    "zero-turns",
    "multi-step",
]

TRACES = [
    "none",
    "agent-submitted",
    "agent-max-turns",
    "root-budget",
    "both",
    "unreadable",
    "non-string",
    "empty-string",
    "not-object",
    "agent-dir-root-file",
    "literal-unknown",
]

CTRFS = [
    "real",
    "absent",
    "unreadable",
    "empty-file",
    "not-ctrf",
    "results-not-object",
    "summary-only",
    "items-only",
    "disagree",
    "agree",
    "unresolved-only",
    "summary-zero-items-resolved",
    "items-zero-summary-resolved",
    "negative-count",
    "string-count",
    "float-count",
    "bool-count",
    "null-optional",
    "summary-without-failed",
    "odd-items",
    "tests-not-list",
    "tests-null",
    "status-null",
    "status-absent",
    "summary-not-object",
    "string-summary-only",
    "underscore-count",
    "fractional-count",
    "huge-count",
    "huge-count-only",
    "huge-other",
    "resolved-sum-overflow",
    "unresolved-sum-overflow",
]

DIMENSIONS: dict[str, list[str]] = {
    "reward": [name for name, _ in REWARDS],
    "exception": [name for name, _ in EXCEPTIONS],
    "episodes": EPISODES,
    "trajectory": TRAJECTORIES,
    "spans": SPANS,
    "trace": TRACES,
    "ctrf": CTRFS,
}


@dataclass(frozen=True)
class JobPlan:
    relative: str  # the job dir under the root (the batch the lake will report)
    max_turns: int | None
    max_tokens: int | None
    tasks: tuple[str, ...]


def _schedule(rng: random.Random, variants: list[str], n: int) -> list[str]:
    """n picks containing every variant at least once (n >= len(variants)), shuffled. The
    filler leans to each dimension's first three (ordinary) variants, so batches look real."""
    filler = [
        rng.choice(variants[:3] if rng.random() < 0.6 else variants)
        for _ in range(n - len(variants))
    ]
    picks = list(variants) + filler
    rng.shuffle(picks)
    return picks


# Combinations issue 3 names that random mixing could miss. Trial i goes to job i % 4, and jobs 0
# and 3 record both caps: trial 0 ends on exactly max_turns after declaring completion (reads
# max_turns); trial 4 samples exactly max_tokens on its last turn (a truncated span).
FORCED: dict[int, dict[str, str]] = {
    0: {
        "episodes": "equal",
        "trajectory": "declared",
        "trace": "none",
        "exception": "none",
        "spans": "chained",
    },
    4: {"spans": "at-max-tokens", "reward": "float-1", "exception": "none", "episodes": "below"},
    3: {"episodes": "below", "trajectory": "declared", "trace": "none", "exception": "none"},
}


def _force(picks: list[str], variants: list[str], index: int, variant: str) -> None:
    """Put `variant` at `index`, then restore any variant that fell out of the schedule."""
    free = [j for j, v in enumerate(picks) if v == variant and j not in FORCED]
    if free:
        picks[index], picks[free[0]] = picks[free[0]], picks[index]
    else:
        picks[index] = variant
    for missing in (v for v in variants if v not in picks):
        spare = next(j for j, v in enumerate(picks) if j not in FORCED and picks.count(v) > 1)
        picks[spare] = missing


def _trial_suffix(rng: random.Random) -> str:
    # Mixed case so the attempt rank depends on code-point order ("Z" < "a").
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(7))


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(0, 50_000) for _ in range(n)]


def _logprobs(rng: random.Random, n: int) -> list[float]:
    return [round(-rng.random() * 5, 4) for _ in range(n)]


def _turns(
    rng: random.Random, n_turns: int, max_tokens: int, *, chained: bool, hit_cap: bool
) -> list[tuple[list[int], list[int], list[float]]]:
    """Prefix-chained turns (each prompt extends the last prompt + completion) unless not."""
    turns = []
    previous: list[int] = []
    for index in range(n_turns):
        if chained and previous:
            prompt = previous + _ids(rng, rng.randrange(0, 6))
        else:
            prompt = _ids(rng, rng.randrange(1, 8))
        if hit_cap and index == n_turns - 1:
            sampled_len = max_tokens
        else:
            sampled_len = rng.choice([1, max(1, max_tokens - 1), max_tokens, max_tokens + 1])
        sampled = _ids(rng, sampled_len)
        turns.append((prompt, sampled, _logprobs(rng, sampled_len)))
        previous = prompt + sampled
    return turns


def _detail(turns: list[tuple[list[int], list[int], list[float]]]) -> dict[str, Any]:
    return {
        "prompt_token_ids": [t[0] for t in turns],
        "completion_token_ids": [t[1] for t in turns],
        "logprobs": [t[2] for t in turns],
    }


def _spans_mutation(variant: str, rng: random.Random, max_tokens: int) -> Callable[[Result], None]:
    def good(n: int, *, chained: bool = True, hit_cap: bool = False) -> dict[str, Any]:
        return _detail(_turns(rng, n, max_tokens, chained=chained, hit_cap=hit_cap))

    def set_details(value: Any) -> Callable[[Result], None]:
        def apply(result: Result) -> None:
            if isinstance(result.get("agent_result"), dict):
                result["agent_result"]["rollout_details"] = value

        return apply

    if variant == "chained":
        return set_details([good(rng.randrange(2, 5))])
    if variant == "unchained":
        return set_details([good(rng.randrange(2, 4), chained=False)])
    if variant == "one-turn":
        return set_details([good(1)])
    if variant == "at-max-tokens":
        return set_details([good(rng.randrange(1, 4), hit_cap=True)])
    if variant == "absent":

        def drop(result: Result) -> None:
            if isinstance(result.get("agent_result"), dict):
                result["agent_result"].pop("rollout_details", None)

        return drop
    if variant == "null":
        return set_details(None)
    if variant == "empty-list":
        return set_details([])
    if variant == "not-a-list":
        return set_details("not a list")
    if variant == "detail-not-object":
        return set_details([[1, 2, 3]])
    if variant == "two-segments":
        return set_details([good(2), good(3, chained=False)])
    if variant == "unaligned":
        detail = good(3)
        detail["completion_token_ids"] = detail["completion_token_ids"][:2]
        return set_details([detail])
    if variant == "bool-token":
        detail = good(2)
        detail["prompt_token_ids"][1][0] = True
        return set_details([detail])
    if variant == "float-token":
        detail = good(2)
        detail["completion_token_ids"][0][0] = 3.0
        return set_details([detail])
    if variant == "string-logprob":
        detail = good(2)
        detail["logprobs"][1][0] = "-0.5"
        return set_details([detail])
    if variant == "logprob-mismatch":
        detail = good(3)
        detail["logprobs"][1] = detail["logprobs"][1] + [-0.1]
        return set_details([detail])
    if variant == "zero-turns":
        return set_details([{"prompt_token_ids": [], "completion_token_ids": [], "logprobs": []}])
    if variant == "multi-step":

        def multi(result: Result) -> None:
            result["agent_result"] = None
            result["step_results"] = [{"step_name": "one"}, {"step_name": "two"}]

        return multi
    raise ValueError(variant)


def _episodes_mutation(variant: str, max_turns: int | None) -> Callable[[Result], None]:
    cap = max_turns or 4
    values: dict[str, Any] = {
        "below": max(0, cap - 1),
        "equal": cap,
        "above": cap + 2,
        "zero": 0,
        "null": None,
        "bool": True,
        "string": str(cap),
        "float": float(cap),
    }

    def apply(result: Result) -> None:
        agent_result = result.get("agent_result")
        if variant == "no-agent-result":
            if "step_results" not in result or not result["step_results"]:
                result["agent_result"] = None
            return
        if not isinstance(agent_result, dict):
            return
        metadata = agent_result.setdefault("metadata", {})
        if variant == "missing":
            metadata.pop("n_episodes", None)
        else:
            metadata["n_episodes"] = values[variant]

    return apply


def _write_trajectory(trial_dir: Path, variant: str) -> None:
    path = trial_dir / "agent" / "trajectory.json"
    if variant == "missing":
        path.unlink()
    elif variant == "malformed":
        dump(path, {"steps": "not a list"})
    elif variant == "no-tool-calls":
        doc = json.loads(path.read_text(encoding="utf-8"))
        agent_steps = [s for s in doc["steps"] if s.get("source") == "agent"]
        agent_steps[-1]["tool_calls"] = None
        dump(path, doc)


def _write_trace(trial_dir: Path, variant: str) -> None:
    agent_trace = trial_dir / "agent" / "wmo-run.json"
    root_trace = trial_dir / "wmo-run.json"
    if variant == "agent-submitted":
        dump(agent_trace, {"stop_reason": "submitted", "turns": 3})
    elif variant == "agent-max-turns":
        dump(agent_trace, {"stop_reason": "max_turns"})
    elif variant == "root-budget":
        dump(root_trace, {"stop_reason": "budget"})
    elif variant == "both":
        dump(agent_trace, {"stop_reason": "no_tool_call"})
        dump(root_trace, {"stop_reason": "submitted"})
    elif variant == "unreadable":
        agent_trace.write_text('{"stop_reason": "subm', encoding="utf-8")
    elif variant == "non-string":
        dump(agent_trace, {"stop_reason": 5})
    elif variant == "empty-string":
        dump(root_trace, {"stop_reason": ""})
    elif variant == "not-object":
        dump(agent_trace, ["submitted"])
    elif variant == "agent-dir-root-file":
        agent_trace.mkdir(parents=True)  # a directory is not a trace: the root one is read
        dump(root_trace, {"stop_reason": "output_truncated"})
    elif variant == "literal-unknown":
        dump(agent_trace, {"stop_reason": "unknown"})


def _ctrf(variant: str, rng: random.Random) -> Any:
    """The ctrf.json content for a variant; `...` keeps the real sample, None removes it."""

    def items(*statuses: Any) -> list[Any]:
        return [
            {"name": f"t{i}", "status": s, "duration": rng.random()} for i, s in enumerate(statuses)
        ]

    def report(summary: Any = None, tests: Any = None) -> dict[str, Any]:
        results: dict[str, Any] = {"tool": {"name": "pytest"}}
        if summary is not None:
            results["summary"] = summary
        if tests is not None:
            results["tests"] = tests
        return {"results": results}

    def summary(passed: Any, failed: Any, skipped: Any = 0, **more: Any) -> dict[str, Any]:
        return {"tests": 0, "passed": passed, "failed": failed, "skipped": skipped, **more}

    return {
        "real": ...,
        "absent": None,
        "unreadable": '{"results": {"summary": ',
        "empty-file": "",
        "not-ctrf": {"suites": []},
        "results-not-object": {"results": [1, 2]},
        "summary-only": report(summary(3, 1, 1, pending=1, other=0)),
        "items-only": report(tests=items("passed", "failed", "skipped", "passed")),
        "disagree": report(summary(5, 0), items("passed", "failed", "failed", "other")),
        "agree": report(summary(1, 1, 1), items("passed", "failed", "skipped")),
        "unresolved-only": report(summary(0, 0, 3), items("skipped", "pending", "skipped")),
        "summary-zero-items-resolved": report(summary(0, 0, 2), items("failed", "passed")),
        "items-zero-summary-resolved": report(summary(2, 2), items("skipped")),
        "negative-count": report(summary(-1, 2), items("passed")),
        "string-count": report(summary("2", 0), items("passed")),
        "float-count": report(summary(2.0, 0), items("passed")),
        "bool-count": report(summary(1, 0, True), items("passed")),
        "null-optional": report(summary(2, 1, None, pending=None, other=None)),
        "summary-without-failed": report({"passed": 4}, items("failed", "passed", "failed")),
        "odd-items": report(tests=[{"status": "passed"}, 7, {"status": 5}, {"status": "Passed"}]),
        "tests-not-list": report(summary(1, 3), {"t0": "passed"}),
        "tests-null": {"results": {"summary": summary(1, 0), "tests": None}},
        "status-null": report(tests=[{"name": "a", "status": "passed"}, {"status": None}]),
        "status-absent": report(tests=[{"name": "a", "status": "passed"}, {"name": "b"}]),
        "summary-not-object": report("2 passed", items("passed")),
        "string-summary-only": report(summary("2", 1.0, "1")),
        "underscore-count": report(summary("2_0", 0)),
        "fractional-count": report(summary(2.5, 0), items("passed")),
        "huge-count": report(summary(2**64, 0), items("passed")),
        "huge-count-only": report(summary(2**64, 0)),
        "huge-other": report(summary(4, 2, other=2**64)),
        # each count fits in 64 bits, their sums do not
        "resolved-sum-overflow": report(summary(2, 2**63 - 1), items("passed", "failed")),
        "unresolved-sum-overflow": report(summary(1, 1, 2**63 - 1, pending=1)),
    }[variant]


def _apply_raw(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if RAW_MARK in text:
        # json.dumps wrote the placeholder as a JSON string: swap the quoted string for raw text.
        while RAW_MARK in text:
            start = text.index('"' + RAW_MARK)
            end = text.index('"', start + 1)
            text = text[:start] + text[start + 1 + len(RAW_MARK) : end] + text[end + 1 :]
        path.write_text(text, encoding="utf-8")


def write_generated_trial(
    job_dir: Path,
    trial_name: str,
    task_name: str,
    choice: dict[str, str],
    rng: random.Random,
    plan: JobPlan,
) -> Path:
    """One trial dir from one variant per dimension."""
    exception = dict(EXCEPTIONS)[choice["exception"]]
    ctrf = _ctrf(choice["ctrf"], rng)
    trial_dir = write_trial(
        job_dir,
        trial_name,
        task_name=task_name,
        verifier_result=dict(REWARDS)[choice["reward"]],
        exception_type=exception if isinstance(exception, str) else None,
        declared_complete=choice["trajectory"] != "not-declared",
        **({} if ctrf is ... else {"ctrf": ctrf}),
    )
    result_path = trial_dir / "result.json"
    result = json.loads(result_path.read_text(encoding="utf-8"))
    if isinstance(exception, dict):
        result["exception_info"] = exception
    # A job with no recorded max_tokens is judged at 8192: its short completions never truncate.
    _spans_mutation(choice["spans"], rng, plan.max_tokens or 6)(result)
    _episodes_mutation(choice["episodes"], plan.max_turns)(result)
    dump(result_path, result)
    _apply_raw(result_path)
    _write_trajectory(trial_dir, choice["trajectory"])
    _write_trace(trial_dir, choice["trace"])
    _write_trial_log(trial_dir)
    return trial_dir


def _write_trial_log(trial_dir: Path) -> None:
    """harbor's trial.log, with 0-2 turns dropped at max_tokens; none at all for some trials.
    Chosen from the trial's name, not the tree's rng, so every other choice stays as it was."""
    variant = zlib.crc32(trial_dir.name.encode()) % 4
    if variant == 0:
        return
    lines = ["sandbox pid 123, root /tmp/harbor-x/root"]
    lines += [
        "Output length exceeded: Model openai/gpt-4o hit max_tokens limit. Response was "
        "truncated. Consider increasing max_tokens if possible."
    ] * (variant - 1)
    lines += ["Trajectory dumped to agent/trajectory.json"]
    (trial_dir / "trial.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def write_unreadable_trial(job_dir: Path, trial_name: str, how: str) -> Path:
    """A dir with a trial-shaped config.json and a missing / truncated / non-object result."""
    trial_dir = write_trial(job_dir, trial_name)
    result_path = trial_dir / "result.json"
    if how == "missing":
        result_path.unlink()
    elif how == "truncated":
        result_path.write_text(result_path.read_text(encoding="utf-8")[:200], encoding="utf-8")
    else:
        dump(result_path, [1, 2, 3])
    return trial_dir


def job_plans(rng: random.Random) -> list[JobPlan]:
    """Three runs' worth of batches: two steps of one run, one of another, one loose job."""
    caps = [(rng.choice([2, 3, 5]), rng.choice([4, 5, 7])) for _ in range(4)]
    return [
        JobPlan("exp-a/harbor/step-0001/job", caps[0][0], caps[0][1], ("demo/a", "demo/b")),
        JobPlan("exp-a/harbor/step-0000/job", caps[1][0], None, ("demo/a", "démo/ü")),
        JobPlan("exp b/harbor/step-0002/job one", None, caps[2][1], ("demo/c",)),
        JobPlan("loose/job", caps[3][0], caps[3][1], ("demo/a", "demo/b", "demo/c")),
    ]


PI_BRIDGE_JOB = "exp-c/harbor/step-0004/job"
PI_BRIDGE_SINKS = "exp-c/tokens/step-0004"  # recorded relative, as a relative run dir gives it


def _pi_bridge_job(root: Path, rng: random.Random, picks: dict[str, list[str]]) -> None:
    """A pi-bridge batch: its config records a (relative) token_sink_dir; spans come from the
    sinks there (some trials wrote none, one a corrupt one), stop reasons from the traces."""
    plan = JobPlan(PI_BRIDGE_JOB, 4, 6, ("demo/a", "demo/b"))
    job_dir = write_job(
        root / plan.relative, max_turns=4, max_tokens=6, token_sink_dir=PI_BRIDGE_SINKS
    )
    sinks = root / PI_BRIDGE_SINKS
    for index in range(len(TRACES) + 2):
        task = rng.choice(plan.tasks)
        name = f"{task.split('/')[-1]}__pi{index:02d}{_trial_suffix(rng)}"
        choice = {dimension: rng.choice(picks[dimension]) for dimension in DIMENSIONS}
        choice["trace"] = TRACES[index % len(TRACES)]
        write_generated_trial(job_dir, name, task, choice, rng, plan)
        if index % 3 == 2:
            continue  # died before its first sample: no sink file
        turns = _turns(rng, rng.randrange(1, 5), 6, chained=index % 2 == 0, hit_cap=index == 1)
        write_sink(sinks, name, turns)
        if index == 4:  # two recorders appended: a corrupt sink, no spans
            with (sinks / f"{name}.jsonl").open("a", encoding="utf-8") as stream:
                stream.write(
                    json.dumps(
                        {
                            "call_index": 0,
                            "prompt_token_ids": [1],
                            "sampled_token_ids": [2],
                            "sampled_logprobs": [-1.0],
                        }
                    )
                )


def generate_tree(root: Path, seed: int, *, trials: int = 36) -> Path:
    """A run tree under `root`: four batches, `trials` generated trials, unreadable trials
    (one batch holds nothing else). Every variant of every dimension appears at least once."""
    rng = random.Random(seed)
    longest = max(len(v) for v in DIMENSIONS.values())
    trials = max(trials, longest)
    picks = {name: _schedule(rng, variants, trials) for name, variants in DIMENSIONS.items()}
    for index, wanted in FORCED.items():
        for dimension, variant in wanted.items():
            _force(picks[dimension], DIMENSIONS[dimension], index, variant)
    plans = job_plans(rng)
    for plan in plans:
        write_job(root / plan.relative, max_turns=plan.max_turns, max_tokens=plan.max_tokens)
    names: set[str] = set()
    for index in range(trials):
        plan = plans[index % len(plans)]
        task = rng.choice(plan.tasks)
        name = f"{task.split('/')[-1]}__{_trial_suffix(rng)}"
        while name in names:
            name = f"{task.split('/')[-1]}__{_trial_suffix(rng)}"
        names.add(name)
        choice = {dimension: picks[dimension][index] for dimension in DIMENSIONS}
        write_generated_trial(root / plan.relative, name, task, choice, rng, plan)
    _pi_bridge_job(root, rng, picks)
    write_unreadable_trial(root / plans[0].relative, "demo-a__unreadable1", "missing")
    write_unreadable_trial(root / plans[3].relative, "demo-a__unreadable2", "truncated")
    only_unreadable = root / "exp-a/harbor/step-0003/job"
    write_job(only_unreadable, max_turns=3, max_tokens=5)
    write_unreadable_trial(only_unreadable, "demo-a__gone", "missing")
    write_unreadable_trial(only_unreadable, "demo-a__array", "array")
    for dimension, variants in DIMENSIONS.items():
        assert set(picks[dimension]) == set(variants), f"{dimension} schedule lost a variant"
    return root
