"""The offline harbor kit (tests/harbor_e2e/) as test helpers: the scripted mock LLM on a free
loopback port, the environment harbor needs, and the `--set` overrides that point the kit's
job.yaml at the mock and at the kit's tasks.

What the mock makes each task do is read from the kit's own script (`mock_llm.py`), never from
the code under test: `hello_dropped_turns(attempt)` and `sum_runs_out_of_turns(attempt)`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

KIT = Path(__file__).resolve().parent / "harbor_e2e"
TEMPLATE = KIT / "job.yaml"
TASKS = KIT / "tasks"
TASK_IDS = ["e2e/hello-file", "e2e/multi-reward", "e2e/no-reward", "e2e/sum-numbers"]
ATTEMPTS = 3  # job.yaml n_attempts
MAX_TURNS = 5  # job.yaml agents[0].kwargs.max_turns

sys.path.insert(0, str(KIT))
import mock_llm  # noqa: E402  (the kit's script, read for the expected values)

sys.path.remove(str(KIT))


def hello_dropped_turns(attempt: int) -> int:
    """hello-file's answers the mock cuts at max tokens (finish_reason 'length') on `attempt`."""
    return sum(1 for finish, _ in mock_llm.hello(attempt) if finish == "length")


def _declares_done(reply: tuple[str, str]) -> bool:
    try:
        return bool(json.loads(reply[1]).get("task_complete"))
    except ValueError:
        return False


def sum_runs_out_of_turns(attempt: int) -> bool:
    """sum-numbers on `attempt` never declares the task complete, so it hits max_turns."""
    return not any(_declares_done(reply) for reply in mock_llm.sum_numbers(attempt))


def kit_env(scratch: Path | None = None) -> dict[str, str]:
    """What harbor needs to run the kit offline (as the kit's run.sh sets it)."""
    env = {
        "PYTHONPATH": os.pathsep.join(p for p in (str(KIT), os.environ.get("PYTHONPATH", "")) if p),
        "OPENAI_API_KEY": "sk-mock",
        "HARBOR_TELEMETRY": "0",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    if scratch is not None:  # local_env.py's per-trial sandboxes (mkdtemp)
        env["TMPDIR"] = str(scratch)
    return env


def kit_sets(api_base: str) -> list[str]:
    """The kit's job.yaml pointed at a running mock and at the kit's tasks."""
    return [f"agents.0.kwargs.api_base={api_base}", f"datasets=[{{path: '{TASKS}'}}]"]


def require_sandbox_tools() -> None:
    """tmux (terminus-2 drives it) and util-linux (the sandbox): make test installs them
    (.ci/system-deps)."""
    import pytest

    missing = [tool for tool in ("tmux", "unshare", "nsenter") if shutil.which(tool) is None]
    if missing:
        pytest.fail(
            f"the harbor e2e kit needs {', '.join(missing)}: apt-get install tmux util-linux "
            "(make test installs them as root: .ci/system-deps)"
        )


@contextmanager
def mock_server(log: Path) -> Iterator[str]:
    """The kit's mock LLM on a free loopback port; yields its api_base."""
    process = subprocess.Popen(
        [sys.executable, str(KIT / "mock_llm.py"), "--port", "0", "--log", str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "mock LLM on http://127.0.0.1:PORT/v1"
        if not line.startswith("mock LLM on "):
            raise RuntimeError(f"the mock LLM did not start: {line!r}")
        yield line.split()[-1]
    finally:
        process.terminate()
        process.wait(timeout=10)


def mock_requests(log: Path) -> list[dict[str, object]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
