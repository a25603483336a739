"""Training datums out of the lake: the `datums` view exported to Parquet with its manifest, a
verifying loader, and the hand-off to tinker.

    manifest = export_datums(Path("lake"), Path("step7.parquet"), tasks=Path("tasks.json"))
    rows = load_verified("step7.parquet", tasks="tasks.json")     # a polars DataFrame
    batch = to_tinker(rows, loss_fn="importance_sampling")         # list[tinker.Datum]

Rows are UNshifted (one token list with its loss mask and sampled logprobs, see sql/datums.sql);
`to_tinker` shifts them into tinker's next-token layout. The discipline (split guard, no
overwrite, atomic write, manifest, verification) is `wmo_lake.exports.discipline`, shared with
the other kinds; this module is the datums kind plugged into it, with its own `summary`.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from wmo_lake.exports import datum_lists, discipline
from wmo_lake.exports.discipline import (
    Export,
    ExportError,
    ExportUsageError,
    Request,
    TaskRegistry,
    excluded_text,
    nothing_in_scope,
    scope_condition,
    summary_lines,
)
from wmo_lake.settings import SETTINGS
from wmo_lake.terminal import percent_text

if TYPE_CHECKING:  # polars and numpy load when a dataset is read back (~0.4 s the export skips)
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq
    import tinker

KIND = "datums"
COLUMNS = (
    "batch",
    "run",
    "step",
    "task_id",
    "attempt",
    "trial_name",
    "fragment_index",
    "model_input_tokens",
    "loss_mask",
    "sampled_logprobs",
    "n_tokens",
    "loss_tokens",
    "reward",
    "passed",
    "infra_failed",
    "advantage",
)
# tinker losses that weight sampled tokens by an advantage against the sampler's logprobs
POLICY_LOSSES = ("importance_sampling", "ppo", "cispo", "dro")
LOSSES = (*POLICY_LOSSES, "cross_entropy")

LIST_COLUMNS = datum_lists.LIST_COLUMNS
LIGHT_COLUMNS = [c for c in COLUMNS if c not in LIST_COLUMNS]
# (task_id and attempt break a tie of two trial dirs of one name under one batch label: the
# same file however the lake was built)
ORDER_BY = "run NULLS LAST, step NULLS LAST, batch, trial_name, task_id, attempt, fragment_index"
ROW_GROUP_ROWS = 256  # rows per Parquet row group (and per record batch read from DuckDB)
# Up to this many spans, the export's light queries run on one DuckDB thread: they are then
# dozens of operators over a few thousand rows each, where a second thread only adds its setup
# and hand-offs (measured on the 128-trial bench lake, 3,465 spans: ~10% less CPU and wall, with
# Parquet encoding in a thread beside them). The span lists' read and gather, which decodes
# megabytes, keeps every thread (~5% less wall again), and so does the rows' query: it runs
# beside numpy's and pyarrow's imports, and on one thread it outlasted them by ~40 ms (the export
# 0.506 -> 0.480 s over 8 alternating runs with every thread).
ONE_THREAD_SPANS = 20_000

# The datums in scope; every filter is a bound parameter (NULL matches everything).
SCOPE = f"SELECT * FROM datums WHERE {scope_condition()}\n"
# Per source batch: its datum_stats, and the agents its trials ran with their recorded model and
# caps (read as trial_caps reads them: the job's record when it names one agent or the trial
# records none, else the trial's own). The batch-level model and caps are those of its one agent;
# null when its trials ran under several (a job of several agents), which `agents` then lists.
BATCHES_QUERY = f"""
WITH trial_counts AS (SELECT batch, count(*) AS trials FROM cells GROUP BY batch),
trial_agents AS (
    SELECT
        t.batch,
        j.n_agents = 1 OR t.agent_source IS NULL AS from_job,
        CASE WHEN from_job THEN j.model_name
            ELSE json_extract_string(t.agent_config, '$.model_name') END AS model_name,
        CASE WHEN from_job THEN j.model_path
            ELSE json_extract_string(t.agent_config, '$.kwargs.llm_kwargs.model_path')
        END AS model_path,
        CASE WHEN from_job THEN j.max_tokens ELSE t.max_tokens END AS max_tokens,
        CASE WHEN from_job THEN j.max_turns ELSE t.max_turns END AS max_turns,
        CASE WHEN from_job THEN j.context_limit ELSE t.context_limit END AS context_limit
    FROM trials AS t
    LEFT JOIN jobs AS j USING (job_key)
),
agents AS (
    SELECT
        batch,
        count(*) AS n_agents,
        list(
            {{'model_name': model_name, 'model_path': model_path, 'max_tokens': max_tokens,
              'max_turns': max_turns, 'context_limit': context_limit, 'trials': trials}}
            ORDER BY trials DESC, model_name, max_turns, max_tokens, context_limit, model_path
        ) AS agents
    FROM (
        SELECT batch, model_name, model_path, max_tokens, max_turns, context_limit,
            count(*) AS trials
        FROM trial_agents
        GROUP BY ALL
    )
    GROUP BY batch
)
SELECT
    s.batch, s.run, s.step, t.trials,
    s.episodes, s.datums, s.fragments, s.overflow_drops, s.overlong_drops,
    s.loss_tokens, s.context_tokens,
    CASE WHEN a.n_agents = 1 THEN a.agents[1].model_name END AS model_name,
    CASE WHEN a.n_agents = 1 THEN a.agents[1].model_path END AS model_path,
    CASE WHEN a.n_agents = 1 THEN a.agents[1].max_tokens END AS max_tokens,
    CASE WHEN a.n_agents = 1 THEN a.agents[1].max_turns END AS max_turns,
    CASE WHEN a.n_agents = 1 THEN a.agents[1].context_limit END AS context_limit,
    coalesce(a.agents, []) AS agents
FROM datum_stats AS s
JOIN trial_counts AS t USING (batch)
-- (every batch with trials has its agents; no join on jobs by label, which holds a row per job
-- dir: two dirs of one label, as two run trees of one run name leave, repeated the batch)
LEFT JOIN agents AS a USING (batch)
WHERE {scope_condition("s.batch", "s.run")}
ORDER BY s.run NULLS LAST, s.step NULLS LAST, s.batch
"""


def _scope_sql(where: str | None) -> str:
    """The scope query, with the user's --where (SQL over datums columns, by intent) appended as
    one condition. The text is parsed by DuckDB's expression parser (exactly one expression, so it
    cannot close its parentheses into another clause or query) and what is appended is DuckDB's
    own rendering of that parsed expression, never the raw text."""
    if where is None:
        return SCOPE
    return SCOPE + f"  AND ({parse_condition(where)})\n"


def parse_condition(where: str) -> str:
    """One SQL expression, as DuckDB renders it after parsing; ExportUsageError otherwise."""
    if not where.strip():
        raise ExportUsageError("--where is empty; give one SQL condition over the datums columns")
    try:
        expression = duckdb.SQLExpression(where)
    except duckdb.Error as error:
        raise ExportUsageError(
            f"--where {where!r} must be one condition over the datums columns (one SQL "
            f"expression): {error}"
        ) from None
    return str(expression)


def export_datums(
    lake: Path | str,
    out: Path | str,
    *,
    tasks: Path | str | None = None,
    no_split_guard: bool = False,
    batch_glob: str | None = None,
    run: str | None = None,
    where: str | None = None,
    settings: Mapping[str, Any] | None = None,
    check: Callable[..., None] | None = None,
    lake_args: str | None = None,
) -> dict[str, Any]:
    """Export the lake's `datums` (train-split tasks only, unless `no_split_guard`) to the Parquet
    file `out` with `out.manifest.json` beside it; return the manifest. Raises ExportError (clear
    message, nothing written) on a missing guard choice, a bad registry, an unregistered task, an
    existing target, an empty export or a bad --where. `settings` are the query-time settings
    ({variable or name: value}, wmo_lake.settings; e.g. {"context_budget": 32768}), as
    `wmo_lake.lake.connect` takes them; the manifest records the `settings` view's row.
    `check(con)` runs on the export's connection before anything is read (see Request.check);
    with `where`, once the rows are selected, as `check(con, batches=...)` with the batches they
    come from: a --where that leaves only trials without the reward key is said too.
    `lake_args`: the ` --lake DIR` the messages' commands carry (see Request.lake_args)."""
    deferred = check if where is not None else None
    request = Request(
        Path(lake),
        Path(out),
        tasks=None if tasks is None else Path(tasks),
        no_split_guard=no_split_guard,
        batch_glob=batch_glob,
        run=run,
        settings=dict(settings or {}),
        lake_args=lake_args,
        check=(lambda con: None) if deferred is not None else check,
    )
    scope = request.scope
    with Export(request, kind=KIND) as export, _Threads(export.con) as threads:
        con = export.con
        scoped = _scope_sql(where)
        try:
            # One pass without the token lists (the view's list columns are not read): the rows
            # to write, in order, with the merged sequence their lists come from.
            with threads.all():
                plan = datum_lists.plan_sql(scoped, ORDER_BY, LIGHT_COLUMNS)
                rows = _arrow_rows(con, plan, scope)
        except duckdb.Error as error:
            hint = f" (check --where {where!r})" if where else ""
            if where and isinstance(error, (duckdb.BinderException, duckdb.CatalogException)):
                # (an unknown column or function: the --where is wrong, not the lake)
                raise ExportUsageError(f"cannot select the datums{hint}: {error}") from None
            raise ExportError(f"cannot select the datums{hint}: {error}") from None
        if deferred is not None:  # (before anything is written: --strict may stop the export)
            deferred(con, batches=sorted(set(rows.column("batch").to_pylist())))
        tasks_of_rows = rows.column("task_id").to_pylist()
        rows_by_task = dict(Counter(tasks_of_rows))
        kept = set(export.keep_train_tasks(rows_by_task))
        # filled from datum_stats while the dataset is written (before the manifest is made)
        excluded: dict[str, int] = dict(export.guard.excluded)
        stats: dict[str, Any] = {}

        def read_stats() -> None:
            stats["batches"] = batches = _batches(con, scope)
            stats["totals"] = totals = _stats_totals(batches)
            if where:  # the scope's datums --where left out (the guard's are counted apart)
                excluded["where"] = totals["datums"] - len(tasks_of_rows)
            for reason in ("overflow", "overlong"):
                if totals[f"{reason}_drops"]:
                    excluded[f"{reason}_episodes"] = totals[f"{reason}_drops"]

        if len(kept) < len(rows_by_task):
            rows = rows.filter([task in kept for task in tasks_of_rows])
        written = {
            "rows": rows.num_rows,
            "tokens": sum(rows.column("n_tokens").to_pylist()),
            "loss_tokens": sum(rows.column("loss_tokens").to_pylist()),
            "fragments": sum(1 for i in rows.column("fragment_index").to_pylist() if i > 0),
            "batches": len(set(rows.column("batch").to_pylist())),
        }
        if not written["rows"]:
            read_stats()
            raise ExportError(
                _nothing_to_export(con, rows_by_task, excluded, stats["batches"], request, where)
            )
        selected = f"SELECT * FROM ({scoped}) AS d WHERE {export.kept('d.task_id')}"

        def view_rows() -> duckdb.DuckDBPyRelation:
            """The same rows with the view's own lists (when the gather refuses)."""
            return con.sql(
                f"SELECT {', '.join(COLUMNS)} FROM ({selected}) ORDER BY {ORDER_BY}", params=scope
            )

        used = export.settings
        return export.write(
            lambda path: _write_rows(
                con, rows, view_rows, path, meanwhile=read_stats, gathering=threads.all
            ),
            excluded=excluded,
            parameters={
                "where": where,
                "context_budget": used["context_budget"],
                "context_budget_default": SETTINGS["context_budget"].default_text(),
                "max_datum_tokens": used["max_datum_tokens"],
                "reward_key": used["reward_key"],
                "reward_mode": used["reward_mode"],
            },
            extra=lambda: {
                "sources": stats["batches"],
                "datum_stats": stats["totals"],
                "exported": written,
            },
        )


def summary(manifest: Mapping[str, Any], out: Path) -> str:
    """What `wmo-lake export datums` prints: what was written (rows, tokens, fragments, the
    batches they came from), the guard, then `datum_stats` over the whole scope, before --where
    and the split guard, said as such, and what was left out of the file."""
    written = manifest.get("exported", {})
    stats = manifest.get("datum_stats", {})
    sources = len(manifest.get("sources", []))
    rate = percent_text(stats.get("fragmentation_rate", 0.0))
    fragments = written.get("fragments", 0)
    lines = [
        f"wrote {manifest['rows']} datums ({written.get('tokens', 0)} tokens, "
        f"{written.get('loss_tokens', 0)} trained, {fragments} "
        f"fragment{'s' if fragments != 1 else ''}) "
        f"from {written.get('batches', sources)} of {sources} batch(es) in scope to {out}",
        *summary_lines(manifest, out),
        f"in scope, before --where and the split guard: {stats.get('datums', 0)} datums, "
        f"{stats.get('fragments', 0)} of them fragments ({rate}); dropped episodes: "
        f"{stats.get('overflow_drops', 0)} overflow, {stats.get('overlong_drops', 0)} overlong",
        "excluded: " + excluded_text(manifest),
    ]
    return "\n".join(lines)


def _write_rows(
    con: duckdb.DuckDBPyConnection,
    rows: pa.Table,
    view_rows: Callable[[], duckdb.DuckDBPyRelation],
    path: Path,
    meanwhile: Callable[[], None],
    gathering: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext,
) -> int:
    """Write `rows` (the datums columns but the lists, with the plan columns of
    wmo_lake.exports.datum_lists) with their lists gathered from the spans, a chunk of rows at a
    time; if the gather refuses, the view's own rows (`view_rows()`) instead. Parquet encoding
    runs in a thread (pyarrow releases the GIL) while DuckDB gathers the next chunk and runs
    `meanwhile` (once). Each chunk's gather runs within `gathering()` (see _Threads.all)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    import pyarrow as pa

    lists = {
        "model_input_tokens": datum_lists.list_type(pa.int64()),
        "loss_mask": datum_lists.list_type(pa.float64()),
        "sampled_logprobs": datum_lists.list_type(pa.float64()),
    }
    schema = pa.schema(
        [pa.field(c, lists[c]) if c in lists else rows.schema.field(c) for c in COLUMNS]
    )
    waiting = [meanwhile]
    try:
        datum_lists.check_plan(rows)
        all_bases = datum_lists.bases(con, rows)
        # (the pool ends first: a write still running when the writer closed crashed)
        with _parquet_writer(path, schema) as out, ThreadPoolExecutor(1) as pool:
            pending: Future[None] | None = None
            for start, stop in datum_lists.chunks(rows.column("n_tokens").to_pylist()):
                part = rows.slice(start, stop - start)
                row_bases = datum_lists.bases_between(all_bases, start, stop)
                with gathering():
                    gathered = datum_lists.list_columns(con, part, row_bases)
                table = pa.table(
                    [gathered[c] if c in gathered else part.column(c) for c in COLUMNS],
                    schema=schema,
                )
                if pending is not None:
                    pending.result()
                pending = pool.submit(out.write_table, table, row_group_size=ROW_GROUP_ROWS)
                while waiting:
                    waiting.pop()()
            if pending is not None:
                pending.result()
        return rows.num_rows
    except datum_lists.Mismatch:
        path.unlink(missing_ok=True)
    while waiting:
        waiting.pop()()
    return _write_parquet(view_rows(), path)


def _parquet_writer(path: Path, schema: pa.Schema) -> pq.ParquetWriter:
    """zstd, dictionaries only for the string columns (token lists: faster and smaller without);
    the list columns delta-packed and byte-stream-split (wmo_lake/parquet_encodings.py: on the
    bench export, the lists written in ~0.12 s instead of ~0.19 s, 10.0 MB instead of 13.2).
    Past those encodings: token id lists are not compressed (zstd finds nothing in delta-packed
    ids: 6.06 MB either way), the loss mask is lz4 (its split 0/1 bytes shrink to ~1% with
    either codec, lz4 at a fraction of zstd's time), and the lists carry no min/max statistics
    (no read is pruned by the extremes of a datum's tokens). Encoding the bench export: 0.100 s
    -> 0.082 s, 10.01 MB -> 10.15 MB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from wmo_lake.parquet_encodings import list_encodings

    strings = [
        f.name for f in schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
    ]
    scalars = [f.name for f in schema if f.name not in _LIST_CODECS]
    codecs = dict.fromkeys(scalars, "zstd")
    codecs |= {f"{name}.list.element": codec for name, codec in _LIST_CODECS.items()}
    return pq.ParquetWriter(
        path,
        schema,
        compression=codecs,
        use_dictionary=strings,
        column_encoding=list_encodings(schema),
        write_statistics=scalars,
    )


# the datums' list columns' codecs (see _parquet_writer)
_LIST_CODECS = {"model_input_tokens": "none", "loss_mask": "lz4", "sampled_logprobs": "zstd"}


def _write_parquet(relation: duckdb.DuckDBPyRelation, path: Path) -> int:
    """Stream `relation` into Parquet with pyarrow, in record batches so memory stays a batch."""
    reader = relation.to_arrow_reader(ROW_GROUP_ROWS)
    rows = 0
    with _parquet_writer(path, reader.schema) as out:
        for batch in reader:
            out.write_batch(batch)
            rows += batch.num_rows
    return rows


class _Threads:
    """While the export runs, DuckDB's threads = 1 when the lake holds few spans
    (ONE_THREAD_SPANS), but for the rows' query and the span lists' gather (`all()`); set back
    at the end: the setting is the database's, which other connections of this process to the
    same lake.duckdb share."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        ((spans,),) = con.execute("SELECT count(*) FROM spans").fetchall()
        ((threads,),) = con.execute("SELECT current_setting('threads')").fetchall()
        self.threads = int(threads)
        self.narrow = spans <= ONE_THREAD_SPANS and self.threads > 1

    def __enter__(self) -> _Threads:
        if self.narrow:
            self.con.execute("SET threads = 1")
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc_info: object) -> None:
        if self.narrow:
            # (after an interrupted query the connection may refuse: the error is what counts)
            with contextlib.suppress(Exception) if kind is not None else contextlib.nullcontext():
                self.con.execute(f"SET threads = {self.threads}")

    @contextlib.contextmanager
    def all(self) -> Iterator[None]:
        """Every thread the database had, for the duration."""
        if not self.narrow:
            yield
            return
        self.con.execute(f"SET threads = {self.threads}")
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                self.con.execute("SET threads = 1")
            raise
        self.con.execute("SET threads = 1")


def _arrow_rows(con: duckdb.DuckDBPyConnection, query: str, params: Mapping[str, Any]) -> pa.Table:
    """A small result as an Arrow table, by execute(): con.sql() binds the query once to make the
    relation and again to run it (20-30 ms for the view stack under `datums`). execute() runs
    the query without pyarrow, so it runs in a thread (DuckDB releases the GIL) while this one
    imports numpy and pyarrow, which the gather and the writer need: ~0.1 s each, overlapped.
    DuckDB warns that Arrow from execute() copies the rows: a datum's light columns, no lists."""
    import warnings

    from wmo_lake.background import Background

    plan = Background(lambda: con.execute(query, dict(params)), "wmo-lake-plan")
    try:
        import numpy  # noqa: F401
        import pyarrow.parquet  # noqa: F401  (pyarrow too)
    finally:
        result = plan.wait()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Arrow output on a DB-API result", UserWarning)
        return result.to_arrow_table()


def _batches(con: duckdb.DuckDBPyConnection, scope: Mapping[str, Any]) -> list[dict[str, Any]]:
    result = con.execute(BATCHES_QUERY, dict(scope))  # (execute: one bind, see _arrow_rows)
    names = [column[0] for column in result.description]
    return [dict(zip(names, row, strict=True)) for row in result.fetchall()]


def _stats_totals(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """datum_stats summed over the source batches (before --where and the split guard)."""
    keys = ("datums", "fragments", "overflow_drops", "overlong_drops", "loss_tokens")
    totals: dict[str, Any] = {key: sum(int(b[key]) for b in batches) for key in keys}
    totals["context_tokens"] = sum(int(b["context_tokens"]) for b in batches)
    totals["fragmentation_rate"] = (
        totals["fragments"] / totals["datums"] if totals["datums"] else 0.0
    )
    return totals


def _nothing_to_export(
    con: duckdb.DuckDBPyConnection,
    rows_by_task: Mapping[Any, int],
    excluded: Mapping[str, int],
    batches: list[dict[str, Any]],
    request: Request,
    where: str | None,
) -> str:
    if not batches:
        return nothing_in_scope(request, con)
    if rows_by_task:
        return f"no datum of a train-split task to export (excluded: {dict(excluded)})"
    why = f" match --where {where!r}" if where else " exist in the selected batches"
    return (
        f"no datums{why} (excluded: {dict(excluded) or 'none'}); trials need token spans, "
        "see " + request.command("sql", '"SELECT spans_status, count(*) FROM trials GROUP BY ALL"')
    )


# --- loading -------------------------------------------------------------------------------------


def _read_rows(path: Path) -> pl.DataFrame:
    import polars as pl

    frame = pl.read_parquet(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ExportError(f"dataset {path} lacks the datum column(s) {', '.join(missing)}")
    lengths = frame.select(
        pl.col("model_input_tokens").list.len().alias("tokens"),
        pl.col("loss_mask").list.len().alias("mask"),
        pl.col("sampled_logprobs").list.len().alias("logprobs"),
        pl.col("n_tokens"),
    )
    bad = lengths.filter(
        (pl.col("tokens") != pl.col("mask"))
        | (pl.col("tokens") != pl.col("logprobs"))
        | (pl.col("tokens") != pl.col("n_tokens"))
    )
    if bad.height:
        raise ExportError(
            f"dataset {path}: {bad.height} row(s) whose model_input_tokens, loss_mask, "
            "sampled_logprobs and n_tokens lengths disagree; re-export it"
        )
    return frame


def load_verified(path: Path | str, tasks: Path | str | None = None) -> pl.DataFrame:
    """The rows of a datums export, after checking its manifest: the dataset's sha256 and row
    count and, with `tasks`, that it was exported against this registry's sha256 with the train
    split and holds only its train tasks. Raises ExportError on any mismatch."""
    rows: pl.DataFrame = discipline.load_verified(
        path,
        _read_rows,
        lambda frame: frame.get_column("task_id").to_list(),
        kind=KIND,
        tasks=tasks,
    )
    return rows


# --- tinker --------------------------------------------------------------------------------------


def _tinker() -> Any:
    try:
        import tinker
    except ImportError as error:
        raise ImportError(
            "to_tinker needs the `tinker` package: pip install 'wmo-lake[tinker]'"
        ) from error
    return tinker


def _row_dicts(rows: pl.DataFrame | Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    import polars as pl

    if isinstance(rows, pl.DataFrame):
        return rows.select(
            "model_input_tokens", "loss_mask", "sampled_logprobs", "advantage"
        ).iter_rows(named=True)
    return rows


def to_tinker(
    rows: pl.DataFrame | Iterable[Mapping[str, Any]], loss_fn: str = "importance_sampling"
) -> list[tinker.Datum]:
    """Real `tinker.Datum`s in the shifted next-token layout, one per datum row.

    model_input = tokens[:-1]; target_tokens = tokens[1:] (int64). For importance_sampling, ppo,
    cispo and dro: logprobs = sampled_logprobs[1:] and advantages = (advantage x loss_mask)[1:]
    (float32; no `mask` key, the service rejects it). For cross_entropy: weights = loss_mask[1:].
    """
    if loss_fn not in LOSSES:
        raise ValueError(f"loss_fn {loss_fn!r} is not supported; choose one of {', '.join(LOSSES)}")
    import numpy as np

    tinker_module = _tinker()
    result: list[tinker.Datum] = []
    for index, row in enumerate(_row_dicts(rows)):
        tokens = np.asarray(row["model_input_tokens"], dtype=np.int64)
        mask = np.asarray(row["loss_mask"], dtype=np.float32)
        if tokens.size < 2 or mask.size != tokens.size:
            raise ValueError(
                f"datum row {index} has {tokens.size} token(s) and {mask.size} mask value(s); "
                "a training datum needs at least 2 tokens and one mask value per token"
            )
        inputs: dict[str, Any] = {
            "target_tokens": tinker_module.TensorData.from_numpy(tokens[1:]),
        }
        if loss_fn == "cross_entropy":
            inputs["weights"] = tinker_module.TensorData.from_numpy(mask[1:])
        else:
            logprobs = np.asarray(row["sampled_logprobs"], dtype=np.float32)
            advantage = np.float32(row["advantage"])
            inputs["logprobs"] = tinker_module.TensorData.from_numpy(logprobs[1:])
            inputs["advantages"] = tinker_module.TensorData.from_numpy(advantage * mask[1:])
        result.append(
            tinker_module.Datum(
                model_input=tinker_module.ModelInput.from_ints(tokens[:-1].tolist()),
                loss_fn_inputs=inputs,
            )
        )
    return result


__all__ = [
    "COLUMNS",
    "ExportError",
    "TaskRegistry",
    "export_datums",
    "load_verified",
    "summary",
    "to_tinker",
]
