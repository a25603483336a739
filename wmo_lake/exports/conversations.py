"""Conversations out of the lake (SFT data): the `conversations` view exported as JSONL or Parquet
with its manifest, and a verifying loader.

    manifest = export_conversations("lake", "sft.jsonl", tasks="tasks.json", outcome="success")
    rows = load_verified("sft.jsonl", tasks="tasks.json")   # a polars DataFrame, as datums'

One row per agent episode as harbor's trace export defines it (sql/conversations.sql): `messages`
[{role, content}] plus task, task_id, trial_name, batch, model, reward, passed, trace_source and
episode.
The JSONL form is one `{"messages": [...], ...}` object per line, which tinker-cookbook's
`FromConversationFileBuilder` reads. The discipline (split guard, no overwrite, atomic write,
manifest, verified load) is `wmo_lake.exports.discipline`, shared with the other kinds; this
module is the conversations kind plugged into it, with its own `summary`.

Rules on top of the view, each counted in the manifest's `excluded` (in episodes):
- split guard: episodes of dev / holdout / custom tasks -> `split_<split>`;
- `--filter success|failure` keeps the episodes of passed / not passed trials (`cells.passed`,
  with the query-time reward key and mode) -> `not_passed` / `passed`;
- episodes holding image or audio content are not text data -> `multimodal`;
- a row is a prompt and its response, as WMO's `training_data` holds every row (its export refuses,
  and its loader rejects, any other): one that does not end with an assistant turn of non-blank
  text -> `no_response`, one whose last turn does not answer a user message -> `no_user_prompt`
  (an agent's first step before any user message, two agent steps with no observation between);
- exact duplicates (the same messages) are exported once -> `duplicate` (WMO's `training_data.py`).
Trials in scope that give no episode at all (oracle / nop agents write no trajectory; a trajectory
may have no agent step) are counted under `trials.without_episodes`, never an error: a scope of
only such trials exports an empty dataset, counted in its manifest (issue 5), where harbor's own
export refuses the root. An export that is empty because the rules above excluded every episode
is an error, writing nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from wmo_lake.exports import discipline

if TYPE_CHECKING:
    import polars as pl
from wmo_lake.exports.discipline import (
    Export,
    ExportError,
    Request,
    excluded_text,
    nothing_in_scope,
    require_guard_choice,
    scope_condition,
    summary_lines,
)

KIND = "conversations"
FORMATS = ("jsonl", "parquet")
EPISODES = ("all", "last")
OUTCOMES = ("all", "success", "failure")
ROLES = ("system", "user", "assistant")
BATCH_ROWS = 256  # rows per Arrow batch streamed out of DuckDB: memory stays flat

# Every conversation of the trials in scope, with its trial's task, model and outcome. Filters are
# bound parameters (NULL matches everything).
CANDIDATES = f"""
SELECT
    v.trial_key, v.batch, v.trial_name, v.trace_source, v.episode, v.is_last_episode,
    v.has_media, c.run, c.step, t.task_name AS task,  -- harbor's trace export: task_name
    c.task_id,  -- what the split guard checks, as the datums export does (one registry for both)
    -- harbor's chain: the trajectory's agent.model_name, else agent_info.model_info.name, else
    -- config.agent.model_name; an empty name counts as none; else its own stand-in
    coalesce(
        nullif(v.model_name, ''),
        nullif(t.model_name, ''),
        nullif(json_extract_string(t.agent_config, '$.model_name'), ''),
        'unknown-model'
    ) AS model,
    CASE WHEN c.infra_failed THEN NULL ELSE c.reward END AS reward,
    c.passed
FROM conversations AS v
JOIN cells AS c USING (trial_key)
JOIN trials AS t USING (trial_key)
WHERE {scope_condition("v.batch", "c.run")}
  AND ($last_only = false OR v.is_last_episode)
  AND ($subagents OR v.trace_source = 'main')
"""
TRIALS = f"""
SELECT
    c.batch, c.run, c.step, count(*) AS trials,
    count(*) FILTER (WHERE NOT e.has_trajectory) AS no_trajectory,
    count(*) FILTER (WHERE e.has_trajectory AND e.agent_turns = 0) AS no_agent_turns
FROM cells AS c
JOIN episodes AS e USING (trial_key)
WHERE {scope_condition("c.batch", "c.run")}
GROUP BY ALL
ORDER BY c.run NULLS LAST, c.step NULLS LAST, c.batch
"""
# The trials left after every rule, in export order, with an estimate of the text their
# conversations hold (each file's text times its episodes), their main trace's episodes left and
# how many subagent rows: the writer builds the messages a chunk at a time (`_chunks`), so memory
# follows the chunk, not the export.
TRIAL_SIZES = """
SELECT
    c.trial_key,
    any_value(s.text_bytes) AS text_bytes,
    list(c.episode ORDER BY c.episode) FILTER (WHERE c.trace_source = 'main') AS main_episodes,
    count(*) FILTER (WHERE c.trace_source <> 'main') AS subagent_rows
FROM candidates AS c
JOIN (
    SELECT trial_key, sum(text_bytes * (episodes + 1)) AS text_bytes
    FROM (
        SELECT
            trial_key,
            file_index,
            sum(
                coalesce(len(message), 0) + coalesce(len(observation), 0)
                + coalesce(len(reasoning_content), 0)
            ) AS text_bytes,
            count(*) FILTER (WHERE source = 'agent') AS episodes
        FROM steps
        GROUP BY trial_key, file_index
    )
    GROUP BY trial_key
) AS s USING (trial_key)
GROUP BY c.trial_key, c.run, c.step, c.batch, c.trial_name
ORDER BY c.run NULLS LAST, c.step NULLS LAST, c.batch, c.trial_name
"""


@dataclass(frozen=True)
class Chunk:
    """Conversations built at once: every one of some trials (`part` "all"), or of one trial,
    the main trace's episodes `lo`..`hi` ("main") or its subagent traces ("subagents")."""

    keys: list[str]
    part: str = "all"
    lo: int = 0
    hi: int = 0


# The rows of one chunk: the view filtered on its own columns, which DuckDB pushes down to the
# steps it joins (a filter that came through the join with `candidates` was not: one trial's
# every episode was built to keep its last, 2.5 GB for an 800-step trajectory), then the
# candidates' columns joined on.
CHUNK_ROWS = """
SELECT v.messages, c.task, c.task_id, c.trial_name, c.batch, c.model, c.reward, c.passed,
    c.trace_source, c.episode
FROM (
    SELECT trial_key, trace_source, episode, messages
    FROM conversations
    WHERE {conditions}
) AS v
JOIN candidates AS c USING (trial_key, trace_source, episode)
ORDER BY c.run NULLS LAST, c.step NULLS LAST, c.batch, c.trial_name,
    c.trace_source <> 'main', c.trace_source, c.episode
"""
CHUNK_TEXT_BYTES = 16 * 2**20
ROW_SCHEMA = pa.schema(
    [
        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("task", pa.string()),
        ("task_id", pa.string()),
        ("trial_name", pa.string()),
        ("batch", pa.string()),
        ("model", pa.string()),
        ("reward", pa.float64()),
        ("passed", pa.bool_()),
        ("trace_source", pa.string()),
        ("episode", pa.int64()),
    ]
)


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ExportError(f"--{name} {value!r} is not one of {', '.join(allowed)}")


def messages_identity(messages: list[dict[str, Any]]) -> bytes:
    """What makes two exported conversations duplicates: their messages, canonically
    (WMO's `training_data.py`)."""
    text = json.dumps(messages, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).digest()


def export_conversations(
    lake: Path | str,
    out: Path | str,
    *,
    fmt: str = "jsonl",
    episodes: str = "all",
    outcome: str = "all",
    tasks: Path | str | None = None,
    no_split_guard: bool = False,
    batch_glob: str | None = None,
    run: str | None = None,
    subagents: bool = True,
    settings: Mapping[str, Any] | None = None,
    check: Callable[[duckdb.DuckDBPyConnection], None] | None = None,
    lake_args: str | None = None,
) -> dict[str, Any]:
    """Export the lake's conversations to `out` (JSONL or Parquet) with `out.manifest.json`;
    return the manifest. Raises ExportError (clear message, nothing written) on a missing guard
    choice, a bad registry, an unregistered task, an existing target or an empty export.
    `settings` are the query-time settings, as `wmo_lake.lake.connect` takes them (the reward
    key and mode decide `passed` for --filter); the manifest records the `settings` view's row.
    `check(con)` runs on the export's connection before anything is read (see Request.check);
    `lake_args`: the ` --lake DIR` the messages' commands carry (see Request.lake_args)."""
    require_guard_choice(tasks, no_split_guard)
    _choice("format", fmt, FORMATS)
    _choice("episodes", episodes, EPISODES)
    _choice("filter", outcome, OUTCOMES)
    request = Request(
        Path(lake),
        Path(out),
        tasks=None if tasks is None else Path(tasks),
        no_split_guard=no_split_guard,
        batch_glob=batch_glob,
        run=run,
        settings=dict(settings or {}),
        lake_args=lake_args,
        check=check,
    )
    scope = request.scope
    with Export(request, kind=KIND) as export:
        con = export.con
        try:
            con.execute(
                f"CREATE TEMP TABLE candidates AS {CANDIDATES}",
                scope | {"last_only": episodes == "last", "subagents": subagents},
            )
            excluded: Counter[str] = Counter()
            rows_by_task = dict(
                con.execute("SELECT task_id, count(*) FROM candidates GROUP BY task_id").fetchall()
            )
            export.keep_train_tasks(rows_by_task)
            excluded.update(export.guard.excluded)
            con.execute(f"DELETE FROM candidates AS d WHERE NOT {export.kept('d.task_id')}")
            _drop(con, excluded, "coalesce(passed, false)", "passed", outcome == "failure")
            _drop(con, excluded, "NOT coalesce(passed, false)", "not_passed", outcome == "success")
            _drop(con, excluded, "has_media", "multimodal", True)
            trials = _trials(con, scope)
            last_only = episodes == "last"
            chunks = _chunks(con.execute(TRIAL_SIZES).fetchall(), last_only=last_only)

            def write(path: Path) -> int:
                batches = _chunk_batches(con, chunks, last_only=last_only, subagents=subagents)
                rows = _write(_unique_batches(batches, excluded), path, fmt)
                if not rows and (excluded or not trials):  # (else: no trial has an episode)
                    raise ExportError(_nothing_to_export(con, trials, excluded, request))
                return rows

            used = export.settings
            return export.write(
                write,
                excluded=excluded,
                parameters={
                    "format": fmt,
                    "episodes": episodes,
                    "filter": outcome,
                    "subagents": subagents,
                    "reward_key": used["reward_key"],
                    "reward_mode": used["reward_mode"],
                },
                extra=lambda: {
                    "format": fmt,
                    "excluded": dict(sorted(excluded.items())),
                    "trials": _trial_totals(trials),
                    "sources": trials,
                },
            )
        except duckdb.Error as error:
            raise ExportError(f"the conversations query failed: {error}") from None


def summary(manifest: Mapping[str, Any], out: Path) -> str:
    """What `wmo-lake export conversations` prints: rows, the guard, trials without episodes."""
    trials = manifest.get("trials", {})
    without = trials.get("without_episodes", {})
    return "\n".join(
        [
            f"wrote {manifest['rows']} conversations ({manifest.get('format')}) to {out}; in "
            f"scope: {trials.get('in_scope', 0)} trials in {len(manifest.get('sources', []))} "
            "batch(es)",
            *summary_lines(manifest, out),
            f"trials without episodes: {without.get('no_trajectory', 0)} without a trajectory "
            f"(oracle / nop), {without.get('no_agent_turns', 0)} without an agent step",
            "excluded episodes: " + excluded_text(manifest),
            *(
                ["the dataset is empty: no trial in scope has an agent episode"]
                if manifest["rows"] == 0
                else []
            ),
        ]
    )


def _drop(
    con: duckdb.DuckDBPyConnection, excluded: Counter[str], condition: str, reason: str, when: bool
) -> None:
    """Drop the candidates matching `condition` (a fixed SQL text of this module), counted."""
    if not when:
        return
    (count,) = con.execute(f"SELECT count(*) FROM candidates WHERE {condition}").fetchone() or (0,)
    if count:
        excluded[reason] += count
        con.execute(f"DELETE FROM candidates WHERE {condition}")


def _chunks(
    sizes: list[tuple[str, int | None, list[int] | None, int]], *, last_only: bool
) -> list[Chunk]:
    """Consecutive trials grouped so each group's estimated text stays under CHUNK_TEXT_BYTES.
    A trial larger than that is split: its main trace's episodes in ranges, each under it (an
    episode's conversation grows with its number, so its estimate does too), then its subagent
    traces. With `last_only` every trial keeps one main episode: no trial needs splitting."""
    chunks: list[Chunk] = []
    group: list[str] = []
    total = 0
    for trial_key, text_bytes, main_episodes, subagent_rows in sizes:
        size = text_bytes or 0
        if size <= CHUNK_TEXT_BYTES or last_only or not main_episodes:
            # a first trial with no text at all (empty, null or absent messages) still opens one
            if not group or total + size > CHUNK_TEXT_BYTES:
                group = [trial_key]
                chunks.append(Chunk(group))
                total = 0
            else:
                group.append(trial_key)
            total += size
            continue
        group, total = [], 0
        weights = sum(episode + 1 for episode in main_episodes)
        held: list[int] = []  # the episodes of the range being filled
        estimated = 0.0
        for episode in main_episodes:
            estimate = size * (episode + 1) / weights
            if held and estimated + estimate > CHUNK_TEXT_BYTES:
                chunks.append(Chunk([trial_key], "main", held[0], held[-1]))
                held, estimated = [], 0.0
            held.append(episode)
            estimated += estimate
        chunks.append(Chunk([trial_key], "main", held[0], held[-1]))
        if subagent_rows:
            chunks.append(Chunk([trial_key], "subagents"))
    return chunks


def _chunk_batches(
    con: duckdb.DuckDBPyConnection, chunks: list[Chunk], *, last_only: bool, subagents: bool
) -> Iterator[pa.RecordBatch]:
    for chunk in chunks:
        conditions = ["list_contains($keys, trial_key)"]
        if not subagents:  # (the candidates hold none: not built at all)
            conditions.append("trace_source = 'main'")
        params: dict[str, Any] = {"keys": chunk.keys}
        if chunk.part == "main":
            conditions += ["trace_source = 'main'", "episode BETWEEN $lo AND $hi"]
            params |= {"lo": chunk.lo, "hi": chunk.hi}
        elif chunk.part == "subagents":
            conditions.append("trace_source <> 'main'")
        if last_only:
            conditions.append("is_last_episode")
        query = CHUNK_ROWS.format(conditions="\n      AND ".join(conditions))
        yield from con.sql(query, params=params).to_arrow_reader(BATCH_ROWS)


def not_a_training_row(messages: list[dict[str, Any]]) -> str | None:
    """Why `messages` is no prompt-and-response row, as WMO's `training_data` reads one (its
    export's "Missing assistant response" and "prompt must end with a user message", its
    loader's final-assistant check): `no_response` or `no_user_prompt`; None when it is one."""
    last = messages[-1] if messages else None
    if last is None or last["role"] != "assistant" or not last["content"].strip():
        return "no_response"
    if len(messages) < 2 or messages[-2]["role"] != "user":
        return "no_user_prompt"
    return None


def _unique_batches(
    reader: pa.RecordBatchReader, excluded: Counter[str]
) -> Iterator[pa.RecordBatch]:
    """The batches with every conversation that is no training row (`not_a_training_row`) or was
    already seen (same messages) dropped and counted; only a 32-byte digest per conversation is
    kept, so memory stays flat."""
    seen: set[bytes] = set()
    for batch in reader:
        keep = []
        for messages in batch.column("messages").to_pylist():
            if reason := not_a_training_row(messages):
                excluded[reason] += 1
                keep.append(False)
                continue
            identity = messages_identity(messages)
            keep.append(identity not in seen)
            if identity in seen:
                excluded["duplicate"] += 1
            seen.add(identity)
        if not all(keep):
            batch = batch.filter(pa.array(keep))
        if batch.num_rows:
            yield batch


def _write(batches: Iterator[pa.RecordBatch], path: Path, fmt: str) -> int:
    rows = 0
    if fmt == "parquet":
        with pq.ParquetWriter(path, ROW_SCHEMA, compression="zstd") as writer:
            for batch in batches:
                writer.write_table(pa.Table.from_batches([batch]).cast(ROW_SCHEMA))
                rows += batch.num_rows
        return rows
    with path.open("w", encoding="utf-8", newline="\n") as stream:
        for batch in batches:
            for row in batch.to_pylist():
                stream.write(json.dumps(row, ensure_ascii=False) + "\n")
            rows += batch.num_rows
    return rows


def _trials(con: duckdb.DuckDBPyConnection, scope: dict[str, Any]) -> list[dict[str, Any]]:
    """The batches in scope with their trial counts, and the trials that give no episode."""
    cursor = con.execute(TRIALS, scope)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _trial_totals(trials: list[dict[str, Any]]) -> dict[str, Any]:
    no_trajectory = sum(b["no_trajectory"] for b in trials)
    no_agent_turns = sum(b["no_agent_turns"] for b in trials)
    return {
        "in_scope": sum(b["trials"] for b in trials),
        "without_episodes": {
            "no_trajectory": no_trajectory,  # oracle / nop agents, or a trajectory-less trial
            "no_agent_turns": no_agent_turns,
            "total": no_trajectory + no_agent_turns,
        },
    }


def _nothing_to_export(
    con: duckdb.DuckDBPyConnection,
    trials: list[dict[str, Any]],
    excluded: Counter[str],
    request: Request,
) -> str:
    if not trials:
        return nothing_in_scope(request, con)
    totals = _trial_totals(trials)
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(excluded.items())) or "none"
    return (
        f"no conversation to export: {totals['in_scope']} trial(s) in scope, "
        f"{totals['without_episodes']['total']} without any agent episode (no trajectory or no "
        f"agent step); episodes excluded: {reasons}. Widen --batch / --filter / --tasks"
    )


# --- the verifying loader ------------------------------------------------------------------------


def _read_rows(path: Path) -> list[dict[str, Any]]:
    with path.open("rb") as stream:
        is_parquet = stream.read(4) == b"PAR1"
    if is_parquet:
        return pq.read_table(path).to_pylist()
    rows = []
    with path.open(encoding="utf-8") as stream:
        for number, line in enumerate(stream, 1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ExportError(f"{path} line {number} is not JSON: {error}") from None
            if not isinstance(row, dict):
                raise ExportError(f"{path} line {number} is not a JSON object")
            rows.append(row)
    return rows


def _check_row(dataset: Path, index: int, row: dict[str, Any]) -> None:
    where = f"dataset {dataset}, row {index} ({row.get('trial_name')!r})"
    messages = row.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ExportError(f"{where}: `messages` must be a non-empty list")
    for message in messages:
        if (
            not isinstance(message, dict)
            or set(message) != {"role", "content"}
            or message["role"] not in ROLES
            or not isinstance(message["content"], str)
        ):
            raise ExportError(
                f"{where}: every message must be exactly {{role, content}} with a role in "
                f"{', '.join(ROLES)} and text content, got {str(message)[:80]}"
            )
    if reason := not_a_training_row(messages):
        raise ExportError(
            f"{where}: a row must end with an assistant turn of text answering a user message "
            f"({reason}); an export writes no other"
        )


def load_verified(dataset: Path | str, tasks: Path | str | None = None) -> pl.DataFrame:
    """The rows of an exported conversations dataset (JSONL or Parquet) as a polars DataFrame
    typed as the export wrote them (`messages` a list of {role, content} structs), after checking
    it against its manifest (sha256, row count, the registry's sha256 and train split when
    `tasks` is given), every row's shape, and that no conversation appears twice. ExportError on
    any mismatch."""
    import polars as pl

    dataset = Path(dataset)
    rows = discipline.load_verified(
        dataset,
        _read_rows,
        # (an export written before rows carried task_id was guarded by task)
        lambda rows: [row["task_id"] if "task_id" in row else row.get("task") for row in rows],
        kind=KIND,
        tasks=tasks,
    )
    seen: set[bytes] = set()
    for index, row in enumerate(rows):
        _check_row(dataset, index, row)
        identity = messages_identity(row["messages"])
        if identity in seen:
            raise ExportError(
                f"dataset {dataset}, row {index}: the same conversation appears twice; an export "
                "writes each once, so the file was changed after export"
            )
        seen.add(identity)
    # typed as the export wrote them, not guessed from the first rows (a reward null in every
    # early row was a Null column, then a 1.0 after them failed the load)
    present = set(rows[0]) if rows else set(ROW_SCHEMA.names)
    schema = pa.schema([field for field in ROW_SCHEMA if field.name in present])
    frame = pl.from_arrow(pa.Table.from_pylist(rows, schema=schema))
    assert isinstance(frame, pl.DataFrame)
    return frame


__all__ = [
    "ExportError",
    "export_conversations",
    "load_verified",
    "messages_identity",
    "summary",
]
