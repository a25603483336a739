"""The lake's tables: one module per table, with its extraction; every column's name, type,
source and meaning are declared in `wmo_lake/columns.py`, and the Arrow schemas follow from it.

`TABLES` is the registry the store and the views read: name -> (schema, the column that names the
unit a row belongs to, so a re-ingested trial or job replaces exactly its own rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from wmo_lake.columns import SPECS, arrow_schema


@dataclass(frozen=True)
class Table:
    name: str
    schema: pa.Schema
    unit_column: str
    description: str  # what one row is
    # String columns of long free text, nearly all distinct: Parquet dictionary encoding would
    # hash every value only to fall back to plain pages, the bulk of a trajectory's write time.
    free_text: frozenset[str] = frozenset()


FREE_TEXT = {
    "steps": frozenset({"message", "reasoning_content", "observation"}),
    "tool_calls": frozenset({"arguments"}),
}

TABLES: dict[str, Table] = {
    name: Table(
        name,
        arrow_schema(spec),
        spec.unit_column,
        f"one row per {spec.grain}",
        FREE_TEXT.get(name, frozenset()),
    )
    for name, spec in SPECS.items()
}
