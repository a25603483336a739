"""Reading the first segment's prompts from their text (`tables/prompt_text.py`) takes exactly
the lists a JSON decoder reads, and nothing that is not JSON: whatever the bytes, result.json
decodes to the same spans, problems and fields as the generic decode, which checks everything."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES
from hypothesis import example, given, settings
from hypothesis import strategies as st

from wmo_lake.columns import result_fields
from wmo_lake.jsonfile import ReadFailure, decode
from wmo_lake.tables import spans
from wmo_lake.tables.fields import ProblemLog
from wmo_lake.tables.prompt_text import PromptTurn, cut_prompts
from wmo_lake.tables.trial_result import CutDetail, RawDetail, decode_trial_result

PATH = Path("result.json")


def _result(prompts: list, completions: list | None = None, **top: Any) -> dict:
    completions = [[7]] * len(prompts) if completions is None else completions
    detail = {
        "prompt_token_ids": prompts,
        "completion_token_ids": completions,
        "logprobs": [[-0.5] * len(c) for c in completions],
    }
    agent_result = {"n_input_tokens": 3, "rollout_details": [detail], "metadata": {"n_episodes": 2}}
    return {"id": "x", "trial_name": "t", "agent_result": agent_result} | top


def _text(doc: dict, indent: int | None = 4) -> bytes:
    return json.dumps(doc, indent=indent).encode()


def test_a_prompt_that_extends_the_last_one_is_read_as_its_new_ids() -> None:
    data = _text(_result([[1, 2], [1, 2, 7, 3], [1, 2, 7, 3, 7], [5]]))
    cut = cut_prompts(data)
    assert cut is not None
    assert cut.turns == [
        PromptTurn(False, [1, 2]),
        PromptTurn(True, [7, 3]),
        PromptTurn(True, [7]),
        PromptTurn(False, [5]),
    ]
    assert json.loads(data[cut.start : cut.end]) == [[1, 2], [1, 2, 7, 3], [1, 2, 7, 3, 7], [5]]


@pytest.mark.parametrize("indent", [None, 0, 4])
def test_empty_lists_and_repeated_prompts(indent: int | None) -> None:
    cut = cut_prompts(_text(_result([[], [], [4], [4], [4, 5]]), indent))
    assert cut is not None
    assert [(t.extends, t.ids) for t in cut.turns] == [
        (False, []),
        (False, []),
        (False, [4]),
        (True, []),
        (True, [5]),
    ]
    assert cut_prompts(_text(_result([]), indent)).turns == []  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "prompts_text",
    [
        b"[[1, 2,]]",  # a trailing comma
        b"[[1], [1,]]",  # a trailing comma after a prefix
        b"[[1], [1 2]]",  # no comma
        b"[[1],]",
        b"[[1] [2]]",
        b'[[1, "]"]]',  # a bracket in a string
        b"[[1, [2]]]",
        b"[[1, true]]",
        b"[[1], [1, 2.0]]",
        b"[[1],\x0c[2]]",  # whitespace JSON does not have
        b"[[1], [1\x0c, 2]]",
        b"[[1, 2], [1, 2",  # cut off
        b'"[[1]]"',
        b"[[01]]",
    ],
)
def test_text_that_is_not_a_json_list_of_int_lists_is_not_cut(prompts_text: bytes) -> None:
    data = b'{"agent_result": {"rollout_details": [{"prompt_token_ids": ' + prompts_text + b"}]}}"
    assert cut_prompts(data) is None


def test_no_prompts_key_or_one_that_is_not_a_key() -> None:
    assert cut_prompts(b'{"agent_result": {"rollout_details": []}}') is None
    assert cut_prompts(b'{"prompt_token_ids": [[1]], "rollout_details": null}') is None
    value = b'{"rollout_details": [{"note": "prompt_token_ids", "x": [[1]]}]}'
    assert cut_prompts(value) is None


def _fields(parsed: Any) -> Any:
    """What the tables read of a decoded result.json: its read fields, the rollout details as
    spans (status, rows, problems), and how many segments there are."""
    if not isinstance(parsed, dict):
        return parsed
    agent_result = parsed.get("agent_result")
    problems = ProblemLog("k", "b")
    found = spans.from_rollout_details(agent_result, parsed.get("step_results"), PATH, problems)
    try:
        rows = None if found is None else spans.table(found, "k", "b", "t").to_pylist()
    except (OverflowError, ValueError) as error:
        rows = type(error).__name__
    fields: dict[str, Any] = {
        key: parsed.get(key) for key in result_fields() if key != "agent_result"
    }
    if isinstance(agent_result, dict):
        details = agent_result.get("rollout_details")
        fields["agent_result"] = {
            key: agent_result.get(key) for key in result_fields()["agent_result"]
        } | {"rollout_details": len(details) if isinstance(details, list) else details}
    else:
        fields["agent_result"] = agent_result
    return fields, None if found is None else found.status, rows, problems.rows


def _same_as_generic(data: bytes) -> Any:
    fast = decode_trial_result(data, PATH)
    assert _fields(fast) == _fields(decode(data, PATH))
    return fast


def test_a_prompts_key_inside_another_field_first_is_left_alone() -> None:
    # The first "rollout_details" / "prompt_token_ids" in the file are in metadata (read whole):
    # the cut lands there, the marker does not come back at the first segment, and the file is
    # decoded whole, metadata intact.
    doc = _result([[1, 2], [1, 2, 7, 3]])
    nested = {"rollout_details": [{"prompt_token_ids": [[9, 9]]}], "n_episodes": 4}
    doc["agent_result"] = {"metadata": nested} | doc["agent_result"] | {"metadata": nested}
    parsed = _same_as_generic(_text(doc))
    assert not isinstance(parsed["agent_result"]["rollout_details"][0], CutDetail)
    assert parsed["agent_result"]["metadata"] == nested


def test_a_subagent_segment_after_the_first_is_read_as_raw_text() -> None:
    # Only the first segment (the main agent's chat) is cut; a subagent's comes after it, with
    # prompts of its own that the cut must not reach into.
    doc = _result([[1, 2], [1, 2, 7, 3]])
    subagent = {"prompt_token_ids": [[1, 2], [1, 2, 9]], "completion_token_ids": [[9], [4]]}
    doc["agent_result"]["rollout_details"].append(subagent | {"logprobs": [[-0.1], [-0.2]]})
    parsed = _same_as_generic(_text(doc))
    first, second = parsed["agent_result"]["rollout_details"]
    assert isinstance(first, CutDetail) and isinstance(second, RawDetail)
    assert [json.loads(bytes(raw)) for raw in second.prompt_token_ids] == [[1, 2], [1, 2, 9]]


def test_duplicate_prompt_keys_are_read_as_a_json_decoder_reads_them() -> None:
    data = _text(_result([[1, 2], [1, 2, 7, 3]])).replace(
        b'"prompt_token_ids"', b'"prompt_token_ids": [[5]], "prompt_token_ids"'
    )
    parsed = _same_as_generic(data)
    assert not isinstance(parsed["agent_result"]["rollout_details"][0], CutDetail)


@pytest.mark.parametrize(
    "change",
    [
        ("[\n                    [", "[\n                    [,"),
        ("7,\n", "7,,\n"),
        ("3\n", "3,\n"),
        ("3\n", "3 ]\n"),
    ],
)
def test_invalid_prompt_text_is_the_same_failure_as_the_generic_decode(change) -> None:
    data = _text(_result([[1, 2], [1, 2, 7, 3]])).replace(*(c.encode() for c in change), 1)
    parsed = _same_as_generic(data)
    assert isinstance(parsed, ReadFailure) and parsed.kind == "invalid_json"


HARBOR_RESULTS = sorted(
    path
    for path in (FIXTURES / "harbor").glob("*/*/result.json")
    if b'"prompt_token_ids"' in path.read_bytes()
)


@pytest.mark.parametrize(
    "path", HARBOR_RESULTS, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}"
)
def test_real_harbor_results_take_the_cut_and_read_as_the_generic_decode(path: Path) -> None:
    parsed = _same_as_generic(path.read_bytes())
    assert isinstance(parsed["agent_result"]["rollout_details"][0], CutDetail)


def test_there_are_real_harbor_results_with_prompts() -> None:
    assert len(HARBOR_RESULTS) >= 5  # the kit's and the offline terminus-2 run's


def _chat(rng: random.Random) -> list:
    prompts, context = [], [rng.randrange(1000) for _ in range(rng.randrange(0, 4))]
    for _ in range(rng.randrange(0, 5)):
        prompts.append(list(context))
        if rng.random() < 0.2:
            context = context[: rng.randrange(0, len(context) + 1)]
        context = context + [7] + [rng.randrange(1000) for _ in range(rng.randrange(0, 3))]
    return prompts


MUTATIONS = b'[]{},:0123456789 \n\t\x0c"-.e'


@settings(max_examples=400, deadline=None)
# (found by it: a `1e537` the edits spelled among the ids, which msgspec refused to decode)
@example(seed=447, indent=None, edits=[(0.0703125, "replace", 23), (0.0703125, "insert", 7)])
@given(
    seed=st.integers(0, 2**32),
    indent=st.sampled_from([None, 4]),
    edits=st.lists(
        st.tuples(
            st.floats(0, 1),
            st.sampled_from(["replace", "insert", "delete"]),
            st.integers(0, len(MUTATIONS) - 1),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_any_edit_of_the_prompts_text_reads_as_the_generic_decode_reads_it(
    seed: int, indent: int | None, edits: list
) -> None:
    data = bytearray(_text(_result(_chat(random.Random(seed))), indent))
    cut = cut_prompts(bytes(data))
    assert cut is not None
    for where, kind, byte in edits:  # edits in and around the prompts' text
        at = int(cut.start - 3 + where * (cut.end - cut.start + 6))
        at = max(0, min(at, len(data) - 1))
        if kind == "replace":
            data[at] = MUTATIONS[byte]
        elif kind == "insert":
            data[at:at] = MUTATIONS[byte : byte + 1]
        else:
            del data[at]
    _same_as_generic(bytes(data))


@pytest.mark.parametrize("first", [True, False])
@pytest.mark.parametrize("key", ["task_name", "config"])  # read, and skipped by msgspec
def test_bytes_outside_the_prompts_are_still_checked_for_utf8(first: bool, key: str) -> None:
    # The prompts are not scanned for non-ASCII bytes (they are ints by construction): a bad
    # byte before or after them is the same `not_utf8` failure, and a good one the same text.
    # (msgspec does not check the bytes of a field it skips, such as the trial's config.)
    prompts = [[1, 2], [1, 2, 7, 3]]
    for text, bad in (("caf\u00e9", False), ("BAD", True)):
        doc = _result(prompts, **{key: text})
        if first:
            doc = {key: text} | doc
        data = _text(doc).replace(b'"BAD"', b'"\xff\xfe"')
        parsed = _same_as_generic(data)
        if bad:
            assert isinstance(parsed, ReadFailure) and parsed.kind == "not_utf8"
        else:
            assert parsed.get("task_name") == (text if key == "task_name" else None)
            assert isinstance(parsed["agent_result"]["rollout_details"][0], CutDetail)
