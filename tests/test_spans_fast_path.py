"""The fast reading of rollout details (raw token text, only new tokens parsed) gives exactly the
rows of the fully checked reading (every token decoded and compared), for every shape: prefix
extensions, breaks, empty turns, compact or indented JSON, and every malformed case."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from conftest import ingested_rows
from harbor_shapes import write_job, write_sink, write_trial
from hypothesis import given, settings
from hypothesis import strategies as st

from wmo_lake.ingest import ingest
from wmo_lake.jsonfile import decode
from wmo_lake.lake import connect
from wmo_lake.pending import PendingRows
from wmo_lake.tables import spans
from wmo_lake.tables.fields import ProblemLog
from wmo_lake.tables.trial_result import CutDetail, RawDetail, decode_trial_result

PATH = Path("result.json")


def _read(doc: dict, indent: int | None) -> tuple[spans.Spans, list, spans.Spans, list]:
    data = json.dumps(doc, indent=indent).encode()
    fast_doc = decode_trial_result(data, PATH)
    slow_doc = decode(data, PATH)  # the generic decode: plain lists, every token checked
    results = []
    for parsed in (fast_doc, slow_doc):
        problems = ProblemLog("k", "b")
        agent_result = parsed["agent_result"]
        found = spans.from_rollout_details(agent_result, None, PATH, problems)
        results += [found, problems.rows]
    return results[0], results[1], results[2], results[3]


def _rows(found: spans.Spans) -> list:
    return spans.table(found, "k", "b", "t").to_pylist()


def _chat(rng: random.Random, n_turns: int, break_at: set[int], empty_at: set[int]) -> list:
    turns, context = [], [rng.randrange(100_000) for _ in range(rng.randrange(0, 6))]
    for index in range(n_turns):
        if index in break_at:  # a prompt that does not extend the last one
            cut = rng.randrange(0, len(context) + 1)
            context = context[:cut] + [rng.randrange(100_000) for _ in range(rng.randrange(0, 4))]
        sampled = (
            []
            if index in empty_at
            else [rng.randrange(100_000) for _ in range(rng.randrange(1, 5))]
        )
        turns.append((list(context), sampled, [-rng.random() for _ in sampled]))
        context = context + sampled + [rng.randrange(100_000) for _ in range(rng.randrange(0, 4))]
    return turns


def _doc(turns: list, extra_segment: bool = False) -> dict:
    detail = {
        "prompt_token_ids": [t[0] for t in turns],
        "completion_token_ids": [t[1] for t in turns],
        "logprobs": [t[2] for t in turns],
        "extra": {"routed_experts": [[1, 2]] * len(turns)},
    }
    details = [detail, {"prompt_token_ids": "subagent"}] if extra_segment else [detail]
    return {"id": "x", "trial_name": "t", "agent_result": {"rollout_details": details}}


@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    n_turns=st.integers(0, 8),
    breaks=st.sets(st.integers(1, 7), max_size=3),
    empties=st.sets(st.integers(0, 7), max_size=2),
    indent=st.sampled_from([None, 0, 2, 4]),
    extra_segment=st.booleans(),
)
def test_fast_equals_checked_on_random_chats(seed, n_turns, breaks, empties, indent, extra_segment):
    turns = _chat(random.Random(seed), n_turns, breaks, empties)
    fast, fast_problems, slow, slow_problems = _read(_doc(turns, extra_segment), indent)
    assert (fast.status, _rows(fast)) == (slow.status, _rows(slow))
    assert fast_problems == slow_problems == []
    # and both give the recorded prompts back
    rebuilt, previous = [], []
    for row in _rows(fast):
        prompt = previous[: row["prompt_prefix_len"]] + row["prompt_new_ids"]
        rebuilt.append(prompt)
        previous = prompt + row["sampled_token_ids"]
    assert rebuilt == [t[0] for t in turns]


def test_a_prefix_ending_inside_a_number_is_not_an_extension() -> None:
    # "12" is a textual prefix of "123": the fast path must not read it as a shared token.
    turns = [
        ([5, 12], [7], [-0.1]),
        ([5, 12, 7, 123], [8], [-0.2]),
        ([5, 12, 7, 1234], [9], [-0.3]),
    ]
    for indent in (None, 4):
        fast, _, slow, _ = _read(_doc(turns), indent)
        assert _rows(fast) == _rows(slow)
        assert [r["prompt_prefix_len"] for r in _rows(fast)] == [0, 3, 3]


@pytest.mark.parametrize(
    "detail",
    [
        {"prompt_token_ids": [[1, True]], "completion_token_ids": [[1]], "logprobs": [[0.0]]},
        {"prompt_token_ids": [[1, 2.0]], "completion_token_ids": [[1]], "logprobs": [[0.0]]},
        {
            "prompt_token_ids": [[1], [1, 1, "2"]],
            "completion_token_ids": [[1], [2]],
            "logprobs": [[0.0], [0.0]],
        },
        {
            "prompt_token_ids": [[1], [1, 1, [2]]],
            "completion_token_ids": [[1], [2]],
            "logprobs": [[0.0], [0.0]],
        },
        {"prompt_token_ids": ["1 2"], "completion_token_ids": [[1]], "logprobs": [[0.0]]},
        {"prompt_token_ids": [[1]], "completion_token_ids": [[1, None]], "logprobs": [[0.0, 0.0]]},
        {"prompt_token_ids": [[1], [1, 2]], "completion_token_ids": [[2]], "logprobs": [[0.0]]},
        {
            "prompt_token_ids": [[1], [1, 2, "x"]],
            "completion_token_ids": [[2]],
            "logprobs": [[0.0]],
        },
        {
            "prompt_token_ids": [[1], [1, 2]],
            "completion_token_ids": [[2], [3, 4]],
            "logprobs": [[0.0], [0.0]],
        },
        {
            "prompt_token_ids": [[1], [1, 2, 3.5]],
            "completion_token_ids": [[2], [3, 4]],
            "logprobs": [[0.0], [0.0]],
        },
        {"prompt_token_ids": [[1]], "completion_token_ids": [[2]], "logprobs": [[True]]},
        {"prompt_token_ids": [[1]], "completion_token_ids": [[2]]},
        {"prompt_token_ids": [[1]], "completion_token_ids": [[2**70]], "logprobs": [[0.0]]},
        {"prompt_token_ids": [], "completion_token_ids": [], "logprobs": []},
        {
            "prompt_token_ids": [[1], [1, 2, 3], [1, 2, 3, 4, 5]],
            "completion_token_ids": [[2], [4]],
            "logprobs": [[0.0]],
        },
    ],
    ids=[
        "bool",
        "float",
        "string-later",
        "nested-later",
        "string-turn",
        "null-sampled",
        "unaligned",
        "unaligned-and-malformed",
        "mismatch",
        "mismatch-and-malformed",
        "bool-logprob",
        "no-logprobs",
        "huge-id",
        "no-turns",
        "unaligned-3-2-1",
    ],
)
def test_fast_equals_checked_on_malformed_details(detail: dict) -> None:
    doc = {"id": "x", "trial_name": "t", "agent_result": {"rollout_details": [detail]}}
    for indent in (None, 4):
        fast, fast_problems, slow, slow_problems = _read(doc, indent)
        assert fast.status == slow.status
        assert fast_problems == slow_problems  # whole rows: kind, path and message
        if detail["prompt_token_ids"] and not fast_problems:
            with pytest.raises((OverflowError, ValueError)):  # huge-id: caught by extract
                _rows(fast)


def test_the_fast_path_is_taken_for_harbor_shaped_details() -> None:
    doc = _doc([([1, 2], [3], [-0.5]), ([1, 2, 3, 4], [5], [-0.25])])
    parsed = decode_trial_result(json.dumps(doc, indent=4).encode(), PATH)
    assert isinstance(parsed["agent_result"]["rollout_details"][0], CutDetail)


def test_prompts_that_are_not_all_ints_keep_every_turn_as_raw_text() -> None:
    doc = _doc([([1, 2], [3], [-0.5]), ([1, 2, 3, True], [5], [-0.25])])
    parsed = decode_trial_result(json.dumps(doc, indent=4).encode(), PATH)
    assert isinstance(parsed["agent_result"]["rollout_details"][0], RawDetail)


def _pending_table(found: spans.Spans) -> list:
    rows = spans.rows(found, "k", "b", "t")
    assert isinstance(rows, PendingRows)  # small: built into Arrow later, many trials at once
    return rows.to_table(spans.SCHEMA).to_pylist()


def test_small_trials_rows_wait_for_arrow_and_equal_the_arrow_table() -> None:
    turns = _chat(random.Random(7), 4, break_at={2}, empty_at={3})
    found, _, _, _ = _read(_doc(turns), indent=None)
    assert found.status == spans.OK
    assert _pending_table(found) == _rows(found)
    empty = spans.Spans(spans.ABSENT, [])
    assert _pending_table(empty) == _rows(empty) == []


def test_big_trials_rows_are_arrow_at_once() -> None:
    turn = spans.StoredTurn(2000, 0, list(range(2000)), [1], [-0.5])
    found = spans.Spans(spans.OK, [turn], "rollout_details")
    rows = spans.rows(found, "k", "b", "t")
    assert not isinstance(rows, PendingRows)
    assert rows.to_pylist() == _rows(found)


@pytest.mark.parametrize("token", [2**63, -(2**63) - 1])
def test_small_trials_rows_refuse_token_ids_past_int64_like_arrow(token: int) -> None:
    turn = spans.StoredTurn(2, 0, [5, token], [1], [-0.5])
    found = spans.Spans(spans.OK, [turn], "rollout_details")
    with pytest.raises(OverflowError):
        spans.table(found, "k", "b", "t")
    with pytest.raises(OverflowError):
        spans.rows(found, "k", "b", "t")


# `spans.prompt_prefix_len` is "the length of the prefix the prompt shares with the previous
# turn's prompt + sampled tokens" (README, spans columns), evaluated on the spans upstream reads
# (seed 000 `load_trial_rollout_spans`: the recorded per-turn lists verbatim). A prompt SHORTER
# than the previous prompt + sampled tokens and wholly a prefix of them (a context cut back to an
# earlier point) shares all of itself: [1, 2] after [1, 2, 3] + [4] shares 2, not 1; [1, 2, 3, 4]
# after [1, 2] + [9] shares 2 (a longer prompt that diverges). The full prompt given back
# (`spans_full`) is the recorded one either way. Kills spans.py `_shared_prefix`'s binary search
# with its upper bound one short (`high = limit - 1`), which only this column shows.
TURNS = [
    ([1, 2, 3], [4], [-0.1]),
    ([1, 2], [9], [-0.2]),  # shorter, a prefix of [1, 2, 3, 4]: shares 2
    ([1, 2, 3, 4], [5], [-0.3]),  # vs [1, 2, 9]: shares 2
]
# README's definition on upstream's spans: commonprefix(prompt, previous prompt + sampled)
EXPECTED_PREFIX = [0, 2, 2]


@pytest.mark.parametrize("source", ["rollout_details", "sink"])
def test_prefix_len_of_a_prompt_that_is_a_prefix(tmp_path: Path, source: str) -> None:
    if source == "sink":
        sinks = tmp_path / "sinks"
        job = write_job(tmp_path / "runs/exp/harbor/step-0000/job", token_sink_dir=str(sinks))
        write_trial(job, "hello__1", reward=1.0)
        write_sink(sinks, "hello__1", TURNS)
    else:
        job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
        write_trial(job, "hello__1", reward=1.0, turns=TURNS)
    stored, full = ingested_rows(
        tmp_path,
        "SELECT prompt_prefix_len FROM spans ORDER BY call_index",
        "SELECT prompt_token_ids FROM spans_full ORDER BY call_index",
    )
    assert [p for (p,) in stored] == EXPECTED_PREFIX
    assert [list(p) for (p,) in full] == [t[0] for t in TURNS]


# Prompts read on the raw-text path of `tables/spans.py` (`_from_raw_detail`, taken when the
# first "prompt_token_ids" in result.json is not the first segment's: here agent metadata that
# holds one, written before the segment) come back exactly as recorded. Upstream (seed 000,
# `load_trial_rollout_spans`) returns rollout_details[0]'s per-turn lists verbatim, so the
# expected prompts are the lists written (checked by running the seed on these files:
# [[5, 12], [5, 12, 71]] and [[5, 12], [5, 12, 345]]). A prompt whose text starts with the
# previous prompt's and sampled tokens' text but whose next token only begins with the last
# sampled id ("7" then "71") is no extension. Kills spans.py `_extend` without its token-boundary
# check (`if at < end and text[at] != ord(",")`).
CASES = {
    "cut-inside-number": (
        [([5, 12], [7], [-0.1]), ([5, 12, 71], [8], [-0.2])],
        [[5, 12], [5, 12, 71]],
    ),
    "longer-number": (
        [([5, 12], [34], [-0.1]), ([5, 12, 345], [8], [-0.2])],
        [[5, 12], [5, 12, 345]],
    ),
}


def _with_metadata_prompts_first(trial: Path, indent: int | None) -> None:
    path = trial / "result.json"
    result = json.loads(path.read_text())
    nested = {"rollout_details": [{"prompt_token_ids": [[9, 9]]}], "n_episodes": 2}
    result["agent_result"] = {"metadata": nested} | result["agent_result"]
    result["agent_result"]["metadata"] = nested
    path.write_text(json.dumps(result, indent=indent))
    # the raw-text path is the one read
    parsed = decode_trial_result(path.read_bytes(), path)
    assert isinstance(parsed["agent_result"]["rollout_details"][0], RawDetail)


@pytest.mark.parametrize("indent", [None, 4])
@pytest.mark.parametrize("case", sorted(CASES))
def test_raw_text_prompts_come_back_exactly(tmp_path: Path, case: str, indent: int | None) -> None:
    turns, upstream_prompts = CASES[case]
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job", max_turns=5)
    trial = write_trial(job, "hello__1", reward=1.0, turns=turns)
    _with_metadata_prompts_first(trial, indent)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    try:
        prompts = [
            list(p)
            for (p,) in con.sql(
                "SELECT prompt_token_ids FROM spans_full ORDER BY call_index"
            ).fetchall()
        ]
        ((spans,),) = con.sql("SELECT spans FROM trial_records_with_spans").fetchall()
        ((datums,),) = con.sql("SELECT count(*) FROM datums").fetchall()
    finally:
        con.close()
    assert prompts == upstream_prompts
    assert [list(s["prompt_token_ids"]) for s in spans] == upstream_prompts
    # upstream's prefix merge (data.py _merge_trial_spans): [5, 12, 7] is no prefix of the second
    # prompt, so two datums (a fragment)
    assert datums == 2
