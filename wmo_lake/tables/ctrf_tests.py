"""`tests`: one row per CTRF test in `verifier/ctrf.json`; the report's summary goes on `trials`.

Extraction keeps what the report says, typed: the graded-tests rule (summary vs itemized reading)
is SQL, in `cells.sql`. Counts are kept only when they are non-negative JSON integers;
`ctrf_summary_valid` says whether every summary count was one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from wmo_lake.jsonfile import ReadFailure, read_json
from wmo_lake.tables.fields import ProblemLog

SCHEMA = pa.schema(
    [
        ("trial_key", pa.string()),
        ("batch", pa.string()),
        ("trial_name", pa.string()),
        ("test_index", pa.int32()),
        ("name", pa.string()),
        ("status", pa.string()),
        ("duration", pa.float64()),
    ]
)

SUMMARY_COUNTS = ("passed", "failed", "skipped", "pending", "other")

# The per-trial summary columns this module contributes to `trials`.
TRIAL_COLUMNS = [
    ("ctrf_status", pa.string()),
    ("ctrf_summary_present", pa.bool_()),
    ("ctrf_summary_valid", pa.bool_()),
    *[(f"ctrf_{name}", pa.int64()) for name in SUMMARY_COUNTS],
    ("ctrf_n_tests", pa.int32()),
]


@dataclass
class Report:
    """A trial's CTRF report, as typed facts."""

    status: str = "absent"  # ok | absent | unreadable | not_ctrf
    summary_present: bool | None = None
    summary_valid: bool | None = None
    counts: dict[str, int | None] = field(default_factory=dict)
    tests: list[dict[str, Any]] | None = None

    def trial_columns(self) -> dict[str, Any]:
        return {
            "ctrf_status": self.status,
            "ctrf_summary_present": self.summary_present,
            "ctrf_summary_valid": self.summary_valid,
            **{f"ctrf_{name}": self.counts.get(name) for name in SUMMARY_COUNTS},
            "ctrf_n_tests": None if self.tests is None else len(self.tests),
        }


def _count(value: Any) -> int | None:
    if type(value) is int and 0 <= value < 2**63:
        return value
    return None


def read_report(trial_dir: Path, problems: ProblemLog) -> Report:
    path = trial_dir / "verifier" / "ctrf.json"
    doc = read_json(path)
    if doc is None:
        return Report()
    if isinstance(doc, ReadFailure):
        problems.add(doc.kind, path, doc.message + "; the trial has no graded tests")
        return Report(status="unreadable")
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, dict):
        problems.add(
            "not_ctrf",
            path,
            f"{path} is not a CTRF report (expected an object with a `results` object); "
            "the trial has no graded tests",
        )
        return Report(status="not_ctrf")
    report = Report(status="ok")
    summary = results.get("summary")
    if isinstance(summary, dict):
        report.summary_present = (
            summary.get("passed") is not None and summary.get("failed") is not None
        )
        if report.summary_present:
            # A null optional count reads as 0 (absent); any other non-count spoils the summary.
            report.counts = {name: _count(summary.get(name)) for name in SUMMARY_COUNTS}
            report.summary_valid = all(
                report.counts[name] is not None or summary.get(name) is None
                for name in SUMMARY_COUNTS
            )
            if not report.summary_valid:
                problems.add(
                    "wrong_type",
                    path,
                    f"{path.name}: results.summary counts must be non-negative integers, got "
                    f"{ {k: summary.get(k) for k in SUMMARY_COUNTS if k in summary} }; "
                    "the report grades nothing",
                )
    else:
        report.summary_present = False
    tests = results.get("tests")
    if isinstance(tests, list):
        report.tests = tests
    elif tests is not None:
        problems.add("wrong_type", path, f"{path.name}: results.tests is not an array; ignored")
    return report


def table(report: Report, trial_key: str, batch: str, trial_name: str) -> pa.Table:
    items = report.tests or []
    names, statuses, durations = [], [], []
    for item in items:
        item = item if isinstance(item, dict) else {}
        name, status, duration = item.get("name"), item.get("status"), item.get("duration")
        names.append(name if isinstance(name, str) else None)
        statuses.append(status if isinstance(status, str) else None)
        durations.append(
            float(duration)
            if isinstance(duration, int | float) and not isinstance(duration, bool)
            else None
        )
    n = len(items)
    return pa.table(
        {
            "trial_key": [trial_key] * n,
            "batch": [batch] * n,
            "trial_name": [trial_name] * n,
            "test_index": list(range(n)),
            "name": names,
            "status": statuses,
            "duration": durations,
        },
        schema=SCHEMA,
    )
