"""`stop_reasons`: the evidence a trial's stop reason is derived from, one row per trial (WMO's
`distill.tokens`).

The reason itself is derived in SQL (`trial_records.sql`), so a query-time `max_turns` can change
it. Here: the recorded exception type, `n_episodes`, whether the ATIF trajectory's last agent step
called `mark_task_complete`, and the WMO run trace (`agent/wmo-run.json`, then the trial root).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wmo_lake.jsonfile import ReadFailure, read_json
from wmo_lake.tables import atif
from wmo_lake.tables.fields import ProblemLog, json_type_name

TERMINUS_COMPLETE_TOOL = "mark_task_complete"
TRACE_FILENAME = "wmo-run.json"


def declared_complete(trajectory: Any) -> bool:
    """True when the trajectory (as `atif.read` decodes it) has a last `agent` step with a
    `mark_task_complete` tool call."""
    steps = trajectory.steps if isinstance(trajectory, atif.Trajectory) else None
    if not isinstance(steps, list):
        return False
    for step in reversed(steps):
        if not isinstance(step, atif.Step) or step.source != "agent":
            continue
        calls = step.tool_calls
        if not isinstance(calls, list):
            return False
        return any(
            isinstance(call, atif.Call) and call.function_name == TERMINUS_COMPLETE_TOOL
            for call in calls
        )
    return False


@dataclass
class Trace:
    path: Path | None = None
    stop_reason: str | None = None


def read_trace(
    trial_dir: Path,
    problems: ProblemLog,
    *,
    decides: bool = True,
    agent_names: list[str] | None = None,
) -> Trace:
    """The first `wmo-run.json` that is a file (agent/ first, then the trial root). `decides`:
    whether the trial's stop reason is the trace's (the pi-bridge path); on the terminus-2 path
    it is evidence only, and a trace that cannot be read is said to change nothing.
    `agent_names`: the agent/ dir's listing, when the caller has it (a stat saved)."""
    # (path strings, a Path only for a trace found: most trials have none, on both paths)
    directory = str(trial_dir)
    places = [f"{directory}/{TRACE_FILENAME}"]
    if agent_names is None or TRACE_FILENAME in agent_names:
        places.insert(0, f"{directory}/agent/{TRACE_FILENAME}")
    found = next((place for place in places if os.path.isfile(place)), None)
    if found is None:
        return Trace()
    after = (
        "; the trial's stop reason is unknown"
        if decides
        else "; it is not what this trial's stop reason is taken from (terminus-2's is "
        "reconstructed), so nothing else changes"
    )
    candidate = Path(found)
    doc = read_json(candidate, problems)
    if isinstance(doc, ReadFailure):
        problems.add(doc.kind, candidate, doc.message + after)
        return Trace(candidate)
    if not isinstance(doc, dict):
        shown = "an array" if isinstance(doc, list) else json_type_name(doc)
        problems.add(
            "not_an_object",
            candidate,
            f"{candidate} holds {shown}, expected the run trace object with a string "
            f"stop_reason{after}",
        )
        return Trace(candidate)
    reason = doc.get("stop_reason")
    if reason is not None and not isinstance(reason, str):
        problems.add(
            "wrong_type", candidate, f"{candidate.name}: stop_reason is not a string{after}"
        )
    return Trace(candidate, reason if isinstance(reason, str) else None)


def row(
    *,
    exception_type: str | None,
    n_episodes: int | None,
    trajectory_status: str,
    trajectory: Any,
    trace: Trace,
) -> dict[str, Any]:
    return {
        "exception_type": exception_type,
        "n_episodes": n_episodes,
        "trajectory_status": trajectory_status,
        "declared_complete": declared_complete(trajectory),
        "has_trace": trace.path is not None,
        "trace_path": None if trace.path is None else str(trace.path),
        "trace_stop_reason": trace.stop_reason,
    }
