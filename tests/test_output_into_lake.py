"""An output path that is one of the lake's own files (its manifest, a segment, the catalog,
lake.duckdb, the hidden files beside them) is refused before anything runs: `sql -o
LAKE/manifest.json` replaced the manifest (the lake was lost), and an empty result written over a
segment took its rows without a word. A file of yours in the lake dir is written as any other."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import FIXTURES

import wmo_lake
from wmo_lake.cli import cli
from wmo_lake.export import ExportError
from wmo_lake.ingest import ingest
from wmo_lake.store import Store


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lake = tmp_path_factory.mktemp("built") / "lake"
    ingest([FIXTURES / "harbor" / "kit-e2e"], lake, workers=1)
    return lake


def _lake_files(lake: Path) -> dict[str, bytes]:
    return {str(p.relative_to(lake)): p.read_bytes() for p in lake.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("target", "command"),
    [
        ("manifest.json", ["sql", "SELECT 1 AS x", "--output"]),
        ("SEGMENT", ["sql", "SELECT 1 AS x WHERE false", "--output"]),
        ("lake.duckdb.csv", None),  # (a file of yours beside the lake's: written)
        ("catalog/x.parquet", ["export", "datums", "--no-split-guard", "--out"]),
        (".staging/c.jsonl", ["export", "conversations", "--no-split-guard", "--out"]),
        (".lake.duckdb.stamp.html", ["report", "--out"]),
    ],
    ids=["manifest", "segment", "yours", "catalog", "hidden", "report"],
)
def test_the_lakes_own_files_are_refused_as_outputs(
    built: Path, tmp_path: Path, target: str, command: list[str] | None
) -> None:
    lake = tmp_path / "lake"
    shutil.copytree(built, lake)
    if target == "SEGMENT":
        target = str(next((lake / "tables" / "spans").rglob("*.parquet")).relative_to(lake))
    before = _lake_files(lake)
    args = command or ["sql", "SELECT 1 AS x", "--output"]
    result = CliRunner().invoke(cli, [*args, str(lake / target), "--lake", str(lake)])
    if command is None:
        assert result.exit_code == 0, result.output
        assert (lake / target).read_text() == "x\n1\n"
        return
    assert result.exit_code == 2, result.output
    assert "is one of the lake's own files" in result.output
    assert _lake_files(lake) == before


def test_the_python_exports_refuse_them_too(built: Path) -> None:
    with pytest.raises(ExportError, match="one of the lake's own files"):
        wmo_lake.export_datums(built, built / "tables" / "d.parquet", no_split_guard=True)


@pytest.mark.parametrize(
    ("relative", "owned"),
    [
        ("manifest.json", True),
        ("lake.duckdb", True),
        ("tables/trials/x.parquet", True),
        ("catalog", True),
        (".lock", True),
        (".", True),
        ("report.html", False),
        ("../elsewhere.csv", False),
    ],
)
def test_what_the_lake_owns(tmp_path: Path, relative: str, owned: bool) -> None:
    lake = tmp_path / "lake"
    lake.mkdir()
    assert Store(lake).owns(lake / relative) is owned
