"""One version string: wmo_lake.__version__; the package metadata and `--version` follow it."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import version
from pathlib import Path

from click.testing import CliRunner

import wmo_lake
from wmo_lake.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def test_the_metadata_takes_the_packages_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert version("wmo-lake") == wmo_lake.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", wmo_lake.__version__)


def test_version_option_prints_it() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and wmo_lake.__version__ in result.output
