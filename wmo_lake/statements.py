"""What a DuckDB statement does before it runs, read from its tokens: `wmo-lake sql` and
`wl.query` both refuse a statement that would make DuckDB write a file."""

from __future__ import annotations

from typing import Any

import duckdb

# Settings whose value names a file or dir DuckDB then writes to (a profile after each query,
# a log of every query, spilled data, secrets, extensions): a SET, RESET or PRAGMA of one is
# a write, whatever the connection's read-only flag says. (`wmo-lake sql` confines file access
# too; `wl.query`'s connection is not confined, and a profile written over the lake's manifest
# would break it.)
FILE_SETTINGS = frozenset(
    {
        *("profiling_output", "profile_output", "log_query_path", "temp_directory"),
        *("secret_directory", "extension_directory", "extension_directories"),
        *("home_directory", "logging_sink"),
    }
)
# Table functions called by CALL that start writing files (`storage='file'`).
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


def file_it_writes(statement: Any) -> str | None:
    """The setting (or CALLed function) by which `statement` (one of `extract_statements`)
    would have DuckDB write a file, or None."""
    kind = statement.type.name
    if kind not in ("SET", "CALL"):
        return None
    names = []
    for _, token_kind, token in tokens(statement.query):
        if token_kind == duckdb.token_type.identifier:
            names.append(token.decode("utf-8", "replace").strip('"').lower())
        elif token_kind == duckdb.token_type.operator and token in (b"(", b"="):
            break
    if kind == "SET":
        return names[0] if names and names[0] in FILE_SETTINGS else None
    return names[-1] if names and names[-1] in FILE_CALLS else None
