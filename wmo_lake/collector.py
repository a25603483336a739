"""The collector: one real harbor job per training step, then that step into the lake.

WMO's `collect_rollouts` (wmo/distill/rollouts.py) runs one harbor job per training step into a
fresh jobs dir, `<run_dir>/harbor/step-NNNN`, so a step never resumes another step's trials.
This is the same contract on harbor's own Python API (`JobConfig`, `Job`), for any job template:

    plan = plan_step("job.yaml", "runs/exp1", 3, task_ids=["hello-file"], attempts=8)
    result = collect("job.yaml", "runs/exp1", 3, lake="lake")
    result.stats      # one row: rollout_stats for this step's batch (a polars DataFrame)
    result.records    # one row per trial: trial_records for the batch (spans on request)

Resuming is harbor's own: the job dir is keyed by the step, and `Job` keeps every trial whose
result.json it can read and re-runs the rest. Before handing a dir back to harbor, the two kinds of
trial dir it would otherwise keep or double are removed: a trial cancelled by an interrupt
(CancelledError, which `harbor job resume` removes too), and one whose result.json was cut off
mid-write (which harbor skips, and `harbor job resume` leaves, running a fresh trial beside it); a
whole result.json this harbor refuses is a finished trial's, never removed (the step is refused,
naming it). A step whose every trial is done is not run again. The step's job dir is ingested
with --prune, so a removed trial dir leaves the lake.

harbor is the optional extra `wmo-lake[harbor]`, imported only here and only when called, so
`ingest`, `sql`, `stats` and the exports work without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
import shutil
import sys
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from wmo_lake.stopping import run_async_stoppably

if TYPE_CHECKING:
    import polars as pl
    from harbor.models.job.config import JobConfig
    from harbor.models.trial.config import TaskConfig
    from harbor.models.trial.result import TrialResult

    from wmo_lake.ingest import IngestSummary
    from wmo_lake.store import Store

MISSING_HARBOR_EXTRA = (
    "wmo-lake collect runs harbor, which is not installed: install the extra with "
    "`pip install 'wmo-lake[harbor]'` (or `make setup` in a checkout) and retry"
)
DEFAULT_JOB_NAME = "rollouts"
"""The job dir's name under the step's jobs dir when the template names none (a fixed name, so
the next call with the same arguments finds the step again; harbor's default is a timestamp)."""
LEGACY_JOB_KEYS = {"orchestrator", "plugins"}  # read by harbor's migrate_legacy_job_config
CANCELLED = "CancelledError"  # harbor's job.CANCELLED_ERROR_TYPE; `harbor job resume` drops these


class CollectError(ValueError):
    """A collect that cannot start as asked (bad template, unknown task, another config)."""


class MissingHarborError(ImportError):
    """The harbor extra is not installed."""


class HarborRunError(RuntimeError):
    """harbor could not run the job (not a failed trial: those are results)."""


def step_name(step: int) -> str:
    return f"step-{step:04d}"


def jobs_dir_for(run_dir: Path | str, step: int) -> Path:
    """Where a step's harbor job lives: `<run_dir>/harbor/step-NNNN` (WMO's layout)."""
    return Path(os.path.abspath(run_dir)) / "harbor" / step_name(step)


def _require_harbor() -> None:
    try:
        import harbor  # noqa: F401
    except ImportError as error:
        raise MissingHarborError(MISSING_HARBOR_EXTRA) from error


# ----------------------------------------------------------------------------- the template


def load_template(path: Path | str) -> dict[str, Any]:
    """The template file (YAML or JSON) as a mapping; a clear error naming the file otherwise."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise CollectError(
            f"cannot read the job template {path}: {error.strerror or error}"
        ) from error
    except UnicodeDecodeError as error:  # a ValueError, not an OSError: would be a traceback
        raise CollectError(
            f"the job template {path} is not UTF-8 text (byte {error.start}); save it as UTF-8"
        ) from error
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise CollectError(f"the job template {path} is not valid YAML: {error}") from error
    if raw is None:  # (empty, or only comments: YAML reads it as null, said as "NoneType")
        raise CollectError(
            f"the job template {path} is empty; give harbor JobConfig fields (agents, "
            "environment, tasks or datasets)"
        )
    if not isinstance(raw, dict):
        raise CollectError(
            f"the job template {path} must be a mapping of harbor JobConfig fields, "
            f"got {type(raw).__name__}"
        )
    return raw


def apply_sets(raw: dict[str, Any], assignments: Iterable[str]) -> dict[str, Any]:
    """Apply `--set dotted.path=VALUE` overrides; VALUE is read as YAML (8, true, [a, b], text).

    List items are addressed by index (`agents.0.kwargs.max_turns=8`); a missing mapping key
    along the way is created.
    """
    import yaml

    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        if not sep or not key.strip():
            raise CollectError(f"--set {assignment!r}: expected KEY=VALUE, e.g. n_attempts=4")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        parts = key.strip().split(".")
        if not all(parts):
            raise CollectError(
                f"--set {key}: an empty name between dots; write the dotted path of a field, "
                "e.g. agents.0.kwargs.max_turns=8"
            )
        node: Any = raw
        for depth, part in enumerate(parts):
            where = ".".join(parts[: depth + 1])
            last = depth == len(parts) - 1
            if isinstance(node, list):
                if not part.isdigit() or int(part) >= len(node):
                    raise CollectError(
                        f"--set {key}: {'.'.join(parts[:depth]) or 'the template'} is a list "
                        f"of {len(node)} item(s); {part!r} is not an index into it"
                    )
                if last:
                    node[int(part)] = value
                else:
                    node = node[int(part)]
            elif isinstance(node, dict):
                if last:
                    node[part] = value
                else:
                    node = node.setdefault(part, {})
            else:
                raise CollectError(
                    f"--set {key}: {where.rsplit('.', 1)[0]} is a {type(node).__name__}, "
                    "not a mapping or list"
                )
    return raw


def _first_problem(
    error: Any, whole: str, skipping: Collection[Any] = ()
) -> tuple[str, str, dict[str, Any]]:
    """A pydantic ValidationError's first problem not in `skipping` (the first of all when it has
    no other): its location dotted (`whole` when it is the document itself), its message, and
    the problem."""
    details = error.errors()
    first = next((detail for detail in details if detail not in skipping), details[0])
    location = ".".join(str(part) for part in first.get("loc", ())) or whole
    return location, first.get("msg", "invalid"), first


def _field_error(template: Path | str, error: Any) -> CollectError:
    """One message naming the first invalid field (pydantic's location, dotted)."""
    problems = error.errors()
    location, message, first = _first_problem(error, "(the template)")
    given = first.get("input")
    shown = "" if isinstance(given, dict | list) or given is None else f" (got {given!r})"
    more = f"; {len(problems) - 1} more problem(s) after this one" if len(problems) > 1 else ""
    return CollectError(
        f"invalid job template {template}: field '{location}': {message}{shown}{more}. "
        "It must validate as harbor's JobConfig"
    )


def validate_template(raw: dict[str, Any], template: Path | str) -> JobConfig:
    """`raw` as harbor's JobConfig, or a CollectError naming the field."""
    from harbor.models.job.config import JobConfig
    from pydantic import ValidationError

    # JobConfig ignores keys it does not know, so a misspelt field would silently run with its
    # default; the legacy keys its own migration reads are known.
    unknown = sorted(set(raw) - set(JobConfig.model_fields) - LEGACY_JOB_KEYS, key=str)
    if unknown:
        raise CollectError(
            f"invalid job template {template}: field '{unknown[0]}' is not a harbor JobConfig "
            f"field (it has: {', '.join(sorted(JobConfig.model_fields))})"
        )
    try:
        return JobConfig.model_validate(raw)
    except ValidationError as error:
        raise _field_error(template, error) from None
    except ValueError as error:  # raised by a model validator outside pydantic's wrapping
        raise CollectError(f"invalid job template {template}: {error}") from None


# ----------------------------------------------------------------------------- the tasks


def read_task_ids(path: Path | str) -> list[str]:
    """Task ids from a file: one per line (`#` comments), a JSON list of ids, or a JSON task
    registry (a list, or {"tasks": [...]}, of objects with an `id`)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # (a BOM, as Windows editors save, dropped)
    except OSError as error:
        raise CollectError(f"cannot read --tasks {path}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:  # a ValueError, not an OSError: would be a traceback
        raise CollectError(
            f"--tasks {path} is not UTF-8 text (byte {error.start}); save it as UTF-8"
        ) from error
    stripped = text.strip()
    if stripped.startswith(("[", "{")):
        try:
            doc = json.loads(stripped)
        except json.JSONDecodeError as error:
            raise CollectError(f"--tasks {path} is not valid JSON: {error}") from error
        entries = doc.get("tasks") if isinstance(doc, dict) else doc
        if not isinstance(entries, list):
            raise CollectError(f'--tasks {path}: expected a JSON list or {{"tasks": [...]}}')
        ids: list[str] = []
        for index, entry in enumerate(entries):
            value = entry.get("id") if isinstance(entry, dict) else entry
            if not isinstance(value, str) or not value:
                raise CollectError(
                    f"--tasks {path}: entry {index} must be a task id or an object with a "
                    f"non-empty string 'id', got {entry!r}"
                )
            ids.append(value)
    else:
        ids = [
            line.split("#", 1)[0].strip()
            for line in text.splitlines()
            if line.split("#", 1)[0].strip()
        ]
    if not ids:
        raise CollectError(f"--tasks {path} lists no task ids")
    return ids


def task_names(task: TaskConfig) -> list[str]:
    """The ids a task answers to: its configured name (task.toml [task] name, what trials record
    as task_name), and harbor's own name for it (the task dir's name, or org/name)."""
    names = [task.get_task_id().get_name()]
    if task.path is not None and not task.is_git_task():
        toml = Path(task.path).expanduser() / "task.toml"
        try:
            import tomllib

            configured = tomllib.loads(toml.read_text(encoding="utf-8")).get("task", {})
            name = configured.get("name") if isinstance(configured, dict) else None
        except (OSError, ValueError):
            name = None
        if isinstance(name, str) and name and name not in names:
            names.insert(0, name)
    return names


def _absolute_local_paths(config: JobConfig) -> JobConfig:
    """Local dataset and task paths made absolute (harbor reads them relative to the cwd), so
    the job's recorded config, and so its resume check, do not depend on where it ran from."""
    datasets = [
        d.model_copy(update={"path": Path(os.path.abspath(d.path.expanduser()))})
        if d.path is not None and d.is_local()
        else d
        for d in config.datasets
    ]
    tasks = [
        t.model_copy(update={"path": Path(os.path.abspath(t.path.expanduser()))})
        if t.path is not None and not t.is_git_task()
        else t
        for t in config.tasks
    ]
    return config.model_copy(update={"datasets": datasets, "tasks": tasks})


def _resolve_tasks(config: JobConfig, template: Path | str) -> list[TaskConfig]:
    """The template's tasks (its `tasks`, then each dataset's), as harbor expands them."""
    from harbor.job_plan import JobPlan

    if not config.tasks and not config.datasets:
        return []
    try:
        return asyncio.run(JobPlan.resolve_task_configs(config))
    except ValueError as error:
        raise CollectError(
            f"cannot list the tasks of the job template {template}: {error}"
        ) from error
    except OSError as error:  # a datasets[].path / tasks[].path that is no readable dir
        where = error.filename if error.filename is not None else error
        raise CollectError(
            f"cannot list the tasks of the job template {template}: {where}: "
            f"{error.strerror or error} (check its datasets[].path and tasks[].path)"
        ) from error


def _task_dir(text: str) -> Path | None:
    """`text` as a local task dir (one holding task.toml), or None."""
    path = Path(text).expanduser()
    return Path(os.path.abspath(path)) if (path / "task.toml").is_file() else None


def select_tasks(
    tasks: Sequence[TaskConfig], wanted: Sequence[str], template: Path | str
) -> tuple[list[TaskConfig], list[str]]:
    """The tasks named by `wanted`, in that order, each once (a task's group is its attempts, so
    a task named twice is not sampled twice), and the ids that named a task already chosen: a
    name of one of the template's tasks, else a path to a task dir; anything else is an error
    naming every unknown id."""
    from harbor.models.trial.config import TaskConfig

    by_name: dict[str, TaskConfig] = {}
    by_path: dict[Path, TaskConfig] = {}  # (a task dir given by its path is the template's task)
    for task in tasks:
        for name in task_names(task):
            by_name.setdefault(name, task)
        if task.path is not None and not task.is_git_task():
            by_path.setdefault(Path(os.path.abspath(Path(task.path).expanduser())), task)
    chosen: list[TaskConfig] = []
    unknown: list[str] = []
    repeated: list[str] = []
    for name in wanted:
        task = by_name.get(name)
        if task is None:
            local = _task_dir(name)
            task = None if local is None else by_path.get(local) or TaskConfig(path=local)
        if task is None:
            unknown.append(name)
        elif task not in chosen:
            chosen.append(task)
        else:
            repeated.append(name)
    if unknown:
        known = sorted({task_names(t)[0] for t in tasks})
        shown = ", ".join(known[:20]) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
        has = f"has {len(known)} task(s): {shown}" if known else "names no tasks"
        raise CollectError(
            f"unknown task id(s) {', '.join(map(repr, unknown))}: not a task of the job "
            f"template {template} (it {has}) and not a task dir (with task.toml)"
        )
    return chosen, repeated


# ----------------------------------------------------------------------------- the plan


@dataclass
class StepPlan:
    """One step's harbor job, validated, before anything runs."""

    config: JobConfig
    step: int
    task_names: list[str]
    # ids given (--task, --tasks) that named a task already selected: each runs once
    repeated_ids: list[str] = field(default_factory=list)

    @property
    def job_dir(self) -> Path:
        return Path(self.config.jobs_dir) / self.config.job_name

    @property
    def trials_planned(self) -> int:
        return len(self.task_names) * self.config.n_attempts * len(self.config.agents)


def plan_step(
    template: Path | str,
    run_dir: Path | str,
    step: int,
    *,
    task_ids: Sequence[str] = (),
    tasks_file: Path | str | None = None,
    attempts: int | None = None,
    sets: Iterable[str] = (),
) -> StepPlan:
    """Validate the template and pin it to this step (jobs dir, tasks, n_attempts)."""
    _require_harbor()
    if step < 0:
        raise CollectError(f"--step must be >= 0, got {step}")
    if step >= 2**63:  # (the lake's step is 64-bit: its ingest refused it after harbor had run)
        raise CollectError(f"--step must be a 64-bit integer (below 2^63), got {step}")
    if attempts is not None and attempts < 1:
        raise CollectError(f"--attempts must be >= 1, got {attempts}")
    if task_ids and tasks_file is not None:
        raise CollectError("give the tasks either as --tasks FILE or as --task ID, not both")
    sets = list(sets)
    _refuse_pinned_sets(sets, attempts)
    raw = apply_sets(load_template(template), sets)
    # the run dir by its real place, as an ingest of the dir above it labels it: a step collected
    # through a symlinked alias keeps its batch label (its trials are not "replaced" under another)
    raw["jobs_dir"] = str(jobs_dir_for(os.path.realpath(run_dir), step))
    raw.setdefault("job_name", DEFAULT_JOB_NAME)
    if attempts is not None:
        raw["n_attempts"] = attempts
    config = _absolute_local_paths(validate_template(raw, template))
    _check_job_shape(config, template)
    resolved = _resolve_tasks(config, template)
    wanted = list(task_ids) or (read_task_ids(tasks_file) if tasks_file is not None else [])
    repeated: list[str] = []
    if wanted:
        selected, repeated = select_tasks(resolved, wanted, template)
        # The selection is recorded as the job's own task list, so its config (and harbor's
        # resume check) says exactly what ran.
        config = config.model_copy(update={"tasks": selected, "datasets": []})
    elif resolved:
        selected = resolved
    else:
        raise CollectError(
            f"the job template {template} names no tasks: give it `datasets: [{{path: DIR}}]` "
            "or `tasks: [{path: TASK_DIR}]`, or pass --task TASK_DIR"
        )
    for task in selected:  # (harbor would fail on it after the plan was said)
        if task.path is not None and not task.is_git_task() and not Path(task.path).is_dir():
            raise CollectError(
                f"the job template {template} names the task dir {task.path}, which is not a "
                "directory: check its tasks[].path"
            )
    return StepPlan(config, step, [task_names(t)[0] for t in selected], repeated)


def _refuse_pinned_sets(sets: Sequence[str], attempts: int | None) -> None:
    """A --set of what collect pins itself would be dropped without a word: jobs_dir is the
    step's dir, and n_attempts is --attempts when that is given."""
    for assignment in sets:
        key = assignment.split("=", 1)[0].strip()
        if key == "jobs_dir":
            raise CollectError(
                f"--set {assignment}: collect sets jobs_dir itself, to RUN_DIR/harbor/step-NNNN "
                "(choose it with --run-dir)"
            )
        if key == "n_attempts" and attempts is not None:
            raise CollectError(
                f"--set {assignment} and --attempts {attempts} both set n_attempts: give one"
            )


def _check_job_shape(config: JobConfig, template: Path | str) -> None:
    """What JobConfig accepts but a step cannot be: no agent, or a job_name that is a path (the
    job dir would lie outside the step's dir, or in another step's)."""
    if not config.agents:
        raise CollectError(
            f"the job template {template} runs no agent (its agents list is empty): give it "
            "agents: [{name: ..., model_name: ...}]"
        )
    _check_agents(config, template)
    name = config.job_name
    if not name or name in (".", "..") or "/" in name or os.sep in name:
        raise CollectError(
            f"job_name {name!r} is not a plain dir name: the step's job dir is "
            f"RUN_DIR/harbor/step-NNNN/JOB_NAME; give a name without '/' (default: "
            f"{DEFAULT_JOB_NAME})"
        )


def _check_agents(config: JobConfig, template: Path | str) -> None:
    """Each agent is one harbor can make: a name it registers, or an import path that imports
    (harbor resolves them only when its job starts, after the plan is said and the step's dir
    made: a misspelt name failed there, exit 1). A registered name is not imported here: its
    module (terminus-2's loads litellm) is harbor's to load."""
    import difflib

    from harbor.agents.factory import AgentFactory, is_acp_registry_shorthand

    names = AgentFactory.registered_names()
    for index, agent in enumerate(config.agents):
        where = f"the job template {template}: agents.{index}"
        name = agent.name
        if agent.import_path is None and name is not None and ":" not in name:
            if name in names or is_acp_registry_shorthand(name):
                continue
            close = difflib.get_close_matches(name, names, n=1)
            raise CollectError(
                f"{where}.name {name!r} is not an agent harbor knows"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f": give one of {', '.join(names)}, or an import_path 'module:Class'"
            )
        try:
            AgentFactory.get_agent_class_from_config(agent)
        except (ValueError, ImportError, AttributeError) as error:
            text = str(error).strip()
            raise CollectError(
                f"{where} is not an agent harbor can make: "
                f"{text.splitlines()[0] if text else type(error).__name__}"
            ) from error


# ----------------------------------------------------------------------------- the job dir

STEP_LOCK = ".wmo-lake-collect.lock"  # in the step's jobs dir, beside its job dir


@contextlib.contextmanager
def step_lock(plan: StepPlan) -> Iterator[None]:
    """One collect of a step at a time: a second one, while the first runs, would run the
    unfinished trials again beside it (a group of 10 for a planned 6). Refused before anything
    runs, naming the process that holds the step (the lock goes with it, however it ends)."""
    import fcntl

    jobs_dir = Path(plan.config.jobs_dir)
    try:
        jobs_dir.mkdir(parents=True, exist_ok=True)
        lock = open(jobs_dir / STEP_LOCK, "a+", encoding="utf-8")  # noqa: SIM115 (closed below)
    except OSError as error:  # a read-only or full run dir: nothing has run
        raise CollectError(
            f"cannot write the step's dir {error.filename or jobs_dir}: "
            f"{error.strerror or error}; nothing was run. Give a --run-dir harbor can write"
        ) from error
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise CollectError(
                f"step {plan.step} ({plan.job_dir}) is being collected by {holder}; nothing was "
                "run. Wait for it to end (or stop it), then run this command again: it resumes "
                "the step or reports it"
            ) from None
        lock.truncate(0)
        lock.write(f"wmo-lake collect pid {os.getpid()}\n")
        lock.flush()
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass
class JobDirState:
    """What a step's job dir already holds."""

    exists: bool = False
    done_trials: int = 0
    finished: bool = False
    removed: list[str] = field(default_factory=list)  # the trial dirs removed
    removed_job_result: bool = False  # the job's result.json, cut off (harbor rebuilds it)
    # finished trials whose result.json harbor cannot read back: a non-finite number it wrote
    # as null (its resume would run them again beside their dirs)
    unreadable_to_harbor: list[tuple[Path, str]] = field(default_factory=list)


def _config_differences(recorded: Any, planned: Any, where: str = "") -> list[str]:
    """Dotted paths where two JSON documents differ (the first few)."""
    if isinstance(recorded, dict) and isinstance(planned, dict):
        found: list[str] = []
        for key in sorted(set(recorded) | set(planned), key=str):
            found += _config_differences(
                recorded.get(key), planned.get(key), f"{where}.{key}" if where else str(key)
            )
        return found
    if isinstance(recorded, list) and isinstance(planned, list) and len(recorded) == len(planned):
        found = []
        for index, (a, b) in enumerate(zip(recorded, planned, strict=True)):
            found += _config_differences(a, b, f"{where}.{index}" if where else str(index))
        return found
    if isinstance(recorded, list) and isinstance(planned, list):
        return [_list_change(recorded, planned, where)]
    return [] if recorded == planned else [f"{where}: {recorded!r} -> {planned!r}"]


def _list_change(recorded: list[Any], planned: list[Any], where: str) -> str:
    """Two lists of other lengths (a step's tasks, say) as the items one has and the other not,
    each by its name or path: both whole lists, as dicts, ran to kilobytes for a batch."""

    def key(item: Any) -> str:
        return json.dumps(item, sort_keys=True, default=str)

    def label(item: Any) -> str:
        if isinstance(item, dict):
            return str(item.get("name") or item.get("path") or key(item))
        return repr(item)

    kept, wanted = {key(i) for i in recorded}, {key(i) for i in planned}
    gone = [label(i) for i in recorded if key(i) not in wanted]
    new = [label(i) for i in planned if key(i) not in kept]
    change = f"{where}: {len(recorded)} -> {len(planned)} items"
    change += f"; now without {', '.join(gone)}" if gone else ""
    return change + (f"; now with {', '.join(new)}" if new else "")


def _same_tasks(recorded: Sequence[Any], planned: Sequence[Any]) -> bool:
    """The same task entries, in any order (harbor's resume check wants the recorded order)."""

    def entries(tasks: Sequence[Any]) -> list[str]:
        return sorted(json.dumps(t.model_dump(mode="json"), sort_keys=True) for t in tasks)

    return len(recorded) == len(planned) and entries(recorded) == entries(planned)


def check_recorded_config(plan: StepPlan) -> None:
    """A job dir written under another config cannot be resumed by this one: say where they
    differ (harbor would refuse with FileExistsError, naming nothing). Nor can a step dir that
    holds another job (another job_name): the step would be two batches."""
    from harbor.models.job.config import JobConfig

    others = sorted(
        entry.name
        for entry in Path(plan.config.jobs_dir).iterdir()
        if entry.is_dir()
        and entry.name != plan.config.job_name
        and (entry / "config.json").exists()
    )
    if others:
        raise CollectError(
            f"step {plan.step}'s dir {plan.config.jobs_dir} already holds the job "
            f"{others[0]!r}, collected under another job_name (this one is "
            f"{plan.config.job_name!r}); a step is one job: use the job_name it started with, "
            "or collect into a new --step or --run-dir"
        )
    path = plan.job_dir / "config.json"
    if not path.exists():
        return
    try:
        recorded = JobConfig.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CollectError(
            f"{path} is not a readable harbor JobConfig ({error}); move the dir away to "
            "collect this step again"
        ) from error
    recorded.jobs_dir = plan.config.jobs_dir
    recorded.job_name = plan.config.job_name
    if _same_tasks(recorded.tasks, plan.config.tasks):  # named in another order: the step's own
        plan.config = plan.config.model_copy(update={"tasks": recorded.tasks})
    if recorded == plan.config:
        return
    exclude = {"job_name", "debug"}
    differences = _config_differences(
        recorded.model_dump(mode="json", exclude=exclude),
        plan.config.model_dump(mode="json", exclude=exclude),
    )
    shown = "; ".join(differences[:3]) + (
        f"; {len(differences) - 3} more" if len(differences) > 3 else ""
    )
    raise CollectError(
        f"step {plan.step} in {plan.job_dir} was collected with another job config ({shown}); "
        "a step resumes only under the config it started with: collect into a new --step or "
        "--run-dir, or move that dir away"
    )


def prepare_job_dir(plan: StepPlan) -> JobDirState:
    """Count the finished trials, and remove the ones harbor would keep wrongly or double."""
    from harbor.models.job.result import JobResult
    from harbor.models.trial.result import TrialResult
    from pydantic import ValidationError

    state = JobDirState()
    if not plan.job_dir.is_dir():
        return state
    state.exists = True
    for trial_dir in sorted(p for p in plan.job_dir.iterdir() if p.is_dir()):
        result_path = trial_dir / "result.json"
        if not result_path.exists():
            continue  # harbor removes a trial dir without result.json itself
        nulls: tuple[Path, str] | None = None  # (harbor's own nulls: where the first one is)
        try:
            text = result_path.read_bytes()
            result = TrialResult.model_validate_json(text)
        except OSError as error:
            raise CollectError(
                f"cannot read {result_path} ({error.strerror or error}), so whether that trial "
                "finished is unknown; make it readable (or move the dir away) and run the same "
                "command again"
            ) from error
        except ValidationError as error:
            held = _as_harbor_held_it(text, error)
            if held is None and not _cut_off(error):
                raise CollectError(_not_a_trial_result(result_path, error)) from error
            if held is None:
                shutil.rmtree(trial_dir)  # cut off mid-write: harbor would run a twin beside it
                state.removed.append(trial_dir.name)
                continue
            result, first_null = held
            nulls = (result_path, first_null)
        if any(e.exception_type == CANCELLED for e in result.recorded_exceptions()):
            shutil.rmtree(trial_dir)  # interrupted, not finished: run it again
            state.removed.append(trial_dir.name)
            continue
        if nulls is not None:  # (finished, but harbor's resume would not know it)
            state.unreadable_to_harbor.append(nulls)
        state.done_trials += 1
    job_result_path = plan.job_dir / "result.json"
    try:
        job_result = JobResult.model_validate_json(job_result_path.read_bytes())
        state.finished = job_result.finished_at is not None
    except OSError:
        state.finished = False
    except ValueError:
        # harbor rewrites the job's result.json in place (truncate, then write), so a kill can cut
        # it off; harbor refuses to resume over it but rebuilds it from the trial dirs when absent.
        job_result_path.unlink()
        state.removed_job_result = True
        state.finished = False
    return state


def _cut_off(error: Any) -> bool:
    """Whether a result.json's ValidationError is JSON cut off (or no JSON at all), not a whole
    document this harbor's TrialResult refuses."""
    return all(detail.get("type") == "json_invalid" for detail in error.errors())


def _field(detail: Any) -> tuple[Any, ...]:
    """A validation problem's field: its location, without the member's name a `float | int`
    union adds (its null fails as both members)."""
    loc = tuple(detail.get("loc", ()))
    return loc[:-1] if loc and loc[-1] in ("float", "int") else loc


def _harbors_nulls(details: list[Any]) -> list[Any]:
    """The problems that are nulls where floats go (what harbor itself writes for a non-finite
    float, a provider's NaN or infinite logprob: pydantic's JSON mode writes it as null, which
    the same model then refuses), with their union siblings. A null where only an int goes is
    no float's: an edit."""
    floats = {
        _field(detail)
        for detail in details
        if detail.get("type") == "float_type" and detail.get("input") is None
    }
    return [
        detail
        for detail in details
        if detail.get("input") is None
        and detail.get("type") in ("float_type", "int_type")
        and _field(detail) in floats
    ]


def _non_finite_at(error: Any) -> list[tuple[Any, ...]] | None:
    """Where a whole result.json fails harbor's TrialResult only by harbor's own nulls
    (`_harbors_nulls`), or None when it fails by anything else too."""
    details = error.errors()
    nulls = _harbors_nulls(details)
    if not details or len(nulls) != len(details):
        return None
    return sorted({_field(detail) for detail in nulls}, key=str)


def _as_harbor_held_it(text: bytes, error: Any) -> tuple[TrialResult, str] | None:
    """The TrialResult harbor held before it wrote `text`, which its model refused with `error`
    (NaN back at its nulls where floats go), and where the first of them is; None when `error`
    is not that (or NaN there does not make one: a dict key named `float` taken for a union's
    member)."""
    import json

    from harbor.models.trial.result import TrialResult
    from pydantic import ValidationError

    places = _non_finite_at(error)
    if places is None:
        return None
    try:
        document = json.loads(text)
        for place in places:
            holder = document
            for key in place[:-1]:
                holder = holder[key]
            holder[place[-1]] = float("nan")
        return TrialResult.model_validate(document), ".".join(map(str, places[0]))
    except (ValidationError, LookupError, TypeError):
        return None


def refuse_a_resume_over_harbors_nulls(state: JobDirState) -> None:
    """Harbor's resume skips a trial dir whose result.json it cannot read and runs that trial
    again beside it: the step would hold it twice. A finished step is only ingested (harbor does
    not run), so only a resume is refused."""
    if not state.unreadable_to_harbor:
        return
    path, where = state.unreadable_to_harbor[0]
    more = len(state.unreadable_to_harbor) - 1
    raise CollectError(
        f"{path}{f' (and {more} more)' if more else ''} holds null where harbor's TrialResult "
        f"needs a number ({where}): harbor writes a non-finite number (a provider's NaN or "
        "infinite logprob) as null and then cannot read its own file, so resuming this step "
        "would run that finished trial again beside it. Move its trial dir away (the trial "
        "runs again), then run the same command again"
    )


def _not_a_trial_result(path: Path, error: Any) -> str:
    # (harbor's own nulls are not what makes the file another's: the first other problem is)
    nulls = _harbors_nulls(error.errors())
    where, message, _ = _first_problem(error, "(the document)", skipping=nulls)
    return (
        f"{path} is whole JSON but not this harbor's TrialResult ({where}: {message}): "
        "written by another harbor version, or edited. It is not removed (only a result.json "
        "cut off mid-write is): restore it, or move its trial dir away to run that trial "
        "again, then run the same command again"
    )


# ----------------------------------------------------------------------------- running


TrialDone = Callable[[str, int, int], None]
"""Called once per trial done (not per retried attempt; not for a cancelled one): (trial name,
trials done in the step, trials planned)."""


def run_job(plan: StepPlan, already_done: int, on_trial_done: TrialDone | None = None) -> None:
    """Run (or resume) the step's harbor job to the end."""
    from harbor.job import Job

    async def main() -> None:
        try:
            job = await Job.create(plan.config)
        except FileExistsError as error:
            if os.path.lexists(plan.job_dir) and not plan.job_dir.is_dir():
                raise CollectError(
                    f"cannot write the step's job dir {plan.job_dir}: a file (or a link) is "
                    "there; nothing was run. Move it away, or give another --run-dir"
                ) from error
            raise CollectError(str(error)) from error  # (the resume check ran first)
        if on_trial_done is not None:
            job.on_trial_ended(progress_hook(already_done, plan.trials_planned, on_trial_done))
        try:
            await job.run()
        except FileExistsError as error:
            if "lock.json" not in str(error):
                raise
            raise CollectError(_tasks_changed(plan)) from error

    try:
        # (SIGTERM cancels the job as Ctrl-C does: its trials record CancelledError, and a
        # resume runs them again)
        run_async_stoppably(main)
    except CollectError:
        raise
    except Exception as error:
        # (an import path or a class of the template that does not exist fails the same way
        # however often the step is run again)
        raise HarborRunError(
            f"harbor could not run step {plan.step} ({plan.job_dir}): {_cause(error)}; if that "
            "names something of the job template (an import path, a class, a path), fix it "
            "there; otherwise run the same command again to resume the step"
        ) from error


def _cause(error: BaseException) -> str:
    """`error` as `Type: message`; an exception group (harbor's task groups raise one) as its
    first leaf, which says what failed (`OSError: [Errno 28] No space left on device: ...`)."""
    leaves = _leaves(error)
    said = f"{type(leaves[0]).__name__}: {leaves[0]}"
    return said if len(leaves) < 2 else f"{said} (the first of {len(leaves)} errors)"


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup) and error.exceptions:
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def progress_hook(
    already_done: int, planned: int, on_trial_done: TrialDone
) -> Callable[[Any], Awaitable[None]]:
    """harbor's trial-ended hook, calling `on_trial_done` once per trial that is done: a trial
    harbor retries ends once per attempt under the same name (counted at its first end, as
    harbor's own progress bar does), and a cancelled one is not done (a resume runs it again)."""
    done = already_done
    counted: set[str] = set()

    async def ended(event: Any) -> None:
        nonlocal done
        name = event.trial_name
        exceptions = event.result.recorded_exceptions()
        if name in counted or any(e.exception_type == CANCELLED for e in exceptions):
            return
        counted.add(name)
        done += 1
        on_trial_done(name, done, planned)

    return ended


def _tasks_changed(plan: StepPlan) -> str:
    """Why harbor refuses to resume a step whose lock.json does not match (wmo-lake's own resume
    check compares config.json only): it records each task with its files' digest."""
    return (
        f"step {plan.step}'s job dir {plan.job_dir} was run with other tasks than these: a task "
        "was added to or removed from the selection, or its files were edited, since (harbor's "
        "lock.json records each task and the digest of its files), so harbor will not resume "
        "it. Restore the tasks as they were (or select the step's own with --task), or collect "
        "them as a new step; its finished trials are kept. Nothing was run"
    )


# ----------------------------------------------------------------------------- the result


@contextlib.contextmanager
def _hidden_stdout(hide: bool) -> Iterator[TextIO]:
    """sys.stdout sent nowhere while `hide` (harbor's display draws there), else left as it is;
    yields the stdout the caller had."""
    shown = sys.stdout
    if not hide:
        yield shown
        return
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        yield shown


def _printing_to(shown: TextIO, callback: TrialDone | None) -> TrialDone | None:
    """`callback` printing to the caller's stdout though harbor's display is hidden: a training
    loop's own progress lines are not harbor's."""
    if callback is None:
        return None

    def with_stdout(name: str, done: int, planned: int) -> None:
        with contextlib.redirect_stdout(shown):
            callback(name, done, planned)

    return with_stdout


def _repeated_notes(plan: StepPlan) -> list[str]:
    """A note for the task ids given that named a task already selected."""
    if not plan.repeated_ids:
        return []
    shown = ", ".join(repr(name) for name in dict.fromkeys(plan.repeated_ids))
    return [
        f"{shown}: named a task already given, so it ran once; a task's group is its attempts "
        f"(--attempts, {plan.config.n_attempts} here)"
    ]


@dataclass
class StepResult:
    """What `collect` did and what the step's batch looks like in the lake."""

    step: int
    batch: str
    job_dir: Path
    trials_planned: int
    trials_done_before: int
    harbor_ran: bool
    removed_trials: list[str]
    ingest: IngestSummary
    stats: pl.DataFrame
    records: pl.DataFrame
    notes: list[str]
    stats_row: dict[str, Any] | None = None  # the stats as `wmo-lake stats --json` prints them

    def as_dict(self) -> dict[str, Any]:
        """The JSON form `wmo-lake collect --json` prints."""
        return {
            "step": self.step,
            "batch": self.batch,
            "job_dir": str(self.job_dir),
            "trials_planned": self.trials_planned,
            "trials_done_before": self.trials_done_before,
            "harbor_ran": self.harbor_ran,
            "removed_trials": self.removed_trials,
            "ingest": self.ingest.as_dict(),
            "stats": self.stats_row,
            "notes": self.notes,
        }


def _glob_literal(text: str) -> str:
    """`text` as a GLOB pattern matching only itself."""
    return "".join(f"[{c}]" if c in "*?[]" else "\\\\" if c == "\\" else c for c in text)


@dataclass
class StepReport:
    batch: str
    stats: pl.DataFrame
    stats_row: dict[str, Any] | None
    records: pl.DataFrame
    notes: list[str]


def step_report(
    lake: Path | str,
    job_dir: Path,
    settings: dict[str, Any] | None = None,
    *,
    with_spans: bool = False,
) -> StepReport:
    """The stats, records and notes of the batch the lake holds for `job_dir` (the lake's
    damage, a lake.duckdb changed in place among it, as a LakeError saying what to do)."""
    import duckdb

    from wmo_lake.store import Store

    with Store(lake).saying_damage(duckdb.Error):
        return _step_report(lake, job_dir, settings, with_spans)


def _step_report(
    lake: Path | str, job_dir: Path, settings: dict[str, Any] | None, with_spans: bool
) -> StepReport:
    from wmo_lake.checks import warn_on_unused_reward_key
    from wmo_lake.lake import connect
    from wmo_lake.output import rows_as_dicts
    from wmo_lake.stats import collect_stats

    con = connect(lake, settings, check=False)  # (the reward key is checked in the step's scope)
    try:
        found = con.execute(
            "SELECT batch FROM jobs WHERE job_key = ?", [f"job:{os.path.realpath(job_dir)}"]
        ).fetchall()
        if not found:
            raise CollectError(f"the lake at {lake} holds no job {job_dir} after the ingest")
        batch = found[0][0]
        warn_on_unused_reward_key(con, batch_glob=_glob_literal(batch))
        stats = con.sql("SELECT * FROM rollout_stats WHERE batch = $batch", params={"batch": batch})
        stats_frame = stats.pl()
        rows = rows_as_dicts(stats)
        # trial_records is the light record; the spans are opt-in (they rebuild every prompt)
        view = "trial_records_with_spans" if with_spans else "trial_records"
        records = con.sql(
            f"SELECT * FROM {view} WHERE batch = $batch ORDER BY task_id, attempt, trial_name",
            params={"batch": batch},
        ).pl()
    finally:
        con.close()
    notes = collect_stats(lake, settings, batch_glob=_glob_literal(batch)).notes
    return StepReport(batch, stats_frame, rows[0] if rows else None, records, notes)


def _refuse_a_shared_batch(plan: StepPlan, store: Store, lake_args: str | None) -> None:
    """CollectError when the lake holds the step's batch label from another job dir: a batch is
    labelled from the run dir's name (`exp1/harbor/step-0000/rollouts`), so a second run tree of
    that name (`/a/exp1`, `/b/exp1`) would have its step pooled with the other's, in the stats
    and in the records a trainer takes. Said before harbor runs."""
    from wmo_lake.discover import job_labels
    from wmo_lake.store import JOB, partition_of

    manifest = store.read_manifest()
    if not store.exists():
        return
    batch, run, step = job_labels(plan.job_dir, plan.job_dir)
    own = f"job:{os.path.realpath(plan.job_dir)}"
    others = sorted(
        entry.source.removeprefix("job:")
        for entry in store.read_catalog(manifest, [partition_of(run, step)]).values()
        if entry.kind == JOB and entry.batch == batch and entry.source != own
    )
    if others:
        raise CollectError(
            f"the lake at {store.root} holds batch {batch} from another job dir ({others[0]}): "
            f"this step's trials would be pooled with its own (a batch is labelled from the run "
            f"dir's name, {run!r}). Collect into another --lake, or name the run dir apart; if "
            f"that dir is gone, {_forget_command(batch, store.root, lake_args)} drops it. "
            "Nothing was run"
        )


def _forget_command(batch: str, lake: Path, lake_args: str | None) -> str:
    """The `wmo-lake forget` that drops exactly `batch` from this lake, quoted for a shell."""
    from wmo_lake.store import hint_lake_option

    literal = shlex.quote(_glob_literal(batch))
    return f"`wmo-lake forget --batch {literal}{hint_lake_option(lake, lake_args)}`"


def _refuse_trials_held_elsewhere(
    plan: StepPlan, lake: Path, summary: IngestSummary, lake_args: str | None
) -> None:
    """CollectError when trial dirs of the step hold trials the lake counts in another batch: a
    copy of the run dir (`cp -r exp1 exp1-fork`) holds the same trials, and a lake counts a
    trial once, so the step's stats and records, which a trainer takes, would leave them out
    (they read 0 trials for a finished step). A trial held by another dir of this step's own
    batch (a copied trial dir beside it) costs the step nothing. Its trials stay on disk."""
    if not summary.trials_held_elsewhere:
        return
    from wmo_lake.discover import job_labels
    from wmo_lake.lake import connect
    from wmo_lake.store import Store, partition_of

    store = Store(lake)
    batch, run, step = job_labels(plan.job_dir, plan.job_dir)
    inside = os.path.realpath(plan.job_dir) + os.sep
    # the step's dirs that hold a trial another dir holds (taken over, or a duplicate's)
    keys = [
        entry.trial_key
        for entry in store.read_catalog(store.read_manifest(), [partition_of(run, step)]).values()
        if entry.source.startswith(inside) and entry.trial_key and entry.unit_key != entry.trial_key
    ]
    con = connect(lake, check=False)
    try:
        query = "SELECT trial_key, batch FROM trials WHERE list_contains($keys, trial_key)"
        holder = dict(con.execute(query, {"keys": keys}).fetchall())
    finally:
        con.close()
    elsewhere = [key for key in keys if holder.get(key) not in (None, batch)]
    if not elsewhere:
        return
    holders = sorted({holder[key] for key in elsewhere})
    forget = "; ".join(_forget_command(batch, lake, lake_args) for batch in holders)
    that = "that batch" if len(holders) == 1 else "those batches"
    raise CollectError(
        f"{len(elsewhere)} of step {plan.step}'s trial dirs hold the same trials (their "
        f"result.json ids) as the lake counts in {', '.join(holders)}: copies of a run dir, and "
        f"a lake counts a trial once, so this step's stats and records would leave them out. "
        f"Its trials are kept in {plan.job_dir}. To count them here, drop {that} ({forget}) "
        f"and run the same command again; or collect each copy into its own --lake"
    )


def _taken_notes(summary: IngestSummary) -> list[str]:
    """A note per batch whose trials this step's ingest took over (this run dir is a copy of
    that one's, or that one of this): the other batch no longer counts them."""
    return [
        f"{n} of this step's trials were the lake's trials of {batch} (a copy of one run dir "
        f"holds the other's trials): they count here now, and {batch} no longer counts them"
        for batch, n in summary.trials_taken_from.items()
    ]


def collect(
    template: Path | str,
    run_dir: Path | str,
    step: int,
    *,
    tasks: Sequence[str] = (),
    tasks_file: Path | str | None = None,
    attempts: int | None = None,
    sets: Iterable[str] = (),
    lake: Path | str = "lake",
    settings: dict[str, Any] | None = None,
    with_spans: bool = False,
    on_plan: Callable[[StepPlan, JobDirState], None] | None = None,
    on_trial_done: TrialDone | None = None,
    lake_args: str | None = None,
    quiet: bool = False,
) -> StepResult:
    """Collect training step `step`: run its harbor job (or finish it), ingest it, report it.

    Args:
        template: A harbor JobConfig file (YAML or JSON). Its `jobs_dir` is replaced by
            `<run_dir>/harbor/step-NNNN`; its `job_name` defaults to "rollouts".
        run_dir: The training run's directory.
        step: The 0-based training step.
        tasks, tasks_file: Run only these tasks (ids as trials record them, `task.toml`'s name,
            or the task dir's name); an unknown id raises before anything runs.
        attempts: `n_attempts` (the group size) instead of the template's.
        sets: `dotted.path=VALUE` overrides applied to the template (VALUE read as YAML).
        lake: The lake the step is ingested into.
        settings: Query-time settings for the stats (`wmo_reward_key`, `wmo_max_tokens`, ...).
        with_spans: Include `spans` (every turn's token ids) in `records`.
        on_plan, on_trial_done: progress callbacks (before running; as each trial ends).
        lake_args: The ` --lake DIR` the messages' commands carry (a CLI's own rule); by
            default they name `lake`.
        quiet: Hide harbor's progress display (it draws on sys.stdout while the job runs; the
            redirect is process-wide, so other threads' prints are hidden too meanwhile, while
            `on_trial_done` prints as usual).

    Returns:
        A StepResult: `stats` (rollout_stats, one row), `records` (trial_records, one row per
        trial) as polars DataFrames, and the seed's warnings as `notes`.

    Raises:
        CollectError: the template, tasks, options or settings are wrong, or the step's dir was
            collected under another config: nothing has run. Or, after the ingest, trials of the
            step are counted in another batch (a copy of the run dir took them over): its trials
            are kept, and the message says how to count them here.
        MissingHarborError: the harbor extra is not installed.
        LakeError: the lake cannot be read or written; the step's trials are kept, and the
            same call ingests them.
    """
    from wmo_lake.ingest import ingest
    from wmo_lake.settings import SettingError, variables
    from wmo_lake.store import LakeError, Store

    try:  # (a bad setting said now, not after harbor has run the whole step)
        variables(settings or {})
    except SettingError as error:
        raise CollectError(f"{error}; nothing was run") from None
    plan = plan_step(
        template,
        run_dir,
        step,
        task_ids=tasks,
        tasks_file=tasks_file,
        attempts=attempts,
        sets=sets,
    )
    # a lake the ingest would refuse (a comma in its path, a damaged or foreign manifest) is
    # said now, not after harbor has run the whole step
    _refuse_a_shared_batch(plan, Store(lake), lake_args)
    with step_lock(plan):
        check_recorded_config(plan)
        state = prepare_job_dir(plan)
        complete = state.finished and state.done_trials >= plan.trials_planned
        if not complete:
            refuse_a_resume_over_harbors_nulls(state)
        if on_plan is not None:
            on_plan(plan, state)
        if not complete:
            with _hidden_stdout(quiet) as shown:
                run_job(plan, state.done_trials, _printing_to(shown, on_trial_done))
        try:
            # (pruned: a trial dir removed above, or by harbor, leaves the lake with it, so the
            # step's stats count the trials on disk, each once)
            summary = ingest([plan.job_dir], Path(lake), prune=True)
        except OSError as error:  # a read-only or full lake dir: the step's trials are kept
            raise LakeError(
                f"step {step}'s trials are kept in {plan.job_dir}, but the lake at {lake} "
                f"cannot be written ({error.filename or lake}: {error.strerror or error}); "
                "fix that and run the same command again: a finished step is only ingested"
            ) from error
    _refuse_trials_held_elsewhere(plan, Path(lake), summary, lake_args)
    report = step_report(lake, plan.job_dir, settings, with_spans=with_spans)
    return StepResult(
        step=step,
        batch=report.batch,
        job_dir=plan.job_dir,
        trials_planned=plan.trials_planned,
        trials_done_before=state.done_trials,
        harbor_ran=not complete,
        removed_trials=state.removed,
        ingest=summary,
        stats=report.stats,
        records=report.records,
        notes=[*_repeated_notes(plan), *_taken_notes(summary), *report.notes],
        stats_row=report.stats_row,
    )
