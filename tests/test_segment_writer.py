"""The segment writer: rows appended to many partitions, interleaved and in every form (Python
rows built into Arrow together, Arrow tables), come out once each, in their partition's file,
with that partition's run and step, whether a file is written in one go or in row groups."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wmo_lake import commit as commit_module
from wmo_lake.commit import SegmentWriter
from wmo_lake.pending import PendingRows
from wmo_lake.store import partition_of
from wmo_lake.tables import TABLES

NAMES = [n for n in TABLES["stop_reasons"].schema.names if n not in ("run", "step")]


def _unit(key: str, episodes: int) -> dict[str, object]:
    return {name: None for name in NAMES} | {
        "trial_key": key,
        "batch": "b",
        "trial_name": key,
        "n_episodes": episodes,
        "trajectory_status": "ok",
    }


@pytest.mark.parametrize(("flush_rows", "max_open"), [(4096, 4), (3, 2), (1, 1)])
def test_every_row_lands_once_in_its_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flush_rows: int, max_open: int
) -> None:
    monkeypatch.setattr(commit_module, "FLUSH_PENDING_ROWS", flush_rows)
    monkeypatch.setattr(commit_module, "MAX_OPEN_PARTITIONS", max_open)
    writer = SegmentWriter(tmp_path, "000001-test")
    expected: dict[str, tuple[str | None, int | None]] = {}
    partitions = [("r1", 0), ("r1", 1), ("r/2", 0), (None, None), ("r1", 2)]
    # steps mostly in turn, some coming back after their partition was closed
    order = [0, 0, 1, 1, 2, 0, 3, 4, 4, 1, 2, 3, 0, 4, 2, 2, 1]
    for index, which in enumerate(order):
        run, step = partitions[which]
        partition = partition_of(run, step)
        key = f"t{index}"
        rows = [_unit(key, index)]
        if index % 3 == 2:  # an Arrow table, as a big trial's rows come
            schema = TABLES["stop_reasons"].schema
            table = pa.Table.from_pylist(
                [row | {"run": "stale", "step": -1} for row in rows], schema=schema
            )
            writer.append("stop_reasons", table, partition)
        else:
            writer.append("stop_reasons", PendingRows.from_rows(rows, NAMES), partition)
        expected[key] = (run, step)
    files = writer.close()
    seen: dict[str, tuple[str | None, int | None]] = {}
    for partition, rels in files["stop_reasons"].items():
        for rel in rels:
            assert rel.startswith(f"tables/stop_reasons/{partition}/")
            table = pq.read_table(tmp_path / rel)
            assert table.schema.equals(TABLES["stop_reasons"].schema)
            for row in table.to_pylist():
                assert row["trial_key"] not in seen
                assert row["n_episodes"] == int(row["trial_key"][1:])
                seen[row["trial_key"]] = (row["run"], row["step"])
                assert partition_of(row["run"], row["step"]) == partition
    assert seen == expected


@pytest.mark.parametrize(("message", "codec"), [("short", "LZ4"), ("x" * 2**21, "ZSTD")])
def test_a_file_written_in_one_go_is_lz4_only_when_small_in_bytes_too(
    tmp_path: Path, message: str, codec: str
) -> None:
    """A few rows are a small file (lz4: zstd's cost per column chunk outweighs its gain) only
    while they are few bytes too: a big trial's few hundred turns are megabytes of tokens,
    which zstd stores smaller (pyarrow names LZ4_RAW `LZ4`)."""
    names = [n for n in TABLES["stop_reasons"].schema.names if n not in ("run", "step")]
    rows = [_unit(f"t{n}", n) | {"exception_type": message} for n in range(3)]
    assert "exception_type" in names
    writer = SegmentWriter(tmp_path, "000001-test")
    writer.append("stop_reasons", PendingRows.from_rows(rows, names), partition_of("r", 1))
    (rel,) = writer.close()["stop_reasons"][partition_of("r", 1)]
    meta = pq.ParquetFile(tmp_path / rel).metadata
    assert meta.num_rows == 3
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {codec}


@pytest.mark.parametrize(("turns", "codec"), [(2, "LZ4"), (5000, "ZSTD")])  # small, big
def test_token_and_logprob_lists_are_encoded_for_what_they_hold(
    tmp_path: Path, turns: int, codec: str
) -> None:
    """Token ids delta-packed, logprobs byte-stream-split (wmo_lake/parquet_encodings.py), in a
    small segment and a big one; DuckDB reads the values back as they were written."""
    import duckdb

    from wmo_lake.tables import spans

    schema = TABLES["spans"].schema
    rows = [
        {
            "trial_key": "t",
            "batch": "b",
            "trial_name": "t",
            "call_index": call,
            "prompt_len": 3 * call + 2,
            "prompt_prefix_len": 3 * call,
            "prompt_new_ids": [151_644 - call, 9 + call],
            "sampled_token_ids": [call, 2**40 + call],
            "sampled_logprobs": [-0.25 * call, -1e-9],
            "n_sampled": 2,
            "source": "rollout_details",
        }
        for call in range(turns)
    ]
    table = pa.Table.from_pylist(rows, schema=schema)
    assert spans.SCHEMA.equals(schema)
    writer = SegmentWriter(tmp_path, "000001-test")
    writer.append("spans", table, partition_of("r", 1))
    (rel,) = writer.close()["spans"][partition_of("r", 1)]
    meta = pq.ParquetFile(tmp_path / rel).metadata.row_group(0)
    encodings = {
        meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)
    }
    assert meta.column(0).compression == codec
    assert "DELTA_BINARY_PACKED" in encodings["prompt_new_ids.list.element"]
    assert "DELTA_BINARY_PACKED" in encodings["sampled_token_ids.list.element"]
    assert "BYTE_STREAM_SPLIT" in encodings["sampled_logprobs.list.element"]
    back = duckdb.sql(
        "SELECT call_index, prompt_new_ids, sampled_token_ids, sampled_logprobs "
        f"FROM read_parquet('{tmp_path / rel}') ORDER BY call_index"
    ).fetchall()
    assert back == [
        (r["call_index"], r["prompt_new_ids"], r["sampled_token_ids"], r["sampled_logprobs"])
        for r in rows
    ]
