"""The `datums` and `datum_stats` views (issue 4, items 1, 2 and 5), on small lakes built in
tmp_path. Expected values come from hand-worked examples and from `oracle_episode`, a plain-Python
transcription of tinker-cookbook's `trajectory_to_data` prefix merge plus the issue's drop and
advantage rules, which reads full prompts (never the lake's prefix-compressed storage)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from harbor_shapes import add_agent, write_job, write_sink, write_trial
from spec import DATUM_COLUMNS

from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

Turn = tuple[list[int], list[int], list[float]]

# The issue's hand-worked example: one merge, then a prefix break.
ISSUE_TURNS: list[Turn] = [
    ([1, 2, 3], [10, 11], [-0.1, -0.2]),
    ([1, 2, 3, 10, 11, 4, 5], [12], [-0.3]),
    ([7, 8], [13, 14], [-0.4, -0.5]),
]


def make_lake(tmp_path: Path, build: Any) -> Path:
    """`build(runs_dir)` writes job/trial dirs; returns the ingested lake."""
    runs = tmp_path / "runs"
    build(runs)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    return lake


def datum_rows(lake: Path, settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    con = connect(lake, settings)
    relation = con.sql("SELECT * FROM datums ORDER BY batch, trial_name, fragment_index")
    return [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]


def stats_rows(lake: Path, settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    con = connect(lake, settings)
    relation = con.sql("SELECT * FROM datum_stats ORDER BY batch")
    return [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]


# --- hand-worked examples ------------------------------------------------------------------------


def test_advantages_are_centred_over_a_tasks_trials_across_agents(tmp_path: Path) -> None:
    """A job of two agents, two attempts each at one task (harbor runs every task x attempt under
    each agent). Upstream's scorer groups the batch's trials by task alone: the mean of 1, 0, 1, 1
    is 0.75, so 0.25, -0.75, 0.25, 0.25, and attempts 1..4 by trial_name."""

    def build(runs: Path) -> None:
        job = write_job(runs / "r/harbor/step-0000/job", max_turns=5)
        second = add_agent(job, "openai/gpt-4o-mini")
        turns = ISSUE_TURNS[:1]
        write_trial(job, "hello__a1", task_name="hello", reward=1.0, turns=turns)
        write_trial(job, "hello__a2", task_name="hello", reward=0.0, turns=turns)
        write_trial(job, "hello__b1", task_name="hello", reward=1.0, turns=turns, agent=second)
        write_trial(job, "hello__b2", task_name="hello", reward=1.0, turns=turns, agent=second)

    rows = datum_rows(make_lake(tmp_path, build))
    assert [(r["trial_name"], r["attempt"], r["advantage"]) for r in rows] == [
        ("hello__a1", 1, 0.25),
        ("hello__a2", 2, -0.75),
        ("hello__b1", 3, 0.25),
        ("hello__b2", 4, 0.25),
    ]


def test_issue_example_merges_then_breaks(tmp_path: Path) -> None:
    def build(runs: Path) -> None:
        job = write_job(runs / "r/harbor/step-0002/job")
        write_trial(job, "t1", task_name="a", reward=1.0, turns=ISSUE_TURNS)

    rows = datum_rows(make_lake(tmp_path, build))
    assert [r["fragment_index"] for r in rows] == [0, 1]
    first, second = rows
    assert first["model_input_tokens"] == [1, 2, 3, 10, 11, 4, 5, 12]
    assert first["loss_mask"] == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert first["sampled_logprobs"] == [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3]
    assert (first["n_tokens"], first["loss_tokens"]) == (8, 3)
    assert second["model_input_tokens"] == [7, 8, 13, 14]
    assert second["loss_mask"] == [0.0, 0.0, 1.0, 1.0]
    assert second["sampled_logprobs"] == [0.0, 0.0, -0.4, -0.5]
    assert (second["n_tokens"], second["loss_tokens"]) == (4, 2)
    assert list(first) == DATUM_COLUMNS
    assert (first["batch"], first["run"], first["step"]) == ("r/harbor/step-0002/job", "r", 2)
    assert (first["task_id"], first["attempt"], first["trial_name"]) == ("a", 1, "t1")
    # the only trial of its task: advantage 0.0
    assert (first["reward"], first["passed"], first["infra_failed"]) == (1.0, True, False)
    assert first["advantage"] == 0.0


def test_partial_prefix_break_rebuilds_the_whole_prompt_and_skips_empty_sequences(
    tmp_path: Path,
) -> None:
    turns: list[Turn] = [
        ([1, 2], [3], [-0.1]),  # sequence 0: [1, 2, 3]
        ([1, 9], [], []),  # shares only [1]: a break; no sampled token yet
        ([1, 9, 4], [], []),  # extends [1, 9] (+[4]); still nothing sampled
        ([5, 6], [], []),  # break: this sequence [1, 9, 4] had no sampled token -> skipped
        ([5, 6, 7], [8], [-0.8]),  # extends [5, 6] (+[7]), samples [8]
        ([5, 6, 7, 8], [9], [-0.9]),  # exactly the accumulated tokens: an empty delta, merged
        ([5, 6, 7], [1], [-0.5]),  # a strict prefix of the accumulated tokens: a break
    ]

    def build(runs: Path) -> None:
        write_trial(write_job(runs / "job"), "t", task_name="a", reward=0.0, turns=turns)

    rows = datum_rows(make_lake(tmp_path, build))
    assert [r["fragment_index"] for r in rows] == [0, 1, 2]
    assert [r["model_input_tokens"] for r in rows] == [
        [1, 2, 3],
        [5, 6, 7, 8, 9],
        [5, 6, 7, 1],
    ]
    assert [r["loss_mask"] for r in rows] == [
        [0.0, 0.0, 1.0],
        [0.0, 0.0, 0.0, 1.0, 1.0],
        [0.0, 0.0, 0.0, 1.0],
    ]
    assert [r["sampled_logprobs"] for r in rows] == [
        [0.0, 0.0, -0.1],
        [0.0, 0.0, 0.0, -0.8, -0.9],
        [0.0, 0.0, 0.0, -0.5],
    ]
    (stats,) = stats_rows(tmp_path / "lake")
    assert stats["datums"] == 3
    assert stats["fragments"] == 2
    assert stats["fragmentation_rate"] == pytest.approx(2 / 3)
    assert (stats["loss_tokens"], stats["context_tokens"]) == (4, 8)  # 1+2+1; 2+3+3


def test_group_advantage_centres_on_the_batch_task_mean_with_infra_failures(
    tmp_path: Path,
) -> None:
    one: list[Turn] = [([1], [2], [-0.5])]

    def build(runs: Path) -> None:
        job = write_job(runs / "r/harbor/step-0001/job-1")
        write_trial(job, "a1", task_name="a", reward=1.0, turns=one)
        write_trial(job, "a2", task_name="a", reward=0.5, turns=one)
        # no measured reward: stand-in 0.0, infra_failed, still in the mean
        write_trial(job, "a3", task_name="a", verifier_result=None, turns=one)
        # no spans: no datum, but its reward is in the mean
        write_trial(job, "a4", task_name="a", reward=1, rollout_details=None)
        write_trial(job, "b1", task_name="b", reward=0.25, turns=one)
        other = write_job(runs / "r/harbor/step-0002/job-2")
        write_trial(other, "a1", task_name="a", reward=0.0, turns=one)
        write_trial(other, "a2", task_name="a", reward=1.0, turns=one)

    rows = datum_rows(make_lake(tmp_path, build))
    got = {(r["batch"].split("/")[2], r["trial_name"]): r for r in rows}
    mean_a = (1.0 + 0.5 + 0.0 + 1.0) / 4
    assert set(got) == {
        ("step-0001", "a1"),
        ("step-0001", "a2"),
        ("step-0001", "a3"),
        ("step-0001", "b1"),
        ("step-0002", "a1"),
        ("step-0002", "a2"),
    }
    assert got["step-0001", "a1"]["advantage"] == pytest.approx(1.0 - mean_a)
    assert got["step-0001", "a2"]["advantage"] == pytest.approx(0.5 - mean_a)
    a3 = got["step-0001", "a3"]
    assert (a3["reward"], a3["infra_failed"], a3["passed"]) == (0.0, True, False)
    assert a3["advantage"] == pytest.approx(0.0 - mean_a)
    assert got["step-0001", "b1"]["advantage"] == 0.0
    assert got["step-0002", "a1"]["advantage"] == pytest.approx(-0.5)
    assert got["step-0002", "a2"]["advantage"] == pytest.approx(0.5)
    assert [got["step-0001", n]["attempt"] for n in ("a1", "a2", "a3")] == [1, 2, 3]


def advantages_and_pythons(
    tmp_path: Path, groups: dict[str, list[float]]
) -> tuple[dict[str, float], dict[str, float]]:
    """One one-turn trial per reward (task -> its trials' rewards, one job): the view's advantage
    per trial, and reward - sum(rewards) / len(rewards) as Python computes it."""
    one: list[Turn] = [([1], [2], [-0.5])]

    def build(runs: Path) -> None:
        job = write_job(runs / "r/harbor/step-0001/job-1")
        for task, rewards in groups.items():
            for index, reward in enumerate(rewards):
                write_trial(job, f"{task}{index}", task_name=task, reward=reward, turns=one)

    got = {r["trial_name"]: r["advantage"] for r in datum_rows(make_lake(tmp_path, build))}
    expected = {
        f"{task}{index}": reward - sum(rewards) / len(rewards)
        for task, rewards in groups.items()
        for index, reward in enumerate(rewards)
    }
    return got, expected


def test_advantage_is_reward_minus_pythons_mean_to_the_last_bit(tmp_path: Path) -> None:
    """sum(rewards) / len(rewards) as Python >= 3.12 computes it (a compensated sum): 0.1 + 0.2
    + 0.3 is 0.6 there, 0.6000000000000001 to a left fold such as SQL's avg()."""
    got, expected = advantages_and_pythons(
        tmp_path, {"f": [0.1, 0.2, 0.3], "g": [0.7, 0.1, 0.1, 0.1, 0.3]}
    )
    assert got == expected
    assert got["f1"] == 0.2 - 0.6 / 3  # (+2.8e-17: a left fold's mean gives -2.8e-17)


def test_advantage_of_tiny_rewards_is_pythons_to_the_last_bit(tmp_path: Path) -> None:
    """Rewards far below 1 (9.4e-12 and 2.4e-15) have remainders below 2^-40 wider than a double:
    summed unscaled they are rounded before the total is, and the mean lands one bit off
    Python's sum(rewards) / len(rewards) (4.709167616491119e-12 instead of ...118e-12)."""
    got, expected = advantages_and_pythons(
        tmp_path,
        {
            "tiny": [9.420703536939998e-12, 2.3683039577615215e-15],
            "mixed": [9.311661184581528e-19, 3.0748508264780264e-12, 5e-324],
            # a group whose largest reward is subnormal: its scale, 2^1030, is past a double's
            # range (capped at 2^1000)
            "subnormal": [1e-310, 0.0, 5e-324],
            # largest rewards a bit below a power of two, where log2 rounds up to it (DuckDB's
            # log2(0.12499999999999999) is -3.0): scaled by half the power meant, one bit off
            "below-2^-3": [
                0.12499999999999999,
                0.07294059832730818,
                0.08881834635705267,
                8.884342052953525e-30,
            ],
            "below-2^-20": [9.536743164062499e-07, 1.427005053460002e-34, 9.246548377034858e-07],
        },
    )
    assert got == expected
    assert got["tiny0"] == 4.709167616491118e-12  # by hand: (9.4207...e-12 - 2.3683...e-15) / 2


def test_overflow_drops_whole_episodes_at_the_exact_budget(tmp_path: Path) -> None:
    def turns(total: int) -> list[Turn]:
        # two merged turns; the second span's prompt + sampled length is `total`
        return [([1, 2], [3], [-0.1]), ([1, 2, 3, *range(10, 10 + total - 4)], [4], [-0.2])]

    def build(runs: Path) -> None:
        # a pi-bridge job: its traces give the stop reason, its sinks the spans
        sinks = runs.parent / "tokens"
        job = write_job(runs / "limited", context_limit=12, token_sink_dir=str(sinks))
        for name, total in (("fits", 12), ("over", 13), ("ctx", 5)):
            write_sink(sinks, name, turns(total))
        write_trial(job, "fits", task_name="a", reward=1.0)
        write_trial(job, "over", task_name="a", reward=1.0)
        write_trial(
            job, "ctx", task_name="a", reward=1.0, trace={"stop_reason": "context_overflow"}
        )
        default = write_job(runs / "default")  # no context_limit recorded: 65536
        write_trial(default, "at", task_name="a", reward=1.0, turns=turns(65536))
        write_trial(default, "past", task_name="a", reward=1.0, turns=turns(65537))

    lake = make_lake(tmp_path, build)
    settings = {"wmo_max_datum_tokens": 10**6}
    kept = {(r["batch"], r["trial_name"]) for r in datum_rows(lake, settings)}
    assert kept == {("limited", "fits"), ("default", "at")}
    stats = {r["batch"]: r for r in stats_rows(lake, settings)}
    assert stats["limited"]["overflow_drops"] == 2
    assert stats["default"]["overflow_drops"] == 1
    assert stats["limited"]["overlong_drops"] == stats["default"]["overlong_drops"] == 0
    assert stats["limited"]["datums"] == stats["default"]["datums"] == 1

    # a query-time budget overrides every batch's recorded one
    settings["wmo_context_budget"] = 13
    kept = {(r["batch"], r["trial_name"]) for r in datum_rows(lake, settings)}
    assert kept == {("limited", "fits"), ("limited", "over")}
    stats = {r["batch"]: r for r in stats_rows(lake, settings)}
    assert stats["limited"]["overflow_drops"] == 1  # only the context_overflow stop reason
    assert stats["default"]["overflow_drops"] == 2


def test_a_pi_bridge_job_budgets_its_context_by_its_recorded_context_window(
    tmp_path: Path,
) -> None:
    """The pi bridge records the run's context budget only as the scorer's `context_window`
    kwarg (no llm_kwargs): that is the budget an episode overflows, as terminus-2's
    llm_kwargs.context_limit is; the one with both reads context_limit."""
    spans: dict[str, list[Turn]] = {
        "short": [([1] * 26, [2], [-0.1])],  # 27 tokens
        "long": [([1] * 46, [2], [-0.1])],  # 47 tokens
    }

    def build(runs: Path) -> None:
        sinks = runs.parent / "tokens"
        pi = write_job(runs / "pi", context_window=30, token_sink_dir=str(sinks))
        for name, turns in spans.items():
            write_sink(sinks, name, turns)
            write_trial(pi, name, task_name="a", reward=1.0)
        both = write_job(runs / "both", context_limit=50, context_window=30)
        for name, turns in spans.items():
            write_trial(both, name, task_name="a", reward=1.0, turns=turns)

    lake = make_lake(tmp_path, build)
    kept = {(r["batch"], r["trial_name"]) for r in datum_rows(lake)}
    assert kept == {("pi", "short"), ("both", "short"), ("both", "long")}
    stats = {row["batch"]: row["overflow_drops"] for row in stats_rows(lake)}
    assert stats == {"pi": 1, "both": 0}


def test_overlong_drops_whole_episodes_at_max_datum_tokens(tmp_path: Path) -> None:
    def build(runs: Path) -> None:
        job = write_job(runs / "job")
        # merged sequence of 6 tokens (3 + 1 + 1 + 1), each span well inside the budget
        six: list[Turn] = [([1, 2, 3], [4], [-0.1]), ([1, 2, 3, 4, 5], [6], [-0.2])]
        write_trial(job, "six", task_name="a", reward=1.0, turns=six)
        seven: list[Turn] = [*six, ([9, 9, 9, 9, 9, 9], [7], [-0.3])]  # a 7-token fragment
        write_trial(job, "seven", task_name="a", reward=1.0, turns=seven)
        # a 9-token sequence with no sampled token is skipped, so it is not overlong
        quiet: list[Turn] = [([1, 2], [3], [-0.1]), ([8] * 9, [], [])]
        write_trial(job, "quiet", task_name="a", reward=1.0, turns=quiet)

    lake = make_lake(tmp_path, build)
    for limit, kept_names, overlong in [
        (6, {"six", "quiet"}, 1),
        (7, {"six", "seven", "quiet"}, 0),
        (5, {"quiet"}, 2),
    ]:
        settings = {"wmo_max_datum_tokens": limit}
        assert {r["trial_name"] for r in datum_rows(lake, settings)} == kept_names
        (stats,) = stats_rows(lake, settings)
        assert stats["overlong_drops"] == overlong
        assert stats["overflow_drops"] == 0


def test_trials_without_spans_give_no_datums_but_an_overflow_is_a_drop(tmp_path: Path) -> None:
    def build(runs: Path) -> None:
        job = write_job(runs / "job")
        write_trial(job, "none", task_name="a", reward=1.0, rollout_details=None)
        write_trial(job, "empty", task_name="a", reward=1.0, rollout_details=[])
        write_trial(
            job,
            "unaligned",
            task_name="a",
            reward=1.0,
            rollout_details=[
                {"prompt_token_ids": [[1]], "completion_token_ids": [], "logprobs": []}
            ],
        )
        # pi-bridge (its trace is its stop reason): context_overflow, and no sink at all
        pi = write_job(runs / "pi", token_sink_dir=str(runs.parent / "tokens"))
        write_trial(
            pi, "overflowed", task_name="a", reward=1.0, trace={"stop_reason": "context_overflow"}
        )

    lake = make_lake(tmp_path, build)
    assert datum_rows(lake) == []
    stats = {row.pop("batch"): row for row in stats_rows(lake)}
    zeros = {
        "episodes": 0,
        "kept_episodes": 0,
        "datums": 0,
        "fragments": 0,
        "fragmentation_rate": 0.0,
        "overflow_drops": 0,
        "overlong_drops": 0,
        "loss_tokens": 0,
        "context_tokens": 0,
    }
    assert {k: stats["job"][k] for k in zeros} == zeros
    # data.py checks the stop reason before the spans: an overflow drop without any span
    assert {k: stats["pi"][k] for k in zeros} == {**zeros, "overflow_drops": 1}


def test_the_real_terminus2_sample_matches_the_oracle(tmp_path: Path, fixtures_dir: Path) -> None:
    """harbor's own rollout_details (fixtures/harbor/offline-terminus2), read back with `json`."""
    job = fixtures_dir / "harbor" / "offline-terminus2"
    result = json.loads((job / "hello-offline__haymH7n" / "result.json").read_text("utf-8"))
    detail = result["agent_result"]["rollout_details"][0]
    turns = list(
        zip(
            detail["prompt_token_ids"],
            detail["completion_token_ids"],
            detail["logprobs"],
            strict=True,
        )
    )
    expected = oracle_episode(turns)
    lake = tmp_path / "lake"
    ingest([job], lake, workers=1)
    rows = datum_rows(lake)
    assert len(rows) == len(expected) > 0
    for row, sequence in zip(rows, expected, strict=True):
        assert row["model_input_tokens"] == sequence.tokens
        assert row["loss_mask"] == sequence.mask
        assert row["sampled_logprobs"] == sequence.logprobs
    assert [r["fragment_index"] for r in rows] == list(range(len(expected)))


# --- seeded-random trees held against the oracle -------------------------------------------------


@dataclass
class Sequence:
    tokens: list[int] = field(default_factory=list)
    mask: list[float] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


def oracle_episode(turns: list[Turn]) -> list[Sequence]:
    """tinker-cookbook `trajectory_to_data`: accumulate while the observation has the accumulated
    tokens as a prefix, else close the sequence and start over with the whole observation."""
    sequences: list[Sequence] = []
    current: Sequence | None = None
    for prompt, sampled, logprobs in turns:
        if current is not None and prompt[: len(current.tokens)] == current.tokens:
            delta = prompt[len(current.tokens) :]
        else:
            if current is not None:
                sequences.append(current)
            current = Sequence()
            delta = prompt
        current.tokens += delta + sampled
        current.mask += [0.0] * len(delta) + [1.0] * len(sampled)
        current.logprobs += [0.0] * len(delta) + logprobs
    if current is not None:
        sequences.append(current)
    return [s for s in sequences if any(s.mask)]  # no sampled token: skipped


@dataclass
class TrialSpec:
    batch: str
    name: str
    task: str
    reward: float | None  # None: no measured reward (infra failure)
    turns: list[Turn] | None
    stop_reason: str | None


def random_turns(rng: random.Random) -> list[Turn]:
    turns: list[Turn] = []
    accumulated: list[int] = []
    for index in range(rng.randint(1, 6)):
        fresh = [rng.randint(1, 6) for _ in range(rng.randint(0, 4))]
        roll = rng.random()
        if index == 0 or roll < 0.2:
            prompt = fresh or [rng.randint(1, 6)]
        elif roll < 0.7:
            prompt = accumulated + fresh
        else:
            prompt = accumulated[: rng.randint(0, len(accumulated))] + fresh
        sampled = [rng.randint(1, 6) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        logprobs = [-round(rng.random(), 3) for _ in sampled]
        turns.append((prompt, sampled, logprobs))
        accumulated = prompt + sampled
    return turns


def random_specs(seed: int) -> list[TrialSpec]:
    rng = random.Random(seed)
    specs: list[TrialSpec] = []
    for batch in ("r/harbor/step-0001/job-1", "r/harbor/step-0002/job-2"):
        for index in range(12):
            specs.append(
                TrialSpec(
                    batch=batch,
                    name=f"trial-{index:02d}",
                    task=rng.choice(["t/a", "t/b", "t/c"]),
                    # (0.1, 0.2, 0.3: a left-to-right sum misses Python's in the last bit)
                    reward=rng.choice([0.0, 0.1, 0.2, 0.25, 0.3, 0.7, 1.0, 1.0, None]),
                    turns=None if rng.random() < 0.1 else random_turns(rng),
                    # a stop reason is a pi-bridge trace's: job-1 is the pi-bridge batch
                    stop_reason=rng.choice([None, None, None, "submitted", "context_overflow"])
                    if batch.endswith("job-1")
                    else None,
                )
            )
    return specs


def oracle_view(
    specs: list[TrialSpec], budget: int, max_datum_tokens: int
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    rewards: dict[tuple[str, str], list[float]] = {}
    for spec in specs:
        rewards.setdefault((spec.batch, spec.task), []).append(spec.reward or 0.0)
    rows: list[dict[str, Any]] = []
    stats: dict[str, dict[str, Any]] = {}
    for spec in specs:
        batch_stats = stats.setdefault(
            spec.batch,
            {
                "episodes": 0,
                "kept_episodes": 0,
                "overflow_drops": 0,
                "overlong_drops": 0,
                "datums": 0,
                "fragments": 0,
            },
        )
        if spec.stop_reason == "context_overflow":  # data.py: before looking at the spans
            batch_stats["episodes"] += bool(spec.turns)
            batch_stats["overflow_drops"] += 1
            continue
        if not spec.turns:
            continue
        batch_stats["episodes"] += 1
        sequences = oracle_episode(spec.turns)
        if any(len(p) + len(s) > budget for p, s, _ in spec.turns):
            batch_stats["overflow_drops"] += 1
            continue
        if any(len(s.tokens) > max_datum_tokens for s in sequences):
            batch_stats["overlong_drops"] += 1
            continue
        batch_stats["kept_episodes"] += 1
        peers = rewards[spec.batch, spec.task]
        attempt = sorted(s.name for s in specs if (s.batch, s.task) == (spec.batch, spec.task))
        for index, sequence in enumerate(sequences):
            batch_stats["datums"] += 1
            batch_stats["fragments"] += index > 0
            rows.append(
                {
                    "batch": spec.batch,
                    "task_id": spec.task.rsplit("/", 1)[-1],  # harbor's task_id.get_name()
                    "attempt": attempt.index(spec.name) + 1,
                    "trial_name": spec.name,
                    "fragment_index": index,
                    "model_input_tokens": sequence.tokens,
                    "loss_mask": sequence.mask,
                    "sampled_logprobs": sequence.logprobs,
                    "n_tokens": len(sequence.tokens),
                    "loss_tokens": int(sum(sequence.mask)),
                    "reward": spec.reward or 0.0,
                    "infra_failed": spec.reward is None,
                    "advantage": (spec.reward or 0.0) - sum(peers) / len(peers),
                }
            )
    return rows, stats


@pytest.mark.parametrize("seed", [3, 4, 11])
def test_random_trees_match_the_oracle(tmp_path: Path, seed: int) -> None:
    specs = random_specs(seed)
    budget, max_datum_tokens = 16, 12

    def build(runs: Path) -> None:
        sinks = runs.parent / "tokens"  # job-1 is a pi-bridge job (spans from sinks), job-2 not
        jobs = {
            s.batch: write_job(
                runs / s.batch,
                context_limit=budget,
                token_sink_dir=str(sinks) if s.batch.endswith("job-1") else None,
            )
            for s in specs
        }
        for spec in specs:
            pi_bridge = spec.batch.endswith("job-1")
            extra: dict[str, Any] = {}
            if spec.stop_reason is not None:
                extra["trace"] = {"stop_reason": spec.stop_reason}
            if pi_bridge and spec.turns:
                write_sink(sinks, spec.name, spec.turns)
            write_trial(
                jobs[spec.batch],
                spec.name,
                task_name=spec.task,
                **({"verifier_result": None} if spec.reward is None else {"reward": spec.reward}),
                **(
                    {"turns": spec.turns}
                    if spec.turns and not pi_bridge
                    else {"rollout_details": None}
                ),
                **extra,
            )

    lake = make_lake(tmp_path, build)
    expected_rows, expected_stats = oracle_view(specs, budget, max_datum_tokens)
    settings = {"wmo_max_datum_tokens": max_datum_tokens}
    got = datum_rows(lake, settings)
    keys = list(expected_rows[0]) if expected_rows else []
    assert [{k: r[k] for k in keys} for r in got] == expected_rows  # advantages to the last bit
    # the tree exercises every rule at least once
    assert any(r["fragment_index"] > 0 for r in expected_rows)
    assert sum(s["overflow_drops"] for s in expected_stats.values()) > 0
    assert sum(s["overlong_drops"] for s in expected_stats.values()) > 0
    for row in stats_rows(lake, settings):
        # datum_stats counts from lengths; it must count exactly the rows `datums` gives
        batch_rows = [r for r in got if r["batch"] == row["batch"]]
        assert row["datums"] == len(batch_rows)
        assert row["loss_tokens"] == sum(r["loss_tokens"] for r in batch_rows)
        assert row["context_tokens"] == sum(r["n_tokens"] - r["loss_tokens"] for r in batch_rows)
        want = expected_stats[row["batch"]]
        assert {k: row[k] for k in want} == want
        assert row["fragmentation_rate"] == pytest.approx(
            want["fragments"] / want["datums"] if want["datums"] else 0.0
        )
