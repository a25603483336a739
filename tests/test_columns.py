"""Column specs, declared once (wmo_lake/columns.py): the Arrow schemas and the typed result.json
decoder follow from them, and any change of a name, type or source moves the extract version, so
the next ingest re-reads every trial instead of leaving a new column null."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pyarrow
from conftest import FIXTURES
from harbor_shapes import write_job, write_trial

from wmo_lake import columns, extract
from wmo_lake.columns import (
    INT64,
    PARTITION_COLUMNS,
    RESULT,
    SPECS,
    STRING,
    Column,
    extract_version,
    result_fields,
)
from wmo_lake.discover import TrialTask, discover
from wmo_lake.fingerprint import EXTRACT_VERSION
from wmo_lake.ingest import ingest
from wmo_lake.pending import PendingRows
from wmo_lake.tables import TABLES, trajectories
from wmo_lake.tables.trial_result import typed_decoder


def _with_column(
    table: str, column: Column, specs: dict[str, columns.TableSpec] = SPECS
) -> dict[str, columns.TableSpec]:
    spec = specs[table]
    return specs | {table: dataclasses.replace(spec, columns=(*spec.columns, column))}


def _changed(table: str, column: str, **change: object) -> dict[str, columns.TableSpec]:
    spec = SPECS[table]
    changed = tuple(
        dataclasses.replace(c, **change) if c.name == column else c for c in spec.columns
    )
    return SPECS | {table: dataclasses.replace(spec, columns=changed)}


def test_every_table_schema_is_its_spec() -> None:
    assert list(TABLES) == list(SPECS)
    for name, table in TABLES.items():
        assert table.schema.names == SPECS[name].names
        assert table.unit_column == SPECS[name].unit_column


def test_extraction_fills_exactly_the_spec_columns(monkeypatch) -> None:
    """Rows are built as dicts (or, for steps, as lists per column), and Arrow would make a spec
    column they lack null (and drop a key the spec lacks) without a word: every row of the real
    fixtures has exactly its columns."""
    checked: set[str] = set()

    class CheckedTable:
        @staticmethod
        def from_pylist(rows: list[dict], schema: pyarrow.Schema) -> pyarrow.Table:
            table = next(t.name for t in TABLES.values() if t.schema.equals(schema))
            for row in rows:
                assert set(row) | PARTITION_COLUMNS == set(schema.names), (
                    table,
                    set(row) ^ set(schema.names),
                )
            checked.add(table)
            return pyarrow.Table.from_pylist(rows, schema=schema)

    class CheckedArrow:
        Table = CheckedTable

        def __getattr__(self, name: str) -> object:
            return getattr(pyarrow, name)

    original_table = trajectories._table

    def checked_table(columns, identity):
        names = set(columns) | set(identity) | PARTITION_COLUMNS
        table = next(t.name for t in TABLES.values() if set(t.schema.names) == names)
        assert all(len(values) == len(columns["file"]) for values in columns.values()), table
        checked.add(table)
        return original_table(columns, identity)

    class CheckedPendingRows(PendingRows):
        """The one-row tables extraction builds as Python columns (wmo_lake.pending)."""

        @classmethod
        def from_rows(cls, rows: list, names) -> PendingRows:  # type: ignore[override]
            names = list(names)
            table = next(t.name for t in TABLES.values() if t.schema.names == names)
            for row in rows:
                assert set(row) | PARTITION_COLUMNS == set(names), (table, set(row) ^ set(names))
            checked.add(table)
            return PendingRows.from_rows(rows, names)

    monkeypatch.setattr(extract, "pa", CheckedArrow())
    monkeypatch.setattr(extract, "PendingRows", CheckedPendingRows)
    monkeypatch.setattr(trajectories, "_table", checked_table)
    found = discover(FIXTURES / "harbor")
    for candidate in found.candidates:
        extract.extract_trial(TrialTask.of(candidate))
        extract.extract_job(candidate.job)
    assert checked >= {"jobs", "trials", "stop_reasons", "trajectories", "steps", "tool_calls"}


def test_the_extract_version_is_derived_from_the_specs() -> None:
    assert extract_version() == EXTRACT_VERSION
    new_column = _with_column("trials", Column("x_new", STRING, (RESULT, "x_new"), "new"))
    versions = {
        extract_version(),
        extract_version(new_column),
        extract_version(_changed("trials", "n_episodes", type=STRING)),
        extract_version(_changed("trials", "task_name", source=(RESULT, "task_id"))),
        extract_version(_changed("spans", "source", name="origin")),
    }
    assert len(versions) == 5
    # A meaning is documentation: re-reading every trial would change nothing.
    assert extract_version(_changed("trials", "task_name", meaning="reworded")) == extract_version()


def test_the_typed_decoder_reads_the_fields_the_specs_name() -> None:
    document = json.dumps({"trial_name": "t", "x_new": 7, "agent_result": {"n_turns": 3}})
    default = typed_decoder(result_fields()).decode(document)
    assert not hasattr(default, "x_new")
    specs = _with_column("trials", Column("x_new", INT64, (RESULT, "x_new"), "new"))
    turns = Column("n_turns", INT64, (RESULT, "agent_result.n_turns"), "")
    specs = _with_column("trials", turns, specs)
    decoded = typed_decoder(result_fields(specs)).decode(document)
    assert decoded.x_new == 7
    assert decoded.agent_result.n_turns == 3


def _ingest_in_a_process(runs: Path, lake: Path, new_column: bool) -> dict:
    """`ingest` in a fresh process, after (when `new_column`) a column is added to the trials spec
    the way a developer would add one: before anything reads the specs."""
    script = f"""
import dataclasses, json, sys
from pathlib import Path
from wmo_lake import columns
if {new_column}:
    spec = columns.SPECS["trials"]
    extra = columns.Column("task_name_again", columns.STRING, ("result.json", "task_name"), "")
    columns.SPECS["trials"] = dataclasses.replace(spec, columns=(*spec.columns, extra))
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
summary = ingest([Path({str(runs)!r})], Path({str(lake)!r}), workers=1)
names = [d[0] for d in connect(Path({str(lake)!r})).execute("SELECT * FROM trials").description]
print(json.dumps({{"summary": summary.as_dict(), "columns": names}}))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_changed_spec_re_reads_every_trial(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job")
    for i in range(2):
        write_trial(job, f"t__{i}")
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake, workers=1)
    same = _ingest_in_a_process(tmp_path / "runs", lake, new_column=False)
    assert (same["summary"]["trials_unchanged"], same["summary"]["committed"]) == (2, False)
    changed = _ingest_in_a_process(tmp_path / "runs", lake, new_column=True)
    summary = changed["summary"]
    assert (summary["trials_replaced"], summary["trials_unchanged"]) == (2, 0)
    assert "task_name_again" in changed["columns"]
