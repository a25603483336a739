"""Shared fixtures: paths to the bundled real harbor output."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def two_runs_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A lake of two 6-step training runs (tests/run_shapes.py): exp-a learns, has a regression,
    a newly solved task, an unreadable trial and a step of only unreadable trials; exp-b is flat."""
    from run_shapes import write_two_runs

    from wmo_lake.ingest import ingest

    root = tmp_path_factory.mktemp("two-runs")
    write_two_runs(root / "runs")
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"
