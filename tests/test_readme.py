"""The README's reference stays true: every table column, view and setting is documented."""

from __future__ import annotations

import re
from pathlib import Path

from wmo_lake.columns import SPECS, readme_heading, readme_table, rewrite_readme
from wmo_lake.lake import view_sources
from wmo_lake.settings import BY_VARIABLE as SETTINGS
from wmo_lake.tables import TABLES

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = README.index(title)
    following = README.find("\n## ", start + 1)
    return README[start : following if following > 0 else None]


def test_every_table_and_column_is_documented() -> None:
    tables = _section("## Tables")
    words = set(re.findall(r"[a-z_]+", tables))
    for table in TABLES.values():
        assert f"`{table.name}`" in tables, table.name
        missing = [f.name for f in table.schema if f.name not in words]
        assert not missing, f"{table.name}: {missing} not in the README's Tables section"


def test_the_column_tables_are_the_column_specs() -> None:
    """Each table's heading and column table are what wmo_lake/columns.py declares; when this
    fails, `python -m wmo_lake.columns README.md` rewrites them."""
    tables = _section("## Tables")
    for spec in SPECS.values():
        assert f"{readme_heading(spec)}\n" in tables, spec.name
        assert readme_table(spec) in tables, spec.name
    assert rewrite_readme(README) == README


def test_every_view_and_setting_is_documented() -> None:
    views = _section("## Views")
    for name, _ in view_sources():
        assert f"`{name}`" in views, name
    for variable in SETTINGS:
        assert f"`{variable}`" in views, variable


def test_the_two_commands_come_first() -> None:
    first_block = README.split("```sh", 1)[1].split("```", 1)[0]
    assert "make demo" in first_block and "make test" in first_block
