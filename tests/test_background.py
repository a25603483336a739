"""`Background`: work runs beside the caller, and its result or error comes back where it waits."""

from __future__ import annotations

import threading

import pytest

from wmo_lake.background import Background


@pytest.mark.parametrize("poll", [None, 0.01])
def test_the_work_runs_beside_the_caller_and_its_result_comes_back(poll: float | None) -> None:
    started = threading.Event()
    go_on = threading.Event()

    def work() -> str:
        started.set()
        # set by the caller only after Background() returned: work run inline would time out
        return "done" if go_on.wait(timeout=5) else "ran inline"

    job = Background(work, "test-work")
    assert started.wait(timeout=5)
    go_on.set()
    assert job.wait(poll) == "done"


def test_what_the_work_raised_is_raised_where_the_caller_waits() -> None:
    def work() -> None:
        raise ValueError("bad query")

    job = Background(work, "test-work")
    with pytest.raises(ValueError, match="bad query"):
        job.wait()
