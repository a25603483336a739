"""Lighter processes: pyarrow without numpy where an ingest runs; in the program's own process,
small memory pages for numpy and pyarrow and no BLAS thread pool.

pyarrow imports numpy whenever it is installed, and that is about half of pyarrow's import
(~0.1-0.15 s of CPU in every process that loads it), yet nothing an ingest does uses numpy: it
builds Arrow arrays from Python rows, writes Parquet and has DuckDB read Arrow. On two cores the
ingest process and its two readers loading it cost ~0.15-0.2 s of a 128-trial ingest's ~1.8 s.
Only processes that are wmo-lake's own skip it (a reader process; the `wmo-lake ingest` command
run as the program, never an in-process caller, whose later code may want numpy): the exports
do use numpy.
"""

from __future__ import annotations

import os
import sys

# Switches of the libraries' own, each read once per process as the library loads, that the
# program sets unless the user did (`program_environment`):
PROGRAM_ENVIRONMENT = {
    # numpy's and mimalloc's (pyarrow's memory pool): no madvise(MADV_HUGEPAGE) on their memory
    "NUMPY_MADVISE_HUGEPAGE": "0",
    "MIMALLOC_ALLOW_THP": "0",
    # numpy's OpenBLAS: no thread pool (nothing here multiplies matrices)
    "OPENBLAS_NUM_THREADS": "1",
}


def skip_numpy() -> bool:
    """Before pyarrow loads: make `import numpy` fail here, the standard way (a None in
    sys.modules), so pyarrow goes without it. False (nothing changed) when numpy is already
    loaded, e.g. in a forkserver child whose server preloaded pyarrow with it."""
    if "numpy" in sys.modules:
        return False
    sys.modules["numpy"] = None  # type: ignore[assignment]
    return True


def program_environment() -> None:
    """Before numpy and pyarrow load, in the program's own process: PROGRAM_ENVIRONMENT, but for
    a variable the user set. Its child processes, the ingest's readers among them, inherit it.

    Small pages. numpy and mimalloc ask for transparent huge pages by default (numpy on every
    array of 4 MB or more, mimalloc on its 1 GB arenas), yet what wmo-lake allocates is written
    once and dropped within a second: each huge page is a 2 MB zeroing, and when the kernel
    has no free huge page at hand (another process just freed its memory: the bench's anchors,
    a trainer beside us) a stall. Over alternating runs each right after a process touched and
    freed 600 MB:
    - `ingest` of the 128-trial bench tree 1.50 s -> 1.34 s wall (system time 0.69 -> 0.45 s);
    - 8,192 small trials 3.93 s -> 2.98 s; 128 long trajectories 1.00 s -> 0.74 s;
    - `export datums` 0.53-0.85 s -> 0.52-0.61 s (numpy's half).
    On an idle machine the two are equal.

    One BLAS thread. Importing numpy starts OpenBLAS's pool (a thread per core), whose threads
    spin waiting for work that never comes: 8% of `export datums`'s CPU samples, on the cores
    its DuckDB and Parquet threads use (CPU 0.76 s -> 0.68 s over 6 alternating runs each).

    Only the program calls this: the variables are read once per process, and a caller's own
    process (a notebook, a test) keeps whatever it had."""
    for name, value in PROGRAM_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
