"""Reading one JSON artifact from a trial dir: never raises, says exactly what was wrong.

msgspec decodes (as fast as orjson, and it skips nothing we need); the stdlib decoder is the
fallback for what msgspec refuses but harbor's readers accept (NaN, Infinity, 1e400), so every
file the seeds' `json.loads` reads, we read. And no more: the seeds read a file as
`json.loads(path.read_text("utf-8"))`, text in, so the fallback is given text too. Given bytes,
`json.loads` would sniff the encoding and take a UTF-8 byte-order mark, or UTF-16 without one,
as JSON; as text both are invalid JSON, the seeds' reading (an unreadable artifact).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec

_DECODER = msgspec.json.Decoder()
# A `\\uD800`-`\\uDFFF` escape: valid JSON that `json.loads` reads (msgspec does not), and what
# `json.dumps` writes for a str holding surrogateescape'd bytes. Paired ones make one character;
# a lone one stays a surrogate code point, which no UTF-8 text (Arrow, Parquet) can hold.
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
LONE_SURROGATE = "lone_surrogate"  # the `problems` kind for a string whose surrogates were replaced
_SHOWN_FIELDS = 5


class ProblemSink(Protocol):
    """Where a decode reports what it had to change (a `tables.fields.ProblemLog`)."""

    def add(self, kind: str, path: Path | str, message: str) -> None: ...


@dataclass(frozen=True)
class ReadFailure:
    """Why a JSON file could not be read: a problem `kind` and a message for a person."""

    kind: str
    message: str


# Why a read failed that says nothing of the file itself (no such file, a dir, a FIFO or a
# socket, a path too long or looping): the file is as it is, and reading it again gives the same.
_LASTING = {
    errno.ENOENT,
    errno.ENXIO,  # (a socket's open)
    errno.EISDIR,
    errno.ENOTDIR,
    errno.EINVAL,
    errno.ELOOP,
    errno.ENAMETOOLONG,
}
# Within `watching_reads`: the paths whose read failed for a reason a later read may not meet
# (EACCES, EIO: a permission granted by a chmod or a group moves no size or mtime, which is all
# the fingerprint sees)
_WATCHERS: list[list[str]] = []


@contextlib.contextmanager
def watching_reads() -> Iterator[list[str]]:
    """Within: the list it gives gets the paths whose read failed for a reason a later read may
    not meet (see `_LASTING`); a dir with such a file is read again on the next ingest."""
    failed: list[str] = []
    _WATCHERS.append(failed)
    try:
        yield failed
    finally:
        _WATCHERS.pop()


def read_file(path: Path | str) -> bytes:
    """`path.read_bytes()`, in a third of its time (~10 us against ~35 for a small file, read
    four times a trial): no buffered file object, one fstat and one read for a file that keeps
    its size; raises as read_bytes does."""
    try:
        return _read_file(path)
    except OSError as error:
        if _WATCHERS and error.errno not in _LASTING:
            # (resolved: the next ingest may reach the dir by another PATH, from another cwd)
            _WATCHERS[-1].append(os.path.realpath(path))
        raise


def read_whole_file(path: Path | str) -> bytes:
    """read_file, its failure never watched (the check whether a failed read reads now)."""
    return _read_file(path)


def _read_file(path: Path | str) -> bytes:
    # O_NONBLOCK: a FIFO with no writer would block the open, and the ingest, forever (a
    # regular file's reads ignore the flag)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, socket or device)", str(path))
        size = status.st_size
        data = os.read(fd, size + 1)
        if len(data) != size:  # grown or shrunk since the fstat, or too big for one read
            chunks = [data]
            while chunk := os.read(fd, max(size, 2**20)):
                chunks.append(chunk)
            data = b"".join(chunks)
        return data
    finally:
        os.close(fd)


def read_bytes(path: Path | str) -> bytes | ReadFailure | None:
    """The file's bytes; None when it does not exist; a ReadFailure when it cannot be read."""
    try:
        return read_file(path)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        return ReadFailure("unreadable_file", f"{path} is a directory, expected a JSON file")
    except OSError as error:
        return ReadFailure("unreadable_file", f"cannot read {path}: {error.strerror or error}")


def check_text(data: bytes, path: Path | str) -> ReadFailure | None:
    """Why `data` cannot be a JSON document at all (empty, not UTF-8), or None."""
    if not data or data.isspace():  # (not data.strip(): that copies a 10 MB file)
        return ReadFailure("empty_file", f"{path} is empty; expected a JSON document")
    if data.isascii():  # what json.dumps writes by default; a scan with no copy
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return ReadFailure(
            "not_utf8",
            f"{path} is not UTF-8 (bad byte at offset {error.start}); harbor writes UTF-8 JSON, "
            "so the file is corrupt: re-run the trial or restore the file",
        )
    return None


def decode(data: bytes, path: Path | str, problems: ProblemSink | None = None) -> Any | ReadFailure:
    """The JSON value in `data`, or a ReadFailure naming the file and what to do. A string with a
    lone surrogate escape comes back with U+FFFD in its place, a `lone_surrogate` problem in
    `problems` naming the fields (without `problems` the change goes unreported: a caller that
    only looks, and whose file another reader reports)."""
    failure = check_text(data, path)
    if failure is not None:
        return failure
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):  # (nested deeper than msgspec recurses)
        pass
    try:
        value = json.loads(data.decode("utf-8"))  # (check_text has seen it is UTF-8)
    except (ValueError, RecursionError) as error:
        why = why_invalid(data, too_deep=isinstance(error, RecursionError))
        return ReadFailure("invalid_json", f"{path} is not valid JSON ({error}); {why}")
    if b"\\u" not in data or not SURROGATE_ESCAPE.search(data):
        return value
    value, fields = replace_lone_surrogates(value)
    if fields and problems is not None:
        shown = ", ".join(fields[:_SHOWN_FIELDS])
        more = f" and {len(fields) - _SHOWN_FIELDS} more" if len(fields) > _SHOWN_FIELDS else ""
        problems.add(
            LONE_SURROGATE,
            path,
            f"{Path(path).name}: {shown}{more} holds a lone surrogate escape (\\udXXX, what "
            "json.dumps writes for bytes that were not UTF-8), expected Unicode text; each is "
            "stored as U+FFFD, the character a UTF-8 reader shows for such bytes",
        )
    return value


_LONGEST_LITERAL = len("-Infinity")
_TAIL = "\x00 \t\r\n"  # what may follow a document's end: JSON whitespace, a crash's NUL bytes


def why_invalid(data: bytes, too_deep: bool = False) -> str:
    """What most likely made UTF-8 `data` invalid JSON, and what to do: the hint of an
    `invalid_json` problem (only a broken file pays for the second parse)."""
    if too_deep:
        return (
            "it nests arrays or objects deeper than a JSON reader recurses, which no file of "
            "a harbor run does: restore it"
        )
    if data.startswith(b"\xef\xbb\xbf"):
        return (
            "it starts with a UTF-8 byte-order mark (BOM), which harbor never writes and "
            "upstream's readers reject: the file was edited by hand; save it without the BOM"
        )
    if not data.strip(_TAIL.encode()):
        return (
            "it holds only NUL bytes, what a crash or a full disk leaves (its size written, "
            "its data never): re-run the trial or restore the file"
        )
    if b"\x00" in data[:2]:
        return (
            "it looks like UTF-16 text (NUL bytes between its characters), and harbor writes "
            "UTF-8: convert it to UTF-8, or restore it"
        )
    text = data.decode("utf-8", "replace")
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        if error.msg == "Extra data":
            if not text[error.pos :].strip(_TAIL):
                return (
                    "a whole JSON document followed by NUL bytes, what a crash or a full disk "
                    "leaves: re-run the trial or restore the file"
                )
            return (
                f"a whole JSON document ends at line {error.lineno} column {error.colno} and "
                "more text follows (two documents, or text appended), which harbor never "
                "writes: restore the file"
            )
        # Cut off: the error is at the end, in a string running to it, or at a literal or
        # number cut short (`tr`, `-Infinit`, `1.`: the error points at its start).
        at_end = error.pos >= len(text.rstrip(_TAIL)) - _LONGEST_LITERAL
        if at_end or error.msg.startswith("Unterminated string"):
            return "it was probably truncated while being written: re-run the trial or restore it"
        return (
            f"it breaks at line {error.lineno} column {error.colno}, before its end: the "
            "file was edited or damaged; restore it or re-run the trial"
        )
    except (ValueError, RecursionError):  # (past the recursion limit: said by the caller's error)
        pass
    return "restore it or re-run the trial"


def replace_lone_surrogates(value: Any) -> tuple[Any, list[str]]:
    """`value` with every surrogate code point in its strings and keys replaced by U+FFFD (after
    `json.loads` every one left is lone: a pair is one character), and the JSON paths changed.
    Iterative: a document nests as deep as `json.loads` allowed."""
    fields: list[str] = []
    root = [value]
    stack: list[tuple[list[Any] | dict[str, Any], Any, str]] = [(root, 0, "")]
    while stack:
        parent, key, where = stack.pop()
        item = parent[key]
        if isinstance(item, str):
            if not item.isascii() and _has_surrogate(item):
                parent[key] = _replaced(item)
                fields.append(where or "(the document)")
        elif isinstance(item, list):
            for index in range(len(item)):
                stack.append((item, index, f"{where}[{index}]"))
        elif isinstance(item, dict):
            for name in list(item):
                if not name.isascii() and _has_surrogate(name):
                    fields.append(f"{where}.{name!a} (a key)".lstrip("."))
                    item[_replaced(name)] = item.pop(name)  # (moves it last: order is no data)
                    name = _replaced(name)
                stack.append((item, name, f"{where}.{name}".lstrip(".")))
    return root[0], sorted(set(fields))


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _replaced(text: str) -> str:
    return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)


def read_json(path: Path | str, problems: ProblemSink | None = None) -> Any | ReadFailure | None:
    """Decoded JSON from `path`; None when missing; ReadFailure when unreadable, or when it holds
    JSON `null` (which every file read here is not: it was read as missing, without a word)."""
    data = read_bytes(path)
    if data is None or isinstance(data, ReadFailure):
        return data
    doc = decode(data, path, problems)
    if doc is None:
        return ReadFailure("not_an_object", f"{path} holds JSON null, expected an object")
    return doc


def to_json_text(value: Any) -> str:
    """Compact JSON text of a decoded value, kept exact (ints stay ints, NaN stays NaN)."""
    kind = type(value)  # a number (a reward, every trial) is json.dumps' own repr, ~20x faster
    if kind is int or (kind is float and math.isfinite(value)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
