"""Two selections of batches side by side: `wmo-lake compare A B`.

A side is a run (when its text names one) or a batch glob. Its metrics are the rollout_stats
rules applied to the side's trials pooled (`trial_records`, plus the additive rollout_stats
counts: truncated spans, unreadable trials); a side of one batch gives exactly that batch's
rollout_stats row. A rate whose denominator is empty is None (no measurement), never 0.

A task is *solved* on a side when one of its executed trials there passed, *failed* when it was
executed there and none passed (the same reading as the report's regressions); it *flipped* when
it is solved on one side and failed on the other. Tasks one side never executed are counted, not
listed as flips.

    result = compare(Path("lake"), "exp1", "exp2", {})
    result["metrics"][0]   # {"metric": "solve_rate", "a": 0.41, "b": 0.52, "delta": 0.11}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from wmo_lake.lake import connect
from wmo_lake.output import rows_as_dicts
from wmo_lake.report.data import METRICS, measured

RUNS = "SELECT DISTINCT run FROM trials WHERE run IS NOT NULL"

SIDE_BATCHES = """
SELECT batch, run, step, truncated_spans, unreadable_trials
FROM rollout_stats
WHERE ($run IS NOT NULL AND run = $run) OR ($run IS NULL AND batch GLOB $batch_glob)
ORDER BY run NULLS LAST, step NULLS LAST, batch
"""

# The rollout_stats rules over a side's trials pooled (see sql/rollout_stats.sql for each rule).
POOLED = """
SELECT
    count(*) AS trials,
    count(*) FILTER (WHERE n_spans > 0) AS trials_with_spans,
    count(*) FILTER (WHERE NOT infra_failed) AS executed_trials,
    count(*) FILTER (WHERE NOT infra_failed AND passed) AS executed_passed,
    count(*) FILTER (WHERE passed) AS passed_trials,
    list(graded_score ORDER BY batch, task_id, attempt)
        FILTER (WHERE NOT infra_failed AND graded_score IS NOT NULL) AS graded_scores,
    count(*) FILTER (WHERE coalesce(stop_reason, '') <> '') AS with_stop_reason,
    count(*) FILTER (WHERE stop_reason = 'submitted') AS submitted
FROM trial_records
WHERE list_contains($batches, batch)
"""

TASKS = """
SELECT
    task_id,
    count(*) FILTER (WHERE NOT infra_failed) AS executed,
    count(*) FILTER (WHERE NOT infra_failed AND passed) AS passed
FROM cells
WHERE list_contains($batches, batch)
GROUP BY task_id
"""


class CompareError(ValueError):
    """A side names no run and matches no batch; the message lists the runs."""


@dataclass
class Side:
    text: str
    kind: str  # "run" or "batches"
    batches: list[dict[str, Any]]
    metrics: dict[str, Any]
    tasks: dict[str, dict[str, int]]

    def summary(self) -> dict[str, Any]:
        return {
            "selection": self.text,
            "kind": self.kind,
            "batches": len(self.batches),
            "trials": self.metrics["trials"],
        }


def _pooled(con: duckdb.DuckDBPyConnection, batches: list[dict[str, Any]]) -> dict[str, Any]:
    names = [b["batch"] for b in batches]
    [row] = rows_as_dicts(con.sql(POOLED, params={"batches": names}))
    scores = row.pop("graded_scores") or []
    total = 0.0
    for score in scores:  # left to right, as rollout_stats and Python's sum() add them
        total += score
    executed, trials, reasons = row["executed_trials"], row["trials"], row["with_stop_reason"]
    row.update(
        solve_rate=row["executed_passed"] / executed if executed else 0.0,
        graded_trials=len(scores),
        graded_solve_rate=total / len(scores) if scores else 0.0,
        raw_solve_rate=row["passed_trials"] / trials if trials else 0.0,
        scaffold_loss_rate=(reasons - row["submitted"]) / reasons if reasons else 0.0,
        infra_failed_trials=trials - executed,
        empty_span_trials=trials - row["trials_with_spans"],
        truncated_spans=sum(b["truncated_spans"] for b in batches),
        unreadable_trials=sum(b["unreadable_trials"] for b in batches),
    )
    return row


def resolve(con: duckdb.DuckDBPyConnection, text: str) -> Side:
    """A run when `text` names one, else a batch glob; CompareError when it selects nothing."""
    runs = sorted(r for (r,) in con.sql(RUNS).fetchall())
    is_run = text in runs
    batches = rows_as_dicts(
        con.sql(
            SIDE_BATCHES,
            params={"run": text if is_run else None, "batch_glob": None if is_run else text},
        )
    )
    if not batches:
        raise CompareError(
            f"{text!r} is neither a run nor a glob matching a batch "
            f"(runs: {', '.join(runs) or 'none'}; globs like 'exp1/harbor/step-0007/*')"
        )
    metrics = _pooled(con, batches)
    tasks = {
        t["task_id"]: {"executed": t["executed"], "passed": t["passed"]}
        for t in rows_as_dicts(con.sql(TASKS, params={"batches": [b["batch"] for b in batches]}))
    }
    return Side(text, "run" if is_run else "batches", batches, metrics, tasks)


def _rate(task: dict[str, int]) -> float:
    return task["passed"] / task["executed"]


def flips(a: Side, b: Side) -> dict[str, Any]:
    """Tasks solved on one side and failed on the other, and tasks only one side executed."""
    to_pass, to_fail = [], []
    executed_a = {t for t, v in a.tasks.items() if v["executed"]}
    executed_b = {t for t, v in b.tasks.items() if v["executed"]}
    for task in sorted(executed_a & executed_b):
        ta, tb = a.tasks[task], b.tasks[task]
        entry = {"task_id": task, "a_pass_rate": _rate(ta), "b_pass_rate": _rate(tb)}
        if ta["passed"] == 0 and tb["passed"] > 0:
            to_pass.append(entry)
        elif ta["passed"] > 0 and tb["passed"] == 0:
            to_fail.append(entry)
    return {
        "fail_to_pass": to_pass,
        "pass_to_fail": to_fail,
        "only_in_a": sorted(executed_a - executed_b),
        "only_in_b": sorted(executed_b - executed_a),
    }


def _steps(a: Side, b: Side) -> list[dict[str, Any]]:
    """Two runs: their solve rates step by step (None where a step is missing or unmeasured)."""
    con_rows = {"a": a.batches, "b": b.batches}
    by_step: dict[int, dict[str, Any]] = {}
    for side, rows in con_rows.items():
        for row in rows:
            if row["step"] is not None:
                by_step.setdefault(row["step"], {"step": row["step"]})[side] = row["batch"]
    return [by_step[s] for s in sorted(by_step)]


def compare(
    lake: Path | str, a_text: str, b_text: str, settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The comparison as plain data (what `--json` prints)."""
    con = connect(lake, settings)
    try:
        a, b = resolve(con, a_text), resolve(con, b_text)
        steps: list[dict[str, Any]] = []
        if a.kind == b.kind == "run":
            stats = {
                r["batch"]: r
                for r in rows_as_dicts(
                    con.sql(
                        "SELECT * FROM rollout_stats WHERE run = $a OR run = $b",
                        params={"a": a_text, "b": b_text},
                    )
                )
            }
            denominators = dict(
                con.sql(
                    "SELECT batch, count(*) FILTER (WHERE coalesce(stop_reason, '') <> '') "
                    "FROM trial_stop_reasons GROUP BY batch"
                ).fetchall()
            )
            for row in _steps(a, b):
                for side in ("a", "b"):
                    batch = row.get(side)
                    stat = stats.get(batch) if batch else None
                    if stat is not None:
                        stat["with_stop_reason"] = denominators.get(batch, 0)
                    row[f"solve_rate_{side}"] = measured(stat, "solve_rate") if stat else None
                row["solve_rate_delta"] = _delta(row["solve_rate_a"], row["solve_rate_b"])
                steps.append(row)
    finally:
        con.close()
    metrics = []
    for metric in METRICS:
        va, vb = measured(a.metrics, metric.key), measured(b.metrics, metric.key)
        metrics.append(
            {"metric": metric.key, "label": metric.label, "a": va, "b": vb, "delta": _delta(va, vb)}
        )
    return {
        "a": a.summary(),
        "b": b.summary(),
        "metrics": metrics,
        "flipped": flips(a, b),
        "steps": steps,
    }


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a
