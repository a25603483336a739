"""Text for a terminal: the one table renderer (rich) that `sql`, `stats` (also `--by task`),
`tables` and `compare` draw with, fitted to the terminal's width; rates as percentages; names and
cells with their control characters escaped.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Sequence
from typing import TextIO


def percent_text(rate: float, digits: int = 1) -> str:
    """A rate in [0, 1] as a percentage with `digits` decimals, whose rounding never reaches 0%
    from above nor 100% from below: 1 pass in 2,500 trials is '<0.1%', not '0.0%' (which reads
    as never solved), and 2,499 is '>99.9%'."""
    text = f"{100 * rate:.{digits}f}%"
    smallest = f"{10**-digits:.{digits}f}"
    if rate > 0 and float(text[:-1]) == 0:
        return f"<{smallest}%"
    if rate < 1 and float(text[:-1]) >= 100:
        return f">{100 - 10**-digits:.{digits}f}%"
    return text


def metric_text(value: float | int | None, percent: bool) -> str:
    """A metric as the CLI prints it: a rate as `percent_text`, a count as it is, '-' for a
    null measurement."""
    if value is None:
        return "-"
    return percent_text(value) if percent else str(value)


def terminal_width(stream: TextIO) -> int | None:
    """The width a table must fit: $COLUMNS, else the terminal's, else None (not a terminal:
    a file or a pipe gets every column)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        import shutil

        return shutil.get_terminal_size().columns
    return None


COLUMN_GAP = 3  # between columns: padding, a blank rule, padding
MIN_CELL = 8  # fitting a width cuts a column no narrower than this (or its header)


def render_table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right_aligned: Sequence[bool] | None = None,
    file: TextIO | None = None,
    width: int | None = None,
    footer: str | None = None,
    narrower: str,
) -> None:
    """Draw rows of text cells as one table (rich), headers never wrapped or cut.

    With a `width` (see `terminal_width`), long cells are cut with an ellipsis (a right-aligned
    column, a number, never is) and columns that still do not fit are left out, named in a line
    under the table with `narrower` (how to see them: what the calling command offers); without
    one, every cell is printed whole."""
    from rich import box
    from rich.cells import cell_len
    from rich.console import Console
    from rich.table import Table

    file = file if file is not None else sys.stdout
    right_aligned = right_aligned or [False] * len(headers)
    # measured as drawn: escaped (a newline takes two columns as `\n`), a wide character two
    headers = [printable(header) for header in headers]
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [
        max([cell_len(header), *(cell_len(row[i]) for row in rows)])
        for i, header in enumerate(headers)
    ]
    kept = len(headers)
    if width is not None:
        widths, kept = _fit(headers, widths, width, right_aligned)
    table = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1),
        header_style="",
        safe_box=True,
    )
    for i in range(kept):
        table.add_column(
            headers[i],
            justify="right" if right_aligned[i] else "left",
            no_wrap=True,
            overflow="ellipsis",
            width=widths[i],
        )
    for row in rows:
        table.add_row(*row[:kept])
    console = Console(
        width=sum(widths[:kept]) + 3 * kept + 2,
        # (in the encoding of `file`: rich draws the rules in ASCII where it is not UTF-8)
        file=_Capture(getattr(file, "encoding", None) or "utf-8"),
        force_terminal=False,
        no_color=True,
        highlight=False,
        soft_wrap=False,
        emoji=False,
        markup=False,
    )
    with console.capture() as capture:
        console.print(table)
    lines = [line.rstrip() for line in capture.get().splitlines()]
    left_out = headers[kept:]
    if left_out:
        lines.append(
            f"({len(left_out)} more column(s) not shown at width {width}: "
            f"{', '.join(left_out)}; {narrower})"
        )
    if footer:
        lines.append(footer)
    file.write("".join(line + "\n" for line in lines))


class _Capture(io.StringIO):
    """A text buffer that says the encoding of the stream its text is for."""

    def __init__(self, encoding: str) -> None:
        super().__init__()
        self._encoding = encoding

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self._encoding


def _fit(
    headers: Sequence[str], natural: list[int], width: int, whole: Sequence[bool]
) -> tuple[list[int], int]:
    """Column widths that fit `width` (the widest cut first, never below its header or
    MIN_CELL), and how many columns fit at all (the rest are left out). A `whole` column (a
    number: cut, 1234567890123.456 read '1234567890…', a smaller number) is never cut: it is
    shown whole or left out."""
    from rich.cells import cell_len

    floors = [
        n if keep else max(cell_len(h), min(n, MIN_CELL))
        for h, n, keep in zip(headers, natural, whole, strict=True)
    ]
    kept, used = 0, 0
    for floor in floors:
        if kept and used + COLUMN_GAP + floor > width:
            break
        used += floor + (COLUMN_GAP if kept else 0)
        kept += 1
    widths = natural[:kept]
    room = width - COLUMN_GAP * (kept - 1)
    while sum(widths) > room:
        widest = max(range(kept), key=lambda i: widths[i] - floors[i])
        if widths[widest] <= floors[widest]:
            break
        widths[widest] -= 1
    return widths + natural[kept:], kept


# A cell's control characters drawn as escapes: a terminal would act on them (a carriage return
# or an ANSI sequence in an agent's terminal output rewrites what it shows), rich drops some,
# and str.splitlines() breaks a row at others (\x1c-\x1e, \x85, U+2028, U+2029).
_CONTROL_ESCAPES = {code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]}
_CONTROL_ESCAPES |= {ord("\n"): "\\n", ord("\t"): "\\t", ord("\r"): "\\r"}
_CONTROL_ESCAPES |= {0x2028: "\\u2028", 0x2029: "\\u2029"}


def printable(text: str) -> str:
    """`text` with its control characters drawn as escapes (`_CONTROL_ESCAPES`): a table cell,
    or a name (a run, a batch, a task) in a line the CLI prints."""
    return text.translate(_CONTROL_ESCAPES)
