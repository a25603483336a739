"""The ingest in the README's steps: the orchestrator, the fingerprint and the reader processes
build no rows (every row is built in wmo_lake/extract.py or wmo_lake/tables/), so each table's
rows have one home (that an unchanged re-ingest loads no pyarrow is tested in
test_incremental.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import wmo_lake

PACKAGE = Path(wmo_lake.__file__).parent
STEPS = ["ingest.py", "fingerprint.py", "readers.py", "discover.py", "store.py"]
ROW_BUILDERS = {"ProblemLog", "from_pylist", "from_pydict", "from_arrays", "row"}


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


@pytest.mark.parametrize("module", STEPS)
def test_step_modules_build_no_rows(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text())
    imported = _imports(tree)
    assert not {name for name in imported if name.split(".")[0] == "pyarrow"}, module
    assert not {name for name in imported if name.startswith("wmo_lake.tables")}, module
    called = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
    }
    assert not called & ROW_BUILDERS, f"{module} builds rows: {called & ROW_BUILDERS}"
