"""Training runs as a collector lays them out (`<run>/harbor/step-NNNN/job/<trial>/`), built from
the real harbor sample through harbor_shapes, with outcomes a test chooses: per (step, task) a
pass probability, and a seeded share of infra failures, max_turns stops and truncated turns.

    write_training_run(root, "exp-a", steps=6, tasks=TASKS, attempts=3,
                       solve=lambda step, task: 0.2 + 0.1 * step, seed=1)
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from edge_case_trees import write_unreadable_trial
from harbor_shapes import write_job, write_trial

MAX_TURNS = 4
MAX_TOKENS = 6


def _turns(
    rng: random.Random, n: int, truncate: bool
) -> list[tuple[list[int], list[int], list[float]]]:
    """n prefix-chained turns (each prompt extends the previous prompt + completion); the last
    one samples the whole max_tokens when `truncate`."""
    prompt = [rng.randrange(1, 5000) for _ in range(rng.randint(5, 12))]
    turns = []
    for index in range(n):
        length = MAX_TOKENS if truncate and index == n - 1 else rng.randint(1, MAX_TOKENS - 1)
        completion = [rng.randrange(1, 5000) for _ in range(length)]
        turns.append((list(prompt), completion, [round(-rng.random(), 3) for _ in completion]))
        prompt = prompt + completion + [rng.randrange(1, 5000) for _ in range(rng.randint(1, 4))]
    return turns


def ctrf_report(passed: int, failed: int) -> dict:
    """A CTRF report of `passed` + `failed` tests."""
    tests = [{"name": f"test_{i}", "status": "passed", "duration": 0.01} for i in range(passed)]
    tests += [{"name": f"test_f{i}", "status": "failed", "duration": 0.01} for i in range(failed)]
    return {
        "results": {
            "tool": {"name": "pytest"},
            "summary": {
                "tests": passed + failed,
                "passed": passed,
                "failed": failed,
                "skipped": 0,
                "pending": 0,
                "other": 0,
            },
            "tests": tests,
        }
    }


def write_training_run(
    root: Path,
    run: str,
    *,
    steps: int,
    tasks: list[str],
    attempts: int,
    solve: Callable[[int, int], float],
    seed: int,
    infra_share: float = 0.05,
    max_turns_share: float = 0.15,
    truncated_share: float = 0.1,
    unreadable_steps: tuple[int, ...] = (),
    empty_steps: tuple[int, ...] = (),
) -> list[Path]:
    """One run's job dirs, one per step. `solve(step, task_index)` is the pass probability;
    a step in `unreadable_steps` also holds an unreadable trial dir (a problem); a step in
    `empty_steps` holds only unreadable trials (every rate of it is a null measurement)."""
    rng = random.Random(seed)
    jobs = []
    for step in range(steps):
        job = write_job(
            root / run / "harbor" / f"step-{step:04d}" / "job",
            max_turns=MAX_TURNS,
            max_tokens=MAX_TOKENS,
        )
        jobs.append(job)
        if step in empty_steps:
            write_unreadable_trial(job, "gone__1", "missing")
            continue
        for task_index, task in enumerate(tasks):
            for attempt in range(attempts):
                name = f"{task.split('/')[-1]}__s{step}a{attempt}"
                if rng.random() < infra_share:
                    write_trial(
                        job,
                        name,
                        task_name=task,
                        verifier_result=None,
                        rollout_details=None,
                        exception_type="RewardFileNotFoundError",
                        ctrf=None,
                    )
                    continue
                passed = rng.random() < solve(step, task_index)
                stopped_at_cap = rng.random() < max_turns_share
                n_turns = MAX_TURNS if stopped_at_cap else rng.randint(1, MAX_TURNS - 1)
                write_trial(
                    job,
                    name,
                    task_name=task,
                    reward=1.0 if passed else 0.0,
                    n_episodes=n_turns,
                    turns=_turns(rng, n_turns, rng.random() < truncated_share),
                    ctrf=ctrf_report(2, 0) if passed else ctrf_report(rng.randint(0, 1), 1),
                )
        if step in unreadable_steps:
            write_unreadable_trial(job, "broken__1", "truncated")
    return jobs


TASKS = [f"demo/task-{i}" for i in range(6)]


def improving(step: int, task: int) -> float:
    """A run that learns: most tasks climb; task-4 regresses after step 2; task-5 is newly
    solved from step 3 on."""
    if task == 4:
        return 0.9 if step <= 2 else 0.0
    if task == 5:
        return 0.0 if step < 3 else 0.8
    return min(1.0, 0.15 + 0.12 * step + 0.05 * task)


def flat(step: int, task: int) -> float:
    """A baseline that does not learn."""
    return 0.35 + 0.05 * task if task != 5 else 0.0


def write_two_runs(root: Path, steps: int = 6, attempts: int = 3) -> Path:
    """exp-a (improving, a step with an unreadable trial, one step of only unreadable trials)
    and exp-b (flat): the report's screenshot and value tests."""
    write_training_run(
        root,
        "exp-a",
        steps=steps,
        tasks=TASKS,
        attempts=attempts,
        solve=improving,
        seed=1,
        unreadable_steps=(1,),
        empty_steps=(4,) if steps > 4 else (),
    )
    write_training_run(
        root, "exp-b", steps=steps, tasks=TASKS, attempts=attempts, solve=flat, seed=2
    )
    return root


SPLIT_STEP = {  # batch -> task -> rewards of its trials
    "exp-s/harbor/step-0000/job": {"task-r": [1, 1], "task-n": [0]},
    "exp-s/harbor/step-0000/job-b": {"task-r": [0, 0], "task-n": [0]},
    "exp-s/harbor/step-0001/job": {"task-r": [0], "task-n": [1, 0]},
}


def write_split_step_run(root: Path) -> Path:
    """A run whose step 0 is two job dirs (harbor run twice at one step): task-r passes 2 of 4
    there and fails at step 1 (one regression); task-n fails at step 0 and passes 1 of 2 at step
    1 (newly solved)."""
    for batch, tasks in SPLIT_STEP.items():
        job = write_job(root / batch)
        for task, rewards in tasks.items():
            for attempt, reward in enumerate(rewards):
                write_trial(job, f"{task}__{attempt}", task_name=f"demo/{task}", reward=reward)
    return root
