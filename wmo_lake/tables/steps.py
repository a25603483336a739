"""`steps`: one row per step of a trial's ATIF trajectories (harbor's `Trajectory`, v1.0 to v1.8).

Each step keeps what people read and what the conversation export needs, as text: the message
(content parts joined; image / audio parts are noted in `media`, never inlined), the reasoning,
the observation (every result's content joined with a newline, as harbor's trace export joins
them), the number of tool calls (the calls themselves are `tool_calls` rows) and the step's
token / cost metrics. Token ids (`metrics.prompt_token_ids` & co., ATIF-v1.8) are NOT stored
(nor even decoded: see atif.py): the `spans` table already holds the sampled tokens,
prefix-compressed. Rows are appended to one list per column, the form `PendingRows` holds.

A step's fields of the wrong type are left null and reported once per field and file (naming the
steps), so one odd producer does not flood `problems`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgspec import UNSET

from wmo_lake.columns import SPECS, arrow_schema
from wmo_lake.jsonfile import to_json_text
from wmo_lake.tables.atif import Call, Metrics, Observation, Result, Step
from wmo_lake.tables.fields import (
    OUT_OF_RANGE_TIME,
    ProblemLog,
    fits_int64,
    harbor_lax,
    is_coerced,
    json_type_name,
    model_float,
    parse_time,
)
from wmo_lake.tables.tool_calls import SCHEMA as CALL_SCHEMA

SCHEMA = arrow_schema(SPECS["steps"])

SOURCES = ("system", "user", "agent")
MAIN = "main"


@dataclass
class FileLabel:
    """Where a trajectory file's rows go: its name, rank and trace."""

    name: str
    index: int
    trace_source: str


@dataclass
class WrongTypes:
    """Wrong-typed step fields of one file, gathered to report once per field."""

    path: Path
    found: dict[tuple[str, str, str], list[int]] = field(default_factory=lambda: defaultdict(list))

    def add(
        self,
        step_index: int,
        name: str,
        value: Any,
        expected: str,
        outcome: str = "the column is left null for those steps",
    ) -> None:
        what = f"{json_type_name(value)}, expected {expected}"
        self.found[(name, what, outcome)].append(step_index)

    def report(self, problems: ProblemLog) -> None:
        for (name, what, outcome), found_at in self.found.items():
            indexes = list(dict.fromkeys(found_at))  # (a step's calls or parts: one step)
            shown = ", ".join(str(i) for i in indexes[:5]) + (", ..." if len(indexes) > 5 else "")
            problems.add(
                "wrong_type",
                self.path,
                f"{self.path.name}: steps[{shown}]{'.' + name if name else ''} is {what} "
                f"({len(indexes)} step{'s' if len(indexes) != 1 else ''}); {outcome}",
            )


# harbor's ContentPart types that are not text: the media a message may hold
MEDIA_TYPES = ("image", "audio")
CONTENT_PART = "a content part (text with a string `text`, or image / audio)"
CONTENT = "a string or a list of content parts"


@dataclass
class Content:
    """ATIF message / observation content read (`content_text`): its text, the media it holds,
    and what harbor's model refuses in it (parts that are no ContentPart; a value that is
    neither a string, a list nor null)."""

    text: str | None
    media: list[str] = field(default_factory=list)
    odd_parts: list[Any] = field(default_factory=list)
    odd: list[Any] = field(default_factory=list)  # (a value of another type: its JSON text)


def content_text(value: Any) -> Content:
    """ATIF message / observation content as text, and the non-text parts it holds.

    A string is itself; a list of ContentParts (ATIF-v1.6+) is its text parts concatenated in
    order, the way chat templates render multi-part text, with each image / audio part noted as
    "type:path" (media type when there is no path); null is None. Any other value is its JSON
    text (the value in `odd`); a part that is neither text nor image / audio is left out
    (`odd_parts`).
    """
    if value is None or isinstance(value, str):
        return Content(value)
    if isinstance(value, list):
        read = Content("")
        texts: list[str] = []
        for part in value:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in MEDIA_TYPES:  # (harbor's multimodal check reads only these)
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
                else:
                    read.odd_parts.append(part)
                continue
            source = part.get("source")
            where = None
            if isinstance(source, dict):
                where = source.get("path") or source.get("media_type")
            read.media.append(f"{kind}:{where or '?'}")
        read.text = "".join(texts)
        return read
    return Content(json.dumps(value, ensure_ascii=False), odd=[value])


def observation_text(observation: Any) -> Content:
    """harbor's observation text: the content of every result that has a `content` key, joined
    with a newline; None when no result carries content (a subagent reference, say)."""
    if not isinstance(observation, Observation):
        return Content(None)
    results = observation.results
    if not isinstance(results, list):
        return Content(None)
    if len(results) == 1:  # the common case: the one result's text itself, no join
        result = results[0]
        if not isinstance(result, Result) or result.content is UNSET:
            return Content(None)
        read = content_text(result.content)
        read.text = read.text or ""
        return read
    texts: list[str] = []
    joined = Content(None)
    for result in results:
        if isinstance(result, Result) and result.content is not UNSET:
            read = content_text(result.content)
            texts.append(read.text or "")
            joined.media += read.media
            joined.odd_parts += read.odd_parts
            joined.odd += read.odd
    joined.text = "\n".join(texts) if texts else None
    return joined


def _read_as(expected: str, value: Any, read: Any) -> str:
    """What a field of another type was expected to be, and what harbor's model made of it."""
    read_as = f"{to_json_text(value)} read as {read!r}"
    return f"{expected} ({read_as}, as harbor's model (pydantic, lax mode) reads it)"


def _int(value: Any, key: str, index: int, wrong: WrongTypes) -> Any:
    """An `int` field of harbor's ATIF Step, read as that pydantic model reads it (lax: 5.0 and
    "5" are 5, reported; 5.5 is left null)."""
    if value is None or (type(value) is int and fits_int64(value)):
        return value
    read = harbor_lax(value, int)
    if isinstance(read, int) and fits_int64(read):
        wrong.add(index, key, value, _read_as("an integer", value, read), "stored as read")
        return read
    wrong.add(index, key, value, "an integer")
    return None


def _float(value: Any, key: str, index: int, wrong: WrongTypes) -> float | None:
    """A `float` field of harbor's ATIF Step, read as that pydantic model reads it (lax: NaN and
    infinities kept, "0.5" is 0.5, reported)."""
    read = model_float(value)
    if read is None and value is not None:
        wrong.add(index, key, value, "a number")
    elif is_coerced(value):
        wrong.add(index, key, value, _read_as("a number", value, read), "stored as read")
    return read


def _bool(value: Any, key: str, index: int, wrong: WrongTypes) -> bool | None:
    """A `bool` field of harbor's ATIF Step, read as that pydantic model reads it (lax: 1 and
    "true" are true, reported; 2 is left null)."""
    if value is None or type(value) is bool:
        return value
    read = harbor_lax(value, bool)
    if isinstance(read, bool):
        wrong.add(index, key, value, _read_as("a boolean", value, read), "stored as read")
        return read
    wrong.add(index, key, value, "a boolean")
    return None


def _str(value: Any, key: str, index: int, wrong: WrongTypes) -> str | None:
    if value is None or isinstance(value, str):
        return value
    wrong.add(index, key, value, "a string")
    return None


STEP_COLUMNS = tuple(name for name in SCHEMA.names[3:] if name not in ("run", "step"))
CALL_COLUMNS = tuple(name for name in CALL_SCHEMA.names[3:] if name not in ("run", "step"))

# harbor renders arguments with json.dumps(..., ensure_ascii=False); one encoder, built once.
_ARGUMENTS = json.JSONEncoder(ensure_ascii=False)


def add_steps(
    doc_steps: list[Any],
    label: FileLabel,
    wrong: WrongTypes,
    step_columns: dict[str, list[Any]],
    call_columns: dict[str, list[Any]],
) -> None:
    """Append the `steps` and `tool_calls` rows (without the trial identity) of one file's
    decoded steps to their tables' columns (`STEP_COLUMNS`, `CALL_COLUMNS`). A step that is not
    an object is skipped and reported; a field of the wrong type is left null and reported."""
    s = step_columns
    c = call_columns
    for index, step in enumerate(doc_steps):
        if not isinstance(step, Step):
            wrong.add(index, "", step, "an object", "those steps are skipped")
            continue
        source = _str(step.source, "source", index, wrong)
        if step.source is None:  # (required by harbor's Step)
            wrong.add(
                index,
                "source",
                None,
                "one of system / user / agent",
                "left null; the conversation export leaves those steps out",
            )
        elif source is not None and source not in SOURCES:
            wrong.add(
                index,
                "source",
                source,
                "one of system / user / agent",
                "kept as recorded; the conversation export leaves those steps out",
            )
        timestamp = _str(step.timestamp, "timestamp", index, wrong)
        try:
            parsed_time = parse_time(timestamp)
        except OverflowError:
            parsed_time = None
            wrong.add(index, "timestamp", timestamp, OUT_OF_RANGE_TIME)
        else:
            if timestamp and parsed_time is None:
                wrong.add(index, "timestamp", timestamp, "an ISO-8601 time")
        read_message = content_text(step.message)
        message, media = read_message.text, read_message.media
        if read_message.odd or step.message is None:  # (required by harbor's Step)
            wrong.add(index, "message", step.message, CONTENT)
            message = None
        for part in read_message.odd_parts:
            wrong.add(index, "message[]", part, CONTENT_PART, "those parts are left out")
        read_observation = observation_text(step.observation)
        observation, observed_media = read_observation.text, read_observation.media
        for value in read_observation.odd:
            where = "observation.results[].content"
            wrong.add(index, where, value, CONTENT, "kept as its JSON text")
        for part in read_observation.odd_parts:
            wrong.add(
                index,
                "observation.results[].content[]",
                part,
                CONTENT_PART,
                "those parts are left out",
            )
        if step.observation is not None and not isinstance(step.observation, Observation):
            wrong.add(index, "observation", step.observation, "an object with `results`")
        elif isinstance(step.observation, Observation) and not isinstance(
            step.observation.results, list
        ):
            wrong.add(index, "observation.results", step.observation.results, "an array")
        calls = step.tool_calls
        if calls is not None and not isinstance(calls, list):
            wrong.add(index, "tool_calls", calls, "an array")
            calls = None
        metrics = step.metrics
        if metrics is not None and not isinstance(metrics, Metrics):
            wrong.add(index, "metrics", metrics, "an object")
            metrics = None
        metrics = metrics or _NO_METRICS
        cost = _float(metrics.cost_usd, "metrics.cost_usd", index, wrong)
        copied = _bool(step.is_copied_context, "is_copied_context", index, wrong)
        # (the order of the checks above and below is the order problems are reported in)
        step_id = _int(step.step_id, "step_id", index, wrong)
        if step.step_id is None:  # (required by harbor's Step)
            wrong.add(index, "step_id", None, "an integer")
        s["file"].append(label.name)
        s["file_index"].append(label.index)
        s["trace_source"].append(label.trace_source)
        s["step_index"].append(index)
        s["step_id"].append(step_id)
        s["source"].append(source)
        s["timestamp"].append(parsed_time)
        s["model_name"].append(_str(step.model_name, "model_name", index, wrong))
        s["message"].append(message)
        s["reasoning_content"].append(
            _str(step.reasoning_content, "reasoning_content", index, wrong)
        )
        s["n_tool_calls"].append(0 if calls is None else len(calls))
        s["observation"].append(observation)
        s["media"].append(media + observed_media)
        s["observation_media"].append(observed_media)
        s["prompt_tokens"].append(
            _int(metrics.prompt_tokens, "metrics.prompt_tokens", index, wrong)
        )
        s["completion_tokens"].append(
            _int(metrics.completion_tokens, "metrics.completion_tokens", index, wrong)
        )
        s["cached_tokens"].append(
            _int(metrics.cached_tokens, "metrics.cached_tokens", index, wrong)
        )
        s["cost_usd"].append(cost)
        s["llm_call_count"].append(_int(step.llm_call_count, "llm_call_count", index, wrong))
        s["is_copied_context"].append(copied)
        if calls:
            _add_calls(calls, index, step_id, label, wrong, c)


def _add_calls(
    calls: list[Any],
    index: int,
    step_id: int | None,
    label: FileLabel,
    wrong: WrongTypes,
    c: dict[str, list[Any]],
) -> None:
    """The `tool_calls` rows of one step: `arguments` as harbor's trace export renders them
    inside `<tool_call>` blocks (`json.dumps(arguments, ensure_ascii=False)`, keys in recorded
    order), so the conversation view can rebuild harbor's assistant turns byte for byte."""
    for call_index, call in enumerate(calls):
        name = call_id = None
        if not isinstance(call, Call):
            wrong.add(index, "tool_calls[]", call, "an object")
            call = _NO_CALL
        else:  # (both required by harbor's ToolCall)
            name, call_id = call.function_name, call.tool_call_id
            if not isinstance(name, str):
                wrong.add(index, "tool_calls[].function_name", name, "a string")
                name = None
            if not isinstance(call_id, str):
                wrong.add(index, "tool_calls[].tool_call_id", call_id, "a string")
                call_id = None
        arguments = call.arguments
        if arguments is not UNSET and not isinstance(arguments, dict):
            wrong.add(index, "tool_calls[].arguments", arguments, "an object", "kept as recorded")
        c["file"].append(label.name)
        c["file_index"].append(label.index)
        c["trace_source"].append(label.trace_source)
        c["step_index"].append(index)
        c["step_id"].append(step_id)
        c["call_index"].append(call_index)
        c["tool_call_id"].append(call_id)
        c["function_name"].append(name)
        # harbor renders a missing `arguments` as {} (tool_call.get("arguments", {})).
        c["arguments"].append(_ARGUMENTS.encode({} if arguments is UNSET else arguments))


_NO_METRICS = Metrics()
_NO_CALL = Call()
