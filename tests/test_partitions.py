"""The lake is Hive-partitioned by run and step: every table carries run and step, every segment
and catalog file sits in its unit's `run=<run>/step=<step>` dir, run labels unsafe in a path
round-trip through Hive/Spark escaping, DuckDB's `hive_partitioning` reads a table's dir (or the
manifest's files) to the lake's own rows, and a commit rewrites, compacts and catalogs only the
partitions it touches."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial
from partition_trees import NASTY_RUNS, STEPS, step_job, write_partition_tree

from wmo_lake import commit as commit_module
from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.store import (
    DEFAULT_PARTITION,
    MIXED,
    LakeError,
    Store,
    escape_partition_value,
    partition_of,
    partition_values,
)
from wmo_lake.tables import TABLES


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[tuple]:
    return sorted(con.execute(sql).fetchall(), key=repr)


@pytest.mark.parametrize(
    ("value", "segment"),
    [
        (None, DEFAULT_PARTITION),
        ("", DEFAULT_PARTITION),
        (7, "7"),
        ("a=b/c%d e", "a%3Db%2Fc%25d e"),
        ("quo'te\"d", "quo%27te%22d"),
        ("ünï ☃", "ünï ☃"),  # Spark decodes %XX as one char: non-ASCII stays UTF-8
        ("x#y?z:w*[a]^{b}\\", "x%23y%3Fz%3Aw%2A%5Ba%5D%5E%7Bb}%5C"),
        ("__HIVE_DEFAULT_PARTITION__", "%5F_HIVE_DEFAULT_PARTITION__"),  # (not the null one)
    ],
)
def test_partition_values_are_escaped_as_hive_and_spark_do(value, segment) -> None:
    assert escape_partition_value(value) == segment
    run, step = partition_values(partition_of(value if value != 7 else "r", 7))
    assert step == 7
    assert run == (None if value in (None, "") else "r" if value == 7 else value)


def test_every_file_sits_in_its_rows_partition(tmp_path: Path) -> None:
    ingest([write_partition_tree(tmp_path)], tmp_path / "lake", workers=1)
    store = Store(tmp_path / "lake")
    manifest = store.read_manifest()
    seen = set()
    for table in TABLES:
        assert {"run", "step"} <= set(TABLES[table].schema.names), table
        for partition, files in manifest.tables[table].items():
            run, step = partition_values(partition)
            for rel in files:
                assert rel.startswith(f"tables/{table}/{partition}/"), rel
                rows = pq.read_table(store.root / rel, columns=["run", "step"]).to_pylist()
                assert {(r["run"], r["step"]) for r in rows} <= {(run, step)}, rel
                seen.add((run, step))
    want = {(run, step) for run in NASTY_RUNS for step in STEPS} | {(None, None)}
    assert seen == want
    for partition, rel in manifest.catalog.items():
        assert rel.startswith(f"catalog/{partition}/"), rel


def test_duckdb_hive_partitioning_reads_each_table_dir_as_the_lake_does(tmp_path: Path) -> None:
    """Reading tables/<table>/ directly with hive_partitioning (run and step decoded from the
    path, not the files) gives the lake's rows, run and step, and so does the manifest's list."""
    ingest([write_partition_tree(tmp_path)], tmp_path / "lake", workers=1)
    lake = tmp_path / "lake"
    con = connect(lake)
    plain = duckdb.connect()
    manifest = Store(lake).read_manifest()
    for table in TABLES:
        want = _rows(con, f"SELECT * FROM {table}")
        direct = _rows(
            plain,
            f"SELECT * FROM read_parquet('{lake}/tables/{table}/*/*/*.parquet', "
            "hive_partitioning = true, union_by_name = true, "
            "hive_types = {'run': VARCHAR, 'step': BIGINT})",
        )
        assert direct == want, table
        files = [str(lake / rel) for rel in manifest.table_files(table)]
        # the manifest's files (the dir may still hold the previous generation's files)
        listed = _rows(
            plain,
            "SELECT * FROM read_parquet(["
            + ", ".join("'" + f.replace("'", "''") + "'" for f in files)
            + "], hive_partitioning = true, union_by_name = true, "
            "hive_types = {'run': VARCHAR, 'step': BIGINT})",
        )
        assert listed == want, table
    runs = {r for (r,) in con.execute("SELECT DISTINCT run FROM trials").fetchall()}
    assert runs == {*NASTY_RUNS, None}


def test_a_run_label_too_long_for_a_dir_name_leaves_only_its_jobs_out(tmp_path: Path) -> None:
    """90 '#' are a legal 90-byte run dir, but `run=` + 90 x '%23' is 274 bytes, past the 255-byte
    file-name limit: its job is one problem, the run beside it is ingested."""
    runs = tmp_path / "runs"
    long_run = "#" * 90
    write_trial(write_job(runs / "ok" / "harbor" / "step-0001" / "job"), "a__0", trial_id="a")
    write_trial(write_job(runs / long_run / "harbor" / "step-0001" / "job"), "b__0", trial_id="b")
    summary = ingest([runs], tmp_path / "lake", workers=1)
    assert summary.trials_new == 1
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT trial_key, run FROM trials").fetchall() == [("a", "ok")]
    problems = con.execute("SELECT kind, path, message FROM problems").fetchall()
    job_dir = str(runs / long_run / "harbor" / "step-0001" / "job")
    assert [(kind, path) for kind, path, _ in problems] == [("name_too_long", job_dir)]
    assert "274 bytes" in problems[0][2] and "1 trial dir(s)" in problems[0][2]


def test_rows_without_run_or_step_are_in_the_default_partition(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    job = write_job(runs / "exp" / "harbor" / "job")  # a run, no step-NNNN
    write_trial(job, "a__0", trial_id="a-0")
    (runs / "loop").symlink_to(runs, target_is_directory=True)  # a walk problem
    ingest([runs], tmp_path / "lake", workers=1)
    manifest = Store(tmp_path / "lake").read_manifest()
    assert list(manifest.tables["trials"]) == [f"run=exp/step={DEFAULT_PARTITION}"]
    con = connect(tmp_path / "lake")
    walk = con.execute("SELECT run, step FROM problems WHERE kind = 'symlink_loop'").fetchall()
    assert walk and set(walk) == {(None, None)}
    assert f"run={DEFAULT_PARTITION}/step={DEFAULT_PARTITION}" in manifest.tables["problems"]


def test_a_replaced_trial_rewrites_only_its_own_partition(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for step in (1, 2, 3):
        job = step_job(runs, "exp", step)
        for i in range(3):
            write_trial(job, f"t__{i}", trial_id=f"s{step}-{i}", reward=0.0)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    before = Store(lake).read_manifest()
    write_trial(runs / "exp" / "harbor" / "step-0002" / "job", "t__1", trial_id="s2-1", reward=1.0)
    summary = ingest([runs], lake, workers=1)
    assert (summary.trials_replaced, summary.trials_unchanged) == (1, 8)
    after = Store(lake).read_manifest()
    step2 = partition_of("exp", 2)
    for table in after.tables:
        for partition, files in after.tables[table].items():
            if partition != step2:
                assert files == before.tables[table][partition], (table, partition)
    assert after.tables["trials"][step2] != before.tables["trials"][step2]
    for partition, rel in after.catalog.items():  # only the touched partition's catalog
        assert (rel == before.catalog[partition]) == (partition != step2), partition
    rewards = dict(connect(lake).execute("SELECT trial_key, rewards FROM trials").fetchall())
    assert len(rewards) == 9 and "1.0" in str(rewards["s2-1"]) and "0.0" in str(rewards["s2-0"])


def test_a_trial_moved_to_another_step_replaces_its_old_rows(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    write_trial(step_job(runs, "exp", 1), "t__0", trial_id="moving", reward=0.0)
    write_trial(step_job(runs, "exp", 1), "t__1", trial_id="staying", reward=0.0)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    write_trial(step_job(runs, "exp", 2), "t__0", trial_id="moving", reward=1.0)
    # the old dir is gone too: the trial now lives at step 2 only
    import shutil

    shutil.rmtree(runs / "exp" / "harbor" / "step-0001" / "job" / "t__0")
    summary = ingest([runs], lake, workers=1)
    assert summary.trials_replaced == 1
    con = connect(lake)
    rows = con.execute("SELECT trial_key, step, rewards::VARCHAR FROM trials ORDER BY 1").fetchall()
    assert [row[:2] for row in rows] == [("moving", 2), ("staying", 1)]
    assert "1.0" in rows[0][2]
    spans = con.execute("SELECT DISTINCT step FROM spans WHERE trial_key = 'moving'").fetchall()
    assert spans == [(2,)]


def test_segments_merge_only_within_a_partition(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(commit_module, "MAX_SEGMENTS", 2)
    runs = tmp_path / "runs"
    lake = tmp_path / "lake"
    for n in range(4):  # four commits, each adding a trial to step 1 and one to step 2
        for step in (1, 2):
            write_trial(step_job(runs, "exp", step), f"t__{n}", trial_id=f"s{step}-{n}")
        ingest([runs], lake, workers=1)
    store = Store(lake)
    manifest = store.read_manifest()
    for partition, files in manifest.tables["trials"].items():
        assert len(files) <= 2, files
        _, step = partition_values(partition)
        for rel in files:
            values = pq.read_table(store.root / rel, columns=["step"]).column("step").to_pylist()
            assert set(values) == {step}, rel
    assert any("-c" in rel for rel in manifest.table_files("trials"))  # it did merge
    assert connect(lake).execute("SELECT count(*) FROM trials").fetchone() == (8,)


def test_a_lake_of_an_older_format_says_what_to_do(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "manifest.json").write_text(
        json.dumps({"format": "wmo-lake", "format_version": 2, "generation": 1, "tables": {}})
    )
    with pytest.raises(LakeError, match=r"format version 3.*ingest into a new lake directory"):
        ingest([tmp_path], lake, workers=1)


def test_a_lake_of_a_newer_format_asks_for_an_upgrade_not_a_deletion(tmp_path: Path) -> None:
    """A teammate's lake written by a newer wmo-lake was told to be deleted and ingested again."""
    lake = tmp_path / "lake"
    lake.mkdir()
    manifest = {"format": "wmo-lake", "format_version": 4, "wmo_lake_version": "9.1.0"}
    (lake / "manifest.json").write_text(json.dumps({**manifest, "generation": 1, "tables": {}}))
    result = CliRunner().invoke(cli, ["stats", "--lake", str(lake)])
    assert result.exit_code == 1, result.output
    assert "format version 4, newer than this wmo-lake reads (3)" in result.output
    assert "written by wmo-lake 9.1.0" in result.output and "Upgrade wmo-lake" in result.output
    assert "delete" not in result.output


def test_a_dir_of_another_tool_is_not_advised_deleted(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "manifest.json").write_text(json.dumps({"format": "delta", "version": 1}))
    with pytest.raises(LakeError) as raised:
        Store(lake).read_manifest()
    assert f"{lake} is not a wmo-lake lake" in str(raised.value)
    assert "format 'delta'" in str(raised.value) and "delete" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[]", "a JSON object was expected, got list"),
        ('{"format": "wmo-lake", "format_version": 3}', "field 'generation' must be int, got None"),
        (
            '{"format": "wmo-lake", "format_version": 3, "generation": 4, "tables": []}',
            "field 'tables' must be dict, got []",
        ),
        ('{"format": "wmo-', "it is not the JSON a wmo-lake commit writes"),
    ],
)
def test_a_damaged_manifest_is_an_error_naming_it_and_what_to_do(
    tmp_path: Path, text: str, says: str
) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    (lake / "manifest.json").write_text(text)
    with pytest.raises(LakeError) as raised:
        Store(lake).read_manifest()
    assert says in str(raised.value) and str(lake / "manifest.json") in str(raised.value)
    assert "ingest the runs again into a new lake directory" in str(raised.value)


def _view_sql(lake: Path, table: str) -> str:
    with duckdb.connect(str(lake / "lake.duckdb"), read_only=True) as db:
        return db.execute("SELECT sql FROM duckdb_views() WHERE view_name = ?", [table]).fetchone()[
            0
        ]


def test_tables_of_one_schema_are_read_without_union_by_name(tmp_path: Path) -> None:
    """union_by_name reads every file's footer each time a query binds (a file per step in a
    partitioned lake); a table whose files all have this code's schema does without it."""
    ingest([write_partition_tree(tmp_path)], tmp_path / "lake", workers=1)
    manifest = Store(tmp_path / "lake").read_manifest()
    assert set(manifest.schemas) == set(TABLES) and MIXED not in manifest.schemas.values()
    # (spans: lake.duckdb stores the light tables' rows, the heavy ones stay views over files)
    assert "union_by_name = false" in _view_sql(tmp_path / "lake", "spans").replace(
        "=false", " = false"
    )


def test_files_of_an_older_schema_are_read_by_name(tmp_path: Path) -> None:
    """A lake whose trials files predate a column: the commit marks the table MIXED for good
    and its view reads by name (the old files' rows get null in the new column)."""
    runs = tmp_path / "runs"
    write_trial(step_job(runs, "exp", 1), "t__0", trial_id="old")
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    store = Store(lake)
    (old_file,) = store.files(store.read_manifest(), "trials")
    pq.write_table(pq.read_table(old_file).drop_columns(["result_bytes"]), old_file)
    raw = json.loads(store.manifest_path.read_text())
    raw["schemas"]["trials"] = "an-earlier-schema"
    store.manifest_path.write_text(json.dumps(raw))
    write_trial(step_job(runs, "exp", 2), "t__0", trial_id="new")
    ingest([runs], lake, workers=1)
    assert store.read_manifest().schemas["trials"] == MIXED
    rows = connect(lake).execute("SELECT trial_key, result_bytes > 0 FROM trials ORDER BY 1")
    assert rows.fetchall() == [("new", True), ("old", None)]


def test_a_lake_whose_files_all_lack_a_column_is_queried_before_any_ingest(
    tmp_path: Path,
) -> None:
    """A lake written by a release before a column was added (every trials file lacks it), opened
    by this one before any ingest rewrites it: the views still bind (the column is null), and
    the stats are those of the same trials ingested afresh. Before, every view reading the
    column failed with DuckDB's 'Referenced column not found'."""
    runs = tmp_path / "runs"
    write_trial(step_job(runs, "exp", 1), "t__0", trial_id="old", reward=1)
    write_trial(step_job(runs, "exp", 1), "t__1", trial_id="older", reward=0)
    lake, fresh = tmp_path / "lake", tmp_path / "fresh"
    ingest([runs], lake, workers=1)
    ingest([runs], fresh, workers=1)
    store = Store(lake)
    for old_file in store.files(store.read_manifest(), "trials"):
        pq.write_table(pq.read_table(old_file).drop_columns(["agent_config"]), old_file)
    raw = json.loads(store.manifest_path.read_text())
    raw["schemas"]["trials"] = "an-earlier-schema"
    store.manifest_path.write_text(json.dumps(raw))
    (lake / "lake.duckdb").unlink()
    rows = connect(lake).execute("SELECT trial_key, agent_config FROM trials ORDER BY 1")
    assert rows.fetchall() == [("old", None), ("older", None)]
    stats = "SELECT * FROM rollout_stats ORDER BY batch"
    assert connect(lake).execute(stats).fetchall() == connect(fresh).execute(stats).fetchall()


def test_an_unchanged_step_reads_only_its_own_catalog_partition(
    tmp_path: Path, monkeypatch
) -> None:
    """The unchanged check needs the fingerprints of the dirs found, which live in their
    partitions' catalog files: re-ingesting one step of a lake of three reads only that one's
    (and the default partition's, where walk problems go), and writes nothing."""
    runs = tmp_path / "runs"
    for step in (1, 2, 3):
        write_trial(step_job(runs, "exp", step), "t__0", trial_id=f"s{step}")
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    read: list[str] = []
    original = Store.read_catalog

    def recording(self, manifest, partitions=None):
        read.extend(manifest.catalog if partitions is None else partitions)
        return original(self, manifest, partitions)

    monkeypatch.setattr(Store, "read_catalog", recording)
    summary = ingest([runs / "exp" / "harbor" / "step-0002"], lake, workers=1)
    assert (summary.trials_unchanged, summary.committed) == (1, False)
    assert set(read) == {partition_of("exp", 2), partition_of(None, None)}


def test_a_new_step_reads_other_partitions_catalogs_for_keys_only(
    tmp_path: Path, monkeypatch
) -> None:
    """A read trial's id may be stored from a dir of any step, so a new step learns every
    partition's unit keys; it reads in full only its own partitions and the one whose entry it
    replaces (the trial it holds again), and rewrites only those catalogs."""
    runs = tmp_path / "runs"
    for step in (1, 2, 3):
        write_trial(step_job(runs, "exp", step), "t__0", trial_id=f"s{step}", reward=0.0)
    lake = tmp_path / "lake"
    ingest([runs], lake, workers=1)
    before = Store(lake).read_manifest()
    write_trial(step_job(runs, "exp", 4), "t__0", trial_id="s1", reward=1.0)  # step 1's trial
    write_trial(step_job(runs, "exp", 4), "t__1", trial_id="s4", reward=0.0)
    full: list[str] = []
    keys: list[str] = []
    read_catalog, read_keys = Store.read_catalog, Store.read_catalog_keys

    def recording(self, manifest, partitions=None):
        full.extend(manifest.catalog if partitions is None else partitions)
        return read_catalog(self, manifest, partitions)

    def recording_keys(self, manifest, partitions):
        partitions = list(partitions)
        keys.extend(partitions)
        return read_keys(self, manifest, partitions)

    monkeypatch.setattr(Store, "read_catalog", recording)
    monkeypatch.setattr(Store, "read_catalog_keys", recording_keys)
    summary = ingest([runs / "exp" / "harbor" / "step-0004"], lake, workers=1)

    step = {n: partition_of("exp", n) for n in (1, 2, 3, 4)}
    assert (summary.trials_new, summary.trials_replaced) == (1, 1)
    assert set(keys) == {step[1], step[2], step[3]}
    assert set(full) == {step[4], partition_of(None, None), step[1]}
    after = Store(lake).read_manifest()
    for n in (2, 3):
        assert after.catalog[step[n]] == before.catalog[step[n]]
    assert after.catalog[step[1]] != before.catalog[step[1]]
    rows = connect(lake).execute("SELECT trial_key, step FROM trials ORDER BY 1").fetchall()
    assert rows == [("s1", 4), ("s2", 2), ("s3", 3), ("s4", 4)]
    # the next ingest of everything changes nothing (five trial dirs, but step 1's holds no rows:
    # its trial is step 4's now, so the summary counts the 4 trials the lake holds)
    again = ingest([runs], lake, workers=1)
    assert (again.trials_unchanged, again.committed) == (4, False)
    assert connect(lake).execute("SELECT count(*) FROM trials").fetchall() == [(4,)]


def test_a_filter_on_run_or_step_reads_only_those_partitions(tmp_path: Path) -> None:
    """The views decode run and step from the partition dirs, so DuckDB skips the other
    partitions' files: with every other step's files broken, a query of one step still runs (and
    a query of all steps does not), and the nasty run names select their own rows. (`spans`: a
    table lake.duckdb reads from its files; the light tables it stores keep the same decoded
    run and step.)"""
    ingest([write_partition_tree(tmp_path)], tmp_path / "lake", workers=1)
    lake = tmp_path / "lake"
    want = {
        (run, step): _rows(connect(lake), f"SELECT * FROM spans WHERE step = {step}")
        for run in NASTY_RUNS[:1]
        for step in STEPS
    }
    stored = _rows(connect(lake), "SELECT DISTINCT run, step FROM trials")
    manifest = Store(lake).read_manifest()
    for partition, files in manifest.tables["spans"].items():
        if partition_values(partition)[1] != STEPS[0]:
            for rel in files:  # no longer Parquet: opening one fails the query
                (lake / rel).write_bytes(b"not a parquet file")
    # lake.duckdb's own views (connect() would first check the reward key over every trial)
    con = duckdb.connect(str(lake / "lake.duckdb"), read_only=True)
    con.execute("SET file_search_path = ?", [str(lake)])
    assert _rows(con, f"SELECT * FROM spans WHERE step = {STEPS[0]}") == want[("plain", STEPS[0])]
    for run in NASTY_RUNS:
        got = con.execute(
            "SELECT DISTINCT run FROM spans WHERE step = ? AND run = ?", [STEPS[0], run]
        ).fetchall()
        assert got == [(run,)], run
    with pytest.raises(duckdb.Error, match="parquet"):
        con.execute("SELECT count(*) FROM spans").fetchall()
    assert _rows(con, "SELECT DISTINCT run, step FROM trials") == stored
    assert {(run, step) for run in NASTY_RUNS for step in STEPS} <= set(stored)
