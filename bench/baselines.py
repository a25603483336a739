"""Timing anchors the benchmarks divide by: what reading the same files costs without the lake.
Independent of wmo_lake on purpose. The plain-Python reference implementations the benchmarks also
check their results against (rollout stats, the datum merge) are in `reference/`, shared with the
tests.

- `orjson_load_seconds`: a single-threaded `orjson.loads` of each file (the ingest's anchor).
- `warm_tree`: every file of a tree read once, so that both sides start from the page cache.
- `prompt_tokens_from_results`: every turn's prompt read back from result.json (spans_full's).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path

import orjson


def orjson_load_seconds(paths: Iterable[Path]) -> tuple[float, int]:
    """(seconds, bytes) to read and `orjson.loads` every file, one after another."""
    started = time.perf_counter()
    total = 0
    for path in paths:
        data = path.read_bytes()
        total += len(data)
        orjson.loads(data)
    return time.perf_counter() - started, total


def warm_tree(root: Path) -> int:
    """Read every file under `root` (symlinks followed), so that a measured ingest finds in the
    page cache what its anchor found: the anchors read result.json only, the ingest also every
    trial's dir listings and its other files. This machine drops cached pages within minutes
    (a slice of 8,192 small trials lost ~17% of its cached bytes in 100 s idle), and the first
    of three ingests was then up to twice as slow as the others. Returns the bytes read."""
    total = 0
    for folder, _, names in os.walk(root, followlinks=True):
        for name in names:
            with contextlib.suppress(OSError):
                total += len(Path(folder, name).read_bytes())
    return total


def msgspec_needed_fields_seconds(paths: Iterable[Path]) -> float:
    """Seconds to read and decode every file with msgspec into the typed structs of just the
    fields the lake's tables need (wmo_lake's own decoder, single-threaded): the single-core
    floor of an ingest, shown beside the orjson ratio."""
    from wmo_lake.tables.trial_result import decode_trial_result

    started = time.perf_counter()
    for path in paths:
        decode_trial_result(path.read_bytes(), path)
    return time.perf_counter() - started


def prompt_tokens_from_results(paths: Iterable[Path]) -> int:
    """Every turn's full prompt read back from result.json with orjson (the spans_full anchor):
    the prompt token lists of rollout_details[0], as Python lists; returns their token count."""
    total = 0
    for path in paths:
        payload = orjson.loads(path.read_bytes())
        details = (payload.get("agent_result") or {}).get("rollout_details") or []
        if details:
            total += sum(len(prompt) for prompt in details[0].get("prompt_token_ids") or [])
    return total
