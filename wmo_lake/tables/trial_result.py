"""The fast reader of harbor's `TrialResult` (result.json, 10-50 MB of indent=4 token ids).

One msgspec pass decodes only the fields the tables read and skips the rest (the trial config,
tracebacks, per-turn `extra` data) without building Python objects for them.
The first rollout segment's token lists are kept as raw JSON text per turn (`RawDetail`): a turn's
prompt repeats the whole conversation so far, so `tables/spans.py` compares that text with the
previous turn's instead of turning every repeated token into a Python int, and parses only the new
tokens (typed, so a bool or a float is still not a token id). Anything that does not fit these
types (wrong types anywhere, NaN, 1e400) falls back to the generic decode, where every field is
checked one by one and reported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from wmo_lake.jsonfile import ReadFailure, check_text, decode


class RawDetail(msgspec.Struct):
    """The first rollout-details segment: each turn's token list as raw (syntax-checked) JSON."""

    prompt_token_ids: list[msgspec.Raw] | None = None
    completion_token_ids: list[msgspec.Raw] | None = None
    logprobs: list[list[float]] | None = None


class _AgentResult(msgspec.Struct):
    n_input_tokens: Any = None
    n_cache_tokens: Any = None
    n_output_tokens: Any = None
    cost_usd: Any = None
    metadata: Any = None
    # Every segment is read as RawDetail in the one pass over the file (a second pass over the
    # first segment's text would cost as much as the first); only the first one is used.
    rollout_details: list[RawDetail] | None = None


class _TrialResult(msgspec.Struct):
    id: Any = None
    task_name: Any = None
    trial_name: Any = None
    agent_info: Any = None
    agent_result: _AgentResult | None = None
    verifier_result: Any = None
    exception_info: Any = None
    started_at: Any = None
    finished_at: Any = None
    environment_setup: Any = None
    agent_setup: Any = None
    agent_execution: Any = None
    verifier: Any = None
    step_results: Any = None


_TYPED = msgspec.json.Decoder(_TrialResult)


def decode_trial_result(data: bytes, path: Path) -> Any | ReadFailure:
    """result.json as a dict (the fields the tables read), or a ReadFailure."""
    failure = check_text(data, path)
    if failure is not None:
        return failure
    try:
        typed = _TYPED.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return decode(data, path)  # the slow, field-by-field checked path
    doc = msgspec.structs.asdict(typed)
    if typed.agent_result is not None:
        doc["agent_result"] = msgspec.structs.asdict(typed.agent_result)
    return doc
