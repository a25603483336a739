"""The datums export's token lists, concatenated with numpy instead of by SQL list aggregates.

The `datums` view (sql/datums.sql) is what a datum is. Its three list columns are, per row, the
concatenation of pieces the views already place: the sequence's base (`prompt_bases`, mask 0.0,
logprob 0.0), then for each of its spans (`datum_spans`, in call_index order) `prompt_new_ids`
(mask 0.0, logprob 0.0) and `sampled_token_ids` (mask 1.0, its `sampled_logprobs`). Building that
in SQL costs list aggregates, sorts of list-carrying structs and copies of every token list
(0.6 s of the bench's 1 s export); here the export reads the span lists once as Arrow and gathers
them with one index array per chunk of rows. Which spans make which row, its order and every
other column still come from the views.

`assemble` refuses (`Mismatch`) anything it cannot reproduce exactly (a null list, logprobs and
tokens of different lengths, a row whose length is not the view's `n_tokens`), and the export
then writes the view's own rows instead; tests/test_export_datum_lists.py holds the two equal on
the edge-case trees.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import duckdb

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

# The datums rows of one export with where their lists come from: every datums column but the
# three lists, plus the trial_key of the row's merged sequence, its sequence_index and its span
# range (a sequence is a run of consecutive spans, datum_spans), numbered as sql/datums.sql does
# (the episode's sequences with a sampled token, in order). Joined to the view's rows by the
# view's key, so the view alone says which rows there are: (batch, task_id, attempt,
# fragment_index), attempt being the trial's rank within its batch and task (from `cells`, as
# datums has them; datum_episodes, which has them too, costs ~4% of an export more). Not
# (batch, trial_name, ...): two job dirs of one batch label (two run trees of one run name) may
# each hold a trial dir of the same name.
DATUM_KEY = ("batch", "task_id", "attempt", "fragment_index")
SEQUENCES = """
SELECT
    e.batch,
    e.task_id,
    e.attempt,
    trial_key,
    sequence_index,
    first_call,
    last_call,
    (row_number() OVER (PARTITION BY trial_key ORDER BY sequence_index) - 1)::INTEGER
        AS fragment_index
FROM (
    SELECT
        trial_key,
        sequence_index,
        min(call_index) AS first_call,
        max(call_index) AS last_call,
        sum(n_sampled) AS loss_tokens
    FROM datum_spans
    GROUP BY trial_key, sequence_index
) AS q
JOIN cells AS e USING (trial_key)
WHERE q.loss_tokens > 0
"""
LIST_COLUMNS = ("model_input_tokens", "loss_mask", "sampled_logprobs")
PLAN_COLUMNS = ("trial_key", "sequence_index", "first_call", "last_call")
PLAN_TABLE = "wmo_datum_plan"
SPAN_PIECES = f"""
SELECT p.row_index, s.call_index, s.prompt_new_ids, s.sampled_token_ids, s.sampled_logprobs
FROM {PLAN_TABLE} AS p
JOIN spans AS s
    ON s.trial_key = p.trial_key AND s.call_index BETWEEN p.first_call AND p.last_call
"""  # + a filter on the partitions (run, step) of the chunk, so a chunk reads only their files
BASE_PIECES = f"""
SELECT p.row_index, b.base_token_ids
FROM {PLAN_TABLE} AS p
JOIN prompt_bases AS b ON b.trial_key = p.trial_key AND b.sequence_index = p.sequence_index
ORDER BY p.row_index
"""
# Rows per chunk are cut so a chunk's lists stay near this many tokens (memory: ~40 bytes a
# token in flight), and under int32 list offsets.
CHUNK_TOKENS = 8_000_000


class Mismatch(Exception):
    """The spans hold something the gather does not reproduce exactly: use the view's rows."""


def plan_sql(selected: str, order_by: str, columns: list[str]) -> str:
    """The export's rows (`selected`: a query over `datums`) without their lists, with the
    trial_key and sequence_index their lists come from, in the export's order."""
    names = ", ".join(f"d.{c}" for c in columns)
    return (
        f"WITH selected AS ({selected}), sequences AS ({SEQUENCES})\n"
        f"SELECT {names}, {', '.join(f'q.{c}' for c in PLAN_COLUMNS)}\n"
        "FROM selected AS d\n"
        f"LEFT JOIN sequences AS q USING ({', '.join(DATUM_KEY)})\n"
        f"ORDER BY {order_by}"
    )


def chunks(n_tokens: list[int], budget: int | None = None) -> Iterator[tuple[int, int]]:
    """(start, stop) row ranges whose token counts add up to about `budget` (default
    CHUNK_TOKENS; at least a row)."""
    budget = CHUNK_TOKENS if budget is None else budget
    start, total = 0, 0
    for index, n in enumerate(n_tokens):
        if index > start and total + n > budget:
            yield start, index
            start, total = index, 0
        total += n
    if start < len(n_tokens):
        yield start, len(n_tokens)


def check_plan(rows: pa.Table) -> None:
    """Mismatch unless every plan row is one datums row (a key that repeated would match each
    of its rows to the other's sequence)."""
    keys = zip(*(rows.column(c).to_pylist() for c in DATUM_KEY), strict=True)
    if len(set(keys)) != rows.num_rows:
        raise Mismatch("a datums row matches two merged sequences")


def bases(con: duckdb.DuckDBPyConnection, rows: pa.Table) -> pa.Table:
    """(row_index, base_token_ids) of the plan's rows that keep tokens of the sequences before
    them (`prompt_bases`), read once for the whole export: only a sequence after the episode's
    first has one."""
    import pyarrow as pa

    if not max(rows.column("sequence_index").to_pylist(), default=0):
        return pa.table(
            {
                "row_index": pa.array([], pa.int64()),
                "base_token_ids": pa.array([], pa.list_(pa.int64())),
            }
        )
    return _with_plan(con, rows, lambda: con.sql(BASE_PIECES).to_arrow_table())


def bases_between(all_bases: pa.Table, start: int, stop: int) -> pa.Table:
    """The bases of rows start..stop-1 (`all_bases` is in row_index order, see BASE_PIECES),
    their row_index made relative to `start`. A slice: Table.take would import pyarrow.compute."""
    import numpy as np
    import pyarrow as pa

    rows = all_bases.column("row_index").to_numpy()
    if not np.all(rows[1:] >= rows[:-1]):
        raise Mismatch("the bases are not in row order")
    first, last = np.searchsorted(rows, [start, stop])
    if first == 0 and last == len(rows) and start == 0:
        return all_bases
    chosen = all_bases.slice(int(first), int(last - first))
    return chosen.set_column(0, "row_index", _arrow(rows[first:last] - start, pa.int64()))


def _with_plan(con: duckdb.DuckDBPyConnection, rows: pa.Table, query: Any) -> Any:
    import pyarrow as pa

    plan = rows.select(list(PLAN_COLUMNS)).append_column(
        "row_index", pa.array(range(rows.num_rows), pa.int64())
    )
    con.register(PLAN_TABLE, plan)
    try:
        return query()
    finally:
        con.unregister(PLAN_TABLE)


def _partition_filter(rows: pa.Table) -> tuple[str, dict[str, Any]]:
    """WHERE over spans' partition columns covering the rows' (run, step): DuckDB then skips the
    other partitions' files (rows come ordered by run and step, so a chunk is a few of them)."""
    runs = set(rows.column("run").to_pylist())
    steps = rows.column("step").to_pylist()
    conditions: list[str] = []
    params: dict[str, Any] = {}
    if None not in steps:
        conditions.append("s.step BETWEEN $first_step AND $last_step")
        params.update(first_step=min(steps), last_step=max(steps))
    if len(runs) == 1 and None not in runs:
        conditions.append("s.run = $run")
        params["run"] = next(iter(runs))
    return ("WHERE " + " AND ".join(conditions) if conditions else ""), params


def list_columns(
    con: duckdb.DuckDBPyConnection, rows: pa.Table, row_bases: pa.Table
) -> dict[str, pa.Array]:
    """The three list columns of `rows` (a chunk of the plan: PLAN_COLUMNS, run, step and
    n_tokens), gathered from `spans`; `row_bases` their bases (see `bases_between`)."""
    import pyarrow as pa

    if rows.column("trial_key").null_count:
        raise Mismatch("a datums row has no merged sequence")
    where, params = _partition_filter(rows)
    spans = _with_plan(
        con, rows, lambda: con.sql(SPAN_PIECES + where, params=params).to_arrow_table()
    )
    n_tokens = rows.column("n_tokens").to_numpy()
    tokens, mask, logprobs, offsets = assemble(spans, row_bases, rows.num_rows, n_tokens)
    offsets_array = _arrow(offsets.astype("int32"), pa.int32())
    return {
        "model_input_tokens": pa.ListArray.from_arrays(
            offsets_array, _arrow(tokens, pa.int64()), type=list_type(pa.int64())
        ),
        "loss_mask": pa.ListArray.from_arrays(
            offsets_array, _arrow(mask, pa.float64()), type=list_type(pa.float64())
        ),
        "sampled_logprobs": pa.ListArray.from_arrays(
            offsets_array, _arrow(logprobs, pa.float64()), type=list_type(pa.float64())
        ),
    }


def _arrow(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """A contiguous numpy array as an Arrow array over the same memory (pa.array(ndarray) would
    import numpy.ma to look for a mask: 10-20 ms of the export's start)."""
    import numpy as np
    import pyarrow as pa

    # the numpy dtype of `kind` (an int or float type) by name: DataType.to_pandas_dtype imports
    # pandas, which is no dependency, in pyarrow before 26
    dtype = np.dtype(f"{'f' if pa.types.is_floating(kind) else 'i'}{kind.bit_width // 8}")
    values = np.ascontiguousarray(values, dtype=dtype)  # (no copy when it is)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def list_type(values: pa.DataType) -> pa.DataType:
    """The list type DuckDB gives the view's list columns in Arrow (child field `l`)."""
    import pyarrow as pa

    return pa.list_(pa.field("l", values))


def _flat(column: pa.ChunkedArray, name: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """A list column, chunk by chunk: each chunk's values (no copy) and 0-based offsets (int64).
    Not one array for the column: DuckDB gives a result in a chunk per batch of rows (two for
    the bench export's 3,465 spans), and joining them would copy every value (29 MB, a fifth of
    the export's page faults). Mismatch on a null anywhere."""
    import numpy as np

    flat = []
    for array in column.chunks:
        if array.null_count:
            raise Mismatch(f"a null in {name}")
        offsets = array.offsets.to_numpy().astype(np.int64)
        start = int(offsets[0]) if len(offsets) else 0
        offsets -= start
        # the child values the offsets span (ListArray.flatten would import pyarrow.compute)
        values = array.values.slice(start, int(offsets[-1]) if len(offsets) else 0)
        if values.null_count:
            raise Mismatch(f"a null in {name}")
        flat.append((values.to_numpy(zero_copy_only=False), offsets))
    return flat


class _Segments:
    """The pieces rows are made of, each a slice of one source array (a chunk of a list
    column): per piece its source, start, length, kind (0 base, 1 prompt ids, 2 sampled), row
    and place within the row."""

    def __init__(self) -> None:
        self.tokens: list[np.ndarray] = []  # by source
        self.logprobs: list[np.ndarray | None] = []  # by source (None: the context's, 0.0)
        self.parts: list[tuple[np.ndarray, ...]] = []

    def add(
        self,
        kind: int,
        chunk: tuple[np.ndarray, np.ndarray],
        rows: np.ndarray,
        within: np.ndarray,
        logprobs: np.ndarray | None = None,
    ) -> None:
        import numpy as np

        values, offsets = chunk
        n = len(offsets) - 1
        self.parts.append(
            (
                np.full(n, len(self.tokens), np.int64),
                offsets[:-1],
                np.diff(offsets),
                np.full(n, kind, np.int64),
                rows,
                within,
            )
        )
        self.tokens.append(values)
        self.logprobs.append(logprobs)

    def ordered(self) -> tuple[np.ndarray, ...]:
        """(source, start, length, kind, row) of every piece, by row then place."""
        import numpy as np

        if not self.parts:
            return tuple(np.zeros(0, np.int64) for _ in range(5))
        source, start, length, kind, row, within = (
            np.concatenate(column).astype(np.int64) for column in zip(*self.parts, strict=True)
        )
        order = np.lexsort((within, row))
        return source[order], start[order], length[order], kind[order], row[order]


def assemble(
    spans: pa.Table, bases: pa.Table, n_rows: int, n_tokens: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows 0..n_rows-1 as (tokens, mask, logprobs, offsets): row r is its base, then for each of
    its spans in call_index order prompt_new_ids || sampled_token_ids; mask and logprobs 0.0 but
    for sampled tokens (1.0 and their logprob). `spans`: row_index, call_index, prompt_new_ids,
    sampled_token_ids, sampled_logprobs; `bases`: row_index, base_token_ids. Mismatch when a
    row's length is not its `n_tokens`."""
    import numpy as np

    lists = ("prompt_new_ids", "sampled_token_ids", "sampled_logprobs")
    if len({tuple(len(chunk) for chunk in spans.column(name).chunks) for name in lists}) > 1:
        spans = spans.combine_chunks()  # (chunked apart: a table not made of record batches)
    new = _flat(spans.column("prompt_new_ids"), "prompt_new_ids")
    sampled = _flat(spans.column("sampled_token_ids"), "sampled_tokens")
    logprobs = _flat(spans.column("sampled_logprobs"), "sampled_logprobs")
    based = _flat(bases.column("base_token_ids"), "base_token_ids")
    if any(
        not np.array_equal(lp, ids) for (_, lp), (_, ids) in zip(logprobs, sampled, strict=True)
    ):
        raise Mismatch("sampled_logprobs and sampled_token_ids differ in length")
    span_rows = spans.column("row_index").to_numpy()
    base_rows = bases.column("row_index").to_numpy()
    # a span's new ids, then its sampled ids, in call_index order after the row's base
    calls = spans.column("call_index").to_numpy().astype(np.int64)

    # Segments: every base, every span's new ids, every span's sampled ids, each a slice of its
    # source's values; put in order, then concatenated once (views, so no index array and no
    # pooled copy: fresh memory costs page faults).
    segments = _Segments()
    first = 0
    for chunk in based:
        last = first + len(chunk[1]) - 1
        segments.add(0, chunk, base_rows[first:last], np.full(last - first, -1, np.int64))
        first = last
    first = 0
    for new_chunk, sampled_chunk, (logprob_values, _) in zip(new, sampled, logprobs, strict=True):
        last = first + len(new_chunk[1]) - 1
        rows, chunk_calls = span_rows[first:last], calls[first:last]
        segments.add(1, new_chunk, rows, 2 * chunk_calls)
        segments.add(2, sampled_chunk, rows, 2 * chunk_calls + 1, logprob_values)
        first = last
    sources, starts, lengths, kinds, rows = segments.ordered()

    row_lengths = np.bincount(rows, weights=lengths, minlength=n_rows).astype(np.int64)
    if not np.array_equal(row_lengths, np.asarray(n_tokens, np.int64)):
        raise Mismatch("a gathered row's length is not the view's n_tokens")
    offsets = np.zeros(n_rows + 1, np.int64)
    np.cumsum(row_lengths, out=offsets[1:])
    zeros = np.zeros(int(lengths.max()) if len(lengths) else 0)  # the context's logprobs
    pieces = list(zip(sources.tolist(), starts.tolist(), lengths.tolist(), strict=True))
    tokens, sampled_logprobs = segments.tokens, segments.logprobs
    return (
        _joined([tokens[k][s : s + n] for k, s, n in pieces], np.int64),
        np.repeat((kinds == 2).astype(np.float64), lengths),
        _joined(
            [
                zeros[:n] if (values := sampled_logprobs[k]) is None else values[s : s + n]
                for k, s, n in pieces
            ],
            np.float64,
        ),
        offsets,
    )


def _joined(pieces: list[np.ndarray], dtype: Any) -> np.ndarray:
    import numpy as np

    return np.concatenate(pieces).astype(dtype, copy=False) if pieces else np.zeros(0, dtype)
