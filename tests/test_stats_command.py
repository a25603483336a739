"""`wmo-lake stats` through the real click command: the table (run/step order, percentages), the
seed's warnings as notes, --json (keys exactly the rollout_stats columns), --batch / --run, the
query-time setting options, and errors without tracebacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from edge_case_trees import write_unreadable_trial
from harbor_shapes import add_agent, write_job, write_trial
from spec import ROLLOUT_STATS_COLUMNS, ROLLOUT_STATS_EXTRA_COLUMNS

from reference import oracle
from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.stats import collect_stats, table_cells

CLEAN = "exp/harbor/step-0001/job"
WARNED = "exp/harbor/step-0002/job"
OTHER = "zeta/harbor/step-0000/job"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(runs root, lake): a clean batch, a batch raising every warning, a batch of another run."""
    root = tmp_path_factory.mktemp("cli") / "runs"
    clean = write_job(root / CLEAN, max_turns=10, max_tokens=1000)
    write_trial(clean, "ok__1", reward=1.0, n_episodes=3)  # real sample: 3 spans, submitted
    warned = write_job(root / WARNED, max_turns=5, max_tokens=4)
    # one turn that sampled all 4 tokens (truncated); 2 episodes, declared -> submitted
    write_trial(warned, "w__1", reward=1.0, n_episodes=2, turns=[([1], [5, 6, 7, 8], [-0.1] * 4)])
    # no verifier evidence (infra failed), no spans, a verifier exception -> error
    write_trial(
        warned,
        "w__2",
        verifier_result=None,
        rollout_details=None,
        exception_type="RewardFileNotFoundError",
    )
    # a real 0.0 with no CTRF report (graded < executed), 5 episodes -> max_turns
    write_trial(warned, "w__3", reward=0.0, ctrf=None, n_episodes=5, turns=[([1], [2], [-0.2])])
    write_unreadable_trial(warned, "w__4", "missing")
    other = write_job(root / OTHER, max_turns=10, max_tokens=1000)
    write_trial(other, "z__1", reward=0.5, n_episodes=3)
    lake = root.parent / "lake"
    ingest([root], lake, workers=1)
    return root, lake


def stats(lake: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["stats", "--lake", str(lake), *args])


def test_table_rows_in_run_step_order_with_percentages(tree: tuple[Path, Path]) -> None:
    result = stats(tree[1])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["batch", "step", "trials"]
    rows = [
        line for line in lines[2:] if line.split() and line.split()[0] in (CLEAN, WARNED, OTHER)
    ]
    assert [row.split()[0] for row in rows] == [CLEAN, WARNED, OTHER]
    warned = rows[1]
    # solve 1/2 executed, graded 1.0 over 1, raw 1/3, scaffold loss 2/3 (error, max_turns)
    for cell in ("50.0%", "100.0% (1)", "33.3%", "66.7%", "1 in 1"):
        assert cell in warned, (cell, warned)
    assert "error 1, max_turns 1, submitted 1" in warned


def test_notes_are_the_seed_warnings(tree: tuple[Path, Path]) -> None:
    result = stats(tree[1])
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: ")]
    assert all(f"note: {WARNED}: " in note for note in notes), notes
    expected = [
        ("1 turn(s) across 1/3 trial(s)", "max_tokens = 4"),
        ("1/3 trial(s) recorded no token spans",),
        ("1/3 trial(s) never produced verifier evidence", "2 executed"),
        ("1/2 executed trial(s) have no readable CTRF test report",),
        ("scaffold loss 66.7%", "error 1, max_turns 1"),
        ("1 trial dir(s) could not be read and are not counted above",),
    ]
    assert len(notes) == len(expected)
    for note, phrases in zip(notes, expected, strict=True):
        for phrase in phrases:
            assert phrase in note, (phrase, note)


def test_a_label_two_job_dirs_share_is_a_note(tmp_path: Path) -> None:
    """Two run trees with the same run name give the same batch labels: their trials pool into
    one batch. stats says so, naming both job dirs."""
    jobs = []
    for tree in ("a", "b"):
        job = write_job(tmp_path / tree / "exp" / "harbor" / "step-0000" / "job")
        write_trial(job, f"t__{tree}", trial_id=f"id-{tree}", reward=1.0)
        ingest([tmp_path / tree], tmp_path / "lake")
        jobs.append(job)
    result = stats(tmp_path / "lake")
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: exp/harbor/step-0000/job: 2 job dirs carry this batch label and their trials are "
        f"pooled as one batch ({jobs[0]}, {jobs[1]}): two run trees with the same run name, dirs "
        "of one name in two trees given as PATHs, or a job dir that moved (`wmo-lake ingest "
        "--prune` drops one that is gone)"
    ]
    assert json.loads(stats(tmp_path / "lake", "--json").stdout)[0]["trials"] == 2


def test_step_dirs_given_as_paths_are_batches_of_their_own(tmp_path: Path) -> None:
    """Step dirs given as PATHs labelled each job dir from below its step dir: three steps were
    one batch `job`, pooled under one arbitrary step (`--steps 3` matched nothing, `--steps 1`
    all three). A step dir at or above the PATH starts the label now."""
    paths = []
    for tree, step, reward in (("expA", 1, 0.0), ("expA", 2, 0.0), ("expB", 3, 1.0)):
        step_dir = tmp_path / tree / f"step-{step:04d}"
        job = write_job(step_dir / "job")
        write_trial(job, "t__1", trial_id=f"{tree}-{step}", reward=reward)
        paths.append(step_dir if step < 3 else job)  # (a job dir in a step dir, too)
    ingest(paths, tmp_path / "lake")
    rows = json.loads(stats(tmp_path / "lake", "--json").stdout)
    assert [(row["batch"], row["step"], row["trials"]) for row in rows] == [
        ("step-0001/job", 1, 1),
        ("step-0002/job", 2, 1),
        ("step-0003/job", 3, 1),
    ]
    [third] = json.loads(stats(tmp_path / "lake", "--json", "--steps", "3").stdout)
    assert (third["batch"], third["solve_rate"]) == ("step-0003/job", 1.0)
    assert "carry this batch label" not in stats(tmp_path / "lake").stdout


def settings_of(args: list[str]) -> oracle.Settings:
    values = dict(zip(args[::2], args[1::2], strict=True))
    return oracle.Settings(
        reward_key=values.get("--reward-key", "reward"),
        reward_mode=values.get("--reward-mode", "raw"),
        max_turns=int(values["--max-turns"]) if "--max-turns" in values else None,
        max_tokens=int(values["--max-tokens"]) if "--max-tokens" in values else None,
    )


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--max-tokens", "1"],
        ["--max-turns", "2", "--reward-mode", "positive-binary"],
        ["--reward-key", "score"],
    ],
)
def test_json_is_the_rollout_stats_rows(tree: tuple[Path, Path], args: list[str]) -> None:
    root, lake = tree
    result = stats(lake, "--json", *args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert [row["batch"] for row in rows] == [CLEAN, WARNED, OTHER]
    expected = oracle.batch_stats(oracle.read_tree(root, settings_of(args)))
    for row in rows:
        assert list(row) == ROLLOUT_STATS_COLUMNS + ROLLOUT_STATS_EXTRA_COLUMNS
        assert isinstance(row["stop_reason_counts"], dict)
        assert row == expected[row["batch"]]


def test_json_hand_checked_values(tree: tuple[Path, Path]) -> None:
    rows = {row["batch"]: row for row in json.loads(stats(tree[1], "--json").stdout)}
    warned = rows[WARNED]
    assert warned["stop_reason_counts"] == {"error": 1, "max_turns": 1, "submitted": 1}
    assert (warned["solve_rate"], warned["raw_solve_rate"]) == (0.5, 1 / 3)
    assert (warned["truncated_spans"], warned["unreadable_trials"]) == (1, 1)
    truncated_at_1 = {
        row["batch"]: row
        for row in json.loads(stats(tree[1], "--json", "--max-tokens", "1").stdout)
    }
    assert truncated_at_1[WARNED]["truncated_spans"] == 2  # w__1's 4 tokens and w__3's 1


def test_batch_glob_and_run_filters(tree: tuple[Path, Path]) -> None:
    lake = tree[1]

    def batches(*args: str) -> list[str]:
        result = stats(lake, "--json", *args)
        assert result.exit_code == 0, result.output
        return [row["batch"] for row in json.loads(result.stdout)]

    assert batches("--batch", "exp/*/step-0002/*") == [WARNED]
    assert batches("--batch", "*/job") == [CLEAN, WARNED, OTHER]
    assert batches("--run", "zeta") == [OTHER]
    assert batches("--run", "exp", "--batch", "*0001*") == [CLEAN]


def test_a_selection_that_matches_no_batch_is_a_usage_error(
    tree: tuple[Path, Path], tmp_path: Path
) -> None:
    """A typo'd run or glob lists the lake's runs, as `compare` does (it was exit 0 with an
    empty table, and `[]` under --json: a typo read as an empty result)."""
    for args in (["--run", "nope"], ["--run", "nope", "--json", "--strict"]):
        empty = stats(tree[1], *args)
        assert empty.exit_code == 2, empty.output
        assert "no batch matches --run 'nope' (runs: exp, zeta)" in empty.stderr
        assert empty.stdout == ""
    # a lake without batches has nothing to list: its empty result is no typo
    (tmp_path / "runs").mkdir()
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    nothing = stats(tmp_path / "lake", "--run", "nope", "--json")
    assert (nothing.exit_code, nothing.stdout) == (0, "[]\n")
    assert stats(tmp_path / "lake", "--run", "nope").stderr == "no batch matches --run 'nope'\n"


def test_a_file_named_by_wmo_lake_is_said_as_wmo_lakes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$WMO_LAKE naming a file blamed `--lake`, which was not given."""
    afile = tmp_path / "afile"
    afile.write_text("")
    from_env = CliRunner().invoke(cli, ["stats"], env={"WMO_LAKE": str(afile)})
    assert from_env.exit_code == 2
    assert f"Error: WMO_LAKE={afile}: '{afile}' is a file, not a lake directory" in from_env.output
    assert "--lake" not in from_env.output.split("Error: ", 1)[1]
    given = stats(afile)  # (the option given: click's own words)
    assert given.exit_code == 2 and "Invalid value for '--lake'" in given.output
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WMO_LAKE", raising=False)
    Path("lake").write_text("")  # (the default ./lake, a file)
    default = CliRunner().invoke(cli, ["stats"])
    assert default.exit_code == 2
    assert "Error: ./lake is a file, not a lake directory: give the lake with --lake DIR" in (
        default.output
    )


def test_errors_are_messages_not_tracebacks(tmp_path: Path) -> None:
    missing = stats(tmp_path / "no-lake")
    assert missing.exit_code == 1
    lake = tmp_path / "no-lake"
    assert missing.output.strip() == (
        f"Error: no lake at {lake} (no manifest.json): "
        f"run `wmo-lake ingest RUNS_DIR --lake {lake}` first"
    )
    bad_mode = stats(tmp_path / "no-lake", "--reward-mode", "binary")
    assert bad_mode.exit_code == 2 and "positive-binary" in bad_mode.output


def test_help_documents_the_plain_sql_settings() -> None:
    for command in ("stats", "sql"):
        text = CliRunner().invoke(cli, [command, "--help"]).output
        for variable in ("wmo_reward_key", "wmo_reward_mode", "wmo_max_turns", "wmo_max_tokens"):
            assert f"SET VARIABLE {variable}" in text, (command, variable)


def test_sql_command_takes_the_same_settings(tree: tuple[Path, Path]) -> None:
    root, lake = tree
    expected = oracle.batch_stats(oracle.read_tree(root, oracle.Settings(max_tokens=1)))
    query = "SELECT batch, truncated_spans FROM rollout_stats"

    def truncated(*args: str) -> dict[str, Any]:
        result = CliRunner().invoke(cli, ["sql", "--lake", str(lake), "--format", "json", *args])
        assert result.exit_code == 0, result.output
        return {row["batch"]: row["truncated_spans"] for row in json.loads(result.stdout)}

    want = {batch: row["truncated_spans"] for batch, row in expected.items()}
    assert truncated("--max-tokens", "1", query) == want
    assert truncated(f"SET VARIABLE wmo_max_tokens = 1; {query}") == want


def test_columns_left_out_at_a_narrow_width_point_to_json(tree: tuple[Path, Path]) -> None:
    """The hint under a narrowed table names an option `stats` has (it said `--format csv`)."""
    _, lake = tree
    result = CliRunner().invoke(cli, ["stats", "--lake", str(lake)], env={"COLUMNS": "60"})
    assert result.exit_code == 0, result.output
    (hint,) = [line for line in result.stdout.splitlines() if "not shown at width 60" in line]
    assert hint.endswith("; use --json)")


@pytest.mark.parametrize("lost", [1, 2000])
def test_the_verifiers_part_of_the_scaffold_loss_reads_as_its_cell(lost: int) -> None:
    """The note said '0.0 points' (and '100.0 points') where the cell beside it says '<0.1%'
    ('>99.9%'): both are `percent_text`."""
    from wmo_lake.stats import notes_for, table_cells
    from wmo_lake.terminal import percent_text

    trials = 2001
    row = {
        "batch": "exp/harbor/step-0001/job", "run": "exp", "step": 1, "trials": trials,
        "trials_with_spans": trials, "solve_rate": 0.0, "graded_solve_rate": 0.0,
        "graded_trials": trials, "raw_solve_rate": 0.0, "executed_trials": trials,
        "infra_failed_trials": 0, "empty_span_trials": 0, "truncated_spans": 0,
        "truncated_span_trials": 0, "stop_reason_counts": {"error": trials},
        "scaffold_loss_rate": 1.0, "unreadable_trials": 0, "dropped_turns": 0,
        "dropped_turn_trials": 0, "verifier_error_trials": lost,
        "verifier_scaffold_loss_rate": lost / trials,
    }  # fmt: skip
    [note] = [n for n in notes_for([row]) if "scaffold loss" in n]
    shown = percent_text(lost / trials)
    assert shown in ("<0.1%", ">99.9%")
    assert f"; {shown[:-1]} points of it are verifier crashes ({lost} trial(s)" in note
    assert f"({shown} verifier)" in " ".join(table_cells([row])[1][0])


def test_run_no_run_selects_the_batches_outside_any_run(tmp_path: Path) -> None:
    """`stats --by task` and the report label the batches outside a run '(no run)', and
    `report --run '(no run)'` selected them; `stats --run`, the exports and `compare` found
    nothing under that name. Every --run now takes it."""
    write_trial(write_job(tmp_path / "runs" / "loose-job"), "a__1")
    write_trial(write_job(tmp_path / "runs" / "exp1" / "harbor" / "step-0001" / "job"), "b__1")
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    result = CliRunner().invoke(cli, ["stats", "--run", "(no run)", "--json", "--lake", str(lake)])
    assert result.exit_code == 0, result.output
    assert [row["batch"] for row in json.loads(result.stdout)] == ["loose-job"]
    export = CliRunner().invoke(
        cli,
        [
            "export",
            "datums",
            "--run",
            "(no run)",
            "--no-split-guard",
            "--lake",
            str(lake),
            "--out",
            str(tmp_path / "d.parquet"),
        ],
    )
    assert export.exit_code == 0, export.output
    import pyarrow.parquet as pq

    assert set(pq.read_table(tmp_path / "d.parquet").column("batch").to_pylist()) == {"loose-job"}


# `stats --last N` keeps "the last N batches of each run" (README, Narrowing and summarizing), a
# run's batches in step order: step 10 comes after step 9, though its dir name `step-10` sorts
# before `step-9` as text. Pins the `step` key of stats.STATS_QUERY's ORDER BY (without it the
# batches are in label order and --last 1 keeps step 9).
def test_last_takes_the_latest_step_by_number(tmp_path: Path) -> None:
    for step in (9, 10):
        write_trial(write_job(tmp_path / f"runs/exp/harbor/step-{step}/job"), "t__1", reward=1.0)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    every = CliRunner().invoke(cli, ["stats", "--lake", str(tmp_path / "lake"), "--json"])
    assert every.exit_code == 0, every.output
    assert [r["step"] for r in json.loads(every.output)] == [9, 10]
    last = CliRunner().invoke(
        cli, ["stats", "--lake", str(tmp_path / "lake"), "--json", "--last", "1"]
    )
    assert last.exit_code == 0, last.output
    assert [(r["batch"], r["step"]) for r in json.loads(last.output)] == [
        ("exp/harbor/step-10/job", 10)
    ]


# The `stats` table's rate cells: a rate whose denominator is empty is '-' (a null measurement,
# stats.percent), else a percentage. The denominators are upstream's (seed 003,
# `rollout_stats`, copied here):
#
#     raw_solve_rate = passed records / len(records)              (every trial)
#     with_stop_reason = [r for r in records if r.stop_reason]    (scaffold loss's denominator)
#
# - a batch whose one trial is an infra failure (no verifier result): raw 0/1 = 0.0 is a
#   measurement ("0.0%"), the solve rate over 0 executed trials is not ("-"). Pins the `trials`
#   denominator of the raw cell (the executed count would make it '-').
# - a batch whose one trial executed but left no CTRF report: graded = [] so the graded solve rate
#   is '-' ("- (0)"), while the solve rate over 1 executed trial is "100.0%". Pins the
#   `graded_trials` denominator of the graded cell.
# - a batch whose one trial has no stop reason (seed 000's read_terminus_stop_reason: None when
#   `n_episodes` is not an int): no trial reported one, so the scaffold loss rate is '-', not
#   "0.0%". Pins the `reason != "unknown"` in stats._with_stop_reason.
def cells_by_batch(lake: Path) -> dict[str, dict[str, str]]:
    headers, body = table_cells(collect_stats(lake).rows)
    return {row[0]: dict(zip(headers, row, strict=True)) for row in body}


def test_rate_cells_use_upstreams_denominators(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_trial(write_job(runs / "exp/harbor/step-0001/job"), "t__1", verifier_result=None)
    write_trial(write_job(runs / "exp/harbor/step-0002/job"), "t__1", reward=1.0, n_episodes=None)
    write_trial(write_job(runs / "exp/harbor/step-0003/job"), "t__1", reward=1.0, ctrf=None)
    ingest([runs], tmp_path / "lake", workers=1)
    cells = cells_by_batch(tmp_path / "lake")
    infra = cells["exp/harbor/step-0001/job"]
    assert (infra["trials"], infra["executed"], infra["infra failed"]) == ("1", "0", "1")
    assert (infra["solve"], infra["raw"]) == ("-", "0.0%")
    no_reason = cells["exp/harbor/step-0002/job"]
    assert no_reason["stop reasons"] == "unknown 1"
    assert no_reason["scaffold loss"] == "-"
    ungraded = cells["exp/harbor/step-0003/job"]
    assert (ungraded["executed"], ungraded["solve"], ungraded["graded"]) == ("1", "100.0%", "- (0)")


# `stats` notes an *empty batch* for a job dir with no trial dirs (README: "Every job dir is a
# batch: one with no trial dirs has `trials` = 0 and every rate 0.0 ... and `stats` notes it"). A
# job dir whose only trial dir cannot be read has a trial dir: it is counted in
# `unreadable_trials` and noted as such, never as empty ("the lake holds no trial of it ... its job
# dir holds no trial dirs" would send a reader to the wrong cause). Pins
# `not row["unreadable_trials"]` in stats.notes_for.
def test_a_batch_of_unreadable_trials_is_not_noted_empty(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_unreadable_trial(write_job(runs / "dead/harbor/step-0000/job"), "x__1", "missing")
    write_job(runs / "dead/harbor/step-0001/job")  # no trial dirs: empty
    ingest([runs], tmp_path / "lake", workers=1)
    report = collect_stats(tmp_path / "lake")
    counts = {r["batch"]: (r["trials"], r["unreadable_trials"]) for r in report.rows}
    assert counts == {"dead/harbor/step-0000/job": (0, 1), "dead/harbor/step-0001/job": (0, 0)}
    empty = [n for n in report.notes if "empty batch" in n]
    assert [n.split(":")[0] for n in empty] == ["dead/harbor/step-0001/job"]
    assert any(
        n.startswith("dead/harbor/step-0000/job: 1 trial dir(s) could not be read")
        for n in report.notes
    )


# The truncation note names the output cap the batch's trials were judged against; a batch of
# two agents with caps 2 and 4 (harbor runs every trial under its own agent, and the README's
# `trials` section: "a job of several agents reads each trial as its own agent ran it ... The caps
# (`trial_caps`) follow the same rule") was judged against both: the note says `max_tokens (2..4)`,
# not one cap. Pins `min(max_tokens) AS low` in stats.CAPS_QUERY.
#
# Truncation by seed 003's rollout_stats (copied rule): a span is truncated when
# `len(span.sampled_token_ids) >= max_tokens`: a__1 (cap 4) samples 4 tokens, 1 truncated span.
def test_the_note_names_the_range_of_caps(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs/r/harbor/step-0001/job", max_tokens=4)
    second = add_agent(job, "openai/gpt-4o-mini", llm_kwargs={"max_tokens": 2})
    write_trial(job, "a__1", reward=1.0, turns=[([1, 2], [3, 4, 5, 6], [-0.1] * 4)])
    write_trial(job, "a__2", reward=1.0, turns=[([1, 2], [3], [-0.1])], agent=second)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    report = collect_stats(tmp_path / "lake")
    (row,) = report.rows
    assert (row["truncated_spans"], row["truncated_span_trials"]) == (1, 1)
    (note,) = [n for n in report.notes if "cut off mid-answer" in n]
    assert "sampled the full max_tokens (2..4) and were cut off" in note


def test_infra_failure_note_names_the_key_and_upstreams_causes(tmp_path: Path) -> None:
    """Upstream's scorer notes each infra-failed cell's cause (`infra-failure: <exception type |
    no exception info>`) and warns 'no evidence for reward key K'; a verifier that wrote only
    other keys is not a verifier that wrote nothing, and the note says so."""
    job = write_job(tmp_path / "runs" / CLEAN)
    write_trial(job, "a__1", rewards={"reward": 1.0, "format": 0.5})  # no 'accuracy'
    write_trial(job, "a__2", rewards={"reward": 0.0})
    write_trial(job, "a__3", verifier_result=None, exception_type="CancelledError")
    write_trial(job, "a__4", rewards={"accuracy": 1.0})
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = stats(tmp_path / "lake", "--reward-key", "accuracy")
    assert result.exit_code == 0, result.output
    [note] = [line for line in result.stdout.splitlines() if "verifier evidence" in line]
    assert note == (
        f"note: {CLEAN}: 3/4 trial(s) never produced verifier evidence for reward key "
        "'accuracy'; excluded from the solve rate (1 executed); causes, as upstream's cells note "
        "them: CancelledError 1, no exception info 2; 2 of them have rewards under other keys "
        "only: `format, reward`; is 'accuracy' the key you meant? (--reward-key)"
    )
    plain = stats(tmp_path / "lake")  # key 'reward': a__3 and a__4 have none
    [note] = [line for line in plain.stdout.splitlines() if "verifier evidence" in line]
    assert note.endswith(
        "2/4 trial(s) never produced verifier evidence for reward key 'reward'; excluded from "
        "the solve rate (2 executed); causes, as upstream's cells note them: CancelledError 1, "
        "no exception info 1; 1 of them have rewards under other keys only: `accuracy`; is "
        "'reward' the key you meant? (--reward-key)"
    )


def test_a_reward_that_is_no_measurement_is_no_cause(tmp_path: Path) -> None:
    """Upstream's scorer raises for a reward that is there but no measurement (its own note says
    so); only a trial missing the key gets an `infra-failure: <cause>` cell note."""
    job = write_job(tmp_path / "runs" / CLEAN)
    write_trial(job, "a__1", reward=1.5)
    write_trial(job, "a__2", reward=1.5, exception_type="VerifierTimeoutError")
    write_trial(job, "a__3", verifier_result=None)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = stats(tmp_path / "lake")
    [note] = [line for line in result.stdout.splitlines() if "verifier evidence" in line]
    assert note.endswith("(0 executed); causes, as upstream's cells note them: no exception info 1")
    assert "2/3 trial(s) carry a reward that is no measurement" in result.stdout


def test_short_notes_keep_a_key_holding_a_digit_as_it_is(tmp_path: Path) -> None:
    for step in (1, 2):
        job = write_job(tmp_path / "runs" / f"exp/harbor/step-000{step}/job")
        write_trial(job, "a__1", rewards={"pass@1": 1.0})
        write_trial(job, "a__2", reward=1.0)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    result = stats(tmp_path / "lake")
    keys = [line for line in result.stdout.splitlines() if "other keys only" in line]
    assert len(keys) == 1, keys  # one line for both batches, the key kept as it is
    assert keys[0].startswith("note: 2 batches (exp/harbor/step-0001/job .. ")
    assert "other keys only: `pass@1`; is 'reward'" in keys[0]
