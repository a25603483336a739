"""A table's rows as Python column lists, turned into Arrow once per many trials.

Building an Arrow table costs ~0.1 ms however few rows it holds (schema checks, one array per
column), so a small trial's 6-8 one-row tables used to cost more than reading its files.
Extraction returns `PendingRows` for the tables whose values its own code has typed and range-
checked (trials, stop_reasons, tests, trajectories, steps, tool_calls); the segment writer
extends one buffer per table with them and builds Arrow once per flush.

A table made of row dicts (a trial's one `trials` row of 57 columns, its `stop_reasons` row)
keeps them as dicts until its columns are asked for: a list per column per trial, then a buffer
extended column by column, cost ~12 us a trial for `trials` alone, against ~1.5 us to append the
dict and read its columns out once per flush.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa


class PendingRows:
    """Rows of one table as {column: values} (`columns`); every column has `num_rows` values."""

    __slots__ = ("_columns", "_names", "_rows", "num_rows")

    def __init__(self, columns: dict[str, list[Any]], num_rows: int) -> None:
        self._columns: dict[str, list[Any]] | None = columns
        self._rows: list[Mapping[str, Any]] | None = None
        self._names: tuple[str, ...] = ()
        self.num_rows = num_rows

    @classmethod
    def from_rows(cls, rows: list[Mapping[str, Any]], names: Iterable[str]) -> PendingRows:
        """From row dicts (kept as they are until `columns` is read); a column a row lacks is
        null."""
        pending = cls({}, len(rows))
        pending._columns = None
        pending._rows = list(rows)
        pending._names = tuple(names)
        return pending

    @property
    def columns(self) -> dict[str, list[Any]]:
        if self._columns is None:
            rows = self._rows or []
            self._columns = {name: [row.get(name) for row in rows] for name in self._names}
            self._rows = None
        return self._columns

    @property
    def holds_row_dicts(self) -> bool:
        return self._rows is not None

    def empty_like(self) -> PendingRows:
        """No rows, as row dicts of the same columns (for rows that hold row dicts)."""
        return PendingRows.from_rows([], self._names)

    def to_table(self, schema: pa.Schema) -> pa.Table:
        """The Arrow table; a column of `schema` these rows lack (run and step, which the
        segment writer sets from the partition) is null."""
        columns = self.columns
        missing = [name for name in schema.names if name not in columns]
        columns = columns | {name: [None] * self.num_rows for name in missing}
        return pa.table(columns, schema=schema)

    def extend(self, other: PendingRows) -> None:
        if self._rows is not None and other._rows is not None and self._names == other._names:
            self._rows.extend(other._rows)
        else:
            for name, values in self.columns.items():
                values.extend(other.columns[name])
        self.num_rows += other.num_rows

    def __getstate__(self) -> tuple[dict[str, list[Any]], int]:
        return self.columns, self.num_rows

    def __setstate__(self, state: tuple[dict[str, list[Any]], int]) -> None:
        self._columns, self.num_rows = state
        self._rows, self._names = None, ()
