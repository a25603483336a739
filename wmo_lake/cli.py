"""The `wmo-lake` command: a thin click layer over the library.

Each subcommand lives in wmo_lake/commands/ (its docstring is its --help); the options they share
are in wmo_lake/commands/options.py.
"""

from __future__ import annotations

import importlib
import io
import os
import sys
import warnings
from typing import NoReturn

import click

from wmo_lake import __version__

# name -> the module defining it: imported only when that command runs, so `wmo-lake ingest`
# does not pay for the query engine's imports (an unchanged re-ingest is mostly start-up).
COMMANDS = {
    "collect": "wmo_lake.commands.collect",
    "ingest": "wmo_lake.commands.ingest",
    "sql": "wmo_lake.commands.sql",
    "stats": "wmo_lake.commands.stats",
    "export": "wmo_lake.commands.export",
    "report": "wmo_lake.commands.report",
    "compare": "wmo_lake.commands.compare",
    "forget": "wmo_lake.commands.forget",
    "tables": "wmo_lake.commands.tables",
    "schema": "wmo_lake.commands.tables",
}


_default_showwarning = warnings.showwarning


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def invoke(self, ctx: click.Context) -> object:
        """Ctrl-C: one line and exit 130 (the shell's code for SIGINT), no traceback; SIGTERM,
        where a command takes it so (`stopping.sigterm_stops`), the same with 143. Every writer
        renames its file into place only when complete, so nothing is half-written."""
        from wmo_lake.stopping import FINISHED, TERMINATED

        TERMINATED.clear()  # (a SIGTERM an earlier command of this process took is not this one's)
        FINISHED.clear()
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as error:
            # (an ingest stopped once it had committed says what is in: InterruptedAfterCommit)
            self._interrupted(getattr(error, "message", None))
        except Exception as error:
            from wmo_lake.stopping import query_interrupted

            if not query_interrupted(error):  # (a Ctrl-C that DuckDB took mid-query)
                raise
            self._interrupted()

    @staticmethod
    def _interrupted(message: str | None = None) -> NoReturn:
        from wmo_lake.stopping import INTERRUPTED, finished_message, stopped_message

        said, code = stopped_message(finished_message() or message or INTERRUPTED)
        click.echo(said, err=True)
        sys.exit(code)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = COMMANDS.get(cmd_name)
        if module is None:
            return None
        command = getattr(importlib.import_module(module), cmd_name)
        assert isinstance(command, click.Command)
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wmo-lake")
def cli() -> None:
    """Harbor agent-training rollouts as a columnar lake, and every batch-health metric as SQL.

    \b
    wmo-lake collect --template job.yaml --run-dir runs/exp1 --step 0
                                          run a step's harbor job, ingest it, print its stats
    wmo-lake ingest runs/                 read run trees into ./lake (Parquet)
    wmo-lake sql "SELECT ... FROM trials"  ask anything, across every batch
    wmo-lake stats                         per-batch RolloutStats (WMO's rollout_stats)
    wmo-lake tables                        every table and view, row counts, what a row is
    wmo-lake forget --batch 'scratch/*'    remove batches (atomic; --dry-run lists them)
    wmo-lake schema trials                 one table's columns, types and meaning
    wmo-lake export datums --out F.parquet  training datums for a trainer (Tinker)
    wmo-lake export conversations --out F   SFT conversations from ATIF trajectories
    wmo-lake report --out report.html       one offline HTML page of a run across steps
    wmo-lake compare RUN_A RUN_B            metric deltas and tasks that flipped

    The lake is also a DuckDB database: `cd lake && duckdb lake.duckdb`, with a DuckDB at least
    as new as the one that wrote it (its views name their files relative to the lake dir:
    elsewhere, SET file_search_path = 'lake' first).
    """
    warnings.showwarning = _show_warning


def _show_warning(
    message: Warning | str, category: type[Warning], *args: object, **kw: object
) -> None:
    """The library's own warnings (a reward key no trial has, a lake read by older rules) as one
    `warning:` line on stderr."""
    from wmo_lake.checks import LakeWarning

    if issubclass(category, LakeWarning):
        click.echo(f"warning: {message}", err=True)
    else:
        _default_showwarning(message, category, *args, **kw)  # type: ignore[arg-type]


def _run_as_the_program() -> bool:
    """Whether this process is the `wmo-lake` program: its console script, or `python -m
    wmo_lake.cli`. Not a process that imported `main` and called it (a test harness), which
    goes on after a command that failed and must find everything as it was."""
    program = sys.modules.get("__main__")
    spec = getattr(program, "__spec__", None)
    if spec is not None and spec.name == "wmo_lake.cli":
        return True
    script = getattr(program, "__file__", None) or ""
    return os.path.basename(script).removesuffix(".exe") == "wmo-lake"


def _tolerant_streams() -> None:
    """On a terminal whose encoding is not UTF-8 (a Latin-1 locale, PYTHONIOENCODING=ascii),
    what it cannot show is written as an escape (`\\u2713`), not a UnicodeEncodeError traceback
    after half a table. (Tables are drawn in ASCII there; data formats write UTF-8 bytes.)"""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("-", "")
        if not encoding.startswith("utf") and isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")


def _hold_closed_fds() -> None:
    """Hold each of fds 0-2 the process was started without (`<&-`, `>&-`, `2>&-`): else the
    next file opened (a lake's lake.duckdb) gets that number, and what is meant for stdout or
    stderr (`-o /dev/stderr`) lands in that file. Each holds a stand-in of its own (`_stand_in`),
    so a path that reaches it (`-o /dev/stdout`, a link to a dir of fds) is told by its
    identity (`stopping.fd_reached`), where /dev/null is everyone's."""
    from wmo_lake.stopping import CLOSED_FDS

    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            held = _stand_in(fd)
            if held != fd:
                os.dup2(held, fd)
                os.close(held)
            os.set_inheritable(fd, True)  # (as the fd it stands for was)
            CLOSED_FDS.add(fd)
    if sys.stderr is None:  # (messages go to the /dev/null held: the caller closed stderr)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115


def _stand_in(fd: int) -> int:
    """What a closed fd 0-2 holds: stdin a pipe with no writer (reads end at once), stdout one
    with no reader (a write fails, EPIPE), stderr an unnamed file in the temp dir (messages are
    dropped, as asked; /dev/null where the temp dir takes no such file)."""
    if fd in (0, 1):
        reader, writer = os.pipe()
        os.close(writer if fd == 0 else reader)
        return reader if fd == 0 else writer
    import tempfile

    try:
        return os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_WRONLY, 0o600)
    except (OSError, AttributeError):  # (no O_TMPFILE there)
        return os.open(os.devnull, os.O_WRONLY)


def _writes_only_a_file(args: list[str]) -> bool:
    """Whether the command line is `sql ... -o FILE` (`--output FILE`), which writes nothing to
    stdout: every other command prints there, most after their work (an ingest's commit, an
    export's files), so with stdout closed they are refused before it."""
    return (
        bool(args)
        and args[0] == "sql"
        and any(
            arg in ("-o", "--output") or arg.startswith(("--output=", "-o")) for arg in args[1:]
        )
    )


def main() -> None:
    """The `wmo-lake` entry point: the command group, then (after a command that asked for it and
    succeeded) an exit without the interpreter's teardown, stdout and stderr flushed first."""
    from wmo_lake.commands.options import OWN_PROCESS
    from wmo_lake.lean import program_environment

    if _run_as_the_program():
        OWN_PROCESS.append(True)
        program_environment()
    from wmo_lake.stopping import STDOUT_CLOSED, ClosedStdout, StdoutClosedError

    _tolerant_streams()
    _hold_closed_fds()
    if sys.stdout is None:  # (`>&-`: Python has no stdout at all)
        sys.stdout = ClosedStdout()
        if not _writes_only_a_file(sys.argv[1:]):
            if sys.stderr is not None:
                sys.stderr.write(f"Error: {STDOUT_CLOSED}\n")
            sys.exit(1)
    try:
        cli()
    except StdoutClosedError as error:
        if sys.stderr is not None:
            sys.stderr.write(f"Error: {error}\n")
        sys.exit(1)
    except SystemExit as done:
        from wmo_lake.commands.options import QUICK_EXIT
        from wmo_lake.stopping import QUICK_EXIT_ON_STOP

        succeeded = bool(QUICK_EXIT) and done.code in (0, None)
        if succeeded or (QUICK_EXIT_ON_STOP and done.code in (130, 143)):
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except OSError:
                raise done from None
            os._exit(0 if succeeded else int(done.code or 0))
        raise


if __name__ == "__main__":
    main()
