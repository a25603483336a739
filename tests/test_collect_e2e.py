"""`wmo-lake collect` end to end, offline: the real harbor 0.26 runs terminus-2 against the kit's
scripted mock LLM (tests/harbor_e2e/) in namespace sandboxes, and the lake reports what the
script made the mock do.

Expected values come from the kit (its mock_llm.py script and its tasks' verifiers), never from
the code under test:
- hello-file passes every attempt (writes the file, declares done twice); on attempts with
  attempt % 3 == 2 its first answer is cut at max tokens (finish_reason 'length'): a turn harbor
  drops, seen only in trial.log.
- sum-numbers writes 6, so it fails (CTRF: 1 of 2 tests pass -> graded 0.5); attempts whose
  script never declares completion (odd ones) run out of max_turns = 5.
- no-reward submits, its verifier writes ctrf.json (1 test, passed) and exits 3 with no reward:
  harbor records RewardFileNotFoundError -> no measured reward (infra failure), stop reason
  `error`, a verifier-side exception.
- multi-reward passes; its reward.json has three keys {reward: 1, n_passed: 3, n_failed: 0}.
The mock numbers attempts per task across its life: one server for both steps gives step 0
attempts 0..2 and step 1 attempts 3..5.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from harbor_kit import (
    ATTEMPTS,
    TASK_IDS,
    TEMPLATE,
    hello_dropped_turns,
    kit_env,
    kit_sets,
    mock_llm,
    mock_requests,
    mock_server,
    require_sandbox_tools,
    sum_runs_out_of_turns,
)

from wmo_lake.cli import cli

pytestmark = [
    pytest.mark.slow,
    # harbor 0.26 warns about its own Task.checksum on every trial
    pytest.mark.filterwarnings("ignore:Task.checksum:DeprecationWarning"),
]

CLI = [sys.executable, "-m", "wmo_lake.cli"]
VERIFIER_CRASHES = ATTEMPTS  # every no-reward attempt


def expected_stats(attempts: range) -> dict[str, object]:
    """rollout_stats for one step of the 4 kit tasks x `attempts` (the mock's attempt numbers)."""
    out_of_turns = sum(1 for attempt in attempts if sum_runs_out_of_turns(attempt))
    dropped = [hello_dropped_turns(attempt) for attempt in attempts]
    trials = 4 * len(attempts)
    executed = trials - VERIFIER_CRASHES  # no-reward never has a measured reward
    passed = 2 * len(attempts)  # hello-file and multi-reward
    # graded, in (task, attempt) order: hello 1.0, multi-reward 1.0 (3/3), sum-numbers 0.5 (1/2)
    graded = [1.0] * len(attempts) + [1.0] * len(attempts) + [0.5] * len(attempts)
    stop_reasons = {
        "error": VERIFIER_CRASHES,
        "max_turns": out_of_turns,
        "submitted": trials - VERIFIER_CRASHES - out_of_turns,
    }
    return {
        "trials": trials,
        "trials_with_spans": trials,
        "solve_rate": passed / executed,
        "graded_solve_rate": sum(graded) / len(graded),
        "graded_trials": len(graded),
        "raw_solve_rate": passed / trials,
        "executed_trials": executed,
        "infra_failed_trials": VERIFIER_CRASHES,
        "empty_span_trials": 0,
        "truncated_spans": 0,  # no sampled turn reaches the default 8192-token cap
        "truncated_span_trials": 0,
        "stop_reason_counts": {k: v for k, v in sorted(stop_reasons.items()) if v},
        "scaffold_loss_rate": (VERIFIER_CRASHES + out_of_turns) / trials,
        "unreadable_trials": 0,
        # beside the seed's columns: hello-file's turns cut at max tokens, which harbor dropped
        "dropped_turns": sum(dropped),
        "dropped_turn_trials": sum(1 for n in dropped if n),
        # no-reward's verifier crashes, all of them in the scaffold loss as `error`
        "verifier_error_trials": VERIFIER_CRASHES,
        "verifier_scaffold_loss_rate": VERIFIER_CRASHES / trials,
    }


@pytest.fixture
def kit_process_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This process set up to run the kit in-process (what the CLI user sets in the shell)."""
    require_sandbox_tools()
    for key, value in kit_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(str(Path(kit_env()["PYTHONPATH"].split(os.pathsep)[0])))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))


# All 12 trials of a step at once (job.yaml runs 4): the mock's answers do not depend on it, and
# the step takes as long as its slowest trial. The SIGKILL test keeps 4, so it can land mid-step.
ALL_AT_ONCE = "n_concurrent_trials=12"


def collect_args(run_dir: Path, lake: Path, step: int, api_base: str, *more_sets: str) -> list[str]:
    args = ["collect", "--template", str(TEMPLATE), "--run-dir", str(run_dir)]
    args += ["--step", str(step), "--lake", str(lake)]
    for assignment in [*kit_sets(api_base), *more_sets]:
        args += ["--set", assignment]
    return args


def test_two_steps_collected_and_reported_as_the_script_says(
    kit_process_env: None, tmp_path: Path
) -> None:
    import wmo_lake

    run_dir, lake, log = tmp_path / "runs" / "exp1", tmp_path / "lake", tmp_path / "mock.jsonl"
    with mock_server(log) as api_base:
        args = collect_args(run_dir, lake, 0, api_base, ALL_AT_ONCE)
        first = CliRunner().invoke(cli, [*args, "--json"])
        assert first.exit_code == 0, first.output
        step0 = json.loads(first.stdout)
        sets = [*kit_sets(api_base), ALL_AT_ONCE]
        step1 = wmo_lake.collect(TEMPLATE, run_dir, 1, sets=sets, lake=lake, with_spans=True)

    # step 0 through the CLI (--json), step 1 through the Python API
    assert step0["batch"] == "exp1/harbor/step-0000/rollouts"
    assert step0["harbor_ran"] is True and step0["trials_planned"] == 12
    stats0 = step0["stats"]
    for key, value in expected_stats(range(0, 3)).items():
        assert stats0[key] == pytest.approx(value), key
    assert stats0["step"] == 0 and stats0["run"] == "exp1"

    assert step1.batch == "exp1/harbor/step-0001/rollouts"
    row1 = step1.stats_row
    assert row1 is not None
    for key, value in expected_stats(range(3, 6)).items():
        assert row1[key] == pytest.approx(value), key
    assert step1.stats.height == 1 and step1.stats["trials"][0] == 12

    # the records: one per trial, each task's outcome as the script says
    records = step1.records
    assert records.height == 12 and "spans" in records.columns
    # a record's task_id is harbor's task_id.get_name(): the task dir's name, not task_name
    by_task = {
        task: records.filter(records["task_id"] == task.rsplit("/", 1)[-1]).sort("attempt")
        for task in TASK_IDS
    }
    assert by_task["e2e/hello-file"]["passed"].to_list() == [True] * 3
    assert by_task["e2e/multi-reward"]["passed"].to_list() == [True] * 3
    assert by_task["e2e/sum-numbers"]["passed"].to_list() == [False] * 3
    assert by_task["e2e/sum-numbers"]["graded_score"].to_list() == [0.5] * 3
    no_reward = by_task["e2e/no-reward"]
    assert no_reward["infra_failed"].to_list() == [True] * 3
    assert no_reward["stop_reason"].to_list() == ["error"] * 3

    # The warnings name the step's batch: infra failures and scaffold loss.
    notes = " | ".join(step1.notes)
    assert "3/12 trial(s) never produced verifier evidence" in notes
    assert "scaffold loss" in notes and "25.0 points of it are verifier crashes" in notes
    assert "1 turn(s) across 1/12 trial(s) stopped at max_tokens" in notes
    hello = by_task["e2e/hello-file"]
    assert sorted(hello["n_spans"].to_list()) == sorted(
        len(mock_llm.hello(a)) - hello_dropped_turns(a) for a in range(3, 6)
    )

    # the multi-key reward: with n_failed as the reward key only multi-reward has a measured
    # reward (0: not passed); every other task's rewards lack that key (infra failure)
    stats = CliRunner().invoke(
        cli,
        [
            "stats",
            "--lake",
            str(lake),
            "--run",
            "exp1",
            "--reward-key",
            "n_failed",
            "--json",
        ],
    )
    assert stats.exit_code == 0, stats.output
    by_step = {row["step"]: row for row in json.loads(stats.stdout)}
    for row in by_step.values():
        assert (row["executed_trials"], row["solve_rate"], row["infra_failed_trials"]) == (
            3,
            0.0,
            9,
        )

    # both steps are in the lake, and only once
    again = CliRunner().invoke(cli, ["stats", "--lake", str(lake), "--json"])
    assert [row["batch"] for row in json.loads(again.stdout)] == [
        "exp1/harbor/step-0000/rollouts",
        "exp1/harbor/step-0001/rollouts",
    ]


def _result_files(job_dir: Path) -> dict[str, float]:
    """The trials whose result.json is whole. harbor writes it by write_text (truncate, then
    write), so a file that exists may still be cut off: the kill can land mid-write, and the
    collector rightly removes that trial and runs it again."""
    whole = {}
    for path in job_dir.glob("*/result.json"):
        try:
            json.loads(path.read_bytes())
            mtime = path.stat().st_mtime_ns  # after the read: the writes it saw are all done
        except (OSError, ValueError):
            continue
        whole[path.parent.name] = mtime
    return whole


def test_sigkill_mid_step_then_the_same_command_completes_it_without_duplicates(
    kit_process_env: None, tmp_path: Path
) -> None:
    run_dir, lake, log = tmp_path / "runs" / "exp1", tmp_path / "lake", tmp_path / "mock.jsonl"
    job_dir = run_dir / "harbor" / "step-0000" / "rollouts"
    scratch = tmp_path / "scratch-killed"
    scratch.mkdir()
    with mock_server(log) as api_base:
        args = collect_args(run_dir, lake, 0, api_base)
        process = subprocess.Popen(
            [*CLI, *args],
            env={**os.environ, **kit_env(scratch)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: the kill takes its sandboxes too
        )
        deadline = time.monotonic() + 120
        try:
            while len(_result_files(job_dir)) < 2:
                assert process.poll() is None, "collect ended before it could be killed"
                assert time.monotonic() < deadline, "no trial finished within 120 s"
                time.sleep(0.02)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        finished_before = _result_files(job_dir)
        assert 2 <= len(finished_before) < 12, "the kill must land mid-step"
        assert not (lake / "manifest.json").exists()  # nothing was ingested yet

        # the same command again: it resumes the step
        resumed = CliRunner().invoke(cli, [*args, "--json"])
        assert resumed.exit_code == 0, resumed.output
        report = json.loads(resumed.stdout)
        assert report["harbor_ran"] is True
        assert report["trials_done_before"] == len(finished_before)

        # and once more: the step is complete, harbor does not run, nothing is re-sampled
        requests = len(mock_requests(log))
        complete = CliRunner().invoke(cli, [*args, "--json"])
        assert complete.exit_code == 0, complete.output
        assert json.loads(complete.stdout)["harbor_ran"] is False
        assert len(mock_requests(log)) == requests

    after = _result_files(job_dir)
    trial_dirs = [p for p in job_dir.iterdir() if p.is_dir()]
    assert len(after) == len(trial_dirs) == 12  # no leftover half-run trial dir
    # the trials finished before the kill were kept as they were, not run again
    assert {name: after[name] for name in finished_before} == finished_before
    per_task: dict[str, int] = {}
    for trial in trial_dirs:
        task = json.loads((trial / "result.json").read_text())["task_name"]
        per_task[task] = per_task.get(task, 0) + 1
    assert per_task == dict.fromkeys(TASK_IDS, ATTEMPTS)
    stats = report["stats"]
    assert stats["trials"] == 12 and report["ingest"]["trials_new"] == 12
    lake_trials = CliRunner().invoke(
        cli, ["sql", "--lake", str(lake), "--format", "json", "SELECT trial_name FROM trials"]
    )
    names = [row["trial_name"] for row in json.loads(lake_trials.stdout)]
    assert sorted(names) == sorted(after)  # each trial once


def test_a_template_naming_a_class_that_does_not_exist_says_to_fix_the_template(
    kit_process_env: None, tmp_path: Path
) -> None:
    """harbor fails before any trial when the environment class does not exist; running the
    same command again cannot help, so the error says to look at the template first."""
    args = collect_args(tmp_path / "runs" / "exp1", tmp_path / "lake", 0, "http://127.0.0.1:9")
    args += ["--set", "environment.import_path=local_env:NoSuchEnvironment", "--attempts", "1"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "NoSuchEnvironment" in result.output and "Traceback" not in result.output
    assert "if that names something of the job template" in result.output


def test_quiet_hides_harbor_display_too(kit_process_env: None, tmp_path: Path) -> None:
    """Without -q, harbor's progress display (its bar, drawn by rich on the process's stdout,
    which collect sends to stderr) and collect's lines are on stderr; with -q, neither is.
    stdout keeps the stats table either way. A real process: rich draws on the real streams."""
    run_dir, lake, log = tmp_path / "runs" / "exp1", tmp_path / "lake", tmp_path / "mock.jsonl"
    one_trial = ["--task", "e2e/hello-file", "--attempts", "1"]
    with mock_server(log) as api_base:
        loud, quiet = (
            subprocess.run(
                [*CLI, *collect_args(run_dir, lake, step, api_base), *one_trial, *more],
                env={**os.environ, **kit_env(tmp_path / "scratch")},
                capture_output=True,
                text=True,
                timeout=300,
            )
            for step, more in ((0, []), (1, ["-q"]))
        )
    assert loud.returncode == 0 and quiet.returncode == 0, loud.stderr + quiet.stderr
    assert "━" in loud.stderr and "Mean: 1.000" in loud.stderr  # harbor's bar
    assert "step 0: 1 task(s)" in loud.stderr
    assert quiet.stderr == ""
    for result in (loud, quiet):
        assert "solve" in result.stdout and "Mean" not in result.stdout
