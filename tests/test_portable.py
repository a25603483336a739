"""The portable-SQL lint (wmo_lake.portable): every view passes it, it rejects each construct that
does not survive transpiling to Spark with the portable form in its message, and every view
transpiles with sqlglot without an unsupported construct."""

from __future__ import annotations

from pathlib import Path

import pytest

from wmo_lake.lake import sql_dir, view_sources
from wmo_lake.portable import lint_files, lint_text, main

# (a non-portable snippet, the rule it breaks, a piece of the portable form the message gives)
NON_PORTABLE = [
    ("SELECT list(x ORDER BY k) FROM t", "ordered_aggregate", "list_sort"),
    ("SELECT string_agg(x, ',' ORDER BY k) FROM t", "ordered_aggregate", "array_to_string"),
    ("SELECT map_from_entries(list((k, n) ORDER BY k)) FROM t", "ordered_aggregate", "list_sort"),
    ("SELECT list_reduce(l, lambda a, x: a + x, 0.0) FROM t", "list_reduce", "exact float sum"),
    ("SELECT x::HUGEINT FROM t", "hugeint", "DECIMAL(38, 0)"),
    ("SELECT CAST(x AS hugeint) + 1 FROM t", "hugeint", "DECIMAL(38, 0)"),
    ("SELECT coalesce(m, MAP {}) FROM t", "map_literal", "CAST(map() AS MAP(K, V))"),
    ("SELECT len(l) FROM t", "len", "array_length"),
    ("SELECT length([1, 2, 3]) FROM t", "len", "array_length"),
    ("SELECT length(list_filter(l, lambda x: x > 0)) FROM t", "len", "array_length"),
    ("SELECT length(array_value(1, 2)) FROM t", "len", "array_length"),
    ("SELECT list_resize([]::DOUBLE[], n, 0.0) FROM t", "list_resize", "list_transform(range(n)"),
    ("SELECT list_slice(l, 1, n) FROM t", "list_slice", "array_slice(x, 1, n)"),
    ("SELECT array_slice(l, 2, n) FROM t", "slice_start", "array_slice(x, 1, n)"),
    ("SELECT array_slice(l, k + 1, n) FROM t", "slice_start", "array_slice(x, 1, n)"),
    ("SELECT l[2:3] FROM t", "slice_syntax", "array_slice(x, 1, n)"),
    ("SELECT any_value(s) FILTER (WHERE i = 0) FROM t", "any_value_filter", "max(CASE WHEN"),
    ("SELECT to_json(name) FROM t", "to_json_scalar", "to_json({'n': x})"),
    ("SELECT epoch(b) - a FROM t", "epoch", "date_diff('microsecond'"),
    ("SELECT extract(epoch FROM b) FROM t", "epoch", "date_diff('microsecond'"),
    ("SELECT date_part('epoch', b) FROM t", "epoch", "date_diff('microsecond'"),
    ("SELECT isfinite(x) FROM t", "isfinite", "BETWEEN"),
    ("SELECT list_sort(l, 'DESC') FROM t", "list_sort_order", "ascending"),
    (
        "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r",
        "recursive_cte",
        "window",
    ),
]

PORTABLE = [
    "SELECT list_transform(list_sort(list({'k': k, 'v': x})), lambda e: e.v) FROM t",
    "SELECT list(x) OVER (PARTITION BY p ORDER BY k ROWS UNBOUNDED PRECEDING) FROM t",
    "SELECT array_slice(list_concat(a, b), 1, n) FROM t",
    "SELECT array_length(l), length(s) FROM t",
    # length() of a string a list function returns is a string's length on Spark too
    "SELECT length(array_to_string(l, ',')), length(list_extract(l, 1)) FROM t",
    "SELECT to_json({'n': name}) FROM t",
    "SELECT max(x) FILTER (WHERE y) FROM t",
    "SELECT '{\"a\": [1:2]}' AS text_with_brackets FROM t",
    "-- list(x ORDER BY k) in a comment\nSELECT 1",
    "SELECT row_number() OVER (PARTITION BY a ORDER BY b) FROM t",
]


def test_every_view_is_portable() -> None:
    findings = lint_files(sorted(sql_dir().glob("*.sql")))
    assert not findings, "\n".join(map(str, findings))


@pytest.mark.parametrize(("sql", "rule", "portable"), NON_PORTABLE)
def test_lint_rejects_a_non_portable_construct(sql: str, rule: str, portable: str) -> None:
    findings = lint_text(sql, "view.sql")
    assert [f.rule.name for f in findings] == [rule]
    message = str(findings[0])
    assert message.startswith(f"view.sql:1: {rule}: ")
    assert "Portable form: " in message and portable in message.split("Portable form: ")[1]


@pytest.mark.parametrize("sql", PORTABLE)
def test_lint_accepts_the_portable_forms(sql: str) -> None:
    assert lint_text(sql) == []


def test_lint_reports_the_line(tmp_path: Path) -> None:
    view = tmp_path / "v.sql"
    view.write_text("-- a view\nCREATE VIEW v AS\nSELECT\n    len(l) AS n\nFROM t\n")
    (finding,) = lint_files([view])
    assert (finding.path, finding.line) == (str(view), 4)


def test_command_exits_1_on_a_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.sql"
    bad.write_text("CREATE VIEW v AS SELECT x::HUGEINT AS x FROM t\n")
    good = tmp_path / "good.sql"
    good.write_text("CREATE VIEW v AS SELECT CAST(x AS DECIMAL(38, 0)) AS x FROM t\n")
    assert main([str(good)]) == 0
    assert main([str(bad)]) == 1
    out = capsys.readouterr()
    assert f"{bad}:1: hugeint" in out.out and "1 non-portable construct(s)" in out.err


@pytest.mark.parametrize("name", [name for name, _ in view_sources()])
def test_every_view_transpiles_without_an_unsupported_construct(name: str) -> None:
    sqlglot = pytest.importorskip("sqlglot")
    from wmo_lake.spark import transpile

    sql = dict(view_sources())[name]
    sqlglot.transpile(sql, read="duckdb", write="spark", unsupported_level="RAISE")
    spark_sql = transpile(sql)
    assert spark_sql.startswith(f"CREATE OR REPLACE TEMPORARY VIEW {name} AS")
    assert "getvariable" not in spark_sql.lower()
