"""`wmo-lake stats` narrowed and summarized: --last / --steps, notes collapsed per kind (--notes
full for all), a sparkline per metric across steps with gaps for null measurements, and
--by task (the task x step pass matrix, as the cells count it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from harbor_shapes import write_job, write_trial
from run_shapes import write_split_step_run

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.stats_views import collapse_notes, parse_steps, sparkline


def stats(lake: Path, *args: str) -> Result:
    result = CliRunner().invoke(cli, ["stats", "--lake", str(lake), *args])
    return result


def rows(lake: Path, sql: str) -> list[dict[str, Any]]:
    relation = connect(lake).sql(sql)
    return [dict(zip(relation.columns, r, strict=True)) for r in relation.fetchall()]


def table_batches(output: str) -> list[str]:
    return [line.split()[0] for line in output.splitlines() if line.startswith("exp-")]


def test_last_n_batches_of_each_run(two_runs_lake: Path) -> None:
    result = stats(two_runs_lake, "--last", "2")
    assert result.exit_code == 0, result.output
    assert table_batches(result.output.split("\n\n")[0]) == [
        f"exp-{r}/harbor/step-000{s}/job" for r in "ab" for s in (4, 5)
    ]


def test_steps_range_inclusive(two_runs_lake: Path) -> None:
    result = stats(two_runs_lake, "--steps", "1:2", "--json")
    assert result.exit_code == 0, result.output
    expected = rows(two_runs_lake, "FROM rollout_stats WHERE step BETWEEN 1 AND 2")
    got = json.loads(result.output)
    assert [r["batch"] for r in got] == [r["batch"] for r in expected]
    assert [r["solve_rate"] for r in got] == [r["solve_rate"] for r in expected]
    assert [
        r["step"] for r in json.loads(stats(two_runs_lake, "--steps", "4:", "--json").output)
    ] == [
        4,
        5,
        4,
        5,
    ]
    for bad in ("3-4", "5:2", "a:b", ":"):
        result = stats(two_runs_lake, "--steps", bad)
        assert result.exit_code == 2, bad
        assert "--steps" in result.output


def test_steps_that_select_nothing_are_named(two_runs_lake: Path) -> None:
    """A range of steps no batch is in said so (it read "the lake ... has no trials yet", or
    named only --run, which on its own selects batches)."""
    alone = stats(two_runs_lake, "--steps", "100:200")
    assert alone.exit_code == 2, alone.output  # a usage error, listing the runs
    assert "Error: no batch matches --steps '100:200' (runs: exp-a, exp-b)\n" in alone.stderr
    with_run = stats(two_runs_lake, "--run", "exp-a", "--steps", "100:")
    assert "Error: no batch matches --run 'exp-a' --steps '100:' (runs: " in with_run.stderr
    as_json = stats(two_runs_lake, "--run", "exp-a", "--steps", "100:", "--json")
    assert (as_json.exit_code, as_json.stdout) == (2, "")


def test_parse_steps() -> None:
    assert parse_steps("10:20") == (10, 20)
    assert parse_steps("10:") == (10, None)
    assert parse_steps(":20") == (None, 20)
    assert parse_steps("7") == (7, 7)


def test_repeated_notes_collapse_to_one_line_per_kind(two_runs_lake: Path) -> None:
    empty_span_batches = [
        r["batch"] for r in rows(two_runs_lake, "FROM rollout_stats WHERE empty_span_trials > 0")
    ]
    assert len(empty_span_batches) > 1
    short = [line for line in stats(two_runs_lake).output.splitlines() if "no token spans" in line]
    assert len(short) == 1
    assert short[0].startswith(f"note: {len(empty_span_batches)} batches ({empty_span_batches[0]}")
    assert "--notes full" in short[0]
    full = [
        line
        for line in stats(two_runs_lake, "--notes", "full").output.splitlines()
        if "no token spans" in line
    ]
    assert [line.split()[1].rstrip(":") for line in full] == empty_span_batches


def test_collapse_keeps_a_single_note_and_ranges_numbers() -> None:
    batches = ["a/1", "a/2", "b"]
    notes = [
        "a/1: 1/18 trial(s) never produced verifier evidence; excluded (17 executed)",
        "a/2: 3/20 trial(s) never produced verifier evidence; excluded (17 executed)",
        "b: 2 trial dir(s) could not be read and are not counted above",
    ]
    assert collapse_notes(notes, batches) == [
        "2 batches (a/1 .. a/2): 1..3/18..20 trial(s) never produced verifier evidence; "
        "excluded [--notes full lists each]",
        notes[2],
    ]


def test_sparkline() -> None:
    assert sparkline([0.0, None, 1.0, 0.5], 0.0, 1.0) == "▁ █▅"
    assert sparkline([3, 3]) == "▁▁"
    assert len(sparkline([0.5] * 500, 0.0, 1.0)) == 60


@pytest.mark.parametrize("n", [61, 123, 245, 490, 1000, 99_999])
def test_a_long_sparkline_puts_every_value_in_a_bucket(n: int) -> None:
    """Bucketed, the newest step is in the last bucket and the oldest in the first (float bucket
    bounds left the newest out for n = 123, 245, 490, ...: a collapse at the last step of a run
    was not drawn)."""
    newest = sparkline([None] * (n - 1) + [1.0], 0.0, 1.0)  # a gap but for the newest value
    assert newest == " " * 59 + "█"
    oldest = sparkline([1.0] + [None] * (n - 1), 0.0, 1.0)
    assert oldest == "█" + " " * 59
    if n < 120:  # (a bucket of two or three values: the drop shows)
        assert sparkline([1.0] * (n - 1) + [0.0], 0.0, 1.0)[-1] != "█"


def test_sparkline_per_metric_with_gaps(two_runs_lake: Path) -> None:
    output = stats(two_runs_lake).output
    section = output.split("exp-a: 6 steps, per metric across steps\n", 1)[1]
    solve = next(line for line in section.splitlines() if "solve rate (passed / executed)" in line)
    spark = solve.split(")", 1)[1].strip().split("  ")[0]
    assert len(spark) == 6 and spark[4] == " "  # step 4 executed nothing: a gap, not ▁
    stats_rows = rows(two_runs_lake, "FROM rollout_stats WHERE run = 'exp-a'")
    first, last = stats_rows[0]["solve_rate"], stats_rows[-1]["solve_rate"]
    assert solve.endswith(f"{100 * first:.1f}% -> {100 * last:.1f}%")
    assert spark == sparkline(
        [r["solve_rate"] if r["executed_trials"] else None for r in stats_rows], 0.0, 1.0
    )


@pytest.fixture(scope="module")
def pass_rates(two_runs_lake: Path) -> dict[tuple[str, str], float]:
    return {
        (r["batch"], r["task_id"]): r["rate"]
        for r in rows(
            two_runs_lake,
            "SELECT batch, task_id, avg(passed::INT) AS rate FROM cells "
            "WHERE NOT infra_failed GROUP BY ALL",
        )
    }


def test_by_task_matrix(two_runs_lake: Path, pass_rates: dict[tuple[str, str], float]) -> None:
    result = stats(two_runs_lake, "--by", "task", "--run", "exp-a")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "exp-a: pass rate by task and step (passed / executed)"
    assert lines[1].split() == ["task", "trend", "0", "1", "2", "3", "4", "5"]
    assert set(lines[2]) == {"─"}  # the shared renderer's header rule
    tasks = []
    for line in lines[3:]:
        task, *_ = line.split()
        tasks.append(task)
        cells = line.split()[-6:]  # the sparkline may contain a gap: cells are the last 6
        for step, cell in enumerate(cells):
            rate = pass_rates.get((f"exp-a/harbor/step-{step:04d}/job", task))
            assert cell == ("-" if rate is None else f"{100 * rate:.0f}%"), (task, step)
    assert tasks[-1] == "task-4"  # the regression trends down the most
    assert len(tasks) == 6


def test_by_task_matrix_fits_the_terminal_width(two_runs_lake: Path) -> None:
    """Drawn by the shared renderer like `sql` and `stats`: every line of the table fits, the
    task and trend stay whole, and the latest steps are the ones shown."""
    for width in (30, 45, 60, 200):
        result = CliRunner().invoke(
            cli,
            ["stats", "--lake", str(two_runs_lake), "--by", "task", "--run", "exp-a"],
            env={"COLUMNS": str(width)},
        )
        assert result.exit_code == 0, result.output
        _title, header, rule, *body = result.output.splitlines()
        notes = [line for line in body if line.startswith("(")]
        table = [header, rule, *(line for line in body if not line.startswith("("))]
        assert all(len(line) <= width for line in table), (width, table)
        assert header.split()[:2] == ["task", "trend"]
        assert any(line.split()[0] == "task-4" for line in table[2:]), table
        steps = header.split()[2:]
        assert steps and steps == [str(s) for s in range(6 - len(steps), 6)], header
        if len(steps) < 6:
            assert notes and "earlier step(s) not shown" in notes[-1], notes
        else:
            assert not notes


def test_by_task_json(two_runs_lake: Path, pass_rates: dict[tuple[str, str], float]) -> None:
    result = stats(two_runs_lake, "--by", "task", "--json", "--steps", "2:3")
    assert result.exit_code == 0, result.output
    got = json.loads(result.output)
    assert {r["step"] for r in got} == {2, 3}
    assert len(got) == 2 * 6 * 2
    for r in got:
        [batch] = r["batches"]  # one job dir a step
        expected = pass_rates.get((batch, r["task_id"]))
        assert (
            r["pass_rate"] == pytest.approx(expected)
            if expected is not None
            else (r["pass_rate"] is None)
        )


SPLIT = "exp-s/harbor/step-0000"  # two job dirs (tests/run_shapes.py: SPLIT_STEP)


def test_by_task_pools_the_batches_of_a_step(tmp_path: Path) -> None:
    """Two job dirs at one step are one column, their trials pooled (they were two columns
    both headed with the step)."""
    write_split_step_run(tmp_path / "runs")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    text = stats(tmp_path / "lake", "--by", "task").output.splitlines()
    assert text[1].split() == ["task", "trend", "0", "1"]
    assert {line.split()[0]: line.split()[-2:] for line in text[3:]} == {
        "task-r": ["50%", "0%"],
        "task-n": ["0%", "50%"],
    }
    got = json.loads(stats(tmp_path / "lake", "--by", "task", "--json").output)
    assert [(r["task_id"], r["step"], r["batches"], r["pass_rate"]) for r in got] == [
        ("task-n", 0, [f"{SPLIT}/job", f"{SPLIT}/job-b"], 0.0),
        ("task-n", 1, ["exp-s/harbor/step-0001/job"], 0.5),
        ("task-r", 0, [f"{SPLIT}/job", f"{SPLIT}/job-b"], 0.5),
        ("task-r", 1, ["exp-s/harbor/step-0001/job"], 0.0),
    ]


def test_sparklines_pool_the_batches_of_a_step(tmp_path: Path) -> None:
    """A step of two job dirs is one value of each sparkline, their trials pooled as the report
    and compare pool a step (it was one character per job dir, the first value one job dir's
    66.7% where the step's is 33.3%)."""
    write_split_step_run(tmp_path / "runs")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    output = stats(tmp_path / "lake").output
    section = output.split("exp-s: 2 steps (3 batches), per metric across steps\n", 1)[1]
    solve = next(line for line in section.splitlines() if "solve rate (passed / executed)" in line)
    spark = solve.split(")", 1)[1].strip().split("  ")[0]
    per_step = rows(
        tmp_path / "lake",
        "SELECT count(*) FILTER (WHERE passed AND NOT infra_failed) "
        "/ count(*) FILTER (WHERE NOT infra_failed) AS rate "
        "FROM trial_records WHERE run = 'exp-s' GROUP BY step ORDER BY step",
    )
    first, last = (r["rate"] for r in per_step)
    assert (first, last) == (2 / 6, 1 / 3)  # the tree is as designed
    assert spark == sparkline([first, last], 0.0, 1.0)
    assert solve.endswith(f"{100 * first:.1f}% -> {100 * last:.1f}%")
    compared = json.loads(
        CliRunner()
        .invoke(cli, ["compare", "--lake", str(tmp_path / "lake"), "exp-s", "exp-s", "--json"])
        .output
    )
    assert [s["solve_rate_a"] for s in compared["steps"]] == [first, last]


def write_stepless_jobs(root: Path) -> None:
    """Two job dirs of one name outside any run's steps (batches a/rollouts, b/rollouts): task-x
    passes in a, fails in b."""
    for parent, reward in (("a", 1.0), ("b", 0.0)):
        job = write_job(root / parent / "rollouts")
        write_trial(job, "task-x__1", task_name="demo/task-x", reward=reward)


def test_a_batch_without_a_step_changes_only_its_own_runs_matrix(tmp_path: Path) -> None:
    """exp-s keeps its step columns (step 0 pooled) beside batches without a step elsewhere in
    the lake (every run went per batch, headed by the job dir's name alone: 'job job-b job');
    the step-less batches are columns named apart ('rollouts' twice before)."""
    write_split_step_run(tmp_path / "runs")
    write_stepless_jobs(tmp_path / "other")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    ingest([tmp_path / "other"], tmp_path / "lake", workers=1)
    text = stats(tmp_path / "lake", "--by", "task").output.split("\n\n")
    exp_s, no_run = (part.splitlines() for part in text)
    assert exp_s[0] == "exp-s: pass rate by task and step (passed / executed)"
    assert exp_s[1].split() == ["task", "trend", "0", "1"]
    assert {line.split()[0]: line.split()[-2:] for line in exp_s[3:]} == {
        "task-r": ["50%", "0%"],
        "task-n": ["0%", "50%"],
    }
    assert no_run[0] == "(no run): pass rate by task and batch (passed / executed)"
    assert no_run[1].split() == ["task", "trend", "a/rollouts", "b/rollouts"]
    assert no_run[3].split()[-2:] == ["100%", "0%"]
    got = json.loads(stats(tmp_path / "lake", "--by", "task", "--json").output)
    assert [(r["run"], r["task_id"], r["batches"]) for r in got][:2] == [
        ("exp-s", "task-n", [f"{SPLIT}/job", f"{SPLIT}/job-b"]),
        ("exp-s", "task-n", ["exp-s/harbor/step-0001/job"]),
    ]


def test_by_task_cells_never_round_a_pass_to_zero() -> None:
    """A task that passed once in 250 trials is solved: its cell is '<1%', not '0%' (a task that
    never passed); 249 of 250 is '>99%', not '100%'."""
    from wmo_lake.report.data import TaskTrend
    from wmo_lake.stats_views import task_matrix_lines

    rows = [
        {"run": "exp", "step": step, "batch": f"exp/harbor/step-000{step}/job"} for step in (0, 1)
    ]
    trends = {"exp": [TaskTrend("exp", "t1", [1 / 250, 249 / 250], 0.0, 0.5)]}
    [line] = [line for line in task_matrix_lines(rows, trends) if line.startswith("t1")]
    assert line.split()[-2:] == ["<1%", ">99%"]


def test_a_run_name_with_control_characters_heads_its_lines_escaped(tmp_path: Path) -> None:
    """A run dir named 'zz\\rexp1' showed on a terminal as 'exp1' in the sparklines' and the
    task matrix's headings, its lines under another run's name (its cells were escaped)."""
    for run in ("exp1", "zz\rexp1"):
        for step in (1, 2):
            job = write_job(tmp_path / "runs" / run / "harbor" / f"step-{step:04d}" / "job")
            write_trial(job, "t__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    for args in ((), ("--by", "task")):
        output = stats(tmp_path / "lake", *args).output
        assert "\r" not in output
        headings = [
            line
            for line in output.splitlines()
            if "per metric across" in line or "pass rate by task" in line
        ]
        assert sorted(line.split(": ")[0] for line in headings) == ["exp1", "zz\\rexp1"]


def test_a_step_that_last_cuts_is_said(tmp_path: Path) -> None:
    """`--last` counts batches: `--last 2` of a run whose step 0 is two job dirs keeps one of
    them, and the column headed 0 stood for the whole step without a word."""
    write_split_step_run(tmp_path / "runs")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    note = (
        "note: exp-s: step 0 is 1 of its 2 batches (--last counts batches; `--steps 0:` takes "
        "whole steps)"
    )
    for args in ((), ("--by", "task")):
        assert note in stats(tmp_path / "lake", "--last", "2", *args).output.splitlines()
        for whole in ("1", "3"):
            assert "--last counts" not in stats(tmp_path / "lake", "--last", whole, *args).output


def test_the_reward_key_is_checked_on_the_batches_shown(tmp_path: Path) -> None:
    """`--steps` and `--last` narrow the batches: the reward key is checked on those, so a shown
    step whose verifier wrote another key is a warning (and `--strict` exits 1), as the same
    batch selected by `--batch` is, while a shown step that has the key is none."""
    for step, key in ((0, "reward"), (1, "score")):
        job = write_job(tmp_path / "runs" / "mixk" / "harbor" / f"step-{step:04d}" / "job")
        for i in range(2):
            write_trial(job, f"t__{step}{i}", task_name="demo/t", rewards={key: 1.0})
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    warning = "warning: reward key 'reward' occurs in no trial in scope"
    for narrowing in (("--steps", "1:"), ("--last", "1"), ("--batch", "mixk/harbor/step-0001/*")):
        for output in ((), ("--json",)):
            result = CliRunner().invoke(
                cli, ["stats", "--lake", str(lake), *narrowing, *output, "--strict"]
            )
            assert result.exit_code == 1, (narrowing, result.output)
            assert warning in result.stderr
    for narrowing in (("--steps", "0"), ("--steps", ":0"), ()):
        result = CliRunner().invoke(cli, ["stats", "--lake", str(lake), *narrowing, "--strict"])
        assert result.exit_code == 0, (narrowing, result.output)
        assert "warning:" not in result.stderr


def test_last_cuts_no_step_of_another_tree(tmp_path: Path) -> None:
    """The batches of no run are a step's only within one tree: `--last 2` keeps expC's steps
    1 and 2 whole, and expA's and expB's step 1 are not part of expC's step 1. A step of one
    tree that is cut is named with its tree."""
    for tree, steps, jobs in (("expA", (1,), 1), ("expB", (1,), 1), ("expC", (1, 2), 2)):
        for step in steps:
            for j in range(jobs):
                job = write_job(tmp_path / "runs" / tree / f"step-{step:04d}" / f"job{j}")
                write_trial(job, f"t__{tree}{step}{j}", reward=1.0)
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    assert "--last counts" not in stats(lake, "--last", "4").output
    cut = stats(lake, "--last", "3").output
    assert (
        "note: (no run) (tree 'expC'): step 1 is 1 of its 2 batches (--last counts "
        "batches; `--steps 1:` takes whole steps)"
    ) in cut.splitlines(), cut


def test_a_stop_reason_named_unknown_is_a_loss_the_note_names(tmp_path: Path) -> None:
    """WMO counts any stop reason but the empty one as a reason, the string 'unknown' too (a
    scaffold loss), and names the counts; the note named none: 'never reached an explicit
    submit ()'. A trial with no reason is in no count the note names."""
    sink = tmp_path / "runs" / "pib" / "tokens" / "step-0000"
    sink.mkdir(parents=True)
    job = write_job(
        tmp_path / "runs" / "pib" / "harbor" / "step-0000" / "job", token_sink_dir=str(sink)
    )
    reasons = {"a__1": "unknown", "a__2": "submitted", "a__3": "max_turns", "a__4": None}
    for name, reason in reasons.items():
        trace = {} if reason is None else {"stop_reason": reason}
        write_trial(job, name, task_name="demo/a", reward=1.0, trace=trace)
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    (row,) = rows(lake, "SELECT scaffold_loss_rate, stop_reason_counts FROM rollout_stats")
    assert row["scaffold_loss_rate"] == 2 / 3  # unknown and max_turns of the 3 with a reason
    assert row["stop_reason_counts"] == {"max_turns": 1, "submitted": 1, "unknown": 2}
    notes = [
        n
        for n in stats(lake).output.splitlines()
        if n.startswith("note: pib/harbor/step-0000/job: scaffold")
    ]
    assert notes == [
        "note: pib/harbor/step-0000/job: scaffold loss 66.7%: trials that never reached an "
        "explicit submit (max_turns 1, unknown 1); their rewards measure the cutoff"
    ]
