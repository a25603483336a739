"""`wmo-lake compare A B`: each side's metrics are the rollout_stats rules (one batch: its row
exactly), null measurements stay null, flipped tasks match the cells, two runs line up by step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from edge_case_trees import write_unreadable_trial
from harbor_shapes import write_job, write_trial

from reference import oracle
from wmo_lake.cli import cli
from wmo_lake.compare import compare as compare_sides
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

STEP = "exp-a/harbor/step-{:04d}/job"


def compare(lake: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["compare", "--lake", str(lake), *args])


def as_json(lake: Path, *args: str) -> dict[str, Any]:
    result = compare(lake, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def rows(lake: Path, sql: str) -> list[dict[str, Any]]:
    relation = connect(lake).sql(sql)
    return [dict(zip(relation.columns, r, strict=True)) for r in relation.fetchall()]


def test_one_batch_sides_are_their_rollout_stats_rows(two_runs_lake: Path) -> None:
    result = as_json(two_runs_lake, STEP.format(2), STEP.format(3))
    stats = {r["batch"]: r for r in rows(two_runs_lake, "FROM rollout_stats")}
    a, b = stats[STEP.format(2)], stats[STEP.format(3)]
    metrics = {m["metric"]: m for m in result["metrics"]}
    for key in ("solve_rate", "graded_solve_rate", "raw_solve_rate", "scaffold_loss_rate"):
        assert metrics[key]["a"] == a[key] and metrics[key]["b"] == b[key], key
        assert metrics[key]["delta"] == b[key] - a[key]
    assert metrics["infra_failed_share"]["a"] == a["infra_failed_trials"] / a["trials"]
    assert metrics["truncated_spans"]["b"] == b["truncated_spans"]
    assert result["a"] == {
        "selection": STEP.format(2),
        "kind": "batches",
        "batches": 1,
        "trials": a["trials"],
        "unreadable_trials": a["unreadable_trials"],
        "batches_without_step": 0,
        "trees": [],
    }


def test_flipped_tasks_are_the_cells(two_runs_lake: Path) -> None:
    result = as_json(two_runs_lake, STEP.format(2), STEP.format(3))
    solved = {
        (r["batch"], r["task_id"]): r["solved"]
        for r in rows(
            two_runs_lake,
            "SELECT batch, task_id, bool_or(passed) AS solved FROM cells "
            "WHERE NOT infra_failed GROUP BY ALL",
        )
    }
    tasks = {t for _, t in solved}
    a, b = STEP.format(2), STEP.format(3)
    expected_up = sorted(t for t in tasks if solved.get((a, t)) is False and solved.get((b, t)))
    expected_down = sorted(t for t in tasks if solved.get((a, t)) and solved.get((b, t)) is False)
    assert [t["task_id"] for t in result["flipped"]["fail_to_pass"]] == expected_up
    assert [t["task_id"] for t in result["flipped"]["pass_to_fail"]] == expected_down
    assert "task-4" in expected_down and "task-5" in expected_up  # the designed flips
    text = compare(two_runs_lake, a, b).output
    assert f"flipped fail -> pass ({len(expected_up)}):" in text
    assert "  task-4  " in text.split("flipped pass -> fail", 1)[1]


def test_an_empty_side_is_no_measurement(two_runs_lake: Path) -> None:
    result = as_json(two_runs_lake, STEP.format(4), STEP.format(3))
    for metric in result["metrics"]:
        assert metric["a"] is None and metric["delta"] is None, metric
    text = compare(two_runs_lake, STEP.format(4), STEP.format(3)).output
    [line] = [x for x in text.splitlines() if x.startswith("solve rate (passed / executed)")]
    a_cell, b_cell, delta_cell = line.split()[-3:]
    assert (a_cell, delta_cell) == ("-", "-") and b_cell.endswith("%"), line


def test_two_runs_pooled_and_step_by_step(two_runs_lake: Path) -> None:
    result = as_json(two_runs_lake, "exp-a", "exp-b")
    [pooled] = rows(
        two_runs_lake,
        "SELECT count(*) FILTER (WHERE passed AND NOT infra_failed) / "
        "count(*) FILTER (WHERE NOT infra_failed) AS solve, count(*) AS trials "
        "FROM trial_records WHERE run = 'exp-a'",
    )
    metrics = {m["metric"]: m for m in result["metrics"]}
    assert metrics["solve_rate"]["a"] == pooled["solve"]
    assert result["a"]["kind"] == "run" and result["a"]["trials"] == pooled["trials"]
    step_trials = len(rows(two_runs_lake, f"FROM trials WHERE batch = '{STEP.format(2)}'"))
    header = compare(two_runs_lake, "exp-a", STEP.format(2)).output.splitlines()[:2]
    unreadable = result["a"]["unreadable_trials"]
    assert unreadable == 2  # (the two_runs_lake's exp-a)
    assert header == [
        f"A: exp-a (run, {result['a']['batches']} batches, {pooled['trials']} trials; "
        f"{unreadable} unreadable trial dirs, not counted)",
        f"B: {STEP.format(2)} (batch glob, 1 batch, {step_trials} trials)",
    ]
    steps = {s["step"]: s for s in result["steps"]}
    assert sorted(steps) == [0, 1, 2, 3, 4, 5]
    assert steps[4]["solve_rate_a"] is None and steps[4]["solve_rate_delta"] is None
    stats = {r["batch"]: r for r in rows(two_runs_lake, "FROM rollout_stats")}
    assert steps[5]["solve_rate_b"] == stats["exp-b/harbor/step-0005/job"]["solve_rate"]


@pytest.fixture(scope="module")
def two_batches_a_step(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """exp-a's step 0 is two job dirs, one passing both its trials, one failing both (pooled:
    50%); its step 1 is one passing trial. exp-b has one failing trial at step 0."""
    root = tmp_path_factory.mktemp("two-batches-a-step")
    for batch, rewards in (
        ("exp-a/harbor/step-0000/job", [1, 1]),
        ("exp-a/harbor/step-0000/job-b", [0, 0]),
        ("exp-a/harbor/step-0001/job", [1]),
        ("exp-b/harbor/step-0000/job", [0]),
    ):
        job = write_job(root / "runs" / batch)
        for attempt, reward in enumerate(rewards):
            write_trial(job, f"hello__{attempt}", reward=reward)
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"


def test_a_step_of_two_batches_is_pooled_as_the_run_is(two_batches_a_step: Path) -> None:
    """Every batch of a step counts, pooled by the rules the run-level metrics use (the step
    table kept only the last batch of a step: 0% here instead of 50%)."""
    lake = two_batches_a_step
    result = as_json(lake, "exp-a", "exp-b")
    [expected] = rows(
        lake,
        "SELECT count(*) FILTER (WHERE passed AND NOT infra_failed) / "
        "count(*) FILTER (WHERE NOT infra_failed) AS solve "
        "FROM trial_records WHERE run = 'exp-a' AND step = 0",
    )
    assert expected["solve"] == 0.5  # the tree is as designed
    assert result["steps"] == [
        {
            "step": 0,
            "a": ["exp-a/harbor/step-0000/job", "exp-a/harbor/step-0000/job-b"],
            "b": ["exp-b/harbor/step-0000/job"],
            "solve_rate_a": expected["solve"],
            "solve_rate_b": 0.0,
            "solve_rate_delta": -0.5,
        },
        {
            "step": 1,
            "a": ["exp-a/harbor/step-0001/job"],
            "b": [],
            "solve_rate_a": 1.0,
            "solve_rate_b": None,
            "solve_rate_delta": None,
        },
    ]
    # a step's batches selected by a glob are that step's pooled figure, too
    step_0 = as_json(lake, "exp-a/harbor/step-0000/*", "exp-b")
    solve = {m["metric"]: m for m in step_0["metrics"]}["solve_rate"]
    assert solve["a"] == result["steps"][0]["solve_rate_a"]
    text = compare(lake, "exp-a", "exp-b").output.splitlines()
    table = text[text.index("solve rate by step:") + 1 :]
    assert table[2].split() == ["0", "50.0%", "0.0%", "-50.0", "pt"]
    assert table[3].split() == ["1", "100.0%", "absent", "-"]  # exp-b has no step 1


def test_a_side_that_selects_nothing_is_a_usage_error(two_runs_lake: Path) -> None:
    result = compare(two_runs_lake, "nope", "exp-a")
    assert result.exit_code == 2
    assert "'nope' is neither a run nor a glob matching a batch (runs: exp-a, exp-b" in (
        result.output
    )
    assert compare(two_runs_lake, "exp-a").exit_code == 2  # B missing


def test_tables_fit_the_terminal_width(two_runs_lake: Path) -> None:
    """The metrics and per-step tables are drawn by the shared renderer (wmo_lake.terminal), as
    `sql` and `stats` draw theirs, and fit the terminal; piped, every cell is whole."""
    for width in (40, 60, 100):
        result = CliRunner().invoke(
            cli,
            ["compare", "--lake", str(two_runs_lake), "exp-a", "exp-b"],
            env={"COLUMNS": str(width)},
        )
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        for header in ("metric", "step"):
            start = next(i for i, line in enumerate(lines) if line.split()[:1] == [header])
            end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
            table = lines[start:end]
            assert set(table[1]) == {"─"}, table  # the renderer's header rule
            assert len(table) > 2 and all(len(line) <= width for line in table), (width, table)
    piped = CliRunner().invoke(
        cli, ["compare", "--lake", str(two_runs_lake), "exp-a", "exp-b"], env={"COLUMNS": ""}
    )
    assert "graded solve rate (mean test score)" in piped.output


def test_graded_solve_rate_is_pythons_mean_to_the_last_bit(tmp_path: Path) -> None:
    """Graded scores 0.1, 0.2 and 0.3: WMO's sum(scores) / len(scores) (a compensated sum) is
    0.6 / 3; a left fold gives 0.6000000000000001 / 3. compare says what rollout_stats says."""

    def report(passed: int, resolved: int) -> dict[str, Any]:
        statuses = ["passed"] * passed + ["failed"] * (resolved - passed)
        return {"results": {"tests": [{"status": s} for s in statuses]}}

    for side, rate in (("a", 1), ("b", 2)):
        job = write_job(tmp_path / "runs" / side / "harbor" / "step-0001" / "job")
        for name, (passed, resolved) in {"t1": (1, 10), "t2": (rate, 10), "t3": (3, 10)}.items():
            write_trial(job, name, task_name=name, ctrf=report(passed, resolved))
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    metrics = {m["metric"]: m for m in as_json(lake, "a", "b")["metrics"]}
    stats = {r["run"]: r["graded_solve_rate"] for r in rows(lake, "FROM rollout_stats")}
    assert metrics["graded_solve_rate"]["b"] == stats["b"] == sum([0.1, 0.2, 0.3]) / 3
    assert metrics["graded_solve_rate"]["a"] == stats["a"] == sum([0.1, 0.1, 0.3]) / 3


def test_a_run_of_only_unreadable_trials_is_a_side(tmp_path: Path) -> None:
    """stats and report select such a run; compare called it neither a run nor a glob and left
    it out of the runs it listed. Its figures are no measurement, and it says why."""
    write_trial(write_job(tmp_path / "runs" / "base" / "harbor" / "step-0000" / "job"), "t__1")
    crashed = write_job(tmp_path / "runs" / "crashed" / "harbor" / "step-0000" / "job")
    write_unreadable_trial(crashed, "t__2", "truncated")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = as_json(tmp_path / "lake", "base", "crashed")
    assert result["b"] == {
        "selection": "crashed",
        "kind": "run",
        "batches": 1,
        "trials": 0,
        "unreadable_trials": 1,
        "batches_without_step": 0,
        "trees": [],
    }
    assert all(m["b"] is None and m["delta"] is None for m in result["metrics"])
    text = compare(tmp_path / "lake", "base", "crashed").output.splitlines()
    assert text[1] == "B: crashed (run, 1 batch, 0 trials)"
    assert text[2] == (
        "B holds no readable trial (1 unreadable trial dir): its figures are '-' (no measurement)"
    )
    result = compare(tmp_path / "lake", "base", "nope")
    assert result.exit_code == 2 and "(runs: base, crashed;" in result.output


def test_a_flip_of_one_pass_in_hundreds_never_reads_as_zero() -> None:
    """A flip's rates keep what makes it a flip: 1 pass in 250 executed trials was '0%', the
    same as none; now the rate cannot round to 0 and the counts are beside it."""
    from wmo_lake.commands.compare import render_text

    side = {"selection": "x", "kind": "run", "batches": 1, "trials": 250}
    side |= {"unreadable_trials": 0, "batches_without_step": 0}
    flip = {"task_id": "t1", "a_pass_rate": 0.0, "b_pass_rate": 1 / 250}
    flip |= {"a_passed": 0, "a_executed": 250, "b_passed": 1, "b_executed": 250}
    result = {
        "a": side,
        "b": side,
        "metrics": [],
        "flipped": {"fail_to_pass": [flip], "pass_to_fail": [], "only_in_a": [], "only_in_b": []},
        "steps": [],
    }
    lines = render_text(result)
    assert "  t1  0.0% (0 of 250) -> 0.4% (1 of 250)" in lines
    flip |= {"b_pass_rate": 1 / 2500, "b_executed": 2500}
    assert "  t1  0.0% (0 of 250) -> <0.1% (1 of 2500)" in render_text(result)


def test_flips_carry_their_counts(two_runs_lake: Path) -> None:
    """Each flip's counts are the cells' passed / executed trials of the task on each side."""
    result = as_json(two_runs_lake, "exp-a", "exp-b")
    flips = result["flipped"]["fail_to_pass"] + result["flipped"]["pass_to_fail"]
    assert flips  # the lake is as designed
    cells = {
        (r["run"], r["task_id"]): r
        for r in rows(
            two_runs_lake,
            "SELECT run, task_id, count(*) FILTER (WHERE NOT infra_failed) AS executed, "
            "count(*) FILTER (WHERE NOT infra_failed AND passed) AS passed FROM cells GROUP BY ALL",
        )
    }
    for flip in flips:
        for side, run in (("a", "exp-a"), ("b", "exp-b")):
            cell = cells[run, flip["task_id"]]
            assert (flip[f"{side}_passed"], flip[f"{side}_executed"]) == (
                cell["passed"],
                cell["executed"],
            )
            assert flip[f"{side}_pass_rate"] == cell["passed"] / cell["executed"]


def test_a_run_s_batches_without_a_step_are_said_under_the_step_table(tmp_path: Path) -> None:
    """A run's batches without a step count in its figures but sit in no step's row: a line
    says so (the table showed 100% at every step beside a pooled 50%, with no word why)."""
    for run, reward in (("exp-a", 1.0), ("exp-b", 0.0)):
        write_trial(
            write_job(tmp_path / "runs" / run / "harbor" / "step-0000" / "job"), "t__1", reward=1.0
        )
        write_trial(write_job(tmp_path / "runs" / run / "harbor" / "loose"), "t__1", reward=reward)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = as_json(tmp_path / "lake", "exp-a", "exp-b")
    assert result["a"]["batches_without_step"] == result["b"]["batches_without_step"] == 1
    assert [s["step"] for s in result["steps"]] == [0]
    text = compare(tmp_path / "lake", "exp-a", "exp-b").output.splitlines()
    assert "A's 1 batch without a step is in its figures above, in no step of this table" in text
    assert "B's 1 batch without a step is in its figures above, in no step of this table" in text


def test_the_reward_key_is_checked_on_the_compared_trials(tmp_path: Path) -> None:
    """A key that only another run of the lake has made every compared trial an infra failure
    without a word (the check was over the whole lake); `stats` of the same runs warns."""
    for run, rewards in (("exp-a", {"reward": 1.0}), ("exp-b", {"reward": 0.0})):
        write_trial(
            write_job(tmp_path / "runs" / run / "harbor" / "step-0000" / "job"),
            "t__1",
            rewards=rewards,
        )
    scored = write_job(tmp_path / "runs" / "scored" / "harbor" / "step-0000" / "job")
    write_trial(scored, "t__1", rewards={"score": 1.0})
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    warned = compare(tmp_path / "lake", "exp-a", "exp-b", "--reward-key", "score")
    assert warned.exit_code == 0, warned.output
    assert "warning: reward key 'score' occurs in no trial in scope" in warned.stderr
    assert "'reward' (2 trials)" in warned.stderr  # (the keys of the compared trials)
    quiet = compare(tmp_path / "lake", "exp-a", "scored", "--reward-key", "score")
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr, quiet.stderr


def test_a_side_with_unreadable_trial_dirs_says_so_in_its_line(tmp_path: Path) -> None:
    """A run in which 3 of 4 trial dirs could not be read compared as '1 trial, 100.0%', the
    3 said only in --json."""
    job = write_job(tmp_path / "runs" / "exp-a" / "harbor" / "step-0000" / "job")
    write_trial(job, "ok__1")
    for i in range(3):
        write_unreadable_trial(job, f"bad__{i}", "truncated")
    write_trial(write_job(tmp_path / "runs" / "exp-b" / "harbor" / "step-0000" / "job"), "t__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    lines = compare(tmp_path / "lake", "exp-a", "exp-b").output.splitlines()
    assert lines[0] == "A: exp-a (run, 1 batch, 1 trial; 3 unreadable trial dirs, not counted)"
    assert lines[1] == "B: exp-b (run, 1 batch, 1 trial)"


def test_a_change_that_rounds_to_zero_points_is_not_shown_as_none() -> None:
    """Beside '0.0%' and '<0.1%' (percent_text), '+0.0 pt' read as no change."""
    from wmo_lake.commands.compare import _delta

    assert _delta(1 / 2001, True) == "+<0.1 pt"
    assert _delta(-1 / 2001, True) == "-<0.1 pt"
    assert (_delta(0.0, True), _delta(0.25, True), _delta(-0.5, True)) == (
        "+0.0 pt",
        "+25.0 pt",
        "-50.0 pt",
    )
    assert (_delta(3, False), _delta(None, True)) == ("+3", "-")


def test_a_run_name_with_control_characters_is_printed_escaped(tmp_path: Path) -> None:
    """A run dir named 'zz\\rexp1' showed on a terminal as 'exp1' in the side lines (its
    table cells were escaped already)."""
    for run in ("exp1", "zz\rexp1"):
        write_trial(write_job(tmp_path / "runs" / run / "harbor" / "step-0000" / "job"), "t__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    output = compare(tmp_path / "lake", "exp1", "zz\rexp1").output
    assert "\r" not in output
    assert output.splitlines()[1] == "B: zz\\rexp1 (run, 1 batch, 1 trial)"


def test_a_trial_that_names_no_task_is_a_task_of_its_own(tmp_path: Path) -> None:
    """cells.task_id is null for a trial whose result.json names no task (a `missing_task`
    problem): compare, `stats --by task` and the report sorted task ids with it and stopped on
    a TypeError. It is now the task '(no task id)' in each."""
    for run, reward in (("exp1", 1.0), ("exp2", 0.0)):
        job = write_job(tmp_path / "runs" / run / "harbor" / "step-0001" / "job")
        write_trial(job, "a__1", trial_id=f"{run}-a", reward=reward)
        no_task = {"task_id": None, "task_name": None}
        write_trial(job, "b__1", trial_id=f"{run}-b", reward=reward, result_overrides=no_task)
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    flipped = as_json(lake, "exp1", "exp2")["flipped"]["pass_to_fail"]
    assert sorted(t["task_id"] for t in flipped) == ["(no task id)", "hello-offline"]
    assert (
        "  (no task id)  100.0% (1 of 1) -> 0.0% (0 of 1)" in compare(lake, "exp1", "exp2").output
    )
    by_task = CliRunner().invoke(cli, ["stats", "--by", "task", "--lake", str(lake)])
    assert by_task.exit_code == 0, by_task.output
    assert "(no task id)" in by_task.output
    report = CliRunner().invoke(
        cli, ["report", "--lake", str(lake), "--out", str(tmp_path / "r.html")]
    )
    assert report.exit_code == 0, report.output
    assert "(no task id)" in (tmp_path / "r.html").read_text()


def test_a_side_named_no_run_is_the_batches_outside_any_run(tmp_path: Path) -> None:
    write_trial(write_job(tmp_path / "runs" / "loose-job"), "a__1", reward=0.0)
    write_trial(write_job(tmp_path / "runs" / "exp1" / "harbor" / "step-0001" / "job"), "b__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = as_json(tmp_path / "lake", "(no run)", "exp1")
    assert result["a"]["kind"] == "run" and result["a"]["trials"] == 1
    assert [t["task_id"] for t in result["flipped"]["fail_to_pass"]] == ["hello-offline"]


def test_batches_outside_any_run_from_two_trees_have_no_step_rows(tmp_path: Path) -> None:
    """Step dirs under no `<run>/harbor/` are one run's steps only when they come from one tree
    (as the report and stats read them): `expA/step-0001` and `expB/step-0001` were pooled into
    one step row of 50%, a rate of neither experiment."""
    for tree, reward in (("expA", 1.0), ("expB", 0.0)):
        for step in (1, 2):
            write_trial(
                write_job(tmp_path / "runs" / tree / f"step-{step:04d}" / "job"),
                "t__1",
                reward=reward,
            )
    write_trial(write_job(tmp_path / "runs" / "base" / "harbor" / "step-0001" / "job"), "t__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = as_json(tmp_path / "lake", "(no run)", "base")
    assert result["steps"] == []
    assert result["a"]["trees"] == ["expA", "expB"] and result["b"]["trees"] == []
    assert result["a"]["trials"] == 4  # (its figures pool them all, as a side's do)
    text = compare(tmp_path / "lake", "(no run)", "base").output.splitlines()
    assert (
        "no solve rate by step: A's batches outside any run come from 2 trees (expA, expB), and "
        "one tree's step is not another's (its figures above pool them all)"
    ) in text
    assert "solve rate by step:" not in text
    # a glob side is no run: it has no step rows, and no trees either
    assert as_json(tmp_path / "lake", "exp*", "base")["a"]["trees"] == []
    # one tree's steps outside any run are a run's steps
    shutil.rmtree(tmp_path / "runs" / "expB")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1, prune=True)
    one_tree = as_json(tmp_path / "lake", "(no run)", "base")
    assert one_tree["a"]["trees"] == []
    assert [(s["step"], s["solve_rate_a"]) for s in one_tree["steps"]] == [(1, 1.0), (2, 1.0)]


def _ctrf(statuses: list[str]) -> dict[str, Any]:
    counts = {s: statuses.count(s) for s in ("passed", "failed", "skipped", "pending", "other")}
    tests = [{"name": f"t{i}", "status": s} for i, s in enumerate(statuses)]
    return {
        "results": {
            "tool": {"name": "pytest"},
            "summary": counts | {"tests": len(tests)},
            "tests": tests,
        }
    }


def test_a_side_pools_by_seed_003s_rules(tmp_path: Path) -> None:
    """A side's metrics against the oracle's seed 003 `rollout_stats` on the same trials: an
    infra-failed trial's graded score stays out of graded_solve_rate (`graded` is taken over
    executed records), an empty-string stop reason is no reason (`if r.stop_reason`), and a
    trial with no spans counts in empty_span_share. No earlier compare test held these."""
    root, sinks = tmp_path / "runs", tmp_path / "sinks"
    sinks.mkdir()
    job = write_job(root / "exp/harbor/step-0001/job", max_turns=5, token_sink_dir=str(sinks))
    half, whole = _ctrf(["passed", "failed"]), _ctrf(["passed", "passed"])
    write_trial(job, "p__1", reward=1.0, trace={"stop_reason": "submitted"}, ctrf=whole)
    write_trial(job, "p__2", verifier_result=None, trace={"stop_reason": ""}, ctrf=half)
    write_trial(job, "p__3", reward=0.0, trace={"stop_reason": "max_turns"}, ctrf=half)
    write_trial(write_job(root / "base/harbor/step-0001/job"), "q__1", reward=1.0)
    ingest([root], tmp_path / "lake", workers=1)
    expected = oracle.batch_stats(oracle.read_tree(root))["exp/harbor/step-0001/job"]
    assert (expected["graded_solve_rate"], expected["scaffold_loss_rate"]) == (0.75, 0.5)
    metrics = {m["metric"]: m["a"] for m in as_json(tmp_path / "lake", "exp", "base")["metrics"]}
    for key in ("solve_rate", "graded_solve_rate", "raw_solve_rate", "scaffold_loss_rate"):
        assert metrics[key] == expected[key], key
    assert metrics["empty_span_share"] == expected["empty_span_trials"] / expected["trials"] == 1


# `compare`'s side of several batches applies seed 003's `rollout_stats` to the side's trials
# POOLED: truncated_spans counts every span of them all with n_sampled >= max_tokens. Seed 003's
# rollout_stats on three records (2, 2 and 1 sampled tokens, max_tokens 2) gave truncated_spans 2,
# truncated_span_trials 2: here the same spans in two steps of one run (one truncated span each,
# plus a short one). Kills report/data.py's pooled_counts taking the max of the batches'
# truncated_spans instead of their sum.
def test_pooled_truncated_spans_are_summed(tmp_path: Path) -> None:
    for step, runs in ((0, "exp"), (1, "exp"), (0, "base")):
        job = write_job(tmp_path / f"runs/{runs}/harbor/step-{step:04d}/job", max_tokens=2)
        write_trial(job, "hello__1", reward=1.0, turns=[([1, 2], [3, 4], [-0.1, -0.2])])
    job = tmp_path / "runs/exp/harbor/step-0001/job"
    write_trial(job, "hello__2", reward=1.0, turns=[([1, 2], [3], [-0.1])])
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = compare_sides(tmp_path / "lake", "base", "exp", {})
    metric = next(m for m in result["metrics"] if m["metric"] == "truncated_spans")
    assert (metric["a"], metric["b"]) == (1, 2)  # seed 003 over each side's records


def test_a_side_pooled_from_two_job_dirs_is_warned_of(tmp_path: Path) -> None:
    """Two run trees with one run name (treeA/exp, treeB/exp) pool their trials under one batch
    label: `stats` notes it, and compare of `exp` said nothing."""
    for tree, reward in (("treeA", 1.0), ("treeB", 0.0)):
        job = write_job(tmp_path / "runs" / tree / "exp" / "harbor" / "step-0000" / "job")
        write_trial(job, "t__1", trial_id=f"{tree}-t", reward=reward)
    write_trial(write_job(tmp_path / "runs" / "other" / "harbor" / "step-0000" / "job"), "t__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = compare(tmp_path / "lake", "exp", "other")
    assert result.exit_code == 0, result.output
    assert (
        "warning: 1 batch(es) in scope pool the trials of several job dirs that carry one batch "
        "label: exp/harbor/step-0000/job;"
    ) in result.output
    other = compare(tmp_path / "lake", "other", "other")
    assert other.exit_code == 0 and "pool the trials" not in other.output, other.output


def test_run_names_in_the_unknown_side_error_are_printable(tmp_path: Path) -> None:
    """A run dir named with an escape sequence reached the terminal raw in the error's list of
    runs (`stats` draws it as `\\x1b`, as every name the CLI prints)."""
    runs = tmp_path / "runs"
    write_trial(write_job(runs / "ev\x1b[31mil" / "harbor" / "step-0000" / "job"), "t__1")
    ingest([runs], tmp_path / "lake", workers=1)
    result = CliRunner().invoke(
        cli, ["compare", "--lake", str(tmp_path / "lake"), "nope", "*"], color=True
    )
    assert result.exit_code == 2
    assert "(runs: ev\\x1b[31mil;" in result.output and "\x1b" not in result.output
