"""A run tree whose run dirs have names a path segment cannot hold as they are (`=`, `%`, a
space, quotes, URI and glob characters, non-ASCII, a number), two steps each, and a job dir
outside any `<run>/harbor/step-NNNN/` path: every partition case of the Hive layout."""

from __future__ import annotations

from pathlib import Path

from harbor_shapes import write_job, write_trial

# (the last is the null partition's own name: a run so named must not read as null)
NASTY_RUNS = [
    "plain",
    "exp=1 a%20b",
    "quo'te\"d",
    "ünï ☃",
    "x#y?z:w*[a]^{b}",
    "123",
    "__HIVE_DEFAULT_PARTITION__",
]
STEPS = (1, 2)


def step_job(runs: Path, run: str, step: int, job: str = "job") -> Path:
    return write_job(runs / run / "harbor" / f"step-{step:04d}" / job)


def write_partition_tree(root: Path) -> Path:
    runs = root / "runs"
    for r, run in enumerate(NASTY_RUNS):
        for step in STEPS:
            job = step_job(runs, run, step)
            for i in range(2):
                write_trial(job, f"t{step}__{i}", trial_id=f"{r}-{step}-{i}")
    loose = write_job(runs / "loose-job")  # no <run>/harbor/step-NNNN: no run, no step
    write_trial(loose, "loose__0", trial_id="loose-0")
    return runs
