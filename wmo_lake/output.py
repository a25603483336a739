"""Writing a query result as table | csv | json | jsonl | parquet, to stdout or a file."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json
import math
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

FORMATS = ("table", "csv", "json", "jsonl", "parquet")  # what `render` writes


def _plain(value: Any) -> Any:
    """A JSON-ready copy of a value DuckDB returned (maps come back as dicts already)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    return value


def to_arrow(relation: duckdb.DuckDBPyRelation) -> pa.Table:
    """The relation as one Arrow table (DuckDB 1.x returns a table, 2.x a batch reader)."""
    import pyarrow as pa  # here, not at the top: the commands import FORMATS from this module

    result = relation.arrow()
    return result.read_all() if isinstance(result, pa.RecordBatchReader) else result


def rows_as_dicts(relation: duckdb.DuckDBPyRelation) -> list[dict[str, Any]]:
    names = relation.columns
    return [dict(zip(names, (_plain(v) for v in row), strict=True)) for row in relation.fetchall()]


def _csv_cell(value: Any) -> Any:
    value = _plain(value)
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict | list) else value


def render(
    relation: duckdb.DuckDBPyRelation, fmt: str, output: Path | None, stdout: TextIO
) -> None:
    """Write `relation` in `fmt` to `output` (a file) or `stdout`."""
    if fmt == "parquet":
        if output is None:
            raise ValueError("--format parquet needs --output FILE.parquet")
        import pyarrow.parquet as pq

        pq.write_table(to_arrow(relation), output, compression="zstd")
        return
    buffer = io.StringIO()
    if fmt == "table":
        import polars as pl  # only this format needs it; keeps `wmo-lake` quick to start

        frame = pl.from_arrow(to_arrow(relation))
        with pl.Config(
            tbl_rows=-1,
            tbl_cols=-1,
            fmt_str_lengths=60,
            tbl_width_chars=200,
            tbl_hide_dataframe_shape=True,
            tbl_hide_column_data_types=True,
        ):
            buffer.write(f"{frame}\n")
    elif fmt == "csv":
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(relation.columns)
        for row in relation.fetchall():
            writer.writerow([_csv_cell(v) for v in row])
    elif fmt == "json":
        json.dump(rows_as_dicts(relation), buffer, ensure_ascii=False, indent=2)
        buffer.write("\n")
    elif fmt == "jsonl":
        for record in rows_as_dicts(relation):
            buffer.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if output is None:
        stdout.write(buffer.getvalue())
    else:
        output.write_text(buffer.getvalue(), encoding="utf-8")
