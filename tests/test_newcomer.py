"""Set-up as a newcomer reads it: `make demo` writes the default ./lake (git-ignored), the README
says how to put `wmo-lake` on the PATH, `wmo-lake stats` then needs no --lake, and the help texts
and README name WMO's modules, never the seeds' file numbers."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from wmo_lake.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
SEED_WORDS = re.compile(r"\bseeds?\b(?! data)|\bseed 0\d\d", re.I)


def test_the_demo_writes_the_default_lake() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^DEMO_LAKE \?= lake$", makefile, re.M)
    assert "rm -rf $(DEMO_LAKE)" not in makefile  # ./lake may hold the user's own batches
    assert "/lake/" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_the_readme_says_how_to_get_wmo_lake_on_the_path() -> None:
    setup = README.split("## Everyday use", 1)[0]
    assert "source .venv/bin/activate" in setup and 'PATH="$PWD/.venv/bin:$PATH"' in setup
    assert "wmo-lake stats" in setup


def test_stats_needs_no_lake_option_after_the_demo(tmp_path: Path, monkeypatch) -> None:
    from wmo_lake.ingest import ingest

    shutil.copytree(ROOT / "fixtures" / "harbor", tmp_path / "fixtures" / "harbor")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WMO_LAKE", raising=False)
    ingest([Path("fixtures/harbor")], Path("lake"), workers=1)  # what `make demo` runs
    result = CliRunner().invoke(cli, ["stats"], env={"COLUMNS": ""})
    assert result.exit_code == 0, result.output
    assert "offline-demo" in result.stdout and "offline-terminus2" in result.stdout


def _all_help() -> dict[str, str]:
    texts = {"wmo-lake": CliRunner().invoke(cli, ["--help"]).output}
    for name in COMMANDS:
        command = cli.get_command(click.Context(cli), name)
        assert command is not None
        texts[name] = CliRunner().invoke(cli, [name, "--help"]).output
        if isinstance(command, click.Group):
            for sub in command.list_commands(click.Context(command)):
                texts[f"{name} {sub}"] = CliRunner().invoke(cli, [name, sub, "--help"]).output
    return texts


@pytest.mark.parametrize("source", ["README", "help"])
def test_wmo_modules_by_name_never_seed_numbers(source: str) -> None:
    texts = {"README.md": README} if source == "README" else _all_help()
    for name, text in texts.items():
        found = SEED_WORDS.findall(text)
        assert not found, (name, found)
    if source == "help":
        assert "WMO's `rollout_stats`" in texts["stats"]


def test_environment_lake_is_not_required(monkeypatch) -> None:
    monkeypatch.delenv("WMO_LAKE", raising=False)
    assert os.environ.get("WMO_LAKE") is None
    lake_option = next(
        p for p in cli.get_command(click.Context(cli), "stats").params if p.name == "lake"
    )
    assert str(lake_option.default) == "lake"
