"""Views are created in a topological order of what each one reads, parsed by DuckDB: a column
that shares a view's name is not a dependency, a CTE is not one, a subquery's table is one, and a
cycle is an error naming the views."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from wmo_lake import lake
from wmo_lake.lake import LakeError, view_dependencies, view_sources


def _deps(sql: str) -> set[str]:
    with duckdb.connect() as con:
        return view_dependencies(sql, con)


def test_a_column_named_like_a_view_is_not_a_dependency() -> None:
    sql = (lake.sql_dir() / "datum_stats.sql").read_text()
    assert "datums" in sql  # its column: the regex of old linked it to the `datums` view
    assert _deps(sql) == {"cells", "datum_episodes"}


def test_ctes_are_not_dependencies_and_subqueries_are() -> None:
    sql = """-- x: a comment naming spans_full
    CREATE OR REPLACE VIEW x AS
    WITH cells AS (SELECT 1 AS trials FROM trials)
    SELECT *, (SELECT max(n) FROM spans) AS m FROM cells JOIN jobs USING (batch)
    WHERE batch IN (SELECT batch FROM problems)"""
    assert _deps(sql) == {"trials", "spans", "jobs", "problems"}


def test_every_view_follows_the_views_it_reads() -> None:
    ordered = [name for name, _ in view_sources()]
    position = {name: i for i, name in enumerate(ordered)}
    with duckdb.connect() as con:
        for name, sql in view_sources():
            for dependency in view_dependencies(sql, con) & set(position):
                assert position[dependency] < position[name], (dependency, name)
    assert position["datum_episodes"] < position["datum_stats"]


def _views(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **views: str) -> None:
    for name, query in views.items():
        (tmp_path / f"{name}.sql").write_text(f"CREATE OR REPLACE VIEW {name} AS {query}\n")
    monkeypatch.setattr(lake, "sql_dir", lambda: tmp_path)


def test_order_comes_from_references_not_names(tmp_path: Path, monkeypatch) -> None:
    _views(
        tmp_path,
        monkeypatch,
        a_last="SELECT * FROM m_middle",
        m_middle="SELECT * FROM z_first",
        z_first="SELECT 1 AS a_last",
    )
    assert [name for name, _ in view_sources()] == ["z_first", "m_middle", "a_last"]


def test_a_cycle_is_an_error_naming_the_views(tmp_path: Path, monkeypatch) -> None:
    _views(tmp_path, monkeypatch, p="SELECT * FROM q", q="SELECT * FROM p", r="SELECT 1")
    with pytest.raises(LakeError, match=r"depend on each other in a cycle") as error:
        view_sources()
    assert "'p'" in str(error.value) and "'q'" in str(error.value)
