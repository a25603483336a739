"""A CTRF report (`verifier/ctrf.json`) read exactly the way upstream's `ctrf.py` validates it.

Upstream validates the report with a pydantic model (`results` required; `summary` an object or
null; counts `passed` / `failed` optional, `skipped` / `pending` / `other` defaulting to 0, all
>= 0; `tests` a list of objects whose `status` is a string, "" when absent) and grades nothing
when that model rejects it. Pydantic's lax mode coerces counts (`2.0`, `"2"`, `true`, even
`"2_0"`), so the only exact reading of "where that model accepts" is that model itself. It costs a
~0.3 s import, though, and almost every report harbor writes is plain: integer counts, string
statuses. So a plain report is read here directly (a shape on which the model's result is
obviously the same), and anything else goes through the model (`_validated`), which decides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from wmo_lake.columns import DEFAULTED_COUNTS, OPTIONAL_COUNTS, SUMMARY_COUNTS
from wmo_lake.jsonfile import (
    SURROGATE_ESCAPE,
    ReadFailure,
    check_text,
    decode,
    read_bytes,
    why_invalid,
)

INT64_MAX = 2**63 - 1
# Upstream's JSON parser (pydantic's jiter) rejects lone surrogate escapes and nesting deeper
# than ~200 levels, which json accepts: such texts (`SURROGATE_ESCAPE`) take the model's path.
_PLAIN_DEPTH = 32
_DECODER = msgspec.json.Decoder()
NO_GRADE = "; the trial has no graded tests (a report is graded whole or not at all)"


@dataclass
class CtrfReport:
    """What a report says, after upstream's validation.

    status: `ok` (the model accepts it), `absent`, `unreadable` (cannot be read as UTF-8 JSON)
    or `not_ctrf` (the model rejects its shape: `problem` says where). Only an `ok` report grades.
    """

    status: str = "absent"
    problem_kind: str | None = None  # the `problems` kind, when there is a problem
    problem: str | None = None
    summary: dict[str, int | None] | None = None  # the validated counts, when a summary object
    statuses: list[str] = field(default_factory=list)  # results.tests[].status, "" when absent
    items: list[Any] = field(default_factory=list)  # the raw test items, for names / durations


def read_ctrf(path: Path | str) -> CtrfReport:
    data = read_bytes(path)
    if data is None:
        return CtrfReport()
    if isinstance(data, ReadFailure):
        return CtrfReport("unreadable", data.kind, data.message + NO_GRADE)
    failure = check_text(data, path)
    if failure is not None:
        return CtrfReport("unreadable", failure.kind, failure.message + NO_GRADE)
    plain = _plain(data)
    return _storable(plain if plain is not None else _validated(data, path), path)


def _storable(report: CtrfReport, path: Path | str) -> CtrfReport:
    """`report` with the counts the lake cannot hold (past 64 bits) left out. A skipped, pending
    or other count grades nothing: it is stored as null, so the unresolved tests (a sum past 64
    bits anyway) are null and the summary still grades. A passed or failed count leaves the
    whole summary out: upstream grades such a report from its items when they resolve anything
    (its summary reading disagrees with them, so the items win), which is what leaving the
    summary out does here; from the summary alone otherwise, which no 64-bit column can hold:
    that report grades nothing here. (Counts that fit but whose sums do not are kept: `cells`
    sums them exactly.)"""
    summary = report.summary
    if report.status != "ok" or summary is None:
        return report
    too_big = [(name, value) for name, value in summary.items() if (value or 0) > INT64_MAX]
    if not too_big:
        return report
    name, value = too_big[0]
    report.problem_kind = "out_of_range"
    if all(each in DEFAULTED_COUNTS for each, _ in too_big):
        for each, _ in too_big:
            summary[each] = None
        report.problem = (
            f"{path}: results.summary.{name} is {value}, more than a 64-bit count holds; it is "
            "left out (null), so the trial's tests_unresolved is null; the summary still grades"
        )
        return report
    report.summary = None
    report.problem = (
        f"{path}: results.summary.{name} is {value}, more than a 64-bit count holds; the summary "
        "is left out, so the report grades from its itemized tests (upstream prefers them to a "
        "summary that disagrees, as this one must), or not at all when none resolves"
    )
    return report


def _plain(data: bytes) -> CtrfReport | None:
    """The report when it has the plain shape, else None (let the model decide)."""
    if data[:3] == b"\xef\xbb\xbf" or (b"\\u" in data and SURROGATE_ESCAPE.search(data)):
        return None
    try:
        doc = _DECODER.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(results, dict) or (
        _may_nest(data, _PLAIN_DEPTH) and _too_deep(doc, _PLAIN_DEPTH)
    ):
        return None
    summary = results.get("summary")
    counts: dict[str, int | None] | None = None
    if summary is not None:
        if not isinstance(summary, dict):
            return None
        counts = {}
        for name in SUMMARY_COUNTS:
            value = summary.get(name, 0 if name in DEFAULTED_COUNTS else None)
            if value is None and name in OPTIONAL_COUNTS:
                counts[name] = None
            elif type(value) is int and 0 <= value <= INT64_MAX:
                counts[name] = value
            else:
                return None
    tests = results.get("tests", [])
    if not isinstance(tests, list):
        return None
    statuses = []
    for item in tests:
        status = item.get("status", "") if isinstance(item, dict) else None
        if not isinstance(status, str):
            return None
        statuses.append(status)
    return CtrfReport("ok", summary=counts, statuses=statuses, items=tests)


def _may_nest(data: bytes, depth: int) -> bool:
    """Whether `data` has brackets enough to nest `depth` deep: a text with fewer cannot (a
    report has ~10), which spares walking the decoded value."""
    return data.count(b"{") + data.count(b"[") >= depth


def _too_deep(value: Any, limit: int) -> bool:
    if limit <= 0:
        return True
    if isinstance(value, dict):
        return any(_too_deep(v, limit - 1) for v in value.values())
    if isinstance(value, list):
        return any(_too_deep(v, limit - 1) for v in value)
    return False


def _validated(data: bytes, path: Path | str) -> CtrfReport:
    """Upstream's model decides (lazily imported: only odd reports get here)."""
    from pydantic import ValidationError

    try:
        report = _model().model_validate_json(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        if first["type"] == "json_invalid":
            why = why_invalid(data, too_deep="recursion limit" in first["msg"])
            return CtrfReport(
                "unreadable",
                "invalid_json",
                f"{path} is not valid JSON ({first['msg']}); {why}" + NO_GRADE,
            )
        return CtrfReport(
            "not_ctrf",
            "not_ctrf",
            f"{path} is not a CTRF report as upstream's model validates it ({where}: "
            f"{first['msg']})" + NO_GRADE,
        )
    results = report.results
    summary = None
    if results.summary is not None:  # (a count past 64 bits is for `_storable`)
        summary = {name: getattr(results.summary, name) for name in SUMMARY_COUNTS}
    raw = decode(data, path)  # the items again, as plain values, for names and durations
    items = raw["results"].get("tests", []) if isinstance(raw, dict) else []
    return CtrfReport(
        "ok",
        summary=summary,
        statuses=[test.status for test in results.tests],
        items=items if isinstance(items, list) else [],
    )


_MODEL: Any = None


def _model() -> Any:
    """Upstream's CTRF document model, field for field (validation only; grading is SQL)."""
    global _MODEL
    if _MODEL is None:
        from pydantic import BaseModel, ConfigDict, Field

        class CtrfTest(BaseModel):
            model_config = ConfigDict(extra="ignore")
            status: str = ""

        class CtrfSummary(BaseModel):
            model_config = ConfigDict(extra="ignore")
            passed: int | None = Field(default=None, ge=0)
            failed: int | None = Field(default=None, ge=0)
            skipped: int = Field(default=0, ge=0)
            pending: int = Field(default=0, ge=0)
            other: int = Field(default=0, ge=0)

        class CtrfResults(BaseModel):
            model_config = ConfigDict(extra="ignore")
            summary: CtrfSummary | None = None
            tests: list[CtrfTest] = Field(default_factory=list)

        class CtrfDocument(BaseModel):
            model_config = ConfigDict(extra="ignore")
            results: CtrfResults

        _MODEL = CtrfDocument
    return _MODEL
