"""One ingested unit -> its rows in every table it has rows in: a trial dir (`extract_trial`), a
job dir (`extract_job`), a problem of the walk (`extract_walk_problem`), and a second dir holding
a trial already read (`duplicate`). Trial dirs are extracted in reader processes, so this takes
and returns plain picklable values, reads each file once, and never raises on bad input: what it
cannot read becomes `problems` rows attached to the trial (or to the dir, when there is no trial
to attach to).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from wmo_lake.collection import PI_BRIDGE, Collection, agent_collection_path
from wmo_lake.discover import DirProblem, Job, TrialTask, WalkProblem, config_problem
from wmo_lake.jsonfile import ReadFailure, read_bytes, read_json, watching_reads
from wmo_lake.pending import PendingRows
from wmo_lake.store import DUPLICATE, JOB, OTHER, TRIAL, UNREADABLE, WALK
from wmo_lake.tables import (
    TABLES,
    atif,
    ctrf_tests,
    jobs,
    spans,
    stop_reasons,
    trajectories,
    trial_log,
    trials,
)
from wmo_lake.tables.fields import Fields, ProblemLog
from wmo_lake.tables.trial_result import decode_trial_result


@dataclass
class Extracted:
    """What one dir held: its kind and unit, and its rows per table (until they are written)."""

    kind: str
    unit_key: str
    trial_name: str | None = None
    tables: dict[str, pa.Table | PendingRows] = field(default_factory=dict)
    n_problems: int = -1  # counted from `tables` unless given
    fingerprint: str | None = None  # of the dir, taken just before it was read (read_task)
    # the token_sink_dir (as recorded) it was read from, when the walk did not know it
    read_sink: str | None = None
    # files of it that could not be read for a reason a later read may not meet (jsonfile's
    # `watching_reads`): the next ingest tries them again (fingerprint.with_failed_reads)
    failed_reads: tuple[str, ...] = ()
    # agent/ files its continuation chain named that no fingerprint rule watches, with their
    # sizes and mtimes just before the read (fingerprint.with_named)
    named: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n_problems < 0:
            problems = self.tables.get("problems")
            self.n_problems = 0 if problems is None else problems.num_rows

    def without_tables(self) -> Extracted:
        """The summary a reader process sends back once it has written the rows itself."""
        return Extracted(
            self.kind,
            self.unit_key,
            self.trial_name,
            {},
            self.n_problems,
            self.fingerprint,
            self.read_sink,
            self.failed_reads,
            self.named,
        )


def _not_a_trial(
    task: TrialTask,
    problems: ProblemLog,
    kind: str,
    path: Path,
    message: str,
    unreadable: bool = False,
) -> Extracted:
    """A dir whose result.json could not be read as a trial's (`unreadable`: could not be read
    at all, so a dir in a job dir counts as a trial though it has no config.json to say so).
    An unreadable trial is one `problems` row (kind unreadable_trial) saying every cause."""
    if task.trial_shaped_config or (unreadable and task.in_job_dir):
        dir_problem = _dir_problem_now(task)
        dir_kind = dir_problem.kind if dir_problem is not None else None
        if dir_kind == "unreadable_dir":
            why = "no readable result.json: the dir itself cannot be listed"
            advice = "Make it readable and ingest again"
        else:
            if dir_kind is not None:
                why = "no readable result.json, and its config.json cannot be read either"
            elif os.path.exists(f"{task.path}/config.json"):
                why = "a trial config.json but no readable result.json"
            else:  # (in a job dir, where harbor puts only trial dirs)
                why = "no readable result.json and no config.json"
            if _permission_denied(f"{task.path}/result.json"):
                advice = "This user may not read it: make its files readable and ingest again"
            else:
                advice = (
                    "If the trial is still running, re-ingest after it finishes; otherwise re-run "
                    "it (a dir removed since, as harbor's job resume removes one, is dropped by "
                    "`wmo-lake ingest --prune`)"
                )
        # (rows the reading logged before it gave up, a lone surrogate, are causes too: one row)
        causes = [f"{row['kind']}: {row['message']}" for row in problems.rows]
        problems.rows.clear()
        causes.append(f"{kind}: {message}" if message else kind)
        if dir_problem is not None:
            causes.append(f"{dir_problem.kind}: {dir_problem.message}")
        problems.add(
            "unreadable_trial",
            task.path,
            f"trial dir {task.path} has {why}; it has no trials row and is counted in "
            f"unreadable_trials. {advice}. ({'; '.join(causes)})",
        )
        return Extracted(UNREADABLE, problems.unit_key, tables=_problem_table(problems))
    if message:
        problems.add(kind, path, message)
    return Extracted(OTHER, problems.unit_key, tables=_problem_table(problems))


def _permission_denied(path: str) -> bool:
    """Whether `path` cannot be opened for want of a permission (its dir's, or its own): then
    the trial is not unfinished, and re-running it would not help."""
    try:
        with open(path, "rb"):
            return False
    except PermissionError:
        return True
    except OSError:
        return False


def _dir_problem_now(task: TrialTask) -> DirProblem | None:
    """The walk's problem with the dir (`TrialTask.dir_problem`), as it is now. A config.json
    the walk could not read is read again: the walk may have caught harbor writing it, and this
    read's fingerprint (taken just before) is of the file as it is now, so a problem kept from
    the walk would stay in the lake with the trial, never read again."""
    problem = task.dir_problem
    if problem is None or problem.kind == "unreadable_dir":
        return problem
    config_path = f"{task.path}/config.json"
    config = read_json(config_path)
    return None if config is None else config_problem(config, config_path)


def _add_dir_problem(task: TrialTask, problems: ProblemLog) -> None:
    """The dir's problem now (`_dir_problem_now`), if any, as a `problems` row."""
    problem = _dir_problem_now(task)
    if problem is not None:
        where = task.path if problem.kind == "unreadable_dir" else f"{task.path}/config.json"
        problems.add(problem.kind, where, problem.message)


def _extract_failed(task: TrialTask, error: Exception) -> Extracted:
    """A dir whose reading raised what no rule here expects (a wmo-lake bug: every bad input has
    its own problem): an unreadable trial that says so, instead of an ingest that fails whole."""
    problems = ProblemLog(
        unit_key=f"dir:{task.real}", batch=task.batch, trial_name=Path(task.path).name
    )
    # (an unreadable trial like any other, so rollout_stats counts it; its cause by kind)
    problems.add(
        "unreadable_trial",
        Path(task.path),
        f"trial dir {task.path} could not be read (extract_failed: {type(error).__name__}: "
        f"{error}); it has no trials row and is counted in unreadable_trials. No rule here "
        "expected this: please report it to wmo-lake with the dir's files",
    )
    return Extracted(UNREADABLE, problems.unit_key, tables=_problem_table(problems))


def _problem_table(problems: ProblemLog) -> dict[str, pa.Table]:
    return {"problems": problems.table()} if problems.rows else {}


def extract_job(job: Job) -> Extracted:
    """A job dir's `jobs` row and the problems of its config.json and result.json."""
    problems = ProblemLog(unit_key=job.key, batch=job.batch)
    with watching_reads() as failed:
        row = jobs.row(job, problems)
    tables: dict[str, pa.Table | PendingRows] = {
        "jobs": PendingRows.from_rows([row], TABLES["jobs"].schema.names)
    }
    return Extracted(
        JOB, job.key, tables=tables | _problem_table(problems), failed_reads=tuple(failed)
    )


def extract_walk_problem(problem: WalkProblem) -> Extracted:
    """A problem of the walk (a symlink loop, a dir that cannot be listed) as a `problems` row;
    an unreadable trial's (a trial dir whose name is not UTF-8) in its batch."""
    name = os.path.basename(problem.path) if problem.batch is not None else None
    problems = ProblemLog(unit_key=problem.key, batch=problem.batch, trial_name=name)
    problems.add(problem.kind, problem.path, problem.message)
    return Extracted(WALK, problems.unit_key, tables=_problem_table(problems))


def duplicate(task: TrialTask, extracted: Extracted, first_source: str) -> Extracted:
    """A second dir holding a trial this ingest already read: kept out, and said so."""
    problems = ProblemLog(
        unit_key=f"dup:{task.real}", batch=task.batch, trial_name=extracted.trial_name
    )
    problems.add(
        "duplicate_trial",
        task.path,
        f"{task.path} holds trial {extracted.unit_key}, which {first_source} also holds; the "
        "trial is stored once, from the first dir read",
    )
    # (what its fingerprint watches stays: the catalog keeps it under the same fingerprint)
    return Extracted(
        DUPLICATE,
        problems.unit_key,
        extracted.trial_name,
        _problem_table(problems),
        fingerprint=extracted.fingerprint,
        read_sink=extracted.read_sink,
        failed_reads=extracted.failed_reads,
        named=extracted.named,
    )


def begin_reading() -> None:
    """Each reader (a reader process, an in-process read, a Spark task) calls this before its
    first dir: what extraction caches for one reader's run starts empty."""
    trials.forget_resolved_names()


def read_task(task: TrialTask) -> Extracted:
    """`extract_trial`, with the dir's fingerprint taken first (in the reader: on a first ingest
    the ingest process fingerprints nothing, so that work is spread over the readers too)."""
    from wmo_lake.fingerprint import agent_listing, trial_fingerprint, with_named, with_read_sink

    agent_names = agent_listing(task.path)
    fingerprint = trial_fingerprint(task, agent_names)
    with watching_reads() as failed:
        try:
            extracted = extract_trial(task, agent_names)
        except MemoryError:
            raise
        except Exception as error:  # one dir that trips the reading never aborts the batch
            extracted = _extract_failed(task, error)
    extracted.failed_reads = tuple(failed)
    if extracted.read_sink is not None:  # (its size and mtime taken after the read)
        fingerprint = with_read_sink(fingerprint, task, extracted.read_sink)
    extracted.fingerprint = with_named(fingerprint, list(extracted.named.values()))
    return extracted


def extract_trial(task: TrialTask, agent_names: list[str] | None = None) -> Extracted:
    """One trial dir's rows. `agent_names`: its agent/ dir's listing, when the caller has it."""
    trial_dir = Path(task.path)
    result_path = trial_dir / "result.json"
    problems = ProblemLog(unit_key=f"dir:{task.real}", batch=task.batch, trial_name=trial_dir.name)
    # Files are read by their path strings: a joined Path costs more to turn into one (~5 us)
    # than the open itself, for the five files a small trial reads.
    data = read_bytes(f"{task.path}/result.json")
    if data is None:
        return _not_a_trial(
            task,
            problems,
            "missing_result",
            result_path,
            f"{result_path} does not exist" if task.trial_shaped_config else "",
        )
    if isinstance(data, ReadFailure):
        return _not_a_trial(task, problems, data.kind, result_path, data.message, True)
    doc: Any = decode_trial_result(data, result_path, problems)
    if isinstance(doc, ReadFailure):
        return _not_a_trial(task, problems, doc.kind, result_path, doc.message, True)
    if not isinstance(doc, dict):
        return _not_a_trial(
            task,
            problems,
            "not_an_object",
            result_path,
            f"{result_path} holds a JSON {'array' if isinstance(doc, list) else 'value'}, "
            "expected harbor's TrialResult object",
        )
    trial_name = doc.get("trial_name")
    if not isinstance(trial_name, str):  # ("" is a TrialResult's, as harbor's model reads it)
        message = (
            f"{result_path} has no string trial_name, so it is not a TrialResult"
            if task.trial_shaped_config
            else ""
        )
        return _not_a_trial(task, problems, "not_a_trial_result", result_path, message)

    unnamed = not trial_name
    if unnamed:  # (WMO's TrialRecord and TrainDatum need a name: theirs is the dir's)
        trial_name = trial_dir.name
    trial_id = doc.get("id")
    key = trial_id if isinstance(trial_id, str) and trial_id else f"dir:{task.real}"
    early = problems.rows  # (what the decode reported, now under the trial's key)
    problems = ProblemLog(unit_key=key, batch=task.batch, trial_name=trial_name)
    for early_row in early:
        problems.add(early_row["kind"], early_row["path"], early_row["message"])
    if unnamed:
        problems.add(
            "wrong_type",
            result_path,
            f'{result_path.name}: trial_name is "", expected a name; the trial is named by its '
            f"dir, {trial_name!r}, as WMO's TrialRecord names a trial (its artifact dir's name)",
        )
    _add_dir_problem(task, problems)  # (when broken; nothing is read from it otherwise)
    fields = Fields(doc, result_path, problems)
    row = trials.row(fields)
    agent_columns, agent = trials.agent_row(fields, task.agent, trial_dir / "config.json")
    row.update(agent_columns)
    collection = _collection(task, agent, problems)
    row["collection_path"] = collection.path

    pi_bridge = collection.path == PI_BRIDGE
    sink_file = _sink_file(collection, trial_dir)
    if pi_bridge:  # spans only from the trial's own sink (WMO's `distill.tokens.load_trial_spans`)
        found = _sink_spans(collection, sink_file, problems)
    else:  # terminus-2: only from the result's rollout_details (`load_trial_rollout_spans`)
        found = spans.from_rollout_details(
            doc.get("agent_result"), doc.get("step_results"), result_path, problems
        ) or spans.Spans(spans.ABSENT, [])
    try:
        span_table = spans.rows(found, key, task.batch, trial_name)
    except (OverflowError, pa.ArrowInvalid) as error:
        source = sink_file if pi_bridge and sink_file is not None else result_path
        problems.add(
            "out_of_range",
            source,
            f"{Path(source).name}: a token id does not fit in 64 bits ({error}); the trial "
            "contributes no training data",
        )
        found = spans.Spans(spans.OUT_OF_RANGE, [])
        span_table = spans.rows(found, key, task.batch, trial_name)

    report = ctrf_tests.read_report(task.path, problems)
    trajectory_status, trajectory, trajectory_bytes = _read_trajectory(task.path, problems)
    # The trace is the pi-bridge path's stop reason; terminus-2's is reconstructed, trace or not
    # (its trace is evidence only: the stop_reasons row says it is there, the view ignores it).
    trace = stop_reasons.read_trace(trial_dir, problems, decides=pi_bridge, agent_names=agent_names)
    identity = {"trial_key": key, "batch": task.batch, "trial_name": trial_name}
    row.update(
        identity,
        run=task.run,
        step=task.step,
        job_key=task.job_key,
        artifact_dir=task.path,
        spans_status=found.status,
        n_spans=len(found.turns),
        dropped_turns=trial_log.dropped_turns(task.path, problems),
        result_bytes=len(data),
        **report.trial_columns(),
    )
    stop_row = identity | stop_reasons.row(
        exception_type=row["exception_type"],
        n_episodes=row["n_episodes"],
        trajectory_status=trajectory_status,
        trajectory=trajectory,
        trace=trace,
    )
    # Every trajectory file (trajectory.json as already read) -> trajectories / steps / tool_calls.
    found_trajectories = trajectories.read_trajectories(
        trial_dir / "agent", trajectory_status, trajectory, problems, trajectory_bytes, agent_names
    )
    trajectory_tables = found_trajectories.tables(identity)
    del trajectory
    tables = {
        "trials": PendingRows.from_rows([row], TABLES["trials"].schema.names),
        "spans": span_table,
        "stop_reasons": PendingRows.from_rows([stop_row], TABLES["stop_reasons"].schema.names),
        "tests": ctrf_tests.table(report, key, task.batch, trial_name),
        **trajectory_tables,
        **_problem_table(problems),
    }
    return Extracted(
        TRIAL,
        key,
        trial_name,
        {k: v for k, v in tables.items() if v.num_rows},
        read_sink=_unwatched_sink(task, collection) if pi_bridge else None,
        named=found_trajectories.named,
    )


def _collection(task: TrialTask, agent: dict[str, Any] | None, problems: ProblemLog) -> Collection:
    """How the trial is read: as the agent it records says, else as its job's first agent says
    (discovery decided it from its config.json's agent, which names the same token_sink_dir
    whenever it names an agent: only then is it taken as decided). A job whose config.json names
    one agent is read by that record: every trial of it ran that agent. A sink dir of its own
    that does not exist is its own problem (its job's is the job's)."""
    job = task.job
    collection = task.collection
    if (
        agent is not None
        and job.n_agents != 1
        and agent_collection_path(agent)
        != (
            collection.path,
            collection.token_sink_dir,
        )
    ):
        collection = job.collection_of(agent)
    if collection.token_sink_dir != job.token_sink_dir:
        jobs.check_sink_dir(collection, f"trial {task.path}", "it has", problems)
    return collection


def _unwatched_sink(task: TrialTask, collection: Collection) -> str | None:
    """The token_sink_dir (as its agent records it) of a pi-bridge trial's sinks when its
    fingerprint does not watch them (its job's config.json names no agent of that sink dir:
    only its result.json did); the next fingerprint resolves it again (`with_read_sink`)."""
    # (by the dir as recorded: two records that resolve to one dir today may not tomorrow)
    if collection.sink is None or collection.token_sink_dir == task.collection.token_sink_dir:
        return None
    return collection.token_sink_dir


def _sink_file(collection: Collection, trial_dir: Path) -> Path | None:
    """`{sink dir}/{trial dir name}.jsonl` for a pi-bridge trial (agents.py names the sink after
    the trial dir), else None."""
    if collection.path != PI_BRIDGE or collection.sink is None:
        return None
    return Path(collection.sink.path) / f"{trial_dir.name}.jsonl"


def _sink_spans(
    collection: Collection, sink_file: Path | None, problems: ProblemLog
) -> spans.Spans:
    """A pi-bridge trial's spans: `{sink dir}/{trial dir name}.jsonl`; none when its sink dir is
    missing (a problem says so) or the trial wrote no sink (it never sampled)."""
    sink = collection.sink
    if sink is None or not sink.exists or sink_file is None:
        return spans.Spans(spans.SINK_DIR_MISSING, [])
    if not os.path.exists(sink_file):  # (a dir or FIFO there is read, and said unreadable)
        return spans.Spans(spans.ABSENT, [])
    from wmo_lake.tables.sink import from_sink

    return from_sink(sink_file, problems)


def _read_trajectory(trial_dir: str, problems: ProblemLog) -> tuple[str, Any, int | None]:
    """agent/trajectory.json: its status, its document when ok, and its size when read."""
    path = f"{trial_dir}/agent/trajectory.json"
    doc, size = atif.read(path, problems)
    if doc is None:
        return "absent", None, None
    if isinstance(doc, ReadFailure):
        problems.add(doc.kind, path, doc.message + "; completion is read as not declared")
        return "unreadable", None, size
    if not atif.is_trajectory(doc):
        problems.add(
            "malformed_trajectory",
            path,
            f"{path} is not an ATIF trajectory (expected an object with a `steps` array); "
            "completion is read as not declared",
        )
        return "malformed", None, size
    return "ok", doc, size
