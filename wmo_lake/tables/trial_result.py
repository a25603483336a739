"""The fast reader of harbor's `TrialResult` (result.json, 10-50 MB of indent=4 token ids).

One msgspec pass decodes only the fields the tables read (the ones the column specs name as their
source, `wmo_lake/columns.py`) and skips the rest (the trial config, tracebacks, per-turn `extra`
data) without building Python objects for them.

The first rollout segment's prompts, most of the file, are not part of that pass: they are cut out
and read from their text (`tables/prompt_text.py`: each prompt compared with the previous one,
only its new tokens parsed), the rest decoded with a marker where they were (`CutDetail`). When the
prompts' text is not what that reads, every segment's token lists are kept as raw JSON text per
turn instead (`RawDetail`), which `tables/spans.py` also compares turn by turn. Anything that does
not fit these types (wrong types anywhere, NaN, 1e400) falls back to the generic decode, where
every field is checked one by one and reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from wmo_lake.columns import result_fields
from wmo_lake.jsonfile import ProblemSink, ReadFailure, check_text, decode
from wmo_lake.tables.prompt_text import CutPrompts, PromptTurn, cut_prompts


class RawDetail(msgspec.Struct):
    """A rollout-details segment: each turn's token list as raw (syntax-checked) JSON."""

    prompt_token_ids: list[msgspec.Raw] | None = None
    completion_token_ids: list[msgspec.Raw] | None = None
    logprobs: list[list[float]] | None = None


class _CutSegment(msgspec.Struct):
    """A segment of the file with the first segment's prompts cut out (a marker string there)."""

    prompt_token_ids: list[msgspec.Raw] | str | None = None
    completion_token_ids: list[msgspec.Raw] | None = None
    logprobs: list[list[float]] | None = None


@dataclass
class CutDetail:
    """The first segment read around its cut-out prompts: the prompts as `PromptTurn`s, aligned
    with the other two lists. `whole()` decodes the file again the other way (`RawDetail`), for
    what only that path reads (a completion that is not all ints)."""

    prompts: list[PromptTurn]
    completion_token_ids: list[msgspec.Raw]
    logprobs: list[list[float]]
    data: bytes

    def whole(self) -> RawDetail:
        details = _TYPED.decode(self.data).agent_result.rollout_details
        return details[0]


def typed_decoder(
    fields: dict[str, set[str]], segment: type[msgspec.Struct] = RawDetail
) -> msgspec.json.Decoder[Any]:
    """A decoder of result.json reading exactly `fields` (top-level key -> the keys read under it,
    from the column specs: `columns.result_fields`), every value as it is, except
    `agent_result.rollout_details`: every segment is read as `segment` in the one pass over the
    file (a second pass over the first segment's text would cost as much as the first)."""
    agent_result = msgspec.defstruct(
        "_AgentResult",
        [
            (name, list[segment] | None if name == "rollout_details" else Any, None)  # type: ignore[valid-type]
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
_TYPED_CUT = typed_decoder(result_fields(), _CutSegment)
# What stands in the file for the cut-out prompts: a string no prompt list can be.
_MARKER = "wmo-lake: prompts read from their text"
_MARKER_JSON = msgspec.json.encode(_MARKER)


def decode_trial_result(
    data: bytes, path: Path, problems: ProblemSink | None = None
) -> Any | ReadFailure:
    """result.json as a dict (the fields the tables read), or a ReadFailure; what the decode
    changed (a lone surrogate replaced) goes to `problems`."""
    cut = cut_prompts(data)
    rest = None if cut is None else data[: cut.start] + _MARKER_JSON + data[cut.end :]
    # The cut-out prompts are ASCII by construction (ints, commas, brackets, JSON whitespace):
    # only the rest is scanned, and the whole file when that finds more than ASCII (its message).
    failure = check_text(data, path) if rest is None or not rest.isascii() else None
    if failure is not None:
        return failure
    typed = None if cut is None or rest is None else _decode_around(rest, cut, data)
    if typed is None:
        try:
            typed = _TYPED.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
            return decode(data, path, problems)  # the slow, field-by-field checked path
    doc = msgspec.structs.asdict(typed)
    if doc.get("agent_result") is not None:
        doc["agent_result"] = msgspec.structs.asdict(doc["agent_result"])
    return doc


def _decode_around(rest: bytes, cut: CutPrompts, data: bytes) -> Any | None:
    """The typed decode of `rest` (`data` with `cut`'s prompts replaced by the marker), its first
    segment a CutDetail; None unless the marker came back there, and only there, with the three
    lists aligned (every other case is for the whole decode, and its checks, to read)."""
    try:
        typed = _TYPED_CUT.decode(rest)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
    segments = None if typed.agent_result is None else typed.agent_result.rollout_details
    if not segments or segments[0].prompt_token_ids != _MARKER:
        return None
    first = segments[0]
    completions, logprobs = first.completion_token_ids, first.logprobs
    if completions is None or logprobs is None:
        return None
    if not len(cut.turns) == len(completions) == len(logprobs):
        return None
    read: list[Any] = [CutDetail(cut.turns, completions, logprobs, data)]
    for segment in segments[1:]:
        if isinstance(segment.prompt_token_ids, str):
            return None  # (a subagent's string prompts: no RawDetail, so the checked path)
        read.append(RawDetail(*msgspec.structs.astuple(segment)))
    typed.agent_result.rollout_details = read
    return typed
