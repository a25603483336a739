"""Rewards that are no measurement, and reward keys no trial has.

A bool or a numeric string is the number harbor's TrialResult model makes of it (upstream's
scorer reads result.json through that model), with a `coerced_reward` problems row. Upstream's
scorer raises for a whole batch when one reward is not a finite number in [0, 1]; the lake keeps
the 0.0 stand-in (infra_failed), records a problems row per such value, and `stats` notes the
trials. A reward key that no trial in scope has is a warning naming the keys that do occur
(`stats`, `export`, `connect()`), exit 1 under `--strict`."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake.checks import RewardKeyWarning
from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

INVALID = {"above": 1.5, "word": "abc", "text-above": "2", "null": None, "negative": -0.25}
# what harbor's TrialResult model makes a number of before upstream's scorer looks
COERCED = {"bool": (True, 1.0), "text": (" 0.5 ", 0.5)}


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rewards")
    job = write_job(root / "runs" / "exp" / "harbor" / "step-0001" / "job")
    for name, value in INVALID.items():
        write_trial(job, f"{name}__1", reward=value)
    for name, (value, _) in COERCED.items():
        write_trial(job, f"{name}__1", reward=value)
    nan_dir = write_trial(job, "nan__1", reward=0.75)
    text = (nan_dir / "result.json").read_text().replace('"reward": 0.75', '"reward": NaN')
    (nan_dir / "result.json").write_text(text)
    write_trial(job, "good__1", reward=1)
    write_trial(job, "half__1", reward=0.5)
    other = write_job(root / "runs" / "exp" / "harbor" / "step-0002" / "job")
    write_trial(other, "score__1", rewards={"score": 1.0})
    ingest([root / "runs"], root / "lake")
    return root / "lake"


def test_a_reward_that_is_no_measurement_is_a_stand_in(lake: Path) -> None:
    con = connect(lake)
    rows = dict(
        con.sql(
            "SELECT trial_name, (reward, infra_failed, passed) FROM cells "
            "WHERE batch LIKE '%step-0001%'"
        ).fetchall()
    )
    stand_in = (0.0, True, False)  # (reward, infra_failed, passed)
    assert rows == {
        **{f"{name}__1": stand_in for name in [*INVALID, "nan"]},
        "good__1": (1.0, False, True),
        "half__1": (0.5, False, False),
        **{f"{name}__1": (read, False, read == 1.0) for name, (_, read) in COERCED.items()},
    }


def test_each_such_trial_has_a_problems_row_saying_why(lake: Path) -> None:
    rows = (
        connect(lake)
        .sql(
            "SELECT trial_name, batch, kind, message FROM problems ORDER BY trial_name",
        )
        .fetchall()
    )
    batch = "exp/harbor/step-0001/job"
    shown = {
        "above": "1.5",
        "word": '"abc"',
        "text-above": '"2" (read as 2.0)',
        "null": "null",
        "negative": "-0.25",
        "nan": "NaN",
    }
    invalid = {
        f"{name}__1": (
            batch,
            "invalid_reward",
            f"result.json: verifier_result.rewards.reward is {text}, not a reward measurement "
            "(a number in [0, 1]); scored under reward key 'reward' the trial counts as "
            "infra_failed with a 0.0 stand-in",
        )
        for name, text in shown.items()
    }
    coerced = {
        "bool__1": "a boolean, true, not a number; read as 1.0",
        "text__1": 'a string, " 0.5 ", not a number; read as 0.5',
    }
    for name, what in coerced.items():
        invalid[name] = (
            batch,
            "coerced_reward",
            f"result.json: verifier_result.rewards.reward is {what}, the number harbor's "
            "TrialResult model (pydantic, lax) makes of it for upstream's scorer",
        )
    assert {name: tuple(rest) for name, *rest in rows} == invalid


def test_stats_notes_such_trials(lake: Path) -> None:
    result = CliRunner().invoke(cli, ["stats", "--lake", str(lake), "--batch", "*step-0001*"])
    assert result.exit_code == 0, result.output
    assert (
        "note: exp/harbor/step-0001/job: 6/10 trial(s) carry a reward that is no measurement "
        "(e.g. 1.5; expected a number in [0, 1]): counted as infra failures with a 0.0 "
        "stand-in (problems kind 'invalid_reward')"
    ) in result.output


def test_stats_warns_of_a_reward_key_no_trial_has(lake: Path) -> None:
    args = ["stats", "--lake", str(lake), "--reward-key", "scor"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0
    assert (
        "warning: reward key 'scor' occurs in no trial in scope, so every trial reads as an "
        "infra failure with a 0.0 stand-in; the keys that occur: 'reward' (10 trials), 'score' "
        "(1 trials). Pass --reward-key KEY (SQL: SET VARIABLE wmo_reward_key = 'KEY')"
    ) in result.stderr
    assert CliRunner().invoke(cli, [*args, "--strict"]).exit_code == 1
    assert CliRunner().invoke(cli, [*args, "--json", "--strict"]).exit_code == 1


@pytest.mark.parametrize("view", [[], ["--by", "task"], ["--by", "task", "--json"], ["--json"]])
def test_stats_warns_once(lake: Path, view: list[str]) -> None:
    """The table and --by task also open a session for their sparklines and task trends: that
    one's own check of the key printed the warning a second time."""
    args = ["stats", "--lake", str(lake), "--reward-key", "scor", *view]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.stderr.count("reward key 'scor' occurs in no trial") == 1, result.stderr


def test_the_warning_follows_the_scope(lake: Path) -> None:
    base = ["stats", "--lake", str(lake), "--strict"]
    assert CliRunner().invoke(cli, [*base, "--batch", "*step-0001*"]).exit_code == 0
    scoped = CliRunner().invoke(cli, [*base, "--batch", "*step-0002*"])
    assert scoped.exit_code == 1
    assert "reward key 'reward' occurs in no trial" in scoped.stderr
    assert "the keys that occur: 'score' (1 trials)" in scoped.stderr
    keyed = ["--batch", "*step-0002*", "--reward-key", "score"]
    assert CliRunner().invoke(cli, [*base, *keyed]).exit_code == 0


@pytest.mark.parametrize("kind", ["datums", "conversations"])
def test_export_warns_and_strict_writes_nothing(lake: Path, tmp_path: Path, kind: str) -> None:
    out = tmp_path / f"out.{'parquet' if kind == 'datums' else 'jsonl'}"
    args = ["export", kind, "--lake", str(lake), "--out", str(out), "--no-split-guard"]
    args += ["--reward-key", "scor"]
    strict = CliRunner().invoke(cli, [*args, "--strict"])
    assert strict.exit_code == 1
    assert "reward key 'scor' occurs in no trial in scope" in strict.stderr
    assert not out.exists() and not Path(f"{out}.manifest.json").exists()
    warned = CliRunner().invoke(cli, args)
    assert warned.exit_code == 0, warned.output
    assert warned.stderr.count("reward key 'scor'") == 1 and out.exists()


def test_a_where_that_leaves_only_trials_without_the_key_is_said(
    lake: Path, tmp_path: Path
) -> None:
    """The key was checked on --batch / --run only: `--where "step = 1"` exported the step whose
    trials have no 'score', every reward a 0.0 stand-in, and --strict let it through."""
    import wmo_lake as wl

    args = ["export", "datums", "--lake", str(lake), "--no-split-guard", "--reward-key", "score"]
    out = tmp_path / "one.parquet"
    strict = CliRunner().invoke(cli, [*args, "--out", str(out), "--where", "step = 1", "--strict"])
    assert strict.exit_code == 1 and not out.exists(), strict.output
    assert "reward key 'score' occurs in no trial in scope" in strict.stderr
    assert "'reward' (10 trials)" in strict.stderr  # (the keys of the selected batch)
    two = CliRunner().invoke(cli, [*args, "--out", str(out), "--where", "step = 2", "--strict"])
    assert two.exit_code == 0 and "warning" not in two.stderr, two.output
    with pytest.warns(RewardKeyWarning, match="'score' occurs in no trial in scope"):
        wl.export_datums(
            lake, tmp_path / "api.parquet", no_split_guard=True, where="step = 1",
            reward_key="score",
        )  # fmt: skip


def test_connect_warns_over_the_whole_lake(lake: Path) -> None:
    with pytest.warns(RewardKeyWarning, match="'reward' \\(10 trials\\), 'score' \\(1 trials\\)"):
        connect(lake, {"wmo_reward_key": "scor"})
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RewardKeyWarning)
        connect(lake, {"wmo_reward_key": "score"})  # occurs in one batch: no warning
        connect(lake, {"wmo_reward_key": "scor"}, check=False)


def test_sql_shows_connects_warning_as_one_line(lake: Path) -> None:
    args = ["sql", "--lake", str(lake), "--reward-key", "scor", "SELECT count(*) FROM cells"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    (line,) = [line for line in result.stderr.splitlines() if "scor" in line]
    assert line.startswith("warning: reward key 'scor' occurs in no trial in scope")


@pytest.mark.parametrize("kind", ["datums", "conversations"])
def test_export_of_rewards_that_are_no_measurement_warns_and_strict_writes_nothing(
    lake: Path, tmp_path: Path, kind: str
) -> None:
    """Upstream's scorer raises for a batch holding such a reward, so no datum of it reaches a
    trainer; the export gave them the 0.0 stand-in without a word (only `stats` noted them)."""
    out = tmp_path / f"out.{'parquet' if kind == 'datums' else 'jsonl'}"
    args = ["export", kind, "--lake", str(lake), "--out", str(out), "--no-split-guard"]
    invalid = len(INVALID) + 1  # (and NaN)
    said = f"warning: 1 batch(es) in scope hold {invalid} trial(s) whose reward is no measurement"
    strict = CliRunner().invoke(cli, [*args, "--strict"])
    assert strict.exit_code == 1
    assert said in strict.stderr and "WMO's scorer refuses such a batch whole" in strict.stderr
    assert not out.exists() and not Path(f"{out}.manifest.json").exists()
    warned = CliRunner().invoke(cli, args)
    assert warned.exit_code == 0, warned.output
    assert warned.stderr.count(said) == 1 and out.exists()
    clean = CliRunner().invoke(
        cli,
        [
            *args[:5],
            str(tmp_path / f"clean-{out.name}"),
            *args[6:],
            "--batch",
            "*step-0002*",
            "--reward-key",
            "score",
        ],
    )
    assert clean.exit_code == 0 and "warning" not in clean.stderr, clean.output


def test_the_python_export_warns_of_rewards_that_are_no_measurement(
    lake: Path, tmp_path: Path
) -> None:
    import wmo_lake as wl
    from wmo_lake.checks import InvalidRewardWarning

    with pytest.warns(InvalidRewardWarning) as caught:
        wl.export_datums(lake, tmp_path / "d.parquet", no_split_guard=True)
    assert str(caught[0].message).startswith("1 batch(es) in scope hold 6 trial(s) whose reward")
    # in Python's terms, whole: `--batch, --run` read `batch=, run=`
    assert str(caught[0].message).endswith("leave those batches out (batch, run)")
    with pytest.warns(InvalidRewardWarning, match="WMO's scorer refuses such a batch whole"):
        wl.export_conversations(lake, tmp_path / "c.jsonl", no_split_guard=True)
