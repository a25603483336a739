"""The lake's tables: one module per table, each with its Arrow `SCHEMA` and its extraction.

`TABLES` is the registry the store and the views read: name -> (schema, the column that names the
unit a row belongs to, so a re-ingested trial or job replaces exactly its own rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from wmo_lake.tables import (
    ctrf_tests,
    jobs,
    spans,
    steps,
    stop_reasons,
    tool_calls,
    trajectories,
    trials,
)
from wmo_lake.tables.fields import PROBLEMS_SCHEMA


@dataclass(frozen=True)
class Table:
    name: str
    schema: pa.Schema
    unit_column: str
    description: str


TABLES: dict[str, Table] = {
    table.name: table
    for table in [
        Table("jobs", jobs.SCHEMA, "job_key", "one row per harbor job dir"),
        Table("trials", trials.SCHEMA, "trial_key", "one row per trial (result.json)"),
        Table(
            "spans",
            spans.SCHEMA,
            "trial_key",
            "one row per sampled turn, prompts prefix-compressed",
        ),
        Table("stop_reasons", stop_reasons.SCHEMA, "trial_key", "stop-reason evidence per trial"),
        Table("tests", ctrf_tests.SCHEMA, "trial_key", "one row per CTRF test"),
        Table("trajectories", trajectories.SCHEMA, "trial_key", "one row per ATIF trajectory file"),
        Table("steps", steps.SCHEMA, "trial_key", "one row per ATIF trajectory step"),
        Table("tool_calls", tool_calls.SCHEMA, "trial_key", "one row per tool call of a step"),
        Table("problems", PROBLEMS_SCHEMA, "unit_key", "one row per thing that could not be read"),
    ]
}
