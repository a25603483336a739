"""The two collection paths of WMO's `distill.tokens`, chosen per trial from the agent it ran
(the trial's own recorded agent; its job's `agents[0]` when it records none).

- **pi-bridge**: the agent's kwargs carry `token_sink_dir` (upstream `agents.py`: the distill
  agent writes `{token_sink_dir}/{trial_name}.jsonl`, one dir per training step). Spans come only
  from that trial's sink file, the stop reason only from its `wmo-run.json` trace.
- **terminus-2** (every other job): spans only from `agent_result.rollout_details` (its first
  segment), the stop reason only by the terminus-2 reconstruction.

Sinks are found through the recorded `token_sink_dir`, so a trial never reads another step's sink
of the same name. A recorded dir can be remapped (`--sink-root OLD=NEW`: a tree moved or copied);
a relative one (the collector writes `run_dir/tokens/step-NNNN`, relative when its run dir was)
resolves against the nearest ancestor of the job dir under which it exists.

    path, recorded = collection_path(config)           # ("pi-bridge", "runs/x/tokens/step-0001")
    sink = resolve_sink_dir(recorded, job_dir, roots)  # SinkDir(path=..., exists=True)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PI_BRIDGE = "pi-bridge"
TERMINUS_2 = "terminus-2"
# (OLD prefix, NEW prefix): the longest OLD a recorded dir lies under wins (the first of equal ones)
SinkRoots = tuple[tuple[str, str], ...]


def collection_path(config: Any) -> tuple[str, str | None]:
    """(the job's collection path, its recorded token_sink_dir) from its JobConfig document: its
    first agent's (a trial of another agent has its own: `agent_collection_path`)."""
    agents = config.get("agents") if isinstance(config, dict) else None
    return agent_collection_path(agents[0] if isinstance(agents, list) and agents else None)


def agent_collection_path(agent: Any) -> tuple[str, str | None]:
    """(the collection path, the recorded token_sink_dir) of one harbor AgentConfig document."""
    kwargs = agent.get("kwargs") if isinstance(agent, dict) else None
    recorded = kwargs.get("token_sink_dir") if isinstance(kwargs, dict) else None
    if isinstance(recorded, str) and recorded:  # agents.py refuses anything else
        return PI_BRIDGE, recorded
    return TERMINUS_2, None


def parse_sink_root(text: str) -> tuple[str, str]:
    """`OLD=NEW` -> (OLD, NEW); ValueError saying what is expected."""
    old, sep, new = text.partition("=")
    if not sep or not old or not new:
        raise ValueError(
            f"--sink-root takes OLD=NEW (the recorded token_sink_dir prefix and where it is "
            f"now), got {text!r}"
        )
    return old, new


@dataclass(frozen=True)
class SinkDir:
    path: str  # absolute; where the sinks are (or, when missing, where they were looked for)
    exists: bool
    looked_in: str  # how it was found, for the problem message


@dataclass(frozen=True)
class Collection:
    """How a trial's spans and stop reason are read: its agent's collection path, the
    token_sink_dir that agent records, and where that dir is (resolved)."""

    path: str = TERMINUS_2
    token_sink_dir: str | None = None
    sink: SinkDir | None = None


def _remapped(recorded: str, roots: SinkRoots) -> str:
    """`recorded` under the remap of the longest OLD it lies under: a remap of /a/b is not
    shadowed by one of /a, whichever was given (or remembered) first."""
    matching = [(old, new) for old, new in roots if Path(recorded).is_relative_to(old)]
    if not matching:
        return recorded
    old, new = max(matching, key=lambda pair: len(Path(pair[0]).parts))  # (first of a tie)
    return str(Path(new) / Path(recorded).relative_to(old))


def resolve_sink_dir(recorded: str, job_dir: Path, roots: SinkRoots = ()) -> SinkDir:
    """Where a job's sinks are: the recorded dir after any `--sink-root` remap; a relative one
    under the nearest ancestor of the job dir where it exists."""
    target = _remapped(recorded, roots)
    if os.path.isabs(target):
        return SinkDir(target, os.path.isdir(target), target)
    ancestors = Path(os.path.abspath(job_dir)).parents
    for ancestor in ancestors:
        candidate = ancestor / target
        if candidate.is_dir():
            return SinkDir(str(candidate), True, str(candidate))
    return SinkDir(str(ancestors[0] / target), False, f"{target} under every ancestor of {job_dir}")
