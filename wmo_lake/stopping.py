"""How a command stops: Ctrl-C and SIGTERM.

Ctrl-C says one line and exits 130, SIGTERM (what a scheduler or `timeout` sends) the same with
143, never a traceback. Where a command holds work that must not be left half-done (an ingest's
commit, an export's file), `sigterm_stops` makes SIGTERM take Ctrl-C's path, so the same abort
runs; a DuckDB query is interrupted through its connection (`ctrl_c_stops`), and a long COPY runs
in a thread so the signal reaches Python at once (`execute_interruptibly`). The CLI turns what
these raise into its line and exit code (`cli.LazyGroup.invoke`, `stopped_message`).
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import duckdb

INTERRUPTED = "interrupted: nothing was written or changed"
# Ctrl-C while rows stream to stdout: what is there already stays (a pipe's reader took it, a
# redirected file holds it), and may read as a whole, shorter result (csv, jsonl).
CUT_OFF = (
    "interrupted: the rows printed so far are part of the result only, cut off where it "
    "stopped; nothing was changed"
)


STDOUT_CLOSED = "stdout is closed; give wmo-lake one (`> /dev/null` drops it)"


class StdoutClosedError(OSError):
    """A write to the stdout the process was started without (`>&-`): the CLI says STDOUT_CLOSED,
    exit 1."""

    def __init__(self) -> None:
        super().__init__(errno.EBADF, STDOUT_CLOSED)

    def __str__(self) -> str:
        return STDOUT_CLOSED


class ClosedStdout(io.TextIOBase):
    """sys.stdout when the process has none: what would be written there is an error. (Its fd 1
    is held on /dev/null, which is not this stream: see CLOSED_FDS.)"""

    def write(self, text: str) -> int:
        raise StdoutClosedError

    def flush(self) -> None:
        pass  # (nothing written: nothing lost)

    def fileno(self) -> int:
        raise StdoutClosedError


# The fds 0-2 the process was started without (`<&-`, `>&-`, `2>&-`), each held on /dev/null
# since (`cli.main`), so that no file the command opens takes their numbers.
CLOSED_FDS: set[int] = set()
STREAM_NAMES = ("stdin", "stdout", "stderr")
# A path naming a file descriptor: /dev/fd/N, /proc/self/fd/N, /proc/thread-self/fd/N,
# /proc/PID/fd/N, /proc/PID/task/TID/fd/N (and /dev/stdout & co., links to /proc/self/fd/N)
_FD_PATH = re.compile(r"/(?:dev/fd|proc/(?:self|thread-self|\d+)(?:/task/\d+)?/fd)/(\d+)")


def fd_reached(path: os.PathLike[str] | str) -> int | None:
    """The file descriptor `path` reaches, as the kernel resolves it (every link, `..` after
    them): one not open that it names through /proc (`/dev/fd/3`, a link to a dir of them:
    whatever the process opens next would be written), or an open one whose pipe or socket it
    is (a piped stdin: the write would wait on itself), or whose regular file it is, open for
    writing (`3>> log`: what was appended there would be lost). A file some fd only reads
    (`< data.csv`, a `flock`), a terminal or /dev/null is no one's. None for any other path."""
    import fcntl
    import stat

    try:
        named = os.stat(path)
    except (OSError, ValueError):
        real = os.path.realpath(path)  # (a magic link to an fd not open is left as named)
        match = _FD_PATH.fullmatch("/" + real.lstrip("/"))
        return None if match is None else int(match.group(1))
    if not (
        stat.S_ISREG(named.st_mode) or stat.S_ISFIFO(named.st_mode) or stat.S_ISSOCK(named.st_mode)
    ):
        return None
    try:
        fds = sorted(int(name) for name in os.listdir("/proc/self/fd"))
    except OSError:  # (no /proc: the three streams)
        fds = [0, 1, 2]
    for fd in fds:
        try:
            held = os.fstat(fd)
            writing = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY
        except OSError:  # (the listing's own fd, closed by now)
            continue
        if (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino):
            continue
        if writing or not stat.S_ISREG(named.st_mode):
            return fd
    return None


def appends(fd: int) -> bool:
    """Whether `fd` (stdout, stderr) is a file opened to append to (`>> log`)."""
    import fcntl

    try:
        return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND)
    except OSError:
        return False


def fd_named(path: os.PathLike[str] | str) -> int | None:
    """The file descriptor `path` names as written, following links (`/dev/stdout` is 1, a link
    to `/proc/self/fd/3` is 3); None for any other path. (How a closed stream is told: its fd
    holds /dev/null, which `fd_reached` leaves to no one.)"""
    current = os.path.abspath(path)
    for _ in range(40):  # (a loop of links names no fd)
        current = "/" + current.lstrip("/")  # (`//dev/stdout`)
        match = _FD_PATH.fullmatch(current)
        if match is not None:
            return int(match.group(1))
        try:
            target = os.readlink(current)
        except (OSError, ValueError):
            return None
        current = os.path.normpath(os.path.join(os.path.dirname(current), target))
    return None


# What a command had finished when a Ctrl-C or SIGTERM came after it (its output complete): the
# CLI says that, not INTERRUPTED.
FINISHED: list[str] = []


def finished(what: str) -> None:
    """The command's output is complete (`what` says which): a stop from here on says so."""
    FINISHED[:] = [what]


def finished_message() -> str | None:
    """The line for a stop after `finished`, else None."""
    if not FINISHED:
        return None
    return f"interrupted after the command had finished: {FINISHED[-1]}"


# Set (in the `wmo-lake` program's own process only: commands.options.exit_quickly_when_stopped)
# by a command whose stop (Ctrl-C, SIGTERM) removes what it wrote before it is said: the process
# then ends at once after saying it, and its queries may be interrupted through their connection
# (`ctrl_c_stops`). Torn down instead, DuckDB's state after a query interrupted mid-gather aborted
# the process (SIGABRT, "exception not rethrown") in 4 of 40 stopped exports, after the one line
# and the clean-up; a caller's own process (a script that catches KeyboardInterrupt) is torn
# down, so there a query is left to DuckDB's own signal check.
QUICK_EXIT_ON_STOP: list[bool] = []


# SIGTERM's number once `sigterm_stops` took it: the CLI then says the command was stopped by
# SIGTERM, and exits 143, where a Ctrl-C says "interrupted" and exits 130.
TERMINATED: list[int] = []


@contextlib.contextmanager
def sigterm_stops() -> Iterator[None]:
    """Within (on the main thread): SIGTERM, what a scheduler or `timeout` sends, stops the
    command as Ctrl-C does (an ingest's abort, nothing half-committed, its readers stopped, one
    line) instead of ending the process without a word. A second SIGTERM ends it at once. An
    asyncio job run within by `run_async_stoppably` (harbor's) is cancelled instead."""
    import signal

    def stop(signum: int, frame: Any) -> None:
        TERMINATED.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
            raise KeyboardInterrupt  # (SIGINT ignored, as in a script's background job)
        # through SIGINT's own handler: pyspark's cancels its jobs (raised here, inside a py4j
        # call, the interrupt was logged as an error with a traceback), `ctrl_c_stops`
        # interrupts a DuckDB query; Python's default raises KeyboardInterrupt
        signal.raise_signal(signal.SIGINT)

    _STOP_HANDLERS.append(stop)
    try:
        with on_sigterm(stop):
            yield
    finally:
        _STOP_HANDLERS.remove(stop)


_STOP_HANDLERS: list[Callable[[int, Any], None]] = []  # (sigterm_stops' handlers in place)


def run_async_stoppably[Result](main: Callable[[], Coroutine[Any, Any, Result]]) -> Result:
    """`asyncio.run(main())`; where `sigterm_stops` holds SIGTERM, a SIGTERM cancels main's task
    as asyncio's own Ctrl-C handler does (a CancelledError at the task's next await, which its
    subtasks get too), then raises KeyboardInterrupt. `sigterm_stops` raises KeyboardInterrupt in
    whatever frame runs when SIGINT is ignored (a script's background job): inside a harbor
    trial, whose `except Exception` let it by and whose `finally` then wrote a result.json that
    reads as finished (no exception), so the trial was kept, half run, and never run again."""
    import asyncio
    import signal
    import threading

    previous = signal.getsignal(signal.SIGTERM)
    if threading.current_thread() is not threading.main_thread() or not any(
        previous is handler for handler in _STOP_HANDLERS
    ):
        return asyncio.run(main())  # (a caller's own handler, or none: left alone)
    heard: list[int] = []
    running: list[asyncio.Task[Result]] = []

    def cancel(signum: int, frame: Any) -> None:
        TERMINATED.append(signum)
        heard.append(signum)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (a second one ends the process at once)
        try:
            task = running[0]
            task.get_loop().call_soon_threadsafe(task.cancel)
        except (IndexError, RuntimeError):  # (not started, or its loop closed: nothing to cancel)
            raise KeyboardInterrupt from None

    async def started() -> Result:
        running.append(asyncio.current_task())  # type: ignore[arg-type]
        return await main()

    signal.signal(signal.SIGTERM, cancel)
    try:
        result = asyncio.run(started())
    except asyncio.CancelledError:
        if heard:
            raise KeyboardInterrupt from None
        raise
    finally:
        if not heard:
            signal.signal(signal.SIGTERM, previous)
    if heard:  # (it came as main ended: the command stops all the same)
        raise KeyboardInterrupt
    return result


def stopped_message(message: str) -> tuple[str, int]:
    """A Ctrl-C message ("interrupted...") and exit code, as said when SIGTERM stopped the
    command instead."""
    if not TERMINATED:
        return message, 130
    return "stopped by SIGTERM" + message.removeprefix("interrupted"), 128 + TERMINATED[0]


class OutputCutOff(KeyboardInterrupt):
    """Ctrl-C while a result streamed to a Python stream in this process (the CLI says
    CUT_OFF, exit 130); the process is not ended, as a real stdout's COPY ends it."""

    message = CUT_OFF


@contextlib.contextmanager
def ctrl_c_stops(
    con: duckdb.DuckDBPyConnection, heard: list[int] | None = None, interrupt: bool = True
) -> Iterator[None]:
    """Within: Ctrl-C stops the query `con` runs, always. Python's own SIGINT handler raises
    KeyboardInterrupt inside DuckDB's signal check, and DuckDB 2.0 turns that into an
    interruption only some of the time: in 5 of 27 tries here a long query ran on, and ignored
    every later Ctrl-C too. Interrupting the connection from the handler stopped 30 of 30.
    Left alone off the main thread and where SIGINT is not Python's default (a script's
    background job ignores it; a caller may have its own handler). `heard` gets each SIGINT's
    number: an interrupted query may surface as another error (the connection busy, a result
    cut short), which its caller then says as the stop it was. `interrupt` False: only heard,
    the query left to DuckDB's own check (see QUICK_EXIT_ON_STOP)."""
    import signal
    import threading

    default = signal.default_int_handler
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not default
    ):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        if heard is not None:
            heard.append(signum)
        if interrupt:
            with contextlib.suppress(Exception):  # (a connection busy in another thread refuses)
                con.interrupt()
        default(signum, frame)

    signal.signal(signal.SIGINT, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, default)


def query_interrupted(error: BaseException) -> bool:
    """Ctrl-C that landed inside a DuckDB query: DuckDB takes the SIGINT itself and raises its
    own error instead of KeyboardInterrupt (RuntimeError('Query interrupted') in duckdb 2.0,
    InterruptException before)."""
    loaded = sys.modules.get("duckdb")  # (not imported: the error cannot be DuckDB's)
    if loaded is not None and isinstance(error, loaded.InterruptException):
        return True
    return isinstance(error, RuntimeError) and str(error) == "Query interrupted"


def stopped_by_user(error: BaseException) -> bool:
    """Ctrl-C (or SIGTERM, see `sigterm_stops`), wherever it landed: KeyboardInterrupt, or a
    DuckDB query's own error for it (`query_interrupted`)."""
    return isinstance(error, KeyboardInterrupt) or query_interrupted(error)


def execute_interruptibly(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    on_abort: Callable[[], None] | None,
    *,
    before_exit: Callable[[], None] | None = None,
) -> None:
    """Run `sql` (a long COPY) in a worker thread while this one waits, so Ctrl-C or SIGTERM
    reaches Python at once. DuckDB's connection refuses a second call (even interrupt()) while
    the COPY runs, so an interrupted CLI removes the partial file (`on_abort`), says so in one
    line and ends the process there (exit 130, or 143 for SIGTERM) with the COPY unfinished.
    Without `on_abort` the COPY writes to stdout, whose rows so far stay: `CUT_OFF`.
    `before_exit` runs before the process ends there either way (no atexit handler will)."""
    from wmo_lake.background import Background

    try:
        # (started inside the try: a signal while Thread.start waits for the thread to run
        # would otherwise unwind to a close() of the connection the COPY is busy on: exit 1)
        Background(lambda: con.execute(sql), "wmo-lake-copy").wait(poll=0.1)
    except (KeyboardInterrupt, SystemExit) as stop:
        if on_abort is not None:
            on_abort()
        if before_exit is not None:
            before_exit()
        code = 130 if isinstance(stop, KeyboardInterrupt) else int(stop.code or 143)
        if code == 130:
            sys.stderr.write((INTERRUPTED if on_abort is not None else CUT_OFF) + "\n")
        for stream in (sys.stderr, sys.stdout):  # (one that cannot be written: exit anyway)
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


@contextlib.contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """While a file is being written, SIGTERM unwinds like Ctrl-C (SystemExit 143), so the
    temporary file is removed instead of left behind."""

    def terminate(signum: int, frame: Any) -> None:
        sys.exit(128 + signum)

    with on_sigterm(terminate):
        yield


@contextlib.contextmanager
def on_sigterm(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """Within: `handler` takes SIGTERM (on the main thread only, where Python runs handlers),
    the previous one after."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
