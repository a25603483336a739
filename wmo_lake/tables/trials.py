"""`trials`: one row per harbor trial, read from its `result.json` (harbor's `TrialResult`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import Any

from wmo_lake.columns import PHASES
from wmo_lake.jsonfile import to_json_text
from wmo_lake.tables.agent_caps import caps
from wmo_lake.tables.fields import (
    INT64_MAX,
    INT64_MIN,
    Fields,
    fits_int64,
    harbor_lax,
    is_real_number,
    json_type_name,
)


def _seconds(start: datetime | None, end: datetime | None) -> float | None:
    return None if start is None or end is None else (end - start).total_seconds()


def harbor_number(value: Any) -> int | float | None:
    """A reward value as harbor's `TrialResult` reads it, which is how upstream's scorer sees it:
    `VerifierResult.rewards` is `dict[str, float | int]`, validated by pydantic in lax mode, so
    a bool or a numeric string becomes a number (`true` -> 1.0, `" 0.5 "` -> 0.5, `"1_0"` ->
    10.0) before the scorer's own checks run. None for a value that model rejects (null, `"abc"`,
    a list: harbor cannot load such a result.json at all, and upstream fails the batch)."""
    number: int | float | None = harbor_lax(value, float | int)
    return number


def rewards(doc: Fields) -> list[tuple[str, str]] | None:
    """`verifier_result.rewards` as (key, JSON text) pairs, each value as harbor's `TrialResult`
    reads it (`harbor_number`: a bool or a numeric string is stored as the number it becomes,
    and reported as `coerced_reward`). A value that is no reward measurement even so (upstream's
    scorer: a number, finite, in [0, 1]) is kept and reported: under that reward key the trial
    gets the 0.0 stand-in and counts as infra_failed, where upstream's scorer would refuse the
    whole batch."""
    values = doc.obj("verifier_result", "rewards")
    if values is None:
        return None
    read: list[tuple[str, str]] = []
    for key, value in values.items():
        written = to_json_text(value)
        plain = not isinstance(value, bool) and isinstance(value, int | float)
        number = value if plain else harbor_number(value)
        shown = written if plain or number is None else f"{written} (read as {number!r})"
        if number is None or not is_real_number(number) or not 0 <= number <= 1:
            doc.problems.add(
                "invalid_reward",
                doc.path,
                f"{doc.path.name}: verifier_result.rewards.{key} is {shown}, not a reward "
                f"measurement (a number in [0, 1]); scored under reward key {key!r} the trial "
                "counts as infra_failed with a 0.0 stand-in",
            )
        elif not plain:
            doc.problems.add(
                "coerced_reward",
                doc.path,
                f"{doc.path.name}: verifier_result.rewards.{key} is {json_type_name(value)}, "
                f"{written}, not a number; read as {number!r}, the number harbor's TrialResult "
                "model (pydantic, lax) makes of it for upstream's scorer",
            )
        read.append((str(key), written if number is None else to_json_text(number)))
    return read


def _exception_info(doc: Fields) -> dict[str, str | None]:
    """`exception_info`'s type and message. Harbor's `ExceptionInfo` requires both (and its
    traceback and time): an object without one is a result.json harbor's model refuses, so
    upstream's scorer never loads the trial; the lake keeps it (an exception was recorded, so
    without a reward it counts as infra_failed) and reports what is missing."""
    info = doc.obj("exception_info")
    read = {
        "exception_type": doc.str("exception_info", "exception_type"),
        "exception_message": doc.str("exception_info", "exception_message"),
    }
    if info is not None:
        for key in ("exception_type", "exception_message"):
            if info.get(key) is None:
                doc.problems.add(
                    "wrong_type",
                    doc.path,
                    f"{doc.path.name}: exception_info.{key} is "
                    f"{'null' if key in info else 'missing'}, expected a string (harbor's "
                    "TrialResult model refuses such a file, so upstream's scorer would not load "
                    "the trial); the column is left null",
                )
    return read


def _episodes(doc: Fields) -> int | None:
    """`agent_result.metadata.n_episodes` when an integer. One past 64 bits is stored as the
    nearest 64-bit value, which compares with any max_turns as it does (terminus-2's stop reason
    only asks `n_episodes >= max_turns`, on Python ints), and is reported."""
    value = doc.get("agent_result", "metadata", "n_episodes")
    if type(value) is not int or fits_int64(value):
        return doc.int("agent_result", "metadata", "n_episodes")
    stored = INT64_MAX if value > 0 else INT64_MIN
    doc.problems.add(
        "out_of_range",
        doc.path,
        f"{doc.path.name}: agent_result.metadata.n_episodes is {value}, more than a 64-bit integer "
        f"holds; stored as {stored}, which compares with max_turns as it does",
    )
    return stored


def _package(doc: Fields) -> str | None:
    """A package task id's `org/name` (harbor's PackageTaskId.get_name())."""
    org, name = doc.str("task_id", "org"), doc.str("task_id", "name")
    return None if org is None or name is None else f"{org}/{name}"


def task_id_name(doc: Fields) -> str | None:
    """harbor's `trial.task_id.get_name()`, the key WMO's scorer groups a batch's trials by: a git
    task's normalized path's last part, a local task's resolved path's last part (resolved here, as
    the scorer resolves it where it runs), a package task's `org/name`.

    Which of the three an object is follows harbor's `TrialResult` as read from result.json
    (`model_validate_json`, as the scorer and harbor's resumed jobs read it), whose `task_id` is
    pydantic's smart union `LocalTaskId | GitTaskId | PackageTaskId`: of the members the object
    validates as, the one with the most of its fields given; on a tie the first (from JSON a
    string path is as exact as a plain string: only Python-mode validation of a dict prefers
    the package). So `{org, name, path}` is a package, `{org, name, git_url, path}` a git task,
    and a git id whose path climbs out of its repo (`x/../..`), which GitTaskId refuses, is a
    local task."""
    task_id = doc.get("task_id")
    if not isinstance(task_id, dict):
        return None
    path = task_id.get("path")
    if "git_url" not in task_id and "org" not in task_id and "name" not in task_id:
        return _local_name(path) if isinstance(path, str) else None  # (harbor's local task)
    # (fields given, minus the union position: a tie goes to the first, get_name)
    members: list[tuple[int, int, Callable[[], str]]] = []
    if isinstance(path, str):
        members.append((1, 0, lambda: _local_name(path)))
        git_path = _git_path(path)
        is_git = isinstance(task_id.get("git_url"), str) and git_path is not None
        if is_git and _optional_str(task_id, "git_commit_id"):
            given = sum(key in task_id for key in ("git_url", "git_commit_id", "path"))
            members.append((given, -1, lambda: git_path[-1] if git_path else ""))
    package = _package(doc)
    if package is not None and _optional_str(task_id, "ref"):
        given = sum(key in task_id for key in ("org", "name", "ref"))
        members.append((given, -2, lambda: package))
    if not members:
        return None
    return max(members, key=lambda member: member[:2])[2]()


def _optional_str(task_id: dict[str, Any], key: str) -> bool:
    return task_id.get(key) is None or isinstance(task_id[key], str)


def _git_path(path: str) -> list[str] | None:
    """A git task path's parts, normalized as GitTaskId does; None when it refuses the path (one
    from the root, or one that climbs out of the repository)."""
    if PurePosixPath(path).anchor:
        return None
    parts: list[str] = []
    for part in PurePosixPath(path).parts:
        if part != "..":
            parts.append(part)
        elif not parts:
            return None
        else:
            parts.pop()
    return parts


def _local_name(path: str) -> str:
    name = _RESOLVED_NAMES.get(path)
    if name is None:  # the trials of a batch share a few task paths: resolve each once
        try:
            name = Path(path).expanduser().resolve().name
        except (RuntimeError, ValueError, OSError):  # ~nosuchuser/..., a NUL: taken as written
            name = PurePosixPath(path).name
        _RESOLVED_NAMES[path] = name
    return name


# A local task path -> its resolved path's last part, for one reader's run: each reader (a
# process, an in-process read, a Spark task) starts it afresh (`forget_resolved_names`), so a
# link changed between ingests, or another working directory, is never answered from it.
_RESOLVED_NAMES: dict[str, str] = {}


def forget_resolved_names() -> None:
    _RESOLVED_NAMES.clear()


def agent_row(
    doc: Fields, config_agent: dict[str, Any] | None, config_path: Path
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The agent the trial ran (harbor's AgentConfig, which every trial records) and its caps,
    as the `trials` columns, with that agent's document (None when the trial records none: its
    job's first agent then stands in, in the views). From result.json's `config.agent` (the
    validated TrialResult's, every field written), else its config.json's `agent`
    (`config_agent`, read by discovery): harbor writes that one without its defaults, and with
    no `agent` at all for its default agent, so it comes second."""
    at: tuple[str, ...] = ("config", "agent")
    source, agent, fields = "result.json", doc.obj(*at), doc
    if agent is None and config_agent is not None:
        source, agent, at = "config.json", config_agent, ("agent",)
        fields = Fields({"agent": config_agent}, config_path, doc.problems)
    if agent is None:
        return {"agent_source": None, "agent_config": None} | dict.fromkeys(
            ("max_turns", "max_tokens", "context_limit")
        ), None
    return {
        "agent_source": source,
        "agent_config": agent_identity(agent),
        **caps(fields, *at),
    }, agent


def agent_identity(agent: dict[str, Any]) -> str:
    """An AgentConfig as JSON text that is the same for the same agent whichever file it was read
    from (cells ranks a task's attempts among one agent's trials by it): sorted keys, without the
    fields at their defaults (every AgentConfig default is null, false, [] or {}), which
    config.json leaves out and result.json writes."""
    kept = {
        key: value
        for key, value in agent.items()
        if not (value is None or value is False or value == [] or value == {})
    }
    return json.dumps(kept, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def row(doc: Fields) -> dict[str, Any]:
    """The `trials` columns read from result.json; the caller adds identity and lake columns."""
    started = doc.time("started_at")
    finished = doc.time("finished_at")
    phase_seconds = {
        f"{phase}_sec": _seconds(
            doc.instant(phase, "started_at"), doc.instant(phase, "finished_at")
        )
        for phase in PHASES
    }
    details = doc.get("agent_result", "rollout_details")
    task_name, task_name_of_id = doc.str("task_name"), task_id_name(doc)
    if task_name is None and task_name_of_id is None:
        doc.problems.add(
            "missing_task",
            doc.path,
            f"{doc.path.name}: names no task (no task_id harbor can name, no task_name), so "
            "its trial counts in its batch's figures under a null task_id (per-task tables show "
            "it as '(no task id)')",
        )
    return {
        "trial_id": doc.str("id"),
        "task_name": task_name,
        "task_id_name": task_name_of_id,
        "trial_uri": doc.str("trial_uri"),
        "source": doc.str("source"),
        "task_checksum": doc.str("task_checksum"),
        "task_id_path": doc.str("task_id", "path"),
        "task_id_git_url": doc.str("task_id", "git_url"),
        "task_id_git_commit_id": doc.str("task_id", "git_commit_id"),
        "task_id_package": _package(doc),
        "task_id_ref": doc.str("task_id", "ref"),
        "agent_name": doc.str("agent_info", "name"),
        "agent_version": doc.str("agent_info", "version"),
        "model_name": doc.str("agent_info", "model_info", "name"),
        "model_provider": doc.str("agent_info", "model_info", "provider"),
        "n_input_tokens": doc.model_int("agent_result", "n_input_tokens"),
        "n_cache_tokens": doc.model_int("agent_result", "n_cache_tokens"),
        "n_output_tokens": doc.model_int("agent_result", "n_output_tokens"),
        "cost_usd": doc.model_number("agent_result", "cost_usd"),
        "rewards": rewards(doc),
        **_exception_info(doc),
        "n_episodes": _episodes(doc),
        "started_at": started,
        "finished_at": finished,
        **phase_seconds,
        "multi_step": bool(doc.get("step_results")),
        "n_rollout_segments": len(details) if isinstance(details, list) else 0,
    }
