"""Settings declared once (issue 12, item 1): the registry in wmo_lake/settings.py is the only
place a default is written; the options, the `settings` view and the README follow from it."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import click
import duckdb
import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect, settings_row, sql_dir
from wmo_lake.settings import SETTINGS, SettingError, markdown_table, variables, view_columns

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = Path("wmo_lake/settings.py")
# Not sources of a default: the README (held equal to the registry below), the tests and the
# reference implementation (an independent oracle: it must not import the code it checks), and
# the real harbor fixtures.
NOT_SOURCES = ("README.md", "tests/", "reference/", "fixtures/")


def _source_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        Path(name)
        for name in listed
        if not name.startswith(NOT_SOURCES)
        and Path(name).suffix in {".py", ".sql", ".toml", ".md", ".cfg", ""}
        and (ROOT / name).is_file()
    ]


def _spellings(value: int) -> list[str]:
    """Ways to write an integer literal: 65536, 65_536, 2**16, 1 << 16."""
    patterns = [rf"(?<![\w.]){value}(?![\w.])", rf"(?<![\w.]){value:_}(?![\w.])"]
    if value & (value - 1) == 0:
        power = value.bit_length() - 1
        patterns += [rf"\b2\s*\*\*\s*{power}\b", rf"\b1\s*<<\s*{power}\b"]
    return patterns


def _mentions(text: str, name: str) -> bool:
    forms = (name, name.replace("_", "-"), name.replace("_", " "))
    return any(form in text.lower() for form in forms)


def test_each_default_is_written_once() -> None:
    """A default's literal near its setting's name (same line, or the next or previous one)
    anywhere but the registry is a second copy of it."""
    files = _source_files()
    assert REGISTRY in files and Path("sql/settings.sql") in files
    problems = []
    for path in files:
        lines = (ROOT / path).read_text(encoding="utf-8", errors="replace").splitlines()
        for setting in SETTINGS.values():
            default = setting.default
            if isinstance(default, int):
                patterns = [re.compile(p) for p in _spellings(default)]
                in_registry = sum(1 for s in SETTINGS.values() if s.default == default)
                found = [
                    n
                    for n, line in enumerate(lines)
                    if any(p.search(line) for p in patterns)
                    and _mentions("\n".join(lines[max(n - 1, 0) : n + 2]), setting.name)
                ]
                # the registry writes it once per setting whose default it is
                if path == REGISTRY and len(found) <= in_registry:
                    continue
                problems += [f"{path}:{n + 1}: {default} ({setting.name})" for n in found]
            elif isinstance(default, str) and path != REGISTRY:
                quoted = re.compile(rf"""['"`]{re.escape(default)}['"`]""")
                others = [c for c in setting.choices or () if c != default]
                for n, line in enumerate(lines):
                    lists_choices = others and all(c in line for c in others)
                    if quoted.search(line) and _mentions(line, setting.name) and not lists_choices:
                        problems.append(f"{path}:{n + 1}: {default!r} ({setting.name}): {line}")
    assert not problems, "a default written outside wmo_lake/settings.py:\n" + "\n".join(problems)


def test_only_the_settings_view_reads_variables() -> None:
    for path in sorted(sql_dir().glob("*.sql")):
        reads = re.findall(r"getvariable\('(\w+)'\)", path.read_text(encoding="utf-8"))
        if path.stem == "settings":
            assert sorted(reads) == sorted(s.variable for s in SETTINGS.values())
            assert len(reads) == len(set(reads))  # each once
        else:
            assert not reads, f"{path.name} reads {reads}; read the settings view instead"


def test_the_default_check_catches_a_second_copy(tmp_path: Path) -> None:
    """The scan above is not vacuous: a default pasted into a view is found."""
    line = "coalesce(s.context_budget, j.context_limit, 65536) AS context_budget"
    assert re.search(_spellings(65536)[0], line)
    line = 'settings = {"reward_key": reward_key or "reward"}'
    quoted = re.compile(r"""['"`]reward['"`]""")
    assert quoted.search(line) and _mentions(line, "reward_key")


def test_the_readme_table_is_the_registry() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert markdown_table() in readme


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("settings")
    job = write_job(root / "runs" / "exp" / "harbor" / "step-0001" / "job", max_turns=3)
    write_trial(job, "a__1", reward=1, turns=[([1, 2], [3], [-0.5])])
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"


def test_the_settings_view_is_one_row_with_every_setting(lake: Path) -> None:
    con = connect(lake)
    row = settings_row(con)
    assert list(row) == view_columns()
    assert row == {
        "reward_key": "reward",
        "reward_mode": "raw",
        "max_turns": None,
        "max_turns_default": None,
        "max_tokens": None,
        "max_tokens_default": 8192,
        "context_budget": None,
        "context_budget_default": 65536,
        "max_datum_tokens": 65536,
    }
    con.execute("SET VARIABLE wmo_max_tokens = 7")
    con.execute("SET VARIABLE wmo_reward_key = 'score'")
    con.execute("SET VARIABLE wmo_max_datum_tokens = 9")
    row = settings_row(con)
    assert (row["max_tokens"], row["reward_key"], row["max_datum_tokens"]) == (7, "score", 9)
    assert con.execute("SELECT DISTINCT max_tokens FROM trial_caps").fetchall() == [(7,)]
    con.execute("RESET VARIABLE wmo_max_tokens")
    assert settings_row(con)["max_tokens"] is None
    with duckdb.connect(str(lake / "lake.duckdb"), read_only=True) as plain:
        (count,) = plain.execute("SELECT count(*) FROM settings").fetchone()
        assert count == 1


def _option_helps(*path: str) -> dict[str, str]:
    """{flag: help} of a subcommand's options, as --help shows them (unwrapped)."""
    command = cli
    for name in path:
        command = command.get_command(click.Context(command), name)
    return {flag: param.help or "" for param in command.params for flag in param.opts}


def test_every_setting_is_an_option_with_its_default_in_the_help() -> None:
    sql_options = _option_helps("sql")
    for setting in SETTINGS.values():
        shown = re.search(r"\[default: ([^\]]*)\]", sql_options[setting.flag])
        assert shown, setting.flag
        if setting.default is not None:
            assert str(setting.default) in shown.group(1), setting.flag
        if setting.recorded is not None:
            assert setting.recorded[1] in shown.group(1), setting.flag
    datums = _option_helps("export", "datums")
    for flag in ("--reward-key", "--reward-mode", "--context-budget", "--max-datum-tokens"):
        assert flag in datums
    conversations = _option_helps("export", "conversations")
    assert "--reward-key" in conversations and "--reward-mode" in conversations
    help_text = CliRunner().invoke(cli, ["stats", "--help"]).output
    assert "--max-tokens" in help_text and "8192" in help_text


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"wmo_nope": 1}, "unknown setting 'wmo_nope'"),
        ({"max_tokens": 0}, "wmo_max_tokens (--max-tokens) must be a positive integer"),
        ({"max_tokens": 2**70}, "must be a positive integer (a 64-bit one), got 1180591"),
        ({"wmo_context_budget": "big"}, "must be a positive integer"),
        ({"reward_mode": "binary"}, "must be one of raw, positive-binary"),
        ({"reward_key": 3}, "must be text"),
        ({"reward_key": "r\udcff"}, "wmo_reward_key (--reward-key) must be UTF-8 text"),
        ({"reward_key": ""}, "wmo_reward_key (--reward-key) must be nonempty text"),
        ({"max_turns": True}, "must be a positive integer"),
        ({"max_turns": 3.0}, "must be a positive integer"),
    ],
)
def test_a_bad_setting_says_what_it_takes(values: dict, message: str) -> None:
    with pytest.raises(SettingError, match=re.escape(message)):
        variables(values)


def test_a_reward_key_of_bytes_no_utf8_decodes_is_an_error_not_a_traceback(lake: Path) -> None:
    """A command-line argument in another encoding reaches Python as lone surrogates, which
    DuckDB cannot bind as a variable; `sql` showed its InvalidInputException traceback."""
    result = CliRunner().invoke(
        cli, ["sql", "SELECT 1", "--lake", str(lake), "--reward-key", "r\udcff"]
    )
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "must be UTF-8 text" in result.output


def test_names_and_variables_both_name_a_setting() -> None:
    assert variables({"max_tokens": 5, "wmo_reward_key": "k", "max_turns": None}) == {
        "wmo_max_tokens": 5,
        "wmo_reward_key": "k",
    }


@pytest.mark.parametrize(
    ("kind", "options", "expected"),
    [
        ("datums", [], {}),
        (
            "datums",
            ["--context-budget", "50", "--max-datum-tokens", "40", "--reward-key", "reward"],
            {"context_budget": 50, "max_datum_tokens": 40},
        ),
        ("conversations", ["--reward-mode", "positive-binary"], {"reward_mode": "positive-binary"}),
    ],
)
def test_every_export_manifest_records_the_settings_row(
    lake: Path, tmp_path: Path, kind: str, options: list[str], expected: dict
) -> None:
    out = tmp_path / kind  # (no extension: the export's default format)
    result = CliRunner().invoke(
        cli,
        ["export", kind, "--lake", str(lake), "--out", str(out), "--no-split-guard", *options],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads(Path(f"{out}.manifest.json").read_text(encoding="utf-8"))
    con = connect(lake)
    for variable, value in variables(expected).items():
        con.execute(f"SET VARIABLE {variable} = ?", [value])
    assert manifest["settings"] == settings_row(con)
    for name, value in expected.items():
        assert manifest["settings"][name] == value


def test_a_numpy_integer_is_a_count() -> None:
    """The API refused np.int64(4096) as "not a positive integer", naming its own value."""
    import numpy as np

    assert variables({"max_tokens": np.int64(4096)}) == {"wmo_max_tokens": 4096}
    assert type(variables({"max_tokens": np.int64(4096)})["wmo_max_tokens"]) is int


@pytest.mark.parametrize(
    ("option", "said"),
    [
        (["--max-tokens", str(2**63)], "must be a positive integer (a 64-bit one)"),
        (["--reward-key", ""], "must be nonempty text"),
    ],
)
def test_an_option_the_api_refuses_is_a_usage_error(lake: Path, option: list, said: str) -> None:
    """A count past 64 bits reached DuckDB and failed there (exit 1, no usage line); an empty
    reward key, which upstream's scorer refuses, was taken and read as a key."""
    for command in (["stats"], ["sql", "SELECT 1"], ["compare", "exp", "exp"]):
        result = CliRunner().invoke(cli, [*command, "--lake", str(lake), *option])
        assert result.exit_code == 2, (command, result.output)
        assert "Usage: " in result.output and said in result.output


def test_the_largest_count_set_in_sql_is_taken(lake: Path) -> None:
    """2^63 - 1 is the largest count the options take; the settings view takes it too."""
    con = connect(lake)
    con.execute("SET VARIABLE wmo_max_tokens = 9223372036854775807")
    assert con.sql("SELECT max_tokens FROM settings").fetchall() == [(2**63 - 1,)]


@pytest.mark.parametrize(
    ("statement", "said"),
    [
        ("SET VARIABLE wmo_max_turns = 3.5", "wmo_max_turns must be a whole number >= 1, got 3.5"),
        ("SET VARIABLE wmo_max_turns = 4.0", "wmo_max_turns must be a whole number >= 1, got 4.0"),
        ("SET VARIABLE wmo_max_turns = 0", "wmo_max_turns must be a whole number >= 1, got 0"),
        ("SET VARIABLE wmo_max_tokens = -3", "wmo_max_tokens must be a whole number >= 1, got -3"),
        ("SET VARIABLE wmo_context_budget = 'big'", "wmo_context_budget must be a whole number"),
        ("SET VARIABLE wmo_max_datum_tokens = 0", "wmo_max_datum_tokens must be a whole number"),
        ("SET VARIABLE wmo_reward_key = ''", "wmo_reward_key must be nonempty text"),
        # 19 digits past 64 bits: DuckDB's own cast error, which named no variable
        (
            "SET VARIABLE wmo_max_tokens = 9223372036854775808",
            "wmo_max_tokens must be a whole number >= 1, got 9223372036854775808",
        ),
        ("SET VARIABLE wmo_context_budget = 9999999999999999999", "wmo_context_budget must be"),
    ],
)
def test_a_setting_set_in_sql_is_held_to_what_the_option_takes(
    lake: Path, statement: str, said: str
) -> None:
    """SET VARIABLE was not checked: 0 or -3 max tokens made every span truncated, 0 max turns
    every trial a max_turns stop, 3.5 was read as 4 (and as 3 by Spark). As the API, a count is
    a whole number (4.0 is refused too)."""
    con = connect(lake)
    con.execute(statement)
    with pytest.raises(duckdb.InvalidInputException, match=re.escape(said)) as refused:
        con.sql("SELECT * FROM settings").fetchall()
    if "max_turns" in statement or "max_tokens" in statement:  # (as every view reading it)
        with pytest.raises(duckdb.InvalidInputException, match=re.escape(said)):
            con.sql("SELECT * FROM rollout_stats").fetchall()
    # the advice runs as written, and brings the default back (it said a bare RESET VARIABLE)
    variable = statement.split()[2]
    advice = re.search(r"or (RESET VARIABLE \w+) for the default", str(refused.value))
    assert advice and advice.group(1) == f"RESET VARIABLE {variable}", str(refused.value)
    con.execute(advice.group(1))
    assert (
        con.sql("SELECT * FROM settings").fetchall()
        == connect(lake).sql("FROM settings").fetchall()
    )


def test_a_whole_count_set_in_sql_is_taken_as_the_option_takes_it(lake: Path) -> None:
    con = connect(lake)
    by_option = connect(lake, {"max_turns": 4}).sql("FROM settings").fetchall()
    for value in ("4", "'4'", "4::UTINYINT"):
        con.execute(f"SET VARIABLE wmo_max_turns = {value}")
        assert con.sql("FROM settings").fetchall() == by_option, value


def test_sql_says_a_wmo_variable_no_setting_reads(lake: Path) -> None:
    result = CliRunner().invoke(
        cli, ["sql", "SET VARIABLE wmo_reward_keys = 'x'; SELECT 1", "--lake", str(lake)]
    )
    assert result.exit_code == 0, result.output
    assert (
        "warning: wmo_reward_keys is no setting (did you mean wmo_reward_key?); it changes nothing"
        in result.stderr
    )


def test_a_setting_set_as_an_option_says_it_is_a_variable(lake: Path) -> None:
    result = CliRunner().invoke(
        cli, ["sql", "SET wmo_max_tokens = 5; SELECT 1", "--lake", str(lake)]
    )
    assert result.exit_code == 2
    assert "(a setting is a DuckDB variable: SET VARIABLE wmo_max_tokens = ...)" in result.output
