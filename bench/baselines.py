"""Timing anchors the benchmarks divide by: what reading the same files costs without the lake.
Independent of wmo_lake on purpose. The plain-Python reference implementations the benchmarks also
check their results against (rollout stats, the datum merge) are in `reference/`, shared with the
tests.

- `orjson_load_seconds`: a single-threaded `orjson.loads` of each file (the ingest's anchor).
- `warm_tree`: every file of a tree read once, so that both sides start from the page cache.
- `prompt_tokens_from_results`: every turn's prompt read back from result.json (spans_full's).
- `interpreter_seconds`, `cpu_model`: how fast this machine runs Python, printed in the report's
  header so that absolute figures (trials/s, seconds) can be compared across machines.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path

import orjson

LOOP_STEPS = 2_000_000


def interpreter_seconds(repeat: int = 3) -> float:
    """The fastest of `repeat` timings of a fixed pure-Python loop (LOOP_STEPS additions in a
    function): the interpreter's speed on this machine (0.18 s on the 2.0 GHz AMD EPYC VM of the
    README's "slower machine" figures)."""
    timings = []
    for _ in range(repeat):
        started = time.perf_counter()
        total = 0
        for step in range(LOOP_STEPS):
            total += step
        timings.append(time.perf_counter() - started)
    return min(timings)


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it ("" where there is none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return ""


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
    fields the lake's tables need, single-threaded (issue 14.1's single-core floor, shown beside
    the orjson ratio). One msgspec pass over the whole file, the first segment's prompts
    included: wmo-lake's own reader reads those from their text instead
    (`wmo_lake/tables/prompt_text.py`), so an ingest can pass this floor."""
    from wmo_lake.columns import result_fields
    from wmo_lake.tables.trial_result import typed_decoder

    decoder = typed_decoder(result_fields())
    started = time.perf_counter()
    for path in paths:
        decoder.decode(path.read_bytes())
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
