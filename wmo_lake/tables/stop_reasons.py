"""`stop_reasons`: the evidence a trial's stop reason is derived from, one row per trial (WMO's
`distill.tokens`).

The reason itself is derived in SQL (`trial_records.sql`), so a query-time `max_turns` can change
it. Here: the recorded exception type, `n_episodes`, whether the ATIF trajectory's last agent step
called `mark_task_complete`, and the WMO run trace (`agent/wmo-run.json`, then the trial root).
"""

from __future__ import annotations

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


def read_trace(trial_dir: Path, problems: ProblemLog) -> Trace:
    """The first `wmo-run.json` that is a file (agent/ first, then the trial root)."""
    for candidate in (trial_dir / "agent" / TRACE_FILENAME, trial_dir / TRACE_FILENAME):
        if not candidate.is_file():
            continue
        doc = read_json(candidate, problems)
        if isinstance(doc, ReadFailure):
            problems.add(doc.kind, candidate, doc.message + "; the trial's stop reason is unknown")
            return Trace(candidate)
        if not isinstance(doc, dict):
            shown = "an array" if isinstance(doc, list) else json_type_name(doc)
            problems.add(
                "not_an_object",
                candidate,
                f"{candidate} holds {shown}, expected the run trace object with a string "
                "stop_reason; the trial's stop reason is unknown",
            )
            return Trace(candidate)
        reason = doc.get("stop_reason")
        if reason is not None and not isinstance(reason, str):
            problems.add(
                "wrong_type",
                candidate,
                f"{candidate.name}: stop_reason is not a string; the stop reason is unknown",
            )
        return Trace(candidate, reason if isinstance(reason, str) else None)
    return Trace()


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
