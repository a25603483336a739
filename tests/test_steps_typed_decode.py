"""The typed reading of ATIF trajectories (wmo_lake/tables/atif.py: msgspec Structs of just the
fields the tables use; steps.add_steps: one list per column) gives exactly the rows and problems
of the plain reading (tests/atif_reference.py: every file decoded into dicts, a dict per row), for
every shape of document: well-formed, wrong-typed fields, non-object steps and calls, unknown
fields, values msgspec cannot decode (NaN, 1e400), duplicate and escaped keys."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from atif_reference import declared_complete as plain_declared_complete
from atif_reference import read_document
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wmo_lake.jsonfile import ReadFailure
from wmo_lake.jsonfile import decode as decode_plain
from wmo_lake.tables import atif, trajectories
from wmo_lake.tables.fields import ProblemLog
from wmo_lake.tables.steps import CALL_COLUMNS, STEP_COLUMNS, FileLabel
from wmo_lake.tables.stop_reasons import declared_complete
from wmo_lake.tables.trajectories import FILE_COLUMNS

PATH = Path("agent/trajectory.json")
IDENTITY = {"trial_key": "k", "batch": "b", "trial_name": "t"}


def _typed(data: bytes) -> tuple[dict[str, dict[str, list[Any]]], list[dict[str, Any]], bool]:
    doc = atif.decode(data, PATH)
    assert not isinstance(doc, ReadFailure)
    found = trajectories.Found()
    problems = ProblemLog("k", "b", "t")
    trajectories.add_file(found, PATH, found.label("trajectory.json", "main"), doc, 7, problems)
    tables = {name: rows.columns for name, rows in found.tables(IDENTITY).items()}
    return tables, problems.rows, declared_complete(doc)


def _plain(data: bytes) -> tuple[dict[str, dict[str, list[Any]]], list[dict[str, Any]], bool]:
    doc = decode_plain(data, PATH)
    assert not isinstance(doc, ReadFailure)
    rows: dict[str, list[dict[str, Any]]] = {"trajectories": [], "steps": [], "tool_calls": []}
    problems = ProblemLog("k", "b", "t")
    read_document(doc, PATH, FileLabel("trajectory.json", 0, "main"), problems, rows)
    rows["trajectories"] = [dict.fromkeys(FILE_COLUMNS) | row for row in rows["trajectories"]]
    rows["trajectories"][0]["bytes"] = 7  # (the file's size: what the caller passes)
    names = {"trajectories": FILE_COLUMNS, "steps": STEP_COLUMNS, "tool_calls": CALL_COLUMNS}
    tables = {
        table: {
            **{key: [IDENTITY[key]] * len(table_rows) for key in IDENTITY},
            **{name: [row[name] for row in table_rows] for name in names[table]},
        }
        for table, table_rows in rows.items()
    }
    return tables, problems.rows, plain_declared_complete(doc)


def _nan_as_text(value: Any) -> Any:
    """`value` with each NaN a string: two NaNs are equal as what was read, not as numbers."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {key: _nan_as_text(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_nan_as_text(item) for item in value]
    return value


def _same(data: bytes) -> None:
    typed, plain = _typed(data), _plain(data)
    assert _nan_as_text(typed[0]) == _nan_as_text(plain[0])
    assert typed[1] == plain[1]  # the same problems, in the same order
    assert typed[2] == plain[2]


# JSON values of every type, NaN and infinities (which msgspec refuses) and big ints included.
LEAF = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["agent", "user", "system", "mark_task_complete", ""])
)
VALUE = st.recursive(
    LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
TEXT = st.text(max_size=12)
PART = (
    st.fixed_dictionaries({"type": st.just("text"), "text": TEXT})
    | st.fixed_dictionaries(
        {"type": st.sampled_from(["image", "audio"])},
        optional={"source": st.fixed_dictionaries({}, optional={"path": TEXT, "media_type": TEXT})},
    )
    | VALUE
)
CONTENT = TEXT | st.lists(PART, max_size=3) | VALUE
RESULT = st.fixed_dictionaries({}, optional={"content": CONTENT, "source_call_id": TEXT}) | VALUE
CALL = (
    st.fixed_dictionaries(
        {},
        optional={
            "tool_call_id": TEXT | VALUE,
            "function_name": st.sampled_from(["bash", "mark_task_complete"]) | VALUE,
            "arguments": st.dictionaries(TEXT, VALUE, max_size=3) | VALUE,
        },
    )
    | VALUE
)
INT = st.integers(-(2**64), 2**64) | VALUE
METRICS = (
    st.fixed_dictionaries(
        {},
        optional={
            "prompt_tokens": INT,
            "completion_tokens": INT,
            "cached_tokens": INT,
            "cost_usd": st.floats() | VALUE,
            "prompt_token_ids": st.lists(st.integers(0, 10**6), max_size=5),
            "logprobs": st.lists(st.floats(max_value=0), max_size=5),
        },
    )
    | VALUE
)
STEP = (
    st.fixed_dictionaries(
        {},
        optional={
            "step_id": INT,
            "source": st.sampled_from(["agent", "user", "system", "robot"]) | VALUE,
            "timestamp": st.sampled_from(
                ["2026-11-29T19:20:34Z", "2026-11-29T19:20:36.500000+00:00", "yesterday", ""]
            )
            | VALUE,
            "model_name": TEXT | VALUE,
            "message": CONTENT,
            "reasoning_content": TEXT | VALUE,
            "tool_calls": st.lists(CALL, max_size=3) | VALUE,
            "observation": st.fixed_dictionaries({"results": st.lists(RESULT, max_size=3) | VALUE})
            | VALUE,
            "metrics": METRICS,
            "llm_call_count": INT,
            "is_copied_context": st.booleans() | VALUE,
            "extra": VALUE,
        },
    )
    | VALUE
)
TOP = {
    "schema_version": TEXT | VALUE,
    "session_id": TEXT | VALUE,
    "agent": st.fixed_dictionaries(
        {},
        optional={
            "name": TEXT | VALUE,
            "version": TEXT | VALUE,
            "model_name": TEXT | VALUE,
            "tool_definitions": VALUE,
        },
    )
    | VALUE,
    "final_metrics": st.fixed_dictionaries(
        {}, optional={"total_prompt_tokens": INT, "total_cost_usd": st.floats() | VALUE}
    )
    | VALUE,
    "continued_trajectory_ref": TEXT | VALUE,
    "trajectory_id": TEXT | VALUE,
}
SUBAGENT = st.fixed_dictionaries({"steps": st.lists(STEP, max_size=3) | VALUE}, optional=TOP)
DOCUMENT = (
    st.fixed_dictionaries(
        {"steps": st.lists(STEP, max_size=5)},
        optional={**TOP, "subagent_trajectories": st.lists(SUBAGENT | VALUE, max_size=2) | VALUE},
    )
    | st.fixed_dictionaries({"steps": VALUE}, optional=TOP)
    | VALUE
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=DOCUMENT, indent=st.sampled_from([None, 2]), ascii=st.booleans())
def test_the_typed_reading_gives_the_plain_rows(doc: Any, indent: int | None, ascii: bool) -> None:
    _same(json.dumps(doc, indent=indent, ensure_ascii=ascii).encode())


@pytest.mark.parametrize(
    "text",
    [
        # a repeated key: the last one counts, in both readings
        '{"steps": [{"source": "user", "source": "agent", "tool_calls": [{"function_name": 1,'
        ' "function_name": "mark_task_complete"}]}]}',
        '{"steps": 3, "steps": [{"metrics": {"prompt_tokens": "1", "prompt_tokens": 2}}]}',
        # escaped keys are their text
        '{"st\\u0065ps": [{"sourc\\u0065": "agent", "tool_c\\u0061lls": [{}]}]}',
        # what msgspec does not decode: NaN, Infinity, 1e400
        '{"steps": [{"metrics": {"cost_usd": NaN, "prompt_tokens": 1e400}}]}',
        '{"steps": [{"observation": {"results": [{"content": [Infinity, -Infinity]}]}}]}',
        '{"steps": [1e400, {"tool_calls": [{"arguments": {"x": NaN}}]}]}',
        # ints beyond 64 bits
        '{"steps": [{"step_id": 123456789012345678901234567890, "metrics": {"cached_tokens":'
        " -123456789012345678901234567890}}]}",
        # a result whose content is null still adds a line; one without content does not
        '{"steps": [{"observation": {"results": [{"content": null}, {}, {"content": "x"}]}}]}',
        '{"steps": [{"observation": {"results": [{"content": null}]}}]}',
        '{"steps": [{"observation": {"results": [{}]}}]}',
        # arguments: absent is {}, null is null
        '{"steps": [{"tool_calls": [{"arguments": null}, {}, {"arguments": {"é": [1, 2.5]}}]}]}',
        "[]",
        '"steps"',
        "{}",
    ],
)
def test_the_typed_reading_of_odd_documents(text: str) -> None:
    _same(text.encode())


def test_real_trajectories_read_the_same(fixtures_dir: Path) -> None:
    paths = sorted(fixtures_dir.rglob("trajectory*.json"))
    assert paths
    for path in paths:
        _same(path.read_bytes())


def test_token_ids_are_not_decoded() -> None:
    """The typed reading skips what the tables do not keep: a step's token ids and logprobs."""
    doc = atif.decode(
        b'{"steps": [{"metrics": {"prompt_token_ids": [1, 2], "logprobs": [0]}}]}', PATH
    )
    assert isinstance(doc, atif.Trajectory) and isinstance(doc.steps, list)
    step = doc.steps[0]
    assert isinstance(step, atif.Step) and isinstance(step.metrics, atif.Metrics)
    assert not hasattr(step.metrics, "prompt_token_ids")
