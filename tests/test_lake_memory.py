"""A lake connection's memory is bounded (issue 14, item 6): DuckDB's memory_limit is set by the
lake (default 4GB, WMO_LAKE_MEMORY_LIMIT overrides), and a query that needs more spills to the
temp directory (WMO_LAKE_TEMP_DIR) instead of failing."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from harbor_shapes import write_job, write_trial

from wmo_lake.ingest import ingest
from wmo_lake.lake import apply_engine_config, connect, connect_private_copy
from wmo_lake.store import DUCKDB_FILE, Store

# ~1M distinct 60-byte keys in a hash aggregate: far more than 32 MB of state
BIG_AGGREGATE = (
    "SELECT count(*) FROM (SELECT s, count(*) FROM "
    "(SELECT repeat('x', 60) || i AS s FROM range(1000000) t(i)) GROUP BY s)"
)


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    write_trial(write_job(tmp_path / "runs" / "job"), "t1")
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    return lake


def memory_limit(con: duckdb.DuckDBPyConnection) -> str:
    rows = con.execute("SELECT current_setting('memory_limit')").fetchall()
    return str(rows[0][0])


def test_the_lake_sets_a_memory_limit_that_can_be_overridden(
    lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WMO_LAKE_MEMORY_LIMIT", raising=False)
    reference = duckdb.connect(config={"memory_limit": "4GB"})
    through_the_file = connect(lake)
    (lake / DUCKDB_FILE).unlink()  # stale: connect() builds a private copy instead
    through_a_private_copy = connect(lake)
    for con in (through_the_file, through_a_private_copy):
        assert memory_limit(con) == memory_limit(reference)  # not DuckDB's 80% of RAM
    monkeypatch.setenv("WMO_LAKE_MEMORY_LIMIT", "300MB")
    con = connect(lake)
    assert memory_limit(con) == memory_limit(duckdb.connect(config={"memory_limit": "300MB"}))
    con.execute("SET memory_limit = '1GB'")  # and per query, in SQL
    assert memory_limit(con) == memory_limit(duckdb.connect(config={"memory_limit": "1GB"}))


def test_a_query_past_the_limit_spills_instead_of_failing(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spill = tmp_path / "spill"
    monkeypatch.setenv("WMO_LAKE_MEMORY_LIMIT", "32MB")
    monkeypatch.setenv("WMO_LAKE_TEMP_DIR", str(spill))
    con = connect(lake)
    assert con.execute(BIG_AGGREGATE).fetchall() == [(1_000_000,)]
    assert spill.is_dir()  # it did spill there
    # the limit really binds: with spilling switched off the same query cannot run
    store = Store(lake)  # a fresh database (connect() shares lake.duckdb's within a process)
    con = connect_private_copy(store, store.read_manifest())
    apply_engine_config(con)
    con.execute("SET temp_directory = ''")
    with pytest.raises(duckdb.OutOfMemoryException):
        con.execute(BIG_AGGREGATE).fetchall()


def test_a_memory_limit_duckdb_cannot_read_is_one_error_naming_the_variable(
    lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WMO_LAKE_MEMORY_LIMIT=bogus was DuckDB's parser traceback (`sql`) or a query error that
    named no variable (`stats`)."""
    from click.testing import CliRunner

    from wmo_lake.cli import cli

    monkeypatch.setenv("WMO_LAKE_MEMORY_LIMIT", "bogus")
    for args in (["sql", "SELECT 1"], ["stats"]):
        result = CliRunner().invoke(cli, [*args, "--lake", str(lake)])
        assert result.exit_code == 1, result.output
        assert result.output.startswith("Error: WMO_LAKE_MEMORY_LIMIT='bogus' is not a memory size")
        assert "Traceback" not in result.output
