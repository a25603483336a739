"""Two selections of batches side by side: `wmo-lake compare A B`.

A side is a run (when its text names one) or a batch glob. Its metrics are the rollout_stats
rules applied to the side's trials pooled (`trial_records`, plus the additive rollout_stats
counts: truncated spans, unreadable trials); a side of one batch gives exactly that batch's
rollout_stats row. Two runs are also compared step by step, each side's batches at a step (a
step may hold several job dirs) pooled the same way, unless a side is the batches outside any
run from several trees (one tree's step 1 is not another's: the report draws them batch by
batch). A rate whose denominator is empty is None
(no measurement), never 0.

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

from wmo_lake.checks import runs_held, warn_on_unused_reward_key
from wmo_lake.incomplete_jobs import warn_on_incomplete_jobs, warn_on_pooled_batches
from wmo_lake.lake import connect
from wmo_lake.output import rows_as_dicts
from wmo_lake.report.data import (
    METRICS,
    NO_TASK,
    batch_counts,
    measured,
    pooled_counts,
    tree_of,
)
from wmo_lake.selection import scope_sql
from wmo_lake.terminal import printable

SIDE_BATCHES = f"""
SELECT batch, run, step, truncated_spans, unreadable_trials
FROM rollout_stats
WHERE {scope_sql()}
ORDER BY run NULLS LAST, step NULLS LAST, batch
"""

TASKS = """
SELECT
    coalesce(task_id, $no_task) AS task_id,
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
    counts: dict[str, dict[str, Any]]  # batch -> its BATCH_COUNTS row (none: no trials)
    metrics: dict[str, Any]
    tasks: dict[str, dict[str, int]]
    # the trees of a side of batches outside any run, when its step dirs come from several (no
    # step-by-step rows then: `expA/step-0001` and `expB/step-0001` are not one step)
    trees: list[str]

    def summary(self) -> dict[str, Any]:
        return {
            "selection": self.text,
            "kind": self.kind,
            "batches": len(self.batches),
            "trials": self.metrics["trials"],
            "unreadable_trials": self.metrics["unreadable_trials"],
            # in the side's figures, but in no row of the step-by-step table
            "batches_without_step": sum(1 for batch in self.batches if batch["step"] is None),
            "trees": self.trees,
        }


def resolve(con: duckdb.DuckDBPyConnection, text: str) -> Side:
    """A run when `text` names one, else a batch glob; CompareError when it selects nothing."""
    runs = runs_held(con)  # (a run of only empty or unreadable batches is a run here too)
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
            f"(runs: {printable(', '.join(runs)) or 'none'}; globs like 'exp1/harbor/step-0007/*')"
        )
    params = {"batches": [b["batch"] for b in batches]}
    counts = batch_counts(con, params["batches"])
    tasks = {
        t["task_id"]: {"executed": t["executed"], "passed": t["passed"]}
        for t in rows_as_dicts(con.sql(TASKS, params={**params, "no_task": NO_TASK}))
    }
    kind = "run" if is_run else "batches"
    trees = sorted(
        {tree_of(b["batch"]) for b in batches if b["run"] is None and b["step"] is not None}
    )
    return Side(
        text,
        kind,
        batches,
        counts,
        pooled_counts(counts, batches),
        tasks,
        trees if is_run and len(trees) > 1 else [],  # (a glob side has no step rows anyway)
    )


def _rate(task: dict[str, int]) -> float:
    return task["passed"] / task["executed"]


def flips(a: Side, b: Side) -> dict[str, Any]:
    """Tasks solved on one side and failed on the other, and tasks only one side executed."""
    to_pass, to_fail = [], []
    executed_a = {t for t, v in a.tasks.items() if v["executed"]}
    executed_b = {t for t, v in b.tasks.items() if v["executed"]}
    for task in sorted(executed_a & executed_b):
        ta, tb = a.tasks[task], b.tasks[task]
        entry = {
            "task_id": task,
            "a_pass_rate": _rate(ta),
            "b_pass_rate": _rate(tb),
            "a_passed": ta["passed"],
            "a_executed": ta["executed"],
            "b_passed": tb["passed"],
            "b_executed": tb["executed"],
        }
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
    """Two runs: their solve rates step by step, each side's batches of a step pooled as a
    side's are (None where a side has no batch at the step, or none executed)."""
    by_step: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for name, side in (("a", a), ("b", b)):
        for batch in side.batches:
            if batch["step"] is not None:
                by_step.setdefault(batch["step"], {"a": [], "b": []})[name].append(batch)
    steps = []
    for step in sorted(by_step):
        row: dict[str, Any] = {"step": step}
        row.update((name, [batch["batch"] for batch in by_step[step][name]]) for name in "ab")
        for name, side in (("a", a), ("b", b)):
            batches = by_step[step][name]
            pooled = pooled_counts(side.counts, batches) if batches else None
            row[f"solve_rate_{name}"] = measured(pooled, "solve_rate") if pooled else None
        row["solve_rate_delta"] = _delta(row["solve_rate_a"], row["solve_rate_b"])
        steps.append(row)
    return steps


def compare(
    lake: Path | str, a_text: str, b_text: str, settings: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The comparison as plain data (what `--json` prints)."""
    con = connect(lake, settings, check=False)  # (the key is checked on the compared trials)
    try:
        a, b = resolve(con, a_text), resolve(con, b_text)
        compared = [batch["batch"] for side in (a, b) for batch in side.batches]
        warn_on_unused_reward_key(con, batches=compared)
        warn_on_incomplete_jobs(con, batches=compared)
        warn_on_pooled_batches(con, compared)
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
        "steps": _steps(a, b) if a.kind == b.kind == "run" and not (a.trees or b.trees) else [],
    }


def _delta(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else b - a
