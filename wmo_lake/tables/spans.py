"""`spans`: one row per sampled turn of a trial's training evidence (seed 000).

Two sources, one shape. harbor's `agent_result.rollout_details` (only the FIRST segment is the
main agent's chat; the rest are subagents), or, when the result records no rollout details, the
WMO pi-bridge sink `{SINK}/{trial_name}.jsonl`. A trial whose lists cannot be trusted gets NO span
rows (never a partial episode) and a `spans_status` saying why.

Storage does not repeat prompts: harbor records each turn's full prompt, so a 30-turn episode holds
its context ~30 times. Each row keeps `prompt_prefix_len`, the length of the prefix the prompt
shares with the previous turn's prompt + sampled tokens, and `prompt_new_ids`, the rest. The view
`spans_full` gives the full prompt back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from wmo_lake.tables.fields import ProblemLog
from wmo_lake.tables.trial_result import CheckedDetail

SCHEMA = pa.schema(
    [
        ("trial_key", pa.string()),
        ("batch", pa.string()),
        ("trial_name", pa.string()),
        ("call_index", pa.int32()),
        ("prompt_len", pa.int32()),
        ("prompt_prefix_len", pa.int32()),
        ("prompt_new_ids", pa.list_(pa.int64())),
        ("sampled_token_ids", pa.list_(pa.int64())),
        ("sampled_logprobs", pa.list_(pa.float64())),
        ("n_sampled", pa.int32()),
        ("source", pa.string()),
    ]
)

OK = "ok"
EMPTY = "empty"
ABSENT = "absent"
MULTI_STEP = "multi_step"
MALFORMED = "malformed"
UNALIGNED = "unaligned_turns"
LOGPROB_MISMATCH = "logprob_mismatch"
OUT_OF_RANGE = "out_of_range"
SINK = "sink"
SINK_CORRUPT = "sink_corrupt"


@dataclass
class Turn:
    prompt: list[int]
    sampled: list[int]
    logprobs: list[float]


@dataclass
class Spans:
    """A trial's spans and why it has (or lacks) them."""

    status: str
    turns: list[Turn]
    source: str | None = None


def _int_lists(value: object) -> list[list[int]] | None:
    """`value` as a list of int lists (bools are not ints), or None when not shaped like one."""
    if not isinstance(value, list):
        return None
    for row in value:
        if not isinstance(row, list):
            return None
        for item in row:
            if type(item) is not int:
                return None
    return value


def _float_lists(value: object) -> list[list[float]] | None:
    """`value` as a list of number lists (ints widen to floats), or None if not shaped so."""
    if not isinstance(value, list):
        return None
    rows: list[list[float]] = []
    for row in value:
        if not isinstance(row, list):
            return None
        for item in row:
            kind = type(item)
            if kind is not float and kind is not int:
                return None
        rows.append(row if all(type(item) is float for item in row) else [float(x) for x in row])
    return rows


def from_rollout_details(
    agent_result: Any, step_results: Any, path: Path, problems: ProblemLog
) -> Spans | None:
    """Spans from `agent_result.rollout_details`; None when the result records none (try a sink)."""
    if not isinstance(agent_result, dict):
        return Spans(MULTI_STEP, []) if step_results else None
    details = agent_result.get("rollout_details")
    if not isinstance(details, list) or not details:
        if details is not None and not isinstance(details, list):
            problems.add(
                "malformed_spans",
                path,
                f"{path.name}: agent_result.rollout_details is not an array; the trial "
                "contributes no training data",
            )
            return Spans(MALFORMED, [])
        return None
    detail = details[0]
    if isinstance(detail, CheckedDetail):  # decoded typed: every id already checked
        return _checked_turns(
            detail.prompt_token_ids, detail.completion_token_ids, detail.logprobs, path, problems
        )
    if not isinstance(detail, dict):
        problems.add(
            "malformed_spans",
            path,
            f"{path.name}: agent_result.rollout_details[0] is not an object; the trial "
            "contributes no training data",
        )
        return Spans(MALFORMED, [])
    prompts = _int_lists(detail.get("prompt_token_ids"))
    completions = _int_lists(detail.get("completion_token_ids"))
    logprobs = _float_lists(detail.get("logprobs"))
    return _checked_turns(prompts, completions, logprobs, path, problems)


def _checked_turns(
    prompts: list[list[int]] | None,
    completions: list[list[int]] | None,
    logprobs: list[list[float]] | None,
    path: Path,
    problems: ProblemLog,
) -> Spans:
    """Seed 000's checks on type-checked per-turn lists: all three present, aligned turns,
    as many logprobs as sampled tokens in every turn."""
    if prompts is None or completions is None or logprobs is None:
        problems.add(
            "malformed_spans",
            path,
            f"{path.name}: rollout_details[0] lacks well-formed per-turn lists (prompt_token_ids "
            "and completion_token_ids must be arrays of integer arrays, logprobs an array of "
            "number arrays); the trial contributes no training data",
        )
        return Spans(MALFORMED, [])
    if not len(prompts) == len(completions) == len(logprobs):
        problems.add(
            "unaligned_turns",
            path,
            f"{path.name}: rollout_details[0] records {len(prompts)} prompt turn(s), "
            f"{len(completions)} completion turn(s) and {len(logprobs)} logprob turn(s); "
            "harbor's per-turn lists desynchronized (a turn returned no completion or no "
            "logprobs), so nothing can pair them and the trial contributes no training data",
        )
        return Spans(UNALIGNED, [])
    for index, (sampled, row) in enumerate(zip(completions, logprobs, strict=True)):
        if len(sampled) != len(row):
            problems.add(
                "logprob_mismatch",
                path,
                f"{path.name}: rollout_details[0] turn {index} records {len(sampled)} sampled "
                f"token(s) against {len(row)} logprob(s); the trial contributes no training data",
            )
            return Spans(LOGPROB_MISMATCH, [])
    turns = [Turn(p, c, lp) for p, c, lp in zip(prompts, completions, logprobs, strict=True)]
    return Spans(OK if turns else EMPTY, turns, "rollout_details")


class SinkSpan(BaseModel):
    """One line of the WMO pi-bridge token sink (a `TokenSpan`). Strict: "1" is not a token id."""

    model_config = ConfigDict(strict=True)

    call_index: int = Field(ge=0)
    prompt_token_ids: list[int]
    sampled_token_ids: list[int]
    sampled_logprobs: list[float]

    @model_validator(mode="after")
    def _aligned(self) -> SinkSpan:
        if len(self.sampled_token_ids) != len(self.sampled_logprobs):
            raise ValueError(
                f"{len(self.sampled_token_ids)} sampled token(s) against "
                f"{len(self.sampled_logprobs)} logprob(s)"
            )
        return self


def find_sink(sinks: list[Path], trial_name: str) -> Path | None:
    """The first `{SINK}/{trial_name}.jsonl` that exists among the given sink dirs."""
    for sink in sinks:
        candidate = sink / f"{trial_name}.jsonl"
        if candidate.is_file():
            return candidate
    return None


def from_sink(sink_path: Path, problems: ProblemLog) -> Spans:
    """Spans from a pi-bridge sink file; none at all when any line is invalid (seed 000)."""
    advice = "the sink is corrupt, so delete this step's token sink directory and re-run the step"
    try:
        text = sink_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        problems.add(
            "sink_corrupt", sink_path, f"cannot read token sink {sink_path}: {error}; {advice}"
        )
        return Spans(SINK_CORRUPT, [])
    spans: list[SinkSpan] = []
    for line_number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            spans.append(SinkSpan.model_validate_json(line))
        except ValidationError as error:
            reason = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {e['msg']}"
                for e in error.errors()
            )
            problems.add(
                "sink_corrupt",
                sink_path,
                f"invalid token span on line {line_number} of {sink_path} ({reason}); {advice}",
            )
            return Spans(SINK_CORRUPT, [])
    observed = [span.call_index for span in spans]
    if observed != list(range(len(spans))):
        problems.add(
            "sink_corrupt",
            sink_path,
            f"token sink {sink_path} has call_index sequence {observed[:20]}"
            f"{'...' if len(observed) > 20 else ''}, expected 0..{len(spans) - 1}; more than one "
            "recorder appended to it (e.g. a re-run trial reused the sink), so delete this step's "
            "token sink directory and re-run the step",
        )
        return Spans(SINK_CORRUPT, [])
    turns = [Turn(s.prompt_token_ids, s.sampled_token_ids, s.sampled_logprobs) for s in spans]
    return Spans(SINK, turns, "sink")


def _shared_prefix(prompt: list[int], previous: list[int]) -> int:
    """Length of the common prefix; the common case (an exact extension) is one C-level compare."""
    n = len(previous)
    if len(prompt) >= n and prompt[:n] == previous:
        return n
    limit = min(len(prompt), n)
    low, high = 0, limit  # binary search on slice equality: O(n log n) compares, all in C
    while low < high:
        mid = (low + high + 1) // 2
        if prompt[:mid] == previous[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def table(spans: Spans, trial_key: str, batch: str, trial_name: str) -> pa.Table:
    """The span rows, prompts stored as (shared prefix length, new tokens)."""
    prefix_lens: list[int] = []
    new_ids: list[list[int]] = []
    previous: list[int] = []
    for turn in spans.turns:
        shared = _shared_prefix(turn.prompt, previous)
        prefix_lens.append(shared)
        new_ids.append(turn.prompt[shared:] if shared else turn.prompt)
        previous = turn.prompt + turn.sampled
    n = len(spans.turns)
    return pa.table(
        {
            "trial_key": pa.array([trial_key] * n, pa.string()),
            "batch": pa.array([batch] * n, pa.string()),
            "trial_name": pa.array([trial_name] * n, pa.string()),
            "call_index": pa.array(range(n), pa.int32()),
            "prompt_len": pa.array([len(t.prompt) for t in spans.turns], pa.int32()),
            "prompt_prefix_len": pa.array(prefix_lens, pa.int32()),
            "prompt_new_ids": pa.array(new_ids, pa.list_(pa.int64())),
            "sampled_token_ids": pa.array([t.sampled for t in spans.turns], pa.list_(pa.int64())),
            "sampled_logprobs": pa.array([t.logprobs for t in spans.turns], pa.list_(pa.float64())),
            "n_sampled": pa.array([len(t.sampled) for t in spans.turns], pa.int32()),
            "source": pa.array([spans.source] * n, pa.string()),
        },
        schema=SCHEMA,
    )
