"""CTRF reports are read exactly as upstream ctrf.py's pydantic model validates them: what the
model rejects is an unreadable report (`not_ctrf`, a problems row, nothing graded), and counts are
accepted where its coercion accepts them. `read_ctrf` reads plain reports without pydantic; a
property test holds that fast reading to the model on reports of every shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harbor_shapes import write_job, write_trial
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from reference.oracle import _CtrfReport
from wmo_lake.ctrf import SUMMARY_COUNTS, read_ctrf
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect

COUNT_VALUES = st.one_of(
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=0, max_value=5),
    st.integers(min_value=-3, max_value=5),
    st.integers(min_value=2**62, max_value=2**65),
    st.sampled_from([2**63 - 1, 2**63, 2**62 + 1]),  # each fits; a sum of two may not
    st.sampled_from([2.0, 2.5, -0.0, 1e3, True, False, None, "2", " 3 ", "2.0", "x", "", [], {}]),
)
STATUSES = st.one_of(
    st.sampled_from(["passed", "failed", "skipped", "pending", "other", "Passed", ""]),
    st.sampled_from([None, 5, True, ["passed"]]),
)
ITEMS = st.one_of(
    st.fixed_dictionaries(
        {"name": st.text(max_size=3)}, optional={"status": STATUSES, "duration": st.floats()}
    ),
    st.sampled_from([7, "passed", None, []]),
)
SUMMARIES = st.one_of(
    st.dictionaries(st.sampled_from([*SUMMARY_COUNTS, "tests", "start"]), COUNT_VALUES),
    st.sampled_from([None, "2 passed", [1, 2], 3]),
)
RESULTS = st.fixed_dictionaries(
    {}, optional={"summary": SUMMARIES, "tests": st.one_of(st.lists(ITEMS, max_size=4), ITEMS)}
)
DOCUMENTS = st.one_of(
    st.fixed_dictionaries({"results": RESULTS}, optional={"extra": st.integers()}),
    st.sampled_from([{}, [], {"results": None}, {"results": [1]}, "text"]),
)


def _model_reading(text: str) -> tuple[dict[str, int | None] | None, list[str]] | None:
    try:
        results = _CtrfReport.model_validate_json(text).results
    except ValidationError:
        return None
    summary = results.summary
    counts = None if summary is None else {name: getattr(summary, name) for name in SUMMARY_COUNTS}
    return counts, [test.status for test in results.tests]


def _past_64_bits(counts: dict[str, int | None]) -> bool:
    return any((value or 0) > 2**63 - 1 for value in counts.values())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=DOCUMENTS)
def test_read_ctrf_accepts_exactly_what_upstreams_model_accepts(tmp_path_factory, document) -> None:
    path = tmp_path_factory.mktemp("ctrf") / "ctrf.json"
    text = json.dumps(document, allow_nan=True)
    path.write_text(text, encoding="utf-8")
    expected = _model_reading(text)
    got = read_ctrf(path)
    if expected is not None and expected[0] and _past_64_bits(expected[0]):
        # the lake's one deliberate difference: a passed / failed count no int64 holds leaves the
        # summary out, said, and the items grade alone; an unresolved count that big is null
        summary, statuses = expected
        big = {name for name, value in summary.items() if (value or 0) > 2**63 - 1}
        assert (got.status, got.problem_kind, got.statuses) == ("ok", "out_of_range", statuses)
        if big & {"passed", "failed"}:
            assert got.summary is None
        else:
            assert got.summary == {k: None if k in big else v for k, v in summary.items()}
        return
    if expected is None:
        assert got.status == "not_ctrf", text
        assert got.problem and "not a CTRF report" in got.problem
    else:
        assert got.status == "ok", (text, got.problem)
        assert (got.summary, got.statuses) == expected, text


ODD_VALUES = [
    None,
    True,
    False,
    2.0,
    2.5,
    -0.0,
    -1,
    1e3,
    "2",
    " 3 ",
    "2.0",
    "2_0",
    "+2",
    "x",
    "",
    [],
    {},
]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
@pytest.mark.parametrize("name", [*SUMMARY_COUNTS, "status", "item", "tests", "summary"])
def test_each_odd_value_in_an_otherwise_plain_report(tmp_path: Path, name: str, value) -> None:
    summary: dict = {"tests": 2, "passed": 1, "failed": 1, "skipped": 0, "pending": 0, "other": 0}
    tests: list = [{"name": "a", "status": "passed"}, {"name": "b", "status": "failed"}]
    results: dict = {"summary": summary, "tests": tests}
    if name in SUMMARY_COUNTS:
        summary[name] = value
    elif name == "status":
        tests[1]["status"] = value
    elif name == "item":
        tests[1] = value
    else:
        results[name] = value
    text = json.dumps({"results": results})
    path = tmp_path / "ctrf.json"
    path.write_text(text, encoding="utf-8")
    expected = _model_reading(text)
    got = read_ctrf(path)
    if expected is None:
        assert got.status == "not_ctrf"
    else:
        assert (got.status, got.summary, got.statuses) == ("ok", *expected)


def test_texts_upstreams_json_parser_rejects_are_unreadable(tmp_path: Path) -> None:
    cases = {
        "bom": b'\xef\xbb\xbf{"results": {"tests": [{"status": "passed"}]}}',
        "surrogate": b'{"results": {"tests": [{"status": "passed", "name": "\\ud800"}]}}',
        "truncated": b'{"results": {"tests": [',
    }
    for name, data in cases.items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(data)
        got = read_ctrf(path)
        assert (got.status, got.problem_kind) == ("unreadable", "invalid_json"), name
    nan = tmp_path / "nan.json"  # jiter reads NaN where upstream ignores the field
    nan.write_bytes(b'{"results": {"tests": [{"status": "passed", "duration": NaN}]}}')
    assert (read_ctrf(nan).status, read_ctrf(nan).statuses) == ("ok", ["passed"])


def test_a_rejected_report_grades_nothing_and_says_why(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "job")
    report = {
        "results": {
            "summary": {"passed": 1, "failed": 0, "skipped": 0},
            "tests": [{"name": "a", "status": "passed"}, {"name": "b", "status": None}],
        }
    }
    write_trial(job, "t__1", ctrf=report)
    ingest([tmp_path / "runs"], tmp_path / "lake")
    con = connect(tmp_path / "lake")
    status = con.sql("SELECT ctrf_status, ctrf_n_tests FROM trials").fetchall()
    assert status == [("not_ctrf", None)]
    assert con.sql("SELECT count(*) FROM tests").fetchall() == [(0,)]
    graded = con.sql("SELECT tests_passed, tests_resolved, graded_score FROM cells").fetchall()
    assert graded == [(None, None, None)]  # not partly graded from the summary
    path = str(tmp_path / "runs" / "job" / "t__1" / "verifier" / "ctrf.json")
    assert con.sql(
        "SELECT unit_key IS NOT NULL, batch, trial_name, path, kind, message FROM problems"
    ).fetchall() == [
        (
            True,
            "job",
            "t__1",
            path,
            "not_ctrf",
            f"{path} is not a CTRF report as upstream's model validates it (results.tests.1.status:"
            " Input should be a valid string); the trial has no graded tests (a report is graded "
            "whole or not at all)",
        )
    ]


def test_coerced_counts_are_stored_as_the_model_reads_them(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "job")
    summary = {"passed": "2", "failed": 1.0, "skipped": True, "pending": " 0 "}
    write_trial(job, "t__1", ctrf={"results": {"summary": summary}})
    ingest([tmp_path / "runs"], tmp_path / "lake")
    con = connect(tmp_path / "lake")
    assert con.sql(
        "SELECT ctrf_status, ctrf_passed, ctrf_failed, ctrf_skipped, ctrf_pending, ctrf_other "
        "FROM trials"
    ).fetchall() == [("ok", 2, 1, 1, 0, 0)]
    assert con.sql(
        "SELECT tests_passed, tests_resolved, tests_unresolved FROM cells"
    ).fetchall() == [(2, 3, 1)]
    assert con.sql("SELECT count(*) FROM problems").fetchall() == [(0,)]


@pytest.mark.parametrize("depth", [30, 31, 32, 33, 300])
def test_a_deeply_nested_report_is_read_as_upstreams_model_reads_it(
    tmp_path: Path, depth: int
) -> None:
    """Nesting about the plain reader's depth limit, or past what upstream's JSON parser takes:
    the answer is the model's (brackets inside strings nest nothing)."""
    nested = "[" * depth + "]" * depth
    text = (
        '{"results": {"summary": {"passed": 1, "failed": 0}, "tests": [{"status": "passed", '
        f'"name": "{{[{{[", "extra": {nested}}}]}}}}'
    )
    path = tmp_path / "ctrf.json"
    path.write_text(text, encoding="utf-8")
    expected = _model_reading(text)
    got = read_ctrf(path)
    if expected is None:
        assert got.status != "ok"
    else:
        assert (got.status, got.summary, got.statuses) == ("ok", *expected)
