"""`wmo-lake collect` before anything runs: the template validated as harbor's JobConfig, the
step's jobs dir, the task selection, --set, a step dir of another config, and the interrupted
trial dirs harbor would keep or double. Nothing here starts harbor's job (the real runs are in
test_collect_e2e.py); the template and tasks are the offline kit's (tests/harbor_e2e/)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner
from conftest import FIXTURES
from harbor_kit import TASKS, TEMPLATE

from wmo_lake.cli import cli
from wmo_lake.collector import (
    STEP_LOCK,
    CollectError,
    apply_sets,
    plan_step,
    prepare_job_dir,
    read_task_ids,
)

KIT_TASKS = f"datasets=[{{path: '{TASKS}'}}]"
KIT_JOB = FIXTURES / "harbor" / "kit-e2e"


def _collect(tmp_path: Path, *extra: str, template: Path = TEMPLATE) -> tuple[int, str]:
    args = ["collect", "--template", str(template), "--run-dir", str(tmp_path / "runs" / "exp1")]
    result = CliRunner().invoke(
        cli, [*args, "--step", "0", "--lake", str(tmp_path / "lake"), *extra]
    )
    return result.exit_code, result.output


def _template(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(TEMPLATE.read_text() + text)
    return path


# ----------------------------------------------------------------------------- the template


@pytest.mark.parametrize(
    ("appended", "field"),
    [
        ("n_concurrent_trials: 0\n", "n_concurrent_trials"),
        ("retry: {max_retries: -1}\n", "retry.max_retries"),
        ("timeout_multiplier: fast\n", "timeout_multiplier"),
        ("n_attempt: 3\n", "n_attempt"),  # a typo harbor itself would ignore silently
    ],
)
def test_an_invalid_template_is_one_error_naming_the_field(
    tmp_path: Path, appended: str, field: str
) -> None:
    code, output = _collect(tmp_path, "--set", KIT_TASKS, template=_template(tmp_path, appended))
    assert code == 2
    assert output.count("Error:") == 1 and f"'{field}'" in output
    assert "Traceback" not in output
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing was created


def test_a_bad_agent_list_entry_is_named_by_its_index(tmp_path: Path) -> None:
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--set", "agents.0.kwargs=5")
    assert code == 2 and "'agents.0.kwargs'" in output


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("n_attempts: [1\n", "not valid YAML"),
        ("- just\n- a list\n", "must be a mapping"),
    ],
)
def test_a_template_that_is_not_a_mapping_is_refused(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    code, output = _collect(tmp_path, template=path)
    assert code == 2 and says in output and str(path) in output


def test_a_template_or_tasks_file_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    template = tmp_path / "latin1.yaml"
    template.write_bytes(b"n_attempts: 1\n# caf\xe9\n")  # byte 19 is Latin-1's e-acute
    code, output = _collect(tmp_path, template=template)
    assert code == 2 and "Traceback" not in output
    assert f"the job template {template} is not UTF-8 text (byte 19)" in output
    tasks = tmp_path / "tasks.txt"
    tasks.write_bytes(b"\xff\xfe")  # a UTF-16 byte-order mark
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--tasks", str(tasks))
    assert code == 2 and "Traceback" not in output
    assert f"--tasks {tasks} is not UTF-8 text (byte 0)" in output
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing was created


def test_a_run_dir_that_cannot_be_written_is_a_usage_error_before_anything_runs(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "runs" / "exp1" / "harbor" / "step-0000"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("")  # a file where the step's dir goes: mkdir fails, as on a read-only fs
    code, output = _collect(tmp_path, "--set", KIT_TASKS)
    assert code == 2 and "Traceback" not in output
    assert f"cannot write the step's dir {blocker}" in output and "nothing was run" in output


def test_a_lake_that_cannot_be_written_keeps_the_step_and_says_to_run_again(
    tmp_path: Path, monkeypatch
) -> None:
    """The ingest after harbor's job fails on the lake (its lock file cannot be opened): exit 1
    naming the kept step dir and the lake, not an OSError traceback."""
    from wmo_lake import collector

    monkeypatch.setattr(collector, "run_job", lambda *args: None)  # (harbor's job: not needed)
    (tmp_path / "lake" / ".lock").mkdir(parents=True)  # open(.lock, "a+") fails: a directory
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--quiet")
    job_dir = tmp_path / "runs" / "exp1" / "harbor" / "step-0000" / "rollouts"
    assert code == 1 and "Traceback" not in output, output
    assert f"step 0's trials are kept in {job_dir}, but the lake at {tmp_path / 'lake'}" in output
    assert "run the same command again" in output


@pytest.mark.parametrize("kind", ["comma", "damaged"])
def test_a_lake_the_ingest_would_refuse_is_said_before_harbor_runs(
    tmp_path: Path, monkeypatch, kind: str
) -> None:
    from wmo_lake import collector

    ran: list[object] = []
    monkeypatch.setattr(collector, "run_job", lambda *args: ran.append(args))
    lake = tmp_path / ("new,lake" if kind == "comma" else "lake")
    if kind == "damaged":
        lake.mkdir()
        (lake / "manifest.json").write_text("[]")
    args = ["collect", "--template", str(TEMPLATE), "--run-dir", str(tmp_path / "runs" / "exp1")]
    result = CliRunner().invoke(
        cli, [*args, "--step", "0", "--lake", str(lake), "--set", KIT_TASKS]
    )
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    assert ("holds a comma" if kind == "comma" else "is not a wmo-lake manifest") in result.output
    assert ran == [] and not (tmp_path / "runs").exists()  # harbor never started


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"wmo_max_turns": -1}, "must be a positive integer"),
        ({"wmo_rewardkey": "score"}, "unknown setting 'wmo_rewardkey'"),
        ({"reward_mode": "binary"}, "must be one of raw, positive-binary"),
    ],
)
def test_a_bad_setting_is_refused_before_harbor_runs(
    tmp_path: Path, monkeypatch, settings: dict[str, object], said: str
) -> None:
    """wmo_lake.collect checked its settings in the step's report, after harbor's job had run
    (LakeError): a typo lost a whole step's report, and `except CollectError` missed it."""
    from wmo_lake import collector

    ran: list[object] = []
    monkeypatch.setattr(collector, "run_job", lambda *args: ran.append(args))
    with pytest.raises(CollectError, match=said) as refused:
        collector.collect(
            TEMPLATE, tmp_path / "runs", 0, sets=[KIT_TASKS], lake=tmp_path / "lake",
            settings=settings,
        )  # fmt: skip
    assert "nothing was run" in str(refused.value)
    assert ran == [] and not (tmp_path / "runs").exists() and not (tmp_path / "lake").exists()


def test_a_missing_template_is_a_usage_error(tmp_path: Path) -> None:
    code, output = _collect(tmp_path, template=tmp_path / "nope.yaml")
    assert code == 2 and "cannot read the job template" in output


@pytest.mark.parametrize("text", ["", "# only a comment\n"])
def test_an_empty_template_says_it_is_empty(tmp_path: Path, text: str) -> None:
    """It said "must be a mapping of harbor JobConfig fields, got NoneType"."""
    empty = tmp_path / "empty.yaml"
    empty.write_text(text)
    code, output = _collect(tmp_path, template=empty)
    assert code == 2 and f"the job template {empty} is empty;" in output
    assert "NoneType" not in output and not (tmp_path / "runs").exists()


def test_a_step_past_64_bits_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """It passed, harbor ran the step, and only the ingest found it could not store the step."""
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--step", str(2**63))
    assert code == 2 and f"--step must be a 64-bit integer (below 2^63), got {2**63}" in output
    assert not (tmp_path / "runs").exists()  # nothing ran, nothing was created


def test_a_template_without_tasks_says_how_to_give_them(tmp_path: Path) -> None:
    code, output = _collect(tmp_path)
    assert code == 2 and "names no tasks" in output and "--task" in output


@pytest.mark.parametrize("kind", ["missing", "a-file"])
def test_a_dataset_path_that_is_no_dir_is_a_usage_error_naming_it(
    tmp_path: Path, kind: str
) -> None:
    dataset = tmp_path / "no-such-dir"
    if kind == "a-file":
        dataset.write_text("")
    code, output = _collect(tmp_path, "--set", f"datasets=[{{path: '{dataset}'}}]")
    assert code == 2, output
    assert str(dataset) in output and "datasets[].path" in output and "Traceback" not in output
    assert not (tmp_path / "runs" / "exp1" / "harbor" / "step-0000" / "rollouts").exists()


# ----------------------------------------------------------------------------- the tasks


def test_an_unknown_task_id_fails_before_anything_runs(tmp_path: Path) -> None:
    code, output = _collect(
        tmp_path, "--set", KIT_TASKS, "--task", "e2e/hello-file", "--task", "e2e/no-such-task"
    )
    assert code == 2
    assert "'e2e/no-such-task'" in output and "e2e/hello-file" in output  # what exists
    assert "e2e/sum-numbers" in output
    assert not (tmp_path / "runs").exists() and not (tmp_path / "lake").exists()


def test_tasks_by_name_by_dir_name_and_by_path(tmp_path: Path) -> None:
    plan = plan_step(
        TEMPLATE,
        tmp_path / "runs" / "exp1",
        7,
        task_ids=["no-reward", "e2e/hello-file", str(TASKS / "sum-numbers"), "hello-file"],
        attempts=2,
        sets=[KIT_TASKS],
    )
    assert plan.task_names == ["e2e/no-reward", "e2e/hello-file", "e2e/sum-numbers"]
    assert plan.repeated_ids == ["hello-file"]  # (a task named twice runs once)
    assert plan.trials_planned == 3 * 2
    config = plan.config
    assert config.n_attempts == 2 and config.datasets == []
    assert [Path(t.path).name for t in config.tasks] == ["no-reward", "hello-file", "sum-numbers"]
    assert Path(config.jobs_dir) == (tmp_path / "runs" / "exp1" / "harbor" / "step-0007")
    assert plan.job_dir == Path(config.jobs_dir) / "rollouts"  # the default job name


def test_without_a_selection_every_template_task_runs(tmp_path: Path) -> None:
    plan = plan_step(TEMPLATE, tmp_path / "r", 0, sets=[KIT_TASKS, "job_name=grpo"])
    assert sorted(plan.task_names) == [
        "e2e/hello-file",
        "e2e/multi-reward",
        "e2e/no-reward",
        "e2e/sum-numbers",
    ]
    assert plan.trials_planned == 4 * 3  # job.yaml: n_attempts 3
    assert plan.job_dir.name == "grpo"


def test_a_task_dir_alone_needs_no_dataset_in_the_template(tmp_path: Path) -> None:
    plan = plan_step(TEMPLATE, tmp_path / "r", 0, task_ids=[str(TASKS / "multi-reward")])
    assert plan.task_names == ["e2e/multi-reward"]


@pytest.mark.parametrize(
    "text",
    [
        "e2e/hello-file\n# a comment\n\nno-reward  # trailing comment\n",
        '["e2e/hello-file", "no-reward"]',
        '{"tasks": [{"id": "e2e/hello-file", "split": "train"}, {"id": "no-reward"}]}',
        '\ufeff["e2e/hello-file", "no-reward"]',  # a BOM hid the '[' (one id: '\ufeff[...')
        "\ufeffe2e/hello-file\nno-reward\n",
    ],
    ids=["lines", "json-list", "registry", "json-list-after-a-bom", "lines-after-a-bom"],
)
def test_a_tasks_file_in_each_form(tmp_path: Path, text: str) -> None:
    path = tmp_path / "tasks.txt"
    path.write_text(text, encoding="utf-8")
    assert read_task_ids(path) == ["e2e/hello-file", "no-reward"]


def test_a_bad_tasks_file_and_both_task_options_are_usage_errors(tmp_path: Path) -> None:
    path = tmp_path / "tasks.json"
    path.write_text('[{"split": "train"}]')
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--tasks", str(path))
    assert code == 2 and "entry 0" in output
    path.write_text("e2e/hello-file\n")
    code, output = _collect(tmp_path, "--tasks", str(path), "--task", "x", "--set", KIT_TASKS)
    assert code == 2 and "not both" in output


# ----------------------------------------------------------------------------- --set


def test_set_reaches_into_mappings_and_lists_with_yaml_values() -> None:
    raw = {"agents": [{"name": "terminus-2", "kwargs": {"max_turns": 5}}]}
    apply_sets(
        raw,
        [
            "agents.0.kwargs.max_turns=8",
            "agents.0.kwargs.temperature=0.7",
            "agents.0.kwargs.llm_kwargs.max_tokens=512",  # created on the way
            "agents.0.model_name=openai/gpt-4o",
            "n_attempts=4",
            "quiet=true",
        ],
    )
    assert raw == {
        "agents": [
            {
                "name": "terminus-2",
                "model_name": "openai/gpt-4o",
                "kwargs": {"max_turns": 8, "temperature": 0.7, "llm_kwargs": {"max_tokens": 512}},
            }
        ],
        "n_attempts": 4,
        "quiet": True,
    }


@pytest.mark.parametrize(
    ("assignment", "says"),
    [
        ("agents.3.kwargs.max_turns=8", "list of 1 item(s)"),
        ("agents.x=1", "not an index"),
        ("max_turns", "expected KEY=VALUE"),
        ("agents.0.name.first=1", "not a mapping or list"),
        ("agents.0.kwargs..max_turns=3", "an empty name between dots"),
    ],
)
def test_set_errors_say_what_is_there(assignment: str, says: str) -> None:
    with pytest.raises(CollectError, match=re.escape(says)):
        apply_sets({"agents": [{"name": "terminus-2"}]}, [assignment])


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"step": -1}, "step must be >= 0, got -1"),
        ({"step": 2**63}, "step must be a 64-bit integer (below 2^63)"),
        ({"attempts": 0, "sets": [KIT_TASKS]}, "attempts must be >= 1, got 0"),
        ({"tasks": ["x"], "tasks_file": "t.txt"}, "as tasks_file=FILE or as tasks=ID, not both"),
        ({"sets": ["max_turns"]}, "sets entry 'max_turns': expected KEY=VALUE"),
        ({}, "or pass tasks=TASK_DIR"),
        ({"tasks_file": "missing.txt", "sets": [KIT_TASKS]}, "cannot read tasks_file=missing.txt"),
    ],
    ids=[
        "step",
        "step-past-64-bits",
        "attempts",
        "both-task-arguments",
        "sets",
        "no-tasks",
        "tasks-file",
    ],
)
def test_from_python_collect_errors_name_its_arguments_not_cli_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arguments: dict[str, object], says: str
) -> None:
    import wmo_lake

    monkeypatch.chdir(tmp_path)
    with pytest.raises(CollectError) as raised:
        wmo_lake.collect(TEMPLATE, tmp_path / "runs", arguments.pop("step", 0), **arguments)
    message = str(raised.value)
    assert says in message and "--" not in message, message
    assert not (tmp_path / "runs").exists()  # nothing ran


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        (["agents=[]"], "runs no agent (its agents list is empty)"),
        (["job_name=../../step-0009/rollouts"], "is not a plain dir name"),
        (["job_name=.."], "is not a plain dir name"),
        (["tasks=[{path: /nonexistent/task}]"], "/nonexistent/task, which is not a directory"),
        (
            ["agents.0.name=terminus2"],
            "agents.0.name 'terminus2' is not an agent harbor knows (did you mean 'terminus-2'?)",
        ),
        (
            ["agents.0.name=null", "agents.0.import_path=nosuch_module:Agent"],
            "agents.0 is not an agent harbor can make: Failed to import module 'nosuch_module'",
        ),
    ],
    ids=[
        "no-agent",
        "job-name-a-path",
        "job-name-dotdot",
        "task-path-missing",
        "agent-name-misspelt",
        "agent-import-path-missing",
    ],
)
def test_a_template_harbor_would_fail_on_later_is_a_usage_error_now(
    tmp_path: Path, sets: list[str], says: str
) -> None:
    """JobConfig accepts these, and harbor failed on them (exit 1) or ran a step of 0 trials,
    or put the step's job in another step's dir: each is refused before anything runs."""
    extra = [arg for item in [KIT_TASKS, *sets] for arg in ("--set", item)]
    code, output = _collect(tmp_path, *extra)
    assert code == 2 and says in output, output
    assert not (tmp_path / "lake").exists()


# ----------------------------------------------------------------------------- the step's dir


def test_a_step_dir_holding_another_job_is_refused(tmp_path: Path) -> None:
    """A step is one job: the same step under another job_name would be a second batch of the
    step beside the first, so it is refused, naming the job the step holds."""
    _complete_step(tmp_path)
    code, output = _collect_complete(tmp_path)
    assert code == 0, output
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--set", "job_name=rollouts-v2")
    assert code == 2
    assert "already holds the job 'rollouts'" in output and "job_name" in output


def test_a_step_dir_of_another_config_is_refused_naming_what_differs(tmp_path: Path) -> None:
    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])
    plan.job_dir.mkdir(parents=True)
    (plan.job_dir / "config.json").write_text(plan.config.model_dump_json(indent=4))
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--set", "agents.0.kwargs.max_turns=8")
    assert code == 2
    assert "agents.0.kwargs.max_turns: 5 -> 8" in output and "--step" in output


def test_a_step_of_other_tasks_is_refused_naming_the_tasks_that_differ(tmp_path: Path) -> None:
    """Both whole task lists were printed as dicts (1,720 characters for 4 tasks against 3,
    growing with the batch), naming no task."""
    plan = plan_step(
        TEMPLATE, tmp_path / "runs" / "exp1", 0, task_ids=["hello-file"], sets=[KIT_TASKS]
    )
    plan.job_dir.mkdir(parents=True)
    (plan.job_dir / "config.json").write_text(plan.config.model_dump_json(indent=4))
    code, output = _collect(
        tmp_path, "--set", KIT_TASKS, "--task", "hello-file", "--task", "no-reward"
    )
    assert code == 2, output
    assert "tasks: 1 -> 2 items; now with " in output and "/no-reward" in output
    assert "'git_url'" not in output  # (not the entries' dicts)


def test_a_step_another_collect_holds_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """Two collects of one step at once would both run its unfinished trials (a group of 10
    for a planned 6): the second is refused, naming the process that holds the step."""
    import fcntl

    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])
    Path(plan.config.jobs_dir).mkdir(parents=True)
    with open(Path(plan.config.jobs_dir) / STEP_LOCK, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("wmo-lake collect pid 4242\n")
        held.flush()
        code, output = _collect(tmp_path, "--set", KIT_TASKS)
    assert code == 2
    assert "is being collected by wmo-lake collect pid 4242; nothing was run" in output
    assert not plan.job_dir.exists()


@pytest.mark.parametrize(
    ("signum", "code", "sigint_ignored"),
    [
        (signal.SIGINT, 130, False),
        (signal.SIGTERM, 143, False),
        (signal.SIGTERM, 143, True),
        (None, 130, False),
    ],
    ids=["ctrl-c", "sigterm", "sigterm-with-sigint-ignored", "ctrl-c-taken-by-duckdb"],
)
def test_an_interrupted_step_says_what_was_kept_and_how_to_resume(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    signum: int | None,
    code: int,
    sigint_ignored: bool,
) -> None:
    """Ctrl-C, or SIGTERM (stopped the way Ctrl-C stops harbor's job; also in a script's
    background job, where SIGINT is ignored), once the step has started: its finished trials
    are kept, and the same command resumes it. A Ctrl-C that lands in a DuckDB query (the
    ingest's commit) reaches Python as DuckDB's RuntimeError (see test_clean_failures.py)."""
    import os

    from wmo_lake import collector

    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])

    def interrupted_collect(*args: object, on_plan, **kwargs: object) -> None:  # type: ignore[no-untyped-def]
        on_plan(plan, collector.JobDirState())
        if signum is None:
            raise RuntimeError("Query interrupted")
        os.kill(os.getpid(), signum)

    monkeypatch.setattr(collector, "collect", interrupted_collect)
    sigint = signal.getsignal(signal.SIGINT)
    # (a test run in a shell's background job inherits SIGINT ignored: set it either way)
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.default_int_handler)
    try:
        result = CliRunner().invoke(
            cli, ["collect", "--template", str(TEMPLATE), "--run-dir", "x", "--step", "0"]
        )
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert result.exit_code == code
    said = "stopped by SIGTERM" if signum == signal.SIGTERM else "interrupted"
    assert (
        f"{said}: step 0 stopped; the trials it finished are kept in {plan.job_dir} "
        "(unfinished ones run again): run the same command again to resume it"
    ) in result.output
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back


def test_an_interrupted_quiet_step_says_its_line_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With --quiet nothing was drawn: no blank line ends a progress frame before the line."""
    from wmo_lake import collector

    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])

    def interrupted_collect(*args: object, on_plan, **kwargs: object) -> None:  # type: ignore[no-untyped-def]
        on_plan(plan, collector.JobDirState())
        raise KeyboardInterrupt

    monkeypatch.setattr(collector, "collect", interrupted_collect)
    args = ["collect", "--template", str(TEMPLATE), "--run-dir", "x", "--step", "0", "--quiet"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 130
    assert result.output.startswith("interrupted: step 0 stopped; the trials it finished"), (
        result.output
    )


def test_interrupted_trial_dirs_are_removed_and_finished_ones_counted(tmp_path: Path) -> None:
    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])
    shutil.copytree(KIT_JOB, plan.job_dir)
    trials = sorted(p for p in plan.job_dir.iterdir() if p.is_dir())
    assert len(trials) == 6
    # killed mid-write: result.json cut off (harbor would skip it and run a twin beside it)
    cut = trials[0] / "result.json"
    cut.write_bytes(cut.read_bytes()[:100])
    # cancelled by an interrupt: harbor wrote a result recording CancelledError
    cancelled = json.loads((trials[1] / "result.json").read_text())
    cancelled["exception_info"] = {
        "exception_type": "CancelledError",
        "exception_message": "",
        "exception_traceback": "",
        "occurred_at": cancelled["started_at"],
    }
    (trials[1] / "result.json").write_text(json.dumps(cancelled))
    # still running when killed: no result.json (harbor removes these itself)
    (trials[2] / "result.json").unlink()

    state = prepare_job_dir(plan)
    assert sorted(state.removed) == sorted([trials[0].name, trials[1].name])
    assert not trials[0].exists() and not trials[1].exists() and trials[2].exists()
    assert state.done_trials == 3 and state.exists and state.finished


@pytest.mark.parametrize("cut_to", [0, 100])
def test_a_job_result_cut_off_mid_write_is_removed_so_harbor_can_resume(
    tmp_path: Path, cut_to: int
) -> None:
    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])
    shutil.copytree(KIT_JOB, plan.job_dir)
    job_result = plan.job_dir / "result.json"
    job_result.write_bytes(job_result.read_bytes()[:cut_to])  # killed while harbor rewrote it

    state = prepare_job_dir(plan)
    assert not job_result.exists() and state.removed_job_result
    assert state.removed == []  # (no trial dir: it was said as one, "removed 1 interrupted")
    assert state.done_trials == 6 and not state.finished


def test_a_whole_result_harbor_refuses_is_kept_and_named_not_removed(tmp_path: Path) -> None:
    """Only a result.json cut off mid-write is removed with its trial dir: one that is whole
    JSON but fails this harbor's TrialResult (another version's, or edited) is a finished
    trial's, refused by name with what to do, and nothing is deleted."""
    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])
    shutil.copytree(KIT_JOB, plan.job_dir)
    trial = sorted(p for p in plan.job_dir.iterdir() if p.is_dir())[0]
    result = json.loads((trial / "result.json").read_text())
    result["started_at"] = "yesterday"
    (trial / "result.json").write_text(json.dumps(result))
    with pytest.raises(CollectError) as refused:
        prepare_job_dir(plan)
    message = str(refused.value)
    assert str(trial / "result.json") in message and "started_at" in message
    assert "move its trial dir away" in message
    assert (trial / "agent").is_dir() and (trial / "result.json").exists()


def _complete_step(tmp_path: Path) -> Path:
    """The kit's finished job (2 tasks x 3 attempts) as step 0, recorded under the config
    `_collect_complete` plans, so collect finds it complete and does not start harbor."""
    plan = plan_step(
        TEMPLATE,
        tmp_path / "runs" / "exp1",
        0,
        task_ids=["hello-file", "no-reward"],
        attempts=3,
        sets=[KIT_TASKS],
    )
    shutil.copytree(KIT_JOB, plan.job_dir)
    (plan.job_dir / "config.json").write_text(plan.config.model_dump_json(indent=4))
    return plan.job_dir


def _collect_complete(tmp_path: Path, *tasks: str, run_dir: str = "exp1") -> tuple[int, str]:
    """collect --json of step 0 (`_complete_step`'s, or a copy's under runs/`run_dir`): its exit
    code, and its stdout or errors."""
    named = [arg for task in tasks or ("hello-file", "no-reward") for arg in ("--task", task)]
    run = ["--run-dir", str(tmp_path / "runs" / run_dir), "--lake", str(tmp_path / "lake")]
    args = ["collect", "--template", str(TEMPLATE), "--step", "0", *run, "--set", KIT_TASKS]
    result = CliRunner().invoke(cli, [*args, "--attempts", "3", "--json", *named])
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def test_a_trial_dir_gone_from_the_step_leaves_the_lake_with_it(tmp_path: Path) -> None:
    """A trial dir the lake took in (an ingest while the step ran) and that is gone since
    (harbor, or collect itself, removed it to run the trial again) is pruned by collect's ingest
    of the step: the step's stats count the trials on disk, each once."""
    job_dir = _complete_step(tmp_path)
    extra = job_dir / "hello-file__ExtraXY"
    shutil.copytree(job_dir / "hello-file__36A2F8u", extra)
    result = json.loads((extra / "result.json").read_text())
    result.update(id="an-interrupted-twin", trial_name=extra.name)
    (extra / "result.json").write_text(json.dumps(result))
    runner = CliRunner()
    ingested = runner.invoke(
        cli, ["ingest", str(tmp_path / "runs"), "--lake", str(tmp_path / "lake")]
    )
    assert ingested.exit_code == 0 and ingested.output.startswith("7 trials"), ingested.output
    shutil.rmtree(extra)
    code, output = _collect_complete(tmp_path)
    assert code == 0, output
    report = json.loads(output)
    assert report["harbor_ran"] is False
    assert (report["stats"]["trials"], report["ingest"]["pruned_trials"]) == (6, 1)


def _nan_logprob(trial: Path) -> None:
    """A logprob the provider gave as NaN, in result.json as harbor writes it (pydantic's JSON
    mode writes a non-finite float as null, which harbor's own TrialResult then refuses)."""
    from harbor.models.trial.result import TrialResult

    result = TrialResult.model_validate_json((trial / "result.json").read_text())
    assert result.agent_result is not None and result.agent_result.rollout_details
    result.agent_result.rollout_details[0]["logprobs"][0][0] = float("nan")
    (trial / "result.json").write_text(result.model_dump_json(indent=4))


def test_a_finished_step_holding_harbors_null_logprob_is_reported(tmp_path: Path) -> None:
    """collect refused such a finished step as "written by another harbor version, or edited"
    (exit 2) on every later run: a step harbor itself wrote could not be reported again."""
    job_dir = _complete_step(tmp_path)
    trial = sorted(p for p in job_dir.iterdir() if p.is_dir())[0]
    _nan_logprob(trial)
    code, output = _collect_complete(tmp_path)
    assert code == 0, output
    report = json.loads(output)
    assert report["harbor_ran"] is False and report["stats"]["trials"] == 6


def test_a_resume_over_harbors_null_logprob_is_refused_saying_why(tmp_path: Path) -> None:
    """harbor's resume skips a result.json it cannot read and runs that trial again beside it:
    refused before harbor runs, naming the file and harbor's null (not another version, not an
    edit), and nothing is removed."""
    job_dir = _complete_step(tmp_path)
    trial = sorted(p for p in job_dir.iterdir() if p.is_dir())[0]
    _nan_logprob(trial)
    (job_dir / "result.json").unlink()  # the job not finished: collect would resume it
    code, output = _collect_complete(tmp_path)
    assert code == 2, output
    said = " ".join(output.split())
    assert str(trial / "result.json") in said and "another harbor version" not in said
    assert "harbor writes a non-finite number (a provider's NaN or infinite logprob)" in said
    assert "Move its trial dir away" in said and (trial / "result.json").exists()


def test_a_null_no_float_of_harbors_can_be_is_refused_as_an_edit(tmp_path: Path) -> None:
    """Only a null where a float goes is harbor's own (a non-finite float): a null token id
    (an int: never NaN) is refused as an edited file still, and nothing is removed."""
    job_dir = _complete_step(tmp_path)
    trial = sorted(p for p in job_dir.iterdir() if p.is_dir())[0]
    result = json.loads((trial / "result.json").read_text())
    result["agent_result"]["rollout_details"][0]["completion_token_ids"][0][0] = None
    (trial / "result.json").write_text(json.dumps(result))
    code, output = _collect_complete(tmp_path)
    assert code == 2 and "another harbor version, or edited" in " ".join(output.split())
    assert (trial / "result.json").exists()


def test_an_edit_beside_harbors_null_logprob_is_the_problem_named(tmp_path: Path) -> None:
    """A result.json holding harbor's own null (a NaN logprob) and an edit was refused naming
    the null, the one thing in it harbor writes itself, as "another harbor version, or edited"."""
    job_dir = _complete_step(tmp_path)
    trial = sorted(p for p in job_dir.iterdir() if p.is_dir())[0]
    _nan_logprob(trial)
    result = json.loads((trial / "result.json").read_text())
    result["started_at"] = "yesterday"
    (trial / "result.json").write_text(json.dumps(result))
    code, output = _collect_complete(tmp_path)
    said = " ".join(output.split())
    assert code == 2 and "TrialResult (started_at: " in said, said
    assert "logprobs" not in said


def test_a_cancelled_trial_holding_harbors_null_logprob_is_run_again(tmp_path: Path) -> None:
    """A trial the interrupt cancelled is removed to run again, also when its result.json holds
    harbor's null for a NaN logprob (it was counted as a finished trial)."""
    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])
    shutil.copytree(KIT_JOB, plan.job_dir)
    trial = sorted(p for p in plan.job_dir.iterdir() if p.is_dir())[0]
    cancelled = json.loads((trial / "result.json").read_text())
    cancelled["exception_info"] = {
        "exception_type": "CancelledError",
        "exception_message": "",
        "exception_traceback": "",
        "occurred_at": cancelled["started_at"],
    }
    (trial / "result.json").write_text(json.dumps(cancelled))
    _nan_logprob(trial)
    state = prepare_job_dir(plan)
    assert state.removed == [trial.name] and not trial.exists()
    assert state.done_trials == 5 and state.unreadable_to_harbor == []


def test_a_damaged_lake_duckdb_is_said_by_collect_with_the_fix(tmp_path: Path) -> None:
    """A lake.duckdb changed in place (a block failing DuckDB's checksum) made collect's report
    of a finished step end in a traceback and DuckDB's bare "Corrupt database file"."""
    _complete_step(tmp_path)
    code, output = _collect_complete(tmp_path)
    assert code == 0, output
    built = tmp_path / "lake" / "lake.duckdb"
    whole = built.read_bytes()
    said = 0
    for start in range(3 * 4096, len(whole), 256 * 1024):  # (past DuckDB's headers)
        built.write_bytes(whole[: start + 8] + bytes(4096) + whole[start + 8 + 4096 :])
        code, output = _collect_complete(tmp_path)
        if code == 0:
            continue
        assert code == 1 and "Traceback" not in output, output
        assert f"{built} is damaged (DuckDB: Corrupt database file" in output
        said += 1
    assert said  # (some block the step's report reads was hit)


def test_the_same_tasks_named_another_way_resume_the_step(tmp_path: Path) -> None:
    """A step resumes under the tasks it started with however they are named: by task dir
    path (the template's task, not a new entry), or in another order."""
    _complete_step(tmp_path)
    for tasks in (
        (str(TASKS / "hello-file"), str(TASKS / "no-reward")),
        ("no-reward", "hello-file"),
        ("e2e/no-reward", str(TASKS / "hello-file")),
    ):
        code, output = _collect_complete(tmp_path, *tasks)
        assert code == 0, (tasks, output)
        assert json.loads(output)["harbor_ran"] is False


# ----------------------------------------------------------------------------- without harbor

WITHOUT_HARBOR = """
import sys
sys.modules["harbor"] = None   # as if the extra were not installed
from click.testing import CliRunner
import wmo_lake
from wmo_lake.cli import cli
for args in (["ingest", sys.argv[1], "--lake", sys.argv[2]], ["stats", "--lake", sys.argv[2]],
             ["sql", "--lake", sys.argv[2], "SELECT count(*) FROM trials"]):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, (args, result.output)
import wmo_lake.export, wmo_lake.datums, wmo_lake.conversations  # noqa
result = CliRunner().invoke(cli, ["collect", "--template", "t.yaml", "--run-dir", "r",
                                  "--step", "0", "--lake", sys.argv[2]])
print(result.exit_code)
print(result.output)
try:
    wmo_lake.collect("t.yaml", "r", 0)
except ImportError as error:
    print("ImportError:", error)
"""


def test_without_the_harbor_extra_everything_else_works_and_collect_names_the_extra(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_HARBOR, str(KIT_JOB.parent), str(tmp_path / "lake")],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "1"
    assert "wmo-lake[harbor]" in lines[1]
    assert lines[-1].startswith("ImportError:") and "wmo-lake[harbor]" in lines[-1]


def test_importing_wmo_lake_does_not_import_harbor() -> None:
    code = "import sys, wmo_lake, wmo_lake.cli; print('harbor' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_the_reward_key_warning_counts_the_steps_trials_not_the_lakes(tmp_path: Path) -> None:
    """collect reports one step: a reward key none of its trials has is said once, with the
    keys its own trials have and their counts, not the whole lake's."""
    from harbor_shapes import write_job, write_trial

    from wmo_lake.ingest import ingest

    other = write_job(tmp_path / "other" / "job")
    for i in range(4):
        write_trial(other, f"t__{i}", trial_id=f"other-{i}")
    ingest([tmp_path / "other"], tmp_path / "lake", workers=1)
    _complete_step(tmp_path)
    code, output = _collect_complete(tmp_path, "hello-file", "no-reward")
    assert code == 0, output
    named = [arg for task in ("hello-file", "no-reward") for arg in ("--task", task)]
    run = ["--run-dir", str(tmp_path / "runs" / "exp1"), "--lake", str(tmp_path / "lake")]
    args = ["collect", "--template", str(TEMPLATE), "--step", "0", *run, "--set", KIT_TASKS]
    result = CliRunner().invoke(cli, [*args, "--attempts", "3", *named, "--reward-key", "nope"])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if "reward key 'nope'" in line]
    assert len(warned) == 1, result.stderr
    assert "'reward' (3 trials)" in warned[0], warned[0]


def test_a_task_named_twice_runs_once_and_a_note_says_so(tmp_path: Path) -> None:
    _complete_step(tmp_path)
    code, output = _collect_complete(tmp_path, "hello-file", "no-reward", "e2e/hello-file")
    assert code == 0, output
    report = json.loads(output)
    assert report["trials_planned"] == 2 * 3
    (note,) = [note for note in report["notes"] if "named a task already given" in note]
    assert note.startswith("'e2e/hello-file': ") and "(--attempts, 3 here)" in note
    # From Python the note names collect's argument, as its errors do
    import wmo_lake as wl

    result = wl.collect(
        TEMPLATE,
        tmp_path / "runs" / "exp1",
        0,
        tasks=["hello-file", "no-reward", "e2e/hello-file"],
        attempts=3,
        sets=[KIT_TASKS],
        lake=tmp_path / "lake",
    )
    (note,) = [note for note in result.notes if "named a task already given" in note]
    assert "(attempts, 3 here)" in note and "--" not in note, note


def test_quiet_hides_harbors_display_from_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """harbor draws its progress on sys.stdout while the job runs; `quiet=True` sends it
    nowhere (a training loop's own output, its on_trial_done included, stays), and only while
    harbor runs."""
    import wmo_lake as wl
    from wmo_lake import collector

    def drawing_job(plan: object, done: int, on_trial_done: collector.TrialDone) -> None:
        print("harbor's progress frame")
        on_trial_done("t__1", 1, 1)  # (harbor calls it inside the job)
        raise collector.HarborRunError("stop here: the display is what is tested")

    monkeypatch.setattr(collector, "run_job", drawing_job)
    for quiet in (False, True):
        with pytest.raises(collector.HarborRunError):
            wl.collect(
                TEMPLATE,
                tmp_path / "runs" / f"quiet-{quiet}",
                0,
                tasks=["hello-file"],
                sets=[KIT_TASKS],
                lake=tmp_path / "lake",
                quiet=quiet,
                on_trial_done=lambda name, done, planned: print(f"mine: {name} {done}/{planned}"),
            )
        shown = capsys.readouterr().out
        assert ("harbor's progress frame" in shown) is not quiet, shown
        assert "mine: t__1 1/1" in shown  # the caller's own lines are not harbor's
    print("after")
    assert capsys.readouterr().out == "after\n"


def test_a_step_collected_through_a_symlinked_run_dir_keeps_its_batch(tmp_path: Path) -> None:
    """The run dir is taken by its real place, as `ingest` of the dir above labels it: the same
    step collected again through an alias of the run dir is the same batch, its trials
    unchanged, not replaced under a second label."""
    _complete_step(tmp_path)
    code, output = _collect_complete(tmp_path)
    assert code == 0, output
    first = json.loads(output)
    (tmp_path / "alias").symlink_to(tmp_path / "runs" / "exp1", target_is_directory=True)
    named = [arg for task in ("hello-file", "no-reward") for arg in ("--task", task)]
    run = ["--run-dir", str(tmp_path / "alias"), "--lake", str(tmp_path / "lake")]
    args = ["collect", "--template", str(TEMPLATE), "--step", "0", *run, "--set", KIT_TASKS]
    result = CliRunner().invoke(cli, [*args, "--attempts", "3", "--json", *named])
    assert result.exit_code == 0, result.output
    again = json.loads(result.stdout)
    assert again["batch"] == first["batch"] == "exp1/harbor/step-0000/rollouts"
    ingested = again["ingest"]
    assert (ingested["trials_unchanged"], ingested["trials_replaced"]) == (6, 0)


def test_a_batch_label_another_run_tree_holds_is_refused_before_harbor_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two run trees named exp1 (`/a/exp1`, `/b/exp1`) label their step 0 alike: the second's
    collect ran 1 trial and reported 13, the first tree's 12 pooled into its stats and into the
    records a trainer takes. It is refused (exit 2) before harbor runs."""
    from harbor_shapes import write_job, write_trial

    from wmo_lake import collector
    from wmo_lake.ingest import ingest

    other = write_job(tmp_path / "elsewhere" / "exp1" / "harbor" / "step-0000" / "rollouts")
    write_trial(other, "t__1", trial_id="elsewhere-1")
    ingest([tmp_path / "elsewhere"], tmp_path / "lake", workers=1)
    _complete_step(tmp_path)
    ran: list[object] = []
    monkeypatch.setattr(collector, "run_job", lambda *args: ran.append(args))
    code, output = _collect_complete(tmp_path)
    assert code == 2, output
    assert "holds batch exp1/harbor/step-0000/rollouts from another job dir (" in output
    assert str((tmp_path / "elsewhere").resolve()) in output and "Nothing was run" in output
    assert ran == []


def test_a_shared_batch_refusal_gives_the_forget_that_drops_that_batch_from_that_lake(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The refusal's `wmo-lake forget --batch B` pasted B unescaped between plain quotes and
    without the --lake collect was given: for a run dir named `exp[1]'s`, the GLOB's [1] matched
    another run's batch (`exp1's`) and the quote broke the command, run on ./lake. As printed,
    run from another dir, it now drops that batch alone from that lake."""
    import shlex

    from harbor_shapes import write_job, write_trial

    from wmo_lake import collector
    from wmo_lake.ingest import ingest

    name = "exp[1]'s"
    for tree, run in (("a", name), ("b", "exp1's")):
        job = write_job(tmp_path / tree / run / "harbor" / "step-0000" / "rollouts")
        write_trial(job, "t__1", trial_id=f"{tree}-1")
    lake = tmp_path / "the lake"
    ingest([tmp_path / "a", tmp_path / "b"], lake, workers=1)
    monkeypatch.setattr(collector, "run_job", lambda *args: pytest.fail("harbor ran"))
    args = ["collect", "--template", str(TEMPLATE), "--step", "0", "--set", KIT_TASKS]
    run = ["--run-dir", str(tmp_path / "runs" / name), "--lake", str(lake), "--task", "hello-file"]
    result = CliRunner().invoke(cli, [*args, *run])
    assert result.exit_code == 2, result.output
    (command,) = re.findall(r"`(wmo-lake forget --batch [^`]*)` drops it", result.output)
    # From Python too (the API has no forget: the command line stays, naming the lake given;
    # it had no --lake, and run where ./lake held the same batch it forgot it there)
    import wmo_lake as wl

    with pytest.raises(collector.CollectError) as raised:
        wl.collect(
            TEMPLATE, tmp_path / "runs" / name, 0, tasks=["hello-file"], sets=[KIT_TASKS], lake=lake
        )
    assert re.findall(r"`(wmo-lake forget --batch [^`]*)` drops it", str(raised.value)) == [command]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # (no ./lake here: the command must name the lake)
    forget = CliRunner().invoke(cli, [*shlex.split(command)[1:], "--dry-run", "--json"])
    assert forget.exit_code == 0, forget.output
    assert json.loads(forget.stdout)["batches"] == [f"{name}/harbor/step-0000/rollouts"]


def test_a_step_whose_tasks_changed_since_it_ran_is_a_usage_error_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """harbor refuses to resume a job dir whose lock.json (each task and its files' digest) does
    not match: a task added to the dataset dir, or edited. That was exit 1 with harbor's bare
    FileExistsError and "run the same command again to resume", which failed the same way every
    time."""
    import harbor.job

    class RefusingJob:
        def on_trial_ended(self, callback: object) -> None:
            pass

        async def run(self) -> None:
            raise FileExistsError(
                "Job directory x already has a lock.json that does not match the resolved job lock."
            )

    async def create(config: object) -> RefusingJob:
        return RefusingJob()

    monkeypatch.setattr(harbor.job.Job, "create", staticmethod(create))
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--task", "hello-file")
    assert code == 2, output
    assert "was run with other tasks than these" in output and "Nothing was run" in output
    assert "run the same command again" not in output


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--set", "jobs_dir=/tmp/elsewhere"], "collect sets jobs_dir itself"),
        (["--set", "n_attempts=5", "--attempts", "2"], "both set n_attempts: give one"),
    ],
)
def test_a_set_of_what_collect_pins_is_refused_not_dropped(
    tmp_path: Path, extra: list[str], says: str
) -> None:
    """`--set jobs_dir=...` was replaced by the step's dir, and `--set n_attempts=5 --attempts 2`
    ran 2, without a word."""
    code, output = _collect(tmp_path, "--set", KIT_TASKS, *extra)
    assert code == 2, output
    assert says in output


def test_progress_counts_each_trial_once_and_a_cancelled_one_not_at_all() -> None:
    """harbor ends a retried trial once per attempt, under one name, and ends a cancelled one
    too: neither may count past the plan (the collect probe saw `3/2`, `4/2`)."""
    import asyncio
    from types import SimpleNamespace

    from harbor.models.trial.result import TrialResult

    from wmo_lake.collector import progress_hook

    def event(trial_dir: str, exception_type: str | None = None) -> SimpleNamespace:
        data = json.loads((KIT_JOB / trial_dir / "result.json").read_text())
        if exception_type is not None:
            data["exception_info"] = {
                "exception_type": exception_type,
                "exception_message": "",
                "exception_traceback": "",
                "occurred_at": data["started_at"],
            }
        result = TrialResult.model_validate(data)
        return SimpleNamespace(trial_name=result.trial_name, result=result)

    said: list[tuple[str, int, int]] = []
    hook = progress_hook(1, 3, lambda *line: said.append(line))
    events = [
        event("hello-file__36A2F8u", "RuntimeError"),  # an attempt harbor retries
        event("hello-file__36A2F8u"),  # its retry
        event("no-reward__KaKH5Qe", "CancelledError"),  # Ctrl-C: run again on resume
        event("hello-file__NGUPexS"),
    ]
    for each in events:
        asyncio.run(hook(each))
    assert said == [("hello-file__36A2F8u", 2, 3), ("hello-file__NGUPexS", 3, 3)]


def _mend_and_collect_again(
    tmp_path: Path, output: str, run_dir: str = "exp1", dropped: int = 6
) -> None:
    """Run each `wmo-lake forget --batch ...` a refusal printed, as a shell would split it (it
    names the --lake collect was given; together they drop `dropped` trials), then the same
    collect: it counts the step's 6."""
    import shlex

    for command in re.findall(r"`(wmo-lake forget --batch [^`]*)`", output):
        words = shlex.split(command)
        assert words[-2:] == ["--lake", str(tmp_path / "lake")], command
        result = CliRunner().invoke(cli, [*words[1:], "--json"])
        assert result.exit_code == 0, result.output
        dropped -= json.loads(result.stdout)["trials"]
    assert dropped == 0, output
    code, output = _collect_complete(tmp_path, run_dir=run_dir)
    assert code == 0, output
    assert json.loads(output)["stats"]["trials"] == 6


def test_a_copy_of_the_run_dir_that_took_the_steps_trials_is_said_not_counted_as_none(
    tmp_path: Path,
) -> None:
    """`cp -r exp1 FORK`, then a collect of the fork's step: the copy holds the same trial ids,
    so the lake's trials of exp1's step are taken over (a lake counts a trial once). The fork's
    collect says so in a note; a collect of exp1's step after it reported 0 trials with exit 0
    (a trainer took no records): it is refused, naming the copy's batch and a command that
    drops it (quoted and escaped for a name with a quote and a backslash), and after that it
    counts the step's trials again."""
    fork = "exp1-fork's\\2"
    _complete_step(tmp_path)
    code, output = _collect_complete(tmp_path)
    assert code == 0, output
    assert json.loads(output)["stats"]["trials"] == 6
    shutil.copytree(tmp_path / "runs" / "exp1", tmp_path / "runs" / fork)
    code, output = _collect_complete(tmp_path, run_dir=fork)
    assert code == 0, output
    forked = json.loads(output)
    assert forked["stats"]["trials"] == 6
    original = "exp1/harbor/step-0000/rollouts"
    assert forked["ingest"]["trials_taken_from"] == {original: 6}
    assert any(f"trials of {original}" in note for note in forked["notes"]), forked["notes"]

    code, output = _collect_complete(tmp_path)
    assert code == 2, output
    copy = f"{fork}/harbor/step-0000/rollouts"
    assert "6 of step 0's trial dirs hold the same trials (their result.json ids) as " in output
    assert f"the lake counts in {copy}: copies of a run dir" in output
    _mend_and_collect_again(tmp_path, output)


def test_a_copy_read_second_in_one_ingest_is_refused_naming_the_batch_that_holds_them(
    tmp_path: Path,
) -> None:
    """Both copies of a run dir read by one ingest: the second's dirs are duplicates of the
    first's. Its collect is refused naming the batch that holds the trials (it named none, and
    advised a `forget` without --batch); the advice then gets it through."""
    _complete_step(tmp_path)
    shutil.copytree(tmp_path / "runs" / "exp1", tmp_path / "runs" / "exp2")
    ingested = CliRunner().invoke(
        cli, ["ingest", str(tmp_path / "runs"), "--lake", str(tmp_path / "lake")]
    )
    assert ingested.exit_code == 0, ingested.output
    code, output = _collect_complete(tmp_path, run_dir="exp2")
    assert code == 2, output
    assert "the lake counts in exp1/harbor/step-0000/rollouts:" in output
    _mend_and_collect_again(tmp_path, output, "exp2")


def test_a_copied_trial_dir_within_the_step_costs_the_step_nothing(tmp_path: Path) -> None:
    """A trial dir copied beside itself in the step's own job dir holds a trial the step's
    batch counts: collect counts the step's 6 trials (it was refused, with no way through)."""
    job_dir = _complete_step(tmp_path)
    shutil.copytree(job_dir / "hello-file__36A2F8u", job_dir / "hello-file__36A2F8u-copy")
    code, output = _collect_complete(tmp_path)
    assert code == 0, output
    report = json.loads(output)
    assert (report["stats"]["trials"], report["ingest"]["trials_held_elsewhere"]) == (6, 1)


def test_trials_two_copies_took_are_given_back_by_the_advice_for_both(tmp_path: Path) -> None:
    """Two copies of some of the step's trial dirs, each read by a plain ingest, hold 3 of its
    trials: the refusal names both batches and a forget for each (it gave one, and the same
    command was refused again naming the other); after both, the step counts its 6."""
    job_dir = _complete_step(tmp_path)
    code, output = _collect_complete(tmp_path)
    assert code == 0, output
    trial_dirs = sorted(d.name for d in job_dir.iterdir() if (d / "result.json").exists())
    for fork, kept in (("forkA", trial_dirs[:2]), ("forkB", trial_dirs[2:3])):
        copy = tmp_path / "runs" / fork / "harbor" / "step-0000" / "rollouts"
        shutil.copytree(job_dir, copy)
        for trial in trial_dirs:
            if trial not in kept:
                shutil.rmtree(copy / trial)
        ingested = CliRunner().invoke(
            cli, ["ingest", str(tmp_path / "runs" / fork), "--lake", str(tmp_path / "lake")]
        )
        assert ingested.exit_code == 0, ingested.output
    code, output = _collect_complete(tmp_path)
    assert code == 2, output
    assert "3 of step 0's trial dirs" in output and "drop those batches (" in output
    _mend_and_collect_again(tmp_path, output, dropped=3)


def test_a_run_dir_reached_through_a_symlink_under_another_name_says_what_it_took(
    tmp_path: Path,
) -> None:
    """Trial dirs linked under another run name are the same dirs: reading them relabels their
    trials, and the run they were counted in no longer counts them. The ingest summary and
    collect's note said nothing of it (a copy's were said)."""
    job_dir = _complete_step(tmp_path)
    code, output = _collect_complete(tmp_path)
    assert code == 0, output
    fork_job = tmp_path / "runs" / "fork" / "harbor" / "step-0000" / "rollouts"
    fork_job.mkdir(parents=True)
    for item in job_dir.iterdir():
        (fork_job / item.name).symlink_to(item, target_is_directory=item.is_dir())
    code, output = _collect_complete(tmp_path, run_dir="fork")
    assert code == 0, output
    forked = json.loads(output)
    assert forked["ingest"]["trials_taken_from"] == {"exp1/harbor/step-0000/rollouts": 6}
    assert any("trials of exp1/harbor/step-0000/rollouts" in n for n in forked["notes"])


# ----------------------------------------------------------------------------- harbor's job


class _JobStoppedInATrial:
    """harbor's Job, as far as `run_job` uses it, whose run is a trial's: a `try` that lets any
    Exception by (harbor's `Trial.run` records it) and a `finally` that writes the result; SIGTERM
    arrives while it does CPU work on the main thread, as a trial does between awaits."""

    seen: ClassVar[list[str]] = []

    @classmethod
    async def create(cls, config: object) -> _JobStoppedInATrial:
        return cls()

    def on_trial_ended(self, hook: object) -> None:
        pass

    async def run(self) -> None:
        import asyncio
        import os
        import time

        seen = self.seen
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            busy_until = time.monotonic() + 0.3
            while time.monotonic() < busy_until:  # (the handler runs in this frame)
                pass
            await asyncio.sleep(30)
            seen.append("ran on")
        except asyncio.CancelledError:
            seen.append("cancelled")  # harbor records CancelledError: a resume runs it again
            raise
        except Exception:
            seen.append("failed")
        finally:
            seen.append("result written")


@pytest.mark.parametrize("sigint_ignored", [True, False], ids=["sigint-ignored", "sigint-default"])
def test_sigterm_cancels_harbors_job_instead_of_raising_inside_a_trial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigint_ignored: bool
) -> None:
    """With SIGINT ignored (a script's background job), SIGTERM raised KeyboardInterrupt in
    whatever frame ran: inside harbor's trial, whose `finally` then wrote a result with no
    exception, which the resume kept as finished and the lake counted, half run. The job's task
    is cancelled instead, as asyncio's own Ctrl-C handler cancels it, and the command stops."""
    import harbor.job

    from wmo_lake.collector import run_job
    from wmo_lake.stopping import TERMINATED, sigterm_stops

    monkeypatch.setattr(harbor.job, "Job", _JobStoppedInATrial)
    monkeypatch.setattr(_JobStoppedInATrial, "seen", [])
    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])
    sigint = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), sigterm_stops():
            run_job(plan, 0)
        assert TERMINATED == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGINT, sigint)
        TERMINATED.clear()
    assert _JobStoppedInATrial.seen == ["cancelled", "result written"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_harbor_failing_in_a_task_group_is_said_by_its_first_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """harbor's task groups raise an ExceptionGroup: the error named only "unhandled errors in a
    TaskGroup (2 sub-exceptions)", not the full disk that caused it."""
    import harbor.job

    from wmo_lake.collector import HarborRunError, run_job

    class FullDisk(_JobStoppedInATrial):
        async def run(self) -> None:
            full = OSError(28, "No space left on device", "/runs/t__1/agent/terminus_2.pane")
            raise ExceptionGroup(
                "unhandled errors in a TaskGroup",
                [ExceptionGroup("inner", [full, full]), RuntimeError("the other trial")],
            )

    monkeypatch.setattr(harbor.job, "Job", FullDisk)
    plan = plan_step(TEMPLATE, tmp_path / "runs" / "exp1", 0, sets=[KIT_TASKS])
    with pytest.raises(HarborRunError) as raised:
        run_job(plan, 0)
    assert (
        "OSError: [Errno 28] No space left on device: '/runs/t__1/agent/terminus_2.pane' "
        "(the first of 3 errors); if that names"
    ) in str(raised.value)


def test_a_file_where_the_job_dir_goes_is_a_usage_error_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """harbor's own FileExistsError ("[Errno 17] File exists: ...") said neither what was in
    the way nor that nothing ran."""
    from harbor_kit import kit_env

    for key, value in kit_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.syspath_prepend(kit_env()["PYTHONPATH"].split(os.pathsep)[0])
    job_dir = tmp_path / "runs" / "exp1" / "harbor" / "step-0000" / "rollouts"
    job_dir.parent.mkdir(parents=True)
    job_dir.write_text("")
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--quiet")
    assert code == 2 and "Traceback" not in output, output
    said = f"cannot write the step's job dir {job_dir}: a file (or a link) is there"
    assert f"{said}; nothing was run" in output


def test_an_error_after_harbor_drew_starts_on_a_line_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Off a terminal harbor's last progress frame ends without a newline: the `Error:` line was
    glued to it, where a log reader looking for `^Error:` missed it."""
    from wmo_lake import collector

    def drawing_job(*args: object) -> None:
        print("harbor's last frame 0:00:02", end="", file=sys.stdout)  # (on stderr, in collect)

    monkeypatch.setattr(collector, "run_job", drawing_job)
    (tmp_path / "lake" / ".lock").mkdir(parents=True)  # the ingest after the job then fails
    code, output = _collect(tmp_path, "--set", KIT_TASKS)
    assert code == 1, output
    assert "harbor's last frame 0:00:02\nError: step 0's trials are kept in" in output, output
    code, output = _collect(tmp_path, "--set", KIT_TASKS, "--quiet")  # (nothing drawn)
    assert code == 1 and output.startswith("Error: step 0's trials are kept in"), output


def test_the_collect_errors_are_wmo_lakes_names_too() -> None:
    import wmo_lake
    from wmo_lake import collector

    assert wmo_lake.CollectError is collector.CollectError
    assert wmo_lake.HarborRunError is collector.HarborRunError
    assert wmo_lake.MissingHarborError is collector.MissingHarborError
