"""`percent_text`: every rate the CLI and the report print as a percentage. Rounding never
turns a rate above 0 into 0% (a task solved once in 250 trials read as never solved) nor one
below 1 into 100%."""

from __future__ import annotations

import pytest

from wmo_lake.terminal import percent_text


@pytest.mark.parametrize(
    ("rate", "digits", "expected"),
    [
        (0.0, 1, "0.0%"),
        (1.0, 1, "100.0%"),
        (0.5, 0, "50%"),
        (1 / 3, 1, "33.3%"),
        (1 / 250, 0, "<1%"),
        (1 / 250, 1, "0.4%"),
        (1 / 2500, 1, "<0.1%"),
        (0.0005, 1, "0.1%"),
        (249 / 250, 0, ">99%"),
        (2499 / 2500, 1, ">99.9%"),
        (0.995, 1, "99.5%"),
    ],
)
def test_rounding_never_reaches_zero_or_one_hundred(
    rate: float, digits: int, expected: str
) -> None:
    assert percent_text(rate, digits) == expected
