"""Every view's grain, declared once here and checked (the cheap form of dbt's unique / not_null
tests): the grain's key columns are never null and never repeat, and the view has exactly as many
rows as the relation its grain names. A view missing from GRAINS fails, so a new view declares its
grain when it is added.

Checked on one lake holding the real harbor fixtures and a generated tree that exercises every
rule (unreadable trials, a batch of only unreadable trials, an empty job dir, spans that break
the prefix chain, ...), with every view non-empty, so no check passes vacuously."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import pytest
from edge_case_trees import generate_tree
from harbor_shapes import write_job

from wmo_lake.ingest import ingest
from wmo_lake.lake import connect, view_sources

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harbor"

# view -> (its key columns, the relation with one row per view row: `SELECT count(*) FROM <it>`).
GRAINS: dict[str, tuple[tuple[str, ...], str]] = {
    "settings": ((), "(SELECT 1)"),
    "spans_full": (("trial_key", "call_index"), "spans"),
    "span_lengths": (("trial_key", "call_index"), "spans"),
    "cells": (("trial_key",), "trials"),
    "trial_caps": (("trial_key",), "trials"),
    "trial_stop_reasons": (("trial_key",), "trials"),
    "trial_records": (("trial_key",), "trials"),
    "trial_records_with_spans": (("trial_key",), "trials"),
    "episodes": (("trial_key",), "trials"),
    # every batch: with trials, whose trial dirs were all unreadable, or a job dir with none
    "rollout_stats": (
        ("batch",),
        "(SELECT batch FROM trials UNION "
        "SELECT batch FROM problems WHERE kind = 'unreadable_trial' AND batch IS NOT NULL "
        "UNION SELECT batch FROM jobs)",
    ),
    "datum_spans": (("trial_key", "call_index"), "spans"),
    "datum_sequences": (
        ("trial_key", "sequence_index"),
        "(SELECT DISTINCT trial_key, sequence_index FROM datum_spans)",
    ),
    "datum_episodes": (("trial_key",), "(SELECT DISTINCT trial_key FROM spans)"),
    # sequences after the first whose opening prompt keeps some of the tokens before it
    "prompt_bases": (
        ("trial_key", "sequence_index"),
        "(SELECT 1 FROM datum_spans WHERE sequence_index > 0 AND NOT extends_previous "
        "AND prompt_prefix_len > 0)",
    ),
    "datums": (  # (attempt, not trial_name: two dirs of one label may share a trial name)
        ("batch", "task_id", "attempt", "fragment_index"),
        "(SELECT 1 FROM datum_episodes, range(n_datums) WHERE drop_reason IS NULL)",
    ),
    "datum_stats": (("batch",), "(SELECT DISTINCT batch FROM trials)"),
    # one per agent step of a main trace that is not copied context, one per subagent file
    # with an agent step
    "conversations": (
        ("trial_key", "trace_source", "episode"),
        "(SELECT trial_key, file_index, step_index FROM steps WHERE trace_source = 'main' "
        "AND source = 'agent' AND NOT coalesce(is_copied_context, false) UNION ALL "
        "SELECT DISTINCT trial_key, file_index, NULL FROM steps "
        "WHERE trace_source <> 'main' AND source = 'agent')",
    ),
}


@pytest.fixture(scope="module")
def con(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    root = tmp_path_factory.mktemp("grains")
    shutil.copytree(FIXTURES, root / "runs" / "fixtures")
    generate_tree(root / "runs" / "generated", seed=11)
    write_job(root / "runs" / "empty" / "harbor" / "step-0001" / "job")  # (a batch, no trials)
    ingest([root / "runs"], root / "lake", workers=1)
    return connect(root / "lake")


def test_every_view_declares_its_grain() -> None:
    assert sorted(GRAINS) == sorted(name for name, _ in view_sources())


@pytest.mark.parametrize("view", sorted(GRAINS))
def test_the_view_has_its_declared_grain(con: duckdb.DuckDBPyConnection, view: str) -> None:
    key, rows = GRAINS[view]
    (count,) = con.execute(f"SELECT count(*) FROM {view}").fetchone() or (0,)
    assert count > 0, f"{view} is empty on the test lake: the check would prove nothing"
    (expected,) = con.execute(f"SELECT count(*) FROM {rows}").fetchone() or (0,)
    assert count == expected, f"{view} has {count} rows, its grain says {expected}"
    if not key:
        assert count == 1
        return
    columns = ", ".join(key)
    (distinct,) = con.execute(
        f"SELECT count(*) FROM (SELECT DISTINCT {columns} FROM {view})"
    ).fetchone() or (0,)
    assert distinct == count, f"{view}: ({columns}) repeats"
    nulls = " OR ".join(f"{c} IS NULL" for c in key)
    (null_keys,) = con.execute(f"SELECT count(*) FROM {view} WHERE {nulls}").fetchone() or (0,)
    assert null_keys == 0, f"{view}: ({columns}) is null in {null_keys} rows"
