"""`wmo-lake compare A B`: two runs (or two batch globs) side by side."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import duckdb

from wmo_lake.commands.options import (
    fail,
    fail_if_damaged,
    lake_failure,
    lake_option,
    setting_options,
    settings_from,
)
from wmo_lake.store import LakeError
from wmo_lake.terminal import metric_text, printable

# a step one run has no batch at, told from '-', a step whose batches executed no trial
ABSENT = "absent"


def _delta(value: float | int | None, percent: bool) -> str:
    """B - A: percentage points, a change that rounds to 0.0 shown as `+<0.1` / `-<0.1` (beside
    rates `percent_text` keeps apart, a '+0.0 pt' read as no change)."""
    if value is None:
        return "-"
    if not percent:
        return f"{value:+d}"
    text = f"{100 * value:+.1f}"
    return f"{text[0]}<0.1 pt" if value and float(text) == 0 else f"{text} pt"


def _table(
    headers: list[str], rows: list[list[str]], width: int | None, narrower: str
) -> list[str]:
    """Rows drawn by the shared renderer (wmo_lake.terminal.render_table), first column text,
    the rest numbers."""
    import io

    from wmo_lake.terminal import render_table

    text = io.StringIO()
    right = [False, *([True] * (len(headers) - 1))]
    render_table(headers, rows, right_aligned=right, file=text, width=width, narrower=narrower)
    return text.getvalue().splitlines()


def _side_line(label: str, side: dict[str, Any]) -> str:
    """`A: exp1 (run, 12 batches, 1,536 trials)`, or a batch glob's."""
    kind = "run" if side["kind"] == "run" else "batch glob"
    batches, trials = side["batches"], side["trials"]
    unreadable = side["unreadable_trials"]
    not_counted = (
        f"; {unreadable:,} unreadable trial dir{'s' if unreadable != 1 else ''}, not counted"
        if unreadable and trials
        else ""
    )
    return (
        f"{label}: {printable(side['selection'])} ({kind}, {batches:,} "
        f"batch{'es' if batches != 1 else ''}, {trials:,} trial{'s' if trials != 1 else ''}"
        f"{not_counted})"
    )


def render_text(result: dict[str, Any], width: int | None = None) -> list[str]:
    """The comparison as lines: the metrics and the per-step solve rates as tables fitted to
    `width` (None: every cell whole), the flipped tasks as lists."""
    from wmo_lake.report.data import METRIC_BY_KEY

    a, b = result["a"], result["b"]
    lines = [_side_line("A", a), _side_line("B", b)]
    for label, side in (("A", a), ("B", b)):
        if not side["trials"]:  # empty or unreadable batches only: said, not a row of dashes
            unreadable = side["unreadable_trials"]
            lines.append(
                f"{label} holds no readable trial ({unreadable:,} unreadable trial "
                f"dir{'s' if unreadable != 1 else ''}): its figures are '-' (no measurement)"
            )
    lines.append("")
    rows = []
    for m in result["metrics"]:
        percent = METRIC_BY_KEY[m["metric"]].percent
        rows.append(
            [
                m["label"],
                metric_text(m["a"], percent),
                metric_text(m["b"], percent),
                _delta(m["delta"], percent),
            ]
        )
    lines += _table(["metric", "A", "B", "B - A"], rows, width, "use --json")
    flipped = result["flipped"]
    for key, title in (("fail_to_pass", "fail -> pass"), ("pass_to_fail", "pass -> fail")):
        tasks = flipped[key]
        lines.append("")
        lines.append(f"flipped {title} ({len(tasks)}):")
        for t in tasks:
            a_rate = f"{metric_text(t['a_pass_rate'], True)} ({t['a_passed']} of {t['a_executed']})"
            b_rate = f"{metric_text(t['b_pass_rate'], True)} ({t['b_passed']} of {t['b_executed']})"
            lines.append(f"  {printable(t['task_id'])}  {a_rate} -> {b_rate}")
    for key, side in (("only_in_a", "A"), ("only_in_b", "B")):
        if flipped[key]:
            lines.append(
                f"executed only in {side} ({len(flipped[key])}): "
                + printable(", ".join(flipped[key]))
            )
    for label, side in (("A", a), ("B", b)):
        if side["kind"] == "run" and side.get("trees"):
            trees = side["trees"]
            lines += [
                "",
                f"no solve rate by step: {label}'s batches outside any run come from "
                f"{len(trees)} trees ({printable(', '.join(trees))}), and one tree's step is not "
                "another's (its figures above pool them all)",
            ]
    if result["steps"]:
        lines += ["", "solve rate by step:"]
        steps = [
            [
                str(s["step"]),
                metric_text(s["solve_rate_a"], True) if s["a"] else ABSENT,
                metric_text(s["solve_rate_b"], True) if s["b"] else ABSENT,
                _delta(s["solve_rate_delta"], True),
            ]
            for s in result["steps"]
        ]
        lines += _table(["step", "A", "B", "B - A"], steps, width, "use --json")
        for label, side in (("A", a), ("B", b)):
            if side["batches_without_step"]:
                n = side["batches_without_step"]
                lines.append(
                    f"{label}'s {n} batch{'es' if n != 1 else ''} without a step "
                    f"{'are' if n != 1 else 'is'} in its figures above, in no step of this table"
                )
    return lines


@click.command()
@lake_option
@click.argument("a")
@click.argument("b")
@setting_options
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as one JSON object.")
def compare(lake: Path, a: str, b: str, as_json: bool, **options: Any) -> None:
    """Compare two runs, or two batch globs: metric deltas side by side and the tasks that
    flipped between pass and fail.

    A and B each name a run (the dir before harbor/; '(no run)' for the batches outside one) or
    are a batch glob ('*' crosses '/').
    Each side's metrics are the rollout_stats rules over its trials pooled (one batch: exactly
    its rollout_stats row); '-' is a null measurement (an empty denominator). A task is solved
    on a side when one of its executed trials passed there; it flipped when it is solved on one
    side and failed (executed, never passed) on the other; each flip shows its pass rate and
    passed / executed trials on both sides. Two runs also get their solve rates step by step, a
    side's batches at a step pooled ('absent': the run has no batch at that step; a batch without
    a step counts in the side's figures, not in that table). Rates in --json are fractions, deltas
    B - A.

    \b
    Examples:
      wmo-lake compare exp1 exp2
      wmo-lake compare 'exp1/harbor/step-0007/*' 'exp1/harbor/step-0008/*'
      wmo-lake compare exp1 exp2 --reward-mode positive-binary --json
    """
    from wmo_lake.compare import CompareError
    from wmo_lake.compare import compare as compare_sides

    try:
        result = compare_sides(lake, a, b, settings_from(options))
    except CompareError as error:
        fail(str(error), 2)
    except LakeError as error:
        lake_failure(None, lake, error)
    except duckdb.Error as error:
        fail_if_damaged(lake, error)
        fail(f"compare query failed: {error}")
    if as_json:
        click.echo(json.dumps(result, ensure_ascii=False, indent=2))
        return
    from wmo_lake.terminal import terminal_width

    for line in render_text(result, terminal_width(sys.stdout)):
        click.echo(line)
