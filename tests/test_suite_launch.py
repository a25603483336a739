"""The suite passes however it is started: a script's background job (`make test &`) or `nohup`
starts it with SIGINT ignored, and the Ctrl-C tests must still see their Ctrl-C (conftest.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


CTRL_C_TESTS = "tests/test_export_datums.py::test_a_ctrl_c_that_duckdb_took_still_stops_the_export"


def test_the_ctrl_c_tests_pass_when_the_suite_starts_with_sigint_ignored(tmp_path: Path) -> None:
    options = ["-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "inner")]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", *options, CTRL_C_TESTS],
        cwd=REPO,
        preexec_fn=_ignoring_sigint,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "2 passed" in run.stdout, run.stdout[-3000:]
