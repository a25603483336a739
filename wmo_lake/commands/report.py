"""`wmo-lake report`: one offline HTML page of per-step health, for one run or several overlaid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import duckdb

from wmo_lake.commands.options import (
    datum_options,
    fail,
    fail_if_damaged,
    lake_failure,
    lake_hint,
    lake_option,
    missing_dir_text,
    refuse_fd_output,
    refuse_lake_file,
    refuse_long_name,
    refuse_no_match,
    setting_options,
    settings_from,
)
from wmo_lake.store import LakeError
from wmo_lake.terminal import printable


@click.command()
@lake_option
@click.option(
    "--run",
    "runs",
    multiple=True,
    metavar="RUN",
    help="A run to show (repeat to overlay several; '(no run)' for batches outside a run). "
    "Default: every run.",
)
@click.option(
    "--batch",
    "batch_glob",
    metavar="GLOB",
    help="Only batches matching this glob ('*' crosses '/'), e.g. 'exp1/harbor/step-00*/*'.",
)
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The HTML file to write (FILE.html; replaced if it exists).",
)
@setting_options
@datum_options
def report(
    lake: Path, runs: tuple[str, ...], batch_glob: str | None, out: Path, **options: Any
) -> None:
    """Write one self-contained HTML page of a training run's health across steps.

    The page opens with no network and no server (plotly.js and every number are inlined): per
    step the rollout_stats rates (solve, graded, raw, scaffold loss), infra-failed and empty-span
    shares and truncated spans, a line per run, where a null measurement (0 executed / 0 graded
    trials) is a gap and never a 0; the stop-reason mix (stacked); prompt and sampled tokens and
    turns per trial; datum_stats (episodes kept, dropped by reason, datums) when the batches have
    token spans; a task x step pass-rate heatmap, tasks ordered by trend; regressions and newly
    solved tasks; problems per step by kind; and the settings and caps the numbers were computed
    under. Hover a point for its batch.

    Needs the `report` extra (plotly): pip install 'wmo-lake[report]'.

    \b
    Examples:
      wmo-lake report --out report.html
      wmo-lake report --run exp1 --run exp2 --out exp1-vs-exp2.html
      wmo-lake report --batch 'exp1/harbor/step-000[1-4]/*' --max-tokens 4096 --out r.html
    """
    from wmo_lake.report.data import collect_report
    from wmo_lake.report.page import PlotlyMissing, write_report

    refuse_long_name(out, "--out")
    if out.exists() and out.is_dir():
        fail(f"--out {out} is a directory; give the HTML file to write", 2)
    if out.suffix.lower() not in (".html", ".htm"):  # a file's name never lies about its content
        fail(f"--out {out}: the report is one HTML page; name it {out.with_suffix('.html')}", 2)
    if not out.parent.is_dir():
        fail(f"--out {out}: {missing_dir_text(out.parent)}", 2)
    refuse_lake_file(out, lake, "--out")
    refuse_fd_output(out, "--out")
    try:
        data = collect_report(lake, settings_from(options), runs=list(runs), batch_glob=batch_glob)
    except LakeError as error:
        lake_failure(None, lake, error)
    except duckdb.Error as error:
        fail_if_damaged(lake, error)
        fail(f"report query failed: {error}")
    list_batches = f"`wmo-lake stats{lake_hint(click.get_current_context(), lake)}`"
    if not data.batches:
        wanted = " ".join(
            [f"--run {r!r}" for r in runs] + ([f"--batch {batch_glob!r}"] if batch_glob else [])
        )
        if not wanted:
            fail(f"the lake at {lake} has no batches yet")
        no_match = f"no batch matches {wanted}; {list_batches} lists the batches"
        refuse_no_match(lake, no_match)
        fail(no_match)  # (the lake has no batches at all)
    missing = [run for run in runs if run not in data.series]
    if missing:  # an overlay never loses a mistyped run without a word
        within = f" within --batch {batch_glob!r}" if batch_glob else ""
        fail(
            f"no batch matches --run {', '.join(map(repr, missing))}{within} (the others do: "
            f"{printable(', '.join(data.series))}); {list_batches} lists the batches; nothing "
            "was written",
            2,
        )
    try:
        write_report(data, out)
    except PlotlyMissing as error:
        fail(str(error))
    except OSError as error:  # (a read-only or full dir, /proc)
        fail(f"cannot write {out}: {error.strerror or error}")
    n_trials = sum(row["trials"] for row in data.batches)
    click.echo(
        f"wrote {out} ({len(data.batches)} batches, {n_trials} trials, "
        f"runs: {printable(', '.join(data.series))})"
    )
