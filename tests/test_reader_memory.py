"""A reader process keeps the memory it frees (wmo_lake.readers.keep_freed_memory): a big file's
buffer comes from malloc's heap, not a fresh mmap, so the next trial reuses its pages."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import textwrap

import pytest

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt and mallinfo2 are glibc's",
)

# How a 32 MB buffer (a big result.json) is served, in a process of its own: the bytes malloc
# holds in mmapped chunks (hblkhd) and in its heap (arena) while the buffer lives.
PROBE = textwrap.dedent(
    """
    import ctypes, json, sys
    from wmo_lake.readers import keep_freed_memory

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
            "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    changed = keep_freed_memory() if sys.argv[1] == "keep" else None
    before = libc.mallinfo2()
    buffer = bytes(32 * 2**20)
    during = libc.mallinfo2()
    del buffer
    after = libc.mallinfo2()
    print(json.dumps({
        "changed": changed,
        "mmapped": during.hblkhd - before.hblkhd,
        "heap": during.arena - before.arena,
        "kept": after.arena - before.arena,
    }))
    """
)


def probe(mode: str) -> dict[str, int]:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return json.loads(result.stdout)


@glibc
def test_a_big_buffer_comes_from_the_heap_and_stays_there() -> None:
    default = probe("default")
    assert default["mmapped"] >= 32 * 2**20  # glibc's default: a fresh mapping per big buffer
    kept = probe("keep")
    assert kept["changed"] is True
    assert kept["mmapped"] == 0
    # (the heap grows by the buffer less what it already had free: a few kB to a MiB)
    assert kept["heap"] >= 30 * 2**20
    assert kept["kept"] >= 30 * 2**20  # freed, but its pages stay for the next trial
