"""The fast reader of harbor's `TrialResult` (result.json, 10-50 MB of indent=4 token ids).

One msgspec pass decodes only the fields the tables read (the ones the column specs name as their
source, `wmo_lake/columns.py`) and skips the rest (the trial config, tracebacks, per-turn `extra`
data) without building Python objects for them.
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

from wmo_lake.columns import result_fields
from wmo_lake.jsonfile import ReadFailure, check_text, decode


class RawDetail(msgspec.Struct):
    """The first rollout-details segment: each turn's token list as raw (syntax-checked) JSON."""

    prompt_token_ids: list[msgspec.Raw] | None = None
    completion_token_ids: list[msgspec.Raw] | None = None
    logprobs: list[list[float]] | None = None


def typed_decoder(fields: dict[str, set[str]]) -> msgspec.json.Decoder[Any]:
    """A decoder of result.json reading exactly `fields` (top-level key -> the keys read under it,
    from the column specs: `columns.result_fields`), every value as it is, except
    `agent_result.rollout_details`: every segment is read as RawDetail in the one pass over the
    file (a second pass over the first segment's text would cost as much as the first)."""
    agent_result = msgspec.defstruct(
        "_AgentResult",
        [
            (name, list[RawDetail] | None if name == "rollout_details" else Any, None)
            for name in sorted(fields.get("agent_result", ()))
        ],
    )
    trial_result = msgspec.defstruct(
        "_TrialResult",
        [
            (name, agent_result | None if name == "agent_result" else Any, None)
            for name in sorted(fields)
        ],
    )
    return msgspec.json.Decoder(trial_result)


_TYPED = typed_decoder(result_fields())


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
    if doc.get("agent_result") is not None:
        doc["agent_result"] = msgspec.structs.asdict(doc["agent_result"])
    return doc
