"""Which batches a command reads: one matcher for every `--batch` and `--run`.

`--batch GLOB` is DuckDB's GLOB over the batch label (`*` crosses `/`, `\\` escapes), in SQL
and in `forget` alike; `--run RUN` is the run label, with `NO_RUN` naming the batches outside
any run (a job dir not under `RUN/harbor/`), as the report and `stats --by task` label them.
Both are bound as parameters, never pasted.
"""

from __future__ import annotations

from collections.abc import Iterable

NO_RUN = "(no run)"


def scope_sql(batch: str = "batch", run: str = "run") -> str:
    """SQL true for the rows whose `batch` and `run` columns the bound $batch_glob and $run
    select (NULL selects everything)."""
    return (
        f"(($batch_glob IS NULL OR {batch} GLOB $batch_glob) "
        f"AND ($run IS NULL OR coalesce({run}, '{NO_RUN}') = $run))"
    )


def labels_matching(labels: Iterable[str], batch_glob: str) -> set[str]:
    """The labels `batch_glob` matches, by DuckDB's GLOB as the SQL does (Python's fnmatch
    differs on an unclosed '[' and on '\\', which escapes in GLOB)."""
    import duckdb

    con = duckdb.connect()
    try:
        query = "SELECT label FROM unnest($labels) AS t(label) WHERE label GLOB $glob"
        found = con.execute(query, {"labels": sorted(labels), "glob": batch_glob}).fetchall()
        return {label for (label,) in found}
    finally:
        con.close()
