"""`tool_calls`: one row per tool call of an ATIF step (`steps.n_tool_calls` counts them).

`arguments` is the call's arguments as JSON text, rendered exactly as harbor's trace export
renders them inside `<tool_call>` blocks (`json.dumps(arguments, ensure_ascii=False)`, keys in
recorded order), so the conversation view can rebuild harbor's assistant turns byte for byte.
The rows are built with their step's (`steps.add_steps`), in one pass over a file's steps.
"""

from __future__ import annotations

from wmo_lake.columns import SPECS, arrow_schema

SCHEMA = arrow_schema(SPECS["tool_calls"])
