"""The trees the tests and benchmarks write are harbor-shaped: harbor's own pydantic models
(TrialResult, JobConfig, JobResult, the ATIF Trajectory) accept them, as they accept the real
output in fixtures/. Needs the `harbor` extra, which `make test` installs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harbor_shapes import write_job, write_trial

harbor_trial = pytest.importorskip("harbor.models.trial.result")
harbor_job_config = pytest.importorskip("harbor.models.job.config")
harbor_job_result = pytest.importorskip("harbor.models.job.result")
harbor_trajectory = pytest.importorskip("harbor.models.trajectories")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harbor"


def _check_trial(trial_dir: Path) -> None:
    result = harbor_trial.TrialResult.model_validate_json((trial_dir / "result.json").read_text())
    assert result.trial_name == trial_dir.name
    trajectory = trial_dir / "agent" / "trajectory.json"
    if trajectory.exists():
        harbor_trajectory.Trajectory.model_validate_json(trajectory.read_text())


def _check_job(job_dir: Path) -> None:
    harbor_job_config.JobConfig.model_validate_json((job_dir / "config.json").read_text())
    harbor_job_result.JobResult.model_validate_json((job_dir / "result.json").read_text())


def test_the_real_fixtures_are_what_harbor_reads() -> None:
    for job_dir in sorted(FIXTURES.iterdir()):
        _check_job(job_dir)
        for result in sorted(job_dir.glob("*/result.json")):
            _check_trial(result.parent)


def test_test_trees_are_harbor_shaped(tmp_path: Path) -> None:
    job = write_job(tmp_path / "run" / "harbor" / "step-0001" / "job", max_turns=30, max_tokens=512)
    _check_job(job)
    _check_trial(
        write_trial(
            job,
            "t__1",
            reward=1,
            exception_type="AgentTimeoutError",
            turns=[([1, 2], [3], [-0.5]), ([1, 2, 3, 4], [5, 6], [-0.1, -0.2])],
            declared_complete=False,
        )
    )


def test_bench_trees_are_harbor_shaped(tmp_path: Path) -> None:
    from bench.realistic_trees import TreeSpec, generate

    for kind in ("rollouts", "trajectories"):
        spec = TreeSpec(kind=kind, trials=2, trials_per_job=2, turns=(2, 3))
        tree = generate(spec, tmp_path / kind)
        results = sorted(tree.root.rglob("result.json"))
        trials = [p.parent for p in results if "trial_name" in json.loads(p.read_text())]
        assert len(trials) == 2
        for trial_dir in trials:
            _check_trial(trial_dir)
            _check_job(trial_dir.parent)


def test_agent_identity_leaves_out_exactly_harbors_agent_defaults() -> None:
    """`trials.agent_config` drops the AgentConfig fields whose value is null, false, [] or {}
    (config.json leaves defaults out, result.json writes them): that is harbor's own
    exclude-defaults dump only while every AgentConfig default is one of those."""
    from wmo_lake.tables.trials import agent_identity

    agent_config = pytest.importorskip("harbor.models.trial.config").AgentConfig
    full = agent_config(name="terminus-2", kwargs={"max_turns": 5}).model_dump(mode="json")
    compact = agent_config.model_validate(full).model_dump(mode="json", exclude_defaults=True)
    assert compact == {"name": "terminus-2", "kwargs": {"max_turns": 5}}
    assert agent_identity(full) == agent_identity(compact)
    assert json.loads(agent_identity(full)) == compact
