"""The report in a real browser: Debian's headless Chromium (driven over the DevTools pipe,
tests/browser.py) opens the page with the network blocked; no console error, no request leaves
the machine, every chart is drawn (a non-empty SVG with marks in its plot area), and a full-page
screenshot is written for a human (`WMO_LAKE_SCREENSHOT=docs/report.png` also copies it there:
`make screenshot`).

make test installs chromium as root when it is missing (.ci/system-deps); without it these tests
fail (not skip)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from browser import Browser
from click.testing import CliRunner
from test_report import rates_lake

from wmo_lake.cli import cli

pytestmark = pytest.mark.slow

# Per chart: its size, and the marks plotly drew in the plot area (lines, bars, heatmap image).
CHART_STATE = """
Array.from(document.querySelectorAll('.chart')).map(div => {
  const svg = div.querySelector('svg.main-svg');
  const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
  const marks = div.querySelectorAll(
    '.scatterlayer path.js-line, .scatterlayer path.point, .barlayer path, ' +
    '.heatmaplayer image');
  const drawn = Array.from(marks).filter(m => {
    const b = m.getBBox ? m.getBBox() : {width: 1, height: 1};
    return b.width > 0 || b.height > 0;
  });
  return {id: div.id, width: box.width, height: box.height, marks: drawn.length,
          traces: (div.data || []).length};
})
"""


def test_report_renders_offline_in_chromium(two_runs_lake: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    result = CliRunner().invoke(cli, ["report", "--lake", str(two_runs_lake), "--out", str(out)])
    assert result.exit_code == 0, result.output
    with Browser.launch() as browser:
        page = browser.open(out.as_uri())
        rendered = page.wait_for("document.body && document.body.dataset.rendered")
        charts = page.evaluate(CHART_STATE)
        screenshot = page.screenshot(tmp_path / "report.png")
        assert browser.errors == []
        assert browser.blocked == []  # the page asked for nothing beyond its own file
    print(f"screenshot: {screenshot}")
    assert int(rendered) == len(charts) >= 17
    ids = {chart["id"] for chart in charts}
    assert {"metric-solve_rate", "stop-exp-a", "heatmap-exp-a", "datums-exp-b"} <= ids
    for chart in charts:
        assert chart["width"] > 100 and chart["height"] > 100, chart
        assert chart["traces"] > 0 and chart["marks"] > 0, chart
    png = screenshot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000
    target = os.environ.get("WMO_LAKE_SCREENSHOT")
    if target:
        shutil.copyfile(screenshot, target)


# The hover label plotly draws for one point of a chart's first trace.
HOVER = """
new Promise(done => {
  const chart = document.getElementById(%r);
  Plotly.Fx.hover(chart, [{curveNumber: 0, pointNumber: %d}]);
  setTimeout(() => done(Array.from(chart.querySelectorAll('.hovertext'))
    .map(label => label.textContent).join(' | ')), 200);
})
"""


def test_a_rate_hovers_with_the_clis_percent_text(tmp_path: Path) -> None:
    """plotly formats `%{y}` with the axis' '.0%': a graded solve rate of 1 test in 300 hovered
    as '0%' and 299 as '100%'. Drawn in the browser, the hover says 0.3% and 99.7%."""
    out = tmp_path / "report.html"
    result = CliRunner().invoke(
        cli, ["report", "--lake", str(rates_lake(tmp_path)), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    with Browser.launch() as browser:
        page = browser.open(out.as_uri())
        page.wait_for("document.body && document.body.dataset.rendered")
        labels = [page.evaluate(HOVER % ("metric-graded_solve_rate", i)) for i in (0, 1)]
        assert browser.errors == []
    # (each label: the run, then the batch and the rate)
    assert labels[0].endswith("step-0001/job0.3%") and labels[1].endswith("job99.7%"), labels


def test_the_harness_sees_errors_and_blocks_the_network(tmp_path: Path) -> None:
    """The checks above can fail: a console error, an uncaught exception and a request to the
    network are each caught here."""
    page_file = tmp_path / "bad.html"
    page_file.write_text(
        "<html><body><img src='http://example.com/x.png'>"
        "<script>console.error('boom'); fetch('https://example.org/data.json')"
        ".catch(() => {}); document.body.dataset.done = '1'; undefinedName();</script>"
        "</body></html>"
    )
    with Browser.launch() as browser:
        page = browser.open(page_file.as_uri())
        page.wait_for("document.body && document.body.dataset.done")
        page.wait_for("true")  # one more round trip: the events arrive
        assert any("console.error: boom" in e for e in browser.errors), browser.errors
        assert any("undefinedName" in e for e in browser.errors), browser.errors
        assert "http://example.com/x.png" in browser.blocked
        network = page.evaluate("fetch('https://example.org/x').then(() => 'ok', () => 'failed')")
        assert network == "failed"


# What a reader sees of each chart: its title, legend entries, tick labels.
CHART_TEXT = """
Array.from(document.querySelectorAll('.chart')).map(div => ({
  id: div.id,
  title: (div.querySelector('.gtitle') || {}).textContent,
  legend: Array.from(div.querySelectorAll('.legendtext')).map(e => e.textContent),
  xticks: Array.from(div.querySelectorAll('.xtick text')).map(e => e.textContent),
  yticks: Array.from(div.querySelectorAll('.ytick text')).map(e => e.textContent),
}))
"""


def test_names_are_drawn_as_they_are(tmp_path: Path) -> None:
    """plotly reads tags and entities in every name, title, tick and hover, and fills `%{...}`
    in names and titles: the runs `a&amp;b` (all pass) and `a&b` (all fail) had one legend entry
    `a&b`, `a%{x}b` and `ab` another, and `x<b>y` lost its `<b>`. Each is drawn as it is, in
    legends, titles, batch ticks and hovers, and a crowded batch axis is still thinned."""
    from harbor_shapes import write_job, write_trial

    from wmo_lake.ingest import ingest

    runs = {"a&amp;b": 1.0, "a&b": 0.0, "x<b>y\"'": 1.0, "a%{x}b": 0.0, "ab": 1.0}
    for run, reward in runs.items():
        for step in (0, 1):
            job = write_job(tmp_path / "runs" / run / "harbor" / f"step-{step:04d}" / "job")
            write_trial(job, "t__0", reward=reward, task_name="demo/<b>task&amp;%{y}")
    # a run whose 80 batches have no step: its x ticks are its batches, too many to draw all
    batches = [f"job&lt;{i:02d}" for i in range(80)]
    for batch in batches:
        write_trial(write_job(tmp_path / "runs" / "b<br>c" / "harbor" / batch), "t__0")
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "report.html"
    result = CliRunner().invoke(
        cli, ["report", "--lake", str(tmp_path / "lake"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    with Browser.launch() as browser:
        page = browser.open(out.as_uri())
        page.wait_for("document.body && document.body.dataset.rendered")
        charts = {chart["id"]: chart for chart in page.evaluate(CHART_TEXT)}
        # (a heatmap's point is hovered by its x and y: the first column's first row)
        hovers = {
            chart: page.evaluate(
                HOVER.replace("[{curveNumber: 0, pointNumber: %d}]", "%s") % (chart, at)
            )
            for chart, at in (
                ("metric-solve_rate", "[{curveNumber: 0, pointNumber: 0}]"),
                ("stop-x-b-y", "[{curveNumber: 0, pointNumber: 0}]"),
                ("heatmap-x-b-y", "{xval: 0, yval: 0}"),
                ("heatmap-b-br-c", "{xval: 0, yval: 0}"),
            )
        }
        assert browser.errors == []
    assert sorted(charts["metric-solve_rate"]["legend"]) == sorted([*runs, "b<br>c"])
    assert charts["stop-x-b-y"]["title"] == "stop-reason mix: x<b>y\"'"
    assert charts["stop-a-amp-b"]["title"] == "stop-reason mix: a&amp;b"
    assert charts["stop-a-b"]["title"] == "stop-reason mix: a&b"
    assert charts["stop-a--x-b"]["title"] == "stop-reason mix: a%{x}b"
    assert charts["stop-ab"]["title"] == "stop-reason mix: ab"
    ticks = charts["stop-b-br-c"]["xticks"]
    assert 1 < len(ticks) < len(batches), ticks  # (plotly's own thinning)
    assert set(ticks) <= {f"b<br>c/harbor/{batch}" for batch in batches}, ticks
    assert charts["heatmap-x-b-y"]["yticks"] == ["<b>task&amp;%{y}"]
    # (a hover's text: the trace's box first, then the batch and the value)
    assert hovers["metric-solve_rate"] == "a%{x}b" + "a%{x}b/harbor/step-0000/job0.0%"
    assert hovers["stop-x-b-y"] == "x<b>y\"'/harbor/step-0000/job" + "submitted: 100.0%"
    assert hovers["heatmap-x-b-y"] == "<b>task&amp;%{y}step 0: 100.0%"
    assert hovers["heatmap-b-br-c"] == "hello-offlinebatch b<br>c/harbor/job&lt;00: 100.0%"
