"""The prompts of result.json's first rollout segment, read from their text, not by a JSON pass.

Each turn's prompt repeats the conversation so far, so those lists are ~90% of a result.json's
bytes (a 21-turn trial: 215k prompt token ids, 17k of them new). Any JSON decoder tokenizes every
one of them (msgspec: ~650 MB/s). Here, a prompt's text is compared with the previous prompt's
(a memcmp) and only what follows it is decoded: the same dumper wrote both lists at the same
depth, so a prompt that extends the previous one starts with its items, byte for byte.

`cut_prompts` finds the list, reads it, and returns it with its place in the file; the caller
decodes the rest of the file (the prompts replaced by a marker) and checks the marker came back at
`agent_result.rollout_details[0].prompt_token_ids`, so the cut was there and nowhere else. The
cut region is strict JSON, by construction: every prompt is either a prefix already checked plus
items decoded typed, or decoded whole, typed; the brackets and commas between them are checked
here. Anything else (a non-int token, a string holding a bracket, a trailing comma) returns None,
and the file is decoded whole, by the path that checks and reports everything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec

_PROMPTS_KEY = b'"prompt_token_ids"'
_SEGMENTS_KEY = b'"rollout_details"'
_JSON_WHITESPACE = re.compile(rb"[ \t\n\r]*")  # JSON's four (bytes.strip strips six)
_INT_LIST = msgspec.json.Decoder(list[int])
_OPEN, _CLOSE, _COMMA, _COLON = ord("["), ord("]"), ord(","), ord(":")


@dataclass
class PromptTurn:
    """One turn's prompt: `ids` alone, or (when `extends`) the previous prompt followed by `ids`."""

    extends: bool
    ids: list[int]


@dataclass
class CutPrompts:
    """The first segment's prompts, and where their list's text is in the file."""

    turns: list[PromptTurn]
    start: int  # the list's `[`
    end: int  # just past its `]`


def _skip(data: bytes, at: int) -> int:
    match = _JSON_WHITESPACE.match(data, at)
    return at if match is None else match.end()


def _ints(text: bytes | memoryview) -> list[int] | None:
    """The JSON array `text` as token ids; None unless it is exactly an array of integers."""
    try:
        return _INT_LIST.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None


def cut_prompts(data: bytes) -> CutPrompts | None:
    """The prompts of the first `"prompt_token_ids"` after `"rollout_details"`, read as the module
    docstring says; None when there is none, or its text is not what this reads."""
    segments = data.find(_SEGMENTS_KEY)
    if segments < 0:
        return None
    key = data.find(_PROMPTS_KEY, segments)
    if key < 0:
        return None
    colon = _skip(data, key + len(_PROMPTS_KEY))
    if data[colon : colon + 1] != b":":
        return None
    start = _skip(data, colon + 1)
    if data[start : start + 1] != b"[":
        return None
    view = memoryview(data)
    turns: list[PromptTurn] = []
    previous: memoryview | None = None  # the previous prompt's text up to its last item
    at = _skip(data, start + 1)
    if data[at : at + 1] == b"]":
        return CutPrompts(turns, start, at + 1)
    while True:
        if data[at : at + 1] != b"[":
            return None
        turn, close = _extension(data, at, previous)
        if turn is None:  # not an extension: the prompt is decoded whole
            close = data.find(b"]", at)  # its first `]`: a valid int list has no other
            ids = _ints(view[at : close + 1]) if close > 0 else None
            if ids is None:
                return None
            turn = PromptTurn(False, ids)
        turns.append(turn)
        last = close  # the prompt's items end before its closing bracket and whitespace
        while data[last - 1] in b" \t\n\r":
            last -= 1
        previous = view[at:last] if last > at + 1 else None  # (None: an empty prompt)
        at = _skip(data, close + 1)
        if data[at : at + 1] == b"]":
            return CutPrompts(turns, start, at + 1)
        if data[at : at + 1] != b",":
            return None
        at = _skip(data, at + 1)


def _extension(data: bytes, at: int, previous: memoryview | None) -> tuple[PromptTurn | None, int]:
    """The prompt at `at` as an extension of `previous` (its text up to its last item), and the
    index of its `]`; (None, -1) when its text does not start so."""
    if previous is None or not data.startswith(previous, at):
        return None, -1
    after = _skip(data, at + len(previous))
    if data[after : after + 1] == b"]":  # the same items again
        return PromptTurn(True, []), after
    if data[after : after + 1] != b",":  # (the prefix ended inside a number, or worse)
        return None, -1
    close = data.find(b"]", after)
    if close < 0:
        return None, -1
    ids = _ints(b"[" + data[after + 1 : close + 1])
    if not ids:  # not ints, or nothing after the comma (`[1, 2,]` is no JSON)
        return None, -1
    return PromptTurn(True, ids), close
