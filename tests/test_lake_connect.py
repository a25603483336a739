"""Both doors into a lake give the same views: LAKE/lake.duckdb (opened read-only when current)
and the in-memory database built from the manifest (when it is stale or held by a writer)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from harbor_shapes import write_job, write_trial

from wmo_lake.ingest import ingest
from wmo_lake.lake import connect, connect_in_memory, view_sources
from wmo_lake.store import DUCKDB_STAMP, Store
from wmo_lake.tables import TABLES


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0002" / "job", max_turns=3)
    write_trial(job, "a__1", reward=1, turns=[([1, 2], [3], [-0.5]), ([1, 2, 3, 4], [5], [-0.1])])
    write_trial(job, "b__1", reward=0.0, exception_type="AgentTimeoutError")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    return tmp_path / "lake"


def _everything(con: duckdb.DuckDBPyConnection) -> dict[str, list]:
    names = list(TABLES) + [name for name, _ in view_sources()]
    return {
        name: sorted(map(repr, con.execute(f"SELECT * FROM {name}").fetchall())) for name in names
    }


def test_file_and_in_memory_views_agree(lake: Path) -> None:
    store = Store(lake)
    from_file = connect(lake)
    assert from_file.execute("SELECT current_database()").fetchall() == [("lake",)]
    in_memory = connect_in_memory(store, store.read_manifest())
    assert in_memory.execute("SELECT current_database()").fetchall() == [("memory",)]
    assert _everything(from_file) == _everything(in_memory)


def test_a_stale_file_is_not_used(lake: Path) -> None:
    (lake / DUCKDB_STAMP).write_text("0:stale")
    con = connect(lake)
    assert con.execute("SELECT current_database()").fetchall() == [("memory",)]
    assert con.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]


def test_a_file_built_for_other_view_definitions_is_not_used(
    lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert connect(lake).execute("SELECT current_database()").fetchall() == [("lake",)]
    # the same generation, but a wmo-lake whose sql/ differs (an upgrade changed a view)
    monkeypatch.setattr("wmo_lake.lake.views_digest", lambda: "0123456789abcdef")
    con = connect(lake)
    assert con.execute("SELECT current_database()").fetchall() == [("memory",)]


def test_settings_reach_both_doors(lake: Path) -> None:
    store = Store(lake)
    settings = {"wmo_reward_mode": "positive-binary", "wmo_max_turns": 1}
    for con in (connect(lake, settings), connect_in_memory(store, store.read_manifest(), settings)):
        rows = con.execute(
            "SELECT trial_name, passed, stop_reason FROM trial_records ORDER BY trial_name"
        ).fetchall()
        assert rows == [("a__1", True, "max_turns"), ("b__1", False, "budget")]


def test_a_file_held_open_by_another_duckdb_still_answers(lake: Path) -> None:
    """A user's `duckdb lake/lake.duckdb` session must not break the CLI: DuckDB lets us read
    beside it, and where it would not, connect() falls back to the in-memory views."""
    import subprocess
    import sys

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys, time; duckdb.connect(sys.argv[1]); "
            "print('held', flush=True); time.sleep(60)",
            str(lake / "lake.duckdb"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        con = connect(lake)
        assert con.execute("SELECT count(*) FROM trial_records").fetchall() == [(2,)]
    finally:
        holder.kill()
        holder.wait()
