"""`tool_calls`: one row per tool call of an ATIF step (`steps.n_tool_calls` counts them).

`arguments` is the call's arguments as JSON text, rendered exactly as harbor's trace export
renders them inside `<tool_call>` blocks (`json.dumps(arguments, ensure_ascii=False)`, keys in
recorded order), so the conversation view can rebuild harbor's assistant turns byte for byte.
"""

from __future__ import annotations

import json
from typing import Any

from wmo_lake.columns import SPECS, arrow_schema
from wmo_lake.tables.steps import FileLabel, WrongTypes

# harbor renders arguments with json.dumps(..., ensure_ascii=False); one encoder, built once.
_ARGUMENTS = json.JSONEncoder(ensure_ascii=False)

SCHEMA = arrow_schema(SPECS["tool_calls"])


def call_rows(
    step: dict[str, Any], index: int, step_id: int | None, label: FileLabel, wrong: WrongTypes
) -> list[dict[str, Any]]:
    """The `tool_calls` rows (without the trial identity) of one decoded ATIF step."""
    calls = step.get("tool_calls")
    if not isinstance(calls, list):
        return []
    rows = []
    for call_index, call in enumerate(calls):
        if not isinstance(call, dict):
            wrong.add(index, "tool_calls[]", call, "an object")
            call = {}
        name, call_id = call.get("function_name"), call.get("tool_call_id")
        if name is not None and not isinstance(name, str):
            wrong.add(index, "tool_calls[].function_name", name, "a string")
            name = None
        if call_id is not None and not isinstance(call_id, str):
            wrong.add(index, "tool_calls[].tool_call_id", call_id, "a string")
            call_id = None
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
                # harbor renders a missing `arguments` as {} (tool_call.get("arguments", {})).
                "arguments": _ARGUMENTS.encode(call.get("arguments", {})),
            }
        )
    return rows
