"""A table's rows as Python column lists, turned into Arrow once per many trials.

Building an Arrow table costs ~0.1 ms however few rows it holds (schema checks, one array per
column), so a small trial's 6-8 one-row tables used to cost more than reading its files.
Extraction returns `PendingRows` for the tables whose values its own code has typed and range-
checked (trials, stop_reasons, tests, trajectories, steps, tool_calls); the segment writer
extends one buffer per table with them and builds Arrow once per flush.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa


class PendingRows:
    """Rows of one table as {column: values}; every column has `num_rows` values."""

    __slots__ = ("columns", "num_rows")

    def __init__(self, columns: dict[str, list[Any]], num_rows: int) -> None:
        self.columns = columns
        self.num_rows = num_rows

    @classmethod
    def from_rows(cls, rows: list[Mapping[str, Any]], names: Iterable[str]) -> PendingRows:
        """From row dicts; a column a row lacks is null."""
        return cls({name: [row.get(name) for row in rows] for name in names}, len(rows))

    def to_table(self, schema: pa.Schema) -> pa.Table:
        """The Arrow table; a column of `schema` these rows lack (run and step, which the
        segment writer sets from the partition) is null."""
        missing = [name for name in schema.names if name not in self.columns]
        columns = self.columns | {name: [None] * self.num_rows for name in missing}
        return pa.table(columns, schema=schema)

    def extend(self, other: PendingRows) -> None:
        for name, values in self.columns.items():
            values.extend(other.columns[name])
        self.num_rows += other.num_rows

    def __getstate__(self) -> tuple[dict[str, list[Any]], int]:
        return self.columns, self.num_rows

    def __setstate__(self, state: tuple[dict[str, list[Any]], int]) -> None:
        self.columns, self.num_rows = state
