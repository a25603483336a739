"""What an installed wheel holds: every package of wmo_lake and every file the code reads. The
list in pyproject.toml is written by hand, and it had left out `wmo_lake.exports`, so that
`pip install .` gave a `wmo-lake export` that failed on import (an editable install, which the
tests use, reads the source tree and hid it)."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

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


@pytest.mark.slow
def test_an_installed_wheel_runs_the_main_commands(tmp_path: Path) -> None:
    """The tests import the checkout (an editable install), which hid two faults of a real
    install: the wheel had no `wmo_lake.exports`, and the views were looked up through
    importlib.resources, whose path for sql/ (no __init__.py) named no folder, so every query
    failed. Here the wheel is built, installed apart from the checkout, and run."""
    source = tmp_path / "source"  # (a copy: setuptools leaves build/ in the dir it builds)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for part in ("wmo_lake", "sql"):
        shutil.copytree(ROOT / part, source / part, ignore=ignore)
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("wmo_lake-*.whl")
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), wheel],
        check=True,
        capture_output=True,
    )
    # the installed copy first (the checkout's editable finder comes after sys.path), run from
    # a dir without the checkout
    env = {**os.environ, "PYTHONPATH": str(site), "WMO_LAKE": str(tmp_path / "lake")}

    def run(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "wmo_lake.cli", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

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
