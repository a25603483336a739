"""The report page: plotly figures as plain JSON, plotly.js inlined, plain HTML tables around them.

Why plotly: its figures are data (JSON) that plotly.js draws in the browser, so one file holds
the script and every point, opens offline, stays interactive (hover shows the batch of a point,
legends toggle runs), and a test reads the plotted numbers straight back out of the page. The
Python package is used only for the plotly.js bundle it ships (`plotly.offline.get_plotlyjs`);
figures are built as dicts, which is fast and keeps the page's data exactly the lake's rows.

Every trace carries `meta` = {"metric", "series"} and `customdata` = the batch of each point, so a
point can be traced back to its `rollout_stats` row (a step of several batches is one point, its
batches pooled and joined by ' + ': `wmo_lake.report.data.point_of`).
"""

from __future__ import annotations

import html
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from wmo_lake.report.data import (
    METRICS,
    Flip,
    ReportData,
    measured,
)
from wmo_lake.store import hint_lake_option
from wmo_lake.terminal import percent_text

PLOTLY_MISSING = (
    "wmo-lake report needs plotly (it ships the plotly.js the page inlines): "
    "pip install 'wmo-lake[report]'"
)

# Distinct, color-blind-safe colors (Okabe-Ito), one per run.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
STOP_COLORS = {
    "submitted": "#009E73",
    "max_turns": "#E69F00",
    "budget": "#D55E00",
    "context_overflow": "#CC79A7",
    "provider_error": "#56B4E9",
    "error": "#B22222",
    "unknown": "#999999",
}


class PlotlyMissing(RuntimeError):
    """plotly is not installed; the message says how to install it."""


def plotly_js() -> str:
    """The plotly.js bundle the plotly package ships (inlined, so the page needs no network)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as error:
        raise PlotlyMissing(PLOTLY_MISSING) from error
    return get_plotlyjs()


# A run's line beyond the palette's 8: each further round changes the dash and the marker (6
# and 7 of them, coprime), so no two of the first 8 * 6 * 7 = 336 runs are drawn alike.
DASHES = ["solid", "dot", "dash", "longdash", "dashdot", "longdashdot"]
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "x", "cross", "star"]
# Bars named by no fixed colour (a stop reason outside STOP_COLORS, a problem kind): colours no
# fixed stop reason uses (Paul Tol's muted), then the same with a fill pattern per round.
OTHER_COLORS = [
    "#332288",
    "#88CCEE",
    "#44AA99",
    "#117733",
    "#999933",
    "#DDCC77",
    "#CC6677",
    "#882255",
    "#AA4499",
]
PATTERNS = ["", "/", "\\", "x", ".", "+", "-", "|"]


def shown(text: str) -> str:
    """`text` as plotly must be given it to draw it as it is. plotly reads tags (`<b>`, `<br>`)
    and entities in every name, title, tick and hover, so a run `a<b>c` lost its `<b>` and the
    runs `a&amp;b` and `a&b` had one legend entry; and it fills `%{...}` in names and titles
    (`a%{x}b` drew as `ab`), so the `{` is an entity, which it decodes only when it draws.
    Quotes stay: plotly knows no `&quot;`."""
    return html.escape(text, quote=False).replace("%{", "%&#123;")


def _color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def _run_style(index: int) -> dict[str, Any]:
    """The line and marker of the index-th run's trace."""
    lap = index // len(PALETTE)
    return {
        "line": {"color": _color(index), "dash": DASHES[lap % len(DASHES)]},
        "marker": {"color": _color(index), "symbol": SYMBOLS[lap % len(SYMBOLS)]},
    }


def _other_bar(index: int) -> dict[str, Any]:
    """The marker of the index-th bar series that has no fixed colour."""
    marker: dict[str, Any] = {"color": OTHER_COLORS[index % len(OTHER_COLORS)]}
    lap = index // len(OTHER_COLORS)
    if lap:
        marker["pattern"] = {"shape": PATTERNS[lap % len(PATTERNS)]}
    return marker


AXIS_TITLES = {"step": "step", "batch": "batch", "mixed": "step or batch"}


def _x_mode(data: ReportData, label: str | None) -> str:
    """The x of a run's own chart (label), or of a chart the runs share (None)."""
    return data.x_mode if label is None else data.x_modes[label]


def _xs(data: ReportData, label: str, points: list[dict[str, Any]], shared: bool) -> list[Any]:
    """A series' x values: its steps, or its batches (as drawn: `shown`) when a batch of it has
    no step; on a shared chart of both kinds of run a step is the category 'step N'."""
    if data.x_modes[label] == "batch":
        return [shown(point["batch"]) for point in points]
    if shared and data.x_mode == "mixed":
        return [f"step {point['step']}" for point in points]
    return [point["step"] for point in points]


def _step_ticks(steps: list[int]) -> dict[str, Any]:
    """Ticks on whole steps only (plotly's own fall between them on a short range: 0, 0.2, ...):
    every 1, 2, 5, 10, 20, ... steps, the smallest that keeps to about ten ticks."""
    span = max(steps) - min(steps) if steps else 0
    dtick, factors = 1, (2, 2.5, 2)  # 1, 2, 5, 10, 20, 50, ...
    index = 0
    while span / dtick > 10:
        dtick = int(dtick * factors[index % 3])
        index += 1
    return {"tickmode": "linear", "tick0": 0, "dtick": dtick}


def _xaxis(data: ReportData, label: str | None) -> dict[str, Any]:
    x_mode = _x_mode(data, label)
    xaxis: dict[str, Any] = {"title": {"text": AXIS_TITLES[x_mode]}, "automargin": True}
    if x_mode == "step":
        shown_runs = [label] if label is not None else list(data.points)
        xaxis.update(_step_ticks([p["step"] for s in shown_runs for p in data.points[s]]))
    else:
        xaxis["type"] = "category"
    if x_mode == "mixed":  # the steps in order, then the batches of the runs without steps
        steps: set[int] = set()
        batches: list[str] = []
        for series, points in data.points.items():
            if data.x_modes[series] == "step":
                steps.update(point["step"] for point in points)
            else:
                batches += [shown(point["batch"]) for point in points]
        xaxis["categoryorder"] = "array"
        xaxis["categoryarray"] = [f"step {step}" for step in sorted(steps)] + batches
    return xaxis


def _layout(
    data: ReportData, title: str, y_title: str, label: str | None = None, **extra: Any
) -> dict[str, Any]:
    """A figure's layout; `label`: the run of a run's own chart (None: a chart the runs share)."""
    xaxis = _xaxis(data, label)
    layout: dict[str, Any] = {
        "title": {"text": title, "font": {"size": 15}},
        "xaxis": xaxis,
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero"},
        "margin": {"l": 60, "r": 20, "t": 40, "b": 50},
        "height": 320,
        "legend": {"orientation": "h", "y": -0.25},
        "hovermode": "closest",
        "template": None,
        "plot_bgcolor": "#fafafa",
    }
    layout.update(extra)
    return layout


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become null (a gap) rather than invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _batch_hover(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A trace's hover head: each point's batch, as `shown` (`customdata` keeps it as it is)."""
    return {"text": [shown(r["batch"]) for r in rows]}


def _rate_hover(values: list[Any]) -> dict[str, Any]:
    """A trace's hover value for rates: `percent_text`, as the CLI and the heatmap print them.
    plotly's `%{y}` takes the axis' '.0%' tick format, which showed 1 pass in 300 as '0%' and
    299 as '100%'."""
    return {"hovertext": ["" if v is None else percent_text(v) for v in values]}


def _line_trace(
    data: ReportData,
    label: str,
    index: int,
    metric: str,
    rows: list[dict[str, Any]],
    ys: list,
    percent: bool = False,
) -> dict[str, Any]:
    ys = [_clean(y) for y in ys]
    value = "%{hovertext}" if percent else "%{y}"
    return {
        "type": "scatter",
        "mode": "lines+markers",
        "name": shown(label),
        "x": _xs(data, label, rows, shared=True),
        "y": ys,
        "customdata": [r["batch"] for r in rows],
        "connectgaps": False,
        **_run_style(index),
        "meta": {"metric": metric, "series": label},
        **_batch_hover(rows),
        **(_rate_hover(ys) if percent else {}),
        "hovertemplate": f"%{{text}}<br>{value}<extra>%{{fullData.name}}</extra>",
    }


def metric_figures(data: ReportData) -> list[dict[str, Any]]:
    """One line chart per rollout_stats metric, a line per run; a null measurement is a gap."""
    figures = []
    for metric in METRICS:
        traces = [
            _line_trace(
                data,
                label,
                i,
                metric.key,
                rows,
                [measured(r, metric.key) for r in rows],
                percent=metric.percent,
            )
            for i, (label, rows) in enumerate(data.points.items())
        ]
        yaxis: dict[str, Any] = {"title": {"text": metric.label}, "rangemode": "tozero"}
        if metric.percent:
            yaxis.update({"tickformat": ".0%", "range": [0, 1.05]})
        figures.append(
            {
                "id": f"metric-{metric.key}",
                "section": "metrics",
                "figure": {
                    "data": traces,
                    "layout": _layout(data, metric.label, metric.label, yaxis=yaxis),
                },
            }
        )
    return figures


def token_figures(data: ReportData) -> list[dict[str, Any]]:
    """Prompt and sampled tokens per step, and sampled turns per trial with spans; a step none
    of whose trials recorded spans is a gap (its tokens were not measured, not 0)."""
    specs = [
        (
            "prompt_tokens",
            "prompt tokens per step (all turns of the trials with spans)",
            lambda r: r["prompt_tokens"],
        ),
        (
            "sampled_tokens",
            "sampled tokens per step (trials with spans)",
            lambda r: r["sampled_tokens"],
        ),
        (
            "turns_per_trial",
            "sampled turns per trial (trials with spans)",
            lambda r: r["turns"] / r["trials_with_spans"] if r["trials_with_spans"] else None,
        ),
    ]
    figures = []
    for key, title, value in specs:
        traces = [
            _line_trace(
                data,
                label,
                i,
                key,
                rows,
                [value(r) if r["trials_with_spans"] else None for r in rows],
            )
            for i, (label, rows) in enumerate(data.points.items())
        ]
        figures.append(
            {
                "id": f"tokens-{key}",
                "section": "tokens",
                "figure": {"data": traces, "layout": _layout(data, title, key.replace("_", " "))},
            }
        )
    return figures


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in label).strip("-") or "run"


def _chart_key(data: ReportData, label: str) -> str:
    """The part of a run's chart ids that names it: its slug, with '_' and its index when
    another run has the same slug ('exp.1' and 'exp_1' both slug to 'exp-1' and would share a
    div); a slug never holds '_', so no run's plain slug can take the suffixed form."""
    slugs = [_slug(series) for series in data.points]
    index = list(data.points).index(label)
    return slugs[index] if slugs.count(slugs[index]) == 1 else f"{slugs[index]}_{index}"


def _stacked(
    data: ReportData,
    fig_id: str,
    section: str,
    title: str,
    y_title: str,
    label: str,
    rows: list[dict[str, Any]],
    parts: list[tuple[str, dict[str, Any], list[Any]]],
    percent: bool = False,
) -> dict[str, Any]:
    value = "%{hovertext}" if percent else "%{y}"
    traces = [
        {
            "type": "bar",
            "name": shown(name),
            "x": _xs(data, label, rows, shared=False),
            "y": [_clean(v) for v in values],
            "customdata": [r["batch"] for r in rows],
            "marker": marker,
            "meta": {"metric": name, "series": label},
            **_batch_hover(rows),
            "textposition": "none",  # (the text is the hover's, not drawn on the bar)
            **(_rate_hover([_clean(v) for v in values]) if percent else {}),
            "hovertemplate": f"%{{text}}<br>%{{fullData.name}}: {value}<extra></extra>",
        }
        for name, marker, values in parts
    ]
    return {
        "id": fig_id,
        "section": section,
        "figure": {
            "data": traces,
            "layout": _layout(data, title, y_title, label, barmode="stack"),
        },
    }


def stop_reason_figures(data: ReportData) -> list[dict[str, Any]]:
    """Per run: the share of each stop reason per step, stacked (null counts as 'unknown')."""
    figures = []
    for label, rows in data.points.items():
        reasons = sorted({k for r in rows for k in r["stop_reason_counts"]})
        others = [reason for reason in reasons if reason not in STOP_COLORS]
        parts = [
            (
                reason,
                {"color": STOP_COLORS[reason]}
                if reason in STOP_COLORS
                else _other_bar(others.index(reason)),
                [
                    r["stop_reason_counts"].get(reason, 0) / r["trials"] if r["trials"] else None
                    for r in rows
                ],
            )
            for reason in reasons
        ]
        figures.append(
            _stacked(
                data,
                f"stop-{_chart_key(data, label)}",
                "stop",
                f"stop-reason mix: {shown(label)}",
                "share of trials",
                label,
                rows,
                parts,
                percent=True,
            )
        )
        figures[-1]["figure"]["layout"]["yaxis"].update({"tickformat": ".0%"})
    return figures


def datum_figures(data: ReportData) -> list[dict[str, Any]]:
    """Per run: episodes kept / dropped by reason per step (stacked), datums as a line."""
    if not data.datums_computable:
        return []
    figures = []
    for label, rows in data.points.items():
        parts = [
            ("episodes kept", {"color": "#009E73"}, [r["datum_kept_episodes"] for r in rows]),
            ("dropped: overflow", {"color": "#D55E00"}, [r["datum_overflow_drops"] for r in rows]),
            ("dropped: overlong", {"color": "#E69F00"}, [r["datum_overlong_drops"] for r in rows]),
        ]
        figure = _stacked(
            data,
            f"datums-{_chart_key(data, label)}",
            "datums",
            f"datum_stats: {shown(label)}",
            "episodes / datums",
            label,
            rows,
            parts,
        )
        figure["figure"]["data"].append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": "datums",
                "x": _xs(data, label, rows, shared=False),
                "y": [r["datum_datums"] for r in rows],
                "customdata": [r["batch"] for r in rows],
                "line": {"color": "#000000"},
                "meta": {"metric": "datums", "series": label},
                **_batch_hover(rows),
                "hovertemplate": "%{text}<br>datums: %{y}<extra></extra>",
            }
        )
        if not any(r["trials_with_spans"] for r in rows):  # (its zeros are upstream's too)
            figure["empty_note"] = DATUMS_WITHOUT_SPANS
        figures.append(figure)
    return figures


# Under the datums chart of a run none of whose batches recorded token spans (another run's
# did): its bars are 0, as upstream's build_datums builds no datum of a record without spans.
DATUMS_WITHOUT_SPANS = (
    "no trial of its batches recorded token spans, so no datum can be built from them (0 "
    "datums, as upstream's build_datums gives)"
)


def _incomplete_job_warnings(data: ReportData) -> str:
    """A line over the charts when a selected batch's harbor job has not finished, and one when
    a finished job holds fewer trials than it plans: their points are of a part of the step
    (upstream's scorer refuses such a job). One more when a batch pools several job dirs."""
    lines = []
    if data.unfinished:
        lines.append(
            f"<p class='warn'>{len(data.unfinished)} batch(es) come from a harbor job that has "
            "not finished (its result.json records no finished_at, or was cut off), so their "
            f"points are of the trials written so far: {_shown(data.unfinished)}. Finish or "
            "resume the job and ingest it again.</p>"
        )
    if data.short:
        lines.append(
            f"<p class='warn'>{len(data.short)} batch(es) come from a finished harbor job the "
            "lake holds fewer trials of than it plans (trial dirs removed after the run, not "
            "ingested, or held by another dir), so their points are of a part of the step: "
            f"{_shown(data.short)}. The notes of wmo-lake stats say which, and what to run.</p>"
        )
    if data.gone:
        lines.append(
            f"<p class='warn'>{len(data.gone)} batch(es) hold more trials of a finished harbor "
            "job than it plans, trials whose dirs are gone from its job dir (harbor's job "
            "resume deletes a trial dir it runs again; an ingest without --prune keeps it), "
            f"counted in their points: {_shown(data.gone)}. The notes of wmo-lake stats say "
            "which, and what to run.</p>"
        )
    if data.pooled:
        lines.append(
            f"<p class='warn'>{len(data.pooled)} batch(es) pool the trials of several job dirs "
            "that carry one batch label (two run trees with the same run name, dirs of one "
            "name in two trees given as PATHs, or a job dir that moved), so their points are of "
            f"those dirs together: {_shown(data.pooled)}. The notes of wmo-lake stats name the "
            "job dirs and what to do.</p>"
        )
    return "".join(lines)


def _shown(batches: list[str]) -> str:
    """The first ten batches, and how many more, escaped."""
    more = f" and {len(batches) - 10} more" if len(batches) > 10 else ""
    return html.escape(", ".join(batches[:10]) + more)


def problem_figures(data: ReportData) -> list[dict[str, Any]]:
    """Per run with problems: problems per step by kind (stacked)."""
    figures = []
    for label, rows in data.points.items():
        kinds = sorted({k for r in rows for k in r["problems"]})
        if not kinds:
            continue
        parts = [
            (kind, _other_bar(i), [r["problems"].get(kind, 0) for r in rows])
            for i, kind in enumerate(kinds)
        ]
        figures.append(
            _stacked(
                data,
                f"problems-{_chart_key(data, label)}",
                "problems",
                f"problems by kind: {shown(label)}",
                "problems",
                label,
                rows,
                parts,
            )
        )
    return figures


LABEL_HEAD, LABEL_TAIL = 30, 15  # a tick label's kept start and end, around an ellipsis


def _short_label(text: str) -> str:
    """A tick label that cannot squeeze the plot: a long one keeps its start and its end (task
    ids tend to differ there) around an ellipsis."""
    if len(text) <= LABEL_HEAD + LABEL_TAIL + 1:
        return text
    return text[:LABEL_HEAD] + "\u2026" + text[-LABEL_TAIL:]


def heatmap_figures(data: ReportData) -> list[dict[str, Any]]:
    """Per run: task x step pass rate (passed / executed; blank = not executed), tasks ordered
    by trend (least-squares slope over steps), the most improved at the top."""
    figures = []
    for label, rows in data.points.items():
        trends = data.trends.get(label, [])
        if not trends:
            continue
        x = _xs(data, label, rows, shared=False)
        axis = AXIS_TITLES[data.x_modes[label]]
        z = [t.pass_rates for t in trends]
        height = max(260, min(40 + 18 * len(trends), 4000) + 90)
        figures.append(
            {
                "id": f"heatmap-{_chart_key(data, label)}",
                "section": "tasks",
                "figure": {
                    "data": [
                        {
                            "type": "heatmap",
                            "name": shown(label),
                            "x": x,
                            "y": [shown(t.task_id) for t in trends],
                            "z": z,
                            "zmin": 0,
                            "zmax": 1,
                            "colorscale": "Viridis",
                            "colorbar": {"title": {"text": "pass rate"}, "tickformat": ".0%"},
                            "hoverongaps": False,
                            "meta": {"metric": "task_pass_rate", "series": label},
                            # (plotly's own '.0%' made 1 pass in 250 trials '0%': unsolved)
                            "text": [
                                ["" if v is None else percent_text(v) for v in rates] for rates in z
                            ],
                            "hovertemplate": "%{y}<br>" + axis + " %{x}: %{text}<extra></extra>",
                        }
                    ],
                    "layout": _layout(
                        data,
                        f"task pass rate by {axis}: {shown(label)}",
                        "task",
                        label,
                        height=height,
                        yaxis={
                            "autorange": "reversed",
                            "automargin": True,
                            "type": "category",
                            # the whole id stays the category (hover shows it); the tick is short
                            "tickmode": "array",
                            "tickvals": [shown(t.task_id) for t in trends],
                            "ticktext": [shown(_short_label(t.task_id)) for t in trends],
                        },
                    ),
                },
            }
        )
    return figures


def all_figures(data: ReportData) -> list[dict[str, Any]]:
    return [
        *metric_figures(data),
        *stop_reason_figures(data),
        *token_figures(data),
        *datum_figures(data),
        *heatmap_figures(data),
        *problem_figures(data),
    ]


# ---------------------------------------------------------------------------------------------
# HTML


def _table(headers: list[str], rows: list[list[Any]], empty: str) -> str:
    if not rows:
        return f"<p class='empty'>{html.escape(empty)}</p>"
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_text(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return percent_text(value) if 0 <= value <= 1 else f"{value:g}"
    return str(value)


def _flip_rows(flips: list[Flip], regression: bool) -> list[list[Any]]:
    rows = []
    for f in flips:
        row: list[Any] = [f.series, f.task_id, f.at, f.pass_rate, f.steps_failed]
        if not regression:
            row.append(f.still_solved)
        rows.append(row)
    return rows


# Why a chart of a section has nothing to draw: said under it, so an empty plot never stands
# alone (its axes would read as a measurement of nothing).
EMPTY_CHART_NOTES = {
    "metrics": "no measurement: every point is a null measurement (no executed, graded or "
    "stop-reasoned trial in its batches)",
    "stop": "no stop reason to count: its batches hold no readable trial",
    "tokens": "no tokens measured: no trial of the selected batches recorded token spans (a gap, "
    "not 0)",
    "datums": "no datum figure measured in the selected batches",
    "problems": "no problem to count",
    "tasks": "no pass rate: no trial of its tasks was executed (every trial an infra failure)",
}


def _measured(figure: dict[str, Any]) -> bool:
    """Whether a figure has a value to draw (a line's or bar's y, a heatmap's z)."""
    for trace in figure["figure"]["data"]:
        values = trace.get("z", trace.get("y")) or []
        rows = values if trace.get("type") == "heatmap" else [values]
        if any(value is not None for row in rows for value in row):
            return True
    return False


def _charts(figures: list[dict[str, Any]], section: str) -> str:
    """The section's chart divs; one with nothing to draw has a line under it saying why."""
    parts = []
    for figure in figures:
        if figure["section"] != section:
            continue
        chart = f"<div class='chart' id='{html.escape(figure['id'])}'></div>"
        empty = figure.get("empty_note") or (
            None if _measured(figure) else EMPTY_CHART_NOTES[section]
        )
        if empty is not None:
            note = html.escape(empty)
            chart = f"<div>{chart}<p class='empty'>{note}</p></div>"
        parts.append(chart)
    return "".join(parts)


def _runs_without_tasks(data: ReportData) -> str:
    """A line for each run with no task executed in its batches: it has no heatmap at all."""
    return "".join(
        f"<p class='empty'>{html.escape(label)}: no heatmap: no trial of its batches was "
        "executed (every trial an infra failure, or none readable)</p>"
        for label in data.points
        if not data.trends.get(label)
    )


STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px; color: #222;
       background: #fff; }
h1 { font-size: 22px; margin-bottom: 4px; } h2 { font-size: 18px; margin-top: 32px;
     border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #555; font-size: 13px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 12px; }
.chart { min-height: 260px; border: 1px solid #eee; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; }
th { background: #f3f3f3; } .empty { color: #777; font-style: italic; }
.warn { color: #8a4b00; background: #fff4e0; padding: 4px 8px; }
"""

RENDER_SCRIPT = """
(function () {
  const figures = JSON.parse(document.getElementById('wmo-figures').textContent);
  const config = {displaylogo: false, displayModeBar: false, responsive: true};
  Promise.all(figures.map(f => Plotly.newPlot(f.id, f.figure.data, f.figure.layout, config)))
    .then(() => { document.body.dataset.rendered = String(figures.length); })
    .catch(error => { console.error('wmo-lake report: ' + error); });
})();
"""


# Characters escaped in JSON put in a <script>: '<' (a '</script' closes the element, a
# '<!--<script' keeps the parser in the script through the next one), '>' and '&' (the same
# for the parsers of other contexts), and U+2028/U+2029 (line ends to older JavaScript). They
# can only occur inside JSON strings, where the \uXXXX escape reads back as the character.
SCRIPT_ESCAPES = str.maketrans({c: f"\\u{ord(c):04x}" for c in ("<", ">", "&", "\u2028", "\u2029")})


def _json_in_script(value: Any) -> str:
    """JSON safe inside <script>: no character the HTML parser acts on is left in it."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False).translate(SCRIPT_ESCAPES)


def _js_in_script(code: str) -> str:
    """Script text that cannot close its element early (plotly.js has no '</script' today)."""
    return re.sub(r"</(script)", lambda m: "<\\/" + m.group(1), code, flags=re.IGNORECASE)


def render_html(data: ReportData, js: str | None = None) -> str:
    """The whole page as one string (plotly.js inlined unless `js` is given)."""
    figures = all_figures(data)
    js = plotly_js() if js is None else js
    runs = ", ".join(data.series) or "none"
    n_trials = sum(r["trials"] for r in data.batches)
    settings_table = _table(
        ["variable", "value", "set by", "meaning"],
        [
            [s["variable"], s["value"], "option" if s["given"] else "default", s["meaning"]]
            for s in data.settings
        ],
        "no settings",
    )
    settings_view_table = _table(
        ["column", "value"],
        [[k, v] for k, v in data.settings_view.items()],
        "no settings view",
    )
    caps_table = _table(
        ["max_turns", "max_tokens", "batches", "trials"],
        [[c["max_turns"], c["max_tokens"], c["batches"], c["trials"]] for c in data.caps],
        "no trials",
    )
    datum_caps_table = _table(
        ["context_budget", "max_datum_tokens", "batches"],
        [[c["context_budget"], c["max_datum_tokens"], c["batches"]] for c in data.datum_caps],
        "no datum episodes",
    )
    unbatched = _table(
        ["kind", "problems"],
        [[k, n] for k, n in data.unbatched_problems.items()],
        "none",
    )
    datum_section = (
        f"<div class='grid'>{_charts(figures, 'datums')}</div>"
        if data.datums_computable
        else f"<p class='empty'>{html.escape(data.datum_note)}</p>"
    )
    # (the page is read later, from anywhere: the command names the lake, absolute)
    problems_command = (
        f"wmo-lake sql{hint_lake_option(os.path.abspath(data.lake))} "
        '"SELECT * FROM problems WHERE batch IS NULL"'
    )
    problems_section = _charts(figures, "problems") or (
        "<p class='empty'>no problems recorded for the selected batches</p>"
    )
    selection = (
        ", ".join(f"{k} = {v}" for k, v in data.selection.items() if v is not None) or "every batch"
    )
    by_batch = [label for label, x_mode in data.x_modes.items() if x_mode == "batch"]
    x_note = (
        "x axis: the training step"
        if not by_batch
        else "x axis: batches in run/step order (some batches have no step)"
        if data.x_mode == "batch"
        else "x axis: the training step; by batch in run/step order for "
        + ", ".join(by_batch)
        + " (a batch without a step)"
    )
    body = f"""
<h1>wmo-lake report</h1>
<div class="sub">lake {html.escape(data.lake)} · {len(data.batches)} batches · {n_trials} trials ·
runs: {html.escape(runs)} · selection: {html.escape(selection)} · {html.escape(x_note)} ·
generated {html.escape(data.generated_at)} by wmo-lake {html.escape(data.version)}</div>
{_incomplete_job_warnings(data)}<h2>Per-step metrics (rollout_stats)</h2>
<p class="sub">A gap is a null measurement (an empty denominator: no executed, graded or
stop-reasoned trial), never a 0.</p>
<div class="grid">{_charts(figures, "metrics")}</div>
<h2>Stop-reason mix</h2>
<div class="grid">{_charts(figures, "stop")}</div>
<h2>Tokens</h2>
<div class="grid">{_charts(figures, "tokens")}</div>
<h2>Datums (datum_stats)</h2>
{datum_section}
<h2>Tasks</h2>
<p class="sub">Pass rate = passed / executed trials of the task at that step; blank = not executed.
Tasks ordered by trend (least-squares slope over steps), most improved at the top.</p>
{_charts(figures, "tasks")}{_runs_without_tasks(data)}
<h3>Regressions: solved at a step, failed at every later one</h3>
{
        _table(
            ["run", "task", "last solved at", "pass rate then", "later steps failed"],
            _flip_rows(data.regressions, True),
            "no regressions",
        )
    }
<h3>Newly solved: failed at every earlier step, then solved</h3>
{
        _table(
            [
                "run",
                "task",
                "first solved at",
                "pass rate then",
                "earlier steps failed",
                "solved at the last step",
            ],
            _flip_rows(data.newly_solved, False),
            "no newly solved tasks",
        )
    }
<h2>Problems</h2>
<div class="grid">{problems_section}</div>
<h3>Problems not tied to a batch</h3>
<p class="sub">The whole lake's: no batch holds them, so no --run or --batch narrows them.
<code>{html.escape(problems_command)}</code> lists each.</p>
{unbatched}
<h2>Settings the numbers were computed under</h2>
{settings_table}
<h3>The settings view (SELECT * FROM settings; NULL: each trial's recorded value applies)</h3>
{settings_view_table}
<h3>Caps applied per trial (trial_caps)</h3>
{caps_table}
<h3>Datum budgets applied (datum_episodes)</h3>
{datum_caps_table}
"""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>wmo-lake report: {html.escape(runs)}</title><style>{STYLE}</style>"
        f"<script>{_js_in_script(js)}</script></head><body>{body}"
        "<script type='application/json' id='wmo-figures'>"
        f"{_json_in_script(figures)}</script>"
        f"<script>{RENDER_SCRIPT}</script></body></html>\n"
    )


def read_figures(page: str) -> list[dict[str, Any]]:
    """The figures a page holds, read back from its embedded JSON (what plotly.js draws)."""
    start_tag = "<script type='application/json' id='wmo-figures'>"
    start = page.index(start_tag) + len(start_tag)
    end = page.index("</script>", start)
    return json.loads(page[start:end])


def write_report(data: ReportData, out: Path) -> Path:
    """Write the page to `out` (through a temporary file and a rename, so never half-written;
    a symlink is written through, see wmo_lake.output.written_atomically)."""
    from wmo_lake.output import written_atomically

    text = render_html(data)
    with written_atomically(out) as target:
        target.partial.write_text(text, encoding="utf-8")
    return out
