"""`wmo-lake sql` through the real click command: formats, stdin, read-only, clear errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "csv file"])
@pytest.mark.parametrize(
    "query",
    ["SELECT 7 AS x; -- done", "SELECT 7 AS x;\n-- end\n", "SELECT 7 AS x; /* a */ ;\n-- b"],
)
def test_comments_after_the_last_statement_are_no_statement(
    lake: Path, tmp_path: Path, fmt: str, query: str
) -> None:
    """(They were a parser error: the statement's text, `;` and comment included, was wrapped
    in a subquery.)"""
    out = tmp_path / "r.csv"
    args = ["-o", str(out)] if fmt == "csv file" else ["--format", fmt]
    result = _sql(lake, "-", *args, input=query)
    assert result.exit_code == 0, result.output
    printed = out.read_text() if fmt == "csv file" else result.stdout
    if fmt == "table":
        assert printed.split() == ["x", "─", "7"]
    elif fmt == "json":
        assert json.loads(printed) == [{"x": 7}]
    else:
        assert list(csv.reader(io.StringIO(printed))) == [["x"], ["7"]]


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_an_earlier_select_runs_and_the_last_result_prints(lake: Path, fmt: str) -> None:
    """DuckDB 2 refuses a query while an earlier execute()'s rows are unread: each earlier
    statement runs to its end first, its rows unread."""
    result = _sql(lake, "--format", fmt, "SELECT count(*) AS n FROM trials; SELECT 7 AS x")
    assert result.exit_code == 0, result.output
    if fmt == "table":
        assert result.stdout.split() == ["x", "─", "7"]
    elif fmt == "json":
        assert json.loads(result.stdout) == [{"x": 7}]
    else:
        assert list(csv.reader(io.StringIO(result.stdout))) == [["x"], ["7"]]


@pytest.mark.parametrize(
    ("name", "read"),
    [
        ("r.csv", lambda p: list(csv.reader(p.open()))),
        ("r.json", lambda p: json.loads(p.read_text())),
        ("r.jsonl", lambda p: [json.loads(line) for line in p.read_text().splitlines()]),
        ("r.parquet", lambda p: pq.read_table(p).to_pylist()),
        ("r.txt", lambda p: p.read_text().split()),
        ("r", lambda p: p.read_text().split()),
    ],
)
def test_the_output_extension_names_the_format(
    lake: Path, tmp_path: Path, name: str, read: Any
) -> None:
    out = tmp_path / name
    result = _sql(lake, "SELECT 7 AS x", "--output", str(out))
    assert result.exit_code == 0, result.output
    expected = {
        "r.csv": [["x"], ["7"]],
        "r.json": [{"x": 7}],
        "r.jsonl": [{"x": 7}],
        "r.parquet": [{"x": 7}],
    }.get(name, ["x", "─", "7"])
    assert read(out) == expected


def test_an_output_name_that_lies_about_its_format_is_refused(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for args, message in [
        (
            ["-o", str(out / "r.csv"), "--format", "json"],
            "has the extension .csv but --format",
        ),
        (
            ["-o", str(out / "r.parquet"), "--format", "table"],
            f"--output {out / 'r.parquet'} has the extension .parquet but --format table was "
            f"given: name it {out / 'r.txt'} (without --format",
        ),
        (  # (the hint keeps the directory: it named a file in the current one)
            ["-o", str(out / "r.xlsx")],
            f"--output {out / 'r.xlsx'} names a .xlsx file, which `wmo-lake sql` does not write: "
            f"name it {out / 'r.txt'} (",
        ),
        (["-o", str(out / "r.csv.gz")], f"name it {out / 'r.csv'} ("),
    ]:
        result = _sql(lake, "SELECT 7 AS x", *args)
        assert result.exit_code == 2 and message in result.output, args
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    "name", ["r.csv.gz", "r.json.gz", "r.parquet.zst", "r.zip", "r.gz", "r.html", "r.parq"]
)
@pytest.mark.parametrize("fmt", [None, "table", "csv"])
def test_an_output_extension_that_names_no_format_written_is_refused(
    lake: Path, tmp_path: Path, name: str, fmt: str | None
) -> None:
    """(It used to get the text table under that name.)"""
    args = ["-o", str(tmp_path / name), *(["--format", fmt] if fmt else [])]
    result = _sql(lake, "SELECT 7 AS x", *args)
    assert result.exit_code == 2, result.output
    assert f"names a {Path(name).suffix} file" in result.output
    assert "the extensions it takes: .parquet, .pq, .jsonl, .ndjson, .json, .csv, .txt" in (
        result.output
    )
    assert not (tmp_path / name).exists()


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
    # a mistyped column, table or view is a usage error, as a query that does not parse (and
    # as `schema NAME` of a typo); an error as the query runs is a failure
    bad = _sql(lake, "SELECT nope FROM trials")
    assert bad.exit_code == 2 and "query failed: Binder Error" in bad.output, bad.output
    typo = _sql(lake, "SELECT * FROM trail_records")
    assert typo.exit_code == 2 and "query failed: Catalog Error" in typo.output
    assert typo.output.startswith("Usage: ") and "trial_records" in typo.output
    failing = _sql(lake, "SELECT CAST(trial_name AS INT) FROM trials")
    assert failing.exit_code == 1 and "query failed: Conversion Error" in failing.output
    unparsable = _sql(lake, "SELEC 1")
    assert unparsable.exit_code == 2 and "cannot parse" in unparsable.output
    for empty in ("  ", ";", "/* only a comment */"):
        result = _sql(lake, empty)
        assert result.exit_code == 2 and "the query is empty" in result.output, empty


@pytest.mark.parametrize("fmt", ["json", "jsonl", "csv", "table"])
def test_a_query_failing_as_it_runs_prints_no_partial_result(lake: Path, fmt: str) -> None:
    result = _sql(lake, "--format", fmt, "SELECT CAST(trial_name AS INT) AS n FROM trials")
    assert result.exit_code == 1
    assert "query failed: Conversion Error" in result.stderr
    assert result.stdout == ""


def test_a_file_writer_is_refused_before_any_statement_runs(lake: Path, tmp_path: Path) -> None:
    """The statements are parsed (by the lake's connection) and checked before the first runs."""
    slow_then_copy = (
        "SELECT count(*) FROM range(100000000) AS a(x) WHERE x % 7 = 3; "
        f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'"
    )
    result = _sql(lake, slow_then_copy)
    assert result.exit_code == 2 and "COPY would write a file" in result.output
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.parametrize(
    "statement",
    [
        "SET profiling_output = '{dir}/profile.json'",
        "CALL enable_logging(storage = 'file', storage_path = '{dir}')",
        "FROM enable_logging(storage = 'file', storage_path = '{dir}')",
    ],
    ids=["profile", "logging", "logging-table-function"],
)
def test_a_setting_that_writes_a_file_is_refused_as_a_write(
    lake: Path, tmp_path: Path, statement: str
) -> None:
    """Refused before it runs, as the write it is: DuckDB's own refusal of a confined
    enable_logging aborted the process (SIGABRT, "terminate called after throwing"), and a
    profile's was said as a read of another file. (A process of its own: the abort would end
    the test run.)"""
    query = statement.format(dir=tmp_path / "written") + "; SELECT 1 AS x"
    done = subprocess.run(
        [sys.executable, "-m", "wmo_lake.cli", "sql", query, "--lake", str(lake)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert "would have DuckDB write files" in done.stderr, done.stderr
    assert "wmo-lake ingest PATH" in done.stderr  # (the commands that do change the lake)
    assert not (tmp_path / "written").exists()


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


@pytest.mark.parametrize(
    ("statement", "expected_column"),
    [
        ("PIVOT trials ON trial_name USING count(*)", "a__1"),
        (
            "WITH p AS (PIVOT trials ON trial_name USING count(*)) SELECT * FROM p",
            "b__1",
        ),
        (
            "UNPIVOT (SELECT trial_name, n_spans, n_output_tokens FROM trials) "
            "ON n_spans, n_output_tokens INTO NAME metric VALUE value",
            "metric",
        ),
        ("FROM trials SELECT trial_name", "trial_name"),
        ("DESCRIBE trials", "column_type"),
        ("SUMMARIZE trials", "approx_unique"),
        ("SHOW TABLES", "name"),
        ("PRAGMA table_info('cells')", "notnull"),
        ("EXPLAIN ANALYZE SELECT count(*) FROM cells", "explain_value"),
    ],
)
def test_any_read_only_statement_runs(lake: Path, statement: str, expected_column: str) -> None:
    result = _sql(lake, statement, "--format", "json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows and expected_column in rows[0]


def test_explain_is_drawn_as_duckdb_draws_it_and_a_select_of_its_column_names_as_a_table(
    lake: Path,
) -> None:
    """EXPLAIN's table is DuckDB's own drawing of the plan; a SELECT whose columns are named
    explain_key and explain_value was taken for one, its header and key column dropped."""
    plan = _sql(lake, "EXPLAIN SELECT count(*) FROM cells")
    assert plan.exit_code == 0, plan.output
    assert "explain_key" not in plan.stdout and "physical_plan" not in plan.stdout
    assert "Aggregate" in plan.stdout and "count_star()" in plan.stdout
    named = _sql(lake, "SELECT 'k' AS explain_key, 'v' AS explain_value")
    assert named.exit_code == 0, named.output
    header, _, row = named.stdout.splitlines()
    assert header.split() == ["explain_key", "explain_value"] and row.split() == ["k", "v"]


def test_a_write_names_the_command_that_does_it(lake: Path, tmp_path: Path) -> None:
    for statement in (
        "UPDATE trials SET n_spans = 0",
        "DELETE FROM trials",
        f"ATTACH '{tmp_path / 'other.duckdb'}' AS other",
        f"COPY trials TO '{tmp_path / 'out.parquet'}'",
        "CREATE OR REPLACE VIEW cells AS SELECT 1",
    ):
        result = _sql(lake, statement)
        assert result.exit_code == 2, (statement, result.output)
        assert "wmo-lake ingest PATH" in result.output and "--output FILE" in result.output
        assert "Traceback" not in result.output
    assert list(tmp_path.glob("other*")) == [] and not (tmp_path / "out.parquet").exists()


@pytest.mark.parametrize(
    "query",
    [
        "SELECT * FROM read_csv('/etc/hostname')",
        "SELECT count(*) FROM 'tables/trials/*/*/*.parquet'",  # (the lake's own, by a glob)
        "SELECT * FROM '/etc/hostname'",  # (no reader for its name: 'no such table', exit 1)
    ],
)
def test_reading_other_files_is_refused_as_a_read(lake: Path, query: str) -> None:
    """A read outside the lake's files is said as one: it was answered with the write advice
    (ingest, forget, --output), which has nothing to do with it."""
    result = _sql(lake, query)
    assert result.exit_code == 2
    assert (
        "\nError: `wmo-lake sql` reads the lake's tables and views, not other files or globs ("
    ) in result.output, result.output
    assert f"`wmo-lake tables --lake {lake}` lists what there is to query" in result.output
    assert "ingest" not in result.output and "--output" not in result.output


def test_a_stale_duckdb_file_is_read_only_too(lake: Path) -> None:
    (lake / "lake.duckdb.stamp").write_text("0:stale")
    result = _sql(lake, "CREATE TABLE t AS SELECT 1")
    assert result.exit_code == 2 and "read-only" in result.output
    ok = _sql(lake, "SELECT count(*) AS n FROM trials", "--format", "json")
    assert json.loads(ok.stdout) == [{"n": 2}]


def test_limit(lake: Path) -> None:
    for fmt in ("json", "csv", "jsonl"):
        result = _sql(
            lake, "SELECT trial_name FROM trials ORDER BY 1", "--format", fmt, "--limit", "1"
        )
        assert result.exit_code == 0, result.output
        assert "a__1" in result.stdout and "b__1" not in result.stdout
    table = _sql(lake, "SELECT trial_name FROM trials ORDER BY 1", "--limit", "1").stdout
    assert "a__1" in table and "b__1" not in table
    # past 2^63 - 1 a usage error, as --max-tokens (it leaked DuckDB's INT128 cast error, exit 1)
    largest = _sql(lake, "SELECT 1 AS one", "--format", "csv", "--limit", str(2**63 - 1))
    assert (largest.exit_code, largest.stdout) == (0, "one\n1\n"), largest.output
    largest = _sql(lake, "SELECT 1 AS one", "--limit", str(2**63 - 1))  # (the table asks one more)
    assert largest.exit_code == 0 and "Conversion Error" not in largest.output, largest.output
    past = _sql(lake, "SELECT 1", "--limit", str(2**63))
    assert past.exit_code == 2 and "Conversion Error" not in past.output
    assert f"'--limit': must be a whole number (a 64-bit one), got {2**63}" in past.output


def test_output_dash_is_stdout(lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-o -` is stdout, as QUERY `-` is stdin (it wrote a file named `-`)."""
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    table = _sql(lake, "-o", "-", "SELECT 42 AS answer")
    assert table.exit_code == 0 and "42" in table.stdout, table.output
    csv_rows = _sql(lake, "-o", "-", "--format", "csv", "SELECT 42 AS answer")
    assert (csv_rows.exit_code, csv_rows.stdout) == (0, "answer\n42\n"), csv_rows.output
    assert list((tmp_path / "here").iterdir()) == []
    said = " ".join(CliRunner().invoke(cli, ["sql", "--help"]).output.split())
    assert "--output '-' writes to stdout" in said and "('-': stdout;" in said


def test_csv_writes_nested_values_as_json(lake: Path) -> None:
    result = _sql(
        lake, "SELECT rewards, [1, 2] AS ids FROM trials WHERE trial_id = 'a'", "--format", "csv"
    )
    rows = list(csv.reader(io.StringIO(result.stdout)))
    assert rows == [["rewards", "ids"], ['{"reward":"1"}', "[1,2]"]]


def test_json_non_finite_floats_are_null(lake: Path) -> None:
    result = _sql(lake, "SELECT 'nan'::DOUBLE AS x, 1.5 AS y", "--format", "json")
    assert json.loads(result.stdout) == [{"x": None, "y": 1.5}]
    empty = _sql(lake, "SELECT 1 AS x WHERE false", "--format", "json")
    assert json.loads(empty.stdout) == []


NESTED_NON_FINITE = """
SELECT
    [1.5, '-inf'::DOUBLE, NULL] AS lst,
    {'x': 'nan'::DOUBLE, 'y': ['inf'::FLOAT, 2.0::FLOAT], 'odd''name': 3} AS st,
    NULL::STRUCT(z DOUBLE) AS no_struct,
    MAP(['k'], ['-inf'::DOUBLE]) AS mp,
    ['inf'::DOUBLE, 0.25]::DOUBLE[2] AS arr,
    [{'v': ['nan'::DOUBLE]}] AS deep,
    [[1, 2]] AS ints
"""
NESTED_FINITE = {
    "lst": [1.5, None, None],
    "st": {"x": None, "y": [None, 2.0], "odd'name": 3},
    "no_struct": None,
    "mp": {"k": None},
    "arr": [None, 0.25],
    "deep": [{"v": [None]}],
    "ints": [[1, 2]],
}


def test_json_non_finite_floats_inside_nested_values_are_null(lake: Path, tmp_path: Path) -> None:
    """A -inf logprob inside a list (or a NaN in a struct, a map) is null too: DuckDB would write
    a bare -Infinity, which is no JSON. Through stdout and through DuckDB's COPY to a file."""
    for fmt in ("json", "jsonl"):
        out = tmp_path / f"nested.{fmt}"
        to_stdout = _sql(lake, NESTED_NON_FINITE, "--format", fmt)
        to_file = _sql(lake, NESTED_NON_FINITE, "--format", fmt, "--output", str(out))
        assert to_stdout.exit_code == 0 and to_file.exit_code == 0, to_stdout.output
        for text in (to_stdout.stdout, out.read_text()):
            rows = _strict_json(text) if fmt == "json" else [_strict_json(text)]
            assert rows == [NESTED_FINITE], fmt


def test_csv_nested_cells_write_non_finite_floats_as_pythons_json_reads_them(
    lake: Path, tmp_path: Path
) -> None:
    """The README's word: csv's nested cells are DuckDB's JSON text, NaN and Infinity bare (json
    and jsonl are the formats for a strict JSON reader)."""
    import csv
    import math

    query = "SELECT [1.5, 'nan'::DOUBLE, '-inf'::DOUBLE] AS l"
    out = tmp_path / "nested.csv"
    assert _sql(lake, query, "--format", "csv", "--output", str(out)).exit_code == 0
    for text in (_sql(lake, query, "--format", "csv").stdout, out.read_text()):
        [header, [cell]] = list(csv.reader(text.splitlines()))
        assert header == ["l"] and cell == "[1.5,NaN,-Infinity]"
        first, nan, minus_inf = json.loads(cell)
        assert first == 1.5 and math.isnan(nan) and minus_inf == -math.inf


def _strict_json(text: str) -> Any:
    """JSON as a strict parser (JavaScript's JSON.parse) reads it: no NaN, no Infinity."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_output_is_streamed_in_batches(lake: Path, tmp_path: Path) -> None:
    """More rows than one Arrow batch (8192): every format writes them all, in order."""
    query = "SELECT range AS i, [range] AS l FROM range(20000)"
    for fmt in ("csv", "jsonl", "json", "parquet"):
        out = tmp_path / f"big.{fmt}"
        result = _sql(lake, query, "--format", fmt, "--output", str(out))
        assert result.exit_code == 0, result.output
        if fmt == "parquet":
            values = pq.read_table(out).column("i").to_pylist()
        elif fmt == "csv":
            values = [int(r[0]) for r in list(csv.reader(out.open()))[1:]]
        elif fmt == "jsonl":
            values = [json.loads(line)["i"] for line in out.read_text().splitlines()]
        else:
            values = [row["i"] for row in json.loads(out.read_text())]
        assert values == list(range(20000)), fmt


def test_the_table_fits_the_terminal_width(lake: Path) -> None:
    query = "SELECT trial_name, artifact_dir, trial_key, batch, run FROM trials ORDER BY 1"
    for width in (40, 60, 100):
        result = CliRunner().invoke(
            cli, ["sql", query, "--lake", str(lake)], env={"COLUMNS": str(width)}
        )
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        table_lines = [line for line in lines if not line.startswith("(")]
        assert all(len(line) <= width for line in table_lines), (width, lines)
        header = table_lines[0].split()
        assert header[0] == "trial_name"  # whole, never wrapped or cut
        assert all(name in query for name in header)
    # piped (no terminal, no $COLUMNS): every cell whole
    wide = CliRunner().invoke(cli, ["sql", query, "--lake", str(lake)], env={"COLUMNS": ""})
    assert str(lake.parent / "runs" / "job" / "a__1") in wide.stdout


def test_a_number_is_shown_whole_or_left_out_never_cut(lake: Path) -> None:
    """Cut to fit the width, 1234567890123.456 read '1234567890…', right-aligned among numbers
    as a smaller one. A number column is now whole, or left out and named under the table; text
    is what gets cut."""
    query = (
        "SELECT repeat('t', 60) AS text, 1234567890123.456 AS n, "
        "-98765432109876543210 AS big, 7 AS small, 123456789012345678901234567::BIGNUM AS bn"
    )
    for width in (24, 30, 45, 60, 80, 100):
        result = CliRunner().invoke(
            cli, ["sql", query, "--lake", str(lake)], env={"COLUMNS": str(width)}
        )
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        header, row = lines[0].split(), lines[2].split()
        shown = dict(zip(header, row, strict=True))
        expected = {
            "n": "1234567890123.456",
            "big": "-98765432109876543210",
            "small": "7",
            "bn": "123456789012345678901234567",
        }
        for name, value in expected.items():
            if name in shown:
                assert shown[name] == value, (width, lines)
            else:
                assert name in lines[-1] and "not shown" in lines[-1], (width, lines)
        assert shown["text"].endswith("…"), (width, lines)


def test_piped_cells_with_newlines_or_wide_characters_are_whole(lake: Path) -> None:
    """Columns were sized before a newline became `\\n` (two columns) and by len(), not the
    columns a wide character takes, so the cell was cut by one `…` per newline or wide one."""
    query = (
        "SELECT 'first_line' || chr(10) || repeat('x', 100) || 'END' || chr(10) AS s, "
        "'日本語のテキスト' AS wide, 1 AS n"
    )
    result = CliRunner().invoke(cli, ["sql", query, "--lake", str(lake)], env={"COLUMNS": ""})
    assert result.exit_code == 0, result.output
    row = result.stdout.splitlines()[2]
    assert row.split() == ["first_line\\n" + "x" * 100 + "END\\n", "日本語のテキスト", "1"]


@pytest.mark.parametrize("fmt", ["csv", "json", "jsonl"])
def test_a_query_failing_partway_through_streaming_is_a_query_failure(lake: Path, fmt: str) -> None:
    """On the Arrow path CliRunner's stdout (like a redirected one) took, DuckDB's error reached
    pyarrow's reader as an OSError: it was said as `cannot write stdout: ...`."""
    query = "SELECT CASE WHEN i = 50000 THEN error('boom') ELSE i END AS v FROM range(100000) t(i)"
    result = _sql(lake, query, "--format", fmt)
    assert result.exit_code == 1
    assert "Error: query failed: Invalid Input Error: boom" in result.output, result.output[-300:]


def test_unwritable_output_is_a_message(lake: Path, tmp_path: Path) -> None:
    result = _sql(
        lake, QUERY, "--format", "csv", "--output", str(tmp_path / "no" / "such" / "x.csv")
    )
    assert result.exit_code == 2  # (as `report --out` in a dir that does not exist)
    assert "Error: cannot write" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "json"])
def test_every_stdout_gets_the_same_bytes(lake: Path, tmp_path: Path, fmt: str) -> None:
    """A pipe has DuckDB's COPY write stdout itself; a redirected file (`> f`, `>> f`) and a
    Python stream (CliRunner) took an Arrow path that wrote other bytes (every csv string
    quoted, a double 1.0 as `1`, the json array indented otherwise). They now get COPY's bytes
    through a relay, whose FIFO is gone when the process ends."""
    import os
    import subprocess
    import sys

    query = (
        "SELECT trial_name, rewards, n_spans, 1.0::DOUBLE AS one, 'a,b' AS comma "
        "FROM trials ORDER BY trial_name"
    )
    args = [sys.executable, "-m", "wmo_lake.cli", "sql", query, "--lake", str(lake)]
    args += ["--format", fmt]
    temp = tmp_path / "temp"  # where the relay's dir is made
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    piped = subprocess.run(args, capture_output=True, env=env, check=True).stdout
    assert b"1.0" in piped
    redirected = tmp_path / "out"
    redirected.write_bytes(b"before\n")
    with open(redirected, "ab") as stdout:  # `>> out`: what was there stays
        subprocess.run(args, stdout=stdout, env=env, check=True)
    assert redirected.read_bytes() == b"before\n" + piped
    with open(redirected, "wb") as stdout:  # `> out`
        subprocess.run(args, stdout=stdout, env=env, check=True)
    assert redirected.read_bytes() == piped
    captured = _sql(lake, query, "--format", fmt)
    assert captured.exit_code == 0, captured.output
    assert captured.stdout_bytes == piped
    assert list(temp.iterdir()) == []


def test_a_temp_dir_without_fifos_still_gets_the_same_bytes(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A temp dir on a filesystem that cannot hold a FIFO (some FUSE or network mounts) made
    `sql > file` and a Python stream fail at mkfifo. The COPY now writes a plain file there,
    passed on once whole: the same bytes as a pipe's, and nothing left in the temp dir."""
    import os
    import subprocess
    import sys

    query = "SELECT trial_name, 1.0::DOUBLE AS one, 'a,b' AS comma FROM trials ORDER BY 1"
    cli_args = ["sql", query, "--lake", str(lake), "--format", "csv"]
    temp = tmp_path / "temp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    piped = subprocess.run(
        [sys.executable, "-m", "wmo_lake.cli", *cli_args], capture_output=True, env=env, check=True
    ).stdout
    no_fifos = (
        "import errno, os, sys\n"
        "def mkfifo(*args, **kwargs): raise OSError(errno.EPERM, 'Operation not permitted')\n"
        "os.mkfifo = mkfifo\n"
        "from wmo_lake.cli import main\n"
        "sys.argv[0] = 'wmo-lake'\n"
        "main()\n"
    )
    redirected = tmp_path / "out"
    with open(redirected, "wb") as stdout:  # `> out`
        subprocess.run(
            [sys.executable, "-c", no_fifos, *cli_args], stdout=stdout, env=env, check=True
        )
    assert redirected.read_bytes() == piped

    def no_mkfifo(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    import errno

    from wmo_lake.output import stdout_relay

    monkeypatch.setattr(os, "mkfifo", no_mkfifo)
    captured = _sql(lake, query, "--format", "csv")
    assert captured.exit_code == 0, captured.output
    assert captured.stdout_bytes == piped
    assert list(temp.iterdir()) == []  # (the subprocess's relay)
    assert not os.path.exists(os.path.dirname(stdout_relay()))  # (this process's)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_full_stdout_is_said_and_stops_the_query(lake: Path) -> None:
    """A stdout that cannot be written (a full disk) stops the COPY feeding the relay: said as
    `cannot write stdout`, not a hang nor a broken pipe's silence."""
    import subprocess
    import sys

    query = "SELECT range AS i FROM range(100000000)"
    args = [sys.executable, "-m", "wmo_lake.cli", "sql", query, "--lake", str(lake)]
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [*args, "--format", "csv"], stdout=full, stderr=subprocess.PIPE, timeout=120
        )
    assert done.returncode == 1
    assert done.stderr.decode().strip() == "Error: cannot write stdout: No space left on device"


def test_a_python_stdout_that_fails_at_once_is_said_not_waited_on() -> None:
    """The relay gave up on a stream it could not even flush before DuckDB had opened the
    FIFO: DuckDB's open waited for a reader for ever (the command hung, SIGTERM too)."""
    import threading

    import duckdb

    from wmo_lake.output import write_result

    class Full(io.TextIOWrapper):
        def flush(self) -> None:
            raise OSError(28, "No space left on device")

    con = duckdb.connect()
    relation = con.sql("SELECT range AS i FROM range(1000000)")
    raised: list[BaseException] = []

    def write() -> None:
        try:
            write_result(relation, "csv", None, Full(io.BytesIO(), encoding="utf-8"), con=con)
        except BaseException as error:
            raised.append(error)

    worker = threading.Thread(target=write, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the write still waits"
    assert [type(e) for e in raised] == [OSError] and raised[0].errno == 28


def test_ctrl_c_while_a_result_streams_to_a_python_stream_leaves_the_process_running(
    lake: Path,
) -> None:
    """In a process that runs the CLI in-process (CliRunner, a notebook), Ctrl-C while rows
    stream to its stream is the one cut-off line and exit 130: the process itself was ended."""
    import subprocess
    import sys

    script = f"""
import os, signal, sys, threading
from click.testing import CliRunner
from wmo_lake.cli import cli
def ctrl_c_once_rows_flow():  # (the relay's thread runs once the COPY is under way)
    import time
    while not any(t.name == "wmo-lake-stdout-relay" for t in threading.enumerate()):
        time.sleep(0.05)
    time.sleep(1)
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=ctrl_c_once_rows_flow, daemon=True).start()
result = CliRunner().invoke(
    cli, ["sql", "SELECT range AS i FROM range(3000000000)", "--lake", {str(lake)!r},
          "--format", "csv"])
said = (result.exit_code, result.stderr.strip(), result.stdout[:6].replace(chr(10), "|"))
print("exit", *said, file=sys.stderr)  # (the real stdout holds DuckDB's progress bar)
print("the process goes on", file=sys.stderr)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0].startswith("exit 130 interrupted: the rows printed so far"), lines
    assert lines[0].endswith("i|0|1|"), lines
    assert lines[1] == "the process goes on"


def test_sigterm_before_the_result_leaves_no_relay_behind(lake: Path, tmp_path: Path) -> None:
    """The relay's dir was made before the lake was opened, and removed only at exit, which a
    SIGTERM during an earlier statement skips: a dir left in the temp dir each time."""
    import os
    import signal
    import subprocess
    import sys
    import time

    temp = tmp_path / "temp"
    temp.mkdir()
    slow = "CREATE TEMP TABLE x AS SELECT max(hash(i)) AS m FROM range(20000000000) t(i)"
    args = [sys.executable, "-m", "wmo_lake.cli", "sql", f"{slow}; SELECT * FROM x"]
    with open(tmp_path / "out.csv", "wb") as out:
        proc = subprocess.Popen(
            [*args, "--lake", str(lake), "--format", "csv"],
            stdout=out,
            stderr=subprocess.PIPE,
            env={**os.environ, "TMPDIR": str(temp)},
        )
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode != 0
    assert list(temp.iterdir()) == []


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_sigterm_while_the_relay_is_made_leaves_nothing_behind(
    lake: Path, tmp_path: Path, stream: str
) -> None:
    """SIGTERM between the relay's dir being made and the COPY starting (here held there by a
    slow mkfifo) killed the process by the signal, leaving the dir and its FIFO in the temp dir:
    the handler that unwinds through their removal came only with the COPY (and for
    `-o /dev/stderr`, never: stderr's COPY ran as a Python stream's)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    temp = tmp_path / "temp"
    temp.mkdir()
    mark = tmp_path / "in-mkfifo"
    script = (
        "import os, sys, time\n"
        "real = os.mkfifo\n"
        "def mkfifo(path, mode=0o600):\n"
        f"    open({str(mark)!r}, 'w').close()\n"
        "    time.sleep(60)\n"
        "    real(path, mode)\n"
        "os.mkfifo = mkfifo\n"
        "from wmo_lake.cli import main\n"
        "sys.argv[0] = 'wmo-lake'\n"
        "main()\n"
    )
    args = [sys.executable, "-c", script, "sql", "SELECT 1 AS a", "--lake", str(lake)]
    args += ["--format", "csv", *(["-o", "/dev/stderr"] if stream == "stderr" else [])]
    with open(tmp_path / "out.csv", "wb") as out:
        proc = subprocess.Popen(
            args,
            stdout=out if stream == "stdout" else subprocess.DEVNULL,
            stderr=out if stream == "stderr" else subprocess.PIPE,
            env={**os.environ, "TMPDIR": str(temp)},
        )
        deadline = time.monotonic() + 60
        while not mark.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.name.startswith("wmo-lake-") for p in temp.iterdir()] == [True]
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 143
    assert list(temp.iterdir()) == []


def test_csv_to_stdout_has_duckdbs_text_for_every_type(lake: Path, tmp_path: Path) -> None:
    """CliRunner's stdout (like a redirected one) took an Arrow path: it wrote no INTERVAL,
    BIT or VARINT (a traceback), a blob's raw bytes and a TIMETZ without its offset. Its cells
    are the text DuckDB's COPY writes to a file."""
    query = (
        "SELECT INTERVAL 3 DAY + INTERVAL 6 SECOND AS i, '101'::BIT AS b, "
        "123456789012345678901234567890::VARINT AS v, TIMETZ '01:02:03+01' AS t, "
        "'x\\x00'::BLOB AS bl, TIMESTAMP '2024-01-02 03:04:05.5' AS ts, 7 AS n, true AS yes"
    )
    streamed = _sql(lake, query, "--format", "csv")
    assert streamed.exit_code == 0, streamed.output
    out = tmp_path / "copied.csv"
    assert _sql(lake, query, "-o", str(out)).exit_code == 0
    copied = list(csv.reader(out.open(newline="")))
    assert copied[1][:3] == ["3 days 00:00:06", "101", "123456789012345678901234567890"]
    assert list(csv.reader(io.StringIO(streamed.stdout))) == copied


def test_a_uhugeint_past_2_to_the_127_keeps_its_value_in_csv(lake: Path, tmp_path: Path) -> None:
    """Arrow's CSV writer printed a UHUGEINT's 128 bits as signed (its maximum as -1); both
    paths now write DuckDB's own digits."""
    query = (
        "SELECT 340282366920938463463374607431768211455::UHUGEINT AS top, "
        "170141183460469231731687303715884105728::UHUGEINT AS half, 7::UHUGEINT AS small"
    )
    expected = [
        "340282366920938463463374607431768211455",
        "170141183460469231731687303715884105728",
    ]
    streamed = _sql(lake, query, "--format", "csv")
    assert streamed.exit_code == 0, streamed.output
    assert list(csv.reader(io.StringIO(streamed.stdout)))[1] == [*expected, "7"]
    out = tmp_path / "copied.csv"
    assert _sql(lake, query, "-o", str(out)).exit_code == 0
    assert list(csv.reader(out.open(newline="")))[1] == [*expected, "7"]


def test_control_characters_in_a_table_cell_are_drawn_as_escapes(lake: Path) -> None:
    """An agent's terminal output holds carriage returns and ANSI colours: drawn raw they would
    rewrite the terminal (or were dropped: 'ab\\rcd' showed 'abcd'), and U+2028 or \\x1e split
    the row in two. Each is now its escape, in the cell, on the row's one line."""
    query = (
        "SELECT 'ab' || chr(13) || 'cd' AS cr, chr(27) || '[31mred' AS ansi, "
        "'x' || chr(8232) || 'y' || chr(30) || 'z' AS splits, 'a' || chr(9) || 'b' AS tab, "
        "'é ☃' AS plain"
    )
    result = _sql(lake, query)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert len(lines) == 3, lines  # header, rule, the one row
    assert lines[2].split() == ["ab\\rcd", "\\x1b[31mred", "x\\u2028y\\x1ez", "a\\tb", "é", "☃"]
    assert "\x1b" not in result.stdout and "\r" not in result.stdout


def _plain_json(value: object) -> object:
    """A fetched DuckDB value as JSON would hold it (maps and structs as objects)."""
    if isinstance(value, dict):
        if set(value) == {"key", "value"} and isinstance(value["key"], list):
            return {
                str(k): _plain_json(v) for k, v in zip(value["key"], value["value"], strict=True)
            }
        return {str(k): _plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_json(v) for v in value]
    return value


def test_csv_cells_are_duckdbs_own_text_and_json_for_nested(lake: Path, tmp_path: Path) -> None:
    """Every table and view to CSV through DuckDB's COPY (a file --output: the query's own text
    is copied, bound once): a scalar column's cells are DuckDB's own CSV text for it, a nested
    column's the JSON of its values."""
    from wmo_lake.lake import connect, view_sources
    from wmo_lake.tables import TABLES

    names = [*TABLES, *(name for name, _ in view_sources())]
    written: dict[str, list[list[str]]] = {}
    for name in names:
        query = f"SELECT * FROM {name}"
        out = tmp_path / f"{name}.csv"
        result = _sql(lake, query, "--format", "csv", "--output", str(out))
        assert result.exit_code == 0, (name, result.output)
        written[name] = list(csv.reader(out.open(newline="")))
    # (opened after: `sql` confines the database instance a connection in this process shares)
    con = connect(lake)
    nested_seen = 0
    for name, ours in written.items():
        relation = con.sql(f"SELECT * FROM {name} ORDER BY ALL")
        native_file = tmp_path / f"{name}.native.csv"
        con.execute(f"COPY ({relation.sql_query()}) TO '{native_file}' (FORMAT csv, HEADER)")
        native = list(csv.reader(native_file.open(newline="")))
        values = relation.fetchall()
        assert ours[0] == native[0] == relation.columns, name
        ours_sorted = [ours[0], *sorted(ours[1:])]
        native_sorted = [native[0], *sorted(native[1:])]
        assert len(ours_sorted) == len(native_sorted), name
        nested = [i for i, kind in enumerate(relation.types) if _is_nested(str(kind))]
        for i, column in enumerate(relation.columns):
            if i in nested:
                nested_seen += 1
                ours_values = sorted(
                    (json.dumps(json.loads(row[i]) if row[i] else None, sort_keys=True))
                    for row in ours[1:]
                )
                fetched = sorted(
                    json.dumps(_plain_json(row[i]), sort_keys=True, default=str) for row in values
                )
                assert ours_values == fetched, (name, column)
            else:
                assert sorted(r[i] for r in ours[1:]) == sorted(r[i] for r in native[1:]), (
                    name,
                    column,
                )
    assert nested_seen > 10  # lists, maps and structs were among the columns


def _is_nested(kind: str) -> bool:
    return kind.endswith("]") or kind.split("(")[0] in {"STRUCT", "MAP", "UNION"}


def test_copied_select_keeps_its_order_limit_and_trailing_comment(
    lake: Path, tmp_path: Path
) -> None:
    """A SELECT copied by its own text (a file --output) is wrapped as a subquery: its ORDER BY
    holds under --limit, and a trailing -- comment cannot swallow the wrapper's parenthesis."""
    query = "SELECT trial_name FROM trials ORDER BY trial_name DESC -- newest first"
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"limited.{fmt}"
        result = _sql(lake, query, "--format", fmt, "--output", str(out), "--limit", "1")
        assert result.exit_code == 0, result.output
        if fmt == "csv":
            assert list(csv.reader(out.open(newline=""))) == [["trial_name"], ["b__1"]]
        else:
            assert pq.read_table(out).column("trial_name").to_pylist() == ["b__1"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("select 'a;b' as s", [("select 'a;b' as s", "select")]),
        ('select "a;b", `c;d` from t /* ; */', [('select "a;b", `c;d` from t /* ; */', "select")]),
        ("-- n\nSELECT count(*) FROM trials\n", [("-- n\nSELECT count(*) FROM trials", "SELECT")]),
        (
            "SET VAR x = 1; SELECT '日本;' AS j; -- end\n",
            [("SET VAR x = 1", "SET"), ("SELECT '日本;' AS j", "SELECT")],
        ),
        (" ;; -- only a comment", []),
    ],
)
def test_spark_statements_are_split_by_duckdbs_tokenizer(
    query: str, expected: list[tuple[str, str]]
) -> None:
    """`--engine spark` split at every `;` (one in a string too) and took a leading comment's
    `--` for the statement's first word. (Without Spark: the split comes before it starts.)"""
    from wmo_lake.commands.sql import spark_statements

    assert spark_statements(query) == expected


def test_spark_refuses_a_write_after_a_comment_by_its_name(lake: Path) -> None:
    result = _sql(lake, "--engine", "spark", "-", input="-- tidy up\nDROP VIEW cells;")
    assert result.exit_code == 2 and "and DROP writes" in result.output, result.output


def test_spark_on_a_missing_lake_is_said_before_spark_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It was said only after Spark's ~5 s of start-up and its log lines; now as the DuckDB
    engine says it, with no session started."""

    def started(*args: object) -> None:
        raise AssertionError("a Spark session was started for a lake that does not exist")

    monkeypatch.setattr("wmo_lake.spark.local_session", started)
    missing = tmp_path / "nolake"
    on_spark = _sql(missing, "--engine", "spark", "SELECT 1")
    on_duckdb = _sql(missing, "SELECT 1")
    assert on_spark.exit_code == on_duckdb.exit_code == 1
    assert on_spark.output == on_duckdb.output
    assert f"no lake at {missing} (no manifest.json): run `wmo-lake ingest" in on_spark.output


def test_two_columns_of_one_name_keep_their_own_values_in_every_format(
    lake: Path, tmp_path: Path
) -> None:
    """`a.x, b.x` (a self-join): each format projects its columns by name, and a name read twice
    was the first column twice (the second trial's n read as the first's). Every format now
    gives DuckDB's own distinct names, as its COPY does: x, x_1."""
    query = (
        "SELECT a.trial_name, a.trial_name AS other, b.trial_name AS other FROM trials a, trials b"
        " WHERE a.trial_name = 'a__1' AND b.trial_name = 'b__1'"
    )
    expected = {"trial_name": "a__1", "other": "a__1", "other_1": "b__1"}
    table = _sql(lake, query).stdout.splitlines()
    assert table[0].split() == list(expected) and table[2].split() == list(expected.values())
    assert json.loads(_sql(lake, query, "--format", "json").stdout) == [expected]
    assert json.loads(_sql(lake, query, "--format", "jsonl").stdout) == expected
    rows = list(csv.DictReader(io.StringIO(_sql(lake, query, "--format", "csv").stdout)))
    assert rows == [expected]
    for name in ("out.parquet", "out.csv"):  # (to a file: DuckDB's COPY, or Arrow's writer)
        result = _sql(lake, query, "--output", str(tmp_path / name))
        assert result.exit_code == 0, result.output
    assert pq.read_table(tmp_path / "out.parquet").to_pylist() == [expected]
    assert list(csv.DictReader((tmp_path / "out.csv").open())) == [expected]


def test_a_segment_deleted_by_hand_is_named_not_called_a_write(lake: Path) -> None:
    """A heavy table's Parquet file gone from the lake: DuckDB globs for it outside the allowed
    paths (a PermissionException), which is no write the user asked for."""
    (segment,) = (lake / "tables" / "spans").rglob("*.parquet")
    segment.unlink()
    result = _sql(lake, "SELECT count(*) FROM spans")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "read-only" not in result.output
    rel = segment.relative_to(lake).as_posix()
    assert f"is missing 1 of its Parquet files ({rel})" in result.output
    assert "ingest the runs again into a new lake directory" in result.output


def test_a_query_that_is_not_utf8_is_a_usage_error(lake: Path) -> None:
    """Bytes no UTF-8 decodes: on stdin (a Latin-1 file), or in the argument, which Python
    keeps as lone surrogates (b'\\xff' -> '\\udcff') that DuckDB's binding cannot take."""
    piped = CliRunner().invoke(cli, ["sql", "-", "--lake", str(lake)], input=b"SELECT 1 \xff")
    argued = _sql(lake, "SELECT 1 \udcff")
    for result in (piped, argued):
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert "is not UTF-8 text" in result.output
    assert "(character 9)" in argued.output  # 'SELECT 1 ' is 9 characters


@pytest.mark.parametrize(
    "args", [["--format", "csv"], ["--format", "jsonl"], ["--format", "csv", "-o", "/dev/stdout"]]
)
def test_a_reader_that_stops_early_ends_the_command_quietly(lake: Path, args: list[str]) -> None:
    """`wmo-lake sql ... | head -1`: DuckDB's COPY to the closed pipe failed, and the command
    printed `Error: query failed: IO Error: ... Broken pipe`. It ends as click ends any command
    whose stdout closed (as `stats` does): exit 1, nothing on stderr."""
    import subprocess
    import sys

    command = [sys.executable, "-m", "wmo_lake.cli", "sql", "--lake", str(lake), *args]
    query = "SELECT * FROM range(3000000)"
    with subprocess.Popen([*command, query], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as run:
        assert run.stdout is not None and run.stderr is not None
        assert run.stdout.read(10)
        run.stdout.close()
        errors = run.stderr.read().decode()
        assert run.wait(timeout=60) == 1
    assert errors == ""


def test_a_temp_table_lives_in_the_commands_memory(lake: Path) -> None:
    """TEMP tables and views are the session's own: allowed, nothing is kept (the README says
    so); a table of the lake's catalog is refused."""
    made = _sql(lake, "CREATE TEMP TABLE t(a INT); INSERT INTO t VALUES (7); SELECT a FROM t")
    assert made.exit_code == 0 and made.stdout.split() == ["a", "─", "7"], made.output
    assert _sql(lake, "SELECT * FROM t").exit_code == 2  # (gone with the command: no such table)
    assert _sql(lake, "CREATE TABLE t(a INT)").exit_code == 2


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_a_terminal_that_is_not_utf8_gets_escapes_not_a_traceback(
    lake: Path, encoding: str
) -> None:
    """A Latin-1 locale (or PYTHONIOENCODING=ascii) ended `sql` and `stats` in a
    UnicodeEncodeError after the table's first line: the rules are now ASCII there, and a
    character the terminal cannot show is an escape. Data formats are UTF-8 bytes as before."""
    import os
    import subprocess
    import sys

    def run(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [sys.executable, "-m", "wmo_lake.cli", *args, "--lake", str(lake)],
            env={**os.environ, "PYTHONIOENCODING": encoding},
            capture_output=True,
        )

    table = run("sql", "SELECT 'h\u00e9llo \u2713' AS x")
    assert table.returncode == 0 and b"Traceback" not in table.stderr, table.stderr
    shown = table.stdout.decode(encoding)
    assert set(shown.splitlines()[1].strip()) == {"-"}  # the rule, in ASCII
    assert ("h\\xe9llo" if encoding == "ascii" else "h\u00e9llo") + " \\u2713" in shown
    stats = run("stats")
    assert stats.returncode == 0 and b"Traceback" not in stats.stderr, stats.stderr
    csv = run("sql", "SELECT 'h\u00e9llo \u2713' AS x", "--format", "csv")
    assert csv.stdout.decode("utf-8") == "x\nh\u00e9llo \u2713\n"


@pytest.mark.parametrize("where", [[], ["--format", "csv", "-o", "x.csv"], ["-o", "x.parquet"]])
def test_an_errors_line_is_counted_in_the_sql_as_given(
    lake: Path, tmp_path: Path, where: list[str]
) -> None:
    """A one-line query's error said `LINE 3` (or 2): the line in the query as wmo-lake wrapped
    it (a LIMIT, csv cells, a COPY)."""
    out = [tmp_path / arg if arg.startswith("x.") else arg for arg in where]
    one_line = _sql(lake, "SELECT CAST(trial_name AS INT) FROM trials", *map(str, out))
    assert one_line.exit_code == 1
    assert "\nLINE 1: SELECT CAST(trial_name AS INT) FROM trials" in one_line.output
    script = "SET VARIABLE x = 1;\nSELECT batch,\n  CAST(trial_name AS INT) AS n\nFROM trials"
    third = _sql(lake, script, *map(str, out))
    assert "\nLINE 3:   CAST(trial_name AS INT) AS n" in third.output, third.output


def test_an_errors_context_line_that_is_not_the_users_sql_is_left_out() -> None:
    """An error DuckDB raised in the text wmo-lake put around the query (a COPY of csv cells)
    showed that text, which the user never wrote, as the error's place."""
    from wmo_lake.commands.sql import _numbered_as_given

    message = (
        "Invalid Input Error: bad file\n\nLINE 1: COPY (SELECT CASE WHEN typeof(COLUMNS(*)) ...\n"
        "              ^^^^"
    )
    assert _numbered_as_given(message, "SELECT *\nFROM spans") == "Invalid Input Error: bad file"
    twice = "Error: x\n\nLINE 3: FROM t\n     ^"
    assert _numbered_as_given(twice, "SELECT 1\nFROM t;\nSELECT 2\nFROM t") == twice


def _bar_setting(lake: Path, fmt: str, *, terminal: bool) -> str:
    """What `enable_progress_bar` is in `wmo-lake sql`'s connection, with stdout a pipe or a
    terminal (a pty): DuckDB draws its bar on fd 1 once a query has run 2 s. Run as a process
    that imported `main` (a harness, a notebook), whose DuckDB has it on by default."""
    import os
    import subprocess
    import sys

    query = "SELECT current_setting('enable_progress_bar')::VARCHAR AS bar"
    args = [sys.executable, "-c", "from wmo_lake.cli import main; main()"]
    args += ["sql", query, "--lake", str(lake)]
    args += ["--format", fmt]
    if not terminal:
        return subprocess.run(args, capture_output=True, check=True, text=True).stdout
    leader, follower = os.openpty()
    try:
        subprocess.run(args, stdout=follower, check=True, timeout=60)
        return os.read(leader, 1 << 16).decode().replace("\r\n", "\n")
    finally:
        os.close(leader)
        os.close(follower)


def test_duckdbs_progress_bar_never_lands_among_the_rows(lake: Path) -> None:
    """A query running past 2 s had DuckDB draw `\\r 17% ...` frames on fd 1: inside the
    rows of a `> file` or a pipe (and among csv rows on a terminal). Off wherever the bar would
    be written among data; kept for a table drawn on a terminal, which prints after the query."""
    assert _bar_setting(lake, "csv", terminal=False) == "bar\nfalse\n"
    assert _bar_setting(lake, "csv", terminal=True) == "bar\nfalse\n"
    assert "true" in _bar_setting(lake, "table", terminal=True)


def test_output_to_this_processs_stderr_appends_as_stderr(lake: Path, tmp_path: Path) -> None:
    """`-o /dev/stderr 2>> log` renamed a new file over the log: what was in it was lost, and
    every later message went to a file no name reached. `-o /dev/stdout` already wrote as stdout."""
    import subprocess
    import sys

    log = tmp_path / "log"
    log.write_text("previous\n")
    args = [sys.executable, "-m", "wmo_lake.cli", "sql", "SELECT 1 AS a", "--lake", str(lake)]
    with open(log, "a") as stderr:
        subprocess.run(
            [*args, "-o", "/dev/stderr", "--format", "csv"], stderr=stderr, check=True, timeout=60
        )
    assert log.read_text() == "previous\na\n1\n"


def test_a_confined_files_message_counts_lines_in_the_sql_as_given(lake: Path) -> None:
    """`FROM '/etc/passwd'` in a one-line query was said at `LINE 3`, wmo-lake's wrapper's."""
    result = _sql(lake, "SELECT * FROM '/etc/passwd'", "--format", "csv")
    assert result.exit_code == 2
    assert "LINE 1: SELECT * FROM '/etc/passwd'" in result.output, result.output
    assert "LINE 3" not in result.output


def test_a_stop_once_the_result_is_written_says_so(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C after the result was complete (here: as it was marked so) said "nothing was
    written or changed" beside a whole file or a whole stdout."""
    from wmo_lake.commands import sql
    from wmo_lake.stopping import finished

    def then_ctrl_c(what: str) -> None:
        finished(what)
        raise KeyboardInterrupt

    monkeypatch.setattr(sql, "finished", then_ctrl_c)
    out = tmp_path / "x.csv"
    result = _sql(lake, "SELECT 1 AS a", "-o", str(out))
    assert result.exit_code == 130
    assert result.output.strip() == (
        "interrupted after the command had finished: the result is written in full"
    )
    assert out.read_text() == "a\n1\n"


def test_a_stdout_pipe_whose_reader_has_gone_ends_the_command(lake: Path, tmp_path: Path) -> None:
    """DuckDB opened /dev/stdout afresh, and the open of a pipe with no reader waits for one:
    the command hung for ever at full CPU, where a plain write fails at once (EPIPE). It now
    ends as `| head` does: exit 1, no traceback."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "p"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    writer = os.open(fifo, os.O_WRONLY)
    os.close(reader)  # (the reader has gone: the write end stays open)
    try:
        args = [sys.executable, "-m", "wmo_lake.cli", "sql", "SELECT 1 AS a", "--lake", str(lake)]
        done = subprocess.run(
            [*args, "--format", "csv"], stdout=writer, stderr=subprocess.PIPE, timeout=60
        )
    finally:
        os.close(writer)
    assert done.returncode == 1
    assert b"Traceback" not in done.stderr


def test_a_relay_the_temp_dir_has_no_room_for_names_the_temp_dir(
    lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A temp dir with no free inode said `cannot write stdout: No space left on device`, while
    stdout's own disk was fine."""
    import errno
    import os
    import tempfile

    real_mkdir = os.mkdir

    def mkdir(path: str, mode: int = 0o777) -> None:
        if os.path.basename(path).startswith("wmo-lake-"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_mkdir(path, mode)

    monkeypatch.setattr(os, "mkdir", mkdir)
    result = _sql(lake, "SELECT 1 AS a", "--format", "csv")
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: cannot write stdout: No space left on device in the temp dir "
        f"{tempfile.gettempdir()}, where the relay to stdout is made (set TMPDIR to another)"
    )


def test_ctrl_c_while_the_no_fifo_fallback_passes_its_file_on_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With no FIFO in the temp dir the COPY's file was passed on by a thread: Ctrl-C left that
    thread writing into a notebook's output, and the real stdout's said "nothing was written".
    It is passed on here, on the calling thread: Ctrl-C stops it, as a cut-off result."""
    import errno
    import os
    import threading

    import duckdb

    from wmo_lake.output import write_result
    from wmo_lake.stopping import OutputCutOff

    def no_mkfifo(*args: object, **kwargs: object) -> None:
        raise OSError(errno.EPERM, "Operation not permitted")

    class CtrlCOnTheThirdWrite(io.StringIO):
        writes = 0

        def write(self, text: str) -> int:
            self.writes += 1
            if self.writes == 3:
                raise KeyboardInterrupt
            return super().write(text)

    monkeypatch.setattr(os, "mkfifo", no_mkfifo)
    con = duckdb.connect()
    stream = CtrlCOnTheThirdWrite()
    with pytest.raises(OutputCutOff):
        relation = con.sql("SELECT range AS i FROM range(1000000)")
        write_result(relation, "csv", None, stream, con=con)
    assert stream.getvalue().startswith("i\n0\n1\n")
    written = len(stream.getvalue())
    assert not any(t.name == "wmo-lake-stdout-relay" for t in threading.enumerate())
    assert len(stream.getvalue()) == written


def test_columns_whose_names_differ_only_in_case_keep_their_own_values(
    lake: Path, tmp_path: Path
) -> None:
    """DuckDB's names are case-insensitive: a projection of `N` and `n` by name read the first
    column twice, so table, json and jsonl printed N's value under n's name. Every format now
    has DuckDB's own distinct names (N, n_1), each with its own values, as two columns of one
    name have."""
    query = "SELECT 13 AS N, 6 AS n, 7::DOUBLE AS x, 8::DOUBLE AS X"
    expected = {"N": 13, "n_1": 6, "x": 7.0, "X_1": 8.0}
    for fmt in ("json", "jsonl"):
        text = _sql(lake, query, "--format", fmt).stdout
        (row,) = json.loads(text) if fmt == "json" else [json.loads(text)]
        assert row == expected, fmt
    (header, values) = list(csv.reader(io.StringIO(_sql(lake, query, "--format", "csv").stdout)))
    assert dict(zip(header, map(float, values), strict=True)) == expected
    table = _sql(lake, query, "--format", "table").stdout.splitlines()
    assert table[0].split() == list(expected) and table[2].split() == [
        "13",
        "6",
        "7.0",
        "8.0",
    ]
    out = tmp_path / "case.parquet"
    assert _sql(lake, query, "--output", str(out)).exit_code == 0
    assert pq.read_table(out).to_pylist() == [expected]


def test_the_api_keeps_columns_whose_names_differ_only_in_case(lake: Path) -> None:
    import wmo_lake as wl

    frame = wl.query(lake, "SELECT 5::UHUGEINT AS U, 7::UHUGEINT AS u, 9 AS v, 3 AS V")
    assert [int(value) for value in frame.row(0)] == [5, 7, 9, 3]


def test_a_map_with_a_key_that_is_no_finite_float_is_json(lake: Path) -> None:
    """json made a non-finite float NULL everywhere, a map's key too, and DuckDB refuses a NULL
    key ("Map keys can not be NULL"): histogram() of logprobs holding -inf failed. A key is
    JSON text, '-inf' too; a value is still null."""
    query = "SELECT MAP {'-inf'::DOUBLE: 1, -0.5: 2} AS h, MAP {1: 'nan'::DOUBLE} AS v"
    for fmt in ("json", "jsonl"):
        result = _sql(lake, query, "--format", fmt)
        assert result.exit_code == 0, result.output
        (row,) = json.loads(result.stdout) if fmt == "json" else [json.loads(result.stdout)]
        assert row == {"h": {"-inf": 1, "-0.5": 2}, "v": {"1": None}}, fmt
