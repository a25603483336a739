"""The library never imports the CLI layer (issue 12, item 5): `wmo_lake.cli` and
`wmo_lake.commands` sit on top of the library, never under it."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "wmo_lake"
CLI_LAYER = ("wmo_lake.cli", "wmo_lake.commands")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_library_module_imports_the_cli_layer() -> None:
    library = [
        p
        for p in PACKAGE.rglob("*.py")
        if p.name != "cli.py" and "commands" not in p.relative_to(PACKAGE).parts
    ]
    assert len(library) > 10
    offenders = {
        str(p.relative_to(PACKAGE)): sorted(n for n in _imports(p) if n.startswith(CLI_LAYER))
        for p in library
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_an_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from wmo_lake.commands.options import FORMATS\n", encoding="utf-8")
    assert "wmo_lake.commands.options" in _imports(module)
