"""`tests`: one row per CTRF test in `verifier/ctrf.json`; the report's summary goes on `trials`.

The report is validated the way upstream's `ctrf.py` model does it (`wmo_lake/ctrf.py`): a report
that model rejects is `not_ctrf` and grades nothing (no partial grading), and counts are kept as
that model coerces them (`2.0` and `"2"` are 2). The graded-tests rule (summary vs itemized
reading) is SQL, in `cells.sql`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wmo_lake.columns import SPECS, arrow_schema
from wmo_lake.ctrf import SUMMARY_COUNTS, read_ctrf
from wmo_lake.pending import PendingRows
from wmo_lake.tables.fields import ProblemLog, fits_double

SCHEMA = arrow_schema(SPECS["tests"])


@dataclass
class Report:
    """A trial's CTRF report, as typed facts."""

    status: str = "absent"  # ok | absent | unreadable | not_ctrf
    summary_present: bool | None = None
    summary_valid: bool | None = None
    counts: dict[str, int | None] = field(default_factory=dict)
    tests: list[dict[str, Any]] | None = None
    statuses: list[str] = field(default_factory=list)

    def trial_columns(self) -> dict[str, Any]:
        return {
            "ctrf_status": self.status,
            "ctrf_summary_present": self.summary_present,
            "ctrf_summary_valid": self.summary_valid,
            **{f"ctrf_{name}": self.counts.get(name) for name in SUMMARY_COUNTS},
            "ctrf_n_tests": None if self.tests is None else len(self.tests),
        }


def read_report(trial_dir: Path | str, problems: ProblemLog) -> Report:
    path = f"{trial_dir}/verifier/ctrf.json"
    ctrf = read_ctrf(path)
    if ctrf.status != "ok":
        if ctrf.problem is not None:
            problems.add(ctrf.problem_kind or ctrf.status, path, ctrf.problem)
        return Report(status=ctrf.status)
    if ctrf.problem is not None:  # (an `ok` report's summary left out: `ctrf._storable`)
        problems.add(ctrf.problem_kind or "out_of_range", path, ctrf.problem)
    report = Report(status="ok", tests=ctrf.items, statuses=ctrf.statuses)
    report.summary_present = ctrf.summary is not None and all(
        ctrf.summary[name] is not None for name in ("passed", "failed")
    )
    if ctrf.summary is not None:  # the model accepted it (a rejected one is `not_ctrf`)
        report.summary_valid = True
        report.counts = dict(ctrf.summary)
    return report


def table(report: Report, trial_key: str, batch: str, trial_name: str) -> PendingRows:
    statuses = report.statuses
    n = len(statuses)
    items = report.tests if report.tests is not None and len(report.tests) == n else [{}] * n
    names, durations = [], []
    for item in items:
        item = item if isinstance(item, dict) else {}
        name, duration = item.get("name"), item.get("duration")
        names.append(name if isinstance(name, str) else None)
        durations.append(
            float(duration)
            if isinstance(duration, int | float)
            and not isinstance(duration, bool)
            and fits_double(duration)
            else None
        )
    return PendingRows(
        {
            "trial_key": [trial_key] * n,
            "batch": [batch] * n,
            "trial_name": [trial_name] * n,
            "test_index": list(range(n)),
            "name": names,
            "status": list(statuses),
            "duration": durations,
        },
        n,
    )
