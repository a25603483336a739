"""Ways `wmo-lake stats` narrows and summarizes its rows: --last / --steps, collapsed notes,
sparklines per metric across steps, and the task x step pass matrix (--by task).

Nothing here computes a metric: rows are `rollout_stats` rows, pass rates the `cells` counts the
report uses (wmo_lake.report.data), and a null measurement stays a gap.

    rows = limit_rows(rows, last=5, steps=parse_steps("10:20"))
    collapse_notes(notes, [r["batch"] for r in rows])   # one line per kind of note
    sparkline([0.1, None, 0.5, 1.0])                       # '▁ ▄█'
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Collection
from typing import Any

from wmo_lake.report.data import (
    METRICS,
    TaskTrend,
    batch_labels,
    columns_of,
    measured,
    pooled_counts,
    series_label,
    series_of,
    tree_of,
    x_mode_of,
)
from wmo_lake.terminal import metric_text, percent_text, printable

BLOCKS = "▁▂▃▄▅▆▇█"
SPARK_WIDTH = 60  # more steps than this are averaged into buckets


class StepsError(ValueError):
    """--steps is not A:B, A:, :B or A (integers)."""


def parse_steps(text: str | None) -> tuple[int | None, int | None] | None:
    """'10:20' -> (10, 20), both ends inclusive; '10:' and ':20' leave one end open; '7' is 7:7."""
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d*)\s*(?::\s*(\d*)\s*)?", text)
    if not match or not (match.group(1) or match.group(2)):
        raise StepsError(f"--steps {text!r}: expected A:B (e.g. 10:20), A: or :B, with integers")
    low = int(match.group(1)) if match.group(1) else None
    if match.group(2) is None:
        return low, low
    high = int(match.group(2)) if match.group(2) else None
    if low is not None and high is not None and low > high:
        raise StepsError(f"--steps {text!r}: the first step is after the last")
    return low, high


def limit_rows(
    rows: list[dict[str, Any]],
    *,
    last: int | None = None,
    steps: tuple[int | None, int | None] | None = None,
) -> list[dict[str, Any]]:
    """Rows whose step is in `steps` (a batch without a step is left out when a range is
    given), then the last `last` rows of each run; run/step order kept."""
    if steps is not None:
        low, high = steps
        rows = [
            r
            for r in rows
            if r["step"] is not None
            and (low is None or r["step"] >= low)
            and (high is None or r["step"] <= high)
        ]
    if last is not None:
        by_run: dict[Any, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            by_run[row["run"]].append(row)
        keep = {id(r) for run_rows in by_run.values() for r in run_rows[-last:]}
        rows = [r for r in rows if id(r) in keep]
    return rows


def cut_steps(rows: list[dict[str, Any]], kept: list[dict[str, Any]]) -> list[str]:
    """A line per step that `--last` cut (some of its batches kept, not all): a step's column
    or sparkline point would stand for part of the step. The batches of no run are a step's
    only within one tree (`tree_of`): two experiments' step 1 are not one step."""

    def step_of(row: dict[str, Any]) -> tuple[Any, str | None, int]:
        return (row["run"], tree_of(row["batch"]) if row["run"] is None else None, row["step"])

    batches = Counter(step_of(row) for row in rows if row["step"] is not None)
    shown = Counter(step_of(row) for row in kept if row["step"] is not None)
    return [
        f"{printable(series_label(run))}{'' if tree is None else f' (tree {printable(tree)!r})'}: "
        f"step {step} is {n} of its {batches[(run, tree, step)]} "
        f"batches (--last counts batches; `--steps {step}:` takes whole steps)"
        for (run, tree, step), n in shown.items()
        if n < batches[(run, tree, step)]
    ]


# ---------------------------------------------------------------------------------------------
# Notes

_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_PAREN_WITH_DIGITS = re.compile(r"\s*\([^()]*\d[^()]*\)")
_CODE = re.compile(r"`[^`]*`")
_SPAN = 0xE000  # code spans masked as private-use characters (`_masked`)
_SLOT = "\x00"  # a number's place in a kind


def _split_batch(note: str, batches: Collection[str]) -> tuple[str | None, str]:
    """(batch, the rest) for a note that starts with 'BATCH: '; the longest batch wins.
    Looked up at each ': ' of the note, longest first (not by scanning every batch: a lake of
    1,000s of batches has as many notes)."""
    known = batches if isinstance(batches, set | frozenset) else set(batches)
    cut = note.rfind(": ")
    while cut > 0:
        if note[:cut] in known:
            return note[:cut], note[cut + 2 :]
        cut = note.rfind(": ", 0, cut)
    return None, note


def _span(values: list[str]) -> str:
    numbers = [float(v) for v in values]
    low, high = min(numbers), max(numbers)
    if low == high:
        return values[0]
    return f"{values[numbers.index(low)]}..{values[numbers.index(high)]}"


def _masked(text: str) -> tuple[str, list[str]]:
    """`text` with each code span (`...`) as one private-use character, and the spans: a span is
    kept as it is, never ranged or cut (a command's path, a reward key holding a digit)."""
    between = _CODE.split(text)
    masked = between[0] + "".join(chr(_SPAN + i) + part for i, part in enumerate(between[1:]))
    return masked, _CODE.findall(text)


def _unmasked(text: str, codes: list[str]) -> str:
    return "".join(
        codes[ord(c) - _SPAN] if _SPAN <= ord(c) < _SPAN + len(codes) else c for c in text
    )


def collapse_notes(notes: list[str], batches: list[str]) -> list[str]:
    """One line per kind of note. A kind is the note's text with its batch, its numbers and any
    parenthesized detail holding a number set aside (code spans kept as they are); a kind seen
    in one batch keeps its note as it is, a kind seen in several becomes one line naming how
    many batches (first and last) with each number shown as its range across them."""
    groups: dict[str, list[tuple[str | None, list[str], str]]] = {}  # (batch, numbers, note)
    known = set(batches)
    for note in notes:
        batch, text = _split_batch(note, known)
        masked, codes = _masked(text)
        plain = _PAREN_WITH_DIGITS.sub("", masked)
        kind = _unmasked(_NUMBER.sub(_SLOT, plain), codes) if batch is not None else note
        groups.setdefault(kind, []).append((batch, _NUMBER.findall(plain), note))
    lines = []
    for kind, items in groups.items():
        if len(items) == 1:
            lines.append(items[0][2])
            continue
        slots = list(zip(*(numbers for _, numbers, _ in items), strict=True))
        parts = kind.split(_SLOT)
        text = parts[0] + "".join(_span(list(s)) + p for s, p in zip(slots, parts[1:], strict=True))
        first, last = items[0][0], items[-1][0]
        lines.append(f"{len(items)} batches ({first} .. {last}): {text} [--notes full lists each]")
    return lines


# ---------------------------------------------------------------------------------------------
# Sparklines


def sparkline(
    values: list[float | None], low: float | None = None, high: float | None = None
) -> str:
    """One character per value (a space for None), scaled to [low, high] (default: the values'
    own range); more than SPARK_WIDTH values are averaged into that many buckets."""
    if len(values) > SPARK_WIDTH:
        n = len(values)  # bucket i is values[i*n//W : (i+1)*n//W]: integer bounds, so the last
        buckets = []  # one ends at n (float ones dropped the newest value for n = 123, 245, ...)
        for i in range(SPARK_WIDTH):
            bucket = values[i * n // SPARK_WIDTH : (i + 1) * n // SPARK_WIDTH]
            chunk = [v for v in bucket if v is not None]
            buckets.append(sum(chunk) / len(chunk) if chunk else None)
        values = buckets
    present = [v for v in values if v is not None]
    if not present:
        return " " * len(values)
    low = min(present) if low is None else low
    high = max(present) if high is None else high
    span = high - low
    out = []
    for v in values:
        if v is None:
            out.append(" ")
        else:
            level = 0 if span <= 0 else round((v - low) / span * (len(BLOCKS) - 1))
            out.append(BLOCKS[max(0, min(len(BLOCKS) - 1, level))])
    return "".join(out)


def sparkline_lines(
    rows: list[dict[str, Any]],
    with_stop_reason: dict[str, int],
    counts: dict[str, dict[str, Any]],
) -> list[str]:
    """Per run with two or more steps, one line per metric: its sparkline across the run's steps
    (a gap for a null measurement), the first and last measured values; a step of several
    batches is one value, their trials pooled as the report and `compare` pool them (`counts`:
    those batches' BATCH_COUNTS rows). A run with a batch without a step goes batch by batch, as
    its report line does. Rates are drawn on 0..100%."""
    lines: list[str] = []
    width = max(len(m.label) for m in METRICS)
    for run, run_rows in series_of(rows).items():
        x_mode = x_mode_of(run_rows)
        columns = columns_of(run_rows, x_mode)
        if len(columns) < 2:
            continue
        noun = "steps" if x_mode == "step" else "batches"
        pooled = f" ({len(run_rows)} batches)" if len(run_rows) != len(columns) else ""
        lines.append(f"{printable(run)}: {len(columns)} {noun}{pooled}, per metric across {noun}")
        points = [
            {**c[0], "with_stop_reason": with_stop_reason.get(c[0]["batch"], 0)}
            if len(c) == 1
            else pooled_counts(counts, c)
            for c in columns
        ]
        for metric in METRICS:
            values = [measured(point, metric.key) for point in points]
            line = sparkline(values, 0.0, 1.0) if metric.percent else sparkline(values, 0.0)
            present = [v for v in values if v is not None]
            ends = (
                " -> ".join(metric_text(v, metric.percent) for v in (present[0], present[-1]))
                if present
                else "no measurement"
            )
            lines.append(f"  {metric.label:<{width}}  {line}  {ends}")
    return lines


# ---------------------------------------------------------------------------------------------
# --by task


def task_matrix_rows(
    rows: list[dict[str, Any]], trends: dict[str, list[TaskTrend]]
) -> list[dict[str, Any]]:
    """--by task --json: one object per (run, task, step), the step's batches pooled (per
    batch in a run with a batch without a step), tasks in trend order."""
    columns = {label: columns_of(rows, x_mode_of(rows)) for label, rows in series_of(rows).items()}
    return [
        {
            "run": task.series,
            "task_id": task.task_id,
            "batches": [row["batch"] for row in column],
            "step": column[0]["step"],
            "pass_rate": rate,
        }
        for tasks in trends.values()
        for task in tasks
        for column, rate in zip(columns[task.series], task.pass_rates, strict=True)
    ]


def task_matrix_lines(
    rows: list[dict[str, Any]],
    trends: dict[str, list[TaskTrend]],
    width: int | None = None,
) -> list[str]:
    """Per run: a task x step table of pass rates (passed / executed trials; '-' = not
    executed), tasks ordered by trend as in the report (most improved first), drawn by the
    shared renderer (wmo_lake.terminal.render_table) and fitted to `width`: the task and its trend
    sparkline (over every step) stay whole, and the latest steps that fit are shown."""
    import io

    from wmo_lake.terminal import COLUMN_GAP, render_table

    lines: list[str] = []
    for run, run_rows in series_of(rows).items():
        tasks = trends.get(run, [])
        x_mode = x_mode_of(run_rows)  # a batch without a step makes only its own run per batch
        label = "step" if x_mode == "step" else "batch"
        columns = columns_of(run_rows, x_mode)
        steps = (
            [str(c[0]["step"]) for c in columns]
            if x_mode == "step"
            else batch_labels([c[0]["batch"] for c in columns])
        )
        names = ["task", *(t.task_id for t in tasks)]
        lines_of = [sparkline(t.pass_rates, 0.0, 1.0) for t in tasks]
        cells = [["-" if v is None else percent_text(v, 0) for v in t.pass_rates] for t in tasks]
        shown = len(steps)
        if width is not None:
            used = max(map(len, names)) + COLUMN_GAP + max(map(len, ["trend", *lines_of]))
            shown = 0
            for i in range(len(steps) - 1, -1, -1):
                column = max([len(steps[i]), *(len(c[i]) for c in cells)])
                if used + COLUMN_GAP + column > width:
                    break
                used += COLUMN_GAP + column
                shown += 1
            shown = max(shown, 1)
        first = len(steps) - shown
        if lines:
            lines.append("")
        lines.append(f"{printable(run)}: pass rate by task and {label} (passed / executed)")
        text = io.StringIO()
        render_table(
            ["task", "trend", *steps[first:]],
            [
                [t.task_id, line, *c[first:]]
                for t, line, c in zip(tasks, lines_of, cells, strict=True)
            ],
            right_aligned=[False, False, *([True] * shown)],
            file=text,
            width=width,
            narrower="narrow them with --steps A:B or --last N",
        )
        lines += text.getvalue().splitlines()
        if first:
            lines.append(
                f"({first} earlier {label}(s) not shown at width {width}: {steps[0]} .. "
                f"{steps[first - 1]}; narrow them with --steps A:B or --last N)"
            )
    return lines


__all__ = [
    "StepsError",
    "collapse_notes",
    "limit_rows",
    "parse_steps",
    "series_label",
    "sparkline",
    "sparkline_lines",
    "task_matrix_lines",
    "task_matrix_rows",
]
