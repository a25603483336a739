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
    "lone-surrogate-escape": b'{"a": "\\ud800"}',
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


def test_a_byte_order_mark_is_named_in_the_message(tmp_path: Path) -> None:
    got = decode(CASES["byte-order-mark"], tmp_path / "wmo-run.json")
    assert isinstance(got, ReadFailure)
    assert "BOM" in got.message and "wmo-run.json" in got.message
