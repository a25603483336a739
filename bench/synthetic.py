"""A realistic lake of many steps written straight through the lake's own Commit (no raw JSON):
what the stats, growth and report benches query at 100k trials, built in seconds instead of the
40 minutes an ingest of 100k trial dirs takes.

    python -m bench.synthetic --steps 100 --trials-per-step 1000 --out /tmp/lake100k

Every step is one harbor job (one batch) of `trials_per_step` trials over `tasks` tasks. Each
trial's outcome is drawn first (its stop reason, whether the verifier graded it, whether it
passed) and the evidence the views read is derived from it, so `intended_stats` can say what
`rollout_stats` must give without reading the lake:

- stop reasons: exceptions (AgentTimeoutError -> budget, ContextLengthExceededError ->
  provider_error, RuntimeError or a verifier crash -> error), turns reaching the job's
  max_turns -> max_turns, a trajectory ending in mark_task_complete -> submitted, else error;
- rewards: `{"reward": "1.0"}` / `"0.0"`, none for an infra failure (no verifier result), each
  task's pass probability drifting across steps (some climb, some regress: the report's task
  trends and regressions have work to do);
- CTRF tests: 3 per graded trial (all passed when it passed), none when ungraded;
- token spans: one per turn, prompts prefix-chained (each prompt extends the previous prompt and
  answer by a few new tokens, as terminus-2 records them), a few answers sampling the whole
  max_tokens (truncated spans), a few trials with no spans at all;
- problems: a few trial dirs per step with no readable result.json (`unreadable_trial`);
- a catalog entry per trial and job, as an ingest writes them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from wmo_lake.catalog import CatalogEntry
from wmo_lake.commit import Commit
from wmo_lake.fingerprint import EXTRACT_VERSION
from wmo_lake.lake import ensure_duckdb_file
from wmo_lake.store import FORMAT_VERSION, JOB, TRIAL, Manifest, Store, partition_of
from wmo_lake.tables import TABLES

RUN = "synthetic"
MAX_TURNS = 6
MAX_TOKENS = 20
CONTEXT_LIMIT = 4096
TESTS_PER_TRIAL = 3
# The outcome mix (shares of a step's trials), drawn per trial.
SHARES = {
    "budget": 0.04,  # AgentTimeoutError
    "provider_error": 0.02,  # ContextLengthExceededError
    "agent_error": 0.02,  # RuntimeError
    "verifier_error": 0.01,  # VerifierTimeoutError: exception_side 'verifier'
    "max_turns": 0.08,
    "undeclared": 0.05,  # ended without mark_task_complete and below max_turns: error
}
INFRA_FAILED_SHARE = 0.05  # no verifier result: no reward, no CTRF report
NO_SPANS_SHARE = 0.03  # no rollout details recorded
TRUNCATED_TURN_SHARE = 0.03  # answers that sample the whole max_tokens
UNREADABLE_PER_STEP = 2  # trial dirs without a readable result.json
EXCEPTIONS = {
    "budget": "AgentTimeoutError",
    "provider_error": "ContextLengthExceededError",
    "agent_error": "RuntimeError",
    "verifier_error": "VerifierTimeoutError",
}


@dataclass(frozen=True)
class Spec:
    steps: int = 100
    trials_per_step: int = 1000
    tasks: int = 50
    seed: int = 0

    def key(self) -> str:
        # the lake format and the tables' schemas are part of the key: a lake written in an
        # older layout, or without a column the views now read, is rebuilt
        schemas = _digest(repr([(name, str(table.schema)) for name, table in TABLES.items()]))
        text = (
            f"{GENERATOR_VERSION}:{FORMAT_VERSION}:{schemas}:{self.steps}:"
            f"{self.trials_per_step}:{self.tasks}:{self.seed}"
        )
        return f"synthetic-{self.steps * self.trials_per_step}-{_digest(text)[:10]}"


GENERATOR_VERSION = 2  # bump when what a lake holds changes: cached lakes are keyed by it


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


@dataclass
class Step:
    """One step's draws: what every trial is meant to be."""

    step: int
    batch: str
    job_key: str
    trial_keys: list[str]
    names: list[str]
    tasks: np.ndarray  # task index per trial
    outcome: np.ndarray  # stop reason code per trial (see OUTCOMES)
    turns: np.ndarray
    graded: np.ndarray  # bool: the verifier left a reward and a CTRF report
    passed: np.ndarray  # bool (False when not graded)
    tests_passed: np.ndarray  # of TESTS_PER_TRIAL (0 when not graded)
    span_counts: np.ndarray  # spans per trial (0 = none recorded)
    n_sampled: np.ndarray  # per span
    prompt_lens: np.ndarray  # per span
    unreadable: int


OUTCOMES = ["submitted", *SHARES]  # index = code


def draw_step(spec: Spec, step: int, rng: np.random.Generator) -> Step:
    n = spec.trials_per_step
    batch = f"{RUN}/harbor/step-{step:04d}/job-{step:04d}"
    job_key = f"job:/synthetic/{batch}"
    raw = rng.integers(0, 2**63, size=(n, 2))
    trial_keys = [f"{a:016x}{b:016x}"[:32] for a, b in raw.tolist()]
    tasks = np.arange(n) % spec.tasks
    names = [f"task-{t:03d}__{key[:7]}" for t, key in zip(tasks.tolist(), trial_keys, strict=True)]
    shares = np.array([1.0 - sum(SHARES.values()), *SHARES.values()])
    outcome = rng.choice(len(OUTCOMES), size=n, p=shares)
    code = {name: i for i, name in enumerate(OUTCOMES)}
    turns = rng.integers(1, MAX_TURNS, size=n)  # below the cap ...
    turns[outcome == code["max_turns"]] = MAX_TURNS  # ... unless it ran out of turns
    # a verifier crash leaves no reward either
    graded = (rng.random(n) >= INFRA_FAILED_SHARE) & (outcome != code["verifier_error"])
    # each task's pass probability drifts linearly across the steps: half climb, half regress
    progress = step / max(1, spec.steps - 1)
    base = (tasks * 7919 % spec.tasks) / spec.tasks
    climbing = tasks % 2 == 0
    p_pass = np.where(climbing, 0.1 + 0.8 * base * progress, 0.9 - 0.8 * base * progress)
    p_pass = np.where(outcome == code["submitted"], p_pass, p_pass * 0.3)
    passed = graded & (rng.random(n) < p_pass)
    tests_passed = np.where(
        passed, TESTS_PER_TRIAL, np.where(graded, rng.integers(0, TESTS_PER_TRIAL, size=n), 0)
    )
    span_counts = np.where(rng.random(n) < NO_SPANS_SHARE, 0, turns)
    total = int(span_counts.sum())
    n_sampled = rng.integers(5, MAX_TOKENS, size=total)
    n_sampled[rng.random(total) < TRUNCATED_TURN_SHARE] = MAX_TOKENS
    prompt_lens = _prompt_lens(span_counts, n_sampled, rng)
    return Step(
        step,
        batch,
        job_key,
        trial_keys,
        names,
        tasks,
        outcome,
        turns,
        graded,
        passed,
        tests_passed,
        span_counts,
        n_sampled,
        prompt_lens,
        UNREADABLE_PER_STEP,
    )


def _prompt_lens(
    span_counts: np.ndarray, n_sampled: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Each trial's prompts: the first 10..30 tokens, each next one the previous prompt and
    answer plus 5..20 new tokens."""
    total = len(n_sampled)
    starts = np.cumsum(span_counts) - span_counts
    is_first = np.zeros(total, dtype=bool)
    is_first[starts[span_counts > 0]] = True
    growth = np.where(is_first, rng.integers(10, 31, size=total), rng.integers(5, 21, size=total))
    previous_answer = np.concatenate([[0], n_sampled[:-1]])
    increments = growth + np.where(is_first, 0, previous_answer)
    # a running sum restarted at every trial's first span
    running = np.cumsum(increments)
    restart = np.maximum.accumulate(np.where(is_first, running - increments, 0))
    return running - restart


def _string_list(values: list[str]) -> pa.Array:
    return pa.array(values, pa.string())


def _lists(lengths: np.ndarray, values: np.ndarray, value_type: pa.DataType) -> pa.Array:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, value_type))


def table(name: str, n: int, columns: dict[str, Any]) -> pa.Table:
    """A `name` table of n rows: the given columns, every other column null."""
    schema = TABLES[name].schema
    arrays = [
        (
            columns[f.name]
            if isinstance(columns.get(f.name), pa.Array)
            else pa.array(columns[f.name], f.type)
        )
        if f.name in columns
        else pa.nulls(n, f.type)
        for f in schema
    ]
    arrays = [
        a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, schema, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def step_tables(s: Step, rng: np.random.Generator) -> dict[str, pa.Table]:
    n = len(s.trial_keys)
    code = {name: i for i, name in enumerate(OUTCOMES)}
    exception = [EXCEPTIONS.get(OUTCOMES[c]) for c in s.outcome.tolist()]
    reward = [
        [("reward", "1.0" if p else "0.0")] if g else None
        for g, p in zip(s.graded.tolist(), s.passed.tolist(), strict=True)
    ]
    failed = np.where(s.graded, TESTS_PER_TRIAL - s.tests_passed, 0)
    trials = table(
        "trials",
        n,
        {
            "trial_key": s.trial_keys,
            "trial_id": s.trial_keys,
            "batch": [s.batch] * n,
            "run": [RUN] * n,
            "step": [s.step] * n,
            "job_key": [s.job_key] * n,
            "trial_name": s.names,
            "task_name": [f"bench/task-{t:03d}" for t in s.tasks.tolist()],
            "task_id_name": [f"task-{t:03d}" for t in s.tasks.tolist()],  # harbor's task id
            "artifact_dir": [f"/synthetic/{s.batch}/{name}" for name in s.names],
            "agent_name": ["terminus-2"] * n,
            "model_name": ["gpt-4o"] * n,
            "rewards": reward,
            "exception_type": exception,
            "n_episodes": s.turns,
            "multi_step": [False] * n,
            "n_rollout_segments": (s.span_counts > 0).astype(np.int32),
            "spans_status": np.where(s.span_counts > 0, "ok", "absent").tolist(),
            "n_spans": s.span_counts.astype(np.int32),
            "ctrf_status": np.where(s.graded, "ok", "absent").tolist(),
            "ctrf_summary_present": s.graded.tolist(),
            "ctrf_summary_valid": s.graded.tolist(),
            "ctrf_passed": pa.array(s.tests_passed, mask=~s.graded),
            "ctrf_failed": pa.array(failed, mask=~s.graded),
            "ctrf_skipped": pa.array(np.zeros(n, np.int64), mask=~s.graded),
            "ctrf_pending": pa.array(np.zeros(n, np.int64), mask=~s.graded),
            "ctrf_other": pa.array(np.zeros(n, np.int64), mask=~s.graded),
            "ctrf_n_tests": pa.array(np.full(n, TESTS_PER_TRIAL, np.int32), mask=~s.graded),
        },
    )
    declared = s.outcome == code["submitted"]
    stop_reasons = table(
        "stop_reasons",
        n,
        {
            "trial_key": s.trial_keys,
            "batch": [s.batch] * n,
            "trial_name": s.names,
            "exception_type": exception,
            "n_episodes": s.turns,
            "trajectory_status": ["ok"] * n,
            "declared_complete": declared.tolist(),
            "has_trace": [False] * n,
        },
    )
    graded_index = np.flatnonzero(s.graded)
    n_tests = len(graded_index) * TESTS_PER_TRIAL
    test_trial = np.repeat(graded_index, TESTS_PER_TRIAL)
    test_index = np.tile(np.arange(TESTS_PER_TRIAL), len(graded_index))
    keys = np.array(s.trial_keys, dtype=object)
    names = np.array(s.names, dtype=object)
    tests = table(
        "tests",
        n_tests,
        {
            "trial_key": keys[test_trial].tolist(),
            "batch": [s.batch] * n_tests,
            "trial_name": names[test_trial].tolist(),
            "test_index": test_index.astype(np.int32),
            "name": [f"test_outputs.py::test_{i}" for i in test_index.tolist()],
            "status": np.where(
                test_index < s.tests_passed[test_trial], "passed", "failed"
            ).tolist(),
            "duration": np.full(n_tests, 0.01),
        },
    )
    spans = _spans_table(s, keys, names, rng)
    jobs = table(
        "jobs",
        1,
        {
            "job_key": [s.job_key],
            "batch": [s.batch],
            "run": [RUN],
            "step": [s.step],
            "job_dir": [f"/synthetic/{s.batch}"],
            "job_name": [s.batch.rsplit("/", 1)[-1]],
            "agent_name": ["terminus-2"],
            "model_name": ["gpt-4o"],
            "max_turns": [MAX_TURNS],
            "max_tokens": [MAX_TOKENS],
            "context_limit": [CONTEXT_LIMIT],
            "config_status": ["ok"],
            "result_status": ["ok"],
            # a finished harbor job holding every trial it plans (the lake's job checks)
            "job_id": [_digest(s.job_key)[:32]],
            "finished_at": ["2026-11-30T00:00:00.000000"],
            "n_total_trials": [len(s.trial_keys) + s.unreadable],
            "collection_path": ["terminus-2"],
        },
    )
    unreadable = [f"dir:/synthetic/{s.batch}/broken-{i}" for i in range(s.unreadable)]
    problems = table(
        "problems",
        s.unreadable,
        {
            "unit_key": unreadable,
            "batch": [s.batch] * s.unreadable,
            "trial_name": [f"broken-{i}" for i in range(s.unreadable)],
            "path": [key.removeprefix("dir:") + "/result.json" for key in unreadable],
            "kind": ["unreadable_trial"] * s.unreadable,
            "message": ["result.json: invalid JSON (synthetic)"] * s.unreadable,
        },
    )
    return {
        "trials": trials,
        "stop_reasons": stop_reasons,
        "tests": tests,
        "spans": spans,
        "jobs": jobs,
        "problems": problems,
    }


def _spans_table(
    s: Step, keys: np.ndarray, names: np.ndarray, rng: np.random.Generator
) -> pa.Table:
    total = len(s.n_sampled)
    owner = np.repeat(np.arange(len(s.trial_keys)), s.span_counts)
    starts = np.cumsum(s.span_counts) - s.span_counts
    call_index = np.arange(total) - np.repeat(starts, s.span_counts)
    previous_len = np.concatenate([[0], s.prompt_lens[:-1]])
    previous_answer = np.concatenate([[0], s.n_sampled[:-1]])
    prefix = np.where(call_index == 0, 0, previous_len + previous_answer)
    new_lengths = s.prompt_lens - prefix
    new_ids = rng.integers(0, 32000, size=int(new_lengths.sum()))
    sampled_ids = rng.integers(0, 32000, size=int(s.n_sampled.sum()))
    logprobs = -rng.random(int(s.n_sampled.sum()))
    return table(
        "spans",
        total,
        {
            "trial_key": keys[owner].tolist(),
            "batch": [s.batch] * total,
            "trial_name": names[owner].tolist(),
            "call_index": call_index.astype(np.int32),
            "prompt_len": s.prompt_lens.astype(np.int32),
            "prompt_prefix_len": prefix.astype(np.int32),
            "prompt_new_ids": _lists(new_lengths, new_ids, pa.int64()),
            "sampled_token_ids": _lists(s.n_sampled, sampled_ids, pa.int64()),
            "sampled_logprobs": _lists(s.n_sampled, logprobs, pa.float64()),
            "n_sampled": s.n_sampled.astype(np.int32),
            "source": ["rollout_details"] * total,
        },
    )


def steps_of(spec: Spec) -> list[Step]:
    """Every step's draws (the same for the same spec: `build` writes these)."""
    return [draw_step(spec, step, _rng(spec, step, "draws")) for step in range(spec.steps)]


def _rng(spec: Spec, step: int, purpose: str) -> np.random.Generator:
    """One generator per step and purpose: a step's draws do not depend on its tokens."""
    return np.random.default_rng([spec.seed, step, ["draws", "tokens"].index(purpose)])


def build(out: Path, spec: Spec) -> list[Step]:
    """Write the lake at `out` in one commit, with its lake.duckdb, as an ingest leaves it;
    returns the draws (for `intended_stats`)."""
    store = Store(out)
    out.mkdir(parents=True, exist_ok=True)
    commit = Commit(store, Manifest())
    steps: list[Step] = []
    catalog: list[CatalogEntry] = []
    for number in range(spec.steps):
        s = draw_step(spec, number, _rng(spec, number, "draws"))
        steps.append(s)
        partition = partition_of(RUN, s.step)  # every unit's rows go to its run/step partition
        for name, rows in step_tables(s, _rng(spec, number, "tokens")).items():
            commit.append(name, rows, partition)
        # (read as this version's ingest reads: the rows are of this version's tables)
        catalog.append(
            CatalogEntry(
                s.job_key,
                s.job_key,
                JOB,
                s.job_key,
                s.batch,
                _digest(s.job_key),
                0,
                partition,
                extraction=EXTRACT_VERSION,
            )
        )
        catalog += [
            CatalogEntry(
                f"/synthetic/{s.batch}/{name}",
                key,
                TRIAL,
                s.job_key,
                s.batch,
                key,
                0,
                partition,
                extraction=EXTRACT_VERSION,
            )
            for key, name in zip(s.trial_keys, s.names, strict=True)
        ]
    commit.finish(catalog, extractions={entry.partition: EXTRACT_VERSION for entry in catalog})
    ensure_duckdb_file(store)
    return steps


def intended_stats(steps: list[Step]) -> list[dict[str, Any]]:
    """What rollout_stats must say of each batch, from the draws alone (WMO's rules stated
    directly on what each trial was meant to be)."""
    code = {name: i for i, name in enumerate(OUTCOMES)}
    rows = []
    for s in steps:
        n = len(s.trial_keys)
        executed = int(s.graded.sum())
        reasons = Counter(
            "error"
            if OUTCOMES[c] in ("agent_error", "verifier_error", "undeclared")
            else OUTCOMES[c]
            for c in s.outcome.tolist()
        )
        scores = (s.tests_passed / TESTS_PER_TRIAL)[s.graded]
        starts = np.cumsum(s.span_counts) - s.span_counts
        truncated = s.n_sampled >= MAX_TOKENS
        truncated_per_trial = np.add.reduceat(truncated, starts[s.span_counts > 0])
        verifier = int((s.outcome == code["verifier_error"]).sum())
        rows.append(
            {
                "batch": s.batch,
                "run": RUN,
                "step": s.step,
                "trials": n,
                "trials_with_spans": int((s.span_counts > 0).sum()),
                "solve_rate": int(s.passed.sum()) / executed if executed else 0.0,
                "graded_solve_rate": sum(scores.tolist()) / len(scores) if len(scores) else 0.0,
                "graded_trials": executed,
                "raw_solve_rate": int(s.passed.sum()) / n,
                "executed_trials": executed,
                "infra_failed_trials": n - executed,
                "empty_span_trials": int((s.span_counts == 0).sum()),
                "truncated_spans": int(truncated.sum()),
                "truncated_span_trials": int((truncated_per_trial > 0).sum()),
                "stop_reason_counts": dict(sorted(reasons.items())),
                "scaffold_loss_rate": (n - reasons["submitted"]) / n,
                "unreadable_trials": s.unreadable,
                "dropped_turns": 0,
                "dropped_turn_trials": 0,
                "verifier_error_trials": verifier,
                "verifier_scaffold_loss_rate": verifier / n,
            }
        )
    return rows


def cached(spec: Spec, out: Path, log: Any = print) -> Path:
    """The lake of `spec` under out/lakes/, built once (a `.built` mark says it is complete)."""
    lake = out / "lakes" / spec.key()
    mark = lake.with_name(lake.name + ".built")
    if not mark.exists():
        import shutil

        shutil.rmtree(lake, ignore_errors=True)
        started = time.perf_counter()
        build(lake, spec)
        mark.touch()
        os.sync()  # written back now, not during the timed runs (see realistic_trees.cached)
        log(f"built {lake} in {time.perf_counter() - started:.1f} s")
    else:
        ensure_duckdb_file(Store(lake))  # views changed since: rebuild lake.duckdb only
    return lake


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--trials-per-step", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    spec = Spec(args.steps, args.trials_per_step, args.tasks, args.seed)
    started = time.perf_counter()
    build(args.out, spec)
    seconds = time.perf_counter() - started
    print(f"built {spec.steps * spec.trials_per_step:,} trials in {seconds:.1f} s")


if __name__ == "__main__":
    main()
