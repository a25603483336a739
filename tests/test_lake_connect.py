"""Both doors into a lake give the same views, read-only: LAKE/lake.duckdb (opened read-only when
current) and a private copy built from the manifest in the temp dir, also opened read-only (when
the file is stale or held by a writer)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest
from harbor_shapes import write_job, write_trial

from wmo_lake.ingest import ingest
from wmo_lake.lake import (
    connect,
    connect_private_copy,
    session_beside,
    set_settings,
    view_sources,
)
from wmo_lake.store import DUCKDB_STAMP, LakeError, Store
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
    private = connect_private_copy(store, store.read_manifest())
    assert _database_path(private).parent != lake.resolve()
    assert _everything(from_file) == _everything(private)


def _database_path(con: duckdb.DuckDBPyConnection) -> Path:
    (path,) = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchone() or (None,)
    return Path(path).resolve()


def test_a_stale_file_is_not_used(lake: Path) -> None:
    (lake / DUCKDB_STAMP).write_text("0:stale")
    con = connect(lake)
    assert _database_path(con).parent != lake.resolve()
    assert con.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]
    assert not _database_path(con).exists()  # unlinked once open: nothing left in the temp dir


@pytest.mark.parametrize("stale", [False, True])
def test_every_connection_is_read_only(lake: Path, stale: bool) -> None:
    """Both doors refuse writes by how they are opened (a read-only database), whatever the
    statement; temporary tables still work."""
    if stale:
        (lake / DUCKDB_STAMP).write_text("0:stale")
    con = connect(lake)
    for statement in (
        "CREATE TABLE t AS SELECT 1",
        "CREATE VIEW v AS SELECT 1",
        "DROP VIEW cells",
        "CREATE OR REPLACE MACRO m(a) AS a",
    ):
        with pytest.raises(duckdb.Error, match="read-only"):
            con.execute(statement)
    con.execute("CREATE TEMP TABLE scratch AS SELECT 1 AS x")
    assert con.execute("SELECT x FROM scratch").fetchall() == [(1,)]


def test_files_only_confines_file_access(lake: Path, tmp_path: Path) -> None:
    con = connect(lake, files_only=True)
    assert con.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"COPY (SELECT 1) TO '{tmp_path / 'out.csv'}'")
    with pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access = true")
    assert not (tmp_path / "out.csv").exists()


def test_a_file_built_for_other_view_definitions_is_not_used(
    lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _database_path(connect(lake)) == (lake / "lake.duckdb").resolve()
    # the same generation, but a wmo-lake whose sql/ differs (an upgrade changed a view)
    monkeypatch.setattr("wmo_lake.lake.views_digest", lambda: "0123456789abcdef")
    con = connect(lake)
    assert _database_path(con).parent != lake.resolve()  # a private copy, not the stale file


def test_settings_reach_both_doors(lake: Path) -> None:
    store = Store(lake)
    settings = {"wmo_reward_mode": "positive-binary", "wmo_max_turns": 1}
    private = connect_private_copy(store, store.read_manifest())
    set_settings(private, settings)
    for con in (connect(lake, settings), private):
        rows = con.execute(
            "SELECT trial_name, passed, stop_reason FROM trial_records ORDER BY trial_name"
        ).fetchall()
        assert rows == [("a__1", True, "max_turns"), ("b__1", False, "budget")]


@pytest.mark.parametrize("stale", [False, True])
def test_a_session_beside_reads_as_its_connection_reads(
    lake: Path, stale: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second session (stats runs its notes' queries on one) has the settings and the lake's
    search path, which DuckDB keeps per session: without them it would read other rewards, or
    no Parquet file at all (the views name them relative to the lake; run from elsewhere)."""
    if stale:
        (lake / DUCKDB_STAMP).write_text("0:stale")
    monkeypatch.chdir(lake.parent / "runs")
    settings = {"wmo_reward_key": "score"}  # a key no trial has: every trial an infra failure
    con = connect(lake, settings, check=False)
    beside = session_beside(con, settings)
    cells = "SELECT trial_name, passed, infra_failed FROM cells ORDER BY trial_name"
    assert beside.execute(cells).fetchall() == [("a__1", False, True), ("b__1", False, True)]
    spans = "SELECT trial_name, count(*) FROM spans GROUP BY ALL ORDER BY ALL"  # (Parquet files)
    assert beside.execute(spans).fetchall() == con.execute(spans).fetchall()
    assert [name for name, _ in con.execute(spans).fetchall()] == ["a__1", "b__1"]


def test_a_file_held_open_by_another_duckdb_still_answers(lake: Path) -> None:
    """A user's `duckdb lake/lake.duckdb` session must not break the CLI: DuckDB lets us read
    beside it, and where it would not, connect() falls back to a private copy of the views."""
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


def test_files_only_reads_the_relative_files_through_either_door(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # lake.duckdb names its files relative to the lake dir; under files_only DuckDB checks the
    # view's name and the file it opens (through file_search_path) against allowed_paths
    link = tmp_path / "link"
    link.symlink_to(lake)
    monkeypatch.chdir(tmp_path / "runs")
    for path in (lake, link):
        con = connect(path, files_only=True)
        assert _database_path(con) == (lake / "lake.duckdb").resolve()
        assert con.execute("SELECT count(*) FROM trial_records").fetchall() == [(2,)]
        con.close()  # (a confined connection confines the database instance it shares)
    monkeypatch.setattr("wmo_lake.lake.views_digest", lambda: "0123456789abcdef")
    con = connect(link, files_only=True)
    assert _database_path(con).parent != lake.resolve()  # the private copy
    assert con.execute("SELECT count(*) FROM trial_records").fetchall() == [(2,)]
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"SELECT * FROM read_csv('{tmp_path / 'runs' / 'x.csv'}')")


def test_files_only_reads_a_table_dir_that_is_a_symlink(lake: Path, tmp_path: Path) -> None:
    """A lake spread over disks (tables/spans a symlink to another dir): the confined connection
    allows the files where they really are too."""
    spans = lake / "tables" / "spans"
    elsewhere = tmp_path / "other-disk" / "spans"
    elsewhere.parent.mkdir()
    spans.rename(elsewhere)
    spans.symlink_to(elsewhere)
    plain = connect(lake)
    expected = plain.execute("SELECT count(*), sum(n_sampled) FROM spans").fetchall()
    plain.close()  # (a confined connection confines the database instance it shares)
    assert expected[0][0] > 0
    con = connect(lake, files_only=True)
    assert con.execute("SELECT count(*), sum(n_sampled) FROM spans").fetchall() == expected
    con.close()


def test_a_full_temp_dir_for_the_private_copy_is_a_lake_error_naming_it(
    lake: Path, tmp_path: Path, monkeypatch
) -> None:
    """With lake.duckdb not current, a connection builds the views in the temp dir; that dir
    full is said (which dir, what to do), not a DuckDB TransactionException traceback."""
    from click.testing import CliRunner

    from wmo_lake import lakefile
    from wmo_lake.cli import cli

    (lake / "lake.duckdb").unlink()
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)  # (tempfile caches the dir it chose)

    def full(store, manifest, path, *args, **kwargs):
        raise duckdb.TransactionException(f'Could not write file "{path}.wal": No space left')

    monkeypatch.setattr(lakefile, "build", full)
    with pytest.raises(LakeError, match=f"cannot build the lake's views in the temp dir {temp}"):
        connect(lake)
    result = CliRunner().invoke(cli, ["sql", "SELECT count(*) FROM trials", "--lake", str(lake)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "No space left" in result.output and "set TMPDIR to a dir with room" in result.output
    assert list(temp.iterdir()) == []  # nothing left behind


def test_a_query_loads_none_of_the_ingests_decoders_or_arrow(lake: Path) -> None:
    """Opening the lake for a query pays for DuckDB and the views, not for what only the ingest
    needs: connect() checks each partition's extract version, which once imported the CTRF
    grader and with it msgspec (~25 ms of every `wmo-lake sql`)."""
    import subprocess
    import sys

    script = (
        "import sys; from wmo_lake.lake import connect; "
        "connect(sys.argv[1]).sql('SELECT count(*) FROM trial_records').fetchall(); "
        "print(sorted(m for m in ('msgspec', 'pyarrow', 'polars', 'pydantic', 'wmo_lake.ctrf') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(lake)], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_a_connection_held_in_the_process_does_not_hide_a_newer_generation(
    lake: Path, tmp_path: Path
) -> None:
    """A notebook keeps `con = connect(lake)`; an ingest then replaces lake.duckdb. DuckDB hands
    a process the database it already has open at a path, so every later connect() of that
    process read the held connection's generation: 2 trials where the lake held 3."""
    held = connect(lake)
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0003" / "job")
    write_trial(job, "c__1", reward=1)
    summary = ingest([tmp_path / "runs"], lake, workers=1)
    assert summary.trials_new == 1
    fresh = connect(lake)
    assert fresh.execute("SELECT count(*) FROM trials").fetchall() == [(3,)]
    assert fresh.execute("SELECT count(*) FROM rollout_stats").fetchall() == [(2,)]
    # the held connection reads the generation it opened, as a snapshot
    assert held.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]


def test_times_are_shown_and_cut_in_utc_whatever_the_machines_zone(lake: Path) -> None:
    """The lake's times are UTC instants. Shown in the machine's zone, a trial that started
    2026-11-29 19:19 UTC was on 2026-11-30 (hour 4) under TZ=Asia/Tokyo, and Spark (whose
    session is UTC) said the 29th: the connection's TimeZone is UTC."""
    import json
    import os
    import subprocess
    import sys

    query = (
        "SELECT started_at::VARCHAR, started_at::DATE::VARCHAR, hour(started_at) "
        "FROM trials WHERE started_at IS NOT NULL ORDER BY started_at LIMIT 1"
    )
    script = (
        "import json, sys, wmo_lake as wl; "
        f"print(json.dumps(wl.connect(sys.argv[1]).execute({query!r}).fetchall()))"
    )
    rows = {
        zone: json.loads(
            subprocess.run(
                [sys.executable, "-c", script, str(lake)],
                env={**os.environ, "TZ": zone},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for zone in ("UTC", "Asia/Tokyo", "America/Los_Angeles")
    }
    [[shown, day, hour]] = rows["Asia/Tokyo"]
    assert rows["UTC"] == rows["Asia/Tokyo"] == rows["America/Los_Angeles"], rows
    assert shown.endswith("+00") and day == shown[:10] and hour == int(shown[11:13])


@pytest.mark.parametrize(
    ("tz", "utc"),
    [
        ("UTC", True),
        (":/usr/share/zoneinfo/Etc/UTC", True),
        ("Etc/UTC", True),
        ("Asia/Tokyo", False),
        ("Europe/London", False),  # UTC+0 in winter, not UTC
        ("", False),
    ],
)
def test_the_machines_zone_is_read_without_duckdb(
    tz: str, utc: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zone that is UTC by name is left as named (no ICU load, no renamed zone); any other is
    set to UTC."""
    from wmo_lake.lake import _machine_zone_is_utc

    monkeypatch.setenv("TZ", tz)
    assert _machine_zone_is_utc() is utc


def test_a_connection_that_raised_is_closed_at_once(lake: Path) -> None:
    """DuckDB shares one database per file in a process: a confined connection that a bad
    setting made connect() raise stayed open while its traceback was held (a notebook keeps the
    last one; click's test runner too), and the next connect to the lake had its
    `enable_external_access = false` (an export in the same process failed: 'Modifying the
    temp_directory has been disabled by configuration')."""
    with pytest.raises(LakeError, match="UTF-8") as caught:
        connect(lake, {"wmo_reward_key": "r\udcff"}, files_only=True)
    con = connect(lake)
    con.execute("SET temp_directory = ?", [str(lake.parent / "spill")])
    con.close()
    assert caught.traceback  # (held until here)


def test_a_copy_queried_from_inside_its_original_refuses_to_read_the_originals_files(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB reads a view's relative file name against the working directory before
    file_search_path: from inside the original, a copy's every query read the original's files
    (the audit saw a damaged original fail the copy's query; an edited one gives its numbers)."""
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(lake, copy)
    with connect(copy) as con:  # (from elsewhere)
        expected = con.execute("SELECT count(*) FROM spans").fetchall()
    (segment,) = (lake / "tables" / "spans").rglob("*.parquet")
    segment.write_bytes(b"not the copy's")
    monkeypatch.chdir(lake)
    with pytest.raises(LakeError, match=r"holds tables/.*one lake is a copy of the other"):
        connect(copy)
    with pytest.raises(LakeError, match="Run wmo-lake from another directory"):
        ingest([tmp_path / "runs"], copy, workers=1)  # (refused before anything is committed)
    monkeypatch.chdir(copy)  # the lake's own dir: its own files
    with connect(copy) as con:
        assert con.execute("SELECT count(*) FROM spans").fetchall() == expected


def test_a_confined_connection_beside_a_held_one_leaves_the_next_connect_working(
    lake: Path,
) -> None:
    """DuckDB shares one database per file in a process: with a connection held (a notebook's),
    a file-confined one (`wmo-lake sql`'s) turned external access off for that database, which
    DuckDB never turns back on, and every later connect to the lake failed ('Cannot change
    allowed_paths when enable_external_access is disabled'; in CI, whenever the garbage
    collector had not yet closed an earlier test's connection). A later connect builds its own."""
    held = connect(lake)
    for _ in range(2):
        confined = connect(lake, files_only=True)
        assert confined.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]
        confined.close()
    con = connect(lake)
    con.execute("SET temp_directory = ?", [str(lake.parent / "spill")])
    assert con.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]
    con.close()
    held.close()
