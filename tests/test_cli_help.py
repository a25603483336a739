"""The top-level help lists every command, and each command module imports (a lazy command whose
module is missing would break `wmo-lake --help` for everyone)."""

from __future__ import annotations

from click.testing import CliRunner

from wmo_lake.cli import COMMANDS, cli


def test_top_level_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0, result.output
    for name in COMMANDS:
        assert f"  {name}" in result.output, name
    for name in COMMANDS:
        assert CliRunner().invoke(cli, [name, "--help"]).exit_code == 0, name
