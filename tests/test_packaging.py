"""What an installed wheel holds: every package of wmo_lake and every file the code reads. The
list in pyproject.toml is written by hand, and it had left out `wmo_lake.exports`, so that
`pip install .` gave a `wmo-lake export` that failed on import (an editable install, which the
tests use, reads the source tree and hid it)."""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parent.parent
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"][
    "setuptools"
]


def _package_dir(package: str) -> Path:
    mapped = SETUPTOOLS.get("package-dir", {})
    for prefix in sorted(mapped, key=len, reverse=True):
        if package == prefix or package.startswith(prefix + "."):
            rest = package.removeprefix(prefix).strip(".").replace(".", "/")
            return ROOT / mapped[prefix] / rest
    return ROOT / package.replace(".", "/")


def test_every_package_is_in_the_wheel() -> None:
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "wmo_lake").rglob("__init__.py")
    }
    assert "wmo_lake.exports" in found and len(found) >= 5
    assert found <= set(SETUPTOOLS["packages"]), "add these to pyproject.toml's packages"


def test_every_data_file_is_in_the_wheel() -> None:
    """A file of a package that is not Python (the views, Spark's log config) ships only when
    package-data names it."""
    patterns = SETUPTOOLS["package-data"]
    missing = []
    for package in SETUPTOOLS["packages"]:
        folder = _package_dir(package)
        assert folder.is_dir(), f"{package}: no folder {folder}"
        for path in folder.iterdir():
            if path.is_dir() or path.suffix in (".py", ".pyc"):
                continue
            if not any(fnmatch.fnmatch(path.name, p) for p in patterns.get(package, [])):
                missing.append(str(path.relative_to(ROOT)))
    assert SETUPTOOLS["package-dir"]["wmo_lake.sql"] == "sql"
    assert missing == [], "add these to pyproject.toml's package-data"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel `pip wheel` builds from the checkout (from a copy: setuptools leaves build/ in
    the dir it builds)."""
    source = tmp_path_factory.mktemp("source")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for part in ("wmo_lake", "sql"):
        shutil.copytree(ROOT / part, source / part, ignore=ignore)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    wheels = tmp_path_factory.mktemp("wheels")
    _pip("wheel", "--no-deps", "-w", str(wheels), str(source))
    (built,) = wheels.glob("wmo_lake-*.whl")
    return built


def _pip(*args: str, python: str = sys.executable) -> None:
    done = subprocess.run([python, "-m", "pip", *args, "-q"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _runner(python: str, cwd: Path, env: dict[str, str]) -> Callable[..., str]:
    """A `wmo-lake ARGS...` run with `python` in `cwd`: its stdout (it must succeed)."""

    def run(*args: str) -> str:
        done = subprocess.run(
            [python, "-m", "wmo_lake.cli", *args], cwd=cwd, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    return run


@pytest.mark.slow
def test_an_installed_wheel_runs_the_main_commands(wheel: Path, tmp_path: Path) -> None:
    """The tests import the checkout (an editable install), which hid two faults of a real
    install: the wheel had no `wmo_lake.exports`, and the views were looked up through
    importlib.resources, whose path for sql/ (no __init__.py) named no folder, so every query
    failed. Here the wheel is installed apart from the checkout, and run."""
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--target", str(site), str(wheel))
    # the installed copy first (the checkout's editable finder comes after sys.path), run from
    # a dir without the checkout
    env = {**os.environ, "PYTHONPATH": str(site), "WMO_LAKE": str(tmp_path / "lake")}
    run = _runner(sys.executable, tmp_path, env)
    where = subprocess.run(
        [sys.executable, "-c", "import wmo_lake; print(wmo_lake.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(site), where
    run("ingest", str(ROOT / "fixtures" / "harbor" / "kit-e2e"))
    assert "kit-e2e" in run("stats")
    assert run("sql", "SELECT count(*) AS n FROM trials", "--format", "csv") == "n\n6\n"
    run("export", "datums", "--out", str(tmp_path / "d.parquet"), "--no-split-guard")
    assert (tmp_path / "d.parquet").stat().st_size > 0
    # the columns' meanings come from the README: the installed package's long description
    assert "the TrialResult `id`, or `dir:` + the resolved trial dir" in run("schema", "trials")
    run("report", "--out", str(tmp_path / "report.html"))


def _floors() -> list[str]:
    """pyproject.toml's dependencies at the lowest version each allows on this Python
    (`name>=X` -> `name==X`), and sqlglot's (the spark extra's transpiler, checked without a
    JVM)."""
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    sqlglot = [r for r in project["optional-dependencies"]["spark"] if r.startswith("sqlglot")]
    floors = []
    for text in [*project["dependencies"], *sqlglot]:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue  # (another Python's bound)
        (bound,) = requirement.specifier
        assert bound.operator == ">=", f"{text}: a lower bound `>=` is expected"
        floors.append(f"{requirement.name}=={bound.version}")
    assert len({floor.split("==")[0] for floor in floors}) == len(floors)
    return floors


@pytest.mark.slow
def test_the_lowest_versions_pyproject_allows_give_the_same_lake(
    wheel: Path, tmp_path: Path
) -> None:
    """The tests run the versions constraints.txt pins; pyproject's lower bounds were never run,
    and three were false: duckdb 1.4 failed the first ingest of the bundled runs (a batch with
    no step), pyarrow 17 could not load with numpy hidden (every ingest), and before pyarrow 26
    the datums export imported pandas, no dependency. Here the wheel is installed at every
    lower bound and its lake, stats and exports are the pinned versions', and the SQL its
    views reach Spark as too (sqlglot's lower bound, which could not parse them at 26)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    _pip("install", *_floors(), str(wheel), python=python)
    runs = tmp_path / "harbor"
    shutil.copytree(ROOT / "fixtures" / "harbor", runs)
    outputs = {}
    for side, interpreter in (("floors", python), ("pinned", sys.executable)):
        work = tmp_path / side
        work.mkdir()
        run = _runner(interpreter, work, {**os.environ, "WMO_LAKE": str(work / "lake")})
        run("ingest", str(runs))
        stats = json.loads(run("stats", "--json"))
        run("export", "datums", "--out", str(work / "d.parquet"), "--no-split-guard")
        run("export", "conversations", "--out", str(work / "c.jsonl"), "--no-split-guard")
        datums = pq.read_table(work / "d.parquet")
        outputs[side] = (stats, datums, (work / "c.jsonl").read_text(encoding="utf-8"))
    transpiled = {}
    for side, interpreter in (("floors", python), ("pinned", sys.executable)):
        transpiled[side] = subprocess.run(
            [
                interpreter,
                "-c",
                "import json, wmo_lake.spark as s; print(json.dumps(s.spark_views()))",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    assert transpiled["floors"] == transpiled["pinned"], "the views reach Spark as other SQL"
    assert outputs["floors"][1].num_rows > 0
    assert outputs["floors"][0] == outputs["pinned"][0]
    assert outputs["floors"][1].equals(outputs["pinned"][1])
    assert outputs["floors"][2] == outputs["pinned"][2]


def test_every_docstring_is_valid_utf8_text() -> None:
    """Python 3.13 cleans docstrings at compile time, through UTF-8: one holding a lone
    surrogate (`'\\udcff'` written as an escape in settings.py's) failed to compile there, and
    with it `import wmo_lake` and `make setup` (3.12 compiles it)."""
    import ast

    sources = [*(ROOT / "wmo_lake").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    bad = []
    for path in sources:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node, clean=False)
                try:
                    (doc or "").encode("utf-8")
                except UnicodeEncodeError:
                    bad.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}")
    assert len(sources) > 100
    assert bad == [], "write these docstrings' escapes as \\\\udcff (or make them raw)"
