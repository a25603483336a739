"""`wmo_lake.statements.file_it_writes`: which statements would have DuckDB write a file
(refused by `wmo-lake sql` and `wl.query`), and which only look alike."""

from __future__ import annotations

import duckdb
import pytest

from wmo_lake.statements import file_it_writes

CASES = {
    "SET profiling_output = '/tmp/x'": "profiling_output",
    "PRAGMA profiling_output = '/tmp/x'": "profiling_output",
    "-- a comment\nSET GLOBAL \"Profiling_Output\" TO '/x'": "profiling_output",
    "SET log_query_path = '/tmp/q'": "log_query_path",
    "SET temp_directory = '/tmp/t'": "temp_directory",
    "RESET temp_directory": "temp_directory",  # (DuckDB's default spills beside the database)
    "SET logging_sink = 'file'": "logging_sink",
    "CALL enable_logging(storage = 'file', storage_path = '/x')": "enable_logging",
    "CALL main.enable_logging(storage = 'file')": "enable_logging",
    "SELECT * FROM enable_logging(storage = 'file', storage_path = '/x')": "enable_logging",
    "FROM enable_logging(storage = 'FILE')": "enable_logging",
    # (review: a path alone logs to files; an expression or a quote is no empty value)
    "CALL enable_logging(storage_path = '/x')": "enable_logging",
    "CALL enable_logging(storage := 'fi' || 'le', storage_path := '/x')": "enable_logging",
    "SET log_query_path = '' || '/lake/q.log'": "log_query_path",
    "SET log_query_path = ''''": "log_query_path",
    "SET extension_directory = '/x'": "extension_directory",
    "SET home_directory = '/x'": "home_directory",
    "SET logging_sink = 'me' || 'mory'": "logging_sink",
    # no file written
    "RESET profiling_output": None,
    "RESET profiling_output;": None,  # (a statement of several keeps its ';')
    "SET profiling_output = '';": None,
    "SET profiling_output = ''": None,
    "SET temp_directory = ''": None,
    "SET logging_sink = 'memory'": None,
    "SET VARIABLE profiling_output = 1": None,
    "SET threads = 2": None,
    "SET enable_profiling = 'json'": None,
    "PRAGMA enable_profiling": None,
    "CALL enable_logging(level = 'info')": None,
    "SELECT 'file' AS enable_logging": None,
    "SELECT count(*) FROM range(3)": None,
}


@pytest.mark.parametrize(("query", "expected"), CASES.items(), ids=range(len(CASES)))
def test_file_it_writes(query: str, expected: str | None) -> None:
    (statement,) = duckdb.connect().extract_statements(query)
    assert file_it_writes(statement) == expected
