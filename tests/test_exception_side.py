"""A verifier crash is not an agent failure: the seed's stop reason stays (an exception is
`error`), `trial_stop_reasons.exception_side` says whose exception it was, and rollout_stats /
`stats` say how much of the scaffold loss is the verifier's.

The verifier-side classes are harbor's own (read from harbor.verifier.verifier and
harbor.trial.errors here), and the real case is the offline kit's no-reward task
(fixtures/harbor/kit-e2e): its verifier writes ctrf.json, then exits without a reward, and harbor
records RewardFileNotFoundError.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from harbor_shapes import write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.stats import collect_stats

KIT_JOB = FIXTURES / "harbor" / "kit-e2e"
BATCH = "kit-e2e"


def _exception_classes(module_name: str) -> set[str]:
    module = __import__(module_name, fromlist=["_"])
    return {
        name
        for name, value in inspect.getmembers(module, inspect.isclass)
        if issubclass(value, BaseException) and value.__module__ == module_name
    }


def harbor_verifier_exceptions() -> set[str]:
    """Every exception harbor's verifier phase raises: its verifier module's own classes, and
    the verifier's timeout from harbor.trial.errors."""
    trial_errors = _exception_classes("harbor.trial.errors")
    return _exception_classes("harbor.verifier.verifier") | {
        name for name in trial_errors if name.startswith("Verifier")
    }


def harbor_agent_side_exceptions() -> set[str]:
    return _exception_classes("harbor.trial.errors") - harbor_verifier_exceptions() | {
        "NonZeroAgentExitCodeError",
        "ContextLengthExceededError",
        "OutputLengthExceededError",
        "RuntimeError",
    }


def test_every_harbor_verifier_exception_is_verifier_side(tmp_path: Path) -> None:
    verifier = harbor_verifier_exceptions()
    assert {"RewardFileNotFoundError", "VerifierTimeoutError", "RewardFileEmptyError"} <= verifier
    agent = harbor_agent_side_exceptions()
    job = write_job(tmp_path / "runs" / "r" / "harbor" / "step-0000" / "job", max_turns=5)
    expected: dict[str, str | None] = {"t__none": None}
    write_trial(job, "t__none")
    for index, name in enumerate(sorted(verifier | agent)):
        write_trial(job, f"t__{index}", exception_type=name)
        expected[f"t__{index}"] = "verifier" if name in verifier else "agent"
    ingest([tmp_path / "runs"], tmp_path / "lake")
    con = connect(tmp_path / "lake")
    rows = con.execute(
        """SELECT t.trial_name, r.exception_side, r.stop_reason
           FROM trial_stop_reasons r JOIN trials t USING (trial_key)"""
    ).fetchall()
    assert {name: side for name, side, _ in rows} == expected
    # the seed's stop reason is kept: a verifier crash is still `error`
    reasons = {name: reason for name, _, reason in rows}
    for index, name in enumerate(sorted(verifier | agent)):
        if name == "AgentTimeoutError":
            assert reasons[f"t__{index}"] == "budget"
        elif name == "ContextLengthExceededError":
            assert reasons[f"t__{index}"] == "provider_error"
        else:
            assert reasons[f"t__{index}"] == "error", name


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = tmp_path_factory.mktemp("kit") / "lake"
    ingest([KIT_JOB], lake)
    return lake


def test_the_kits_crashed_verifier_is_verifier_side_and_still_error(lake: Path) -> None:
    rows = (
        connect(lake)
        .execute(
            """SELECT t.task_name, t.exception_type, r.stop_reason, r.exception_side
               FROM trials t JOIN trial_stop_reasons r USING (trial_key)
               ORDER BY t.task_name"""
        )
        .fetchall()
    )
    assert (
        rows
        == [("e2e/hello-file", None, "submitted", None)] * 3
        + [("e2e/no-reward", "RewardFileNotFoundError", "error", "verifier")] * 3
    )


def test_rollout_stats_says_how_much_scaffold_loss_is_the_verifiers(lake: Path) -> None:
    con = connect(lake)
    (row,) = con.execute(
        """SELECT scaffold_loss_rate, verifier_error_trials, verifier_scaffold_loss_rate,
                  stop_reason_counts
           FROM rollout_stats WHERE batch = ?""",
        [BATCH],
    ).fetchall()
    # 6 trials with a stop reason: 3 submitted (hello-file), 3 verifier crashes (no-reward)
    assert row == (3 / 6, 3, 3 / 6, {"error": 3, "submitted": 3})
    notes = [n for n in collect_stats(lake).notes if "scaffold loss" in n]
    assert len(notes) == 1 and "50.0 points of it are verifier crashes" in notes[0]
    table = CliRunner().invoke(cli, ["stats", "--lake", str(lake)])
    assert "50.0% (50.0% verifier)" in table.output


def test_an_agent_exception_is_not_counted_as_the_verifiers(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "r" / "harbor" / "step-0000" / "job", max_turns=5)
    write_trial(job, "t__1", exception_type="NonZeroAgentExitCodeError")
    write_trial(job, "t__2", exception_type="VerifierTimeoutError")
    write_trial(job, "t__3")
    ingest([tmp_path / "runs"], tmp_path / "lake")
    (row,) = (
        connect(tmp_path / "lake")
        .execute(
            "SELECT scaffold_loss_rate, verifier_error_trials, verifier_scaffold_loss_rate "
            "FROM rollout_stats"
        )
        .fetchall()
    )
    assert row == (2 / 3, 1, 1 / 3)
