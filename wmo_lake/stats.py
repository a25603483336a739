"""Per-batch `RolloutStats` (WMO's `rollout_stats`) from the view, with its warnings.

The numbers are all SQL (`sql/rollout_stats.sql`); this module only filters, orders, and turns
WMO's `collect_rollouts` log warnings into short notes a person reads under the table.

    report = collect_stats(Path("lake"), {"wmo_max_tokens": 4096}, batch_glob="run-a/*")
    report.rows    # one dict per batch, keys exactly the rollout_stats columns
    report.notes   # ["run-a/harbor/step-0001/job: 3 turn(s) across 2/64 trial(s) ...", ...]
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import duckdb

from wmo_lake.background import Background
from wmo_lake.checks import reward_key_warning
from wmo_lake.incomplete_jobs import (
    ShortJob,
    UnfinishedBatch,
    incomplete_jobs,
    job_rows,
    job_warnings,
)
from wmo_lake.lake import connect
from wmo_lake.output import rows_as_dicts
from wmo_lake.selection import scope_sql
from wmo_lake.settings import SETTINGS
from wmo_lake.terminal import percent_text, render_table

# Batches in run/step order; a filter left as NULL matches everything. Bound, never pasted.
STATS_QUERY = f"""
SELECT *
FROM rollout_stats
WHERE {scope_sql()}
ORDER BY run NULLS LAST, step NULLS LAST, batch
"""

# The trials of each batch that no reward measures (cells.infra_failed), with what upstream's
# scorer notes as the cause of each one missing the key (`infra-failure: <exception type | no
# exception info>`), those
# whose reward under the key in force is there but no measurement (1.5, NaN, "abc", null; a bool
# or numeric string is stored as the number harbor reads, so it is one when in [0, 1]), and those
# whose verifier wrote rewards under other keys only (the key names them).
INFRA_FAILED_QUERY = """
WITH failed AS (
    SELECT
        c.batch,
        c.trial_name,
        c.reward_json,
        coalesce(c.exception_type, 'no exception info') AS cause,
        CASE WHEN c.reward_json IS NULL AND cardinality(t.rewards) > 0 THEN map_keys(t.rewards) END
            AS other_keys
    FROM cells AS c
    JOIN trials AS t USING (trial_key)
    WHERE c.infra_failed
)
SELECT
    batch,
    count(reward_json) AS invalid,
    arg_min(reward_json, trial_name) FILTER (WHERE reward_json IS NOT NULL) AS example,
    -- (a reward that is no measurement has its own note: upstream's scorer raises for it)
    map_entries(histogram(cause) FILTER (WHERE reward_json IS NULL)) AS causes,
    count(other_keys) AS other_key_trials,
    list_sort(list_distinct(flatten(list(other_keys)))) AS other_keys
FROM failed
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

# Trials of each batch with no spans because their job's pi-bridge sink dir does not exist (a
# tree moved since it ran: `--sink-root`), which the no-spans note says as the cause.
SINK_MISSING_QUERY = """
SELECT batch, count(*) AS trials
FROM trials
WHERE spans_status = 'sink_dir_missing'
GROUP BY batch
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
    # the batches shown whose harbor job has not finished, or finished short of its trials: the
    # table's notes say it; where no note is printed (--json, --by task), `job_warnings` do
    unfinished: list[str] = field(default_factory=list)
    short: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # holding trials whose dirs are gone

    @property
    def job_warnings(self) -> list[str]:
        """What the notes say of unfinished and short jobs, as warnings."""
        return [text for text, _ in job_warnings(self.unfinished, self.short, self.gone)]


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
    from wmo_lake.lake import session_beside
    from wmo_lake.stats_views import cut_steps, limit_rows

    con = connect(lake, settings, check=False)
    try:
        beside = session_beside(con, settings)
        queries = (INFRA_FAILED_QUERY, CAPS_QUERY, SHARED_LABELS_QUERY)
        notes = Background(
            lambda: (
                [beside.sql(q).fetchall() for q in queries],
                job_rows(beside, batch_glob=batch_glob, run=run),
            ),
            "wmo-lake-stats-notes",
        )
        try:
            selected = limit_rows(query_stats(con, batch_glob=batch_glob, run=run), steps=steps)
            rows = limit_rows(selected, last=last)
        finally:
            try:
                (infra_rows, caps_rows, shared_rows), jobs = notes.wait()
            finally:
                beside.close()
        caps: dict[str, tuple[int, int]] = {}
        if any(row["truncated_spans"] for row in rows):
            caps = {batch: (low, high) for batch, low, high in caps_rows}
        narrowed = [row["batch"] for row in rows] if steps or last else None
        warning = reward_key_warning(con, batch_glob=batch_glob, run=run, batches=narrowed)
        named_unknown: dict[str, int] = {}
        if any(
            row["scaffold_loss_rate"] and "unknown" in row["stop_reason_counts"] for row in rows
        ):
            named_unknown = dict(con.execute(NAMED_UNKNOWN_QUERY).fetchall())
        sink_missing: dict[str, int] = {}
        if any(row["empty_span_trials"] for row in rows):
            sink_missing = dict(con.execute(SINK_MISSING_QUERY).fetchall())
        ((reward_key,),) = con.execute("SELECT reward_key FROM settings").fetchall()
        incomplete = incomplete_jobs(jobs, shown={row["batch"] for row in rows})
        facts = BatchFacts(
            caps=caps,
            infra_failed={row[0]: InfraFailed(*row[1:]) for row in infra_rows},
            shared_labels=dict(shared_rows),
            named_unknown=named_unknown,
            sink_missing=sink_missing,
            unfinished_jobs={found.batch: found for found in incomplete.unfinished},
            short_jobs=incomplete.short,
            reward_key=reward_key,
        )
        report = StatsReport(rows, notes_for(rows, facts))
        report.warnings = [] if warning is None else [warning]
        report.cut = cut_steps(selected, rows)
        report.unfinished = [row["batch"] for row in rows if row["batch"] in facts.unfinished_jobs]
        report.short = [found.batch for found in facts.short_jobs if not found.gone]
        report.gone = [found.batch for found in facts.short_jobs if found.gone]
        return report
    finally:
        con.close()


def _cap_text(caps: tuple[int, int] | None) -> str:
    if caps is None:
        return "max_tokens"
    low, high = caps
    return f"max_tokens = {low}" if low == high else f"max_tokens ({low}..{high})"


@dataclass(frozen=True)
class InfraFailed:
    """A batch's trials no reward measures (INFRA_FAILED_QUERY's row)."""

    invalid: int  # the reward key is there, with no measurement
    example: str | None  # one such value, as stored
    causes: list[dict[str, Any]]  # [{key: cause, value: trials}], upstream's cell-note causes
    other_key_trials: int  # the verifier wrote rewards under other keys only
    other_keys: list[str]


@dataclass
class BatchFacts:
    """What the notes know of each batch beside its rollout_stats row, by batch."""

    caps: dict[str, tuple[int, int]] = field(default_factory=dict)
    infra_failed: dict[str, InfraFailed] = field(default_factory=dict)
    # its job dirs, when > 1 (a label holds one step: a step dir starts any label below it)
    shared_labels: dict[str, list[str]] = field(default_factory=dict)
    # trials whose stop reason is 'unknown' itself (a loss, where no reason at all is none)
    named_unknown: dict[str, int] = field(default_factory=dict)
    # trials with no spans because their job's sink dir does not exist
    sink_missing: dict[str, int] = field(default_factory=dict)
    unfinished_jobs: dict[str, UnfinishedBatch] = field(default_factory=dict)
    short_jobs: list[ShortJob] = field(default_factory=list)  # finished, short of their trials
    reward_key: str = field(default_factory=lambda: str(SETTINGS["reward_key"].default))


def _infra_detail(failed: InfraFailed | None, reward_key: str) -> str:
    """`; causes ...` for the infra-failure note: upstream's cell notes name the cause of each
    trial missing the key (its exception type, or 'no exception info'); a verifier that wrote
    other keys is said, the keys in one code span (a key holding a digit then keeps the note
    whole in the short notes, stats_views.collapse_notes)."""
    if failed is None or not failed.causes:
        return ""
    causes = sorted((entry["key"], entry["value"]) for entry in failed.causes)
    text = "; causes, as upstream's cells note them: " + ", ".join(
        f"{cause} {count}" for cause, count in causes
    )
    if failed.other_key_trials:
        keys = ", ".join(failed.other_keys[:5]) + (", ..." if len(failed.other_keys) > 5 else "")
        text += (
            f"; {failed.other_key_trials} of them have rewards under other keys only: `{keys}`; "
            f"is {reward_key!r} the key you meant? (--reward-key)"
        )
    return text


def _unfinished_note(batch: str, trials: int, unreadable: int, jobs: UnfinishedBatch) -> str:
    """Upstream's scorer refuses a job that did not finish ('harbor job did not finish'); the
    lake reads what is there and says so. An unreadable trial dir is one of the job's trials.
    The resume command stays out of parentheses: the short notes drop a parenthesis holding a
    digit, and a note with a command holding one is never collapsed (stats_views)."""
    held = _held(trials, unreadable)
    of_planned = f" of the {jobs.planned:,} it plans" if jobs.planned is not None else ""
    state = (
        "records no finished_at, or could not be read"
        if jobs.open and jobs.unreadable
        else "could not be read (a kill cuts it off mid-write)"
        if jobs.unreadable
        else "records no finished_at"
    )
    first = shlex.quote(jobs.job_dirs[0])
    more = (
        f" (and {len(jobs.job_dirs) - 1} more job dir(s) of it)" if len(jobs.job_dirs) > 1 else ""
    )
    return (
        f"{batch}: harbor has not finished its job: its result.json {state}. The lake holds "
        f"{held}{of_planned}, and upstream's scorer refuses a job that did not finish, so these "
        "figures are of the trials written so far. Finish or resume it, then ingest it again: "
        f"`harbor job resume -p {first}`{more}, or the same `wmo-lake collect` command"
    )


def _short_note(job: ShortJob) -> str:
    """Upstream's scorer gives no figures for a finished job with fewer trials than it planned
    ('harbor returned N trials; expected M'); scoring it again resumes the job, which runs the
    missing trials. What is missing is told from the job dir on disk (`ShortJob`)."""
    first = shlex.quote(job.job_dirs[0])
    more = f" (and {len(job.job_dirs) - 1} more dir(s) of it)" if len(job.job_dirs) > 1 else ""
    if job.gone:
        return (
            f"{job.batch}: its harbor job finished, and the lake holds "
            f"{_held(job.trials, job.unreadable)} of the {job.planned:,} trials it plans: "
            f"{job.gone:,} of them are trials whose dirs are gone from its job dir (removed after "
            "the run: harbor's job resume deletes a trial dir it runs again), kept without "
            "--prune and counted in these figures, where upstream's scorer scores the job dir as "
            f"it is. Drop them: {_ingest_command(job, '--prune ')}"
        )
    causes = []
    if job.removed is None:
        causes.append(
            f"its job dir `{first}`{more} is not on this machine (or cannot be listed), so the "
            "lake cannot tell trial dirs removed after the run from trials not ingested or held "
            "by another dir"
        )
    if job.removed:
        causes.append(
            f"{job.removed:,} trial dir(s) are gone from its job dir (removed after the run): "
            f"to run them again, resume the job and ingest it again: `harbor job resume -p "
            f"{first}`{more}, or the same `wmo-lake collect` command"
        )
    if job.not_counted:
        causes.append(
            f"{job.not_counted:,} trial dir(s) in its job dir are not counted in this batch: "
            f"not ingested ({_ingest_command(job)}), or trials another dir "
            "holds (the ingest's summary counts those)"
        )
    return (
        f"{job.batch}: its harbor job finished, but the lake holds "
        f"{_held(job.trials, job.unreadable)} of the {job.planned:,} trials it plans: "
        + "; ".join(causes)
        + ". Upstream's scorer would not score the step as it is (scoring it again resumes the "
        "job), so these figures are of a part of it"
    )


def _ingest_command(job: ShortJob, options: str = "") -> str:
    """`wmo-lake ingest OPTIONS PATH`, PATH (shell-quoted) the one whose ingest labels the job's
    first dir with its batch label as before: that dir itself when it labels itself so (a
    collector's `<run>/harbor/step-N/`), else the dir the label is relative to (an ingest of the
    job dir alone would relabel its batch)."""
    from wmo_lake.discover import job_labels

    path = Path(job.job_dirs[0])
    parts = tuple(job.batch.split("/"))
    if job_labels(path, path)[0] != job.batch:
        if path.parts[-len(parts) :] != parts:  # (labelled through a link: which is unknown)
            return (
                f"`wmo-lake ingest {options}PATH`, PATH the dir you ingested it from (which "
                f"labels it {job.batch!r})"
            )
        path = path.parents[len(parts) - 1]
    return f"`wmo-lake ingest {options}{shlex.quote(str(path))}`"


def _held(trials: int, unreadable: int) -> str:
    return f"{trials:,} trial(s)" + (f" and {unreadable:,} unreadable dir(s)" if unreadable else "")


def notes_for(rows: list[dict[str, Any]], facts: BatchFacts | None = None) -> list[str]:
    """WMO's `collect_rollouts` warnings, one short line per batch and condition, plus the
    lake's own: empty batches, batches pooled from several job dirs, rewards that are no
    measurement, jobs harbor has not finished, and finished ones short of their trials."""
    facts = facts or BatchFacts()
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
        if batch in facts.shared_labels:
            job_dirs = facts.shared_labels[batch]
            notes.append(
                f"{batch}: {len(job_dirs)} job dirs carry this batch label and their trials are "
                f"pooled as one batch ({', '.join(job_dirs)}): two run trees with the same run "
                "name, dirs of one name in two trees given as PATHs, or a job dir that moved "
                "(`wmo-lake ingest --prune` drops one that is gone)"
            )
        if batch in facts.unfinished_jobs:
            jobs = facts.unfinished_jobs[batch]
            notes.append(_unfinished_note(batch, trials, row["unreadable_trials"], jobs))
        notes += [_short_note(job) for job in facts.short_jobs if job.batch == batch]
        failed = facts.infra_failed.get(batch) if row["infra_failed_trials"] else None
        if failed is not None and failed.invalid:
            notes.append(
                f"{batch}: {failed.invalid}/{trials} trial(s) carry a reward that is no "
                f"measurement (e.g. {failed.example}; expected a number in [0, 1]): counted as "
                "infra failures with a 0.0 stand-in (problems kind 'invalid_reward')"
            )
        if row["truncated_spans"]:
            notes.append(
                f"{batch}: {row['truncated_spans']} turn(s) across "
                f"{row['truncated_span_trials']}/{trials} trial(s) sampled the full "
                f"{_cap_text(facts.caps.get(batch))} and were cut off mid-answer; raise max_tokens"
            )
        if row.get("dropped_turns"):
            notes.append(
                f"{batch}: {row['dropped_turns']} turn(s) across {row['dropped_turn_trials']}/"
                f"{trials} trial(s) stopped at max_tokens and were dropped by harbor (trial.log: "
                "'Output length exceeded'): no span, no step, and the cut-off text is in the next "
                "prompt; truncated_spans cannot count them; raise max_tokens"
            )
        if row["empty_span_trials"]:
            missing = facts.sink_missing.get(batch)
            notes.append(
                f"{batch}: {row['empty_span_trials']}/{trials} trial(s) recorded no token spans "
                "(reward signal, no training data)"
                + (
                    f"; {missing} of them because their pi-bridge sink dir does not exist "
                    "(problems kind 'sink_dir_missing'): for a tree moved since it ran, ingest "
                    "it again with --sink-root OLD=NEW"
                    if missing
                    else ""
                )
            )
        if row["infra_failed_trials"]:
            notes.append(
                f"{batch}: {row['infra_failed_trials']}/{trials} trial(s) never produced verifier "
                f"evidence for reward key {facts.reward_key!r}; excluded from the solve rate "
                f"({executed} executed){_infra_detail(failed, facts.reward_key)}"
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
            named = facts.named_unknown.get(batch)
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
