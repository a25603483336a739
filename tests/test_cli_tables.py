"""`wmo-lake tables` and `wmo-lake schema NAME`: every table and view, counted, described from
the README's reference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import view_sources
from wmo_lake.reference import column_meaning, reference, split_columns
from wmo_lake.tables import TABLES


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tables")
    job = write_job(root / "runs" / "job")
    write_trial(job, "a__1", trial_id="a", reward=1)
    write_trial(job, "b__1", trial_id="b", reward=0.5)
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"


def _run(*args: str):
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": ""})


def test_tables_lists_every_table_and_view_with_counts(lake: Path) -> None:
    result = _run("tables", "--lake", str(lake), "--json")
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert set(rows) == set(TABLES) | {name for name, _ in view_sources()}
    assert rows["trials"] == {
        "name": "trials",
        "kind": "table",
        "rows": 2,
        "one_row_per": "trial",
    }
    assert rows["spans"]["rows"] == 6 and rows["rollout_stats"]["rows"] == 1
    assert rows["trial_records_with_spans"]["kind"] == "view"
    assert all(row["one_row_per"] for row in rows.values()), "every one has a meaning"


def test_tables_as_a_table(lake: Path) -> None:
    result = _run("tables", "--lake", str(lake), "--no-counts")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["name", "kind", "one", "row", "per"]
    assert any(line.split()[:2] == ["cells", "view"] for line in lines)


def test_schema_shows_columns_types_and_meaning(lake: Path) -> None:
    result = _run("schema", "trials", "--lake", str(lake), "--json")
    assert result.exit_code == 0, result.output
    rows = {row["column"]: row for row in json.loads(result.stdout)}
    assert list(rows) == TABLES["trials"].schema.names
    assert rows["n_spans"]["type"] == "INTEGER" and rows["trial_name"]["type"] == "VARCHAR"
    assert rows["n_spans"]["meaning"] == "rows in `spans`"
    text = _run("schema", "rollout_stats", "--lake", str(lake)).stdout
    assert text.startswith("rollout_stats (view): one row per batch")
    assert "stop_reason_counts" in text and "map reason -> count" in text


def test_a_view_column_is_not_given_an_unrelated_tables_meaning(lake: Path) -> None:
    """A view column the reference leaves blank borrows the meaning of a table column of the same
    name (batch, trial_name, ...); these differ from their namesakes, so they say their own
    (episodes.started_at read as jobs.started_at's 'not read as UTC', cost_usd as the agent's
    total from result.json, spans_full.source as the trial's dataset)."""
    result = _run("schema", "episodes", "--lake", str(lake), "--json")
    rows = {row["column"]: row["meaning"] for row in json.loads(result.stdout)}
    assert rows["started_at"] == "its earliest step `timestamp`, UTC"
    assert "not `trials.cost_usd`" in rows["cost_usd"]
    assert rows["prompt_tokens"].startswith("its steps' `metrics.prompt_tokens` summed")
    spans = json.loads(_run("schema", "spans_full", "--lake", str(lake), "--json").stdout)
    [source] = [row["meaning"] for row in spans if row["column"] == "source"]
    assert source.startswith("`rollout_details` or `sink`")


def test_schema_takes_a_name_as_duckdb_does_case_aside(lake: Path) -> None:
    """`sql "DESCRIBE TRIALS"` worked and `schema TRIALS` was refused (exit 2, no hint)."""
    result = _run("schema", "TRIALS", "--lake", str(lake), "--json")
    assert result.exit_code == 0, result.output
    same = _run("schema", "trials", "--lake", str(lake), "--json")
    assert json.loads(result.stdout) == json.loads(same.stdout)


def test_schema_of_an_unknown_name_suggests(lake: Path) -> None:
    result = _run("schema", "trial", "--lake", str(lake))
    assert result.exit_code == 2
    assert "did you mean" in result.output and "trials" in result.output


def test_the_reference_covers_every_table_column() -> None:
    described = reference()
    for table in TABLES.values():
        entry = described[table.name]
        missing = [
            name
            for name in table.schema.names
            if name not in entry.columns and not column_meaning(table.name, name)
        ]
        assert not missing, (table.name, missing)


@pytest.mark.parametrize(
    "view",
    [
        *("cells", "trial_records", "trial_records_with_spans"),
        *("rollout_stats", "datums", "datum_stats"),
    ],
)
def test_schema_gives_every_column_of_the_record_and_metric_views_a_meaning(
    lake: Path, view: str
) -> None:
    """`schema rollout_stats` left 17 of its 21 columns blank (solve_rate among them), and the
    other views users read most as many."""
    result = _run("schema", view, "--lake", str(lake), "--json")
    assert result.exit_code == 0, result.output
    blank = [row["column"] for row in json.loads(result.stdout) if not row["meaning"]]
    assert blank == [], blank


def test_split_columns_keeps_parenthesised_commas() -> None:
    assert split_columns("a, b (x, y), `c`") == [("a", ""), ("b", "x, y"), ("c", "")]


def test_columns_left_out_at_a_narrow_width_point_to_json(lake: Path) -> None:
    """The hint under a narrowed table names an option `tables` has (it said `--format csv`)."""
    result = CliRunner().invoke(cli, ["tables", "--lake", str(lake)], env={"COLUMNS": "30"})
    assert result.exit_code == 0, result.output
    (hint,) = [line for line in result.stdout.splitlines() if "not shown at width 30" in line]
    assert hint.endswith("; use --json)")


def test_a_view_column_takes_a_tables_meaning_only_when_it_is_shared() -> None:
    """A view's own computation under a table column's name was given the table's meaning:
    `datum_sequences.n_spans` (spans merged into one sequence) read 'rows in `spans`', and
    `settings.max_turns` (the query-time override) a job's recorded cap."""
    assert column_meaning("datum_sequences", "n_spans") == ""
    assert column_meaning("trial_records", "n_spans") == "rows in `spans`"
    assert column_meaning("settings", "max_turns").startswith("set with `--max-turns`")
    assert column_meaning("trial_stop_reasons", "max_turns").startswith("the cap its stop reason")
    assert column_meaning("cells", "batch") == column_meaning("trials", "batch") != ""
