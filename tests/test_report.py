"""`wmo-lake report`: the page is self-contained, every plotted point is the lake's number (read
back out of the HTML and compared with queries on the views), a null measurement is a gap, the
task tables name the regressed and newly solved tasks, and usage errors say what to do."""

from __future__ import annotations

import html
import json
import re
import shlex
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from harbor_shapes import write_job, write_sink, write_trial
from run_shapes import ctrf_report, write_split_step_run

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.report.data import collect_report, measured
from wmo_lake.report.page import STOP_COLORS, _run_style, _step_ticks, heatmap_figures
from wmo_lake.terminal import percent_text

EMPTY_STEP = "exp-a/harbor/step-0004/job"  # only unreadable trials: every rate is unmeasured
RATE_DENOMINATORS = {
    "solve_rate": "executed_trials",
    "graded_solve_rate": "graded_trials",
    "raw_solve_rate": "trials",
}


class _Scripts(HTMLParser):
    """Every <script> of a page: (attributes, text)."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.links: list[dict[str, str | None]] = []
        self._open: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "script":
            self._open = dict(attrs)
            self.scripts.append((self._open, ""))
        if tag in ("link", "img", "iframe"):
            self.links.append(dict(attrs))

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._open = None


def parse(page: str) -> _Scripts:
    parser = _Scripts()
    parser.feed(page)
    return parser


def figures_of(page: str) -> dict[str, dict[str, Any]]:
    """The figures plotly.js draws, read from the page's data script, by chart id."""
    [(_, text)] = [(a, t) for a, t in parse(page).scripts if a.get("id") == "wmo-figures"]
    return {f["id"]: f["figure"] for f in json.loads(text)}


def report(lake: Path, out: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["report", "--lake", str(lake), "--out", str(out), *args])


@pytest.fixture(scope="module")
def page(two_runs_lake: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = report(two_runs_lake, out)
    assert result.exit_code == 0, result.output
    assert f"wrote {out} (12 batches, 198 trials, runs: exp-a, exp-b)" in result.output
    return out.read_text(encoding="utf-8")


def lake_rows(lake: Path, sql: str) -> list[dict[str, Any]]:
    relation = connect(lake).sql(sql)
    return [dict(zip(relation.columns, row, strict=True)) for row in relation.fetchall()]


def tokens_per_step(lake: Path) -> dict[int, dict[str, Any]]:
    """Prompt and sampled tokens of each step's spans (only the steps that have spans)."""
    sql = (
        "SELECT step, sum(prompt_len) AS prompt, sum(n_sampled) AS sampled FROM spans GROUP BY step"
    )
    return {r["step"]: r for r in lake_rows(lake, sql)}


def points(trace: dict[str, Any]) -> dict[str, Any]:
    """batch -> plotted y of one trace."""
    return dict(zip(trace["customdata"], trace["y"], strict=True))


def test_page_is_self_contained(page: str) -> None:
    parsed = parse(page)
    assert all("src" not in attrs for attrs, _ in parsed.scripts), "a script loads from a URL"
    assert parsed.links == [], "the page links a resource"
    assert "http://" not in page.split("<script>", 1)[0]
    [plotly] = [text for attrs, text in parsed.scripts if len(text) > 1_000_000]
    assert "plotly.js" in plotly[:500]  # the library itself, inlined


def test_every_metric_point_is_the_rollout_stats_value(page: str, two_runs_lake: Path) -> None:
    stats = {r["batch"]: r for r in lake_rows(two_runs_lake, "SELECT * FROM rollout_stats")}
    with_reason = {
        r["batch"]: r["n"]
        for r in lake_rows(
            two_runs_lake,
            "SELECT batch, count(*) FILTER (WHERE stop_reason <> '') AS n "
            "FROM trial_records GROUP BY batch",
        )
    }
    figures = figures_of(page)
    checked = 0
    for key in (*RATE_DENOMINATORS, "scaffold_loss_rate"):
        traces = figures[f"metric-{key}"]["data"]
        assert {t["name"] for t in traces} == {"exp-a", "exp-b"}
        plotted = {b: y for t in traces for b, y in points(t).items()}
        assert set(plotted) == set(stats), key  # every batch is a point or a gap
        for batch, y in plotted.items():
            row = stats[batch]
            denominator = (
                with_reason.get(batch, 0)
                if key == "scaffold_loss_rate"
                else row[RATE_DENOMINATORS[key]]
            )
            assert y == (row[key] if denominator else None), (key, batch)
            checked += 1
    for key, numerator in (
        ("infra_failed_share", "infra_failed_trials"),
        ("empty_span_share", "empty_span_trials"),
        ("truncated_spans", None),
    ):
        for trace in figures[f"metric-{key}"]["data"]:
            for batch, y in points(trace).items():
                row = stats[batch]
                expected = (
                    None
                    if not row["trials"]
                    else row["truncated_spans"]
                    if numerator is None
                    else row[numerator] / row["trials"]
                )
                assert y == expected, (key, batch)
                checked += 1
    assert checked == 7 * len(stats)


def test_null_measurement_is_a_gap_never_zero(page: str, two_runs_lake: Path) -> None:
    [row] = lake_rows(two_runs_lake, f"SELECT * FROM rollout_stats WHERE batch = '{EMPTY_STEP}'")
    assert row["trials"] == 0 and row["solve_rate"] == 0.0  # the view's 0.0 for "no data"
    for figure_id, figure in figures_of(page).items():
        if not figure_id.startswith(("metric-", "tokens-")):
            continue
        [trace] = [t for t in figure["data"] if t["name"] == "exp-a"]
        assert points(trace)[EMPTY_STEP] is None, figure_id
        assert trace["connectgaps"] is False


def test_stop_reasons_tokens_and_datums_are_the_views_numbers(
    page: str, two_runs_lake: Path
) -> None:
    figures = figures_of(page)
    stats = {r["batch"]: r for r in lake_rows(two_runs_lake, "SELECT * FROM rollout_stats")}
    for run in ("exp-a", "exp-b"):
        for trace in figures[f"stop-{run}"]["data"]:
            reason = trace["name"]
            for batch, y in points(trace).items():
                row = stats[batch]
                if not row["trials"]:
                    assert y is None, batch
                    continue
                assert y == row["stop_reason_counts"].get(reason, 0) / row["trials"], batch
    tokens = {
        r["batch"]: r
        for r in lake_rows(
            two_runs_lake,
            "SELECT batch, sum(len(prompt_token_ids)) AS prompt, sum(len(sampled_token_ids)) "
            "AS sampled, count(*) AS turns FROM spans_full GROUP BY batch",
        )
    }
    for trace in figures["tokens-prompt_tokens"]["data"]:
        for batch, y in points(trace).items():
            assert y == (tokens[batch]["prompt"] if batch in tokens else None), batch
    for trace in figures["tokens-sampled_tokens"]["data"]:
        for batch, y in points(trace).items():
            assert y == (tokens[batch]["sampled"] if batch in tokens else None), batch
    for trace in figures["tokens-turns_per_trial"]["data"]:
        for batch, y in points(trace).items():
            with_spans = stats[batch]["trials_with_spans"]
            assert y == (tokens[batch]["turns"] / with_spans if with_spans else None)
    datum_stats = {r["batch"]: r for r in lake_rows(two_runs_lake, "SELECT * FROM datum_stats")}
    for run in ("exp-a", "exp-b"):
        by_name = {t["name"]: points(t) for t in figures[f"datums-{run}"]["data"]}
        for batch, datums in by_name["datums"].items():
            row = datum_stats.get(batch)
            assert datums == (row["datums"] if row else None)
            if row:
                assert by_name["dropped: overflow"][batch] == row["overflow_drops"]
                assert by_name["episodes kept"][batch] == row["kept_episodes"]


def test_episodes_kept_are_the_episodes_not_dropped(tmp_path: Path) -> None:
    """A context_overflow trial without spans is an overflow drop but no episode: kept episodes
    are not episodes - drops (that read 1 here), but the 2 episodes the datums came from."""
    sinks = tmp_path / "tokens"  # a pi-bridge job: its sinks give the spans, traces the reason
    job = write_job(
        tmp_path / "runs" / "exp" / "harbor" / "step-0000" / "job", token_sink_dir=str(sinks)
    )
    for name in ("kept-1", "kept-2"):
        write_sink(sinks, name, [([1, 2, 3], [4, 5], [-0.1, -0.2])])
        write_trial(job, name, task_name="demo/a", trace={"stop_reason": "submitted"})
    write_trial(job, "overflowed", task_name="demo/a", trace={"stop_reason": "context_overflow"})
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "r.html"
    assert report(tmp_path / "lake", out).exit_code == 0
    plotted = {t["name"]: t["y"] for t in figures_of(out.read_text())["datums-exp"]["data"]}
    assert plotted == {
        "episodes kept": [2],
        "dropped: overflow": [1],
        "dropped: overlong": [0],
        "datums": [2],
    }


def test_heatmap_is_cells_pass_rate_ordered_by_trend(page: str, two_runs_lake: Path) -> None:
    figures = figures_of(page)
    cells = {
        (r["batch"], r["task_id"]): r["rate"]
        for r in lake_rows(
            two_runs_lake,
            "SELECT batch, task_id, avg(passed::INT) AS rate FROM cells "
            "WHERE NOT infra_failed GROUP BY ALL",
        )
    }
    [heatmap] = figures["heatmap-exp-a"]["data"]
    steps = heatmap["x"]
    assert steps == [0, 1, 2, 3, 4, 5]
    for task, row in zip(heatmap["y"], heatmap["z"], strict=True):
        for step, z in zip(steps, row, strict=True):
            expected = cells.get((f"exp-a/harbor/step-{step:04d}/job", task))
            assert z == pytest.approx(expected) if expected is not None else z is None
    # the hover's text is the rate as the CLI prints it (plotly's '.0%' rounded 0.4% to 0%)
    assert heatmap["hovertemplate"].endswith(": %{text}<extra></extra>")
    assert heatmap["text"] == [
        ["" if z is None else percent_text(z) for z in row] for row in heatmap["z"]
    ]
    # most improved first: task-5 (0% until step 3, then ~80%) above task-4 (regresses)
    order = heatmap["y"]
    assert order.index("task-5") < order.index("task-4")
    assert order[-1] == "task-4"


def test_regressions_and_newly_solved_tables(page: str) -> None:
    regressions = page.split("<h3>Regressions", 1)[1].split("<h3>", 1)[0]
    newly = page.split("<h3>Newly solved", 1)[1].split("<h3>", 1)[0]
    assert "<td>exp-a</td><td>task-4</td>" in regressions
    assert "<td>exp-a</td><td>task-5</td>" in newly
    assert "task-5" not in regressions
    # exp-b never solves task-5: neither table
    assert "<td>exp-b</td><td>task-5</td>" not in page


def test_a_step_of_two_batches_is_one_step_of_the_heatmap_and_flips(tmp_path: Path) -> None:
    """Two job dirs at one step are that step's pass rate pooled (passed / executed of both),
    not two steps: the batch after the first at step 0 was read as a later step."""
    write_split_step_run(tmp_path / "runs")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    data = collect_report(tmp_path / "lake", runs=["exp-s"])
    [heatmap] = [f["figure"]["data"][0] for f in heatmap_figures(data)]
    assert heatmap["x"] == [0, 1]
    rates = dict(zip(heatmap["y"], heatmap["z"], strict=True))
    assert rates == {"task-r": [0.5, 0.0], "task-n": [0.0, 0.5]}
    step_0 = ["exp-s/harbor/step-0000/job", "exp-s/harbor/step-0000/job-b"]
    [regression] = data.regressions
    assert (regression.task_id, regression.at, regression.batches) == ("task-r", 0, step_0)
    assert (regression.steps_failed, regression.pass_rate) == (1, 0.5)
    [newly] = data.newly_solved
    assert (newly.task_id, newly.at, newly.steps_failed, newly.pass_rate) == ("task-n", 1, 1, 0.5)


def test_a_flip_of_a_run_drawn_by_batch_names_every_batch_of_its_step(tmp_path: Path) -> None:
    """A run with a batch without a step is drawn batch by batch; its flips still read its steps,
    a step of two job dirs pooled: the flip named the step's first batch alone (where the task
    failed) beside the two batches' pooled rate."""
    runs = write_split_step_run(tmp_path / "runs")
    write_trial(
        write_job(runs / "exp-s" / "harbor" / "rerun"), "task-r__0", task_name="demo/task-r"
    )
    ingest([runs], tmp_path / "lake", workers=1)
    data = collect_report(tmp_path / "lake", runs=["exp-s"])
    step_0 = ["exp-s/harbor/step-0000/job", "exp-s/harbor/step-0000/job-b"]
    [regression] = data.regressions
    assert (regression.at, regression.batches, regression.pass_rate) == (
        " + ".join(step_0),
        step_0,
        0.5,
    )


def test_every_per_step_chart_pools_a_step_of_two_batches(tmp_path: Path) -> None:
    """A step of two job dirs is one point of every chart, its batches pooled: they were two
    points at one x (stop-reason shares stacked to 200%, tokens two halves of the step's)."""
    write_split_step_run(tmp_path / "runs")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "r.html"
    assert report(tmp_path / "lake", out).exit_code == 0
    figures = figures_of(out.read_text())
    step_0 = "exp-s/harbor/step-0000/job + exp-s/harbor/step-0000/job-b"
    for figure_id, figure in figures.items():
        for trace in figure["data"]:
            assert trace["x"] == [0, 1], figure_id
            if trace["type"] != "heatmap":
                assert trace["customdata"] == [step_0, "exp-s/harbor/step-0001/job"], figure_id
    # SPLIT_STEP: step 0 holds 6 trials, 2 passing; step 1 holds 3, 1 passing; none infra-failed
    [solve] = figures["metric-solve_rate"]["data"]
    assert solve["y"] == [2 / 6, 1 / 3]
    [raw] = figures["metric-raw_solve_rate"]["data"]
    assert raw["y"] == [2 / 6, 1 / 3]
    shares = [trace["y"] for trace in figures["stop-exp-s"]["data"]]
    assert [sum(column) for column in zip(*shares, strict=True)] == pytest.approx([1.0, 1.0])
    per_step = tokens_per_step(tmp_path / "lake")
    [prompt] = figures["tokens-prompt_tokens"]["data"]
    assert prompt["y"] == [per_step[0]["prompt"], per_step[1]["prompt"]]
    [sampled] = figures["tokens-sampled_tokens"]["data"]
    assert sampled["y"] == [per_step[0]["sampled"], per_step[1]["sampled"]]
    datums = {t["name"]: t["y"] for t in figures["datums-exp-s"]["data"]}
    [(datums_0,)] = (
        connect(tmp_path / "lake")
        .sql("SELECT sum(datums) FROM datum_stats WHERE step = 0")
        .fetchall()
    )
    assert datums["datums"][0] == datums_0


def test_tokens_of_a_step_without_spans_are_a_gap_not_zero(tmp_path: Path) -> None:
    """A step whose trials recorded no token spans did not use 0 tokens: its token points are
    gaps, as its turns per trial already were; a step of two job dirs sums the one that has
    spans (they were drawn as 0 and as that sum alike)."""
    run = tmp_path / "runs" / "exp-t" / "harbor"
    for batch, spans in (
        ("step-0000/job", True),
        ("step-0001/job", False),
        ("step-0002/job", True),
        ("step-0002/job-b", False),
    ):
        job = write_job(run / batch)
        write_trial(job, "t__1", reward=1.0, **({} if spans else {"rollout_details": None}))
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "r.html"
    assert report(tmp_path / "lake", out).exit_code == 0
    figures = figures_of(out.read_text())
    per_step = tokens_per_step(tmp_path / "lake")
    assert sorted(per_step) == [0, 2]  # the tree is as designed
    [prompt] = figures["tokens-prompt_tokens"]["data"]
    assert prompt["y"] == [per_step[0]["prompt"], None, per_step[2]["prompt"]]
    [sampled] = figures["tokens-sampled_tokens"]["data"]
    assert sampled["y"] == [per_step[0]["sampled"], None, per_step[2]["sampled"]]
    [turns] = figures["tokens-turns_per_trial"]["data"]
    assert turns["y"][1] is None


def test_a_batch_without_a_step_changes_only_its_own_runs_charts(tmp_path: Path) -> None:
    """exp-s keeps its steps (step 0 pooled) beside a run of batches without a step; a chart
    the runs share shows both on one category axis, steps first."""
    write_split_step_run(tmp_path / "runs")
    for parent in ("a", "b"):  # outside any run's steps: batches a/rollouts, b/rollouts
        write_trial(write_job(tmp_path / "other" / parent / "rollouts"), "task-x__1")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    ingest([tmp_path / "other"], tmp_path / "lake", workers=1)
    out = tmp_path / "r.html"
    assert report(tmp_path / "lake", out).exit_code == 0
    figures = figures_of(out.read_text())
    [heatmap] = figures["heatmap-exp-s"]["data"]
    assert heatmap["x"] == [0, 1]
    assert dict(zip(heatmap["y"], heatmap["z"], strict=True)) == {
        "task-r": [0.5, 0.0],
        "task-n": [0.0, 0.5],
    }
    assert figures["heatmap-exp-s"]["layout"]["xaxis"].get("type") != "category"
    [stepless] = figures["heatmap-no-run"]["data"]
    assert stepless["x"] == ["a/rollouts", "b/rollouts"]
    shared = figures["metric-solve_rate"]
    assert [trace["x"] for trace in shared["data"]] == [
        ["step 0", "step 1"],
        ["a/rollouts", "b/rollouts"],
    ]
    assert shared["layout"]["xaxis"]["categoryarray"] == [
        "step 0",
        "step 1",
        "a/rollouts",
        "b/rollouts",
    ]


def test_runs_named_alike_but_for_punctuation_get_their_own_charts(tmp_path: Path) -> None:
    """'exp.1' and 'exp_1' both slug to 'exp-1': their charts shared one div id, so plotly drew
    one run's charts into the other's place and the first run's never appeared."""
    for run, reward in (("exp.1", 1.0), ("exp_1", 0.0)):
        job = write_job(tmp_path / "runs" / run / "harbor" / "step-0000" / "job")
        write_trial(job, "t__1", reward=reward)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "r.html"
    assert report(tmp_path / "lake", out).exit_code == 0
    page = out.read_text()
    div_ids = [a.split("'")[0] for a in page.split("<div class='chart' id='")[1:]]
    assert len(div_ids) == len(set(div_ids))
    figures = figures_of(page)
    assert sorted(figures) == sorted(div_ids)
    for kind in ("stop", "heatmap"):
        runs = [f["data"][0]["meta"]["series"] for i, f in figures.items() if i.startswith(kind)]
        assert sorted(runs) == ["exp.1", "exp_1"], kind


def test_names_in_the_page_data_cannot_end_or_stall_its_script(tmp_path: Path) -> None:
    """A task named '<!--<script>' kept the HTML parser inside the data script past its end,
    swallowing the render script (a blank page): the data holds no '<', '>', '&', U+2028 or
    U+2029, and reads back as the names themselves."""
    name = "<!--<script>&\u2028\u2029"
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0000" / "job")
    write_trial(job, "t__1", task_name=f"demo/{name}")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "r.html"
    assert report(tmp_path / "lake", out).exit_code == 0
    page = out.read_text()
    data = page.split("<script type='application/json' id='wmo-figures'>", 1)[1]
    data = data.split("</script>", 1)[0]
    assert not set(data) & {"<", ">", "&", "\u2028", "\u2029"}
    [heatmap] = figures_of(page)["heatmap-exp"]["data"]
    # (y is the task as plotly is given it to draw it as it is: '<' and '&' as entities)
    assert [html.unescape(y) for y in heatmap["y"]] == [name]
    assert heatmap["y"] == ["&lt;!--&lt;script&gt;&amp;\u2028\u2029"]
    assert page.count("<script") == 3  # plotly.js, the data, the render script


def test_the_step_axis_ticks_whole_steps_only(page: str) -> None:
    """plotly's own ticks on a short step range fell between steps (0, 0.2, 0.4, ...)."""
    for figure_id, figure in figures_of(page).items():
        xaxis = figure["layout"]["xaxis"]
        assert (xaxis["tickmode"], xaxis["tick0"], xaxis["dtick"]) == ("linear", 0, 1), figure_id
    # about ten ticks at most, every 1, 2, 5, 10, 20, ... steps
    assert [_step_ticks([0, last])["dtick"] for last in (1, 10, 11, 21, 120, 1001)] == [
        1,
        1,
        2,
        5,
        20,
        200,
    ]


def test_runs_and_stop_reasons_are_drawn_apart(tmp_path: Path) -> None:
    """Past 8 runs the palette repeats (run 9 was drawn as run 1): the dash and marker change
    with each round, so the first 336 runs all differ. A stop reason with no fixed colour took a
    palette colour a fixed reason uses (no_tool_call drawn as budget)."""
    styles = [_run_style(i) for i in range(8 * 6 * 7)]
    looks = {(s["line"]["color"], s["line"]["dash"], s["marker"]["symbol"]) for s in styles}
    assert len(looks) == len(styles)
    assert styles[8]["line"]["color"] == styles[0]["line"]["color"]  # the palette's 8, again
    assert styles[8]["line"]["dash"] != styles[0]["line"]["dash"]
    sinks = tmp_path / "tokens"  # a pi-bridge job: its traces give the stop reasons
    job = write_job(
        tmp_path / "runs" / "pi" / "harbor" / "step-0000" / "job", token_sink_dir=str(sinks)
    )
    reasons = ["budget", "context_overflow", "no_tool_call", "submitted", "zz_other"]
    for reason in reasons:
        write_trial(job, f"{reason}__1", trace={"stop_reason": reason})
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "r.html"
    assert report(tmp_path / "lake", out).exit_code == 0
    colors = {
        t["name"]: t["marker"]["color"] for t in figures_of(out.read_text())["stop-pi"]["data"]
    }
    assert sorted(colors) == reasons
    assert len(set(colors.values())) == len(reasons)
    fixed = {"budget": "#D55E00", "context_overflow": "#CC79A7", "submitted": "#009E73"}
    assert {reason: colors[reason] for reason in fixed} == fixed
    assert not {colors["no_tool_call"], colors["zz_other"]} & set(STOP_COLORS.values())


def rates_lake(tmp_path: Path) -> Path:
    """Run `exp`: step 1 passes 1 test of 300 (graded 0.33%), step 2 passes 299 (99.67%)."""
    for step, passed in ((1, 1), (2, 299)):
        job = write_job(tmp_path / "runs" / "exp" / "harbor" / f"step-{step:04d}" / "job")
        write_trial(job, "t__1", reward=passed / 300, ctrf=ctrf_report(passed, 300 - passed))
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    return tmp_path / "lake"


def test_a_rate_hovers_as_the_cli_prints_it_never_rounded_to_0_or_100(tmp_path: Path) -> None:
    """plotly's `%{y}` took the rate axis' '.0%' tick format: 1 test in 300 hovered as '0%'
    (never solved) and 299 as '100%'. Every rate trace hovers its `percent_text`."""
    out = tmp_path / "r.html"
    assert report(rates_lake(tmp_path), out).exit_code == 0
    figures = figures_of(out.read_text())
    [graded] = figures["metric-graded_solve_rate"]["data"]
    assert graded["hovertext"] == ["0.3%", "99.7%"]
    assert "%{hovertext}" in graded["hovertemplate"] and "%{y}" not in graded["hovertemplate"]
    rate_traces = [
        trace
        for figure_id, figure in figures.items()
        if figure_id.startswith(("metric-", "stop-"))
        and figure["layout"]["yaxis"].get("tickformat") == ".0%"
        for trace in figure["data"]
    ]
    assert len(rate_traces) == 6 + 1  # six rate metrics, one stop reason
    for trace in rate_traces:
        shown = ["" if y is None else percent_text(y) for y in trace["y"]]
        assert trace["hovertext"] == shown, trace["meta"]
        assert "%{hovertext}" in trace["hovertemplate"]
    [tokens] = figures["tokens-prompt_tokens"]["data"]  # (a count hovers as it is)
    assert "hovertext" not in tokens and "%{y}" in tokens["hovertemplate"]


def test_a_long_task_id_is_a_short_tick_and_whole_on_hover(tmp_path: Path) -> None:
    """A ~250-character task id took the heatmap's whole width as its tick label: the tick
    keeps 30 characters, an ellipsis and the last 15; the category (hover) is the whole id."""
    long_id = "very-long-task-name-" * 12 + "end"
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0000" / "job")
    for task in (long_id, "plain"):
        write_trial(job, f"{task[:20]}__1", task_name=f"demo/{task}")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "r.html"
    assert report(tmp_path / "lake", out).exit_code == 0
    figure = figures_of(out.read_text())["heatmap-exp"]
    [heatmap] = figure["data"]
    assert sorted(heatmap["y"]) == sorted([long_id, "plain"])
    yaxis = figure["layout"]["yaxis"]
    ticks = dict(zip(yaxis["tickvals"], yaxis["ticktext"], strict=True))
    assert ticks == {
        long_id: "very-long-task-name-very-long-\u2026g-task-name-end",
        "plain": "plain",
    }
    assert "%{y}" in heatmap["hovertemplate"]


def test_problems_per_step_by_kind(page: str, two_runs_lake: Path) -> None:
    expected = {
        (r["batch"], r["kind"]): r["n"]
        for r in lake_rows(
            two_runs_lake, "SELECT batch, kind, count(*) AS n FROM problems GROUP BY ALL"
        )
    }
    plotted = {
        (batch, trace["name"]): y
        for trace in figures_of(page)["problems-exp-a"]["data"]
        for batch, y in points(trace).items()
        if y
    }
    assert plotted == expected
    assert "problems-exp-b" not in figures_of(page)  # exp-b recorded none


def test_problems_tied_to_no_batch_are_shown_for_a_selection_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A symlink loop in a run's step dir is a problem of no batch: `--run` said 'none'."""
    step = tmp_path / "runs" / "exp" / "harbor" / "step-0001"
    write_trial(write_job(step / "job"), "t__1")
    (step / "loop").symlink_to("..")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    for args in ((), ("--run", "exp"), ("--batch", "exp/*")):
        out = tmp_path / "r.html"
        assert report(tmp_path / "lake", out, *args).exit_code == 0
        section = out.read_text().split("<h3>Problems not tied to a batch</h3>", 1)[1]
        section = section.split("<h2>", 1)[0]
        assert "<td>symlink_loop</td><td>1</td>" in section, args
    # the page's command lists them, run from any dir: it names the lake
    (command,) = re.findall(r"<code>(wmo-lake sql [^<]*)</code>", html.unescape(section))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    listed = CliRunner().invoke(cli, [*shlex.split(command)[1:], "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert [row["kind"] for row in json.loads(listed.stdout)] == ["symlink_loop"]


def test_figures_are_valid_plotly(page: str) -> None:
    graph_objects = pytest.importorskip("plotly.graph_objects")
    for figure in figures_of(page).values():
        graph_objects.Figure(figure)  # raises on any attribute plotly does not know


def test_settings_the_numbers_were_computed_under(two_runs_lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = report(two_runs_lake, out, "--run", "exp-b", "--max-tokens", "3")
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "<td>wmo_max_tokens</td><td>3</td><td>option</td>" in page
    assert "<td>wmo_reward_key</td><td>reward</td><td>default</td>" in page
    view = page.split("<h3>The settings view", 1)[1].split("</table>", 1)[0]
    [expected] = lake_rows(two_runs_lake, "SET VARIABLE wmo_max_tokens = 3; FROM settings")
    assert "<td>max_tokens</td><td>3</td>" in view
    for column, value in expected.items():
        shown = "-" if value is None else str(value)
        assert f"<td>{column}</td><td>{shown}</td>" in view, column
    figures = figures_of(page)
    assert {t["name"] for t in figures["metric-solve_rate"]["data"]} == {"exp-b"}
    truncated = {
        r["batch"]: r["truncated_spans"]
        for r in lake_rows(two_runs_lake, "SET VARIABLE wmo_max_tokens = 3; FROM rollout_stats")
        if r["run"] == "exp-b"
    }
    [trace] = figures["metric-truncated_spans"]["data"]
    assert points(trace) == truncated
    assert sum(truncated.values()) > 0


def test_batch_glob_selects(two_runs_lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    result = report(two_runs_lake, out, "--batch", "exp-a/*step-000[0-2]*")
    assert result.exit_code == 0, result.output
    [trace] = figures_of(out.read_text())["metric-solve_rate"]["data"]
    assert trace["x"] == [0, 1, 2]


def test_usage_errors(two_runs_lake: Path, tmp_path: Path) -> None:
    result = report(two_runs_lake, tmp_path / "r.html", "--run", "nope")
    assert result.exit_code == 2  # a typo, listing the runs as `compare` does
    assert "no batch matches --run 'nope'; `wmo-lake stats --lake " in result.output
    assert "lists the batches (runs: exp-a, exp-b)" in result.output
    # one run of an overlay that matches nothing is not left out without a word
    result = report(two_runs_lake, tmp_path / "r.html", "--run", "exp-a", "--run", "exp-z")
    assert result.exit_code == 2
    assert "no batch matches --run 'exp-z' (the others do: exp-a)" in result.output
    # (a run the --batch glob leaves out exists: the glob is what matched none of it)
    result = report(
        two_runs_lake, tmp_path / "r.html", "--run", "exp-a", "--run", "exp-b", "--batch", "exp-a/*"
    )
    assert result.exit_code == 2
    assert "no batch matches --run 'exp-b' within --batch 'exp-a/*' (the others" in result.output
    result = report(two_runs_lake, tmp_path)
    assert result.exit_code == 2 and "is a directory" in result.output
    result = report(two_runs_lake, tmp_path / "missing" / "r.html")
    assert result.exit_code == 2 and "does not exist" in result.output
    for name in ("r.pdf", "r"):  # HTML in a file named otherwise would lie about its content
        result = report(two_runs_lake, tmp_path / name)
        message = f"--out {tmp_path / name}: the report is one HTML page; name it "
        assert result.exit_code == 2 and f"{message}{tmp_path / 'r.html'}\n" in result.output
        assert not (tmp_path / name).exists()
    result = CliRunner().invoke(cli, ["report", "--lake", str(two_runs_lake)])
    assert result.exit_code == 2 and "--out" in result.output
    result = report(tmp_path / "no-lake", tmp_path / "r.html")
    assert result.exit_code == 1 and "wmo-lake ingest" in result.output
    assert not (tmp_path / "r.html").exists()


def test_without_plotly_the_error_says_how_to_install(
    two_runs_lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # import fails as if absent
    result = report(two_runs_lake, tmp_path / "r.html")
    assert result.exit_code == 1
    assert "pip install 'wmo-lake[report]'" in result.output
    assert not (tmp_path / "r.html").exists()


def test_bundled_runs_without_steps(fixtures_dir: Path, tmp_path: Path) -> None:
    """Batches with no step are categories on the x axis, in run/step order."""
    from wmo_lake.ingest import ingest

    ingest([fixtures_dir / "harbor"], tmp_path / "lake", workers=1)
    result = report(tmp_path / "lake", tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    figure = figures_of((tmp_path / "r.html").read_text())["metric-solve_rate"]
    assert figure["layout"]["xaxis"]["type"] == "category"
    assert figure["data"][0]["x"] == ["kit-e2e", "offline-demo", "offline-terminus2"]


def test_datum_budgets_are_those_datum_episodes_applied(two_runs_lake: Path) -> None:
    from wmo_lake.report.data import collect_report

    for settings in ({}, {"wmo_context_budget": 7, "wmo_max_datum_tokens": 9}):
        data = collect_report(two_runs_lake, settings)
        con = connect(two_runs_lake, settings)
        expected = con.sql(
            "SELECT context_budget, max_datum_tokens, count(DISTINCT batch) AS batches "
            "FROM datum_episodes GROUP BY ALL ORDER BY ALL"
        ).fetchall()
        got = [(c["context_budget"], c["max_datum_tokens"], c["batches"]) for c in data.datum_caps]
        assert got == expected


def test_the_reward_key_is_checked_on_the_reported_trials(tmp_path: Path) -> None:
    """A key that only another run of the lake has made every reported trial an infra failure
    without a word (the check was over the whole lake)."""
    write_trial(write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0000" / "job"), "t__1")
    scored = write_job(tmp_path / "runs" / "scored" / "harbor" / "step-0000" / "job")
    write_trial(scored, "t__1", rewards={"score": 1.0})
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    warned = report(tmp_path / "lake", tmp_path / "a.html", "--run", "exp", "--reward-key", "score")
    assert warned.exit_code == 0, warned.output
    assert "warning: reward key 'score' occurs in no trial in scope" in warned.stderr
    assert "'reward' (1 trials)" in warned.stderr
    quiet = report(tmp_path / "lake", tmp_path / "b.html", "--reward-key", "score")
    assert quiet.exit_code == 0 and "warning" not in quiet.stderr, quiet.stderr


def test_batches_of_no_run_from_two_trees_are_never_pooled(tmp_path: Path) -> None:
    """Job dirs under no `<run>/harbor/` have no run, yet a step from their `step-NNNN` dir:
    two experiments' step 1 (one solved, one failed) were drawn as one '(no run)' point at 50%.
    Batches of no run from two trees go batch by batch, tree by tree; one tree keeps its steps."""
    for tree, reward in (("expA", 1.0), ("expB", 0.0)):
        for step in (1, 2):
            job = write_job(tmp_path / "runs" / tree / f"step-{step:04d}" / "job")
            write_trial(job, "t__1", reward=reward)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "r.html"
    assert report(tmp_path / "lake", out).exit_code == 0
    [trace] = figures_of(out.read_text())["metric-solve_rate"]["data"]
    assert trace["name"] == "(no run)"
    assert trace["customdata"] == [
        "expA/step-0001/job",
        "expA/step-0002/job",
        "expB/step-0001/job",
        "expB/step-0002/job",
    ]
    assert trace["y"] == [1.0, 1.0, 0.0, 0.0]
    alone = tmp_path / "alone.html"  # (one tree: its steps are the x, as a run's)
    assert report(tmp_path / "lake", alone, "--batch", "expA/*").exit_code == 0
    [trace] = figures_of(alone.read_text())["metric-solve_rate"]["data"]
    assert (trace["x"], trace["y"]) == ([1, 2], [1.0, 1.0])


def test_flips_and_trends_follow_each_tree_and_only_steps(tmp_path: Path) -> None:
    """The regressions read a series' batches in their column order: the batches of no run tree
    by tree (expB's steps were 'later' than expA's), and a run's batch without a step after its
    steps (`r/harbor/rerun`). Neither experiment regressed; expC, which did, still does."""
    runs = tmp_path / "runs"
    for tree, rewards in (("expA", (1.0, 1.0)), ("expB", (0.0, 0.0)), ("expC", (1.0, 0.0))):
        for step, reward in enumerate(rewards, start=1):
            write_trial(write_job(runs / tree / f"step-{step:04d}" / "job"), "t__1", reward=reward)
    write_trial(write_job(runs / "r" / "harbor" / "step-0001" / "job"), "t__1", reward=1.0)
    write_trial(write_job(runs / "r" / "harbor" / "rerun"), "t__1", reward=0.0)
    ingest([runs], tmp_path / "lake", workers=1)
    data = collect_report(tmp_path / "lake")
    [regression] = data.regressions
    assert (regression.series, regression.at, regression.batches) == (
        "(no run)",
        "expC/step-0001/job",
        ["expC/step-0001/job"],
    )
    assert (regression.steps_failed, regression.pass_rate) == (1, 1.0)
    assert data.newly_solved == []
    # (its trend too: expA's level above expB's is no slope; expC's fall is, over its own steps)
    [trend] = data.trends["(no run)"]
    assert trend.slope == pytest.approx(-1.0 / 3)  # (0 + 0 - 1) over three trees' two steps
    [trend] = data.trends["r"]
    assert trend.slope == 0.0


def test_a_chart_with_nothing_to_draw_says_why(page: str, tmp_path: Path) -> None:
    """A run whose batches hold no readable trial drew empty axes (a stop-reason chart of no
    trace, token charts of no point) and no heatmap, with no word; now each such chart has a
    line under it, and the run without a heatmap is named. A page of measured charts has none."""
    from edge_case_trees import write_unreadable_trial

    from wmo_lake.report.page import EMPTY_CHART_NOTES

    job = write_job(tmp_path / "runs" / "dead" / "harbor" / "step-0000" / "job")
    write_unreadable_trial(job, "gone__1", "missing")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert report(tmp_path / "lake", tmp_path / "r.html", "--run", "dead").exit_code == 0
    dead = (tmp_path / "r.html").read_text(encoding="utf-8")
    for section, prefix in (("metrics", "metric-"), ("stop", "stop-"), ("tokens", "tokens-")):
        note = html.escape(EMPTY_CHART_NOTES[section])
        charts = [chart for chart in figures_of(dead) if chart.startswith(prefix)]
        assert dead.count(f"<p class='empty'>{note}</p>") == len(charts) > 0, section
    assert "<p class='empty'>dead: no heatmap: no trial of its batches was executed" in dead
    for note in EMPTY_CHART_NOTES.values():
        assert html.escape(note) not in page
    assert ": no heatmap:" not in page


def test_a_runs_datums_chart_without_spans_says_why(tmp_path: Path) -> None:
    """exp2 recorded no token spans while exp1 did, so the datums section is drawn: exp2's chart
    showed bars of 0 (upstream's build_datums builds no datum of a record without spans) with no
    line saying why, where its token charts have one."""
    from wmo_lake.report.page import DATUMS_WITHOUT_SPANS

    for step in (1, 2):
        spans = write_job(tmp_path / "runs" / "exp1" / "harbor" / f"step-000{step}" / "job")
        write_trial(spans, "a__1", reward=1.0, turns=[([1, 2], [3], [-0.1])])
        bare = write_job(tmp_path / "runs" / "exp2" / "harbor" / f"step-000{step}" / "job")
        write_trial(bare, "a__1", reward=0.0, rollout_details=None)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert report(tmp_path / "lake", tmp_path / "r.html").exit_code == 0
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    note = f"<p class='empty'>{html.escape(DATUMS_WITHOUT_SPANS)}</p>"
    assert f"<div class='chart' id='datums-exp2'></div>{note}" in page
    assert page.count(note) == 1  # (exp1's chart has datums)
    [datums] = [t for t in figures_of(page)["datums-exp2"]["data"] if t["name"] == "datums"]
    assert datums["y"] == [0, 0]


# The report's (and `stats`') own per-batch and per-task denominators follow seed 003's
# `rollout_stats`:
# - scaffold loss's denominator is `[r for r in records if r.stop_reason]`: an EMPTY stop reason
#   (a pi-bridge trace's `"stop_reason": ""`) is no stop reason. Seed 003 on two records with
#   stop_reason "" gave scaffold_loss_rate 0.0 over an empty denominator, stop_reason_counts
#   {"unknown": 2}; the report's with_stop_reason is 0 and its scaffold-loss point a gap (None).
# - a task's pass rate per step is passed / EXECUTED trials, as solve_rate counts them: seed 003 on
#   one passed trial and one infra-failed trial gave solve_rate 1.0 (executed_trials 1).
# Kills report/data.py's STOP_REASON_DENOMINATOR counting `stop_reason IS NOT NULL`, and its
# TASK_CELLS counting every trial as executed.
def test_an_empty_stop_reason_is_no_stop_reason(tmp_path: Path) -> None:
    job = write_job(
        tmp_path / "runs/exp/harbor/step-0000/job", token_sink_dir=str(tmp_path / "sinks")
    )
    (tmp_path / "sinks").mkdir()
    write_trial(job, "pi__1", reward=0.0, trace={"stop_reason": ""})
    write_trial(job, "pi__2", reward=1.0, trace={"stop_reason": ""})
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    (row,) = collect_report(tmp_path / "lake").batches
    assert row["trials"] == 2
    assert row["with_stop_reason"] == 0  # seed 003: len([r for r in records if r.stop_reason])
    assert row["scaffold_loss_rate"] == 0.0  # seed 003's value over an empty denominator
    assert measured(row, "scaffold_loss_rate") is None  # a gap, not a measured 0


def test_a_tasks_pass_rate_is_over_its_executed_trials(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs/exp/harbor/step-0000/job")
    write_trial(job, "hello__1", task_name="hello", reward=1.0)
    write_trial(job, "hello__2", task_name="hello", never_ran=True)  # infra-failed
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    data = collect_report(tmp_path / "lake")
    (trends,) = data.trends.values()
    assert [(t.task_id, t.pass_rates) for t in trends] == [("hello", [1.0])]  # seed: 1/1


def _two_trees_of_one_run_name(root: Path) -> Path:
    """treeA/exp and treeB/exp: their job dirs carry the same batch labels, pooled as one."""
    for tree, reward in (("treeA", 1.0), ("treeB", 0.0)):
        job = write_job(root / "runs" / tree / "exp" / "harbor" / "step-0000" / "job")
        write_trial(job, "t__1", trial_id=f"{tree}-t", reward=reward)
    write_trial(write_job(root / "runs" / "other" / "harbor" / "step-0000" / "job"), "t__1")
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"


def test_a_batch_pooled_from_two_job_dirs_is_said_by_the_report(tmp_path: Path) -> None:
    """`stats` notes a batch label two job dirs carry (two run trees with one run name): its
    figures are of both. The report drew the pooled points without a word."""
    lake = _two_trees_of_one_run_name(tmp_path)
    result = report(lake, tmp_path / "r.html")
    assert result.exit_code == 0, result.output
    assert (
        "warning: 1 batch(es) in scope pool the trials of several job dirs that carry one batch "
        "label: exp/harbor/step-0000/job;"
    ) in result.output
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "1 batch(es) pool the trials of several job dirs" in page
    alone = report(lake, tmp_path / "other.html", "--run", "other")
    assert alone.exit_code == 0 and "pool the trials" not in alone.output, alone.output
    assert "pool the trials" not in (tmp_path / "other.html").read_text(encoding="utf-8")


def test_run_names_in_the_reports_lines_are_printable(tmp_path: Path) -> None:
    """A run dir named with an escape sequence reached the terminal raw in `wrote ... runs:`
    and in the error for a --run that matches nothing (`stats` draws it as `\\x1b`)."""
    runs = tmp_path / "runs"
    write_trial(write_job(runs / "ev\x1b[31mil" / "harbor" / "step-0000" / "job"), "t__1")
    ingest([runs], tmp_path / "lake", workers=1)
    lake, out = str(tmp_path / "lake"), str(tmp_path / "r.html")
    for extra, code in (([], 0), (["--run", "ev\x1b[31mil", "--run", "nope"], 2)):
        result = CliRunner().invoke(
            cli, ["report", "--lake", lake, "--out", out, *extra], color=True
        )
        assert result.exit_code == code, result.output
        assert "ev\\x1b[31mil" in result.output and "\x1b" not in result.output, result.output
