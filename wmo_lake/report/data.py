"""What the report, `compare` and `stats --by task` show, read from the lake's views.

Every number here is a view's number: rates and counts are `rollout_stats` columns, datum counts
`datum_stats` columns, pass rates `cells` rows counted per task and batch. The one thing added is
the difference between a measurement and a gap: rollout_stats gives 0.0 for an empty denominator
(as the seed does); here that point is None, so a plot leaves a gap instead of drawing a 0.

    data = collect_report(Path("lake"), {"wmo_max_tokens": 4096}, runs=["exp1"])
    data.batches[0]["solve_rate"]     # the rollout_stats value
    measured(data.batches[0], "solve_rate")   # the same, or None when 0 trials were executed
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from wmo_lake import __version__
from wmo_lake.checks import PooledBatchWarning, warn_from_caller, warn_on_unused_reward_key
from wmo_lake.incomplete_jobs import (
    incomplete_jobs,
    job_rows,
    job_warnings,
    pooled_batches,
    pooled_warning,
)
from wmo_lake.lake import connect
from wmo_lake.output import rows_as_dicts
from wmo_lake.selection import NO_RUN
from wmo_lake.settings import SETTINGS

# The task of a trial whose result.json names none (a `missing_task` problem): cells.task_id is
# null there, and a per-task table or plot shows this label for it instead.
NO_TASK = "(no task id)"

# The selection, bound as parameters (never pasted): runs is a list or NULL, glob a string or NULL.
SELECTED_STATS = """
SELECT *
FROM rollout_stats
WHERE ($runs IS NULL OR list_contains($runs, coalesce(run, $no_run)))
  AND ($batch_glob IS NULL OR batch GLOB $batch_glob)
ORDER BY run NULLS LAST, step NULLS LAST, batch
"""

# Trials with a stop reason per batch: scaffold_loss_rate's denominator (null and '' are none).
STOP_REASON_DENOMINATOR = """
SELECT batch, count(*) FILTER (WHERE coalesce(stop_reason, '') <> '') AS with_stop_reason
FROM trial_stop_reasons
WHERE list_contains($batches, batch)
GROUP BY batch
"""

# Prompt and sampled tokens per batch, from the sampled turns (`spans`).
TOKENS = """
SELECT
    batch,
    count(*) AS turns,
    sum(prompt_len)::BIGINT AS prompt_tokens,
    sum(n_sampled)::BIGINT AS sampled_tokens
FROM spans
WHERE list_contains($batches, batch)
GROUP BY batch
"""

DATUM_STATS = "SELECT * FROM datum_stats WHERE list_contains($batches, batch)"

# One row per (batch, task): pass rate over executed trials, as solve_rate counts them.
TASK_CELLS = """
SELECT
    batch,
    coalesce(task_id, $no_task) AS task_id,
    count(*) AS trials,
    count(*) FILTER (WHERE NOT infra_failed) AS executed,
    count(*) FILTER (WHERE NOT infra_failed AND passed) AS passed
FROM cells
WHERE list_contains($batches, batch)
GROUP BY ALL
"""

PROBLEMS = """
SELECT batch, kind, count(*) AS n
FROM problems
WHERE list_contains($batches, batch)
GROUP BY ALL
ORDER BY batch, kind
"""

UNBATCHED_PROBLEMS = """
SELECT kind, count(*) AS n FROM problems WHERE batch IS NULL GROUP BY ALL ORDER BY kind
"""

# The caps each trial was judged against (the settings, else the batch's recorded values).
CAPS = """
SELECT max_turns, max_tokens, count(DISTINCT batch) AS batches, count(*) AS trials
FROM trial_caps
WHERE list_contains($batches, batch)
GROUP BY ALL
ORDER BY max_turns NULLS FIRST, max_tokens
"""

# The datum budgets per batch, as datum_episodes applies them to each trial (`trial_caps`:
# settings, else the context_limit the trial's agent recorded): without a pass over
# datum_episodes.
DATUM_CAPS = """
SELECT
    k.context_budget,
    s.max_datum_tokens,
    count(DISTINCT k.batch) AS batches
FROM trial_caps AS k
CROSS JOIN settings AS s
WHERE list_contains($batches, k.batch)
GROUP BY ALL
ORDER BY context_budget, max_datum_tokens
"""


# Per batch, the counts the rollout_stats rules take (see sql/rollout_stats.sql for each rule);
# `pooled_counts` adds them up over any set of batches (a compare side, a step's batches).
BATCH_COUNTS = """
SELECT
    batch,
    count(*) AS trials,
    count(*) FILTER (WHERE n_spans > 0) AS trials_with_spans,
    count(*) FILTER (WHERE NOT infra_failed) AS executed_trials,
    count(*) FILTER (WHERE NOT infra_failed AND passed) AS executed_passed,
    count(*) FILTER (WHERE passed) AS passed_trials,
    list(graded_score ORDER BY task_id, attempt)
        FILTER (WHERE NOT infra_failed AND graded_score IS NOT NULL) AS graded_scores,
    count(*) FILTER (WHERE coalesce(stop_reason, '') <> '') AS with_stop_reason,
    count(*) FILTER (WHERE stop_reason = 'submitted') AS submitted
FROM trial_records
WHERE list_contains($batches, batch)
GROUP BY batch
"""
COUNTS = (
    "trials",
    "trials_with_spans",
    "executed_trials",
    "executed_passed",
    "passed_trials",
    "with_stop_reason",
    "submitted",
)


def batch_counts(con: duckdb.DuckDBPyConnection, batches: list[str]) -> dict[str, dict[str, Any]]:
    """Each batch's BATCH_COUNTS row (all zero for a batch without trials)."""
    empty = dict.fromkeys(COUNTS, 0) | {"graded_scores": None}
    counts = {batch: empty for batch in batches}
    rows = rows_as_dicts(con.sql(BATCH_COUNTS, params={"batches": batches}))
    counts.update((row["batch"], row) for row in rows)
    return counts


def shared_step_counts(
    con: duckdb.DuckDBPyConnection, columns: Iterable[list[list[dict[str, Any]]]]
) -> dict[str, dict[str, Any]]:
    """The BATCH_COUNTS rows of the batches that share a step with another (each series'
    `columns_of`): only a step of several batches is pooled, one batch is its row as it is."""
    shared = [row["batch"] for series in columns for c in series if len(c) > 1 for row in c]
    return batch_counts(con, shared) if shared else {}


def pooled_counts(
    counts: dict[str, dict[str, Any]], batches: list[dict[str, Any]]
) -> dict[str, Any]:
    """The rollout_stats rules over these batches' trials pooled (`counts`: their BATCH_COUNTS
    rows by batch; `batches`: their rollout_stats rows, for the additive columns)."""
    rows = [counts[b["batch"]] for b in sorted(batches, key=lambda b: b["batch"])]
    row: dict[str, Any] = {key: sum(r[key] for r in rows) for key in COUNTS}
    # WMO's sum(scores) / len(scores): Python's sum() of floats is compensated, as the exact
    # sum rollout_stats takes is (a left fold misses 0.1 + 0.2 + 0.3 in the last digit)
    scores = [score for r in rows for score in r["graded_scores"] or []]
    total, graded = sum(scores), len(scores)
    executed, trials, reasons = row["executed_trials"], row["trials"], row["with_stop_reason"]
    row.update(
        solve_rate=row["executed_passed"] / executed if executed else 0.0,
        graded_trials=graded,
        graded_solve_rate=total / graded if graded else 0.0,
        raw_solve_rate=row["passed_trials"] / trials if trials else 0.0,
        scaffold_loss_rate=(reasons - row["submitted"]) / reasons if reasons else 0.0,
        infra_failed_trials=trials - executed,
        empty_span_trials=trials - row["trials_with_spans"],
        truncated_spans=sum(b["truncated_spans"] for b in batches),
        unreadable_trials=sum(b["unreadable_trials"] for b in batches),
    )
    return row


@dataclass(frozen=True)
class Metric:
    """A per-batch line: its value is `column` (or numerator / denominator) when the
    denominator is not empty, else a gap."""

    key: str
    label: str
    denominator: str
    numerator: str | None = None  # a share computed here; None: the rollout_stats column itself
    percent: bool = True


METRICS: list[Metric] = [
    Metric("solve_rate", "solve rate (passed / executed)", "executed_trials"),
    Metric("graded_solve_rate", "graded solve rate (mean test score)", "graded_trials"),
    Metric("raw_solve_rate", "raw solve rate (passed / all)", "trials"),
    Metric("scaffold_loss_rate", "scaffold loss (not submitted)", "with_stop_reason"),
    Metric("infra_failed_share", "infra-failed share", "trials", "infra_failed_trials"),
    Metric("empty_span_share", "empty-span share", "trials", "empty_span_trials"),
    Metric("truncated_spans", "truncated spans", "trials", None, percent=False),
]
METRIC_BY_KEY = {m.key: m for m in METRICS}


def measured(row: dict[str, Any], key: str) -> float | int | None:
    """A batch's value of a metric, or None when its denominator is empty (a gap, never 0)."""
    metric = METRIC_BY_KEY[key]
    denominator = row[metric.denominator]
    if not denominator:
        return None
    if metric.numerator is None:
        return row[metric.key]
    return row[metric.numerator] / denominator


@dataclass
class TaskTrend:
    """One task in one series: its pass rate per column of `columns_of` (a step's batches
    pooled, or one batch; None: not executed there)."""

    series: str
    task_id: str
    pass_rates: list[float | None]
    slope: float
    mean: float | None


@dataclass
class Flip:
    """A regression (solved, then failed at every later step) or a newly solved task."""

    series: str
    task_id: str
    at: Any  # the step (or batch) of the last solve (regression) / the first solve (new)
    batches: list[str]  # the batches at `at`
    steps_failed: int  # later (regression) / earlier (new) executed steps with no pass
    pass_rate: float  # at `at`
    still_solved: bool | None = None  # newly solved: solved at the series' last executed step


@dataclass
class ReportData:
    """Everything the page shows, as plain rows (no plotting library involved)."""

    lake: str
    x_mode: str  # the shared charts' x: "step", "batch" or "mixed" (see `overall_x_mode`)
    x_modes: dict[str, str]  # run label -> its x: "step" or "batch" (see `x_mode_of`)
    batches: list[dict[str, Any]]  # rollout_stats rows + with_stop_reason, tokens, datum_*
    series: dict[str, list[dict[str, Any]]]  # run label -> its batches, in order
    points: dict[str, list[dict[str, Any]]]  # run label -> one row per x (see `point_of`)
    trends: dict[str, list[TaskTrend]]  # run label -> tasks ordered by trend
    regressions: list[Flip]
    newly_solved: list[Flip]
    problem_kinds: list[str]
    unbatched_problems: dict[str, int]  # kind -> problems of the whole lake tied to no batch
    datums_computable: bool
    datum_note: str
    settings: list[dict[str, Any]]
    settings_view: dict[str, Any]  # the `settings` view's one row, as every view read it
    caps: list[dict[str, Any]]
    datum_caps: list[dict[str, Any]]
    selection: dict[str, Any]
    # the selected batches whose harbor job has not finished
    unfinished: list[str] = field(default_factory=list)
    short: list[str] = field(default_factory=list)  # finished jobs short of their trials
    gone: list[str] = field(default_factory=list)  # holding trials whose dirs are gone
    pooled: list[str] = field(default_factory=list)  # labelled from several job dirs
    generated_at: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    version: str = __version__


def series_label(run: str | None) -> str:
    return NO_RUN if run is None else run


def x_value(row: dict[str, Any], x_mode: str) -> Any:
    return row["step"] if x_mode == "step" else row["batch"]


def columns_of(rows: list[dict[str, Any]], x_mode: str) -> list[list[dict[str, Any]]]:
    """A series' batches (in step order) grouped by x: the batches of a step together, as a
    step may hold several job dirs; each batch alone when x is the batch."""
    columns: list[list[dict[str, Any]]] = []
    for row in rows:
        if x_mode == "step" and columns and columns[-1][0]["step"] == row["step"]:
            columns[-1].append(row)
        else:
            columns.append([row])
    return columns


# The figures the charts read beside the rollout_stats rates that add up over batches.
SUMMED = ("turns", "prompt_tokens", "sampled_tokens")
DATUM_KEYS = (
    "episodes",
    "kept_episodes",
    "datums",
    "fragments",
    "overflow_drops",
    "overlong_drops",
    "loss_tokens",
    "context_tokens",
)


def _summed_maps(maps: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    for counts in maps:
        for key, n in counts.items():
            total[key] += n
    return dict(sorted(total.items()))


def point_of(column: list[dict[str, Any]], counts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One x of a series, what every per-step chart plots: a batch's row as it is, or a step's
    batches pooled as `compare` pools a step (rates from the summed counts, `pooled_counts`;
    counts, stop reasons, tokens, datum figures and problems summed; tokens and datum figures
    over the batches that have them, None when none has). `batch` is then the
    batches joined by ' + ' (the point's hover label) and `batches` lists them."""
    batches = [row["batch"] for row in column]
    if len(column) == 1:
        return {**column[0], "batches": batches}
    point: dict[str, Any] = {
        "batch": " + ".join(batches),
        "batches": batches,
        "run": column[0]["run"],
        "step": column[0]["step"],
    }
    for key in [*SUMMED, *(f"datum_{key}" for key in DATUM_KEYS)]:
        present = [row[key] for row in column if row[key] is not None]
        point[key] = sum(present) if present else None  # (None: no batch measured it)
    point.update(pooled_counts(counts, column))
    point["stop_reason_counts"] = _summed_maps([row["stop_reason_counts"] for row in column])
    point["problems"] = _summed_maps([row["problems"] for row in column])
    return point


def _by_batch(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {row["batch"]: row for row in rows}


def _slope(lines: list[list[tuple[float, float]]]) -> float:
    """Least-squares slope of pass rate over step, within each time line (each about its own
    means: trees of different levels add no trend); 0.0 with no two steps in one line."""
    spread = moved = 0.0
    for points in lines:
        if len(points) < 2:
            continue
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        spread += sum((x - mean_x) ** 2 for x, _ in points)
        moved += sum((x - mean_x) * (y - mean_y) for x, y in points)
    return moved / spread if spread else 0.0


def time_lines(rows: list[dict[str, Any]]) -> list[list[list[dict[str, Any]]]]:
    """A series' batches as the time lines its trends and flips are read along: the batches
    with a step, grouped by step (a step of two job dirs is one point), in step order; one line
    per tree for the batches of no run (`tree_of`: unrelated experiments' steps follow no one
    order), one for a run. A batch without a step is no point in time: `r/harbor/rerun` is not
    later than `r`'s steps, nor is `expB/step-0001` than `expA/step-0002`."""
    lines: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for row in rows:
        if row["step"] is not None:
            tree = tree_of(row["batch"]) if row["run"] is None else ""
            lines.setdefault(tree, {}).setdefault(row["step"], []).append(row)
    return [[steps[step] for step in sorted(steps)] for steps in lines.values()]


def _flip(
    series: str,
    task: str,
    x_mode: str,
    point: tuple[list[dict[str, Any]], float],
    steps_failed: int,
    still_solved: bool | None = None,
) -> Flip:
    """The Flip at `point` (a step's batches, the task's pass rate there)."""
    batches, rate = point
    # (by batch, the step's batches: the rate is theirs pooled, not the first one's)
    labels = [r["batch"] for r in batches]
    at = x_value(batches[0], x_mode) if x_mode == "step" else " + ".join(labels)
    return Flip(series, task, at, labels, steps_failed, rate, still_solved)


def task_trends(
    series: dict[str, list[dict[str, Any]]],
    task_cells: list[dict[str, Any]],
) -> tuple[dict[str, list[TaskTrend]], list[Flip], list[Flip]]:
    """Per series: every task's pass rate per step (its batches pooled: passed / executed
    trials of them all) or per batch (a series with a batch without a step), ordered by trend
    (most improved first), and the regressions and newly solved tasks, read along the series'
    time lines (`time_lines`). A task is solved at a step when one of its executed trials
    passed, failed when it was executed and none passed."""
    cells: dict[tuple[str, str], dict[str, Any]] = {
        (c["batch"], c["task_id"]): c for c in task_cells
    }
    tasks_by_batch: dict[str, set[str]] = defaultdict(set)
    for batch, task in cells:
        tasks_by_batch[batch].add(task)

    def pass_rate(batches: list[dict[str, Any]], task: str) -> float | None:
        held = [cells[r["batch"], task] for r in batches if (r["batch"], task) in cells]
        n_executed = sum(cell["executed"] for cell in held)
        return sum(cell["passed"] for cell in held) / n_executed if n_executed else None

    trends: dict[str, list[TaskTrend]] = {}
    regressions: list[Flip] = []
    newly_solved: list[Flip] = []
    for label, rows in series.items():
        tasks = sorted(set().union(*(tasks_by_batch[r["batch"]] for r in rows)))
        x_mode = x_mode_of(rows)
        columns = columns_of(rows, x_mode)
        lines = time_lines(rows)
        found: list[TaskTrend] = []
        for task in tasks:
            rates = [pass_rate(column, task) for column in columns]
            measured = [rate for rate in rates if rate is not None]
            mean = sum(measured) / len(measured) if measured else None
            along: list[list[tuple[float, float]]] = []
            for line in lines:
                # (the executed steps of this line: (step's batches, pass rate))
                executed = [(p, r) for p in line if (r := pass_rate(p, task)) is not None]
                along.append([(float(p[0]["step"]), r) for p, r in executed])
                solved = [i for i, (_, r) in enumerate(executed) if r > 0]
                if not solved:
                    continue
                step = (label, task, x_mode)
                if solved[-1] < len(executed) - 1:  # executed after its last solve
                    after = len(executed) - 1 - solved[-1]
                    regressions.append(_flip(*step, executed[solved[-1]], after))
                if solved[0] > 0:  # executed before its first solve
                    still = executed[-1][1] > 0
                    newly_solved.append(_flip(*step, executed[solved[0]], solved[0], still))
            found.append(TaskTrend(label, task, rates, _slope(along), mean))
        found.sort(key=lambda t: (-t.slope, -(t.mean or 0.0), t.task_id))
        trends[label] = found
    return trends, regressions, newly_solved


def settings_rows(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Each query-time setting: the value given, or its default as the lake documents it."""
    rows = []
    for setting in SETTINGS.values():
        given = settings.get(setting.variable)
        rows.append(
            {
                "variable": setting.variable,
                "value": given if given is not None else setting.default_text(),
                "given": given is not None,
                "meaning": setting.help,
            }
        )
    return rows


def collect_report(
    lake: Path | str,
    settings: dict[str, Any] | None = None,
    *,
    runs: list[str] | None = None,
    batch_glob: str | None = None,
) -> ReportData:
    """Query the lake for the selected batches (every batch when no run or glob is given)."""
    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    con = connect(lake, settings, check=False)  # (the key is checked on the reported trials)
    try:
        con.execute("SET enable_progress_bar = false")  # the command prints one summary line
        data = _collect(con, str(lake), settings, runs or None, batch_glob)
        warn_on_unused_reward_key(con, batches=[row["batch"] for row in data.batches])
        for message, category in job_warnings(data.unfinished, data.short, data.gone):
            warn_from_caller(message, category)
        if data.pooled:
            warn_from_caller(pooled_warning(data.pooled), PooledBatchWarning)
        return data
    finally:
        con.close()


def _collect(
    con: duckdb.DuckDBPyConnection,
    lake: str,
    settings: dict[str, Any],
    runs: list[str] | None,
    batch_glob: str | None,
) -> ReportData:
    stats = rows_as_dicts(
        con.sql(SELECTED_STATS, params={"runs": runs, "batch_glob": batch_glob, "no_run": NO_RUN})
    )
    batches = [row["batch"] for row in stats]
    params = {"batches": batches}
    jobs = job_rows(con, batches=batches)
    incomplete = incomplete_jobs(jobs)
    denominators = _by_batch(rows_as_dicts(con.sql(STOP_REASON_DENOMINATOR, params=params)))
    tokens = _by_batch(rows_as_dicts(con.sql(TOKENS, params=params)))
    datum_note = ""
    try:
        datum_rows = _by_batch(rows_as_dicts(con.sql(DATUM_STATS, params=params)))
        datum_caps = rows_as_dicts(con.sql(DATUM_CAPS, params=params))
    except duckdb.Error as error:  # datums need spans; say why instead of failing the page
        datum_rows, datum_caps = {}, []
        datum_note = f"datum_stats could not be computed: {error}"
    problem_rows = rows_as_dicts(con.sql(PROBLEMS, params=params))
    problems: dict[str, dict[str, int]] = defaultdict(dict)
    for p in problem_rows:
        problems[p["batch"]][p["kind"]] = p["n"]
    for row in stats:
        batch = row["batch"]
        row["with_stop_reason"] = denominators.get(batch, {}).get("with_stop_reason", 0)
        # None, not 0, for a batch without spans: its tokens were not measured (a gap)
        token_row = tokens.get(batch, {})
        row["turns"] = token_row.get("turns")
        row["prompt_tokens"] = token_row.get("prompt_tokens")
        row["sampled_tokens"] = token_row.get("sampled_tokens")
        datum = datum_rows.get(batch)
        for key in DATUM_KEYS:
            row[f"datum_{key}"] = None if datum is None else datum[key]
        row["problems"] = problems.get(batch, {})
    datums_computable = any(row["trials_with_spans"] for row in stats) and bool(datum_rows)
    if not datum_note and not datums_computable:
        datum_note = "no selected batch recorded token spans, so no datums can be built"
    series = series_of(stats)
    x_modes = {label: x_mode_of(rows) for label, rows in series.items()}
    columns = {label: columns_of(rows, x_modes[label]) for label, rows in series.items()}
    # only a step of several batches is pooled (one batch's point is its row as it is)
    counts = shared_step_counts(con, columns.values())
    points = {label: [point_of(c, counts) for c in cs] for label, cs in columns.items()}
    task_cells = rows_as_dicts(con.sql(TASK_CELLS, params={**params, "no_task": NO_TASK}))
    trends, regressions, newly_solved = task_trends(series, task_cells)
    # the lake's, whatever the selection: tied to no batch, no --run or --batch can narrow them
    unbatched = {r["kind"]: r["n"] for r in rows_as_dicts(con.sql(UNBATCHED_PROBLEMS))}
    return ReportData(
        lake=lake,
        x_mode=overall_x_mode(x_modes),
        x_modes=x_modes,
        batches=stats,
        series=series,
        points=points,
        trends=trends,
        regressions=regressions,
        newly_solved=newly_solved,
        problem_kinds=sorted({p["kind"] for p in problem_rows}),
        unbatched_problems=unbatched,
        datums_computable=datums_computable,
        datum_note=datum_note,
        settings=settings_rows(settings),
        settings_view=rows_as_dicts(con.sql("SELECT * FROM settings"))[0],
        caps=rows_as_dicts(con.sql(CAPS, params=params)),
        datum_caps=datum_caps,
        selection={"runs": runs, "batch_glob": batch_glob},
        unfinished=[found.batch for found in incomplete.unfinished],
        short=list(dict.fromkeys(found.batch for found in incomplete.short if not found.gone)),
        gone=list(dict.fromkeys(found.batch for found in incomplete.short if found.gone)),
        pooled=pooled_batches(jobs),
    )


def x_mode_of(rows: list[dict[str, Any]]) -> str:
    """A series' x: 'step' when every batch of it has a step, else 'batch' (its batches as
    categories). Asked per run, so a batch without a step changes only its own run's x. The
    batches of no run (job dirs under no `<run>/harbor/`) are stepped only when they come from
    one tree (`tree_of`): the step dirs of unrelated trees were pooled into one point."""
    if not rows or any(row["step"] is None for row in rows):
        return "batch"
    if rows[0]["run"] is None and len({tree_of(row["batch"]) for row in rows}) > 1:
        return "batch"
    return "step"


def tree_of(batch: str) -> str:
    """The part of a batch label before its step dir, the one its step is read from (`expA` of
    `expA/step-0001/job`)."""
    from wmo_lake.discover import is_step_dir

    parts = batch.split("/")
    for index in range(len(parts) - 1, -1, -1):
        if is_step_dir(parts[index]):
            return "/".join(parts[:index])
    return batch


def overall_x_mode(x_modes: dict[str, str]) -> str:
    """The x of a chart the runs share: theirs when they agree, else 'mixed' (categories:
    'step N' of the stepped runs beside the other runs' batches)."""
    modes = set(x_modes.values())
    return modes.pop() if len(modes) == 1 else "mixed"


def batch_labels(batches: list[str]) -> list[str]:
    """Each batch's shortest trailing path part that no other of `batches` ends with: column
    headings that stay distinct ('job' alone would name every step's job dir alike)."""
    parts = [batch.split("/") for batch in batches]
    labels = []
    for own in parts:
        for n in range(1, len(own) + 1):
            label = "/".join(own[-n:])
            if sum("/".join(other[-n:]) == label for other in parts) == 1:
                break
        labels.append(label)
    return labels


def series_of(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Run label -> its rows in order; the batches of no run tree by tree (`tree_of`), each
    tree's in step order, so their line goes through one tree's steps before the next's."""
    series: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        series[series_label(row["run"])].append(row)
    if NO_RUN in series:
        series[NO_RUN].sort(key=lambda row: tree_of(row["batch"]))  # (stable: steps in order)
    return dict(series)


def stats_details(
    lake: Path | str,
    settings: dict[str, Any] | None,
    rows: list[dict[str, Any]],
    *,
    with_tasks: bool,
) -> tuple[dict[str, int], dict[str, list[TaskTrend]], dict[str, dict[str, Any]]]:
    """For `wmo-lake stats`: each batch's trials with a stop reason (scaffold loss's
    denominator); with_tasks, each run's tasks with their pass rate per step; and the
    BATCH_COUNTS rows of the batches that share a step, which its sparklines pool."""
    settings = {k: v for k, v in (settings or {}).items() if v is not None}
    con = connect(lake, settings, check=False)  # (stats has checked the key: warned once)
    try:
        params = {"batches": [row["batch"] for row in rows]}
        denominators = {
            r["batch"]: r["with_stop_reason"]
            for r in rows_as_dicts(con.sql(STOP_REASON_DENOMINATOR, params=params))
        }
        trends: dict[str, list[TaskTrend]] = {}
        if with_tasks:
            task_cells = rows_as_dicts(con.sql(TASK_CELLS, params={**params, "no_task": NO_TASK}))
            trends = task_trends(series_of(rows), task_cells)[0]
        columns = [columns_of(series, x_mode_of(series)) for series in series_of(rows).values()]
        return denominators, trends, shared_step_counts(con, columns)
    finally:
        con.close()
