"""`jobs`: one row per harbor job dir (the parent of its trials): `config.json` is harbor's
`JobConfig`, `result.json` its `JobResult` (which holds no trial results)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from wmo_lake.collection import Collection
from wmo_lake.discover import Job, oversized_step_dir
from wmo_lake.jsonfile import ReadFailure, read_json, to_json_text
from wmo_lake.tables.agent_caps import caps
from wmo_lake.tables.fields import Fields, ProblemLog


def _load(path: Path, problems: ProblemLog) -> tuple[str, Any]:
    doc = read_json(path, problems)
    if doc is None:
        return "absent", None
    if isinstance(doc, ReadFailure):
        problems.add(doc.kind, path, doc.message + "; the job's columns from it are null")
        return "unreadable", None
    if not isinstance(doc, dict):
        problems.add("not_an_object", path, f"{path} is not a JSON object; its columns are null")
        return "unreadable", None
    return "ok", doc


def row(job: Job, problems: ProblemLog) -> dict[str, Any]:
    """The `jobs` row of a job dir: its labels, then what its config.json and result.json say
    (of its agents, the first: a trial records its own, `trials`)."""
    job_dir = job.path
    config_status, config_doc = _load(job_dir / "config.json", problems)
    result_status, result_doc = _load(job_dir / "result.json", problems)
    config = Fields(config_doc, job_dir / "config.json", problems)
    result = Fields(result_doc, job_dir / "result.json", problems)
    agents = config.list("agents")
    agent = agents[0] if agents else None
    if agent is not None and not isinstance(agent, dict):
        problems.add("wrong_type", config.path, "config.json: agents[0] is not an object")
        agent = None
    first = Fields(agent, config.path, problems)
    kwargs = first.obj("kwargs")
    check_sink_dir(job.collection, f"job {job.path}", "its trials have", problems)
    check_step_dir(job, problems)
    return {
        "job_key": job.key,
        "batch": job.batch,
        "run": job.run,
        "step": job.step,
        "job_dir": str(job_dir),
        "job_name": config.str("job_name"),
        "job_id": result.str("id"),
        "agent_import_path": first.str("import_path"),
        "agent_name": first.str("name"),
        "model_name": first.str("model_name"),
        "n_agents": len(agents) if agents is not None else None,
        "n_attempts": config.int("n_attempts"),
        **caps(first),
        "model_path": first.str("kwargs", "llm_kwargs", "model_path"),
        "temperature": first.number("kwargs", "temperature"),
        "agent_kwargs": None if kwargs is None else to_json_text(kwargs),
        "started_at": result.str("started_at"),
        "finished_at": result.str("finished_at"),
        "n_total_trials": result.int("n_total_trials"),
        "config_status": config_status,
        "result_status": result_status,
        "collection_path": job.collection_path,
        "token_sink_dir": job.token_sink_dir,
        "sink_dir": None if job.sink is None else job.sink.path,
    }


def check_sink_dir(collection: Collection, owner: str, lacking: str, problems: ProblemLog) -> None:
    """A pi-bridge job (or a trial of another agent: `owner` names it, `lacking` says what has no
    spans) whose sink dir does not exist: one problem, naming it and the option."""
    sink = collection.sink
    if sink is not None and not sink.exists:
        problems.add(
            "sink_dir_missing",
            sink.path,
            f"{owner} records token_sink_dir {collection.token_sink_dir!r}, but no such dir "
            f"exists (looked for {sink.looked_in}); {lacking} no spans. If the tree was "
            "moved or copied, point at the sinks with --sink-root OLD=NEW (OLD: the recorded "
            "prefix, NEW: where it is now)",
        )


def check_step_dir(job: Job, problems: ProblemLog) -> None:
    """A job under a `step-N` dir whose N no 64-bit column holds: its step is null, said once."""
    name = oversized_step_dir(job.path) if job.step is None else None
    if name is not None:
        problems.add(
            "out_of_range",
            job.path,
            f"step dir {name} numbers a step past 64 bits; the job's and its trials' rows have "
            "step null (partition step=__HIVE_DEFAULT_PARTITION__). Rename the dir to its real "
            "step number and ingest again",
        )
