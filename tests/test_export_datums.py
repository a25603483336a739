"""`wmo-lake export datums` and `wmo_lake.exports.datums.load_verified` (issue 4, items 3-5), driven
through the real CLI on a small lake whose expected datums are worked out by hand below."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result
from harbor_shapes import add_agent, write_job, write_trial
from spec import DATUM_COLUMNS

from wmo_lake.cli import cli
from wmo_lake.exports.datums import load_verified, to_tinker
from wmo_lake.exports.discipline import ExportError
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

STEP1 = "r/harbor/step-0001/job-1"
STEP2 = "r/harbor/step-0002/job-2"
ISSUE_TURNS = [
    ([1, 2, 3], [10, 11], [-0.1, -0.2]),
    ([1, 2, 3, 10, 11, 4, 5], [12], [-0.3]),
    ([7, 8], [13, 14], [-0.4, -0.5]),
]
ONE_TURN = [([1], [2], [-0.5])]
REGISTRY = [
    {"id": "train", "split": "train"},
    {"id": "dev", "split": "dev"},
    {"id": "holdout", "split": "holdout"},
]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Step 1 (context_limit 100): a1 (the issue's example: 2 datums, 8 + 4 tokens, reward 1),
    a2 ([1,2]->[3]: 1 datum, reward 0), big (a 101-token prompt: overflow, reward 0), d1 / h1
    (dev / holdout, one 2-token datum each). Step 2: b1 (one 2-token datum, reward 1).
    train advantages in step 1: mean (1 + 0 + 0) / 3, so a1 +2/3, a2 -1/3; b1 alone: 0."""
    root = tmp_path_factory.mktemp("export-datums")
    runs = root / "runs"
    job = write_job(
        runs / STEP1, context_limit=100, max_tokens=64, max_turns=8, model_path="tinker://m/7"
    )
    write_trial(job, "a1", task_name="t/train", reward=1.0, turns=ISSUE_TURNS)
    write_trial(job, "a2", task_name="t/train", reward=0.0, turns=[([1, 2], [3], [-0.5])])
    write_trial(job, "big", task_name="t/train", reward=0.0, turns=[(list(range(101)), [1], [-1])])
    write_trial(job, "d1", task_name="t/dev", reward=1.0, turns=ONE_TURN)
    write_trial(job, "h1", task_name="t/holdout", reward=1.0, turns=ONE_TURN)
    other = write_job(runs / STEP2)
    write_trial(other, "b1", task_name="t/train", reward=1.0, turns=ONE_TURN)
    ingest([runs], root / "lake", workers=1)
    return root / "lake"


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps({"tasks": REGISTRY}), encoding="utf-8")
    return path


def run(*args: Any) -> Result:
    return CliRunner().invoke(cli, ["export", "datums", *map(str, args)])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def companion(out: Path) -> Path:
    return Path(f"{out}.manifest.json")


def test_refuses_without_a_split_guard_choice(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.parquet"
    result = run("--lake", lake, "--out", out)
    assert result.exit_code == 2
    assert "refusing to export without a split guard" in result.output
    assert "--tasks" in result.output and "--no-split-guard" in result.output
    assert not out.exists() and not companion(out).exists()


def test_exports_train_datums_with_a_full_manifest(
    lake: Path, registry: Path, tmp_path: Path
) -> None:
    out = tmp_path / "d.parquet"
    result = run("--lake", lake, "--out", out, "--tasks", registry)
    assert result.exit_code == 0, result.output
    assert (
        "wrote 4 datums (17 tokens, 7 trained, 1 fragment) from 2 of 2 batch(es) in scope"
        in result.output
    )
    assert "excluded: overflow_episodes 1, split_dev 1, split_holdout 1" in result.output

    table = pq.read_table(out)
    assert table.column_names == DATUM_COLUMNS
    rows = table.to_pylist()
    assert [(r["batch"], r["trial_name"], r["fragment_index"]) for r in rows] == [
        (STEP1, "a1", 0),
        (STEP1, "a1", 1),
        (STEP1, "a2", 0),
        (STEP2, "b1", 0),
    ]
    assert rows[0]["model_input_tokens"] == [1, 2, 3, 10, 11, 4, 5, 12]
    assert rows[0]["loss_mask"] == [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert rows[1]["model_input_tokens"] == [7, 8, 13, 14]
    assert rows[2]["model_input_tokens"] == [1, 2, 3]
    assert [r["advantage"] for r in rows] == pytest.approx([2 / 3, 2 / 3, -1 / 3, 0.0])
    assert [r["attempt"] for r in rows] == [1, 1, 2, 1]  # a1, a2, big rank within train
    assert (rows[0]["run"], rows[0]["step"], rows[3]["step"]) == ("r", 1, 2)

    manifest = json.loads(companion(out).read_text(encoding="utf-8"))
    assert manifest["schema_version"] == 1
    assert manifest["kind"] == "datums"
    assert manifest["dataset_sha256"] == sha256(out)
    assert manifest["rows"] == 4
    assert manifest["split"] == "train"
    assert manifest["tasks_sha256"] == sha256(registry)
    assert manifest["excluded"] == {"overflow_episodes": 1, "split_dev": 1, "split_holdout": 1}
    assert "not proof of correct grading" in manifest["trust"]
    assert manifest["wmo_lake_version"] and manifest["created_at"]
    step1, step2 = manifest["sources"]
    assert (step1["batch"], step1["trials"], step2["batch"], step2["trials"]) == (
        STEP1,
        5,
        STEP2,
        1,
    )
    assert (step1["model_path"], step1["max_tokens"], step1["max_turns"]) == ("tinker://m/7", 64, 8)
    assert (step1["context_limit"], step2["context_limit"]) == (100, None)
    assert [(a["max_turns"], a["trials"]) for a in step1["agents"]] == [(8, 5)]  # one agent
    assert manifest["parameters"] == {
        "lake": str(lake.resolve()),
        "batch": None,
        "run": None,
        "where": None,
        "tasks": str(registry),
        "no_split_guard": False,
        "context_budget": None,
        "context_budget_default": (
            "each trial's llm_kwargs.context_limit (or context_window), else 65536"
        ),
        "max_datum_tokens": 65536,
        "reward_key": "reward",
        "reward_mode": "raw",
    }
    # datum_stats over the source batches, before the split guard: a1 2, a2, d1, h1, b1
    assert manifest["datum_stats"] == {
        "datums": 6,
        "fragments": 1,
        "fragmentation_rate": pytest.approx(1 / 6),
        "overflow_drops": 1,
        "overlong_drops": 0,
        "loss_tokens": 9,  # 5 + 1 + 1 + 1 + 1
        "context_tokens": 12,  # (12 + 3 + 2 + 2 + 2) - 9
    }
    assert manifest["exported"] == {
        "rows": 4,
        "tokens": 17,
        "loss_tokens": 7,
        "fragments": 1,
        "batches": 2,
    }


def test_json_prints_the_manifest(lake: Path, registry: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.parquet"
    result = run("--lake", lake, "--out", out, "--tasks", registry, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == json.loads(companion(out).read_text(encoding="utf-8"))


def test_no_split_guard_exports_every_task(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.parquet"
    result = run("--lake", lake, "--out", out, "--no-split-guard", "--json")
    assert result.exit_code == 0, result.output
    manifest = json.loads(result.output)
    assert (manifest["rows"], manifest["split"], manifest["tasks_sha256"]) == (6, None, None)
    assert manifest["excluded"] == {"overflow_episodes": 1}
    assert {r["task_id"] for r in pq.read_table(out).to_pylist()} == {
        "train",
        "dev",
        "holdout",
    }


@pytest.mark.parametrize("existing", ["dataset", "manifest"])
def test_never_overwrites(lake: Path, registry: Path, tmp_path: Path, existing: str) -> None:
    out = tmp_path / "d.parquet"
    target = out if existing == "dataset" else companion(out)
    target.write_bytes(b"precious")
    result = run("--lake", lake, "--out", out, "--tasks", registry)
    assert result.exit_code == 1
    assert "already exists; an export never overwrites" in result.output
    assert target.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["tasks.json", target.name])


def test_an_unregistered_task_stops_the_export(lake: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps(REGISTRY[:2]), encoding="utf-8")  # no holdout
    out = tmp_path / "d.parquet"
    result = run("--lake", lake, "--out", out, "--tasks", tasks)
    assert result.exit_code == 1
    assert "task(s) 'holdout' are not in the task registry" in result.output
    assert "narrow the export with --batch / --run / --where) so no" in result.output
    assert not out.exists() and not companion(out).exists()


def test_a_malformed_registry_names_the_entry(lake: Path, tmp_path: Path) -> None:
    """What --tasks names is wrong: a usage error (exit 2), as `collect --tasks` has it."""
    tasks = tmp_path / "tasks.json"
    missing = run("--lake", lake, "--out", tmp_path / "d.parquet", "--tasks", tasks)
    assert missing.exit_code == 2 and "cannot read the task registry" in missing.output
    tasks.write_text(json.dumps([*REGISTRY, {"id": "x", "split": "eval"}]), encoding="utf-8")
    result = run("--lake", lake, "--out", tmp_path / "d.parquet", "--tasks", tasks)
    assert result.exit_code == 2
    assert "entry 3" in result.output and '`split` is "eval"' in result.output
    assert "Traceback" not in result.output
    tasks.write_text(json.dumps([*REGISTRY, {"id": "x"}]), encoding="utf-8")  # (was: is None)
    result = run("--lake", lake, "--out", tmp_path / "d.parquet", "--tasks", tasks)
    assert result.exit_code == 2 and "entry 3" in result.output
    assert "`split` is missing, expected one of train" in result.output


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--batch", "*/step-0002/*"], [(STEP2, "b1", 0)]),
        (["--run", "r", "--where", "reward < 1"], [(STEP1, "a2", 0)]),
        (["--where", "fragment_index > 0"], [(STEP1, "a1", 1)]),
    ],
)
def test_filters(
    lake: Path, registry: Path, tmp_path: Path, options: list[str], expected: list[Any]
) -> None:
    out = tmp_path / "d.parquet"
    result = run("--lake", lake, "--out", out, "--tasks", registry, *options)
    assert result.exit_code == 0, result.output
    rows = pq.read_table(out).to_pylist()
    assert [(r["batch"], r["trial_name"], r["fragment_index"]) for r in rows] == expected


def test_the_summary_tells_the_written_rows_from_the_scope(lake: Path, tmp_path: Path) -> None:
    """The first line counts what the file holds; the datum_stats line is the whole scope,
    said as such; `excluded` counts what --where left out (it said `none`, and the fragments
    line read as the file's)."""
    out = tmp_path / "d.parquet"
    where = "fragment_index = 0 AND step = 1"
    result = run("--lake", lake, "--out", out, "--no-split-guard", "--where", where)
    assert result.exit_code == 0, result.output
    written = pq.read_table(out).to_pylist()
    con = connect(lake)
    (in_scope,) = con.execute("SELECT count(*) FROM datums").fetchone() or (0,)
    fragments, batches = con.execute(
        "SELECT sum(fragments), count(*) FROM datum_stats"
    ).fetchone() or (0, 0)
    assert 0 < len(written) < in_scope and all(r["fragment_index"] == 0 for r in written)
    tokens = sum(len(r["model_input_tokens"]) for r in written)
    trained = sum(sum(r["loss_mask"]) for r in written)
    lines = result.output.splitlines()
    assert lines[0].startswith(
        f"wrote {len(written)} datums ({tokens} tokens, {trained:.0f} trained, 0 fragments) "
        f"from 1 of {batches} batch(es) in scope to "
    )
    assert (
        f"in scope, before --where and the split guard: {in_scope} datums, {fragments} of "
        "them fragments" in result.output
    )
    [excluded] = [line for line in lines if line.startswith("excluded: ")]
    assert f"where {in_scope - len(written)}" in excluded.split(": ", 1)[1].split(", ")
    manifest = json.loads(companion(out).read_text(encoding="utf-8"))
    assert manifest["exported"]["batches"] == 1 and manifest["exported"]["fragments"] == 0
    assert manifest["excluded"]["where"] == in_scope - len(written)


def test_a_label_two_job_dirs_share_counts_once(tmp_path: Path) -> None:
    """Two run trees with the same run name (or a copy that took a job's trials over) leave two
    job dirs with one batch label: the manifest's sources and scope totals count the batch once
    (a join on the label repeated each batch once per job dir: 2 datums in scope, 2 sources)."""
    for tree in ("a", "b"):
        job = write_job(tmp_path / tree / "exp" / "harbor" / "step-0000" / "job")
        write_trial(job, f"t__{tree}", trial_id=f"id-{tree}", reward=1.0, turns=ONE_TURN)
        ingest([tmp_path / tree], tmp_path / "lake", workers=1)
    out = tmp_path / "d.parquet"
    result = run("--lake", tmp_path / "lake", "--out", out, "--no-split-guard")
    assert result.exit_code == 0, result.output
    (in_scope,) = connect(tmp_path / "lake").execute("SELECT count(*) FROM datums").fetchone()
    assert in_scope == pq.read_metadata(out).num_rows == 2  # (both trials pooled in one batch)
    assert f"from 1 of 1 batch(es) in scope to {out}" in result.output, result.output
    assert f"in scope, before --where and the split guard: {in_scope} datums" in result.output
    manifest = json.loads(companion(out).read_text(encoding="utf-8"))
    assert [s["batch"] for s in manifest["sources"]] == ["exp/harbor/step-0000/job"]
    assert manifest["sources"][0]["trials"] == 2 and manifest["datum_stats"]["datums"] == 2


def test_trial_dirs_of_one_name_under_one_label_count_once(tmp_path: Path, registry: Path) -> None:
    """Two run trees of one run name whose trial dirs have the same names: the export's rows
    were matched to their token lists by (batch, trial_name, fragment_index), which matched each
    to both trials'; the file fell back to the view's rows, but the summary, `exported` and the
    split guard's counts came from the doubled match (12 rows, twice the tokens). The file's
    order is the same however the lake was built."""
    for tree in ("a", "b"):
        job = write_job(tmp_path / tree / "exp" / "harbor" / "step-0001" / "job")
        for i in range(3):
            write_trial(
                job, f"t{i}__x", task_name="t/dev", trial_id=f"{tree}-{i}", turns=ISSUE_TURNS
            )
        ingest([tmp_path / tree], tmp_path / "lake", workers=1)
    ingest([tmp_path / "a", tmp_path / "b"], tmp_path / "fresh", workers=1)
    written = []
    for lake in ("lake", "fresh"):
        out = tmp_path / f"{lake}.parquet"
        result = run("--lake", tmp_path / lake, "--out", out, "--no-split-guard")
        assert result.exit_code == 0, result.output
        rows = pq.read_table(out).to_pylist()
        tokens = sum(len(r["model_input_tokens"]) for r in rows)
        trained = sum(sum(r["loss_mask"]) for r in rows)
        fragments = sum(r["fragment_index"] > 0 for r in rows)
        assert (len(rows), fragments) == (12, 6)  # 6 trials of 2 datums (ISSUE_TURNS)
        assert result.output.startswith(
            f"wrote 12 datums ({tokens} tokens, {trained:.0f} trained, 6 fragments) from 1 of 1 "
        ), result.output
        manifest = json.loads(companion(out).read_text(encoding="utf-8"))
        assert manifest["exported"]["rows"] == 12 and manifest["datum_stats"]["datums"] == 12
        written.append(rows)
    assert written[0] == written[1]
    refused = run("--lake", tmp_path / "lake", "--out", tmp_path / "g.parquet", "--tasks", registry)
    assert "excluded: {'split_dev': 12}" in refused.output, refused.output


@pytest.mark.parametrize(
    ("options", "code", "expected"),
    [
        # a typo'd selection is a usage error, listing the runs as `compare` does
        (["--run", "nope"], 2, "no batch matches --run 'nope'; see"),
        (["--run", "nope"], 2, "for the batches (runs: r)"),
        (["--batch", "x*", "--run", "y"], 2, "no batch matches --batch 'x*' --run 'y'; see"),
        # so is a --where that is no condition over the columns
        (["--where", "no_such_column > 1"], 2, "cannot select the datums (check --where"),
        (["--where", ""], 2, "--where is empty"),
        (["--where", "passed AND AND"], 2, "must be one condition"),
        (["--where", "true); DROP TABLE x; SELECT (1"], 2, "must be one condition"),
        (["--where", "reward < 0) OR (true"], 2, "must be one condition"),
        (["--where", "true) UNION ALL (SELECT * FROM datums"], 2, "must be one condition"),
        (["--where", "CAST(trial_name AS INT) > 0"], 1, "cannot select the datums"),
        (["--where", "trial_name = 'zzz'"], 1, "no datums match --where"),
        (["--where", "task_id <> 'train'"], 1, "no datum of a train-split task to export"),
    ],
)
def test_bad_or_empty_selections_write_nothing(
    lake: Path, registry: Path, tmp_path: Path, options: list[str], code: int, expected: str
) -> None:
    out = tmp_path / "d.parquet"
    result = run("--lake", lake, "--out", out, "--tasks", registry, *options)
    assert result.exit_code == code
    assert expected in result.output
    assert "Traceback" not in result.output
    assert not out.exists() and not companion(out).exists()


def test_an_empty_lake_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "d.parquet"
    result = run("--lake", tmp_path / "lake", "--out", out, "--no-split-guard")
    assert result.exit_code == 1
    hint = f"the lake has no batches yet: `wmo-lake ingest RUNS --lake {tmp_path / 'lake'}`"
    assert hint in result.output
    assert not out.exists()


def test_context_budget_and_max_datum_tokens_options(
    lake: Path, registry: Path, tmp_path: Path
) -> None:
    # a1's second span is 7 + 1 = 8 tokens: a budget of 7 overflows it (and big, 102)
    out = tmp_path / "budget.parquet"
    result = run("--lake", lake, "--out", out, "--tasks", registry, "--context-budget", 7)
    assert result.exit_code == 0, result.output
    assert {r["trial_name"] for r in pq.read_table(out).to_pylist()} == {"a2", "b1"}
    manifest = json.loads(companion(out).read_text(encoding="utf-8"))
    assert manifest["parameters"]["context_budget"] == 7
    assert manifest["excluded"]["overflow_episodes"] == 2
    # a1's first datum is 8 tokens long: a cap of 7 drops the whole episode, a cap of 8 keeps it
    for cap, names, overlong in [(7, {"a2", "b1"}, 1), (8, {"a1", "a2", "b1"}, 0)]:
        out = tmp_path / f"cap{cap}.parquet"
        result = run("--lake", lake, "--out", out, "--tasks", registry, "--max-datum-tokens", cap)
        assert result.exit_code == 0, result.output
        assert {r["trial_name"] for r in pq.read_table(out).to_pylist()} == names
        manifest = json.loads(companion(out).read_text(encoding="utf-8"))
        assert manifest["excluded"].get("overlong_episodes", 0) == overlong
        assert manifest["datum_stats"]["overlong_drops"] == overlong
        assert manifest["parameters"]["max_datum_tokens"] == cap


def test_a_missing_lake_is_a_clear_error(registry: Path, tmp_path: Path) -> None:
    result = run(
        "--lake", tmp_path / "nolake", "--out", tmp_path / "d.parquet", "--tasks", registry
    )
    assert result.exit_code == 1
    assert "no lake at" in result.output


# --- load_verified and the tinker hand-off ------------------------------------------------------


@pytest.fixture
def exported(lake: Path, registry: Path, tmp_path: Path) -> Path:
    out = tmp_path / "d.parquet"
    assert run("--lake", lake, "--out", out, "--tasks", registry).exit_code == 0
    return out


def test_list_columns_are_encoded_for_what_they_hold(exported: Path) -> None:
    """Token ids delta-packed, float lists byte-stream-split (smaller and faster to write than
    plain + zstd); DuckDB and polars read them back to the same values as pyarrow."""
    meta = pq.ParquetFile(exported).metadata.row_group(0)
    encodings = {
        meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)
    }
    assert "DELTA_BINARY_PACKED" in encodings["model_input_tokens.list.element"]
    assert "BYTE_STREAM_SPLIT" in encodings["loss_mask.list.element"]
    assert "BYTE_STREAM_SPLIT" in encodings["sampled_logprobs.list.element"]
    assert "DELTA_BINARY_PACKED" not in encodings["n_tokens"]
    lists = ["model_input_tokens", "loss_mask", "sampled_logprobs"]
    expected = pq.read_table(exported, columns=lists).to_pylist()
    assert expected[0]["model_input_tokens"] == [1, 2, 3, 10, 11, 4, 5, 12]
    by_duckdb = duckdb.sql(f"SELECT {', '.join(lists)} FROM read_parquet('{exported}')")
    assert [dict(zip(lists, row, strict=True)) for row in by_duckdb.fetchall()] == expected
    assert pl.read_parquet(exported, columns=lists).to_dicts() == expected


def test_list_columns_skip_the_work_that_buys_nothing(exported: Path) -> None:
    """Delta-packed token ids are left uncompressed (zstd finds nothing in them), the loss mask
    is lz4, and no list column carries min/max statistics; the scalar columns keep zstd and
    their statistics."""
    meta = pq.ParquetFile(exported).metadata.row_group(0)
    columns = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    codecs = {path: column.compression for path, column in columns.items()}
    assert codecs.pop("model_input_tokens.list.element") == "UNCOMPRESSED"
    assert codecs.pop("loss_mask.list.element") == "LZ4"
    assert set(codecs.values()) == {"ZSTD"}
    with_statistics = {path for path, column in columns.items() if column.is_stats_set}
    assert not {path for path in with_statistics if path.endswith(".list.element")}
    assert {"n_tokens", "reward", "trial_name"} <= with_statistics


def test_load_verified_returns_the_rows(exported: Path, registry: Path) -> None:
    rows = load_verified(exported, tasks=registry)
    assert rows.columns == DATUM_COLUMNS
    assert rows.height == 4
    assert rows.get_column("trial_name").to_list() == ["a1", "a1", "a2", "b1"]
    assert load_verified(exported).height == 4  # without a registry: sha256 and rows only


def test_load_verified_then_to_tinker(exported: Path, registry: Path) -> None:
    pytest.importorskip("tinker")
    first = to_tinker(load_verified(exported, tasks=registry))[0]
    assert first.model_input.to_ints() == [1, 2, 3, 10, 11, 4, 5]
    assert first.loss_fn_inputs["target_tokens"].to_numpy().tolist() == [2, 3, 10, 11, 4, 5, 12]
    np.testing.assert_allclose(
        first.loss_fn_inputs["advantages"].to_numpy(),
        np.float32([0, 0, 2 / 3, 2 / 3, 0, 0, 2 / 3]),
    )


def test_a_tampered_dataset_fails_to_load(exported: Path, registry: Path) -> None:
    table = pq.read_table(exported)
    rewards = table.column("reward").to_pylist()
    rewards[0] = 0.0
    pq.write_table(table.set_column(12, "reward", [rewards]), exported)
    with pytest.raises(ExportError, match="was changed after export"):
        load_verified(exported, tasks=registry)


def test_a_tampered_manifest_fails_to_load(exported: Path, registry: Path) -> None:
    manifest = json.loads(companion(exported).read_text(encoding="utf-8"))
    companion(exported).write_text(json.dumps({**manifest, "rows": 5}), encoding="utf-8")
    with pytest.raises(ExportError, match="holds 4 rows but its manifest records 5"):
        load_verified(exported, tasks=registry)


def test_loading_with_another_registry_fails(exported: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps([*REGISTRY, {"id": "new", "split": "train"}]), encoding="utf-8")
    with pytest.raises(ExportError, match="exported against a task registry with sha256"):
        load_verified(exported, tasks=other)


def test_an_unguarded_export_does_not_load_as_train(
    lake: Path, registry: Path, tmp_path: Path
) -> None:
    out = tmp_path / "all.parquet"
    assert run("--lake", lake, "--out", out, "--no-split-guard").exit_code == 0
    with pytest.raises(ExportError, match=r"without a split guard .* load it with no registry"):
        load_verified(out, tasks=registry)


def test_the_export_does_not_load_polars_or_numpy() -> None:
    """Start-up is part of the export's tokens/s: the libraries only reading back and the tinker
    hand-off use load when those are called."""
    import subprocess
    import sys

    check = (
        "import sys, wmo_lake.exports.datums, wmo_lake.commands.export; "
        "print(sorted({'polars', 'numpy'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_real_process_ends_with_everything_written(
    lake: Path, registry: Path, tmp_path: Path
) -> None:
    """`wmo-lake` ends an export's process without the interpreter's teardown (os._exit): the
    manifest it prints is complete, and the dataset and manifest on disk are whole and verify.
    A failure still exits the ordinary way (code 1, its message)."""
    import subprocess
    import sys

    out = tmp_path / "d.parquet"
    command = [sys.executable, "-m", "wmo_lake.cli", "export", "datums", "--lake", str(lake)]
    command += ["--out", str(out), "--tasks", str(registry)]
    done = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    printed = json.loads(done.stdout)
    assert printed == json.loads(companion(out).read_text(encoding="utf-8"))
    assert printed["dataset_sha256"] == sha256(out)
    assert load_verified(out, tasks=registry).height == printed["rows"] == 4
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1
    assert "already exists" in again.stderr


@pytest.mark.parametrize("third", ["second", "none"])
def test_a_batch_of_several_agents_lists_each_in_the_manifest(tmp_path: Path, third: str) -> None:
    """A job of two agents (caps 5 and 2, max_tokens 64 and 60): the manifest's source batch
    names no one model or cap for all its datums (null), and lists each agent with its recorded
    caps and its number of trials. A trial that records no agent is agents[0]'s (README, the
    `trials` section: "... else the job's `agents[0]`"), not an agent of its own."""
    job = write_job(tmp_path / "runs/r/harbor/step-0001/job", max_turns=5, max_tokens=64)
    second = add_agent(job, "openai/gpt-4o-mini", max_turns=2, llm_kwargs={"max_tokens": 60})
    config = json.loads((job / "config.json").read_text())
    turns = [([1, 2], [3], [-0.5])]
    write_trial(job, "a__1", task_name="a", reward=1.0, turns=turns)
    write_trial(job, "a__2", task_name="a", reward=0.0, turns=turns, agent=second)
    third_agent = second if third == "second" else None
    write_trial(job, "a__3", task_name="a", reward=1.0, turns=turns, agent=third_agent)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "d.parquet"
    result = run("--lake", tmp_path / "lake", "--out", out, "--no-split-guard")
    assert result.exit_code == 0, result.output
    (source,) = json.loads(companion(out).read_text(encoding="utf-8"))["sources"]
    assert (source["model_name"], source["max_turns"], source["max_tokens"]) == (None, None, None)
    first = config["agents"][0]["model_name"]
    second_row, first_row = ("openai/gpt-4o-mini", 2, 60), (first, 5, 64)
    expected = {  # (the agent of more trials first)
        "second": [(*second_row, 2), (*first_row, 1)],
        "none": [(*first_row, 2), (*second_row, 1)],
    }[third]
    assert [
        (a["model_name"], a["max_turns"], a["max_tokens"], a["trials"]) for a in source["agents"]
    ] == expected


def test_a_stop_once_the_export_is_whole_keeps_it_and_says_so(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or SIGTERM) after FILE and its manifest were in place, while their dir was being
    synced: the export's abort removed both, a finished export gone. From the manifest's rename
    on, a stop removes nothing and says the export was written."""
    from wmo_lake.exports import discipline

    def sync(path: Path | str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(discipline, "fsync_path", sync)
    out = tmp_path / "d.parquet"
    result = run("--lake", str(lake), "--out", str(out), "--no-split-guard")
    assert result.exit_code == 130
    assert result.output.strip().splitlines()[-1] == (
        f"interrupted after the command had finished: {out} and its manifest are written in full"
    )
    assert out.is_file() and companion(out).is_file()
    assert json.loads(companion(out).read_text())["dataset_sha256"] == sha256(out)


def _leaves_nothing(out: Path) -> bool:
    return not any(out.parent.iterdir())


@pytest.mark.parametrize("result", ["cut short", "whole"])
def test_a_ctrl_c_that_duckdb_took_still_stops_the_export(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, result: str
) -> None:
    """A Ctrl-C that lands inside DuckDB may raise nothing there, or surface as another error:
    a gathered column cut short ("Column 10 had 64 while previous column had 7", exit 1), or
    the connection busy with the interrupted call. It is the stop the user asked for: exit 130,
    one line, nothing written."""
    import contextlib
    import signal

    from wmo_lake.exports import datum_lists

    gather = datum_lists.list_columns

    def interrupted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        with contextlib.suppress(KeyboardInterrupt):  # (taken by the query, as DuckDB does)
            signal.raise_signal(signal.SIGINT)
        columns = gather(*args, **kwargs)
        if result == "cut short":
            return {name: column.slice(0, len(column) - 1) for name, column in columns.items()}
        return columns

    monkeypatch.setattr(datum_lists, "list_columns", interrupted)
    out = tmp_path / "out" / "d.parquet"
    out.parent.mkdir()
    stopped = run("--lake", str(lake), "--out", str(out), "--no-split-guard")
    assert stopped.exit_code == 130, stopped.output
    assert stopped.output.strip() == "interrupted: nothing was written or changed"
    assert _leaves_nothing(out), sorted(out.parent.iterdir())


def test_a_stop_waits_for_the_write_in_flight_before_closing_the_file(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk is encoded in a thread while the next is gathered. A stop in the gather closed
    the Parquet writer under the encoding thread's write: the process crashed (SIGSEGV,
    "pure virtual method called") and left its partial file."""
    import threading
    import time

    from wmo_lake.exports import datum_lists, datums

    events: list[str] = []
    writing = threading.Event()
    real_writer = datums._parquet_writer

    class SlowWriter:
        def __init__(self, path: Path, schema: Any) -> None:
            self.writer = real_writer(path, schema)

        def __enter__(self) -> SlowWriter:
            return self

        def __exit__(self, *exc_info: object) -> None:
            events.append("close")
            self.writer.close()

        def write_table(self, table: Any, **kwargs: Any) -> None:
            events.append("write")
            writing.set()
            time.sleep(0.3)
            self.writer.write_table(table, **kwargs)
            events.append("written")

    gather = datum_lists.list_columns
    calls: list[int] = []

    def stopped_in_the_second_gather(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(1)
        if len(calls) == 2:
            writing.wait(5)
            raise KeyboardInterrupt
        return gather(*args, **kwargs)

    monkeypatch.setattr(datums, "_parquet_writer", SlowWriter)
    monkeypatch.setattr(datum_lists, "list_columns", stopped_in_the_second_gather)
    monkeypatch.setattr(datum_lists, "CHUNK_TOKENS", 1)  # (a chunk per row)
    out = tmp_path / "out" / "d.parquet"
    out.parent.mkdir()
    stopped = run("--lake", str(lake), "--out", str(out), "--no-split-guard")
    assert stopped.exit_code == 130, stopped.output
    assert events == ["write", "written", "close"]
    assert _leaves_nothing(out), sorted(out.parent.iterdir())


# `export datums` with both --where and the split guard: the manifest's `excluded` counts each
# rule's datums apart (`where`: what --where left out of the scope; `split_<split>`: what the guard
# left out of --where's rows). Pins `totals["datums"] - len(tasks_of_rows)` in exports/datums.py
# (subtracting the rows left after the guard counted the guard's datums under `where` too).
#
# Each trial has one turn, one span: upstream's data.py builds one datum of it (a trial's spans
# accumulate into one sequence; one span is one sequence, one datum). Three trials in scope: t1 and
# t2 of the train task, d1 of the dev task; --where leaves out t2; the guard leaves out d1.


def test_where_and_split_guard_are_counted_apart(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs/r/harbor/step-0001/job")
    for name, task in (("t1", "t/train"), ("t2", "t/train"), ("d1", "t/dev")):
        write_trial(job, name, task_name=task, reward=1.0, turns=ONE_TURN)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    registry = tmp_path / "tasks.json"
    registry.write_text(
        json.dumps([{"id": "train", "split": "train"}, {"id": "dev", "split": "dev"}])
    )
    out = tmp_path / "d.parquet"
    where = "trial_name <> 't2'"
    result = run("--lake", tmp_path / "lake", "--out", out, "--tasks", registry, "--where", where)
    assert result.exit_code == 0, result.output
    assert [r["trial_name"] for r in pq.read_table(out).to_pylist()] == ["t1"]
    manifest = json.loads(Path(f"{out}.manifest.json").read_text())
    assert manifest["datum_stats"]["datums"] == 3
    assert manifest["excluded"] == {"split_dev": 1, "where": 1}
