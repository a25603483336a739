"""Finding trial dirs under a PATH, at any depth, without hanging on symlink loops.

A *trial dir* is a directory whose `result.json` is a TrialResult (it has `trial_name`); a
directory whose `config.json` is trial-shaped is one even when its result is missing (an
*unreadable trial*). Its *job dir* is its parent. Discovery reads only the small `config.json`;
whether a `result.json` really is a trial is decided when it is parsed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from wmo_lake.jsonfile import read_json

_STEP = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class Job:
    """A job dir and the labels derived from where it sits."""

    path: Path
    real: str
    batch: str
    run: str | None
    step: int | None

    @property
    def key(self) -> str:
        return f"job:{self.real}"


@dataclass(frozen=True)
class Candidate:
    """A directory that is, or may be, a trial dir."""

    path: Path
    real: str
    job: Job
    trial_shaped_config: bool


@dataclass(frozen=True)
class TrialTask:
    """A candidate in the picklable form a worker process reads it from."""

    path: str
    real: str
    batch: str
    run: str | None
    step: int | None
    job_key: str
    trial_shaped_config: bool
    sinks: tuple[str, ...] = ()

    @classmethod
    def of(cls, candidate: Candidate, sinks: tuple[str, ...]) -> TrialTask:
        job = candidate.job
        return cls(
            str(candidate.path),
            candidate.real,
            job.batch,
            job.run,
            job.step,
            job.key,
            candidate.trial_shaped_config,
            sinks,
        )

    @property
    def job(self) -> Job:
        parent = Path(self.path).parent
        return Job(parent, os.path.realpath(parent), self.batch, self.run, self.step)


@dataclass(frozen=True)
class WalkProblem:
    path: str
    kind: str
    message: str


@dataclass
class Discovery:
    candidates: list[Candidate] = field(default_factory=list)
    problems: list[WalkProblem] = field(default_factory=list)


def job_labels(job_dir: Path, root: Path) -> tuple[str, str | None, int | None]:
    """(batch, run, step) for a job dir found under `root` (see the README's discovery rules)."""
    absolute = Path(os.path.abspath(job_dir))
    root_abs = Path(os.path.abspath(root))
    parts = absolute.parts
    anchor = _run_anchor(parts)
    if anchor is not None:
        # A collector's <run>/harbor/step-NNNN/<job>: labelled from the run dir, so ingesting
        # the runs dir, one run, one step or one job gives the same batch.
        batch = "/".join(parts[anchor:])
    elif absolute != root_abs and absolute.is_relative_to(root_abs):
        batch = absolute.relative_to(root_abs).as_posix()
    else:
        batch = absolute.name or Path(os.path.realpath(absolute)).name
    run = None
    for index in range(len(parts) - 1, 0, -1):
        if parts[index] == "harbor":
            run = parts[index - 1]
            break
    step = None
    for part in reversed(parts):
        match = _STEP.match(part)
        if match:
            step = int(match.group(1))
            break
    return batch, run, step


def _run_anchor(parts: tuple[str, ...]) -> int | None:
    """Index of <run> in a path holding <run>/harbor/step-NNNN/<job...> (the last such), or None."""
    for index in range(len(parts) - 3, 1, -1):
        if parts[index] == "harbor" and _STEP.match(parts[index + 1]):
            return index - 1
    return None


def _is_trial_config(path: Path) -> bool:
    doc = read_json(path)
    return isinstance(doc, dict) and "trial_name" in doc


def discover(root: Path) -> Discovery:
    """Every trial candidate under `root` (root itself included), depth-first, in name order."""
    found = Discovery()
    jobs: dict[Path, Job] = {}

    def job_for(trial_dir: Path) -> Job:
        job_dir = trial_dir.parent
        if job_dir not in jobs:
            batch, run, step = job_labels(job_dir, root)
            jobs[job_dir] = Job(job_dir, os.path.realpath(job_dir), batch, run, step)
        return jobs[job_dir]

    if not root.is_dir():
        found.problems.append(
            WalkProblem(
                str(root), "not_a_directory", f"{root} is not a directory; nothing ingested"
            )
        )
        return found
    visited: set[str] = set()
    # (path, the real paths of its ancestors): a link back into an ancestor is a loop.
    stack: list[tuple[Path, frozenset[str]]] = [(root, frozenset())]
    while stack:
        directory, ancestors = stack.pop()
        real = os.path.realpath(directory)
        if real in ancestors:
            found.problems.append(
                WalkProblem(
                    str(directory),
                    "symlink_loop",
                    f"{directory} links back to its ancestor {real}; not followed",
                )
            )
            continue
        if real in visited:
            continue  # reached twice through links: walked once already
        visited.add(real)
        try:
            with os.scandir(directory) as entries:
                names: set[str] = set()
                subdirs: list[tuple[bool, str, Path]] = []
                for entry in entries:
                    names.add(entry.name)
                    try:
                        if entry.is_dir():
                            subdirs.append((entry.is_symlink(), entry.name, Path(entry.path)))
                    except OSError:
                        continue
        except OSError as error:
            found.problems.append(
                WalkProblem(
                    str(directory),
                    "unreadable_dir",
                    f"cannot list {directory}: {error.strerror or error}; its trials were skipped",
                )
            )
            continue
        trial_config = "config.json" in names and _is_trial_config(directory / "config.json")
        if trial_config or "result.json" in names:
            found.candidates.append(Candidate(directory, real, job_for(directory), trial_config))
            if trial_config:
                continue  # a trial dir holds no trials
        inner = ancestors | {real}
        # Real dirs before links (a tree reached both ways is labelled by its real place), each
        # in name order; the stack pops the last pushed first.
        for _, _, subdir in sorted(subdirs, reverse=True):
            stack.append((subdir, inner))
    return found
