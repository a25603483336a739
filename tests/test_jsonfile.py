"""A JSON artifact reads exactly as the seeds read one: `json.loads(path.read_text("utf-8"))`.
What that reads, `jsonfile.decode` reads to the same value; what it refuses, `decode` reports."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from wmo_lake.jsonfile import ReadFailure, decode

BOM = b"\xef\xbb\xbf"

CASES: dict[str, bytes] = {
    "plain": b'{"stop_reason": "submitted"}',
    "nan-and-infinity": b'{"a": NaN, "b": -Infinity}',
    "beyond-double": b'{"a": 1e400}',
    "duplicate-key": b'{"a": 1, "a": 2}',
    "non-ascii": '{"a": "caf\u00e9 \u2028"}'.encode(),
    "byte-order-mark": BOM + b'{"stop_reason": "submitted"}',
    "utf-16-without-bom": '{"a": 1}'.encode("utf-16-le"),
    "nul-in-text": b'{"a": "x\x00"}',
    "trailing-comma": b'{"a": 1,}',
}


def _seeds_reading(data: bytes, tmp_path: Path) -> Any:
    """The seeds' reader (seed 000's `_read_json_object`, its wmo-run.json reader): None when
    it cannot read the file."""
    path = tmp_path / "artifact.json"
    path.write_bytes(data)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("case", list(CASES))
def test_decode_reads_what_the_seeds_read_and_nothing_more(tmp_path: Path, case: str) -> None:
    data = CASES[case]
    expected = _seeds_reading(data, tmp_path)
    got = decode(data, tmp_path / "artifact.json")
    if expected is None:
        assert isinstance(got, ReadFailure), got
        assert got.kind == "invalid_json"
        assert "artifact.json" in got.message
    else:
        assert _same(got, expected), (got, expected)


class _Problems:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str]] = []

    def add(self, kind: str, path: Path | str, message: str) -> None:
        self.rows.append((kind, str(path), message))


def test_a_lone_surrogate_reads_as_the_replacement_character(tmp_path: Path) -> None:
    """The one deliberate difference: json.loads keeps a lone `\\ud800` as a surrogate code point,
    which no UTF-8 text can hold, so it reads as U+FFFD, and the problems name every field (a key
    too); a pair (an emoji as json.dumps escapes it) is one character, left as it is."""
    data = b'{"a": "x\\ud800", "b": ["\\ud83d\\ude00", {"k\\udce9": "\\udce9"}]}'
    problems = _Problems()
    got = decode(data, tmp_path / "trajectory.json", problems)
    assert got == {"a": "x\ufffd", "b": ["\U0001f600", {"k\ufffd": "\ufffd"}]}
    assert len(problems.rows) == 1
    kind, path, message = problems.rows[0]
    assert (kind, path) == ("lone_surrogate", str(tmp_path / "trajectory.json"))
    assert message.startswith("trajectory.json: a, b[1].'k\\udce9' (a key), b[1].k\ufffd holds")
    assert "b[0]" not in message
    assert _same(decode(b'["\\ud83d\\ude00"]', tmp_path / "x.json", problems), ["\U0001f600"])
    assert len(problems.rows) == 1  # a pair changes nothing


def test_a_byte_order_mark_is_named_in_the_message(tmp_path: Path) -> None:
    got = decode(CASES["byte-order-mark"], tmp_path / "wmo-run.json")
    assert isinstance(got, ReadFailure)
    assert "BOM" in got.message and "wmo-run.json" in got.message


def test_a_fifo_is_an_unreadable_file_not_a_hang(tmp_path: Path) -> None:
    """A named pipe where a trial's JSON should be: opening it to read blocks until a writer
    comes, which none ever does, so the ingest hung forever. It is a ReadFailure at once."""
    import os
    import threading

    from wmo_lake.jsonfile import read_bytes

    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    results: list[object] = []
    reader = threading.Thread(target=lambda: results.append(read_bytes(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "read_bytes blocked on a FIFO"
    (failure,) = results
    assert isinstance(failure, ReadFailure) and failure.kind == "unreadable_file"
    assert failure.message == f"cannot read {fifo}: not a regular file (a FIFO, socket or device)"
    directory = tmp_path / "dir.json"
    directory.mkdir()  # (a directory keeps its own message)
    assert read_bytes(directory) == ReadFailure(
        "unreadable_file", f"{directory} is a directory, expected a JSON file"
    )
