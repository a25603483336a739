"""The plain reading of an ATIF trajectory into `trajectories` / `steps` / `tool_calls` rows: every
file decoded into dicts, one row dict per step and per call. This was the lake's own reading
before the typed one (wmo_lake/tables/atif.py, steps.add_steps); tests hold the typed reading to
exactly these rows and problems, for every shape of document."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from wmo_lake.tables.fields import (
    OUT_OF_RANGE_TIME,
    ProblemLog,
    json_type_name,
    parse_time,
)
from wmo_lake.tables.steps import SOURCES, FileLabel, WrongTypes

_ARGUMENTS = json.JSONEncoder(ensure_ascii=False)


def content_text(value: Any) -> tuple[str | None, list[str], list[Any], list[Any]]:
    """(text, media, parts that are neither text nor image / audio, values of another type)."""
    if value is None or isinstance(value, str):
        return value, [], [], []
    if isinstance(value, list):
        texts: list[str] = []
        media: list[str] = []
        odd_parts: list[Any] = []
        for part in value:
            if isinstance(part, dict) and part.get("type") in ("image", "audio"):
                source = part.get("source")
                where = None
                if isinstance(source, dict):
                    where = source.get("path") or source.get("media_type")
                media.append(f"{part['type']}:{where or '?'}")
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                odd_parts.append(part)
        return "".join(texts), media, odd_parts, []
    return json.dumps(value, ensure_ascii=False), [], [], [value]


def observation_text(observation: Any) -> tuple[str | None, list[str], list[Any], list[Any]]:
    if not isinstance(observation, dict):
        return None, [], [], []
    results = observation.get("results")
    if not isinstance(results, list):
        return None, [], [], []
    texts: list[str] = []
    media: list[str] = []
    odd_parts: list[Any] = []
    odd: list[Any] = []
    for result in results:
        if isinstance(result, dict) and "content" in result:
            text, parts, bad_parts, bad = content_text(result["content"])
            texts.append(text or "")
            media += parts
            odd_parts += bad_parts
            odd += bad
    return ("\n".join(texts) if texts else None), media, odd_parts, odd


def _int(step: dict[str, Any], key: str, index: int, wrong: WrongTypes, prefix: str = "") -> Any:
    value = step.get(key)
    if value is None:
        return None
    if type(value) is int and -(2**63) <= value < 2**63:
        return value
    # harbor's ATIF Step is a pydantic model: lax mode reads 5.0, "5" (and true) as ints
    try:
        read = TypeAdapter(int).validate_python(value)
    except ValidationError:
        read = None
    if isinstance(read, int) and -(2**63) <= read < 2**63:
        shown = json.dumps(value, ensure_ascii=False)
        expected = (
            f"an integer ({shown} read as {read}, as harbor's model (pydantic, lax mode) reads it)"
        )
        wrong.add(index, prefix + key, value, expected, "stored as read")
        return read
    wrong.add(index, prefix + key, value, "an integer")
    return None


def _str(step: dict[str, Any], key: str, index: int, wrong: WrongTypes) -> str | None:
    value = step.get(key)
    if value is None or isinstance(value, str):
        return value
    wrong.add(index, key, value, "a string")
    return None


def step_row(
    step: dict[str, Any], index: int, label: FileLabel, wrong: WrongTypes
) -> dict[str, Any]:
    source = _str(step, "source", index, wrong)
    if step.get("source") is None:
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
    timestamp = _str(step, "timestamp", index, wrong)
    try:
        parsed_time = parse_time(timestamp)
    except OverflowError:
        wrong.add(index, "timestamp", timestamp, OUT_OF_RANGE_TIME)
    else:
        if timestamp and parsed_time is None:
            wrong.add(index, "timestamp", timestamp, "an ISO-8601 time")
    message, media, odd_parts, odd = content_text(step.get("message"))
    if odd or step.get("message") is None:
        wrong.add(index, "message", step.get("message"), "a string or a list of content parts")
        message = None
    part = "a content part (text with a string `text`, or image / audio)"
    for odd_part in odd_parts:
        wrong.add(index, "message[]", odd_part, part, "those parts are left out")
    observation, observed_media, odd_parts, odd = observation_text(step.get("observation"))
    for value in odd:
        wrong.add(
            index,
            "observation.results[].content",
            value,
            "a string or a list of content parts",
            "kept as its JSON text",
        )
    for odd_part in odd_parts:
        wrong.add(
            index, "observation.results[].content[]", odd_part, part, "those parts are left out"
        )
    given = step.get("observation")
    if given is not None and not isinstance(given, dict):
        wrong.add(index, "observation", given, "an object with `results`")
    elif isinstance(given, dict) and not isinstance(given.get("results"), list):
        wrong.add(index, "observation.results", given.get("results"), "an array")
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
    if cost is not None:
        # harbor's ATIF Metrics.cost_usd is a float: pydantic (lax) keeps NaN and infinities,
        # makes "0.5" and true numbers (reported), refuses the rest
        read = _pydantic(float, cost)
        if read is None:
            wrong.add(index, "metrics.cost_usd", cost, "a number")
        elif isinstance(cost, str | bool):
            shown = json.dumps(cost, ensure_ascii=False)
            expected = (
                f"a number ({shown} read as {read!r}, as harbor's model (pydantic, lax mode) "
            )
            wrong.add(index, "metrics.cost_usd", cost, expected + "reads it)", "stored as read")
        cost = read
    copied = step.get("is_copied_context")
    if copied is not None and not isinstance(copied, bool):
        # harbor's Step.is_copied_context is a bool: pydantic (lax) reads 1 and "true" as true
        read = _pydantic(bool, copied)
        if read is None:
            wrong.add(index, "is_copied_context", copied, "a boolean")
        else:
            shown = json.dumps(copied, ensure_ascii=False)
            expected = f"a boolean ({shown} read as {read}, as harbor's model (pydantic, lax "
            wrong.add(
                index, "is_copied_context", copied, expected + "mode) reads it)", "stored as read"
            )
        copied = read
    step_id = _int(step, "step_id", index, wrong)
    if step.get("step_id") is None:
        wrong.add(index, "step_id", None, "an integer")
    return {
        "file": label.name,
        "file_index": label.index,
        "trace_source": label.trace_source,
        "step_index": index,
        "step_id": step_id,
        "source": source,
        "timestamp": parsed_time,
        "model_name": _str(step, "model_name", index, wrong),
        "message": message,
        "reasoning_content": _str(step, "reasoning_content", index, wrong),
        "n_tool_calls": 0 if calls is None else len(calls),
        "observation": observation,
        "media": media + observed_media,
        "observation_media": observed_media,
        "prompt_tokens": _int(metrics, "prompt_tokens", index, wrong, "metrics."),
        "completion_tokens": _int(metrics, "completion_tokens", index, wrong, "metrics."),
        "cached_tokens": _int(metrics, "cached_tokens", index, wrong, "metrics."),
        "cost_usd": cost,
        "llm_call_count": _int(step, "llm_call_count", index, wrong),
        "is_copied_context": copied,
    }


def call_rows(
    step: dict[str, Any], index: int, step_id: int | None, label: FileLabel, wrong: WrongTypes
) -> list[dict[str, Any]]:
    calls = step.get("tool_calls")
    if not isinstance(calls, list):
        return []
    rows = []
    for call_index, call in enumerate(calls):
        name = call_id = None
        if not isinstance(call, dict):
            wrong.add(index, "tool_calls[]", call, "an object")
            call = {}
        else:  # (both required by harbor's ToolCall)
            name, call_id = call.get("function_name"), call.get("tool_call_id")
            if not isinstance(name, str):
                wrong.add(index, "tool_calls[].function_name", name, "a string")
                name = None
            if not isinstance(call_id, str):
                wrong.add(index, "tool_calls[].tool_call_id", call_id, "a string")
                call_id = None
            arguments = call.get("arguments")
            if "arguments" in call and not isinstance(arguments, dict):
                wrong.add(
                    index, "tool_calls[].arguments", arguments, "an object", "kept as recorded"
                )
        rows.append(
            {
                "file": label.name,
                "file_index": label.index,
                "trace_source": label.trace_source,
                "step_index": index,
                "step_id": step_id,
                "call_index": call_index,
                "tool_call_id": call_id,
                "function_name": name,
                "arguments": _ARGUMENTS.encode(call.get("arguments", {})),
            }
        )
    return rows


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _pydantic(kind: type, value: Any) -> Any:
    """`value` (JSON) as a pydantic field of type `kind` reads it in lax mode; None if refused."""
    try:
        return TypeAdapter(kind).validate_json(json.dumps(value, ensure_ascii=False))
    except ValidationError:
        return None


FINAL_METRICS = {
    "total_prompt_tokens": int,
    "total_completion_tokens": int,
    "total_cached_tokens": int,
    "total_cost_usd": float,
}


def final_metrics(final: Any, path: Path, problems: ProblemLog) -> dict[str, Any]:
    """harbor's FinalMetrics as its pydantic model reads it (lax: "2250" and 300.0 are 2250 and
    300, reported); what it refuses, or an integer no 64-bit column holds, is null and said."""
    columns = dict.fromkeys(FINAL_METRICS)
    if final is None:
        return columns
    if not isinstance(final, dict):
        problems.add(
            "wrong_type",
            path,
            f"{path.name}: final_metrics is {json_type_name(final)}, expected an object; "
            "the column is left null",
        )
        return columns
    for key, kind in FINAL_METRICS.items():
        value = final.get(key)
        if value is None:
            continue
        read = _pydantic(kind, value)
        expected = "an integer" if kind is int else "a number"
        if kind is int and read is not None and not -(2**63) <= read < 2**63:
            read, expected = None, "an integer a 64-bit column holds"
        exact = type(value) is int if kind is int else type(value) in (int, float)
        if read is None:
            problems.add(
                "wrong_type",
                path,
                f"{path.name}: final_metrics.{key} is {json_type_name(value)}, expected "
                f"{expected}; the column is left null",
            )
        elif not exact:
            problems.add(
                "wrong_type",
                path,
                f"{path.name}: final_metrics.{key} is {json_type_name(value)}, "
                f"{json.dumps(value, ensure_ascii=False)}, expected {expected}; read as {read!r}, "
                "as harbor's model (pydantic, lax mode) reads it",
            )
        columns[key] = read
    return columns


def read_document(
    doc: Any,
    path: Path,
    label: FileLabel,
    problems: ProblemLog,
    rows: dict[str, list],
    traces: set[str] | None = None,
) -> None:
    """One decoded (dict) document's rows, appended to rows["trajectories" / "steps" /
    "tool_calls"]; subagents embedded in it after its own steps, as the lake labels them.
    `traces`: the trace names the trial has given so far (`main` alone for its first file)."""
    traces = {"main"} if traces is None else traces
    row: dict[str, Any] = {"file": label.name, "file_index": label.index}
    row["trace_source"] = label.trace_source
    rows["trajectories"].append(row)
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        row["status"] = "malformed"
        problems.add(
            "malformed_trajectory",
            path,
            f"{path} is not an ATIF trajectory (expected an object with a `steps` array); "
            "its steps are not in the lake. Re-run the trial or restore the file",
        )
        return
    version = doc.get("schema_version", "ATIF-v1.8")  # (harbor's default for an absent key)
    if not (isinstance(version, str) and version in {f"ATIF-v1.{minor}" for minor in range(9)}):
        shown = repr(version) if isinstance(version, str) and version else None
        problems.add(
            "wrong_type",
            path,
            f"{path.name}: schema_version is {shown or json_type_name(version)}, expected one of "
            "ATIF-v1.0 to ATIF-v1.8; its steps are read as ATIF-v1.8's",
        )
    agent = doc.get("agent")
    if not isinstance(agent, dict):
        problems.add(
            "wrong_type",
            path,
            f"{path.name}: agent is {json_type_name(agent)}, expected an object (harbor's Agent: "
            "name, version); the agent columns are left null",
        )
    else:
        for key in ("name", "version", "model_name"):
            value = agent.get(key)
            if not isinstance(value, str) and (value is not None or key != "model_name"):
                problems.add(
                    "wrong_type",
                    path,
                    f"{path.name}: agent.{key} is {json_type_name(value)}, expected a string; "
                    "the column is left null",
                )
    session_id = doc.get("session_id")
    if session_id is not None and not isinstance(session_id, str):
        problems.add(
            "wrong_type",
            path,
            f"{path.name}: session_id is {json_type_name(session_id)}, expected a string; the "
            "column is left null",
        )
    if doc["steps"] == []:
        problems.add(
            "wrong_type",
            path,
            f"{path.name}: steps is an array, expected at least one step (harbor's Trajectory "
            "requires one); the file adds no step",
        )
    agent = agent if isinstance(agent, dict) else {}
    tools = agent.get("tool_definitions")
    if tools is not None and not isinstance(tools, list):
        problems.add(
            "wrong_type",
            path,
            f"{path.name}: agent.tool_definitions is {json_type_name(tools)}, expected an array "
            "of objects; the column is left null",
        )
        tools = None
    ref = doc.get("continued_trajectory_ref")
    if ref is not None and not isinstance(ref, str):
        problems.add(
            "wrong_type",
            path,
            f"{path.name}: continued_trajectory_ref is {json_type_name(ref)}, expected a file "
            "name; no continuation is followed from it",
        )
    row.update(
        status="ok",
        schema_version=_text(doc.get("schema_version")),
        session_id=_text(doc.get("session_id")),
        agent_name=_text(agent.get("name")),
        agent_version=_text(agent.get("version")),
        model_name=_text(agent.get("model_name")),
        tool_definitions=json.dumps(tools, ensure_ascii=False, indent=2) if tools else None,
        continued_trajectory_ref=_text(doc.get("continued_trajectory_ref")),
        n_steps=len(doc["steps"]),
        **final_metrics(doc.get("final_metrics"), path, problems),
    )
    wrong = WrongTypes(path)
    for index, step in enumerate(doc["steps"]):
        if not isinstance(step, dict):
            wrong.add(index, "", step, "an object", "those steps are skipped")
            continue
        step_values = step_row(step, index, label, wrong)
        rows["steps"].append(step_values)
        rows["tool_calls"] += call_rows(step, index, step_values["step_id"], label, wrong)
    wrong.report(problems)
    embedded = doc.get("subagent_trajectories")
    ids: list[str] = []
    for position, sub in enumerate(embedded if isinstance(embedded, list) else []):
        sub_id = sub.get("trajectory_id") if isinstance(sub, dict) else None
        given = sub_id if isinstance(sub_id, str) and sub_id else f"subagent-{position}"
        if isinstance(sub, dict) and not isinstance(sub_id, str):
            problems.add(
                "wrong_type",
                path,
                f"{path.name}: subagent_trajectories[{position}].trajectory_id is "
                f"{json_type_name(sub_id)}, expected a string (harbor requires one of an embedded "
                f"subagent); it is read as {given!r}",
            )
        base = f"subagent-{position}" if given in ids else given
        name, suffix = base, 1
        while name in traces:  # (a name the trial's traces have, `main` among them)
            suffix += 1
            name = f"{base}-{suffix}"
        if given in ids:
            problems.add(
                "wrong_type",
                path,
                f"{path.name}: subagent_trajectories[{position}] is named {given!r}, as an "
                "earlier subagent is (harbor's Trajectory refuses the file: trajectory_ids must "
                f"be unique); it is read as {name!r}",
            )
        ids.append(given)
        traces.add(name)
        sub_label = FileLabel(f"{label.name}#{name}", len(rows["trajectories"]), name)
        read_document(sub, path, sub_label, problems, rows, traces)


def declared_complete(trajectory: Any) -> bool:
    """True when the trajectory's last `agent` step has a `mark_task_complete` tool call."""
    steps = trajectory.get("steps") if isinstance(trajectory, dict) else None
    if not isinstance(steps, list):
        return False
    for step in reversed(steps):
        if not isinstance(step, dict) or step.get("source") != "agent":
            continue
        calls = step.get("tool_calls")
        if not isinstance(calls, list):
            return False
        return any(
            isinstance(call, dict) and call.get("function_name") == "mark_task_complete"
            for call in calls
        )
    return False
