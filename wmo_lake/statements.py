"""What a DuckDB statement does before it runs, read from its tokens: `wmo-lake sql` and
`wl.query` both refuse a statement that would make DuckDB write a file."""

from __future__ import annotations

from typing import Any

import duckdb

# Settings whose value names a file or dir DuckDB then writes to (a profile after each query, a
# log of every query, spilled data, persistent secrets): a SET or PRAGMA of one to a path is a
# write, whatever the connection's read-only flag says. (`wmo-lake sql` confines file access
# too; `wl.query`'s connection is not confined, and a profile written over the lake's manifest
# would break it.) Set to '' (nothing written) it is no write, nor reset, but for the spill dir,
# whose default is beside the database or in the working dir, not the lake's own choice.
FILE_SETTINGS = frozenset({"profiling_output", "profile_output", "log_query_path"})
RESET_WRITES = frozenset({"temp_directory"})
FILE_SETTINGS |= RESET_WRITES | {"secret_directory"}
# A setting that writes files for one of its values only (lowercased).
FILE_VALUES = {"logging_sink": "file"}
# Functions that start writing files given the string 'file' (`storage = 'file'`), by CALL or as
# a table function.
FILE_CALLS = frozenset({"enable_logging"})


def tokens(query: str) -> list[tuple[int, Any, bytes]]:
    """DuckDB's tokens of `query`: (byte offset, token_type, the token's text). A token's text
    runs to the next one's start (the tokenizer gives starts only), whitespace stripped."""
    text = query.encode()  # the tokenizer's positions count bytes
    found = duckdb.tokenize(query)
    ends = [position for position, _ in found[1:]] + [len(text)]
    return [
        (position, kind, text[position:end].strip())
        for (position, kind), end in zip(found, ends, strict=True)
    ]


def _text(token: bytes) -> str:
    """A token as text: a quoted name or string unquoted, lowercased."""
    return token.decode("utf-8", "replace").strip("\"'").lower()


def file_it_writes(statement: Any) -> str | None:
    """The setting (or function) by which `statement` (one of `extract_statements`) would have
    DuckDB write a file, or None."""
    found = [(kind, token) for _, kind, token in tokens(statement.query)]
    if statement.type.name == "SET":
        return _setting_it_writes(found)
    for index, (kind, token) in enumerate(found[:-1]):
        called = kind == duckdb.token_type.identifier and found[index + 1][1] == b"("
        if called and _text(token) in FILE_CALLS and _passes_file(found[index + 2 :]):
            return _text(token)
    return None


def _setting_it_writes(found: list[tuple[Any, bytes]]) -> str | None:
    """SET / RESET / PRAGMA name [= | TO] value: the name, when the value makes DuckDB write."""
    keywords = [_text(token) for kind, token in found if kind == duckdb.token_type.keyword]
    if "variable" in keywords:  # (a user's variable: no setting)
        return None
    names = [_text(token) for kind, token in found if kind == duckdb.token_type.identifier]
    if not names:
        return None
    name = names[0]
    values = [
        _text(token)
        for kind, token in found
        if kind in (duckdb.token_type.string_const, duckdb.token_type.numeric_const)
    ]
    if not values:  # RESET name, or a bare PRAGMA
        return name if name in RESET_WRITES and "reset" in keywords else None
    if name in FILE_SETTINGS:
        return name if values[0] else None
    return name if FILE_VALUES.get(name) == values[0] else None


def _passes_file(arguments: list[tuple[Any, bytes]]) -> bool:
    """Whether a call's arguments (the tokens after its '(') hold the string 'file'."""
    depth = 1
    for kind, token in arguments:
        if token == b"(":
            depth += 1
        elif token == b")":
            depth -= 1
            if depth == 0:
                return False
        elif kind == duckdb.token_type.string_const and _text(token) == "file":
            return True
    return False
