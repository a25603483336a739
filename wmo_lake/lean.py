"""Loading less in the processes an ingest runs: pyarrow without numpy.

pyarrow imports numpy whenever it is installed, and that is about half of pyarrow's import
(~0.1-0.15 s of CPU in every process that loads it), yet nothing an ingest does uses numpy: it
builds Arrow arrays from Python rows, writes Parquet and has DuckDB read Arrow. On two cores the
ingest process and its two readers loading it cost ~0.15-0.2 s of a 128-trial ingest's ~1.8 s.
Only processes that are wmo-lake's own skip it (a reader process; the `wmo-lake ingest` command
run as the program, never an in-process caller, whose later code may want numpy): the exports
do use numpy.
"""

from __future__ import annotations

import sys


def skip_numpy() -> bool:
    """Before pyarrow loads: make `import numpy` fail here, the standard way (a None in
    sys.modules), so pyarrow goes without it. False (nothing changed) when numpy is already
    loaded, e.g. in a forkserver child whose server preloaded pyarrow with it."""
    if "numpy" in sys.modules:
        return False
    sys.modules["numpy"] = None  # type: ignore[assignment]
    return True
