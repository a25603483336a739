"""Validate run.sh's output against harbor's own models and print one line per trial.

    /path/to/venv/bin/python check.py OUT

Checks: every job result.json is a JobResult, every trial result.json a TrialResult,
every agent/trajectory.json an ATIF Trajectory; rollout_details has one token-id list
and one logprob per completion token for each turn; ctrf.json / reward files are where
the verifier wrote them. Exits 1 on any failure.
"""

import json
import sys
from pathlib import Path

from harbor.models.job.result import JobResult
from harbor.models.trajectories import Trajectory
from harbor.models.trial.result import TrialResult

out = Path(sys.argv[1])
failures = []


def fail(where, why):
    failures.append(f"{where}: {why}")


for job_result in sorted(out.glob("**/step-*/*/result.json")):
    JobResult.model_validate_json(job_result.read_text())
    for trial in sorted(p for p in job_result.parent.iterdir() if (p / "result.json").exists()):
        r = TrialResult.model_validate_json((trial / "result.json").read_text())
        name = f"{trial.parent.parent.name}/{trial.name}"
        traj = Trajectory.model_validate_json((trial / "agent/trajectory.json").read_text())
        agent_steps = sum(1 for s in traj.steps if s.source == "agent")
        rd = (r.agent_result.rollout_details or [{}])[0]
        p, c, lp = (
            rd.get("prompt_token_ids", []),
            rd.get("completion_token_ids", []),
            rd.get("logprobs", []),
        )
        if not (p and len(p) == len(c) == len(lp)):
            fail(name, f"rollout turns prompt/completion/logprobs = {len(p)}/{len(c)}/{len(lp)}")
        if any(len(a) != len(b) for a, b in zip(c, lp, strict=False)):
            fail(name, "a turn's logprobs differ in length from its completion ids")
        v = trial / "verifier"
        has_ctrf = (v / "ctrf.json").exists() and "results" in json.loads(
            (v / "ctrf.json").read_text()
        )
        rewards = r.verifier_result.rewards if r.verifier_result else None
        reward_file = next(
            (f.name for f in (v / "reward.json", v / "reward.txt") if f.exists()), None
        )
        if (rewards is None) != (reward_file is None):
            fail(name, f"rewards {rewards} but reward file {reward_file}")
        if not has_ctrf:
            fail(name, "no ctrf.json")
        secs = (r.finished_at - r.started_at).total_seconds()
        exc = r.exception_info.exception_type if r.exception_info else "-"
        print(
            f"{name:38} {secs:5.2f}s turns={len(p)} agent_steps={agent_steps} "
            f"tokens={sum(map(len, p))}+{sum(map(len, c))} rewards={rewards} exc={exc}"
        )

print("\n".join(failures) or "all valid")
sys.exit(1 if failures else 0)
