"""An ATIF trajectory file as the trajectory tables read it: msgspec Structs of just the fields
they use, so decoding skips the rest without building it (a real terminus-2 step's token ids
and logprobs are most of its bytes: such a file decodes ~3x faster than into dicts).

Every field a Struct holds is typed to take any JSON value: an object where the tables expect
one becomes its Struct, anything else stays the plain value (a string where an object belongs,
say), so a wrong-typed field is still seen, left null and reported exactly as before, and a
decode never fails on a file's shape. The leaf fields are `Any`: the same Python values a plain
decode gives. A key absent and a key set to null read the same (None), except where the tables
tell them apart (`UNSET`: a result's `content`, a call's `arguments`).

What msgspec cannot decode but Python's json module reads (NaN, Infinity, 1e400) is read by
`jsonfile.decode` and converted to the same Structs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
from msgspec import UNSET, Struct

from wmo_lake.jsonfile import ProblemSink, ReadFailure, check_text, read_bytes
from wmo_lake.jsonfile import decode as decode_plain

# Any JSON value but an object or an array; with a Struct (the object) and `list` or `dict`, a
# field's type takes every JSON value (msgspec allows one object-like and one array-like type).
Scalar = None | bool | int | float | str


class Metrics(Struct):
    prompt_tokens: Any = None
    completion_tokens: Any = None
    cached_tokens: Any = None
    cost_usd: Any = None


class Call(Struct):
    tool_call_id: Any = None
    function_name: Any = None
    arguments: Any = UNSET  # harbor renders an absent `arguments` as {}, a null one as null


class Result(Struct):
    content: Any = UNSET  # a result with a `content` key (even null) adds a line of text


class Observation(Struct):
    results: list[Result | Scalar | list] | Scalar | dict = None


class Step(Struct):
    step_id: Any = None
    source: Any = None
    timestamp: Any = None
    model_name: Any = None
    message: Any = None
    reasoning_content: Any = None
    tool_calls: list[Call | Scalar | list] | Scalar | dict = None
    observation: Observation | Scalar | list = None
    metrics: Metrics | Scalar | list = None
    llm_call_count: Any = None
    is_copied_context: Any = None


class Trajectory(Struct):
    schema_version: Any = UNSET  # absent is harbor's default (ATIF-v1.8); null it refuses
    session_id: Any = None
    trajectory_id: Any = None
    agent: Any = None
    final_metrics: Any = None
    continued_trajectory_ref: Any = None
    steps: list[Step | Scalar | list] | Scalar | dict = None
    subagent_trajectories: list[Trajectory | Scalar | list] | Scalar | dict = None


# A trajectory file's document: an ATIF object, or the value that is there instead.
Document = Trajectory | Scalar | list

_DECODER = msgspec.json.Decoder(Document)


def decode(
    data: bytes, path: Path | str, problems: ProblemSink | None = None
) -> Document | ReadFailure:
    """The document in `data`, or why it cannot be read (as `jsonfile.decode` says it, and
    reports to `problems` what it changed)."""
    failure = check_text(data, path)
    if failure is not None:
        return failure
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):  # (ValidationError too: 1e400 is out of range)
        pass
    plain = decode_plain(data, path, problems)
    if isinstance(plain, ReadFailure):
        return plain
    return msgspec.convert(plain, Document)  # every field takes any value: this cannot fail


def read(
    path: Path | str, problems: ProblemSink | None = None
) -> tuple[Document | ReadFailure | None, int | None]:
    """The document in the file at `path` (None when there is no such file) and its size."""
    data = read_bytes(path)
    if data is None or isinstance(data, ReadFailure):
        return data, None
    doc = decode(data, path, problems)
    if doc is None:  # JSON null: a file that is there, not a missing one
        why = f"{path} holds JSON null, expected an ATIF trajectory object"
        return ReadFailure("malformed_trajectory", why), len(data)
    return doc, len(data)


def is_trajectory(doc: Any) -> bool:
    """An ATIF trajectory: an object with a `steps` array."""
    return isinstance(doc, Trajectory) and isinstance(doc.steps, list)
