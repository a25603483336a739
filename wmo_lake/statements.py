"""What a DuckDB statement does before it runs, read from its tokens: `wmo-lake sql` and
`wl.query` both refuse a statement that would make DuckDB write a file."""

from __future__ import annotations

from typing import Any

import duckdb

# Settings whose value names a file or dir DuckDB then writes to (a profile after each query, a
# log of every query, spilled data, persistent secrets, extensions, what `~` means for those): a
# SET or PRAGMA of one is a write, whatever the connection's read-only flag says, unless its
# value is the literal '' (nothing written). (`wmo-lake sql` confines file access too;
# `wl.query`'s connection is not confined, and a profile written over the lake's manifest would
# break it.) A RESET writes nothing but for the spill dir, whose default lies beside the
# database or in the working dir, not the lake's own choice.
RESET_WRITES = frozenset({"temp_directory"})
FILE_SETTINGS = RESET_WRITES | {
    *("profiling_output", "profile_output", "log_query_path", "secret_directory"),
    *("extension_directory", "extension_directories", "home_directory"),
}
# Settings that write files unless set to one of these literals.
SAFE_VALUES = {"logging_sink": frozenset({"'memory'", "'stdout'"})}
# Functions that start writing files when told where or how to store (`storage = 'file'`,
# `storage_path = ...`), by CALL or as a table function; a log kept in memory is no write.
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
    """SET / RESET / PRAGMA name [= | TO] value: the name, when the value makes DuckDB write.
    Only a value that is one literal is read (an expression, `'' || 'x'`, counts as a path)."""
    keywords = [_text(token) for kind, token in found if kind == duckdb.token_type.keyword]
    if "variable" in keywords:  # (a user's variable: no setting)
        return None
    named = [i for i, (kind, _) in enumerate(found) if kind == duckdb.token_type.identifier]
    if not named:
        return None
    name = _text(found[named[0]][1])
    value = [t for _, t in found[named[0] + 1 :] if t not in (b"=", b"TO", b"to", b";")]
    if not value:  # RESET name, or a bare PRAGMA
        return name if name in RESET_WRITES and "reset" in keywords else None
    if name in FILE_SETTINGS:
        return None if value == [b"''"] else name
    if name in SAFE_VALUES:
        literal = value[0].decode("utf-8", "replace").lower()
        return None if len(value) == 1 and literal in SAFE_VALUES[name] else name
    return None


def _passes_file(arguments: list[tuple[Any, bytes]]) -> bool:
    """Whether a call's arguments (the tokens after its '(') say where or how to store: a
    `storage...` parameter, or the string 'file'."""
    depth = 1
    for kind, token in arguments:
        if token == b"(":
            depth += 1
        elif token == b")":
            depth -= 1
            if depth == 0:
                return False
        else:
            literal = kind == duckdb.token_type.string_const
            if _text(token) == "file" if literal else _text(token).startswith("storage"):
                return True
    return False
