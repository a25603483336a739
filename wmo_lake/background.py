"""Work on a thread of its own while the caller goes on (a DuckDB query beside imports or
another query, a sweep beside lake.duckdb's build), its result or error handed back to the
caller's thread when it waits.

    plan = Background(lambda: con.execute(query), "wmo-lake-plan")
    import pyarrow  # meanwhile
    result = plan.wait()  # raises here what the query raised
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Background[T]:
    """`work()` started at once on a daemon thread named `name`."""

    def __init__(self, work: Callable[[], T], name: str) -> None:
        self._work = work
        self._result: list[T] = []
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result.append(self._work())
        except BaseException as error:  # raised again by wait(), in the caller's thread
            self._error = error

    def wait(self, poll: float | None = None) -> T:
        """The work's result once it is done, or what it raised. `poll`: wait in steps of that
        many seconds, so that a signal (Ctrl-C) reaches the calling thread at once."""
        while self._thread.is_alive():
            self._thread.join(poll)
        if self._error is not None:
            raise self._error
        return self._result[0]
