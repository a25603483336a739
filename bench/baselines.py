"""Plain-Python anchors the benchmarks divide by. Independent of wmo_lake on purpose: each one is
what a person would write without the lake, from the rules of the seeds and the issues.

- `orjson_load_seconds`: a single-threaded `orjson.loads` of each file (the ingest's anchor).
- `rollout_stats_from_dirs`: seed 000's record assembly + seed 003's `rollout_stats`, per batch,
  by re-reading every trial dir (the `wmo-lake stats` anchor).
- `datums_from_spans`: issue 4's prefix merge, from the lake's `spans` Parquet read with pyarrow
  (the `wmo-lake export datums` anchor).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

UNKNOWN_STOP_REASON = "unknown"
DEFAULT_MAX_TOKENS = 8192
EXCEPTION_STOP_REASONS = {
    "AgentTimeoutError": "budget",
    "ContextLengthExceededError": "provider_error",
}


def orjson_load_seconds(paths: Iterable[Path]) -> tuple[float, int]:
    """(seconds, bytes) to read and `orjson.loads` every file, one after another."""
    started = time.perf_counter()
    total = 0
    for path in paths:
        data = path.read_bytes()
        total += len(data)
        orjson.loads(data)
    return time.perf_counter() - started, total


def prompt_tokens_from_results(paths: Iterable[Path]) -> int:
    """Every turn's full prompt read back from result.json with orjson (the spans_full anchor):
    the prompt token lists of rollout_details[0], as Python lists; returns their token count."""
    total = 0
    for path in paths:
        payload = orjson.loads(path.read_bytes())
        details = (payload.get("agent_result") or {}).get("rollout_details") or []
        if details:
            total += sum(len(prompt) for prompt in details[0].get("prompt_token_ids") or [])
    return total


def read_json(path: Path) -> Any | None:
    """A JSON document, or None when missing or unreadable (the seeds' `_read_json_object`
    reads with the stdlib, which accepts NaN; orjson first because it is faster)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data)
    except ValueError:
        return None


def _obj(value: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _spans_sampled_lengths(payload: dict[str, Any]) -> list[int]:
    """Seed 000 `load_trial_rollout_spans`: the sampled length of each span, [] when none."""
    agent_result = payload.get("agent_result")
    if not isinstance(agent_result, dict):
        return []
    details = agent_result.get("rollout_details")
    if not isinstance(details, list) or not details or not isinstance(details[0], dict):
        return []
    detail = details[0]
    lists: list[Any] = [
        detail.get(k) for k in ("prompt_token_ids", "completion_token_ids", "logprobs")
    ]
    for index, value in enumerate(lists):
        if not isinstance(value, list):
            return []
        for row in value:
            if not isinstance(row, list):
                return []
            for item in row:
                ok = _is_int(item) if index < 2 else _is_int(item) or isinstance(item, float)
                if not ok:
                    return []
    prompts, completions, logprobs = lists
    if not len(prompts) == len(completions) == len(logprobs):
        return []
    if any(len(c) != len(lp) for c, lp in zip(completions, logprobs, strict=True)):
        return []
    return [len(c) for c in completions]


def _graded(trial_dir: Path) -> tuple[int, int] | None:
    """Issue 3's CTRF reading: (passed, resolved), or None when there are no graded tests."""
    report = read_json(trial_dir / "verifier" / "ctrf.json")
    results = _obj(report, "results")
    if not isinstance(results, dict):
        return None
    from_summary = None
    summary = results.get("summary")
    if (
        isinstance(summary, dict)
        and _is_int(summary.get("passed"))
        and _is_int(summary.get("failed"))
    ):
        counts = [summary.get(k, 0) for k in ("passed", "failed", "skipped", "pending", "other")]
        if all(_is_int(c) and c >= 0 for c in counts):
            passed, failed = counts[0], counts[1]
            if passed + failed > 0:
                from_summary = (passed, passed + failed)
    from_items = None
    tests = results.get("tests")
    if isinstance(tests, list):
        statuses = [t.get("status") if isinstance(t, dict) else None for t in tests]
        passed = statuses.count("passed")
        resolved = passed + statuses.count("failed")
        if resolved > 0:
            from_items = (passed, resolved)
    return from_items if from_items is not None else from_summary


def _declared_complete(trial_dir: Path) -> bool:
    """Seed 000 `_terminus_declared_complete`."""
    steps = _obj(read_json(trial_dir / "agent" / "trajectory.json"), "steps")
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


def _stop_reason(trial_dir: Path, payload: dict[str, Any], max_turns: int | None) -> str | None:
    """Issue 3: a wmo-run.json trace decides when present; else seed 000's terminus-2 rules."""
    for trace in (trial_dir / "agent" / "wmo-run.json", trial_dir / "wmo-run.json"):
        if trace.is_file():
            reason = _obj(read_json(trace), "stop_reason")
            return reason if isinstance(reason, str) else None
    exception = payload.get("exception_info")
    if isinstance(exception, dict) and isinstance(exception.get("exception_type"), str):
        return EXCEPTION_STOP_REASONS.get(exception["exception_type"], "error")
    episodes = _obj(payload, "agent_result", "metadata", "n_episodes")
    if not _is_int(episodes):
        return None
    if max_turns is not None and episodes >= max_turns:
        return "max_turns"
    return "submitted" if _declared_complete(trial_dir) else "error"


@dataclass
class Record:
    """Seed 000's TrialRecord, reduced to what rollout_stats reads."""

    task_id: str
    trial_name: str
    passed: bool
    infra_failed: bool
    graded_score: float | None
    stop_reason: str | None
    sampled_lengths: list[int]


@dataclass
class Batch:
    batch: str
    run: str | None
    step: int | None
    max_turns: int | None
    max_tokens: int
    records: list[Record] = field(default_factory=list)
    unreadable_trials: int = 0


def _labels(job_dir: Path, root: Path) -> tuple[str, str | None, int | None]:
    """Issue 2's discovery labels: batch relative to PATH, run before harbor/, step-NNNN."""
    batch = job_dir.relative_to(root).as_posix() if job_dir != root else job_dir.name
    parts = job_dir.resolve().parts
    run = next((parts[i - 1] for i in range(len(parts) - 1, 0, -1) if parts[i] == "harbor"), None)
    step = next(
        (int(p[5:]) for p in reversed(parts) if p.startswith("step-") and p[5:].isdigit()), None
    )
    return batch, run, step


def _record(trial_dir: Path, payload: dict[str, Any], batch: Batch, reward_key: str) -> Record:
    """The scorer's cell (upstream harbor scorer, missing_reward='zero') joined with spans."""
    value = _obj(payload, "verifier_result", "rewards", reward_key)
    measured = (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1
    )
    reward = float(value) if measured else 0.0
    graded = _graded(trial_dir)
    return Record(
        task_id=str(payload.get("task_name")),
        trial_name=payload["trial_name"],
        passed=reward == 1.0,
        infra_failed=not measured,
        graded_score=None if graded is None else graded[0] / graded[1],
        stop_reason=_stop_reason(trial_dir, payload, batch.max_turns),
        sampled_lengths=_spans_sampled_lengths(payload),
    )


def _stats(batch: Batch) -> dict[str, Any]:
    """Seed 003 `rollout_stats` over one batch's records (cells in task x attempt order)."""
    records = sorted(batch.records, key=lambda r: (r.task_id, r.trial_name))
    with_spans = sum(1 for r in records if r.sampled_lengths)
    truncated = [sum(1 for n in r.sampled_lengths if n >= batch.max_tokens) for r in records]
    executed = [r for r in records if not r.infra_failed]
    graded = [r.graded_score for r in executed if r.graded_score is not None]
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        counts[r.stop_reason or UNKNOWN_STOP_REASON] += 1
    with_reason = [r for r in records if r.stop_reason]
    submitted = sum(1 for r in with_reason if r.stop_reason == "submitted")
    return {
        "batch": batch.batch,
        "run": batch.run,
        "step": batch.step,
        "trials": len(records),
        "trials_with_spans": with_spans,
        "solve_rate": sum(r.passed for r in executed) / len(executed) if executed else 0.0,
        "graded_solve_rate": sum(graded) / len(graded) if graded else 0.0,
        "graded_trials": len(graded),
        "raw_solve_rate": sum(r.passed for r in records) / len(records) if records else 0.0,
        "executed_trials": len(executed),
        "infra_failed_trials": len(records) - len(executed),
        "empty_span_trials": len(records) - with_spans,
        "truncated_spans": sum(truncated),
        "truncated_span_trials": sum(1 for n in truncated if n),
        "stop_reason_counts": dict(sorted(counts.items())),
        "scaffold_loss_rate": (
            (len(with_reason) - submitted) / len(with_reason) if with_reason else 0.0
        ),
        "unreadable_trials": batch.unreadable_trials,
    }


def rollout_stats_from_dirs(root: Path, reward_key: str = "reward") -> list[dict[str, Any]]:
    """Every batch's rollout stats, recomputed from the trial dirs under `root`."""
    batches: dict[Path, Batch] = {}

    def batch_of(job_dir: Path) -> Batch:
        if job_dir not in batches:
            config = read_json(job_dir / "config.json")
            kwargs = _obj(config, "agents")
            kwargs = _obj(kwargs[0], "kwargs") if isinstance(kwargs, list) and kwargs else None
            max_turns = _obj(kwargs, "max_turns")
            max_tokens = _obj(kwargs, "llm_kwargs", "max_tokens")
            batches[job_dir] = Batch(
                *_labels(job_dir, root),
                max_turns=max_turns if _is_int(max_turns) else None,
                max_tokens=max_tokens if _is_int(max_tokens) else DEFAULT_MAX_TOKENS,
            )
        return batches[job_dir]

    for directory, subdirs, names in os.walk(root):
        subdirs.sort()
        here = Path(directory)
        if "result.json" not in names and "config.json" not in names:
            continue
        payload = read_json(here / "result.json") if "result.json" in names else None
        if isinstance(payload, dict) and isinstance(payload.get("trial_name"), str):
            batch = batch_of(here.parent)
            batch.records.append(_record(here, payload, batch, reward_key))
            subdirs.clear()  # a trial dir holds no trials
        elif "config.json" in names:
            config = read_json(here / "config.json")
            if isinstance(config, dict) and "trial_name" in config:
                batch_of(here.parent).unreadable_trials += 1  # a trial with no readable result
                subdirs.clear()
    stats = [_stats(b) for b in batches.values()]
    return sorted(stats, key=lambda s: (s["run"] or "", s["step"] or -1, s["batch"]))


@dataclass
class DatumTotals:
    """What the anchor's datums add up to, to hold against the export's."""

    datums: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    parquet_bytes: int = 0


def datums_from_spans(
    span_files: list[Path],
    out: Path,
    context_budget: int = 65536,
    max_datum_tokens: int = 65536,
    overflow_trials: frozenset[str] = frozenset(),
) -> DatumTotals:
    """Issue 4's merge in plain Python: read `spans` with pyarrow, rebuild each full prompt from
    (prompt_prefix_len, prompt_new_ids), merge a trial's turns while each prompt extends the
    accumulated tokens, drop whole episodes that overflow or are overlong, write Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = [
        "trial_key",
        "call_index",
        "prompt_prefix_len",
        "prompt_new_ids",
        "sampled_token_ids",
        "sampled_logprobs",
    ]
    by_trial: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in span_files:
        for row in pq.read_table(path, columns=columns).to_pylist():
            by_trial[row["trial_key"]].append(row)

    rows: dict[str, list[Any]] = defaultdict(list)
    totals = DatumTotals()
    for trial_key, turns in by_trial.items():
        turns.sort(key=lambda t: t["call_index"])
        sequences: list[tuple[list[int], list[float], list[float]]] = []
        tokens: list[int] = []
        mask: list[float] = []
        logprobs: list[float] = []
        previous: list[int] = []  # the previous turn's full prompt + sampled tokens
        dropped = trial_key in overflow_trials
        for turn in turns:
            prompt = previous[: turn["prompt_prefix_len"]] + turn["prompt_new_ids"]
            sampled = turn["sampled_token_ids"]
            if len(prompt) + len(sampled) > context_budget:
                dropped = True
            if len(prompt) >= len(tokens) and prompt[: len(tokens)] == tokens and tokens:
                delta = prompt[len(tokens) :]
            else:
                if any(m for m in mask):
                    sequences.append((tokens, mask, logprobs))
                tokens, mask, logprobs = [], [], []
                delta = prompt
            tokens.extend(delta)
            tokens.extend(sampled)
            mask.extend([0.0] * len(delta))
            mask.extend([1.0] * len(sampled))
            logprobs.extend([0.0] * len(delta))
            logprobs.extend(turn["sampled_logprobs"])
            previous = prompt + sampled
        if any(m for m in mask):
            sequences.append((tokens, mask, logprobs))
        if dropped or any(len(s[0]) > max_datum_tokens for s in sequences):
            continue
        for index, (seq_tokens, seq_mask, seq_logprobs) in enumerate(sequences):
            rows["trial_key"].append(trial_key)
            rows["fragment_index"].append(index)
            rows["model_input_tokens"].append(seq_tokens)
            rows["loss_mask"].append(seq_mask)
            rows["sampled_logprobs"].append(seq_logprobs)
            totals.datums += 1
            totals.tokens += len(seq_tokens)
            totals.loss_tokens += int(sum(seq_mask))
    table = pa.table(
        {
            "trial_key": pa.array(rows["trial_key"], pa.string()),
            "fragment_index": pa.array(rows["fragment_index"], pa.int32()),
            "model_input_tokens": pa.array(rows["model_input_tokens"], pa.list_(pa.int64())),
            "loss_mask": pa.array(rows["loss_mask"], pa.list_(pa.float32())),
            "sampled_logprobs": pa.array(rows["sampled_logprobs"], pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, out, compression="zstd")
    totals.parquet_bytes = out.stat().st_size
    return totals
