"""LAKE/lake.duckdb stores the light tables' rows and keeps them incrementally: after any series
of commits it holds exactly the rows a build from scratch holds (and the Parquet files say), and
an update reads only the partitions whose files changed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from harbor_shapes import write_job, write_trial

from wmo_lake import lakefile
from wmo_lake.ingest import ingest
from wmo_lake.lake import (
    CACHE_DIR_ENV,
    SKELETON,
    cached_skeleton,
    connect,
    view_sources,
    views_digest,
)
from wmo_lake.store import DUCKDB_FILE, LakeError, Store, partition_of
from wmo_lake.stored_copies import CopyWriter
from wmo_lake.tables import TABLES
from wmo_lake.tidy import forget

TURNS = [([1, 2], [3, 4, 5], [-0.5, -0.1, -0.2]), ([1, 2, 3, 4, 5, 6], [7], [-0.1])]


def _job(runs: Path, step: int) -> Path:
    return write_job(runs / "exp" / "harbor" / f"step-{step:04d}" / "job", max_tokens=3)


def _everything(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Every table's and view's rows (sorted: a table's row order is no part of its meaning)."""
    names = list(TABLES) + [name for name, _ in view_sources()]
    return {
        name: sorted(map(repr, con.execute(f"SELECT * FROM {name}").fetchall())) for name in names
    }


def _built(lake: Path, tmp_path: Path, *, stored: bool) -> dict[str, list[str]]:
    """The lake's tables and views from a lake.duckdb built from scratch (`stored=False`: every
    table a view over its Parquet files, the source of truth)."""
    store = Store(lake)
    manifest = store.read_manifest()
    path = tmp_path / f"scratch-{stored}.duckdb"
    report = lakefile.build(store, manifest, path, "scratch", stored=stored)
    assert not report.incremental
    con = duckdb.connect(str(path), read_only=True)
    try:
        con.execute("SET file_search_path = ?", [str(lake)])
        return _everything(con)
    finally:
        con.close()
        path.unlink()


def _stored_tables(lake: Path) -> set[str]:
    with duckdb.connect(str(lake / DUCKDB_FILE), read_only=True) as con:
        rows = con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
    return {name.removeprefix("_stored_") for (name,) in rows if name.startswith("_stored_")}


def _check(lake: Path, tmp_path: Path) -> dict[str, list[str]]:
    con = connect(lake, check=False)
    try:
        kept = _everything(con)
    finally:
        con.close()
    assert kept == _built(lake, tmp_path, stored=True)
    assert kept == _built(lake, tmp_path, stored=False)
    return kept


def test_kept_incrementally_it_equals_a_build_from_scratch(tmp_path: Path, monkeypatch) -> None:
    """Add a step, re-ingest one with changed trials, move a trial to another step, forget a
    batch: after each commit every table and view of lake.duckdb (kept incrementally) equals
    one built from scratch, which equals the Parquet files read directly."""
    updates: list[lakefile.BuildReport] = []
    update = lakefile._update

    def recording(*args, **kwargs):
        updates.append(update(*args, **kwargs))
        return updates[-1]

    monkeypatch.setattr(lakefile, "_update", recording)
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    for step in (1, 2):
        job = _job(runs, step)
        write_trial(job, "a__1", trial_id=f"a{step}", reward=1.0, turns=TURNS)
        write_trial(
            job, "b__1", trial_id=f"b{step}", reward=0.0, exception_type="AgentTimeoutError"
        )
    ingest([runs], lake, workers=1)
    assert _stored_tables(lake) == {*lakefile.STORED_TABLES, *lakefile.STORED_PROJECTIONS}
    first = _check(lake, tmp_path)
    assert len(first["trials"]) == 4 and len(first["rollout_stats"]) == 2

    # a new step
    write_trial(_job(runs, 3), "c__1", trial_id="c3", reward=0.5, turns=TURNS)
    ingest([runs], lake, workers=1)
    assert _check(lake, tmp_path)["trials"] != first["trials"]
    assert updates[-1].inserted["trials"] == [partition_of("exp", 3)]

    # a step re-ingested with changed trials
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=0.0, turns=TURNS[:1])
    ingest([runs], lake, workers=1)
    changed = _check(lake, tmp_path)
    assert updates[-1].inserted["trials"] == [partition_of("exp", 1)]
    assert updates[-1].deleted["trials"] == [partition_of("exp", 1)]

    # a trial moved from step 2 to step 3 (same trial id: its rows leave step 2's partition)
    shutil.move(runs / "exp/harbor/step-0002/job/a__1", runs / "exp/harbor/step-0003/job/a__1")
    ingest([runs], lake, workers=1)
    moved = _check(lake, tmp_path)
    assert moved != changed
    assert sorted(updates[-1].inserted["trials"]) == [
        partition_of("exp", 2),
        partition_of("exp", 3),
    ]
    con = connect(lake, check=False)
    assert con.execute("SELECT step FROM trials WHERE trial_id = 'a2'").fetchall() == [(3,)]
    con.close()

    # a batch forgotten: its partition's rows go
    forget(lake, "exp/harbor/step-0001/*")
    gone = _check(lake, tmp_path)
    assert partition_of("exp", 1) in updates[-1].deleted["trials"]
    assert not any("step-0001" in row for row in gone["trials"])
    # (the first build too: it fills a skeleton, copied from the cache dir)
    assert len(updates) == 5 and all(report.incremental for report in updates)


def test_an_update_reads_only_the_partitions_that_changed(tmp_path: Path) -> None:
    """Once stored, an untouched partition's files are never read again: with step 1's light
    files broken, adding step 2 still commits, and lake.duckdb still answers for step 1."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    before = connect(lake, check=False).execute("SELECT * FROM trials").fetchall()
    manifest = Store(lake).read_manifest()
    for table in lakefile.STORED_TABLES:
        for rel in manifest.tables.get(table, {}).get(partition_of("exp", 1), []):
            (lake / rel).write_bytes(b"not parquet: reading this fails")
    step2 = _job(runs, 2)
    write_trial(step2, "b__1", trial_id="b2", reward=0.0, turns=TURNS)
    # (step 2's dir alone: an ingest that walks step 1 refuses it, its files being broken)
    ingest([step2.parent], lake, workers=1)
    con = connect(lake, check=False)
    assert con.execute("SELECT * FROM trials WHERE step = 1").fetchall() == before
    assert con.execute("SELECT batch, trials FROM rollout_stats").fetchall() == [
        ("exp/harbor/step-0001/job", 1),
        ("exp/harbor/step-0002/job", 1),
    ]
    # the scratch build does read them (the check above is not vacuous), and names them
    with pytest.raises(LakeError, match="cut short or unreadable"):
        _built(lake, tmp_path, stored=True)
    with pytest.raises(LakeError, match="holds 4 of its Parquet files cut short or unreadable"):
        ingest([runs], lake, workers=1)


def test_a_file_of_another_layout_is_built_anew(tmp_path: Path) -> None:
    """A lake.duckdb written by a wmo-lake that did not store tables (or another layout) is not
    updated in place of a build: its stamp is stale and the rebuild starts from scratch."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    store = Store(lake)
    path = tmp_path / "other.duckdb"
    shutil.copyfile(lake / DUCKDB_FILE, path)
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE _wmo_lake SET layout = 'some-other-layout'")
        con.execute("DELETE FROM _stored_trials")  # its rows must not be trusted
    stamp = store.duckdb_stamp(store.read_manifest(), views_digest())
    report = lakefile.build(store, store.read_manifest(), tmp_path / "new.duckdb", stamp, base=path)
    assert not report.incremental
    assert report.inserted["trials"] == [partition_of("exp", 1)]


def _interrupted_in_transaction() -> duckdb.Error:
    """What the next statement raised after a stop aborted the update's transaction."""
    try:
        try:
            raise RuntimeError("Query interrupted")
        except RuntimeError:
            raise duckdb.TransactionException("Current transaction is aborted") from None
    except duckdb.TransactionException as error:
        return error


@pytest.mark.parametrize(
    "raised",
    [
        RuntimeError("Query interrupted"),
        duckdb.InvalidInputException(
            "reading the schema of the object registered as '_wmo_copy' failed: KeyboardInterrupt: "
        ),
        _interrupted_in_transaction(),
    ],
    ids=["query-interrupted", "scan-interrupted", "transaction-aborted"],
)
def test_a_stop_inside_the_update_stops_the_build(tmp_path: Path, monkeypatch, raised) -> None:
    """A Ctrl-C or SIGTERM landing in an update of lake.duckdb comes out of DuckDB as one of
    these errors: each was taken for a file that cannot be updated, so the build started anew
    from scratch and the ingest exited 0, the stop lost. Other errors still fall back."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    store = Store(lake)
    stamp = store.duckdb_stamp(store.read_manifest(), views_digest())

    def raising(error: BaseException):
        def update(*args: object) -> None:
            raise error

        return update

    monkeypatch.setattr(lakefile, "_update", raising(raised))
    with pytest.raises(KeyboardInterrupt):
        lakefile.build(
            store, store.read_manifest(), tmp_path / "a.duckdb", stamp, base=lake / DUCKDB_FILE
        )
    monkeypatch.setattr(lakefile, "_update", raising(duckdb.Error("x")))
    report = lakefile.build(
        store, store.read_manifest(), tmp_path / "b.duckdb", stamp, base=lake / DUCKDB_FILE
    )
    assert not report.incremental  # (built anew)
    monkeypatch.setattr(
        lakefile, "_update", lambda *args: (_ for _ in ()).throw(RuntimeError("bug"))
    )
    with pytest.raises(RuntimeError, match="bug"):
        lakefile.build(
            store, store.read_manifest(), tmp_path / "c.duckdb", stamp, base=lake / DUCKDB_FILE
        )


def test_the_stamp_names_the_layout(tmp_path: Path) -> None:
    """A lake.duckdb from before tables were stored (same views) counts as stale: the views
    digest in its stamp covers the layout."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    digest = views_digest()
    views_digest.cache_clear()
    try:
        layout = lakefile.LAYOUT
        lakefile.LAYOUT = "before"
        assert views_digest() != digest
    finally:
        lakefile.LAYOUT = layout
        views_digest.cache_clear()
    assert views_digest() == digest


def test_a_deleted_file_comes_back_compact_at_the_next_ingest(tmp_path: Path) -> None:
    """The README's way to compact lake.duckdb: delete it; an ingest that finds nothing new
    still builds it (from scratch), and connect() reads the files meanwhile."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    want = _check(lake, tmp_path)
    (lake / DUCKDB_FILE).unlink()
    assert _everything(connect(lake, check=False)) == want
    summary = ingest([runs], lake, workers=1)
    assert not summary.committed and (lake / DUCKDB_FILE).exists()
    assert _stored_tables(lake) == {*lakefile.STORED_TABLES, *lakefile.STORED_PROJECTIONS}
    assert _check(lake, tmp_path) == want


def test_a_lake_duckdb_that_is_no_duckdb_file_is_rebuilt_by_the_next_ingest(
    tmp_path: Path,
) -> None:
    """A lake.duckdb overwritten with other bytes (its sidecar stamp still current) read as
    current: an ingest that found nothing new left it so, and a plain DuckDB client of the
    README's (`duckdb.connect('lake/lake.duckdb')`) failed on it. Its header is checked now."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    want = _check(lake, tmp_path)
    whole = (lake / DUCKDB_FILE).read_bytes()
    for damaged in (b"garbage\n", whole[:8192]):  # (the second: cut short, its header whole)
        (lake / DUCKDB_FILE).write_bytes(damaged)
        assert _everything(connect(lake, check=False)) == want  # (its own copy meanwhile)
        summary = ingest([runs], lake, workers=1)
        assert not summary.committed
        with duckdb.connect(str(lake / DUCKDB_FILE), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM trials").fetchall() == [(1,)]
        assert _check(lake, tmp_path) == want


def test_a_lake_duckdb_changed_in_place_is_said_with_the_fix(tmp_path: Path) -> None:
    """Bytes of lake.duckdb written over in place (its size, so its stamp, unchanged) made every
    query fail with DuckDB's bare checksum error. Whichever block is hit, a command now answers
    as before (DuckDB could not open the file: the lake's own copy is built instead) or says
    lake.duckdb's damage with the fix (delete it: it only caches the Parquet files), which
    then works."""
    from click.testing import CliRunner

    import wmo_lake as wl
    from wmo_lake import spark
    from wmo_lake.cli import cli

    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    write_trial(_job(runs, 2), "a__1", trial_id="a2", reward=0.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    stats = ["stats", "--lake", str(lake), "--json"]
    before = CliRunner().invoke(cli, stats)
    assert before.exit_code == 0, before.output
    built = lake / DUCKDB_FILE
    whole = built.read_bytes()
    block, header = 256 * 1024, 3 * 4096  # (DuckDB's blocks; its file and database headers)
    said = warned = 0
    for start in range(header, len(whole), block):
        # past the block's checksum (8 bytes), 4 KiB of its data written over
        built.write_bytes(whole[: start + 8] + bytes(4096) + whole[start + 8 + 4096 :])
        result = CliRunner().invoke(cli, stats)
        if result.exit_code == 0:
            assert result.output == before.output, start
            continue
        assert result.exit_code == 1, result.output
        assert f"{built} is damaged (DuckDB: Corrupt database file" in result.output, start
        assert f"delete it (`rm {built}`)" in result.output
        sql = CliRunner().invoke(cli, ["sql", "--lake", str(lake), "FROM rollout_stats"])
        assert sql.exit_code == 1 and f"{built} is damaged" in sql.output, sql.output
        with pytest.raises(LakeError, match=r"the next wmo_lake.ingest\(\) writes lake.duckdb"):
            wl.stats(lake)
        said += 1
        try:  # (`sql --engine spark` asks DuckDB for its reward-key check: said there too)
            spark.warn_on_unused_reward_key(lake, None)
        except LakeError as error:
            assert f"{built} is damaged" in str(error)
            warned += 1
    assert said and warned  # (some block the queries read was hit)
    built.unlink()
    after = CliRunner().invoke(cli, stats)
    assert after.exit_code == 0 and after.output == before.output
    ingest([runs], lake, workers=1)
    with duckdb.connect(str(built), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM trials").fetchall() == [(2,)]


def test_an_update_across_a_change_of_views_recreates_them(tmp_path: Path) -> None:
    """A lake.duckdb built with other view definitions keeps its stored rows but gets this
    code's views: a view no longer in sql/ goes, a missing one comes back."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    want = _check(lake, tmp_path)
    store = Store(lake)
    base = tmp_path / "older.duckdb"
    shutil.copyfile(lake / DUCKDB_FILE, base)
    with duckdb.connect(str(base)) as con:
        con.execute("UPDATE _wmo_lake SET views = 'older views'")
        con.execute("DROP VIEW rollout_stats")
        con.execute("CREATE VIEW gone_view AS SELECT 1 AS x")
    path = tmp_path / "new.duckdb"
    stamp = store.duckdb_stamp(store.read_manifest(), views_digest())
    report = lakefile.build(store, store.read_manifest(), path, stamp, base=base)
    assert report.incremental and report.inserted["trials"] == []
    with duckdb.connect(str(path), read_only=True) as con:
        con.execute("SET file_search_path = ?", [str(lake)])
        views = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        assert "gone_view" not in views and "rollout_stats" in views
        assert _everything(con) == want


def test_a_first_ingest_fills_the_views_it_bound_while_its_readers_worked(
    tmp_path: Path, monkeypatch
) -> None:
    """With reader processes, a first ingest binds lake.duckdb's views before its commit (the
    skeleton of an empty lake) and the build after the commit only fills it: an update that
    creates no view, whose file equals one built from scratch; no skeleton is left behind."""
    updates: list[lakefile.BuildReport] = []
    views_created: list[str] = []
    update, create_views = lakefile._update, lakefile._create_views

    def recording_update(*args, **kwargs):
        updates.append(update(*args, **kwargs))
        return updates[-1]

    def recording_views(con, manifest, plan):
        views_created.append(str(manifest.generation))
        return create_views(con, manifest, plan)

    monkeypatch.setattr(lakefile, "_update", recording_update)
    monkeypatch.setattr(lakefile, "_create_views", recording_views)
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))  # no skeleton cached yet
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    for step in (1, 2):
        job = _job(runs, step)
        for n in range(3):
            write_trial(job, f"t{n}__1", trial_id=f"t{step}{n}", reward=n / 2, turns=TURNS)
    ingest([runs], lake, workers=2)
    assert len(updates) == 1 and updates[0].incremental
    assert sorted(updates[0].inserted["trials"]) == [partition_of("exp", 1), partition_of("exp", 2)]
    assert views_created == ["0"]  # once, for the skeleton (an empty manifest), never after
    assert not (lake / SKELETON).exists()
    assert len(_check(lake, tmp_path)["trials"]) == 6


@pytest.mark.parametrize("skeleton", [b"not a duckdb file", None])
def test_a_skeleton_that_cannot_be_filled_is_no_harm(tmp_path: Path, skeleton) -> None:
    """A skeleton left by an interrupted ingest, or by another wmo-lake (here: not a DuckDB
    file; an earlier layout), is a head start at most: the first build corrects or ignores it."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    lake.mkdir()
    if skeleton is None:  # a skeleton of another layout, with a stray row in a stored table
        other = tmp_path / "other"
        write_trial(_job(other, 7), "z__1", trial_id="z7", reward=0.0, turns=TURNS)
        ingest([other], tmp_path / "other-lake", workers=1)
        shutil.copyfile(tmp_path / "other-lake" / DUCKDB_FILE, lake / SKELETON)
        with duckdb.connect(str(lake / SKELETON)) as con:
            con.execute("UPDATE _wmo_lake SET layout = 'some-other-layout'")
    else:
        (lake / SKELETON).write_bytes(skeleton)
    ingest([runs], lake, workers=1)  # read in-process: no head start, the stray skeleton stays
    assert not (lake / SKELETON).exists()
    trials = _check(lake, tmp_path)["trials"]
    assert len(trials) == 1 and "z7" not in trials[0]


def _recording_builds(monkeypatch) -> list[lakefile.BuildReport]:
    """Every BuildReport of the lake.duckdb builds that follow (from scratch or an update)."""
    reports: list[lakefile.BuildReport] = []
    for name in ("_fresh", "_update"):
        build = getattr(lakefile, name)

        def recording(*args, _build=build, **kwargs):
            reports.append(_build(*args, **kwargs))
            return reports[-1]

        monkeypatch.setattr(lakefile, name, recording)
    return reports


def _stored_segments(lake: Path) -> dict[str, list[str]]:
    """stored table -> the live segments its rows come from (but empty-schema files)."""
    manifest = Store(lake).read_manifest()
    sources = {name: name for name in lakefile.STORED_TABLES}
    sources |= {name: source for name, (source, _) in lakefile.STORED_PROJECTIONS.items()}
    return {
        name: sorted(
            rel
            for rels in manifest.tables.get(source, {}).values()
            for rel in rels
            if not rel.endswith("-empty.parquet")
        )
        for name, source in sources.items()
    }


@pytest.mark.parametrize("workers", [1, 2])
def test_an_ingest_fills_lake_duckdb_from_its_writers_copies(
    tmp_path: Path, monkeypatch, workers: int
) -> None:
    """The rows an ingest writes to the stored tables are copied as they are written (by the
    reader processes, and by the ingest process for job rows or when it reads alone), and the
    build after the commit takes every new segment's rows from those copies instead of reading
    the files back: lake.duckdb still equals a build from scratch and the Parquet files, and
    the copies are gone once it is built."""
    reports = _recording_builds(monkeypatch)
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    for step in (1, 2):
        job = _job(runs, step)
        for n in range(3):
            write_trial(job, f"t{n}__1", trial_id=f"t{step}{n}", reward=n / 2, turns=TURNS)
    ingest([runs], lake, workers=workers)
    report = reports[-1]  # (with readers, a first build of the empty skeleton comes before)
    segments = _stored_segments(lake)
    assert segments["trials"] and segments["jobs"] and segments["span_lengths"]
    for name, rels in segments.items():
        assert sorted(report.copied.get(name, [])) == rels, name
    assert not (lake / ".staging").exists()
    assert len(_check(lake, tmp_path)["trials"]) == 6

    write_trial(_job(runs, 3), "c__1", trial_id="c3", reward=0.5, turns=TURNS)
    ingest([runs], lake, workers=workers)  # an update: only the new step's segments are copied
    new = [rel for rel in _stored_segments(lake)["trials"] if rel not in segments["trials"]]
    assert len(new) == 1 and reports[-1].copied["trials"] == new
    assert len(_check(lake, tmp_path)["trials"]) == 7


def test_a_copied_segment_the_commit_rewrote_is_read_from_its_file(
    tmp_path: Path, monkeypatch
) -> None:
    """A trial found in two dirs of one ingest is stored once: the reader segment holding its
    second copy is rewritten without it, under a new name the copies do not hold. The build
    takes from a copy only the segments the manifest names, and reads the rewritten one from
    its file: the trial is stored once, as from scratch."""
    reports = _recording_builds(monkeypatch)
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    for step in (1, 2):
        job = _job(runs, step)
        write_trial(job, "same__1", trial_id="same", reward=1.0, turns=TURNS)
        for n in range(3):
            write_trial(job, f"t{n}__1", trial_id=f"t{step}{n}", reward=0.0, turns=TURNS)
    ingest([runs], lake, workers=2)
    report = reports[-1]  # (with readers, a first build of the empty skeleton comes before)
    live = _stored_segments(lake)["trials"]
    copied = report.copied["trials"]
    assert set(copied) < set(live), "the rewritten segment must be read from its file"
    trials = _check(lake, tmp_path)["trials"]
    assert len(trials) == 7 and sum("'same'" in row for row in trials) == 1


def test_a_build_takes_from_a_copy_only_the_segments_the_manifest_names(tmp_path: Path) -> None:
    """A copy may hold segments the manifest does not name (rewritten or merged by the commit,
    or left by a writer whose files were dropped): the build takes from it only the named ones,
    so every stored table equals the files."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    for step in (1, 2):
        write_trial(_job(runs, step), "a__1", trial_id=f"a{step}", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    store = Store(lake)
    manifest = store.read_manifest()
    live = manifest.tables["trials"]
    writer = CopyWriter(lake, "test-copy")
    for partition, rels in live.items():
        for rel in rels:
            rows = pq.ParquetFile(lake / rel).read()
            writer.add("trials", rows, rel, partition)
            stray = rel.replace(".parquet", "-stray.parquet")  # the same rows, under no manifest
            writer.add("trials", rows, stray, partition)
    path = lake / "copied.duckdb"
    report = lakefile.build(store, manifest, path, "copied", copies=writer.close())
    assert sorted(report.copied["trials"]) == sorted(rel for rels in live.values() for rel in rels)
    con = duckdb.connect(str(path), read_only=True)
    try:
        con.execute("SET file_search_path = ?", [str(lake)])
        copied = _everything(con)
    finally:
        con.close()
    assert copied == _built(lake, tmp_path, stored=False)
    assert len(copied["trials"]) == 2


def test_a_build_killed_before_its_checkpoint_leaves_no_rows_behind(tmp_path: Path) -> None:
    """A build killed mid-insert leaves a write-ahead log beside its temporary file; DuckDB
    replays such a log into whatever file is opened at that path, so the next build (here a
    new step's) must remove it first or store the killed build's rows twice."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    building = lake / f".{DUCKDB_FILE}.building"
    shutil.copyfile(lake / DUCKDB_FILE, building)
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import duckdb, os, sys; con = duckdb.connect(sys.argv[1]); "
            "con.execute('INSERT INTO _stored_trials SELECT * FROM _stored_trials'); "
            "os._exit(9)",
            str(building),
        ],
        check=False,
    )
    assert killed.returncode == 9 and building.with_name(f"{building.name}.wal").exists()
    write_trial(_job(runs, 2), "b__1", trial_id="b2", reward=0.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    assert len(_check(lake, tmp_path)["trials"]) == 2


def _skeleton_builds(monkeypatch) -> list[str]:
    """The stamps of the lake.duckdb files built from here on ("skeleton" for a skeleton)."""
    stamps: list[str] = []
    build = lakefile.build

    def recording(store, manifest, path, stamp, **kwargs):
        stamps.append(stamp)
        return build(store, manifest, path, stamp, **kwargs)

    monkeypatch.setattr(lakefile, "build", recording)
    return stamps


@pytest.mark.parametrize("workers", [1, 2])
def test_a_first_build_copies_the_skeleton_kept_in_the_cache(
    tmp_path: Path, monkeypatch, workers: int
) -> None:
    """A skeleton holds nothing of its lake, so the first one built (with a head start or
    without) is kept in the cache dir and every later lake's first build starts from a copy
    of it, with the same result as a build from scratch."""
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    stamps = _skeleton_builds(monkeypatch)
    runs = tmp_path / "runs"
    for step in (1, 2):
        for n in range(2):
            write_trial(_job(runs, step), f"t{n}__1", trial_id=f"t{step}{n}", turns=TURNS)
    cached = cached_skeleton()
    assert cached is not None and cached.parent == tmp_path / "cache" and not cached.exists()
    ingest([runs], tmp_path / "first", workers=workers)
    assert stamps.count("skeleton") == 1 and cached.is_file()
    ingest([runs], tmp_path / "second", workers=workers)
    assert stamps.count("skeleton") == 1, "the second lake built its skeleton again"
    assert len(stamps) == 3  # the skeleton and each lake's own file
    assert not (tmp_path / "second" / SKELETON).exists()
    assert len(_check(tmp_path / "second", tmp_path)["trials"]) == 4


def test_the_cached_skeleton_is_keyed_by_the_code_that_builds_it(
    tmp_path: Path, monkeypatch
) -> None:
    """The key held the version string, which stays 0.1.0 across changes: another checkout
    whose lake.duckdb build differed (same views) shared ~/.cache/wmo-lake's skeleton."""
    from wmo_lake import lake

    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    ours = cached_skeleton()
    assert ours is not None and lake.builder_digest() == lake.builder_digest()
    monkeypatch.setattr(lake, "builder_digest", lambda: "another build")
    theirs = cached_skeleton()
    assert theirs is not None and theirs != ours and theirs.parent == ours.parent


def _read_whole(database: Path) -> None:
    """Every row of every table of `database` (so every block of theirs passes its checksum)."""
    with duckdb.connect(str(database), read_only=True) as con:
        for (table,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
            con.execute(f'SELECT * FROM "{table}"').fetchall()


@pytest.mark.parametrize("damage", ["not a skeleton", "changed in place"])
def test_a_cached_skeleton_that_cannot_be_used_is_dropped(
    tmp_path: Path, monkeypatch, damage: str
) -> None:
    """A cache file that is not the skeleton kept (another file there; or a block of it changed
    in place, a disk error, which every new lake's lake.duckdb copied, so its queries failed
    DuckDB's checksum) costs one build from scratch (the lake is still right) and is replaced
    by a good one; an empty cache dir setting keeps none."""
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    cached = cached_skeleton()
    assert cached is not None
    runs = tmp_path / "runs"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    ingest([runs], tmp_path / "zeroth", workers=1)  # (keeps the skeleton)
    whole = cached.read_bytes()
    if damage == "not a skeleton":
        damaged = [b"not a duckdb file"]
    else:  # one block past the headers at a time: 4 KiB of its data, past its checksum, zeroed
        starts = range(3 * 4096, len(whole), 256 * 1024)
        damaged = [whole[: at + 8] + bytes(4096) + whole[at + 8 + 4096 :] for at in starts]
    for n, content in enumerate(damaged):
        cached.write_bytes(content)
        lake = tmp_path / f"lake{n}"
        ingest([runs], lake, workers=1)
        assert len(_check(lake, tmp_path)["trials"]) == 1
        _read_whole(lake / DUCKDB_FILE)
        _read_whole(cached)  # (a good one kept again)
        with duckdb.connect(str(cached), read_only=True) as con:
            assert con.execute("SELECT stamp FROM _wmo_lake").fetchall() == [("skeleton",)]

    monkeypatch.setenv(CACHE_DIR_ENV, "")
    assert cached_skeleton() is None
    ingest([runs], tmp_path / "third", workers=1)
    assert len(_check(tmp_path / "third", tmp_path)["trials"]) == 1


def test_a_cache_dir_that_cannot_be_written_is_no_cache(tmp_path: Path, monkeypatch) -> None:
    """A cache dir under a plain file (so it can be neither made nor read) leaves every first
    build as it was without the cache: the ingest works and says nothing."""
    (tmp_path / "not-a-dir").write_text("a file")
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "not-a-dir" / "cache"))
    runs = tmp_path / "runs"
    write_trial(_job(runs, 1), "a__1", trial_id="a1", reward=1.0, turns=TURNS)
    for workers in (1, 2):
        ingest([runs], tmp_path / f"lake-{workers}", workers=workers)
        assert len(_check(tmp_path / f"lake-{workers}", tmp_path)["trials"]) == 1


def test_copied_batches_come_in_order_in_bounded_groups_of_one_schema(
    tmp_path: Path, monkeypatch
) -> None:
    """The build inserts a table's copies a group of batches at a time (one statement, one
    chunk a column): every batch once, in order, no group past INSERT_BYTES but by its last
    batch, and a change of schema starts a group (a table is built from one)."""
    import pyarrow as pa

    def stream(path: Path, batches: list[pa.RecordBatch]) -> str:
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, batches[0].schema) as out:
            for batch in batches:
                out.write_batch(batch)
        return str(path)

    ints = [pa.record_batch({"x": list(range(i * 100, i * 100 + 100))}) for i in range(6)]
    texts = [pa.record_batch({"x": [str(i)] * 50}) for i in range(2)]
    paths = [stream(tmp_path / "a", ints[:3]), stream(tmp_path / "b", texts)]
    paths.append(stream(tmp_path / "c", ints[3:]))
    monkeypatch.setattr(lakefile, "INSERT_BYTES", 2 * ints[0].nbytes)
    groups = list(lakefile._copied_batches(paths))

    assert [b for group in groups for b in group] == ints[:3] + texts + ints[3:]
    for group in groups:
        assert all(batch.schema.equals(group[0].schema) for batch in group)
        assert sum(batch.nbytes for batch in group[:-1]) < lakefile.INSERT_BYTES
    # (a group of 2 is full; a schema change closes one early; the texts are small: one group)
    assert [len(group) for group in groups] == [2, 1, 2, 2, 1]


def test_an_update_writes_in_one_transaction_to_its_checkpoint(tmp_path: Path, monkeypatch) -> None:
    """Every change an update makes to lake.duckdb is one transaction, committed just before
    the checkpoint (a statement of its own would commit and sync the write-ahead log each)."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    for step in (1, 2):
        write_trial(_job(runs, step), "a__1", trial_id=f"a{step}", reward=1.0, turns=TURNS)
    ingest([runs], lake, workers=1)
    write_trial(_job(runs, 3), "a__1", trial_id="a3", reward=0.0, turns=TURNS)

    statements: list[str] = []
    connect_file = duckdb.connect

    class Recording:
        def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
            self.con = con

        def execute(self, sql: str, *args: object) -> duckdb.DuckDBPyConnection:
            statements.append(" ".join(sql.split()[:2]).upper())
            return self.con.execute(sql, *args)

        def __getattr__(self, name: str) -> object:
            return getattr(self.con, name)

    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: Recording(connect_file(*a, **k)))
    ingest([runs], lake, workers=1)

    writes = [i for i, s in enumerate(statements) if s.split()[0] in ("INSERT", "DELETE", "CREATE")]
    assert writes, statements
    begin = statements.index("BEGIN TRANSACTION")
    commit = statements.index("COMMIT")
    assert begin < writes[0] and writes[-1] < commit
    # (the commit checkpoints at once, so its rows skip the write-ahead log)
    assert statements.index("SET CHECKPOINT_THRESHOLD") < begin
    assert statements[commit + 1] == "CHECKPOINT"
    assert statements.count("COMMIT") == 1
    rows = connect(lake).execute("SELECT trial_key FROM trials ORDER BY 1").fetchall()
    assert rows == [("a1",), ("a2",), ("a3",)]


def test_an_ingest_reads_the_manifest_once_and_builds_from_the_one_it_committed(
    tmp_path: Path, monkeypatch
) -> None:
    """The manifest of a lake of 1,000 steps is 0.8 MB: an ingest reads it when it starts and
    hands the one it commits to the lake.duckdb build, which must equal the file's."""
    runs, lake = tmp_path / "runs", tmp_path / "lake"
    reads: list[Path] = []
    built: list[object] = []
    read_manifest, build = Store.read_manifest, lakefile.build

    def counting(self: Store):
        reads.append(self.root)
        return read_manifest(self)

    def noting(store, manifest, path, *args, **kwargs):
        if path.name != SKELETON:  # (a first ingest's head start, built from no manifest)
            built.append(manifest)
        return build(store, manifest, path, *args, **kwargs)

    monkeypatch.setattr(Store, "read_manifest", counting)
    monkeypatch.setattr(lakefile, "build", noting)
    for step, trial in ((1, "a"), (2, "b")):  # a first ingest, then an incremental one
        write_trial(_job(runs, step), f"{trial}__1", trial_id=trial, reward=1.0, turns=TURNS)
        reads.clear()
        built.clear()
        ingest([runs], lake, workers=1)
        assert len(reads) == 1
        (manifest,) = built
        assert manifest == read_manifest(Store(lake))
    reads.clear()
    built.clear()
    ingest([runs], lake, workers=1)  # nothing changed: nothing built, the manifest read once
    assert (len(reads), built) == (1, [])
    _check(lake, tmp_path)


def test_a_full_disk_while_copying_lake_duckdb_says_the_generation_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build starts from a copy of the current lake.duckdb (shutil.copyfile): ENOSPC there
    is an OSError, not one of DuckDB's, and it left the partial file and a bare "cannot write
    the lake" error over a generation that was committed."""
    import errno

    from wmo_lake.lake import ensure_duckdb_file

    runs = tmp_path / "runs"
    write_trial(_job(runs, 1), "a__1", turns=TURNS)
    ingest([runs], tmp_path / "lake", workers=1)
    write_trial(_job(runs, 2), "b__1", turns=TURNS)
    building = tmp_path / "lake" / f".{DUCKDB_FILE}.building"

    def full(src, dst, *args, **kwargs):  # type: ignore[no-untyped-def]
        Path(dst).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(shutil, "copyfile", full)
    with pytest.raises(LakeError) as failed:
        ingest([runs], tmp_path / "lake", workers=1)
    assert "generation 2 of the lake" in str(failed.value) and "is committed" in str(failed.value)
    assert not building.exists()
    monkeypatch.undo()
    store = Store(tmp_path / "lake")
    ensure_duckdb_file(store)
    assert _rows_of(tmp_path / "lake") == 2


def _rows_of(lake: Path) -> int:
    with duckdb.connect(str(lake / DUCKDB_FILE), read_only=True) as con:
        con.execute("SET file_search_path = ?", [str(lake)])
        return con.execute("SELECT count(*) FROM trials").fetchone()[0]
