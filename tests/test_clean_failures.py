"""Failures are one clean message in click's style, never a traceback: Ctrl-C exits 130 with one
line and leaves nothing half-written; an unwritable output or lake dir is a message; hints are
shell-quoted and name only options that were set; an export's file name cannot contradict its
format."""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest

CLI = [sys.executable, "-m", "wmo_lake.cli"]


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("failures")
    job = write_job(root / "runs" / "job")
    write_trial(job, "a__1", trial_id="a", reward=1)
    write_trial(job, "b__1", trial_id="b", reward=0.5)
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"


def _invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args])


def _ctrl_c_when(
    args: list[str], ready: Callable[[int], bool], stdout: Any = subprocess.PIPE
) -> tuple[int, str, str]:
    """Run the CLI with `args`, press Ctrl-C once `ready(pid)`; its exit code, stdout (when a
    pipe), stderr."""
    proc = subprocess.Popen(
        [*CLI, *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background job ignores SIGINT; the user's terminal does not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while not ready(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, stdout, stderr


def test_ctrl_c_while_writing_exits_130_and_leaves_nothing(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "big.csv"
    query = "SELECT range AS i, repeat('x', 40) AS s FROM range(3000000000)"

    def writing(pid: int) -> bool:
        if not list(tmp_path.glob(".big.csv.*.tmp")):
            return False
        time.sleep(0.3)  # well into the writing
        return True

    args = ["sql", query, "--lake", str(lake), "--format", "csv", "--output", str(out)]
    code, _, stderr = _ctrl_c_when(args, writing)
    assert code == 130, stderr
    assert stderr.strip().splitlines() == ["interrupted: nothing was written or changed"]
    assert os.listdir(tmp_path) == []


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def test_ctrl_c_inside_a_query_to_stdout_exits_130_without_a_traceback(lake: Path) -> None:
    """DuckDB takes a SIGINT that lands mid-query and raises RuntimeError('Query interrupted')
    instead of KeyboardInterrupt; that too is Ctrl-C: one line, exit 130."""
    query = "SELECT sum(hash(range)) FROM range(100000000000)"  # minutes of work
    # past process start and imports (~0.4 s of CPU): well into the query
    code, stdout, stderr = _ctrl_c_when(
        ["sql", query, "--lake", str(lake)], lambda pid: _cpu_seconds(pid) >= 2.0
    )
    assert code == 130, stderr
    assert stderr.strip().splitlines() == ["interrupted: nothing was written or changed"]
    assert stdout == ""


@pytest.mark.parametrize("to", ["pipe", "file"])
def test_ctrl_c_while_rows_stream_to_stdout_says_they_are_cut_off(
    lake: Path, tmp_path: Path, to: str
) -> None:
    """Rows printed before a Ctrl-C stay where they went (a pipe's reader has them, a redirected
    file holds them): 'nothing was written' was said over megabytes of a cut-off result."""
    query = "SELECT range AS i FROM range(3000000000)"
    args = ["sql", query, "--lake", str(lake), "--format", "jsonl"]
    printed = tmp_path / "out.jsonl"
    with open(printed, "wb") as file:
        code, stdout, stderr = _ctrl_c_when(
            args,  # (a pipe: DuckDB's COPY to the device; a file: Arrow batches, by Python)
            lambda pid: _cpu_seconds(pid) >= 1.5 and (to == "pipe" or printed.stat().st_size),
            stdout=subprocess.PIPE if to == "pipe" else file,
        )
    assert code == 130, stderr
    assert stderr.strip().splitlines() == [
        "interrupted: the rows printed so far are part of the result only, cut off where it "
        "stopped; nothing was changed"
    ]
    assert (stdout if to == "pipe" else printed.read_text()).startswith('{"i":0}\n{"i":1}\n')


def test_sigterm_while_writing_leaves_nothing(lake: Path, tmp_path: Path) -> None:
    out = str(tmp_path / "big.jsonl")
    proc = subprocess.Popen(
        [
            *CLI,
            "sql",
            "SELECT range AS i FROM range(3000000000)",
            "--lake",
            str(lake),
            "--format",
            "jsonl",
            "--output",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".big.jsonl.*.tmp")):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        proc.terminate()
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143
    assert os.listdir(tmp_path) == []


def _export_stopped_by(signum: int, lake: Path, tmp_path: Path, monkeypatch) -> Any:
    """`export datums` with `signum` (SIGINT: Ctrl-C's KeyboardInterrupt) arriving mid-export:
    sha256 is taken after the data is written."""
    from wmo_lake.exports import discipline

    real_sha256 = discipline.sha256_file

    def stopped(path):
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        os.kill(os.getpid(), signum)  # (its handler raises at the next line run)
        return real_sha256(path)

    monkeypatch.setattr("wmo_lake.exports.discipline.sha256_file", stopped)
    out = tmp_path / "d.parquet"
    return _invoke("export", "datums", "--lake", lake, "--out", out, "--no-split-guard")


def test_ctrl_c_during_an_export(lake: Path, tmp_path: Path, monkeypatch) -> None:
    result = _export_stopped_by(signal.SIGINT, lake, tmp_path, monkeypatch)
    assert result.exit_code == 130
    assert result.output.strip() == "interrupted: nothing was written or changed"
    assert os.listdir(tmp_path) == []


def test_sigterm_during_an_export(lake: Path, tmp_path: Path, monkeypatch) -> None:
    """SIGTERM mid-export ended the process and left its hidden partial files behind; it now
    stops the export as Ctrl-C does (exit 143), and a later Ctrl-C is said as one again."""
    result = _export_stopped_by(signal.SIGTERM, lake, tmp_path, monkeypatch)
    assert result.exit_code == 143
    assert result.output.strip() == "stopped by SIGTERM: nothing was written or changed"
    assert os.listdir(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # put back
    again = _export_stopped_by(signal.SIGINT, lake, tmp_path, monkeypatch)
    assert again.exit_code == 130
    assert again.output.strip() == "interrupted: nothing was written or changed"


def test_an_unwritable_lake_dir_is_a_message(tmp_path: Path, monkeypatch) -> None:
    """Root ignores file modes, so the read-only dir is simulated where the ingest first writes."""
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "a__1", trial_id="a", reward=1)
    lake = tmp_path / "lake"

    def read_only(self, on_wait=None):
        raise PermissionError(13, "Permission denied", str(lake / ".lock"))

    monkeypatch.setattr("wmo_lake.store.Store.lock", read_only)
    result = _invoke("ingest", tmp_path / "runs", "--lake", lake)
    assert result.exit_code == 1
    assert result.output.startswith("Error: cannot write the lake at")
    assert "Permission denied" in result.output and "Traceback" not in result.output


def test_unwritable_export_output(lake: Path, tmp_path: Path, monkeypatch) -> None:
    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("wmo_lake.exports.discipline._fsync", read_only)
    out = tmp_path / "d.parquet"
    result = _invoke("export", "datums", "--lake", lake, "--out", out, "--no-split-guard")
    assert result.exit_code == 1 and "Error: cannot write" in result.output
    assert "Traceback" not in result.output and os.listdir(tmp_path) == []


def test_unwritable_report_output(lake: Path, tmp_path: Path, monkeypatch) -> None:
    """A dir where the page cannot be written, nor its partial file removed (a read-only mount;
    root writes through chmod, so both are refused here by hand): one line, no traceback."""

    def refused(real):
        def method(path: Path, *args, **kwargs):
            if path.parent == tmp_path:
                raise OSError(30, "Read-only file system")
            return real(path, *args, **kwargs)

        return method

    monkeypatch.setattr(Path, "write_text", refused(Path.write_text))
    monkeypatch.setattr(Path, "unlink", refused(Path.unlink))
    result = _invoke("report", "--lake", lake, "--out", tmp_path / "r.html")
    assert result.exit_code == 1, result.output
    assert "Error: cannot write " in result.output and "Read-only file system" in result.output
    assert "Traceback" not in result.output


def test_errors_are_in_clicks_style(lake: Path, tmp_path: Path) -> None:
    usage = _invoke("sql", "CREATE TABLE t AS SELECT 1", "--lake", lake)
    assert usage.exit_code == 2
    assert usage.output.startswith("Usage: ") and "\nError: " in usage.output
    failure = _invoke("sql", "SELECT error('nope')", "--lake", lake)
    assert failure.exit_code == 1 and failure.output.startswith("Error: query failed")


def test_hints_are_quoted_and_name_only_options_that_were_set(tmp_path: Path) -> None:
    spaced = tmp_path / "my lake"
    given = _invoke("stats", "--lake", spaced)
    assert given.exit_code == 1
    assert f"wmo-lake ingest RUNS_DIR --lake '{spaced}'" in given.output
    from_env = CliRunner().invoke(cli, ["stats"], env={"WMO_LAKE": str(spaced)})
    assert "wmo-lake ingest RUNS_DIR`" in from_env.output and "--lake '" not in from_env.output
    sql = _invoke("sql", "DROP VIEW cells", "--lake", spaced)
    assert sql.exit_code == 1  # no lake there yet: the ingest hint, quoted
    assert f"--lake '{spaced}'" in sql.output


NO_MATCH_HINTS = {
    "export datums": ["export", "datums", "--no-split-guard", "--batch", "nope"],
    "export conversations": ["export", "conversations", "--no-split-guard", "--batch", "nope"],
    "report": ["report", "--run", "nope"],
    "report, one run of two": ["report", "--run", "(no run)", "--run", "nope"],
    "schema": ["schema", "nope"],
    "sql of another file": ["sql", "SELECT * FROM read_csv('/etc/hostname')"],
}


@pytest.mark.parametrize("case", list(NO_MATCH_HINTS))
def test_a_hint_runs_on_the_lake_the_command_was_given(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """The commands a failure says to run (`wmo-lake stats` lists the batches, see `wmo-lake sql
    ...`) left out the --lake given: run as printed they answered about ./lake, another lake or
    none. Each now names it, and runs as printed from another dir; given by $WMO_LAKE, the
    hint names no --lake (it works as is)."""
    import shlex

    spaced = tmp_path / "a lake"
    shutil.copytree(lake, spaced)
    given = NO_MATCH_HINTS[case]
    suffix = {"report": "html", "datums": "parquet", "conversations": "jsonl"}
    if given[0] in ("export", "report"):
        given = [*given, "--out", str(tmp_path / f"out.{suffix[given[given[0] == 'export']]}")]
    failed = _invoke(*given, "--lake", str(spaced))
    assert failed.exit_code != 0, failed.output
    # (`wmo-lake sql` alone is the subject of a sentence, not a command to run)
    hints = [h for h in re.findall(r"`(wmo-lake [^`]*)`", failed.output) if h != "wmo-lake sql"]
    assert hints, failed.output
    monkeypatch.chdir(tmp_path)  # (no ./lake here)
    for hint in hints:
        words = shlex.split(hint)
        assert words[-2:] == ["--lake", str(spaced)], hint
        if words[1] != "ingest":
            answer = _invoke(*words[1:])
            assert answer.exit_code == 0, (hint, answer.output)
    from_env = CliRunner().invoke(cli, given, env={"WMO_LAKE": str(spaced)})
    assert from_env.exit_code == failed.exit_code, from_env.output
    assert "--lake" not in from_env.output


def test_ingest_problem_hint_is_quoted(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "job")
    (job / "broken__1").mkdir()
    (job / "broken__1" / "config.json").write_text('{"trial_name": "broken__1"}')
    (job / "broken__1" / "result.json").write_text("{not json")
    lake = tmp_path / "the lake"
    result = CliRunner().invoke(cli, ["ingest", str(tmp_path / "runs"), "--lake", str(lake)])
    assert result.exit_code == 0, result.output
    assert (
        f"see them: wmo-lake sql --lake '{lake}' 'SELECT kind, path, message FROM problems'"
        in result.stderr
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--out", "x.jsonl", "--format", "parquet"],
            "has the extension .jsonl but --format parquet was given",
        ),
        (["--out", "x.parquet", "--format", "jsonl"], "has the extension .parquet"),
        (["--out", "x.json"], "names a .json file"),
        (["--out", "x.csv", "--format", "jsonl"], "names a .csv file, which this export does"),
    ],
)
def test_export_out_extension_must_match_the_format(
    lake: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    args = [tmp_path / a if a.startswith("x.") else a for a in args]
    result = _invoke("export", "conversations", "--lake", lake, "--no-split-guard", *args)
    assert result.exit_code == 2 and message in result.output, result.output
    assert os.listdir(tmp_path) == []


def test_export_format_is_inferred_from_the_extension(lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.parquet"
    result = _invoke("export", "conversations", "--lake", lake, "--no-split-guard", "--out", out)
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:4] == b"PAR1"
    datums = _invoke(
        "export", "datums", "--lake", lake, "--no-split-guard", "--out", tmp_path / "d.jsonl"
    )
    assert datums.exit_code == 2 and f"name it {tmp_path / 'd.parquet'} (" in datums.output


@pytest.mark.parametrize(
    "args",
    [
        ["export", "datums", "--no-split-guard", "--out", "d\udcff.parquet"],
        ["export", "conversations", "--no-split-guard", "--out", "c\udcff.jsonl"],
        ["sql", "SELECT * FROM trials", "--output", "s\udcff.csv"],
    ],
    ids=["datums", "conversations", "sql"],
)
def test_an_output_name_that_is_not_utf8_is_a_usage_error(
    lake: Path, tmp_path: Path, args: list[str]
) -> None:
    """A file name of another encoding (b'\\xff' reaches Python as '\\udcff'): DuckDB's COPY and
    the manifests' JSON cannot take it; it was their traceback, after the query ran."""
    args = [str(tmp_path / a) if "\udcff" in a else a for a in args]
    result = _invoke(*args, "--lake", lake)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "is not a UTF-8 file name" in result.output
    assert os.listdir(tmp_path) == []


def test_an_ingest_of_a_tree_whose_segment_was_deleted_says_so_instead_of_all_unchanged(
    tmp_path: Path,
) -> None:
    """Every dir of the tree is unchanged, so no segment is read: the ingest said `nothing
    changed` over a lake that had lost the rows of a whole table. It names the missing file and
    changes nothing."""
    from conftest import FIXTURES

    from wmo_lake.store import Store

    lake = tmp_path / "lake"
    kit = FIXTURES / "harbor" / "kit-e2e"
    ingest([kit], lake, workers=1)
    (segment,) = (lake / "tables" / "steps").rglob("*.parquet")
    segment.unlink()
    generation = Store(lake).read_manifest().generation
    for extra in ([], ["--dry-run"]):
        result = _invoke("ingest", kit, "--lake", lake, *extra)
        assert result.exit_code == 1 and "Traceback" not in result.output, result.output
        assert f"the lake at {lake} is missing 1 of its Parquet files" in result.output
        assert segment.relative_to(lake).as_posix() in result.output
    assert Store(lake).read_manifest().generation == generation


def test_every_command_names_a_segment_deleted_by_hand(tmp_path: Path) -> None:
    """A lake whose Parquet files of spans and steps were deleted outside wmo-lake: each command
    that reads or rewrites them says which file is missing and what to do (forget said
    `cannot write the lake at L: L: None`; report and the exports DuckDB's glob error)."""
    from conftest import FIXTURES

    lake = tmp_path / "lake"
    ingest([FIXTURES / "harbor" / "kit-e2e"], lake, workers=1)
    for table in ("spans", "steps"):
        (segment,) = (lake / "tables" / table).rglob("*.parquet")
        segment.unlink()
    for args in (
        ["forget", "--batch", "*"],
        ["export", "datums", "--no-split-guard", "--out", str(tmp_path / "d.parquet")],
        ["export", "conversations", "--no-split-guard", "--out", str(tmp_path / "c.jsonl")],
        ["report", "--out", str(tmp_path / "r.html")],
    ):
        result = _invoke(*args, "--lake", lake)
        assert result.exit_code == 1 and "Traceback" not in result.output, (args, result.output)
        assert f"the lake at {lake} is missing 2 of its Parquet files" in result.output, args
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake"]  # no output was written


def _overwrite_in_place(segment: Path, where: str) -> None:
    """Bytes of `segment` overwritten, its size and its Parquet magic bytes kept (a stray write,
    a disk error): in its footer's thrift, or over the first half of its pages."""
    data = bytearray(segment.read_bytes())
    footer = _footer_start(data)
    span = range(footer + 10, footer + 60) if where == "footer" else range(4, footer // 2)
    for at in span:
        data[at] = 0xAB if where == "footer" else (at * 37) & 0xFF
    segment.write_bytes(bytes(data))


def _lake_of_a_copy(tmp_path: Path) -> tuple[Path, Path]:
    """(a copy of a fixture run tree, the lake it was ingested into)."""
    from conftest import FIXTURES

    runs = tmp_path / "runs"
    shutil.copytree(FIXTURES / "harbor" / "kit-e2e", runs)
    ingest([runs], tmp_path / "lake", workers=1)
    return runs, tmp_path / "lake"


def _change_a_trial(runs: Path) -> None:
    """One trial's result.json changed: its ingest rewrites its partition without its old rows."""
    result_json = next(runs.glob("*/result.json"))
    result_json.write_text(result_json.read_text().replace('"started_at": "', '"started_at": "1'))


def _footer_start(data: bytes) -> int:
    return len(data) - 8 - int.from_bytes(data[-8:-4], "little")


def _said_unreadable(result: Any, lake: Path, segment: Path) -> bool:
    rel = segment.relative_to(lake).as_posix()
    return (
        f"the lake at {lake} holds 1 of its Parquet files that cannot be read ({rel}: "
        in (result.output)
        and "changed in place outside wmo-lake" in result.output
    )


def test_every_command_names_a_segment_overwritten_in_place(tmp_path: Path) -> None:
    """A segment whose bytes were overwritten in place keeps its size and its magic bytes, so
    the check for one cut short passed it: `sql` and `ingest` ended in DuckDB's traceback
    ("Variable-length int over 10 bytes"), the others in its bare words. Each now names the
    file and what to do. lake.duckdb deleted: every command reads the files."""
    from conftest import FIXTURES

    lake = tmp_path / "lake"
    ingest([FIXTURES / "harbor" / "kit-e2e"], lake, workers=1)
    (segment,) = (lake / "tables" / "trials").rglob("*.parquet")
    _overwrite_in_place(segment, "footer")
    (lake / "lake.duckdb").unlink()
    for args in (
        ["sql", "SELECT count(*) FROM trials"],
        ["stats"],
        ["tables"],
        ["schema", "trials"],
        ["compare", "*", "*"],
        ["forget", "--batch", "*"],
        ["export", "datums", "--no-split-guard", "--out", str(tmp_path / "d.parquet")],
        ["export", "conversations", "--no-split-guard", "--out", str(tmp_path / "c.jsonl")],
        ["report", "--out", str(tmp_path / "r.html")],
        ["ingest", str(FIXTURES / "harbor" / "kit-e2e")],
    ):
        result = _invoke(*args, "--lake", lake)
        assert result.exit_code == 1 and _said_unreadable(result, lake, segment), (
            args,
            result.output,
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lake"]  # no output was written


def test_a_page_overwritten_in_place_is_named_by_queries_and_by_the_api(tmp_path: Path) -> None:
    """Pages of a spans segment overwritten (lake.duckdb kept: spans are read from their files
    at each query). DuckDB's words name no file ("don't know what type"), so the lake's
    segments are read again to find it."""
    from conftest import FIXTURES

    from wmo_lake import api
    from wmo_lake.store import LakeError

    lake = tmp_path / "lake"
    ingest([FIXTURES / "harbor" / "kit-e2e"], lake, workers=1)
    (segment,) = (lake / "tables" / "spans").rglob("*.parquet")
    _overwrite_in_place(segment, "pages")
    for args in (
        ["sql", "SELECT * FROM spans"],
        ["export", "datums", "--no-split-guard", "--out", str(tmp_path / "d.parquet")],
        ["report", "--out", str(tmp_path / "r.html")],
    ):
        result = _invoke(*args, "--lake", lake)
        assert result.exit_code == 1 and _said_unreadable(result, lake, segment), (
            args,
            result.output,
        )
    with pytest.raises(LakeError, match="holds 1 of its Parquet files that cannot be read"):
        api.query(lake, "SELECT * FROM spans")
    # (the rest of the lake reads)
    assert api.query(lake, "SELECT count(*) AS n FROM trials")["n"].to_list() == [6]


def test_an_ingest_that_rewrites_a_segment_overwritten_in_place_names_it(tmp_path: Path) -> None:
    """A changed trial makes the ingest rewrite its partition's segments without its old rows;
    pyarrow's error for one overwritten in place was said as `cannot write the lake at L: L:
    Couldn't deserialize thrift`, as if the disk were full. The lake is left as it was."""
    runs, lake = _lake_of_a_copy(tmp_path)
    (segment,) = (lake / "tables" / "trials").rglob("*.parquet")
    _overwrite_in_place(segment, "pages")
    before = (lake / "manifest.json").read_bytes()
    _change_a_trial(runs)
    result = _invoke("ingest", runs, "--lake", lake)
    assert result.exit_code == 1 and _said_unreadable(result, lake, segment), result.output
    assert (lake / "manifest.json").read_bytes() == before


def test_a_footer_only_pyarrow_refuses_is_named_by_the_rewrite(tmp_path: Path) -> None:
    """A character of a segment's `ARROW:schema` footer value overwritten: DuckDB ignores that
    key and reads the file, pyarrow cannot open it. The rewrite of its partition (an ingest of a
    changed trial, a forget) ended in pyarrow's traceback (`Invalid base64 input`); it is now
    named, with pyarrow's words."""
    runs, lake = _lake_of_a_copy(tmp_path)
    (segment,) = (lake / "tables" / "spans").rglob("*.parquet")
    data = bytearray(segment.read_bytes())
    footer = _footer_start(data)
    data[data.index(b"ARROW:schema", footer) + len(b"ARROW:schema") + 40] = ord("!")
    segment.write_bytes(bytes(data))
    before = (lake / "manifest.json").read_bytes()
    assert _invoke("sql", "SELECT count(*) FROM spans", "--lake", lake).exit_code == 0
    result = _invoke("forget", "--batch", "*", "--lake", lake)
    assert result.exit_code == 1 and _said_unreadable(result, lake, segment), result.output
    assert f"{segment.name}: pyarrow: " in result.output
    _change_a_trial(runs)
    result = _invoke("ingest", runs, "--lake", lake)
    assert result.exit_code == 1 and _said_unreadable(result, lake, segment), result.output
    assert (lake / "manifest.json").read_bytes() == before


def test_a_column_name_made_invalid_utf8_in_place_is_named(tmp_path: Path) -> None:
    """A byte of a column's name in a segment's footer made invalid UTF-8: DuckDB's bindings
    raised UnicodeDecodeError (a traceback from `sql`, and from an ingest that updated
    lake.duckdb), pyarrow's rewrite too. Each now names the file."""
    runs, lake = _lake_of_a_copy(tmp_path)
    (lake / "lake.duckdb").unlink()
    (segment,) = (lake / "tables" / "jobs").rglob("*.parquet")
    data = bytearray(segment.read_bytes())
    footer = _footer_start(data)
    data[data.index(b"finished_at", footer) + 2] = 0xF7
    segment.write_bytes(bytes(data))
    result = _invoke("sql", "SELECT finished_at FROM jobs", "--lake", lake)
    assert result.exit_code == 1 and _said_unreadable(result, lake, segment), result.output
    result = _invoke("forget", "--batch", "*", "--lake", lake)
    assert result.exit_code == 1 and _said_unreadable(result, lake, segment), result.output
    _change_a_trial(runs)
    result = _invoke("ingest", runs, "--lake", lake)
    assert result.exit_code == 1 and _said_unreadable(result, lake, segment), result.output


def test_a_signal_while_the_copy_thread_starts_still_ends_the_process_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGTERM can land while Thread.start waits for the COPY's thread to run (seen under load:
    exit 1, from a close() of the connection the COPY was busy on). It must end the process as
    one landing during the wait does: the partial file removed, exit 143."""
    import threading

    import duckdb

    from wmo_lake import stopping

    real_start = threading.Thread.start

    def start_then_signal(self: threading.Thread) -> None:
        real_start(self)
        if self.name == "wmo-lake-copy":
            raise SystemExit(143)  # what the SIGTERM handler raises

    class Exited(Exception):
        pass

    def exit_now(code: int) -> None:
        raise Exited(code)

    monkeypatch.setattr(threading.Thread, "start", start_then_signal)
    monkeypatch.setattr(os, "_exit", exit_now)
    aborted: list[bool] = []
    con = duckdb.connect()
    with pytest.raises(Exited) as ended:
        stopping.execute_interruptibly(con, "SELECT 1", lambda: aborted.append(True))
    assert (ended.value.args, aborted) == ((143,), [True])


def test_sigterm_goes_through_sigints_own_handler() -> None:
    """SIGTERM raised KeyboardInterrupt wherever Python was, inside a py4j call too (pyspark's
    SIGINT handler, which cancels the Spark job, never ran, and py4j logged the cut call with
    its traceback). It now runs SIGINT's handler, whatever it is; with SIGINT ignored (a
    script's background job) it raises KeyboardInterrupt itself."""
    from wmo_lake.stopping import TERMINATED, sigterm_stops

    calls: list[int] = []

    def own(signum: int, frame: Any) -> None:
        calls.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, own)
    try:
        for sigint, seen in ((own, [signal.SIGINT]), (signal.SIG_IGN, [])):
            signal.signal(signal.SIGINT, sigint)
            calls.clear()
            TERMINATED.clear()
            with pytest.raises(KeyboardInterrupt), sigterm_stops():
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # (the handler runs at the next bytecode)
            assert calls == seen and TERMINATED == [signal.SIGTERM]
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, previous)
        TERMINATED.clear()


def test_py4js_interrupted_calls_are_not_logged_at_the_root() -> None:
    """py4j logs each JVM call an interrupt cuts short at the root logger, with a traceback: on
    a Spark session the CLI started, those records are dropped (the command says one line)."""
    import logging

    from wmo_lake.spark import _py4j_at_the_root

    def record(pathname: str) -> logging.LogRecord:
        return logging.LogRecord("root", logging.ERROR, pathname, 1, "x", None, None)

    gateway = "/venv/lib/python3.12/site-packages/py4j/java_gateway.py"
    assert not _py4j_at_the_root(record(gateway))
    assert _py4j_at_the_root(record("/venv/lib/python3.12/site-packages/wmo_lake/ingest.py"))


@pytest.mark.parametrize("command", [["stats"], ["sql", "SELECT 1 AS x", "--format", "csv"]])
def test_a_closed_stdout_is_one_line_not_a_traceback(lake: Path, command: list[str]) -> None:
    """`wmo-lake stats >&-`: Python has no sys.stdout at all, and every command ended in an
    AttributeError traceback."""
    done = subprocess.run(
        [*CLI, *command, "--lake", str(lake)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(1),
        timeout=120,
    )
    assert done.returncode == 1
    said = done.stderr.splitlines()[-1]
    assert said.startswith("Error: ")  # (`sql`: "cannot write stdout: " first)
    assert said.endswith("stdout is closed; give wmo-lake one (`> /dev/null` drops it)")
    assert "Traceback" not in done.stderr


STDOUT_CLOSED_SAID = "stdout is closed; give wmo-lake one (`> /dev/null` drops it)"


def _sql_with_stdout_closed(lake: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`wmo-lake sql ... --lake LAKE ARGS` run with fd 1 closed (`>&-`), stderr captured."""
    return subprocess.run(
        [*CLI, "sql", "SELECT 1 AS x", "--lake", str(lake), *args],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: os.close(1),
        timeout=120,
    )


def test_a_closed_stdout_stops_only_a_command_that_writes_there(lake: Path, tmp_path: Path) -> None:
    """`sql -o FILE >&-` writes nothing to stdout: it ran before the closed-stdout error was
    said at the start of every command, and it runs again."""
    out = tmp_path / "x.csv"
    done = _sql_with_stdout_closed(lake, "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert out.read_text() == "x\n1\n"


@pytest.mark.parametrize("fmt", ["table", "csv", "parquet"])
def test_output_to_a_closed_stdout_is_refused_and_leaves_the_lake_whole(
    lake: Path, tmp_path: Path, fmt: str
) -> None:
    """With fd 1 closed, the next file opened took it: `-o /dev/stdout` then named the lake's
    lake.duckdb, which the table was renamed over (exit 0, the lake's DuckDB file destroyed)."""
    import shutil

    copy = tmp_path / "lake"
    shutil.copytree(lake, copy)
    before = (copy / "lake.duckdb").read_bytes()
    done = _sql_with_stdout_closed(copy, "--format", fmt, "-o", "/dev/stdout")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].endswith(STDOUT_CLOSED_SAID)
    assert (copy / "lake.duckdb").read_bytes() == before


def test_output_to_a_closed_stderr_leaves_the_lake_whole(lake: Path, tmp_path: Path) -> None:
    """With fd 2 closed (`2>&-`), `-o /dev/stderr` named the next file opened: the lake's
    lake.duckdb, the table renamed over it (exit 0). It is refused: stderr is closed."""
    import shutil

    copy = tmp_path / "lake"
    shutil.copytree(lake, copy)
    before = (copy / "lake.duckdb").read_bytes()
    done = subprocess.run(
        [*CLI, "sql", "SELECT 42 AS x", "--lake", str(copy), "-o", "/dev/stderr"],
        stdout=subprocess.PIPE,
        preexec_fn=lambda: os.close(2),
        timeout=120,
    )
    assert done.returncode == 2
    assert (copy / "lake.duckdb").read_bytes() == before


def test_a_closed_stdout_reached_through_a_link_to_the_fds_is_refused(
    lake: Path, tmp_path: Path
) -> None:
    """`-o FDS/1` (FDS a link to /proc/self/fd) with stdout closed: the result went to the
    /dev/null held on fd 1, exit 0."""
    fds = tmp_path / "fds"
    fds.symlink_to("/proc/self/fd")
    done = _sql_with_stdout_closed(lake, "-o", str(fds / "1"))
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].endswith(STDOUT_CLOSED_SAID)


def test_a_closed_stdout_is_not_dev_null(lake: Path) -> None:
    """fd 1 is held on /dev/null while stdout is closed: `-o /dev/null` was then taken for
    stdout and refused."""
    done = _sql_with_stdout_closed(lake, "-o", "/dev/null")
    assert done.returncode == 0, done.stderr


def _ingest_with_closed(fd: int, lake: Path) -> subprocess.CompletedProcess[str]:
    """`wmo-lake ingest` of the bundled example with `fd` closed, the other stream captured."""
    from conftest import FIXTURES

    return subprocess.run(
        [*CLI, "ingest", str(FIXTURES / "harbor" / "offline-demo"), "--lake", str(lake)],
        capture_output=True,
        text=True,
        preexec_fn=functools.partial(os.close, fd),
        timeout=120,
    )


def test_a_closed_stdout_refuses_an_ingest_before_its_work(tmp_path: Path) -> None:
    """An ingest (or an export) with stdout closed did all its work, committed, then failed
    printing its summary: exit 1 over a changed lake. It is refused before it starts."""
    done = _ingest_with_closed(1, tmp_path / "l")
    assert done.returncode == 1
    assert (
        done.stderr.strip() == "Error: stdout is closed; give wmo-lake one (`> /dev/null` drops it)"
    )
    assert not (tmp_path / "l").exists()


def test_a_query_read_from_a_closed_stdin_is_one_line(lake: Path) -> None:
    """`wmo-lake sql - 0<&-` ended in an AttributeError traceback (Python has no sys.stdin)."""
    done = subprocess.run(
        [*CLI, "sql", "-", "--lake", str(lake)],
        capture_output=True,
        text=True,
        preexec_fn=lambda: os.close(0),
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "Error: `-` reads the query from stdin, which is closed; give the query as an argument"
    )
    assert "Traceback" not in done.stderr


def test_output_naming_another_file_descriptor_is_refused(lake: Path, tmp_path: Path) -> None:
    """`-o /dev/fd/3` named whatever the process had opened on 3 when it wrote: the lake's own
    lake.duckdb, the table renamed over it (exit 0); `3>> log` lost what the log held, and
    `-o /dev/stdin` from a pipe waited on itself for ever. Only stdout and stderr are streams
    an --output may name; a link to a descriptor is followed."""
    import shutil

    copy = tmp_path / "lake"
    shutil.copytree(lake, copy)
    before = (copy / "lake.duckdb").read_bytes()
    log = tmp_path / "log"
    log.write_text("prior\n")
    link = tmp_path / "link.txt"
    link.symlink_to("/proc/self/fd/3")
    fds = tmp_path / "fds"  # (a link to a dir of them: the path's own text names none)
    fds.symlink_to("/proc/self/fd")
    targets = [("/dev/fd/3", 3), (str(link), 3), (str(fds / "3"), 3), ("/dev/stdin", 0)]
    for target, fd in targets:
        with open(log, "a") as three:  # (`3>> log`)
            appended = three.fileno()
            done = subprocess.run(
                [*CLI, "sql", "SELECT 1 AS x", "--lake", str(copy), "-o", target],
                input=b"hi\n",
                capture_output=True,
                pass_fds=(3,),  # (kept open past close_fds, which runs after preexec_fn)
                preexec_fn=functools.partial(os.dup2, appended, 3),
                timeout=60,
            )
        assert done.returncode == 2, (target, done.stderr)
        said = done.stderr.decode().splitlines()[-1]
        assert said.startswith(f"Error: --output {target} ")
        assert (
            "is the file open for writing on file descriptor 3 (as `3>> log` opens one)"
            if fd == 3
            else "names file descriptor 0, not a file"  # (stdin, a pipe)
        ) in said
    assert (copy / "lake.duckdb").read_bytes() == before
    assert log.read_text() == "prior\n"


def test_a_closed_stderr_leaves_commands_working(tmp_path: Path) -> None:
    """With fd 2 closed, Python has no sys.stderr: an ingest failed on it without a word."""
    done = _ingest_with_closed(2, tmp_path / "l")
    assert done.returncode == 0
    assert done.stdout.startswith("6 trials (6 new")


def test_a_path_that_only_looks_like_a_file_descriptor_is_written(
    lake: Path, tmp_path: Path
) -> None:
    """`deep/../../dev/fd/3`, where deep is a link: the kernel resolves `..` after the link, to
    an ordinary file; the text alone read as /dev/fd/3."""
    real = tmp_path / "real"
    ups = len(tmp_path.parts)  # (as text, deep/ and then these reach /: /dev/fd/3)
    deepest = real.joinpath(*[f"d{i}" for i in range(ups)])
    deepest.mkdir(parents=True)
    (real / "dev" / "fd").mkdir(parents=True)
    (tmp_path / "deep").symlink_to(deepest)
    target = f"{tmp_path}/deep" + "/.." * ups + "/dev/fd/3"
    assert os.path.abspath(target) == "/dev/fd/3"
    done = subprocess.run(
        [*CLI, "sql", "SELECT 1 AS x", "--lake", str(lake), "-o", target, "--format", "csv"],
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (real / "dev" / "fd" / "3").read_text() == "x\n1\n"


def test_report_out_reaching_a_file_descriptor_is_refused(lake: Path, tmp_path: Path) -> None:
    """`--out r.html`, a link to /dev/fd/3, under `3>> log`: the page was renamed over the log."""
    log = tmp_path / "log"
    log.write_text("prior\n")
    page = tmp_path / "r.html"
    page.symlink_to("/dev/fd/3")
    with open(log, "a") as three:
        done = subprocess.run(
            [*CLI, "report", "--lake", str(lake), "--out", str(page)],
            capture_output=True,
            pass_fds=(3,),  # (kept open past close_fds, which runs after preexec_fn)
            preexec_fn=functools.partial(os.dup2, three.fileno(), 3),
            timeout=120,
        )
    assert done.returncode == 2
    assert b"is the file open for writing on file descriptor 3" in done.stderr
    assert log.read_text() == "prior\n"


@pytest.mark.parametrize("mode", ["w", "a"], ids=[">", ">>"])
def test_parquet_to_a_stdout_appending_to_a_file_is_refused(
    lake: Path, tmp_path: Path, mode: str
) -> None:
    """`-o /dev/stdout --format parquet >> log` renamed the Parquet file over the log. With `>`
    (nothing to keep) it is written."""
    target = tmp_path / "out"
    target.write_text("prior\n")
    args = [*CLI, "sql", "SELECT 1", "--lake", str(lake), "-o", "/dev/stdout"]
    with open(target, mode) as stdout:
        done = subprocess.run(
            [*args, "--format", "parquet"], stdout=stdout, stderr=subprocess.PIPE, timeout=60
        )
    if mode == "w":
        assert done.returncode == 0, done.stderr
        assert target.read_bytes()[:4] == b"PAR1"
    else:
        assert done.returncode == 2
        assert b"appends to that file (>>)" in done.stderr
        assert target.read_text() == "prior\n"


def test_a_file_some_descriptor_only_reads_is_written(lake: Path, tmp_path: Path) -> None:
    """`-o data.csv < data.csv` (or under a `flock` of it): the file is only read there, so
    replacing it loses nothing; the first check refused any file an fd held."""
    data = tmp_path / "data.csv"
    data.write_text("a,b\n")
    with open(data) as stdin:
        done = subprocess.run(
            [*CLI, "sql", "SELECT 1 AS x", "--lake", str(lake), "-o", str(data)],
            stdin=stdin,
            capture_output=True,
            timeout=60,
        )
    assert done.returncode == 0, done.stderr
    assert data.read_text() == "x\n1\n"


@pytest.mark.parametrize("fd", [0, 2])
def test_a_closed_stdin_or_stderr_reached_through_a_link_to_the_fds_is_refused(
    lake: Path, tmp_path: Path, fd: int
) -> None:
    """`-o FDS/2 2>&-` (FDS a link to /proc/self/fd): the result went to the /dev/null held
    in stderr's place, exit 0. Each closed fd now holds a stand-in of its own."""
    fds = tmp_path / "fds"
    fds.symlink_to("/proc/self/fd")
    out = tmp_path / "said"
    with open(out, "w") as said:
        done = subprocess.run(
            [*CLI, "sql", "SELECT 1 AS x", "--lake", str(lake), "-o", str(fds / str(fd))],
            stdout=said if fd == 2 else subprocess.DEVNULL,
            stderr=said if fd == 0 else subprocess.DEVNULL,
            preexec_fn=functools.partial(os.close, fd),
            timeout=60,
        )
    assert done.returncode == 2
    if fd == 0:
        assert (
            out.read_text().splitlines()[-1]
            == f"Error: --output {fds}/0 names stdin, which is closed"
        )


@pytest.mark.parametrize("command", ["sql", "report"])
def test_an_output_name_no_file_system_takes_is_one_line(
    lake: Path, tmp_path: Path, command: str
) -> None:
    """A 300-byte file name ended in an OSError traceback (File name too long)."""
    from wmo_lake.cli import cli

    if command == "sql":
        args = ["sql", "SELECT 1", "--lake", str(lake), "-o", str(tmp_path / ("x" * 300 + ".csv"))]
    else:
        args = ["report", "--lake", str(lake), "--out", str(tmp_path / ("x" * 300 + ".html"))]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    size = 304 if command == "sql" else 305
    assert f"the file name is {size} bytes; a file system takes 255" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.parametrize("command", ["sql", "report"])
def test_an_output_under_a_file_says_that_file_is_no_directory(
    lake: Path, tmp_path: Path, command: str
) -> None:
    """`--out plain/x.html`, plain a file: said "directory plain does not exist"."""
    from wmo_lake.cli import cli

    plain = tmp_path / "plain"
    plain.write_text("x")
    if command == "sql":
        args = ["sql", "SELECT 1", "--lake", str(lake), "-o", str(plain / "x.csv")]
    else:
        args = ["report", "--lake", str(lake), "--out", str(plain / "x.html")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code in (1, 2)
    assert f"{plain} is not a directory" in result.output
    assert "does not exist" not in result.output
