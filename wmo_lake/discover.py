"""Finding trial dirs under a PATH, at any depth, without hanging on symlink loops.

A *trial dir* is a directory whose `result.json` is a TrialResult (it has `trial_name`), whatever
its config.json says; a directory whose `config.json` is trial-shaped is one even when its result
is missing (an *unreadable trial*), and so is a directory with a `config.json` that is not a
JobConfig inside a job dir (harbor's layout puts only trials there): when that config.json cannot
be read either, the trial is still counted, not skipped (also when the job dir shows as one only by
its other trials, its own config.json broken: `_settle`). Its *job dir* is its parent. A directory
with harbor's JobConfig `config.json` (or only a JobResult `result.json`) is a job dir even with no
trials (an empty batch), and so is a directory that holds trial dirs: its own result.json is then
its JobResult, read with the job, not a candidate trial. Discovery reads only the small
`config.json`s (and the result.json of a job dir with no trials); whether a `result.json` really is
a trial is decided when it is parsed. Each job's collection path and sink dir come from its
config's first agent, and each trial's from the agent its own config.json records, when that is
another (a job of several agents); a trial whose config.json records no agent is decided when its
result.json is read (`wmo_lake/collection.py`).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from wmo_lake.collection import (
    TERMINUS_2,
    Collection,
    SinkDir,
    SinkRoots,
    agent_collection_path,
    collection_path,
    resolve_sink_dir,
)
from wmo_lake.jsonfile import ReadFailure, decode, read_bytes, read_json
from wmo_lake.store import NAME_MAX_BYTES, oversized_partition_dir

_STEP = re.compile(r"step-([0-9]+)")  # (fullmatch: ASCII digits, the whole name)
_STEP_MAX = 2**63 - 1  # the `step` column is 64-bit (tables.fields would import this module back)
JOB_RESULT_PEEK_BYTES = 2**20  # a JobResult is small; a bigger result.json is a trial's


@dataclass(frozen=True)
class Job:
    """A job dir, the labels derived from where it sits, and how its trials were collected."""

    path: Path
    real: str
    batch: str
    run: str | None
    step: int | None
    collection_path: str = TERMINUS_2
    token_sink_dir: str | None = None  # as recorded in config.json (pi-bridge jobs)
    sink: SinkDir | None = None  # where its sinks are, resolved
    sink_roots: SinkRoots = ()  # the --sink-root remaps, for a trial whose agent records another
    # how many agents its config.json names; with one, every trial ran it (harbor runs each task
    # x attempt under each agent), so the job's record of it is the one read (`collection_of`)
    n_agents: int | None = None
    # the sink dirs (resolved) its other agents record: a trial of a job of several agents whose
    # config.json does not decide its agent is read from one of them once its result.json says
    # which, so its fingerprint watches its sink in each (`fingerprint.trial_fingerprint`)
    agent_sinks: tuple[SinkDir, ...] = ()

    @property
    def key(self) -> str:
        return f"job:{self.real}"

    @cached_property  # (asked for every trial: built once)
    def collection(self) -> Collection:
        """How the trials of its first agent (and those that record no agent) are read."""
        return Collection(self.collection_path, self.token_sink_dir, self.sink)

    def collection_of(self, agent: Any) -> Collection:
        """How a trial that records `agent` (harbor's AgentConfig) is read: the job's own
        collection when that agent records the same token_sink_dir (or, like the job, none)."""
        path, recorded = agent_collection_path(agent)
        if recorded == self.token_sink_dir or self.n_agents == 1:
            return self.collection
        sink = None if recorded is None else resolve_sink_dir(recorded, self.path, self.sink_roots)
        return Collection(path, recorded, sink)


@dataclass(frozen=True)
class Candidate:
    """A directory that is, or may be, a trial dir."""

    path: Path
    real: str
    job: Job
    trial_shaped_config: bool
    # `path` as the walk spelled it (the same text): str(path) would parse it again, ~5 us a
    # trial of the serial work before the readers start
    text: str = ""
    dir_problem: DirProblem | None = None  # why it is a trial dir though nothing said so
    agent: dict[str, Any] | None = None  # the agent its config.json records (harbor's AgentConfig)
    own: Collection | None = None  # that agent's collection when not the job's
    # a dir with a result.json and no config.json in a job dir: a trial when its result.json
    # cannot be read (counted as unreadable), not one when it reads as something else
    in_job_dir: bool = False

    @property
    def collection(self) -> Collection:
        return self.own or self.job.collection


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
    owner: Job | None = None  # its job, with the collection path and sink dir
    dir_problem: DirProblem | None = None
    agent: dict[str, Any] | None = None  # the agent its config.json records
    own: Collection | None = None  # that agent's collection when not the job's
    in_job_dir: bool = False  # (Candidate.in_job_dir)

    @classmethod
    def of(cls, candidate: Candidate) -> TrialTask:
        job = candidate.job
        return cls(
            candidate.text or str(candidate.path),
            candidate.real,
            job.batch,
            job.run,
            job.step,
            job.key,
            candidate.trial_shaped_config,
            job,
            candidate.dir_problem,
            candidate.agent,
            candidate.own,
            candidate.in_job_dir,
        )

    @property
    def job(self) -> Job:
        if self.owner is not None:
            return self.owner
        parent = Path(self.path).parent
        return Job(parent, os.path.realpath(parent), self.batch, self.run, self.step)

    @property
    def collection(self) -> Collection:
        """How it is read as discovery saw it: its config.json's agent's, else its job's."""
        return self.own or self.job.collection


@dataclass(frozen=True)
class DirProblem:
    """Why a trial dir was taken as one without its config.json telling so: the config.json
    could not be read (invalid_json, not_an_object, ...) or the dir could not be listed
    (unreadable_dir). A problem `kind` and its message."""

    kind: str
    message: str


def config_problem(config: Any, path: str) -> DirProblem | None:
    """Why a config.json read as `config` gives a trial dir no TrialConfig: it could not be read,
    or holds no object. None when it reads as an object."""
    if isinstance(config, ReadFailure):
        return DirProblem(config.kind, config.message)
    if not isinstance(config, dict):
        shown = "array" if isinstance(config, list) else "value"
        return DirProblem(
            "not_an_object", f"{path} holds a JSON {shown}, expected harbor's TrialConfig object"
        )
    return None


@dataclass(frozen=True)
class WalkProblem:
    path: str  # as the walk spelled it, shown in the `problems` row
    kind: str
    message: str
    in_dir: str | None = None  # the real path of the dir the walk met it in (a bad name's)
    # the labels it counts under (an unreadable trial of a job dir: its job's)
    batch: str | None = None
    run: str | None = None
    step: int | None = None

    @property
    def key(self) -> str:
        """Its catalog key and unit key: by the real path, as a trial dir's and a job dir's are,
        so one file reached through another PATH (relative, absolute, a link) is one problem,
        and `--prune` (whose roots are real paths) finds it gone."""
        return f"walk:{os.path.realpath(self.path)}"


@dataclass
class Discovery:
    candidates: list[Candidate] = field(default_factory=list)
    problems: list[WalkProblem] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)  # job-shaped dirs (with trials or without)


def job_labels(job_dir: Path, root: Path) -> tuple[str, str | None, int | None]:
    """(batch, run, step) for a job dir found under `root` (see the README's discovery rules).
    Under `<run>/harbor/step-NNNN/`, batch is anchored at the run dir whatever `root` is, so a
    step ingested alone and later with its whole run keeps its label."""
    absolute = Path(os.path.abspath(job_dir))
    root_abs = Path(os.path.abspath(root))
    # A collector's <run>/harbor/step-NNNN/<job> (or a job dir that is the step dir itself):
    # labelled from the run dir, so ingesting the runs dir, one run, one step or one job gives
    # the same batch; found by the real path first, so an alias of the run dir (a symlink
    # `latest`) labels its batches as the run itself does (as `collect` labels them).
    real_parts = Path(os.path.realpath(absolute)).parts
    parts = real_parts if _run_anchor(real_parts) is not None else absolute.parts
    anchor = _run_anchor(parts)
    if anchor is not None:
        batch = "/".join(parts[anchor:])
    elif absolute != root_abs and absolute.is_relative_to(root_abs):
        batch = absolute.relative_to(root_abs).as_posix()
    else:
        batch = absolute.name or Path(os.path.realpath(absolute)).name
    if anchor is not None:  # run and step from the anchor: a job named step-0009 or harbor
        step_match = _STEP.fullmatch(parts[anchor + 2])  # under it labels nothing
        return batch, parts[anchor], _step_number(step_match) if step_match else None
    run = None
    for index in range(len(parts) - 1, 0, -1):
        if parts[index] == "harbor":
            run = parts[index - 1]
            break
    step = None
    for index in range(len(parts) - 1, -1, -1):
        match = _STEP.fullmatch(parts[index])
        if match:
            step = _step_number(match)
            # A step dir given as the PATH (or the step dir of a job dir given as one) starts
            # the label: labelled from below it, the job dirs of several steps given as PATHs
            # shared one batch label, pooled under one arbitrary step.
            if index == len(parts) - len(batch.split("/")) - 1:
                batch = "/".join(parts[index:])
            break
    return batch, run, step


def _unresolved_link(path: str, error: OSError) -> WalkProblem:
    """A link the walk cannot follow: a loop the system itself reports (a link to itself, a -> b
    -> a), or a target it may not look up. It may be a trial dir or a job dir: said, not
    skipped."""
    why = error.strerror or str(error)
    if error.errno == errno.ELOOP:
        return WalkProblem(path, "symlink_loop", f"{path} is a symlink loop ({why}); not followed")
    return WalkProblem(path, "unreadable_dir", f"cannot follow the link {path}: {why}; {_NOT_READ}")


def is_step_dir(name: str) -> bool:
    """Whether a path component names a step dir (`step-` and ASCII digits, the whole name)."""
    return _STEP.fullmatch(name) is not None


def _step_number(match: re.Match[str]) -> int | None:
    """A step dir's number; None past 64 bits (no `step` column holds it: `oversized_step_dir`)."""
    number = int(match.group(1))
    return number if number <= _STEP_MAX else None


def oversized_step_dir(job_dir: Path) -> str | None:
    """The first `step-N` component of `job_dir` whose N no 64-bit `step` holds, or None."""
    for part in job_dir.parts:
        match = _STEP.fullmatch(part)
        if match and _step_number(match) is None:
            return part
    return None


def _run_anchor(parts: tuple[str, ...]) -> int | None:
    """Index of <run> in a path holding <run>/harbor/step-NNNN[/<job...>] (the last such), or
    None. A step dir with a job dir under it first (under an anchor, a job named `step-9` or
    `harbor/step-9` labels nothing), then the job dir that is the step dir itself (`harbor run
    --jobs-dir RUN/harbor --job-name step-N`)."""
    for index in range(len(parts) - 3, 1, -1):
        if parts[index] == "harbor" and _STEP.fullmatch(parts[index + 1]):
            return index - 1
    if len(parts) > 3 and parts[-2] == "harbor" and _STEP.fullmatch(parts[-1]):
        return len(parts) - 3
    return None


def _is_job_config(doc: Any) -> bool:
    """harbor's JobConfig (trial configs carry `trial_name`; defaults may be omitted)."""
    return isinstance(doc, dict) and "trial_name" not in doc and _has_job_fields(doc)


def _has_job_fields(doc: dict[str, Any]) -> bool:
    """Fields only harbor's JobConfig has (its TrialConfig has `agent`, `trials_dir`, `job_id`)."""
    return any(key in doc for key in ("job_name", "jobs_dir", "agents"))


def proves_a_trial(candidate: Candidate) -> bool:
    """Whether reading `candidate` may find a trial (so its job dir is read too): a dir without
    a TrialConfig outside a job dir is one only when its result.json is a TrialResult (peeked:
    for `--dry-run`, which reads nothing else). Another tool's result.json is no trial; a copy
    of a trial the lake holds from another dir is one only the read can tell."""
    return candidate.trial_shaped_config or candidate.in_job_dir or _is_trial_result(candidate.text)


def _is_trial_result(directory: str) -> bool:
    """Whether `directory`'s result.json is a TrialResult (a string `trial_name`: harbor's model
    takes an empty one too)."""
    data = read_bytes(f"{directory}/result.json")
    doc = decode(data, Path(directory, "result.json")) if isinstance(data, bytes) else None
    name = doc.get("trial_name") if isinstance(doc, dict) else None
    return isinstance(name, str)


def _is_job_result(path: Path) -> bool:
    """A small result.json that is harbor's JobResult (`n_total_trials` and `stats`)."""
    try:
        if path.stat().st_size > JOB_RESULT_PEEK_BYTES:
            return False
    except OSError:
        return False
    data = read_bytes(path)
    doc = decode(data, path) if isinstance(data, bytes) else None
    return (
        isinstance(doc, dict)
        and "trial_name" not in doc
        and "n_total_trials" in doc
        and "stats" in doc
    )


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # undecodable bytes, kept by Python as lone surrogates
        return False
    return True


def _printable(path: str) -> str:
    """A path whose name is not UTF-8, with the bad bytes as \\xNN escapes (storable text)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _not_utf8_name(path: str, in_dir: str) -> WalkProblem:
    shown = _printable(path)
    return WalkProblem(
        shown,
        "not_utf8_name",
        f"directory name {shown} is not valid UTF-8 (bad bytes shown as \\xNN); it was not "
        "walked. Rename it (e.g. with convmv) and ingest again",
        in_dir,
    )


def _jobs_by_real(found: Discovery) -> dict[str, Job]:
    """Every job dir found, by its real path: those walked, and those of the trials found."""
    return {job.real: job for job in found.jobs} | {c.job.real: c.job for c in found.candidates}


def _count_bad_names_in_job_dirs(found: Discovery) -> None:
    """A dir whose name is not UTF-8 inside a job dir is a trial of its batch (harbor puts only
    trial dirs there) that cannot be read: an unreadable trial, counted in the batch, as one
    that cannot be listed is. Left as a walk problem alone, the batch's figures read as if the
    trial had never run."""
    jobs = _jobs_by_real(found)
    for index, problem in enumerate(found.problems):
        job = jobs.get(problem.in_dir or "") if problem.kind == "not_utf8_name" else None
        if job is None:
            continue
        found.problems[index] = WalkProblem(
            problem.path,
            "unreadable_trial",
            f"trial dir {problem.path} has a name that is not valid UTF-8 (bad bytes shown as "
            "\\xNN), so it was not read; it has no trials row and is counted in "
            "unreadable_trials. Rename it (e.g. with convmv) and ingest again. "
            f"(not_utf8_name: {problem.message})",
            problem.in_dir,
            job.batch,
            job.run,
            job.step,
        )


_MAX_LINKS = 40  # (the kernel's own limit on links followed in one lookup)


def as_the_os_reads(path: str, links: list[int] | None = None) -> str:
    """`path` absolute, its '..' as the OS reads it ('link/..' is the parent of the link's
    target, not the dir the link is in), every other link kept as spelled: a job's labels are
    read from the path (`<run>/harbor/step-N/`), which a link to a step dir elsewhere keeps.
    `links`: the links followed so far in this lookup (the kernel's budget is per lookup)."""
    links = [0] if links is None else links
    current = os.sep if os.path.isabs(path) else os.getcwd()
    for part in path.split(os.sep):
        if part in ("", "."):
            continue
        if part == "..":
            if os.path.islink(current):
                current = _link_target(current, links)
            current = os.path.dirname(current)
        else:
            current = os.path.join(current, part)
    return current


def _link_target(link: str, links: list[int] | None = None) -> str:
    """The path a link names, read as the OS reads it (`as_the_os_reads`); the resolved path
    past too many links in one lookup, or when one cannot be read."""
    links = [0] if links is None else links
    try:
        links[0] += 1
        if links[0] > _MAX_LINKS:
            raise OSError("too many links")
        target = os.readlink(link)
    except OSError:
        return os.path.realpath(link)
    resolved = as_the_os_reads(os.path.join(os.path.dirname(link), target), links)
    return _link_target(resolved, links) if os.path.islink(resolved) else resolved


def discover(root: Path, sink_roots: SinkRoots = ()) -> Discovery:
    """Every trial candidate and job dir under `root` (root itself included), depth-first, in
    name order."""
    # '.', '..', 'a/..': pathlib's parent of these is not theirs
    if root.name in ("", ".."):
        root = Path(as_the_os_reads(str(root)))
    found = Discovery()
    # Keyed by a dir's path as a string (scandir's, or the root's normalized one): the walk meets
    # every trial dir, and pathlib's parsing and hashing cost more than reading its config.json.
    jobs: dict[str, Job] = {}
    configs: dict[str, Any] = {}  # the job configs read during the walk
    reals: dict[str, str] = {}  # the real path of every dir walked

    def job_at(job_dir: str, job_path: Path | None = None) -> Job:
        if job_dir not in jobs:
            job_path = job_path or Path(job_dir)
            batch, run, step = job_labels(job_path, root)
            config = configs.get(job_dir)
            if config is None:
                config = read_json(job_path / "config.json")
            path, recorded = collection_path(config)
            sink = None if recorded is None else resolve_sink_dir(recorded, job_path, sink_roots)
            real = reals.get(job_dir) or os.path.realpath(job_path)
            agents = config.get("agents") if isinstance(config, dict) else None
            n_agents = len(agents) if isinstance(agents, list) else None
            recorded_sinks = (agent_collection_path(agent)[1] for agent in agents or [])
            others = {other for other in recorded_sinks if other not in (recorded, None)}
            agent_sinks = tuple(
                resolve_sink_dir(other, job_path, sink_roots) for other in sorted(others)
            )
            jobs[job_dir] = Job(
                job_path,
                real,
                batch,
                run,
                step,
                path,
                recorded,
                sink,
                sink_roots,
                n_agents,
                agent_sinks if n_agents != 1 else (),
            )
        return jobs[job_dir]

    # (job dir, token_sink_dir) -> the collection of a trial whose agent records another sink
    # dir than its job's first agent: the trials of one agent share it, resolved once
    own_collections: dict[tuple[str, str | None], Collection] = {}

    def own_collection(job: Job, agent: dict[str, Any]) -> Collection | None:
        recorded = agent_collection_path(agent)[1]
        if recorded == job.token_sink_dir or job.n_agents == 1:
            return None
        key = (str(job.path), recorded)
        if key not in own_collections:
            own_collections[key] = job.collection_of(agent)
        return own_collections[key]

    if not root.is_dir():
        found.problems.append(
            WalkProblem(
                str(root), "not_a_directory", f"{root} is not a directory; nothing ingested"
            )
        )
        return found
    visited: set[str] = set()
    # links the walk could not follow, by the real path of the dir they are in: said once the
    # walk knows which dirs are trials (a trial's own links, its agent's, are its files)
    links: list[tuple[str, WalkProblem]] = []
    job_dirs: set[str] = set()  # the dirs walked that are job dirs by their own files
    job_parents: dict[str, tuple[str, str | None]] = {}  # their real path -> (path, parent)
    unsettled: dict[int, str] = {}  # candidates (by index) whose parent may prove a job dir
    # (path, the real paths of its ancestors, its real path when known, its parent's path or
    # None for the root): a link back into an ancestor is a loop. A dir that is not a symlink is
    # its parent's real path + its name, so only links (and the root) pay for
    # os.path.realpath's lstat of every component.
    stack: list[tuple[str, frozenset[str], str | None, str | None]] = [
        (str(root), frozenset(), None, None)
    ]
    while stack:
        directory, ancestors, known_real, parent = stack.pop()
        real = known_real or os.path.realpath(directory)
        reals[directory] = real
        if real in ancestors:
            found.problems.append(
                WalkProblem(
                    directory,
                    "symlink_loop",
                    f"{directory} links back to its ancestor {real}; not followed",
                )
            )
            continue
        if real in visited:
            continue  # reached twice through links: walked once already
        visited.add(real)
        base = real if real.endswith("/") else f"{real}/"  # (os.path.join's, for a dir's names)
        try:
            with os.scandir(directory) as entries:
                names: set[str] = set()
                subdirs: list[tuple[bool, str, str, str | None]] = []
                for entry in entries:
                    names.add(entry.name)
                    try:
                        # (an ASCII name, as nearly all are, is UTF-8: no encode to check it)
                        if not entry.name.isascii() and not _is_utf8(entry.name):
                            if entry.is_dir():
                                found.problems.append(_not_utf8_name(entry.path, real))
                            continue
                        if entry.is_dir():
                            link = entry.is_symlink()
                            known = None if link else f"{base}{entry.name}"
                            subdirs.append((link, entry.name, entry.path, known))
                    except OSError as error:  # (a link whose target cannot be looked up)
                        links.append((real, _unresolved_link(entry.path, error)))
                        continue
        except OSError as error:
            why = f"cannot list {directory}: {error.strerror or error}"
            if parent is None:
                found.problems.append(
                    WalkProblem(directory, "unreadable_dir", f"{why}; {_NOT_READ}")
                )
                continue
            # in a job dir, a trial of its batch, counted as unreadable (settled after the walk
            # when its parent is not yet known as one)
            if parent not in job_dirs:
                unsettled[len(found.candidates)] = _UNLISTED
            unlisted = DirProblem("unreadable_dir", why)
            found.candidates.append(
                Candidate(Path(directory), real, job_at(parent), True, directory, unlisted)
            )
            continue
        path = Path(directory)
        has_config, has_result = "config.json" in names, "result.json" in names
        config = read_json(f"{directory}/config.json") if has_config else None
        job_config = _is_job_config(config)
        trial_config = isinstance(config, dict) and "trial_name" in config
        also_job = trial_config and isinstance(config, dict) and _has_job_fields(config)
        if job_config:
            configs[directory] = config  # its trials, walked next, read it from here
        # (a JobResult beside no config.json, or one no reader can take for a trial's or a job's)
        if job_config or (has_result and not trial_config and _is_job_result(path / "result.json")):
            found.jobs.append(job_at(directory, path))
            job_dirs.add(directory)
            job_parents[real] = (directory, parent)
        elif has_config or has_result:
            # A trial dir for sure when its config.json is a TrialConfig. Otherwise it waits for
            # the walk to end (`_settle`), walked into: one in a job dir is a trial of it (harbor
            # puts only trial dirs there) unless it holds trial dirs (a job with a broken config).
            settled = trial_config and not also_job
            if not settled:
                reason = _ALSO_JOB if also_job else _CONFIG if has_config else _RESULT_ONLY
                reason = _CONFIG_ONLY if reason == _CONFIG and not has_result else reason
                unsettled[len(found.candidates)] = reason
            # (the root's job dir was not walked: it is the root's parent; a root that is a
            # link to a trial dir is in the job dir its target is in, not beside the link)
            if parent is not None:
                job = job_at(parent)
            elif path.is_symlink():
                target = os.path.dirname(_link_target(str(path)))
                job = job_at(target, Path(target))
            else:
                job = job_at(str(path.parent), path.parent)
            config_path = f"{directory}/config.json"
            problem = config_problem(config, config_path) if has_config else None
            agent = config.get("agent") if trial_config and isinstance(config, dict) else None
            agent = agent if isinstance(agent, dict) else None
            own = None if agent is None else own_collection(job, agent)
            found.candidates.append(
                Candidate(path, real, job, settled or also_job, directory, problem, agent, own)
            )
            if settled:
                continue  # a trial dir holds no trials
        inner = ancestors | {real}
        # Real dirs before links (a tree reached both ways is labelled by its real place), each
        # in name order; the stack pops the last pushed first.
        for _, _, subdir, known in sorted(subdirs, reverse=True):
            stack.append((subdir, inner, known, directory))
    # A dir whose config.json reads as a JobConfig (or as one and a TrialConfig) and that holds
    # no trial dir by its own config.json: its result.json decides. A trial's makes it that
    # trial, and what it holds its files; so does a job dir around it (harbor puts only trials
    # there: an unreadable one, then); otherwise it is a job dir (perhaps of broken trials).
    sure_parents = {
        c.job.real for index, c in enumerate(found.candidates) if index not in unsettled
    }
    with_files = {c.real for c in found.candidates} | {job.real for job in found.jobs}
    shown_by_results = _shown_by_results(found, unsettled, sure_parents, with_files)
    in_a_job = {job.real for job in found.jobs} | (sure_parents & with_files) | shown_by_results
    holding_any = {c.job.real for c in found.candidates}
    trial_dirs: set[str] = set()  # the dirs found to be trials so
    for index, reason in list(unsettled.items()):
        if reason != _ALSO_JOB:
            continue
        candidate = found.candidates[index]
        if candidate.real not in sure_parents and (
            candidate.job.real in in_a_job or _is_trial_result(candidate.text)
        ):
            del unsettled[index]
            trial_dirs.add(candidate.real)
        else:
            unsettled[index] = _DROPPED
            found.jobs.append(job_at(candidate.text, candidate.path))
            in_a_job.add(candidate.real)
    for real, (directory, parent) in job_parents.items():
        if real in sure_parents:
            continue
        parent_real = reals.get(parent) if parent is not None else None
        empty_in_a_job = parent_real in in_a_job and real not in holding_any
        if not empty_in_a_job and not _is_trial_result(directory):
            continue
        job = job_at(parent) if parent is not None else job_at(str(Path(directory).parent))
        found.jobs = [other for other in found.jobs if other.real != real]
        found.candidates.append(Candidate(Path(directory), real, job, True, directory))
        trial_dirs.add(real)
    if trial_dirs:
        for index, candidate in enumerate(found.candidates):
            if candidate.job.real in trial_dirs:
                unsettled[index] = _DROPPED
    # (what a dir found to be a trial holds are its files, shown nothing)
    trials = _settle(found, unsettled, shown_by_results - trial_dirs)
    found.problems += [p for at, p in links if not (at in trials or _inside(at, trials))]
    _leave_out_oversized_partitions(found)
    _count_bad_names_in_job_dirs(found)
    return found


# Why a candidate waits for the walk to end: its parent is not (yet) known as a job dir.
_RESULT_ONLY = "result_only"  # a result.json and no config.json
_CONFIG = "config"  # a config.json that is neither a TrialConfig nor a JobConfig, a result.json
_CONFIG_ONLY = "config_only"  # such a config.json and no result.json
_UNLISTED = "unlisted"  # a dir that cannot be listed
_NOT_READ = "its trials were not read (the lake keeps those it holds, even with --prune)"
_ALSO_JOB = "also_job"  # a config.json with trial_name that also has a JobConfig's fields
_DROPPED = "dropped"  # no trial: a job dir after all, or a dir inside a trial dir


def _shown_by_results(
    found: Discovery, unsettled: dict[int, str], sure_parents: set[str], with_files: set[str]
) -> set[str]:
    """The dirs of their own files (a broken config.json, say) that no TrialConfig trial dir
    shows as a job, but one of whose dirs without a TrialConfig has a TrialResult: peeked, one
    file at a time until one is (only such trees pay: harbor writes a trial's config.json
    first). A config.json or result.json in the artifacts/ of a trial that lost its own is no
    TrialResult, so that trial stays a trial."""
    undecided: dict[str, list[Candidate]] = {}
    for index, reason in unsettled.items():
        c = found.candidates[index]
        if reason in (_RESULT_ONLY, _CONFIG) and c.job.real not in sure_parents:
            undecided.setdefault(c.job.real, []).append(c)
    return {
        parent
        for parent, children in undecided.items()
        if parent in with_files and any(_is_trial_result(child.text) for child in children)
    }


def _settle(found: Discovery, unsettled: dict[int, str], proven_by_results: set[str]) -> set[str]:
    """Decide the candidates the walk could not: a dir inside a job dir is one of its trials
    (counted, as unreadable when nothing in it can be read), and a dir whose parent is a job dir
    only shows once the walk has met that parent's trials (its own config.json broken). A dir that
    holds trial dirs is their job dir (its result.json, unreadable as a JobResult or with no
    config.json beside it, is read and reported with the job). Returns the real paths of the
    candidates that are trial dirs for sure (not those read to see whether they are)."""
    if not unsettled:  # (a healthy tree: every candidate a trial by its own config.json)
        return {c.real for c in found.candidates}
    # A job dir by its own files, or by a trial dir inside it (a TrialConfig) when it has files
    # of its own (a broken config.json or result.json): a run dir holding a stray trial dir is
    # no job, whose other dirs (another tool's) would count as its trials.
    with_files = {c.real for c in found.candidates} | {job.real for job in found.jobs}
    proven = {job.real for job in found.jobs} | {
        c.job.real
        for index, c in enumerate(found.candidates)
        if index not in unsettled and c.job.real in with_files
    }
    # A dir holds trial dirs when one is a trial by its own config.json, or in a dir proven a
    # job: a config.json or result.json in the artifacts/ of a trial that lost its config.json
    # (walked into) does not make that trial a job dir, to be dropped.
    holding = {
        c.job.real
        for index, c in enumerate(found.candidates)
        if index not in unsettled or (c.job.real in proven and unsettled[index] != _DROPPED)
    }
    # (and one whose trial dirs have no TrialConfig, shown by a TrialResult among them)
    holding |= proven_by_results
    proven |= proven_by_results
    candidates = {
        c.real for index, c in enumerate(found.candidates) if unsettled.get(index) != _DROPPED
    }
    kept: list[Candidate] = []
    trials: set[str] = set()  # (the kept candidates that are trial dirs for sure)
    for index, candidate in enumerate(found.candidates):
        reason = unsettled.get(index)
        if reason is None:
            kept.append(candidate)
            trials.add(candidate.real)
        elif reason == _DROPPED:
            continue
        elif candidate.real in holding:
            continue  # a job dir, of the trial dirs inside it
        elif candidate.job.real in proven and reason == _RESULT_ONLY:
            kept.append(replace(candidate, in_job_dir=True))
            trials.add(candidate.real)
        elif candidate.job.real in proven:
            kept.append(replace(candidate, trial_shaped_config=True))
            trials.add(candidate.real)
        elif reason == _UNLISTED and _inside(candidate.real, trials):
            continue  # a dir of a trial dir (its agent/, say): the trial's reading says it
        elif reason == _UNLISTED:
            why = candidate.dir_problem.message if candidate.dir_problem else ""
            found.problems.append(
                WalkProblem(candidate.text, "unreadable_dir", f"{why}; {_NOT_READ}")
            )
        elif reason != _CONFIG_ONLY:
            kept.append(candidate)  # a trial if its result.json says so, read to see
        elif (failed := _config_read_failure(candidate)) and not _inside(
            candidate.real, candidates
        ):
            # a config.json alone outside any job dir that cannot be read: a job that died as it
            # started, perhaps, or another tool's; said, not counted as a trial or a job (one in
            # a dir read as a trial is that trial's file: its artifacts/, say)
            found.problems.append(
                WalkProblem(
                    f"{candidate.text}/config.json",
                    failed.kind,
                    f"{failed.message}. Nothing beside it (no result.json, no "
                    "trial dirs) says whether its dir is a harbor job or trial, so the dir was "
                    "not ingested: restore the file, or ignore this if the dir is not harbor's",
                )
            )
        # (a readable config.json alone outside any job dir: some other tool's, not a trial)
    found.candidates = kept
    return trials


def _config_read_failure(candidate: Candidate) -> DirProblem | None:
    """Why its config.json could not be read at all (not: a JSON array or value was read)."""
    problem = candidate.dir_problem
    readable = problem is None or problem.kind in ("not_an_object", "unreadable_dir")
    return None if readable else problem


def _inside(real: str, dirs: set[str]) -> bool:
    """Whether a dir above `real` is one of `dirs`."""
    parent = os.path.dirname(real)
    while parent != real:
        if parent in dirs:
            return True
        real, parent = parent, os.path.dirname(parent)
    return False


def _leave_out_oversized_partitions(found: Discovery) -> None:
    """Jobs whose run label no partition dir name can hold are left out, one problem each: their
    files could not be written, and the ingest of everything else must not fail with them."""
    jobs = _jobs_by_real(found)
    oversized = {real: job for real, job in jobs.items() if oversized_partition_dir(job.run)}
    if not oversized:
        return
    trial_dirs = [c for c in found.candidates if c.job.real in oversized]
    found.candidates = [c for c in found.candidates if c.job.real not in oversized]
    found.jobs = [job for job in found.jobs if job.real not in oversized]
    for real, job in oversized.items():
        name = oversized_partition_dir(job.run) or ""
        n_trials = sum(1 for c in trial_dirs if c.job.real == real)
        found.problems.append(
            WalkProblem(
                str(job.path),
                "name_too_long",
                f"run dir {job.run!r} escapes to the partition dir name {name[:40]}... of "
                f"{len(name.encode('utf-8'))} bytes, past the {NAME_MAX_BYTES}-byte file-name "
                f"limit, so job {job.path} and its {n_trials} trial dir(s) were not ingested. "
                "Rename the run dir shorter (each of \"#%'*/:=?[\\]^{ escapes to 3 bytes) and "
                "ingest again",
            )
        )
