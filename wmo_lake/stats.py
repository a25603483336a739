"""Per-batch `RolloutStats` (WMO's `rollout_stats`) from the view, with its warnings.

The numbers are all SQL (`sql/rollout_stats.sql`); this module only filters, orders, and turns
WMO's `collect_rollouts` log warnings into short notes a person reads under the table.

    report = collect_stats(Path("lake"), {"wmo_max_tokens": 4096}, batch_glob="run-a/*")
    report.rows    # one dict per batch, keys exactly the rollout_stats columns
    report.notes   # ["run-a/harbor/step-0001/job: 3 turn(s) across 2/64 trial(s) ...", ...]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import duckdb

from wmo_lake.background import Background
from wmo_lake.lake import connect
from wmo_lake.output import rows_as_dicts
from wmo_lake.selection import scope_sql
from wmo_lake.terminal import percent_text, render_table

# Batches in run/step order; a filter left as NULL matches everything. Bound, never pasted.
STATS_QUERY = f"""
SELECT *
FROM rollout_stats
WHERE {scope_sql()}
ORDER BY run NULLS LAST, step NULLS LAST, batch
"""

# Trials whose reward under the key in force is there but no measurement (1.5, NaN, "abc", null;
# a bool or numeric string is stored as the number harbor reads, so it is one when in [0, 1]).
INVALID_REWARDS_QUERY = """
SELECT batch, count(*) AS trials, arg_min(reward_json, trial_name) AS example
FROM cells
WHERE infra_failed AND reward_json IS NOT NULL
GROUP BY batch
"""

# The output cap each batch was judged against, for the truncation note.
CAPS_QUERY = """
SELECT batch, min(max_tokens) AS low, max(max_tokens) AS high
FROM trial_caps
GROUP BY batch
"""

# Batches labelled from more than one job dir (two run trees with the same run name, or a
# job dir that moved): their trials are pooled under one label, attempts ranked together.
SHARED_LABELS_QUERY = """
SELECT batch, list_sort(list(job_dir)) AS job_dirs
FROM jobs
GROUP BY batch
HAVING count(*) > 1
"""

# Trials whose stop reason is the string 'unknown' itself: WMO counts it a reason (a scaffold
# loss), while `stop_reason_counts` pools it with the trials that have none.
NAMED_UNKNOWN_QUERY = """
SELECT batch, count(*) AS trials
FROM trial_stop_reasons
WHERE stop_reason = 'unknown'
GROUP BY batch
"""

NO_MEASUREMENT = "-"


@dataclass
class StatsReport:
    """What `wmo-lake stats` prints: the rollout_stats rows and the notes under them."""

    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # printed first; `--strict` exits 1
    cut: list[str] = field(default_factory=list)  # steps `last` kept only some batches of


def query_stats(
    con: duckdb.DuckDBPyConnection, *, batch_glob: str | None = None, run: str | None = None
) -> list[dict[str, Any]]:
    """The `rollout_stats` rows of the matching batches, in run/step order."""
    relation = con.sql(STATS_QUERY, params={"batch_glob": batch_glob, "run": run})
    return rows_as_dicts(relation)


def collect_stats(
    lake: Path | str,
    settings: dict[str, Any] | None = None,
    *,
    batch_glob: str | None = None,
    run: str | None = None,
    steps: tuple[int | None, int | None] | None = None,
    last: int | None = None,
) -> StatsReport:
    """The rows plus WMO's `collect_rollouts` warnings as notes; raises LakeError / duckdb.Error.
    `steps` and `last` narrow the rows (`stats_views.limit_rows`) before the notes and the
    reward key's check, so both are about the batches shown. The notes' queries run on a second
    session, on a thread of their own, while `rollout_stats` runs: it keeps only one core busy
    most of the time."""
    from wmo_lake.checks import reward_key_warning
    from wmo_lake.lake import session_beside
    from wmo_lake.stats_views import cut_steps, limit_rows

    con = connect(lake, settings, check=False)
    try:
        beside = session_beside(con, settings)
        queries = (INVALID_REWARDS_QUERY, CAPS_QUERY, SHARED_LABELS_QUERY)
        notes = Background(
            lambda: [beside.sql(q).fetchall() for q in queries], "wmo-lake-stats-notes"
        )
        try:
            selected = limit_rows(query_stats(con, batch_glob=batch_glob, run=run), steps=steps)
            rows = limit_rows(selected, last=last)
        finally:
            try:
                invalid_rows, caps_rows, shared_rows = notes.wait()
            finally:
                beside.close()
        caps: dict[str, tuple[int, int]] = {}
        if any(row["truncated_spans"] for row in rows):
            caps = {batch: (low, high) for batch, low, high in caps_rows}
        invalid: dict[str, tuple[int, str]] = {}
        if any(row["infra_failed_trials"] for row in rows):
            invalid = {b: (n, ex) for b, n, ex in invalid_rows}
        narrowed = [row["batch"] for row in rows] if steps or last else None
        warning = reward_key_warning(con, batch_glob=batch_glob, run=run, batches=narrowed)
        shared = {batch: dirs for batch, dirs in shared_rows}
        named_unknown: dict[str, int] = {}
        if any(
            row["scaffold_loss_rate"] and "unknown" in row["stop_reason_counts"] for row in rows
        ):
            named_unknown = dict(con.execute(NAMED_UNKNOWN_QUERY).fetchall())
        report = StatsReport(rows, notes_for(rows, caps, invalid, shared, named_unknown))
        report.warnings = [] if warning is None else [warning]
        report.cut = cut_steps(selected, rows)
        return report
    finally:
        con.close()


def _cap_text(caps: tuple[int, int] | None) -> str:
    if caps is None:
        return "max_tokens"
    low, high = caps
    return f"max_tokens = {low}" if low == high else f"max_tokens ({low}..{high})"


def notes_for(
    rows: list[dict[str, Any]],
    caps: dict[str, tuple[int, int]],
    invalid_rewards: dict[str, tuple[int, str]] | None = None,
    shared_labels: dict[str, list[str]] | None = None,
    named_unknown: dict[str, int] | None = None,
) -> list[str]:
    """WMO's `collect_rollouts` warnings, one short line per batch and condition, plus the
    lake's own: empty batches, batches pooled from several job dirs, and rewards that are no
    measurement. `named_unknown`: per batch, the trials whose stop reason is 'unknown' itself
    (a loss, where no reason at all is none)."""
    notes: list[str] = []
    for row in rows:
        batch, trials = row["batch"], row["trials"]
        executed = row["executed_trials"]
        if trials == 0 and not row["unreadable_trials"]:
            notes.append(
                f"{batch}: empty batch: the lake holds no trial of it (its job dir holds no "
                "trial dirs, or dirs ingested later hold the same trials), so its 0.0 rates are "
                "null measurements over zero executed trials"
            )
        job_dirs = (shared_labels or {}).get(batch)
        if job_dirs:
            notes.append(
                f"{batch}: {len(job_dirs)} job dirs carry this batch label and their trials are "
                f"pooled as one batch ({', '.join(job_dirs)}): two run trees with the same run "
                "name, or a job dir that moved (`wmo-lake ingest --prune` drops one that is gone)"
            )
        if batch in (invalid_rewards or {}):
            count, example = (invalid_rewards or {})[batch]
            notes.append(
                f"{batch}: {count}/{trials} trial(s) carry a reward that is no measurement (e.g. "
                f"{example}; expected a number in [0, 1]): counted as infra failures with a 0.0 "
                "stand-in (problems kind 'invalid_reward')"
            )
        if row["truncated_spans"]:
            notes.append(
                f"{batch}: {row['truncated_spans']} turn(s) across "
                f"{row['truncated_span_trials']}/{trials} trial(s) sampled the full "
                f"{_cap_text(caps.get(batch))} and were cut off mid-answer; raise max_tokens"
            )
        if row.get("dropped_turns"):
            notes.append(
                f"{batch}: {row['dropped_turns']} turn(s) across {row['dropped_turn_trials']}/"
                f"{trials} trial(s) stopped at max_tokens and were dropped by harbor (trial.log: "
                "'Output length exceeded'): no span, no step, and the cut-off text is in the next "
                "prompt; truncated_spans cannot count them; raise max_tokens"
            )
        if row["empty_span_trials"]:
            notes.append(
                f"{batch}: {row['empty_span_trials']}/{trials} trial(s) recorded no token spans "
                "(reward signal, no training data)"
            )
        if row["infra_failed_trials"]:
            notes.append(
                f"{batch}: {row['infra_failed_trials']}/{trials} trial(s) never produced verifier "
                f"evidence; excluded from the solve rate ({executed} executed)"
            )
        if row["graded_trials"] < executed:
            notes.append(
                f"{batch}: {executed - row['graded_trials']}/{executed} executed trial(s) have "
                "no readable CTRF test report; excluded from the graded solve rate"
            )
        if row["scaffold_loss_rate"] > 0:
            counts = {
                reason: count
                for reason, count in row["stop_reason_counts"].items()
                if reason not in ("submitted", "unknown")
            }
            named = (named_unknown or {}).get(batch)
            if named:
                counts["unknown"] = named
            losses = ", ".join(f"{reason} {count}" for reason, count in sorted(counts.items()))
            verifier_part = row.get("verifier_scaffold_loss_rate") or 0.0
            of_which = (
                f"; {percent_text(verifier_part).removesuffix('%')} points of it are verifier "
                "crashes "
                f"({row['verifier_error_trials']} trial(s) with a verifier-side exception), "
                "not agent failures"
                if verifier_part > 0
                else ""
            )
            notes.append(
                f"{batch}: scaffold loss {percent_text(row['scaffold_loss_rate'])}: trials that "
                f"never reached an explicit submit ({losses}); their rewards measure the cutoff"
                f"{of_which}"
            )
        if row["unreadable_trials"]:
            notes.append(
                f"{batch}: {row['unreadable_trials']} trial dir(s) could not be read and are not "
                "counted above (the problems table says why, kind 'unreadable_trial': most often "
                "no readable result.json)"
            )
    return notes


def percent(value: float, denominator: int) -> str:
    """A rate as a percentage; '-' when its denominator is empty (a null measurement)."""
    return percent_text(value) if denominator else NO_MEASUREMENT


def _with_stop_reason(row: dict[str, Any]) -> int:
    """Trials with a stop reason, as far as the counts tell ('unknown' is no reason)."""
    known = sum(n for reason, n in row["stop_reason_counts"].items() if reason != "unknown")
    return known or int(row["scaffold_loss_rate"] > 0)


def _scaffold_cell(row: dict[str, Any]) -> str:
    """The scaffold loss rate, with the verifier's part of it when there is one."""
    cell = percent(row["scaffold_loss_rate"], _with_stop_reason(row))
    verifier_part = row.get("verifier_scaffold_loss_rate") or 0.0
    return f"{cell} ({percent_text(verifier_part)} verifier)" if verifier_part > 0 else cell


def table_cells(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The stats as text cells (headers, rows), rates as percentages."""
    headers = [
        "batch",
        "step",
        "trials",
        "solve",
        "graded",
        "raw",
        "executed",
        "infra failed",
        "no spans",
        "truncated",
        "dropped",
        "scaffold loss",
        "unreadable",
        "stop reasons",
    ]
    body = [
        [
            row["batch"],
            "" if row["step"] is None else str(row["step"]),
            str(row["trials"]),
            percent(row["solve_rate"], row["executed_trials"]),
            f"{percent(row['graded_solve_rate'], row['graded_trials'])} ({row['graded_trials']})",
            percent(row["raw_solve_rate"], row["trials"]),
            str(row["executed_trials"]),
            str(row["infra_failed_trials"]),
            str(row["empty_span_trials"]),
            f"{row['truncated_spans']} in {row['truncated_span_trials']}",
            f"{row.get('dropped_turns', 0)} in {row.get('dropped_turn_trials', 0)}",
            _scaffold_cell(row),
            str(row["unreadable_trials"]),
            ", ".join(f"{k} {v}" for k, v in row["stop_reason_counts"].items()),
        ]
        for row in rows
    ]
    return headers, body


TEXT_COLUMNS = ("batch", "stop reasons")  # left-aligned; every other column is a number


def print_table(rows: list[dict[str, Any]], file: TextIO, width: int | None) -> None:
    """The stats table, drawn by the renderer `wmo-lake sql` uses (wmo_lake.terminal)."""
    headers, body = table_cells(rows)
    right = [header not in TEXT_COLUMNS for header in headers]
    render_table(headers, body, right_aligned=right, file=file, width=width, narrower="use --json")


def table_lines(rows: list[dict[str, Any]], width: int | None = None) -> list[str]:
    """The same table as `print_table`, as lines of text (for callers that print them)."""
    import io

    text = io.StringIO()
    print_table(rows, text, width)
    return text.getvalue().splitlines()
