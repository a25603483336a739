"""`spans`: one row per sampled turn of a trial's training evidence (WMO's `distill.tokens`).

Two sources, one shape, chosen per job (wmo_lake/collection.py): harbor's
`agent_result.rollout_details` on the terminus-2 path (only the FIRST segment is the main agent's
chat; the rest are subagents), the WMO pi-bridge sink `{token_sink_dir}/{trial}.jsonl` on the
pi-bridge path. A trial whose lists cannot be trusted gets NO span
rows (never a partial episode) and a `spans_status` saying why.

Storage does not repeat prompts: harbor records each turn's full prompt, so a 30-turn episode holds
its context ~30 times. Each row keeps `prompt_prefix_len`, the length of the prefix the prompt
shares with the previous turn's prompt + sampled tokens, and `prompt_new_ids`, the rest. The view
`spans_full` gives the full prompt back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from wmo_lake.columns import SPECS, arrow_schema
from wmo_lake.jsonfile import read_json
from wmo_lake.pending import PendingRows
from wmo_lake.tables.fields import ProblemLog, fits_double, fits_int64, json_type_name
from wmo_lake.tables.prompt_text import PromptTurn
from wmo_lake.tables.trial_result import CutDetail, RawDetail

SCHEMA = arrow_schema(SPECS["spans"])

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
SINK_DIR_MISSING = "sink_dir_missing"


@dataclass
class Turn:
    """A turn as recorded: the full prompt."""

    prompt: list[int]
    sampled: list[int]
    logprobs: list[float]


@dataclass
class StoredTurn:
    """A turn as stored: the prompt as (length, shared prefix length, new tokens)."""

    prompt_len: int
    prefix_len: int
    new_ids: list[int]
    sampled: list[int]
    logprobs: list[float]


@dataclass
class Spans:
    """A trial's spans and why it has (or lacks) them."""

    status: str
    turns: list[StoredTurn]
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
            if (kind is not float and kind is not int) or (kind is int and not fits_double(item)):
                return None
        rows.append(row if all(type(item) is float for item in row) else [float(x) for x in row])
    return rows


def from_rollout_details(
    agent_result: Any, step_results: Any, path: Path, problems: ProblemLog
) -> Spans | None:
    """Spans from `agent_result.rollout_details`; None when the result records none."""
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
    if isinstance(detail, CutDetail):
        return _from_cut_detail(detail, path, problems)
    if isinstance(detail, RawDetail):
        return _from_raw_detail(detail, path, problems)
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


def _first_defect(path: Path) -> str | None:
    """Where rollout_details[0]'s per-turn lists first go wrong ("logprobs is missing",
    "prompt_token_ids[2][700] is a string, expected an integer"), read again from the file: only
    for a malformed trial, so the fast paths need not track it."""
    doc: Any = read_json(path)
    try:
        detail = doc["agent_result"]["rollout_details"][0]
        keys = list(detail)
    except (TypeError, KeyError, IndexError):  # (a ReadFailure too: not subscriptable)
        return None
    checks = (
        ("prompt_token_ids", "an integer", (int,)),
        ("completion_token_ids", "an integer", (int,)),
        ("logprobs", "a number", (int, float)),
    )
    for key, expected, kinds in checks:
        if detail.get(key) is None:
            return f"{key} is {'null' if key in keys else 'missing'}"
        turns = detail[key]
        if not isinstance(turns, list):
            return f"{key} is {json_type_name(turns)}, expected an array of arrays"
        for index, turn in enumerate(turns):
            if not isinstance(turn, list):
                return f"{key}[{index}] is {json_type_name(turn)}, expected an array"
            for at, item in enumerate(turn):
                if type(item) not in kinds:
                    return f"{key}[{index}][{at}] is {json_type_name(item)}, expected {expected}"
    return None


def _checked_turns(
    prompts: list[list[int]] | None,
    completions: list[list[int]] | None,
    logprobs: list[list[float]] | None,
    path: Path,
    problems: ProblemLog,
    first_index: int = 0,
) -> Spans:
    """WMO's `distill.tokens` checks on type-checked per-turn lists: all three present, aligned
    turns, as many logprobs as sampled tokens in every turn."""
    if prompts is None or completions is None or logprobs is None:
        defect = _first_defect(path)
        problems.add(
            "malformed_spans",
            path,
            f"{path.name}: rollout_details[0] lacks well-formed per-turn lists "
            f"({defect + '; ' if defect else ''}prompt_token_ids and completion_token_ids must "
            "be arrays of integer arrays, logprobs an array of number arrays); the trial "
            "contributes no training data",
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
    for index, (sampled, row) in enumerate(zip(completions, logprobs, strict=True), first_index):
        if len(sampled) != len(row):
            problems.add(
                "logprob_mismatch",
                path,
                f"{path.name}: rollout_details[0] turn {index} records {len(sampled)} sampled "
                f"token(s) against {len(row)} logprob(s); the trial contributes no training data",
            )
            return Spans(LOGPROB_MISMATCH, [])
    turns = [Turn(p, c, lp) for p, c, lp in zip(prompts, completions, logprobs, strict=True)]
    return Spans(OK if turns else EMPTY, compress(turns), "rollout_details")


_INT_LIST = msgspec.json.Decoder(list[int])


class _NotFast(Exception):
    """The raw token text is not what the fast path reads; take the checked path."""


def _items(raw: msgspec.Raw) -> bytes:
    """The text between an array's brackets (msgspec.Raw is already syntax-checked JSON)."""
    text = bytes(raw)
    if text[:1] != b"[":
        raise _NotFast
    return text[1:-1]


def _parse_ints(text: bytes) -> list[int]:
    """The ints in an array's inner text; a bool, float, string or array is not a token id."""
    if not text.strip():
        return []
    try:
        return _INT_LIST.decode(b"[" + text + b"]")
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise _NotFast from error


def _from_raw_detail(detail: RawDetail, path: Path, problems: ProblemLog) -> Spans:
    """WMO's `distill.tokens` reading of the first rollout segment, from each turn's raw JSON text.

    A turn's prompt normally is the previous prompt + the previous sampled tokens + new context.
    The same dumper wrote all three lists at the same depth, so that extension shows in the text:
    the prompt's text starts with the previous prompt's items, a comma, the previous sampled
    items, then a comma or the end. Only the new tokens are parsed; every token of the prefix was
    parsed (and type-checked) in an earlier turn. A prompt whose text does not extend the previous
    one is parsed whole and compared token by token. Any non-int token, and any shape the seed's
    checks would reject, takes the fully checked path, so statuses and problems are the same.

    The prompts are most of a result.json's bytes, so each turn's text is copied once (out of
    msgspec's Raw) and compared in place (offsets and memoryviews), never sliced or joined.
    """
    prompts_raw, completions_raw, logprobs = (
        detail.prompt_token_ids,
        detail.completion_token_ids,
        detail.logprobs,
    )
    if prompts_raw is None or completions_raw is None or logprobs is None:
        return _from_raw_checked(detail, path, problems)
    try:
        completions = [_parse_ints(_items(raw)) for raw in completions_raw]
        if not len(prompts_raw) == len(completions) == len(logprobs):
            for raw in prompts_raw:  # a malformed prompt outranks unaligned turns
                _parse_ints(_items(raw))
            # the checked path's report, from the same counts (the lists' contents are not read)
            return _checked_turns(
                [[]] * len(prompts_raw), completions, [[]] * len(logprobs), path, problems
            )
        turns: list[StoredTurn] = []
        # the previous turn's prefix, as views of its texts: the prompt's items (right-stripped)
        # and the sampled items (right-stripped), either left out when only whitespace
        previous: list[memoryview] = []
        previous_items = memoryview(b"")
        for index, raw in enumerate(prompts_raw):
            text = _text(raw)
            end = _items_end(text)
            turn = _extend(text, end, previous, turns[-1] if turns else None)
            if turn is None:  # not a textual extension: compare tokens
                full = _parse_ints(text[1:end])
                before = (
                    _parse_ints(bytes(previous_items)) + completions[index - 1] if index else []
                )
                shared = _shared_prefix(full, before)
                turn = StoredTurn(len(full), shared, full[shared:], [], [])
            turn.sampled, turn.logprobs = completions[index], logprobs[index]
            turns.append(turn)
            sampled = _text(completions_raw[index])
            previous_items = memoryview(text)[1:end]
            previous = [
                memoryview(source)[1:stop]
                for source, stop in (
                    (text, _rstripped(text, 1, end)),
                    (sampled, _rstripped(sampled, 1, _items_end(sampled))),
                )
                if not _blank(source, 1, stop)
            ]
    except _NotFast:
        return _from_raw_checked(detail, path, problems)
    return _with_logprobs_checked(turns, path, problems)


def _from_cut_detail(detail: CutDetail, path: Path, problems: ProblemLog) -> Spans:
    """WMO's `distill.tokens` reading of the first rollout segment, its prompts read from their
    text (`tables/prompt_text.py`: all ints, aligned with the other two lists). Token for token
    what `compress` gives: a prompt that extends the previous one by `ids` shares with the
    previous prompt + sampled tokens that prompt and the common prefix of `ids` and the sampled
    tokens. Completions that are not all ints are read by the path that reports them."""
    try:
        completions = [_parse_ints(_items(raw)) for raw in detail.completion_token_ids]
    except _NotFast:
        return _from_raw_detail(detail.whole(), path, problems)
    turns: list[StoredTurn] = []
    for index, prompt in enumerate(detail.prompts):
        if index and prompt.extends:
            before = turns[-1].prompt_len
            common = _shared_prefix(prompt.ids, completions[index - 1])
            turn = StoredTurn(
                before + len(prompt.ids), before + common, prompt.ids[common:], [], []
            )
        else:
            previous = (
                _prompt_ids(detail.prompts, index - 1) + completions[index - 1] if index else []
            )
            shared = _shared_prefix(prompt.ids, previous)
            turn = StoredTurn(len(prompt.ids), shared, prompt.ids[shared:], [], [])
        turn.sampled, turn.logprobs = completions[index], detail.logprobs[index]
        turns.append(turn)
    return _with_logprobs_checked(turns, path, problems)


def _with_logprobs_checked(turns: list[StoredTurn], path: Path, problems: ProblemLog) -> Spans:
    """The spans of turns read on a fast path, once each turn has as many logprobs as sampled
    tokens (the first that has not is reported as the checked path reports it)."""
    for index, turn in enumerate(turns):
        if len(turn.sampled) != len(turn.logprobs):
            return _checked_turns([[]], [turn.sampled], [turn.logprobs], path, problems, index)
    return Spans(OK if turns else EMPTY, turns, "rollout_details")


def _prompt_ids(prompts: list[PromptTurn], index: int) -> list[int]:
    """Turn `index`'s whole prompt, rebuilt from the turns it extends (for a prompt that does
    not extend it, which is rare: a context cut or a summary)."""
    first = index
    while first > 0 and prompts[first].extends:
        first -= 1
    ids: list[int] = []
    for prompt in prompts[first : index + 1]:
        ids += prompt.ids
    return ids


_WHITESPACE = frozenset(b" \t\n\r\x0b\x0c")  # what bytes.strip() strips


def _text(raw: msgspec.Raw) -> bytes:
    """An array's JSON text (msgspec.Raw is already syntax-checked JSON)."""
    text = bytes(raw)
    if text[:1] != b"[":
        raise _NotFast
    return text


def _items_end(text: bytes) -> int:
    """Where an array's items end in its text (the closing bracket)."""
    return len(text) - 1


def _rstripped(text: bytes, start: int, end: int) -> int:
    """`end` moved left past the whitespace before it (not past `start`)."""
    while end > start and text[end - 1] in _WHITESPACE:
        end -= 1
    return end


def _blank(text: bytes, start: int, end: int) -> bool:
    """Whether `text[start:end]` is only whitespace (or empty), without copying it."""
    while start < end and text[start] in _WHITESPACE:
        start += 1
    return start == end


def _extend(
    text: bytes, end: int, previous: list[memoryview], previous_turn: StoredTurn | None
) -> StoredTurn | None:
    """The stored turn when the prompt `text` (items up to `end`) textually extends the previous
    prompt + sampled tokens (`previous`: their items, joined by a comma)."""
    if previous_turn is None or not previous:
        return StoredTurn(0, 0, [], [], []) if _blank(text, 1, end) else _whole(text[1:end])
    at = 1
    for number, part in enumerate(previous):
        if number and not text.startswith(b",", at):
            return None
        at += bool(number)
        if not text.startswith(part, at):
            return None
        at += len(part)
    while at < end and text[at] in _WHITESPACE:
        at += 1
    if at < end and text[at] != ord(","):
        return None  # the prefix ended inside a number: not a token boundary
    shared = previous_turn.prompt_len + len(previous_turn.sampled)
    new_ids = _parse_ints(text[at + 1 : end]) if at < end else []
    return StoredTurn(shared + len(new_ids), shared, new_ids, [], [])


def _whole(items: bytes) -> StoredTurn:
    ids = _parse_ints(items)
    return StoredTurn(len(ids), 0, ids, [], [])


def _decode_raw(raw: msgspec.Raw) -> Any:
    """One list as the whole-file decode reads it (`jsonfile.decode`): msgspec refuses a number
    past a double's range (1e400), which json reads as inf (then no token id: malformed)."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return json.loads(bytes(raw))


def _from_raw_checked(detail: RawDetail, path: Path, problems: ProblemLog) -> Spans:
    """The seed's field-by-field checks on the decoded lists (the slow path, for odd input)."""

    def decoded(raws: list[msgspec.Raw] | None) -> Any:
        return None if raws is None else [_decode_raw(raw) for raw in raws]

    return _checked_turns(
        _int_lists(decoded(detail.prompt_token_ids)),
        _int_lists(decoded(detail.completion_token_ids)),
        detail.logprobs,
        path,
        problems,
    )


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


def compress(turns: list[Turn]) -> list[StoredTurn]:
    """Full prompts -> (length, prefix shared with the previous prompt + sampled, new tokens)."""
    stored: list[StoredTurn] = []
    previous: list[int] = []
    for turn in turns:
        shared = _shared_prefix(turn.prompt, previous)
        new_ids = turn.prompt[shared:] if shared else turn.prompt
        stored.append(StoredTurn(len(turn.prompt), shared, new_ids, turn.sampled, turn.logprobs))
        previous = turn.prompt + turn.sampled
    return stored


# A trial with at most this many stored tokens (new prompt + sampled) has its span rows kept as
# Python lists until the segment writer builds Arrow for many trials at once: a per-trial
# pa.table costs more than reading a small trial's files. Bigger trials build Arrow at once, so
# the rows a writer holds as Python objects stay small (FLUSH_PENDING_ROWS x this many tokens).
PENDING_MAX_TOKENS = 1024


def rows(spans: Spans, trial_key: str, batch: str, trial_name: str) -> pa.Table | PendingRows:
    """The span rows: PendingRows for a small trial, else an Arrow table (`table`). Raises
    OverflowError, as Arrow would, when a token id does not fit in 64 bits."""
    turns = spans.turns
    n = len(turns)
    if sum(len(t.new_ids) + len(t.sampled) for t in turns) > PENDING_MAX_TOKENS:
        return table(spans, trial_key, batch, trial_name)
    for turn in turns:
        for ids in (turn.new_ids, turn.sampled):
            if ids and not (fits_int64(min(ids)) and fits_int64(max(ids))):
                raise OverflowError(f"token id {max(ids, key=abs)} does not fit in int64")
    columns: dict[str, list[Any]] = {
        "trial_key": [trial_key] * n,
        "batch": [batch] * n,
        "trial_name": [trial_name] * n,
        "call_index": list(range(n)),
        "prompt_len": [t.prompt_len for t in turns],
        "prompt_prefix_len": [t.prefix_len for t in turns],
        "prompt_new_ids": [t.new_ids for t in turns],
        "sampled_token_ids": [t.sampled for t in turns],
        "sampled_logprobs": [t.logprobs for t in turns],
        "n_sampled": [len(t.sampled) for t in turns],
        "source": [spans.source] * n,
    }
    # run and step are left out: the segment writer sets them from the trial's partition
    return PendingRows({name: columns[name] for name in SCHEMA.names if name in columns}, n)


def table(spans: Spans, trial_key: str, batch: str, trial_name: str) -> pa.Table:
    """The span rows as an Arrow table."""
    turns = spans.turns
    n = len(turns)
    return pa.table(
        {
            "trial_key": pa.array([trial_key] * n, pa.string()),
            "batch": pa.array([batch] * n, pa.string()),
            "trial_name": pa.array([trial_name] * n, pa.string()),
            "call_index": pa.array(range(n), pa.int32()),
            "prompt_len": pa.array([t.prompt_len for t in turns], pa.int32()),
            "prompt_prefix_len": pa.array([t.prefix_len for t in turns], pa.int32()),
            "prompt_new_ids": pa.array([t.new_ids for t in turns], pa.list_(pa.int64())),
            "sampled_token_ids": pa.array([t.sampled for t in turns], pa.list_(pa.int64())),
            "sampled_logprobs": pa.array([t.logprobs for t in turns], pa.list_(pa.float64())),
            "n_sampled": pa.array([len(t.sampled) for t in turns], pa.int32()),
            "source": pa.array([spans.source] * n, pa.string()),
            # the segment writer sets run and step from the trial's partition
            "run": pa.nulls(n, pa.string()),
            "step": pa.nulls(n, pa.int64()),
        },
        schema=SCHEMA,
    )
