"""`wmo-lake report`: one self-contained HTML page of a training run's health across steps.

Two layers, so the numbers stay the lake's numbers:
- `wmo_lake.report.data` queries the views (rollout_stats, datum_stats, cells, trial_stop_reasons,
  spans, problems, trial_caps) and returns plain rows; no plotting library is imported there, so
  `wmo-lake compare` and `wmo-lake stats --by task` reuse it.
- `wmo_lake.report.page` turns those rows into plotly figures (plain JSON) and writes one HTML file
  with plotly.js inlined: it opens with no network and no server.

    data = collect_report(Path("lake"), {}, runs=["exp1"])
    write_report(data, Path("report.html"))
"""

from wmo_lake.report.data import ReportData, collect_report

__all__ = ["ReportData", "collect_report"]
