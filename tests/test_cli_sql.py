"""`wmo-lake sql` through the real click command: formats, stdin, read-only, clear errors."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "a__1", trial_id="a", reward=1)
    write_trial(job, "b__1", trial_id="b", reward=0.5)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    return tmp_path / "lake"


QUERY = "SELECT trial_name, rewards['reward'] AS reward, n_spans FROM trials ORDER BY trial_name"


def _sql(lake: Path, *args: str, input: str | None = None):
    return CliRunner().invoke(cli, ["sql", *args, "--lake", str(lake)], input=input)


def test_json_is_one_array_of_row_objects(lake: Path) -> None:
    result = _sql(lake, QUERY, "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"trial_name": "a__1", "reward": "1", "n_spans": 3},
        {"trial_name": "b__1", "reward": "0.5", "n_spans": 3},
    ]


def test_jsonl_csv_table(lake: Path) -> None:
    lines = _sql(lake, QUERY, "--format", "jsonl").stdout.splitlines()
    assert [json.loads(line)["trial_name"] for line in lines] == ["a__1", "b__1"]
    rows = list(csv.reader(io.StringIO(_sql(lake, QUERY, "--format", "csv").stdout)))
    assert rows == [["trial_name", "reward", "n_spans"], ["a__1", "1", "3"], ["b__1", "0.5", "3"]]
    table = _sql(lake, QUERY).stdout
    assert "a__1" in table and "trial_name" in table


def test_maps_and_lists_as_json(lake: Path) -> None:
    result = _sql(
        lake,
        "SELECT rewards, sampled_token_ids FROM trials JOIN spans USING (trial_key) "
        "WHERE trial_key = 'a' AND call_index = 0",
        "--format",
        "json",
    )
    (row,) = json.loads(result.stdout)
    assert row["rewards"] == {"reward": "1"} and isinstance(row["sampled_token_ids"], list)


def test_parquet_output(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    result = _sql(lake, QUERY, "--format", "parquet", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert pq.read_table(out).to_pylist()[0] == {"trial_name": "a__1", "reward": "1", "n_spans": 3}
    no_output = _sql(lake, QUERY, "--format", "parquet")
    assert no_output.exit_code == 2 and "--output" in no_output.output


def test_query_from_stdin_and_several_statements(lake: Path) -> None:
    result = _sql(
        lake,
        "-",
        "--format",
        "json",
        input="SET VARIABLE x = 41;\nSELECT getvariable('x') + 1 AS y",
    )
    assert json.loads(result.stdout) == [{"y": 42}]


def test_writes_are_refused(lake: Path, tmp_path: Path) -> None:
    for statement in (
        f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'",
        "CREATE TABLE t AS SELECT 1",
        "DROP VIEW trials",
        "INSERT INTO trials SELECT * FROM trials",
    ):
        result = _sql(lake, statement)
        assert result.exit_code == 2, statement
        assert "read-only" in result.output
    assert not (tmp_path / "x.csv").exists()


def test_errors_are_clear(lake: Path, tmp_path: Path) -> None:
    missing = _sql(tmp_path / "no-lake", "SELECT 1")
    assert missing.exit_code == 1 and "wmo-lake ingest" in missing.output
    bad = _sql(lake, "SELECT nope FROM trials")
    assert bad.exit_code == 1 and "query failed" in bad.output and "nope" in bad.output
    unparsable = _sql(lake, "SELEC 1")
    assert unparsable.exit_code == 2 and "cannot parse" in unparsable.output


def test_datum_settings_reach_the_views(lake: Path) -> None:
    """--context-budget and --max-datum-tokens set the datums views' variables, like
    SET VARIABLE does in plain SQL."""
    query = (
        "SELECT getvariable('wmo_context_budget') AS b, getvariable('wmo_max_datum_tokens') AS m"
    )
    result = _sql(
        lake, query, "--format", "json", "--context-budget", "7", "--max-datum-tokens", "9"
    )
    assert json.loads(result.stdout) == [{"b": 7, "m": 9}]
    dropped = _sql(
        lake, "SELECT count(*) AS n FROM datums", "--format", "json", "--context-budget", "1"
    )
    assert json.loads(dropped.stdout) == [{"n": 0}]  # every span overflows a 1-token budget
    kept = _sql(lake, "SELECT count(*) AS n FROM datums", "--format", "json")
    assert json.loads(kept.stdout)[0]["n"] > 0  # the default budget (65536) drops nothing
