"""`steps`: one row per step of a trial's ATIF trajectories (harbor's `Trajectory`, v1.0 to v1.8).

Each step keeps what people read and what the conversation export needs, as text: the message
(content parts joined; image / audio parts are noted in `media`, never inlined), the reasoning,
the observation (every result's content joined with a newline, as harbor's trace export joins
them), the number of tool calls (the calls themselves are `tool_calls` rows) and the step's
token / cost metrics. Token ids (`metrics.prompt_token_ids` & co., ATIF-v1.8) are NOT stored:
the `spans` table already holds the sampled tokens, prefix-compressed.

A step's fields of the wrong type are left null and reported once per field and file (naming the
steps), so one odd producer does not flood `problems`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmo_lake.columns import SPECS, arrow_schema
from wmo_lake.tables.fields import ProblemLog, is_real_number, json_type_name
from wmo_lake.tables.trials import parse_time

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
        for (name, what, outcome), indexes in self.found.items():
            shown = ", ".join(str(i) for i in indexes[:5]) + (", ..." if len(indexes) > 5 else "")
            problems.add(
                "wrong_type",
                self.path,
                f"{self.path.name}: steps[{shown}]{'.' + name if name else ''} is {what} "
                f"({len(indexes)} step{'s' if len(indexes) != 1 else ''}); {outcome}",
            )


def content_text(value: Any) -> tuple[str | None, list[str]]:
    """ATIF message / observation content as text, and the non-text parts it holds.

    A string is itself; a list of ContentParts (ATIF-v1.6+) is its text parts concatenated in
    order, the way chat templates render multi-part text, with each image / audio part noted as
    "type:path" (media type when there is no path); null is None. Any other value is its JSON text.
    """
    if value is None or isinstance(value, str):
        return value, []
    if isinstance(value, list):
        texts: list[str] = []
        media: list[str] = []
        for part in value:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
                continue
            kind = part.get("type") if isinstance(part, dict) else None
            source = part.get("source") if isinstance(part, dict) else None
            where = None
            if isinstance(source, dict):
                where = source.get("path") or source.get("media_type")
            media.append(f"{kind if isinstance(kind, str) else 'part'}:{where or '?'}")
        return "".join(texts), media
    return json.dumps(value, ensure_ascii=False), []


def observation_text(observation: Any) -> tuple[str | None, list[str]]:
    """harbor's observation text: the content of every result that has a `content` key, joined
    with a newline; None when no result carries content (a subagent reference, say)."""
    if not isinstance(observation, dict):
        return None, []
    results = observation.get("results")
    if not isinstance(results, list):
        return None, []
    texts: list[str] = []
    media: list[str] = []
    for result in results:
        if isinstance(result, dict) and "content" in result:
            text, parts = content_text(result["content"])
            texts.append(text or "")
            media += parts
    return ("\n".join(texts) if texts else None), media


def _int(step: dict[str, Any], key: str, index: int, wrong: WrongTypes, prefix: str = "") -> Any:
    value = step.get(key)
    if value is None:
        return None
    if type(value) is not int or not -(2**63) <= value < 2**63:
        wrong.add(index, prefix + key, value, "an integer")
        return None
    return value


def _str(step: dict[str, Any], key: str, index: int, wrong: WrongTypes) -> str | None:
    value = step.get(key)
    if value is None or isinstance(value, str):
        return value
    wrong.add(index, key, value, "a string")
    return None


def step_row(
    step: dict[str, Any], index: int, label: FileLabel, wrong: WrongTypes
) -> dict[str, Any]:
    """One `steps` row (without the trial identity) from one decoded ATIF step."""
    source = _str(step, "source", index, wrong)
    if source is not None and source not in SOURCES:
        wrong.add(
            index,
            "source",
            source,
            "one of system / user / agent",
            "kept as recorded; the conversation export leaves those steps out",
        )
    timestamp = _str(step, "timestamp", index, wrong)
    parsed_time = parse_time(timestamp)
    if timestamp and parsed_time is None:
        wrong.add(index, "timestamp", timestamp, "an ISO-8601 time")
    message, media = content_text(step.get("message"))
    if step.get("message") is not None and not isinstance(step.get("message"), str | list):
        wrong.add(index, "message", step.get("message"), "a string or a list of content parts")
        message = None
    observation, observed_media = observation_text(step.get("observation"))
    calls = step.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        wrong.add(index, "tool_calls", calls, "an array")
        calls = None
    metrics = step.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        wrong.add(index, "metrics", metrics, "an object")
        metrics = None
    metrics = metrics or {}
    cost = metrics.get("cost_usd")
    if cost is not None and not is_real_number(cost):
        wrong.add(index, "metrics.cost_usd", cost, "a finite number")
        cost = None
    copied = step.get("is_copied_context")
    if copied is not None and not isinstance(copied, bool):
        wrong.add(index, "is_copied_context", copied, "a boolean")
        copied = None
    return {
        "file": label.name,
        "file_index": label.index,
        "trace_source": label.trace_source,
        "step_index": index,
        "step_id": _int(step, "step_id", index, wrong),
        "source": source,
        "timestamp": parsed_time,
        "model_name": _str(step, "model_name", index, wrong),
        "message": message,
        "reasoning_content": _str(step, "reasoning_content", index, wrong),
        "n_tool_calls": 0 if calls is None else len(calls),
        "observation": observation,
        "media": media + observed_media,
        "prompt_tokens": _int(metrics, "prompt_tokens", index, wrong, "metrics."),
        "completion_tokens": _int(metrics, "completion_tokens", index, wrong, "metrics."),
        "cached_tokens": _int(metrics, "cached_tokens", index, wrong, "metrics."),
        "cost_usd": None if cost is None else float(cost),
        "llm_call_count": _int(step, "llm_call_count", index, wrong),
        "is_copied_context": copied,
    }
