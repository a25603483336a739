"""What decides whether an ingested dir must be read again: the sizes and mtimes of the files its
rows come from, the labels it is stored under, and the extract version.

Needs neither pyarrow nor duckdb: an ingest that finds nothing changed stops here.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from wmo_lake.collection import Collection
from wmo_lake.columns import extract_version
from wmo_lake.discover import Candidate, Job, TrialTask, WalkProblem

# Derived from the column specs (and a number for changes of extraction they do not show): when
# it moves, every dir is re-read on the next ingest.
EXTRACT_VERSION = extract_version()
# The files of a trial dir its rows come from (besides agent/trajectory*.json and its sinks).
TRIAL_FILES = (
    "result.json",
    "config.json",
    "agent/wmo-run.json",
    "wmo-run.json",
    "verifier/ctrf.json",
    "trial.log",
)


def _stat_token(path: Path | str, which_file: bool = False) -> str:
    """A file's size and mtime ('-' while it is not there); `which_file` adds its device and
    inode, for the agent/ trajectory files: a continuation chain is followed by which file a ref
    names (a link to a file already read ends it), which a link made or broken changes alone."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # (ValueError: a recorded path with a NUL in it)
        return "-"
    if which_file:
        return f"{st.st_size}:{st.st_mtime_ns}:{st.st_dev}:{st.st_ino}"
    return f"{st.st_size}:{st.st_mtime_ns}"


def _digest(parts: Iterable[str]) -> str:
    return hashlib.sha1("\x00".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def _collection(collection: Collection) -> list[str]:
    """How a job's (or a trial's) trials are read: its collection path and where its sinks are."""
    sink = collection.sink
    return [collection.path, str(collection.token_sink_dir), str(sink and (sink.path, sink.exists))]


def agent_listing(trial_dir: str) -> list[str] | None:
    """The names in a trial's agent/ dir: none when it has no such dir, None when its agent/
    cannot be listed (one that may be entered but not read: its files still open by name)."""
    try:
        return os.listdir(f"{trial_dir}/agent")
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError:
        return None


def _unsearchable(directory: str) -> bool:
    """Whether nothing under `directory` can be looked up (it, or a dir above it, has no search
    permission): then its agent/ dir cannot be listed either, though it may hold nothing."""
    try:
        os.stat(f"{directory}/agent")
    except PermissionError:
        return True
    except (OSError, ValueError):
        return False
    return False


def trial_fingerprint(
    candidate: Candidate | TrialTask,
    agent_names: list[str] | None = None,
    read_sink: str | None = None,
    named: Iterable[str] = (),
) -> str:
    """What decides whether a trial dir must be re-read: its files' sizes and mtimes, the
    trajectories beside them, its sink file, its collection path (its agent's, else its job's),
    and the labels it would be stored under. A reader process takes it (of a TrialTask) just
    before it reads the dir, with the `agent_listing` the read then uses (one listing, not two:
    ~15 us of a small trial's ~400). `read_sink`: the sink dir its last read found it in, when
    the walk could not know it (`with_read_sink`). `named`: the agent/ files its last read's
    continuation chain named that no rule here watches (`with_named`)."""
    job = candidate.job
    collection = candidate.collection
    directory = str(candidate.path)  # plain strings: pathlib's joins cost more than the stats
    parts = [EXTRACT_VERSION, job.batch, str(job.run), str(job.step), *_collection(collection)]
    # whether a sink dir problem is the trial's or its job's follows the job's record of its
    # agents (`extract._collection`), which can change with no file of the trial's changing
    parts.append(f"job_sink={job.token_sink_dir}:{job.n_agents}")
    # how discovery took it decides how a broken result.json counts, and can change with no file
    # of its own changing (a sibling trial dir proves its parent a job dir)
    parts.append(f"shape={candidate.trial_shaped_config:d}{candidate.in_job_dir:d}")
    # a dir that could not be listed (its problem is recorded) is read again once it can be
    # (a config.json problem is the file's own: its size and mtime are watched)
    dir_problem = candidate.dir_problem
    parts.append(f"unlisted={dir_problem is not None and dir_problem.kind == 'unreadable_dir':d}")
    parts += [f"{name}={_stat_token(f'{directory}/{name}')}" for name in TRIAL_FILES]
    if agent_names is None:
        agent_names = agent_listing(directory)
    if agent_names is None:
        agent_names = ["trajectory.json"]
        if _unsearchable(directory):
            # Nothing in the dir opens by name, so its read finds nothing new until a permission
            # changes, which its files' stat tokens ('-' now) then show.
            parts.append("agent=unsearchable")
        else:
            # Unlistable: the files read from it by name (the continuations trajectory.json
            # names) cannot all be known here, so such a dir never reads as unchanged.
            parts.append(f"agent=unlisted:{time.time_ns()}")
    agent = f"{directory}/agent"
    # the trajectory files, and any JSON file a trajectory's continued_trajectory_ref may name
    agent_files = sorted(n for n in agent_names if watched_by_name(n))
    parts += [f"agent/{name}={_stat_token(f'{agent}/{name}', True)}" for name in agent_files]
    name = os.path.basename(directory)
    if collection.sink is not None:
        parts.append(f"sink={_stat_token(os.path.join(collection.sink.path, f'{name}.jsonl'))}")
    # its result.json may name another of its job's agents than discovery took it for (its
    # config.json records none, or another): the sink it is then read from is watched too
    for sink in job.agent_sinks:
        parts.append(f"sink={_stat_token(os.path.join(sink.path, f'{name}.jsonl'))}")
    fingerprint = _digest(parts)
    if read_sink is not None:
        fingerprint = with_read_sink(fingerprint, candidate, read_sink)
    return with_named(fingerprint, [named_token(directory, name) for name in named])


RETRY = "retry:"  # a catalog fingerprint that names files its read could not read


def with_failed_reads(fingerprint: str, failed: Iterable[str]) -> str:
    """The fingerprint a dir is stored under when files of it could not be read for a reason
    that may pass (EACCES, EIO: jsonfile.watching_reads): a permission granted through a chmod,
    a chown or a group moves no size or mtime, so `matches` also tries those files again."""
    paths = sorted(set(failed))
    return f"{RETRY}{fingerprint}:{json.dumps(paths)}" if paths else fingerprint


def matches(stored: str, fingerprint: str) -> bool:
    """Whether a dir stored under `stored` is unchanged, its fingerprint now `fingerprint`: the
    same, and none of the files its last read could not read reads now (one that still fails
    leaves the dir as it is: no read, no new generation)."""
    if stored == fingerprint:
        return True
    if not stored.startswith(RETRY):
        return False
    base, _, failed = stored.removeprefix(RETRY).partition(":")
    return base == fingerprint and not any(_reads(path) for path in json.loads(failed))


def _reads(path: str) -> bool:
    """Whether the file that failed to read now reads in full."""
    from wmo_lake.jsonfile import read_whole_file

    try:
        read_whole_file(path)
    except OSError:
        return False
    return True


def watched_by_name(name: str) -> bool:
    """An agent/ file every trial fingerprint watches: a trajectory, or a JSON file a
    trajectory's continued_trajectory_ref may name (a reference to any other name is watched
    once a read has met it: `with_named`)."""
    return name.startswith("trajectory") or (
        name.lower().endswith(".json") and name != "wmo-run.json"
    )


def named_token(directory: str, name: str) -> str:
    """The size and mtime of agent/NAME of the trial dir `directory` ('-' while it is not
    there), as `with_named` takes them."""
    return f"agent/{name}={_stat_token(f'{directory}/agent/{name}', True)}"


def with_named(fingerprint: str, tokens: list[str]) -> str:
    """A trial's fingerprint that also watches the agent/ files its continuation chain named
    under a name no rule watches (`watched_by_name`; a reference may name any file), each as
    `named_token` took it just before the read (or found it missing): an edit to one, or one
    that appears, reads the trial again. The catalog keeps the names (CatalogEntry.named)."""
    return _digest([fingerprint, *tokens]) if tokens else fingerprint


def with_read_sink(fingerprint: str, candidate: Candidate | TrialTask, read_sink: str) -> str:
    """A trial's fingerprint that also watches its sink as `read_sink` finds it: the
    token_sink_dir, as recorded, of the agent its result.json names, which its job's config.json
    did not (it names no agents, or not this one), so the walk could not watch it (the catalog
    keeps it: CatalogEntry.read_sink). Resolved again each time, as the read resolves it (the
    `--sink-root` remaps, the nearest ancestor where a relative dir exists): where the sinks
    are is watched, not only the file the last read found."""
    from wmo_lake.collection import resolve_sink_dir

    job = candidate.job
    sink = resolve_sink_dir(read_sink, job.path, job.sink_roots)
    name = os.path.basename(str(candidate.path))
    file = _stat_token(os.path.join(sink.path, f"{name}.jsonl"))
    return _digest([fingerprint, f"read_sink={sink.path}:{sink.exists:d}", f"sink={file}"])


def job_fingerprint(job: Job) -> str:
    """A job dir's: its config.json and result.json, its labels, and where its sinks are."""
    return _digest(
        [
            EXTRACT_VERSION,
            job.batch,
            str(job.run),
            str(job.step),
            *_collection(job.collection),
            _stat_token(job.path / "config.json"),
            _stat_token(job.path / "result.json"),
        ]
    )


def walk_fingerprint(problem: WalkProblem) -> str:
    """A walk problem's: recorded again only when what it says changed."""
    return _digest([problem.kind, problem.message, str(problem.batch)])
