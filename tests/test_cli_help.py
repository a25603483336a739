"""The top-level help lists every command, and each command module imports (a lazy command whose
module is missing would break `wmo-lake --help` for everyone)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from wmo_lake.cli import COMMANDS, cli


def test_top_level_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0, result.output
    for name in COMMANDS:
        assert f"  {name}" in result.output, name
    for name in COMMANDS:
        assert CliRunner().invoke(cli, [name, "--help"]).exit_code == 0, name


def test_every_command_and_group_help_shows_examples() -> None:
    """(`wmo-lake export --help` had none, where its two commands had.)"""
    import click

    commands = [[name] for name in COMMANDS]
    for name in COMMANDS:
        command = cli.get_command(click.Context(cli), name)
        if isinstance(command, click.Group):
            commands += [[name, sub] for sub in command.list_commands(click.Context(command))]
    for path in commands:
        result = CliRunner().invoke(cli, [*path, "--help"])
        assert "Examples:" in result.output, path


@pytest.mark.parametrize(
    "args",
    [
        ["stats", "--max-tokens", "abc"],
        ["stats", "--last", "abc"],
        ["sql", "--limit", "abc", "SELECT 1"],
        ["ingest", "--workers", "abc", "."],
        ["collect", "--template", "t.yaml", "--run-dir", "r", "--step", "0", "--attempts", "abc"],
        ["export", "datums", "--max-datum-tokens", "abc", "--out", "d.parquet"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_count_that_is_no_number_is_said_to_be_no_integer(args: list[str]) -> None:
    """click calls its bounded integer type "integer range": `'abc' is not a valid integer
    range`, for an option whose help shows N and [x>=1]."""
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "'abc' is not a valid integer.\n" in result.output, result.output
    help_text = CliRunner().invoke(cli, [*args[: 2 if args[0] == "export" else 1], "--help"])
    assert "INTEGER RANGE" not in help_text.output
