"""The SQL linter's configuration (.sqlfluff, run over sql/ by `make lint`) still catches real
problems: the rules it excludes are house-style layout, not these."""

from __future__ import annotations

from pathlib import Path

import pytest

sqlfluff_core = pytest.importorskip("sqlfluff.core")  # the `dev` extra, installed by make

ROOT = Path(__file__).resolve().parent.parent


def _codes(sql: str) -> set[str]:
    config = sqlfluff_core.FluffConfig.from_path(str(ROOT))
    linted = sqlfluff_core.Linter(config=config).lint_string(sql)
    return {v.rule_code() for v in linted.get_violations()}


def test_the_config_is_the_repos() -> None:
    config = sqlfluff_core.FluffConfig.from_path(str(ROOT))
    assert config.get("dialect") == "duckdb"


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        # a CTE nothing reads
        (
            "CREATE VIEW v AS\nWITH unused AS (SELECT 1 AS x)\nSELECT t.a FROM trials AS t;\n",
            "ST03",
        ),
        # a joined table nothing reads
        (
            "CREATE VIEW v AS\nSELECT t.a\nFROM trials AS t\nLEFT JOIN jobs AS j ON true;\n",
            "ST11",
        ),
        # DISTINCT that GROUP BY already implies
        ("CREATE VIEW v AS\nSELECT DISTINCT a\nFROM t\nGROUP BY a;\n", "AM01"),
        # two columns with one name
        ("CREATE VIEW v AS\nSELECT\n    a AS x,\n    b AS x\nFROM t;\n", "AL08"),
        # two tables with one alias
        ("CREATE VIEW v AS\nSELECT t.a\nFROM t1 AS t\nJOIN t2 AS t ON true;\n", "AL04"),
        # = NULL, which is never true
        ("CREATE VIEW v AS\nSELECT a\nFROM t\nWHERE a = NULL;\n", "CV05"),
        # a line over 100 characters
        (
            "CREATE VIEW v AS\nSELECT " + ", ".join(f"c{i}" for i in range(30)) + "\nFROM t;\n",
            "LT05",
        ),
        # keywords in mixed case
        ("create VIEW v AS\nSELECT a from t;\n", "CP01"),
    ],
)
def test_it_catches_a_real_problem(sql: str, code: str) -> None:
    assert code in _codes(sql)


def test_it_passes_the_house_style() -> None:
    sql = (ROOT / "sql" / "trial_caps.sql").read_text(encoding="utf-8")
    assert _codes(sql) == set()
