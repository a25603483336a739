"""The bench report's verdicts: a goal is checked on the exact figure, never on its rounding."""

from __future__ import annotations

import pytest

from bench import __main__ as bench


def _rendered(report: bench.Report) -> str:
    for name in {spec[0] for spec in bench.FIGURES}:
        report.unavailable(name, "not run by this test")
    return bench.render(report.as_dict())


@pytest.mark.parametrize(
    ("name", "value", "met", "shown"),
    [
        # a median of 1.99984x once rounded to 2.0 and read as >= 2x
        ("tokens_per_s_ratio", 1.9998402, False, "1.9998 x"),
        ("tokens_per_s_ratio", 2.0000004, True, "2 x"),
        ("tokens_per_s_ratio", 2.413, True, "2.413 x"),
    ],
)
def test_a_goal_is_checked_on_the_exact_value(
    name: str, value: float, met: bool, shown: str
) -> None:
    report = bench.Report(options={"repeat": 3, "quick": False})
    report.set("export", name, value)
    figure = report.figures[f"export.{name}"]
    assert figure.met is met and figure.value == value
    line = next(x for x in _rendered(report).splitlines() if x.strip().startswith(name))
    assert shown in line and line.endswith("MET" if met else "MISSED")


def test_the_shown_number_never_crosses_the_goal() -> None:
    at_most = bench.SPECS["growth", "add_step_ratio"][4]  # <= 1.5x
    assert bench.shown_number(1.50004, at_most) == "1.50004"  # not "1.5", which would be met
    assert bench.shown_number(1.254321, at_most) == "1.254"
    assert bench.shown_number(2_097_221.0, None) == "2.097e+06"
