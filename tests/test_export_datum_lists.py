"""`wmo-lake export datums` gathers the token lists with numpy (wmo_lake.exports.datum_lists)
instead of reading them from the `datums` view: the exported rows must be exactly the view's,
values and Arrow types, on the edge-case trees (every variant of every rule), on seeded random
prefix-merge trees (breaks, partial prefixes kept as bases, empty sequences skipped, drops), with
the split guard and --where, across chunks, and when the gather refuses and the view writes."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from edge_case_trees import generate_tree
from harbor_shapes import write_job, write_sink, write_trial

from wmo_lake.exports import datum_lists
from wmo_lake.exports import datums as datums_export
from wmo_lake.exports.datums import COLUMNS, ORDER_BY, export_datums
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harbor"
Turn = tuple[list[int], list[int], list[float]]


def random_turns(rng: random.Random) -> list[Turn]:
    """Turns whose prompts extend, partly keep or drop the accumulated tokens."""
    turns: list[Turn] = []
    accumulated: list[int] = []
    for index in range(rng.randint(1, 7)):
        fresh = [rng.randint(1, 9) for _ in range(rng.randint(0, 4))]
        roll = rng.random()
        if index == 0 or roll < 0.2:
            prompt = fresh or [rng.randint(1, 9)]
        elif roll < 0.65:
            prompt = accumulated + fresh
        else:  # a break that keeps part of what came before: a base
            prompt = accumulated[: rng.randint(0, len(accumulated))] + fresh
        sampled = [rng.randint(1, 9) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        turns.append((prompt, sampled, [-round(rng.random(), 3) for _ in sampled]))
        accumulated = prompt + sampled
    return turns


def write_random_runs(runs: Path, seed: int) -> None:
    """Two batches (one pi-bridge, its spans from sinks) of random episodes over three tasks."""
    rng = random.Random(seed)
    sinks = runs.parent / f"tokens-{seed}"
    for step, pi_bridge in ((1, True), (2, False)):
        job = write_job(
            runs / f"r{seed}/harbor/step-{step:04d}/job",
            context_limit=24,
            token_sink_dir=str(sinks) if pi_bridge else None,
        )
        for index in range(14):
            name = f"trial-{step}-{index:02d}"
            turns = None if rng.random() < 0.1 else random_turns(rng)
            extra: dict[str, Any] = {}
            if pi_bridge and turns:
                write_sink(sinks, name, turns)
                turns = None
            write_trial(
                job,
                name,
                task_name=rng.choice(["t/a", "t/b", "t/c"]),
                reward=rng.choice([0.0, 0.5, 1.0, None]),
                turns=turns,
                **extra,
            )


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("datum-lists")
    shutil.copytree(FIXTURES, root / "runs" / "fixtures")
    generate_tree(root / "runs" / "generated", seed=7)
    generate_tree(root / "runs" / "generated-11", seed=11)
    for seed in (3, 4, 5):
        write_random_runs(root / "runs" / "random", seed)
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"


def view_table(lake: Path, settings: dict[str, Any], where: str = "true") -> pa.Table:
    con = connect(lake, settings, check=False)
    try:
        return con.sql(
            f"SELECT {', '.join(COLUMNS)} FROM datums WHERE {where} ORDER BY {ORDER_BY}"
        ).to_arrow_table()
    finally:
        con.close()


@pytest.fixture
def no_view_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """The export must take the gather: writing the view's own rows fails the test."""

    def refuse(*args: Any) -> int:
        raise AssertionError("the export fell back to the view's rows")

    monkeypatch.setattr(datums_export, "_write_parquet", refuse)


def exported(lake: Path, out: Path, **options: Any) -> pa.Table:
    export_datums(lake, out, **options)
    return pq.read_table(out)


SETTINGS = [
    {},
    {"context_budget": 12},  # overflow drops
    {"max_datum_tokens": 9},  # overlong drops
]


@pytest.mark.parametrize("settings", SETTINGS, ids=["defaults", "budget-12", "max-datum-9"])
def test_the_export_is_the_view_row_for_row(
    lake: Path, tmp_path: Path, settings: dict[str, Any], no_view_fallback: None
) -> None:
    view = view_table(lake, settings)
    table = exported(lake, tmp_path / "d.parquet", no_split_guard=True, settings=settings)
    assert table.schema == view.schema
    assert table.to_pylist() == view.to_pylist()
    assert view.num_rows > 100
    # what the trees are for: fragments, sequences that keep a base, every tree's batches
    assert any(i > 0 for i in view.column("fragment_index").to_pylist())
    con = connect(lake, settings, check=False)
    ((bases,),) = con.sql(
        "SELECT count(*) FROM prompt_bases JOIN datum_episodes USING (trial_key) "
        "WHERE drop_reason IS NULL"
    ).fetchall()
    con.close()
    assert bases > 0
    runs = {b.split("/")[0] for b in view.column("batch").to_pylist()}
    assert {"r3", "r4", "r5"} <= runs, runs


def test_the_manifest_counts_what_was_written(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "d.parquet"
    table = exported(lake, out, no_split_guard=True)
    manifest = json.loads(out.with_name(out.name + ".manifest.json").read_text())
    assert manifest["rows"] == table.num_rows
    assert manifest["exported"] == {
        "rows": table.num_rows,
        "tokens": sum(len(t) for t in table.column("model_input_tokens").to_pylist()),
        "loss_tokens": int(sum(sum(m) for m in table.column("loss_mask").to_pylist())),
        "fragments": sum(1 for i in table.column("fragment_index").to_pylist() if i > 0),
        "batches": len(set(table.column("batch").to_pylist())),
    }


def test_guard_and_where_select_the_same_rows_as_the_view(
    lake: Path, tmp_path: Path, no_view_fallback: None
) -> None:
    tasks = sorted({r["task_id"] for r in view_table(lake, {}).to_pylist()})
    assert len(tasks) > 2
    registry = tmp_path / "tasks.json"
    splits = ["train", "holdout"]
    registry.write_text(
        json.dumps([{"id": t, "split": splits[i % 2]} for i, t in enumerate(tasks)])
    )
    train = [t for i, t in enumerate(tasks) if i % 2 == 0]
    where = "n_tokens > 4 AND array_length(model_input_tokens) < 40"
    table = exported(lake, tmp_path / "d.parquet", tasks=registry, where=where)
    quoted = ", ".join("'" + t.replace("'", "''") + "'" for t in train)
    view = view_table(lake, {}, f"{where} AND task_id IN ({quoted})")
    assert 0 < table.num_rows < view_table(lake, {}).num_rows
    assert table.to_pylist() == view.to_pylist()


def test_rows_gathered_in_many_chunks_are_the_same(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_view_fallback: None
) -> None:
    monkeypatch.setattr(datum_lists, "CHUNK_TOKENS", 50)
    table = exported(lake, tmp_path / "d.parquet", no_split_guard=True)
    assert pq.ParquetFile(tmp_path / "d.parquet").num_row_groups > 10
    assert table.to_pylist() == view_table(lake, {}).to_pylist()


def test_when_the_gather_refuses_the_view_writes_the_same_rows(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def refuse(*args: Any) -> Any:
        calls.append(1)
        raise datum_lists.Mismatch("test")

    monkeypatch.setattr(datum_lists, "assemble", refuse)
    out = tmp_path / "d.parquet"
    table = exported(lake, out, no_split_guard=True)
    assert calls
    assert table.to_pylist() == view_table(lake, {}).to_pylist()
    manifest = json.loads(out.with_name(out.name + ".manifest.json").read_text())
    assert manifest["sources"] and manifest["datum_stats"]["datums"] >= table.num_rows


# --- assemble, by hand ---------------------------------------------------------------------------


def span_table(rows: list[tuple[int, int, list[int], list[int], list[float]]]) -> pa.Table:
    names = ["row_index", "call_index", "prompt_new_ids", "sampled_token_ids", "sampled_logprobs"]
    types = [pa.int64(), pa.int32(), pa.list_(pa.int64()), pa.list_(pa.int64())]
    types.append(pa.list_(pa.float64()))
    columns = list(zip(*rows, strict=True))
    return pa.table({n: pa.array(c, t) for n, c, t in zip(names, columns, types, strict=True)})


def base_table(rows: list[tuple[int, list[int]]]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) or [[], []]
    return pa.table(
        {
            "row_index": pa.array(columns[0], pa.int64()),
            "base_token_ids": pa.array(columns[1], pa.list_(pa.int64())),
        }
    )


def test_assemble_orders_by_row_then_call_with_the_base_first() -> None:
    spans = span_table(
        [  # given out of order, as a hash join returns them
            (1, 4, [], [9], [-0.9]),
            (0, 1, [4, 5], [12], [-0.3]),
            (1, 3, [7, 8], [13, 14], [-0.4, -0.5]),
            (0, 0, [1, 2, 3], [10, 11], [-0.1, -0.2]),
        ]
    )
    tokens, mask, logprobs, offsets = datum_lists.assemble(
        spans, base_table([(1, [1, 2])]), 2, [8, 7]
    )
    assert offsets.tolist() == [0, 8, 15]
    assert tokens.tolist() == [1, 2, 3, 10, 11, 4, 5, 12, 1, 2, 7, 8, 13, 14, 9]
    assert mask.tolist() == [0, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1]
    assert logprobs.tolist() == [0, 0, 0, -0.1, -0.2, 0, 0, -0.3, 0, 0, 0, 0, -0.4, -0.5, -0.9]


def test_assemble_takes_each_chunk_as_it_is() -> None:
    """DuckDB's Arrow results come in a chunk per batch of rows: the same rows, split any way,
    give the same lists, and each chunk's values are read where they are (not joined first)."""
    rows = [
        (1, 4, [], [9], [-0.9]),
        (0, 1, [4, 5], [12], [-0.3]),
        (2, 0, [20, 21, 22], [23], [-0.7]),
        (1, 3, [7, 8], [13, 14], [-0.4, -0.5]),
        (0, 0, [1, 2, 3], [10, 11], [-0.1, -0.2]),
        (2, 2, [24], [25, 26], [-0.8, -0.6]),
    ]
    bases = [(1, [1, 2]), (2, [30])]
    n_tokens = [8, 7, 8]
    whole = datum_lists.assemble(span_table(rows), base_table(bases), 3, n_tokens)
    spans = span_table(rows)
    split = pa.concat_tables(
        [spans.slice(0, 1), spans.slice(1, 3), spans.slice(4, 0), spans.slice(4)]
    )
    split_bases = pa.concat_tables([base_table(bases[:1]), base_table(bases[1:])])
    assert split.column("prompt_new_ids").num_chunks == 4
    chunks = datum_lists._flat(split.column("prompt_new_ids"), "prompt_new_ids")
    assert [values.tolist() for values, _ in chunks] == [
        [],
        [4, 5, 20, 21, 22, 7, 8],
        [],
        [1, 2, 3, 24],
    ]
    for (values, _), chunk in zip(chunks, split.column("prompt_new_ids").chunks, strict=True):
        if len(values):  # the chunk's own buffer, where its first list starts
            first = chunk.values.offset + chunk.offsets[0].as_py()
            assert values.ctypes.data == chunk.values.buffers()[1].address + 8 * first
    got = datum_lists.assemble(split, split_bases, 3, n_tokens)
    for ours, theirs in zip(got, whole, strict=True):
        assert ours.tolist() == theirs.tolist()
    # columns chunked apart (a table built column by column, not from record batches)
    apart = split.set_column(
        2, "prompt_new_ids", pa.chunked_array([spans.column("prompt_new_ids").combine_chunks()])
    )
    regathered = datum_lists.assemble(apart, base_table(bases), 3, n_tokens)
    for ours, theirs in zip(regathered, whole, strict=True):
        assert ours.tolist() == theirs.tolist()
    assert whole[0].tolist()[15:] == [30, 20, 21, 22, 23, 24, 25, 26]


@pytest.mark.parametrize(
    ("spans", "n_tokens", "why"),
    [
        ([(0, 0, [1], [2, 3], [-0.1])], [3], "differ in length"),
        ([(0, 0, [1], [2], [-0.1])], [3], "not the view's n_tokens"),
        ([(0, 0, None, [2], [-0.1])], [2], "a null in prompt_new_ids"),
    ],
)
def test_assemble_refuses_what_it_cannot_reproduce(
    spans: list[Any], n_tokens: list[int], why: str
) -> None:
    with pytest.raises(datum_lists.Mismatch, match=why):
        datum_lists.assemble(span_table(spans), base_table([]), 1, n_tokens)


def test_a_plan_row_matching_two_sequences_is_refused() -> None:
    rows = pa.table(
        {"batch": ["b"] * 2, "task_id": ["t"] * 2, "attempt": [1] * 2, "fragment_index": [0] * 2}
    )
    with pytest.raises(datum_lists.Mismatch, match="a datums row matches two merged sequences"):
        datum_lists.check_plan(rows)
    datum_lists.check_plan(rows.slice(0, 1))
    # two trial dirs of one name under one batch label are two attempts: no mismatch
    datum_lists.check_plan(rows.set_column(2, "attempt", pa.array([1, 2])))


def test_a_chunk_reads_only_the_partitions_of_its_rows() -> None:
    def rows(runs: list[str | None], steps: list[int | None]) -> pa.Table:
        return pa.table({"run": pa.array(runs, pa.string()), "step": pa.array(steps, pa.int64())})

    where, params = datum_lists._partition_filter(rows(["a", "a"], [3, 5]))
    assert where == "WHERE s.step BETWEEN $first_step AND $last_step AND s.run = $run"
    assert params == {"first_step": 3, "last_step": 5, "run": "a"}
    where, params = datum_lists._partition_filter(rows(["a", "b"], [3, 1]))
    assert (where, params) == ("WHERE s.step BETWEEN $first_step AND $last_step", params)
    assert params == {"first_step": 1, "last_step": 3}
    assert datum_lists._partition_filter(rows([None, "a"], [None, 1])) == ("", {})


def test_the_export_leaves_duckdbs_threads_as_it_found_them(lake: Path, tmp_path: Path) -> None:
    """A small lake's export runs on one DuckDB thread; the setting is the database's, which a
    caller's own connection to the same lake.duckdb shares, so it is set back."""
    con = connect(lake, check=False)
    try:
        ((before,),) = con.execute("SELECT current_setting('threads')").fetchall()
        export_datums(lake, tmp_path / "d.parquet", no_split_guard=True)
        ((after,),) = con.execute("SELECT current_setting('threads')").fetchall()
    finally:
        con.close()
    assert after == before
