"""The `spans_full` view (issue 14, item 4): full prompts given back from prefix-compressed
storage without a recursive query, so a prompt is rebuilt the same way at any turn count and
across any pattern of prefix breaks. Expected prompts are the ones written into result.json."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from harbor_shapes import write_job, write_trial

from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

Turn = tuple[list[int], list[int], list[float]]


def broken_turns(rng: random.Random, n_turns: int) -> list[Turn]:
    """Turns whose prompts mostly extend the accumulated tokens, sometimes keep only part of
    them (any length, 0 and all included), sometimes start over; some turns sample nothing."""
    turns: list[Turn] = []
    accumulated: list[int] = []
    for _ in range(n_turns):
        roll = rng.random()
        if not turns or roll < 0.55:
            kept = len(accumulated)
        elif roll < 0.9:
            kept = rng.randint(0, len(accumulated))
        else:
            kept = 0
        prompt = accumulated[:kept] + [rng.randint(0, 50) for _ in range(rng.randint(0, 4))]
        sampled = [rng.randint(0, 50) for _ in range(rng.choice([0, 1, 2, 3]))]
        turns.append((prompt, sampled, [-rng.random() for _ in sampled]))
        accumulated = prompt + sampled
    return turns


def prompts_by_trial(lake: Path, view: str = "spans_full") -> dict[str, list[list[int]]]:
    rows = (
        connect(lake)
        .sql(f"SELECT trial_name, call_index, prompt_token_ids FROM {view} ORDER BY 1, 2")
        .fetchall()
    )
    prompts: dict[str, list[list[int]]] = {}
    for trial_name, call_index, prompt in rows:
        assert call_index == len(prompts.setdefault(trial_name, []))
        prompts[trial_name].append(prompt)
    return prompts


@pytest.mark.parametrize("seed", [1, 2, 5])
def test_prompts_come_back_exactly_across_prefix_breaks(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    runs = tmp_path / "runs"
    job = write_job(runs / "job")
    written = {f"t{i}": broken_turns(rng, rng.randint(1, 25)) for i in range(12)}
    for name, turns in written.items():
        write_trial(job, name, turns=turns)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)

    expected = {name: [prompt for prompt, _, _ in turns] for name, turns in written.items()}
    assert prompts_by_trial(lake) == expected
    # the trees break prefixes in every way the rebuild has to handle
    breaks = (
        connect(lake)
        .execute(
            "SELECT count(*) FILTER (WHERE sequence_index > 0), "
            "count(*) FILTER (WHERE sequence_index > 0 AND prompt_prefix_len > 0) "
            "FROM datum_spans WHERE NOT extends_previous"
        )
        .fetchone()
    )
    assert breaks is not None and breaks[0] > 5 and breaks[1] > 3
    records = connect(lake).sql("SELECT trial_name, spans FROM trial_records_with_spans").fetchall()
    for trial_name, spans in records:
        assert [s["call_index"] for s in spans] == list(range(len(expected[trial_name])))
        assert [s["prompt_token_ids"] for s in spans] == expected[trial_name]


def test_a_break_keeps_tokens_written_by_several_earlier_sequences(tmp_path: Path) -> None:
    # sequence 0 writes [1 2 | 3], sequence 1 keeps [1 2] and writes [4 | 5], sequence 2 keeps
    # [1] only, sequence 3 keeps [1 7 8 | 9 10] of sequence 2's tokens: bases from two sources
    turns: list[Turn] = [
        ([1, 2], [3], [-0.1]),
        ([1, 2, 4], [5], [-0.2]),
        ([1, 7, 8], [9, 10], [-0.3, -0.4]),
        ([1, 7, 8, 9, 11], [], []),
        ([1, 7, 8, 9, 11, 12], [13], [-0.5]),
    ]
    runs = tmp_path / "runs"
    write_trial(write_job(runs / "job"), "t", turns=turns)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    assert prompts_by_trial(lake)["t"] == [prompt for prompt, _, _ in turns]


def test_more_turns_than_a_recursion_limit(tmp_path: Path) -> None:
    # Spark stops recursive queries at 100 levels: a 150-turn episode must still rebuild
    turns: list[Turn] = []
    accumulated: list[int] = []
    for turn in range(150):
        prompt = [*accumulated, 1000 + turn]
        sampled = [turn]
        turns.append((prompt, sampled, [-0.5]))
        accumulated = prompt + sampled
    runs = tmp_path / "runs"
    write_trial(write_job(runs / "job"), "long", turns=turns)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    prompts = prompts_by_trial(lake)["long"]
    assert len(prompts) == 150
    assert prompts == [prompt for prompt, _, _ in turns]
