"""`python -m bench` (`make bench`): the benchmark items of issues 2, 3, 4, 5, 9, 10 and 14.

Every figure with a goal is a RATIO against an anchor measured in the same run (single-threaded
`orjson.loads` of the same files (bench/baselines), or the same result computed in plain Python by
the reference implementations the tests also use, reference/),
or a size; bare seconds appear only as detail, except the goals the issues state in seconds
(stats over a 100k-trial lake < 1 s, opening a 1,000-step lake < 0.1 s, the report < 5 s). Each
ratio is the median over --repeat runs, the anchor and the measured command interleaved so both
see the same machine load. A goal is checked on the exact figure; the printed value is rounded,
but never across its goal.

    ingest        issues 2.9, 14.1, 14.6  realistic tree (harbor's indent=4 result.json, ~10 MB
                                          per trial)
    small         issue 14.2  8,192 small trials vs orjson.loads of their result.json; trials/s
    growth        issue 14.5  one step into a 1,000-step lake vs into an empty one; opening it
    stats         issues 3.5, 14.7  `wmo-lake stats --json` vs re-reading the trial dirs;
                                    100k-trial lake
    export        issues 4.6, 14.4  `wmo-lake export datums` vs the prefix merge in plain Python
    prompts       issue 14.4  SELECT * FROM spans_full vs orjson re-reading the prompts
    trajectories  issues 5.5, 14.3  trajectory ingest vs orjson.loads of the same trajectory.json
    report        issue 10.4  `wmo-lake report` over 100 steps x 1,000 trials (goal < 5 s)
    sql           issue 9.2   `wmo-lake sql --format csv` vs DuckDB's own COPY; 9.3 light records

Commands run as subprocesses (process start included), their peak memory sampled with psutil
over the whole process tree. Trees and lakes are cached in --out, keyed by their parameters.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from bench import baselines, realistic_trees, synthetic
from reference import oracle
from reference.datums import DatumTotals, datums_from_spans

BENCHES = (
    "ingest",
    "small",
    "growth",
    "stats",
    "export",
    "prompts",
    "trajectories",
    "report",
    "sql",
)
SMALL_TRIALS = 8192  # issue 14.2: trials of the many-small-trials ingest
GROWTH_STEPS = 1000  # issue 14.5: steps the big lake holds at least
REPORT_STEPS = 100  # the report bench's tree: --tiny-trials spread over this many steps
DEFAULT_OUT = Path(__file__).resolve().parent / "out"
MIB = 2**20
FLAT_RSS_GROWTH = 1.25  # "flat in the number of trials": 4x the trials may cost at most 25% more

# Every figure the report carries, in print order: (bench, name, unit, goal text, goal check).
Goal = Callable[[Any], bool] | None
FIGURES: list[tuple[str, str, str, str, Goal]] = [
    ("ingest", "throughput_ratio", "x", ">= 2.0x (issue 14.1)", lambda v: v >= 2.0),
    ("ingest", "msgspec_floor_ratio", "x", "(detail)", None),
    ("ingest", "throughput_mb_s", "MB/s", "(detail)", None),
    ("ingest", "peak_rss_small_mib", "MiB", "<= 1024 MiB", lambda v: v <= 1024),
    ("ingest", "peak_rss_full_mib", "MiB", "<= 1024 MiB", lambda v: v <= 1024),
    (
        "ingest",
        "peak_rss_growth",
        "x",
        f"<= {FLAT_RSS_GROWTH}x (flat)",
        lambda v: v <= FLAT_RSS_GROWTH,
    ),
    ("ingest", "reingest_fraction", "of first", "<= 0.1", lambda v: v <= 0.1),
    ("ingest", "lake_size_ratio", "x smaller", ">= 50x", lambda v: v >= 50),
    ("stats", "speedup_vs_python", "x", ">= 10x", lambda v: v >= 10),
    ("stats", "agrees_with_python", "", "true", lambda v: v is True),
    ("stats", "tiny_lake_stats_seconds", "s", "< 1 s", lambda v: v < 1.0),
    ("stats", "tiny_lake_view_seconds", "s", "(detail)", None),
    ("export", "tokens_per_s_ratio", "x", ">= 2x (issue 14.4)", lambda v: v >= 2),
    ("export", "tokens_per_s", "tok/s", "(detail)", None),
    ("export", "parquet_mb_s", "MB/s", "(detail)", None),
    ("export", "agrees_with_python", "", "true", lambda v: v is True),
    ("small", "throughput_ratio", "x", ">= 1.0x (issue 14.2)", lambda v: v >= 1.0),
    ("small", "trials_per_s", "trials/s", ">= 3000 (issue 14.2)", lambda v: v >= 3000),
    ("small", "peak_rss_mib", "MiB", "<= 1024 MiB (issue 14.6)", lambda v: v <= 1024),
    ("growth", "add_step_ratio", "x", "<= 1.5x (issue 14.5)", lambda v: v <= 1.5),
    ("growth", "open_seconds", "s", "< 0.1 s (issue 14.5)", lambda v: v < 0.1),
    ("prompts", "spans_full_ratio", "x", ">= 1x (issue 14.4)", lambda v: v >= 1),
    ("prompts", "spans_full_seconds", "s", "(detail)", None),
    ("trajectories", "throughput_ratio", "x", ">= 0.5x (issue 14.3)", lambda v: v >= 0.5),
    ("trajectories", "throughput_mb_s", "MB/s", "(detail)", None),
    ("trajectories", "marginal_throughput_ratio", "x", "(detail)", None),
    ("report", "hundred_step_report_seconds", "s", "< 5 s", lambda v: v < 5.0),
    ("report", "report_over_stats", "x", "(detail)", None),
    ("sql", "csv_vs_duckdb_copy", "x its time", "<= 1.2x", lambda v: v <= 1.2),
    ("sql", "csv_peak_rss_mib", "MiB", "<= 1024 MiB", lambda v: v <= 1024),
    ("sql", "csv_rows_equal_copy", "", "true", lambda v: v is True),
    ("sql", "light_records_vs_cells", "x", "<= 1.5x", lambda v: v <= 1.5),
    ("sql", "records_with_spans_seconds", "s", "(detail)", None),
]


# (bench, name) -> its row of FIGURES
SPECS: dict[tuple[str, str], tuple[str, str, str, str, Goal]] = {(f[0], f[1]): f for f in FIGURES}


@dataclass
class Figure:
    bench: str
    name: str
    value: Any
    unit: str
    goal: str
    met: bool | None  # None: no goal, or not measured
    detail: str = ""


@dataclass
class Report:
    options: dict[str, Any]
    figures: dict[str, Figure] = field(default_factory=dict)
    measurements: dict[str, Any] = field(default_factory=dict)
    # the machine's speed, measured before the benches (see baselines.interpreter_seconds)
    interpreter_seconds: float | None = None

    def set(self, bench: str, name: str, value: Any, detail: str = "") -> None:
        """Record a figure at full precision: its goal is checked on the exact value (a median
        ratio of 1.99984 rounded to 2.0 had read as >= 2x), `render` rounds it for the eye."""
        spec = SPECS[bench, name]
        check = spec[4]
        met = None if check is None or value is None else bool(check(value))
        self.figures[f"{bench}.{name}"] = Figure(bench, name, value, spec[2], spec[3], met, detail)

    def unavailable(self, bench: str, reason: str) -> None:
        for spec in FIGURES:
            if spec[0] == bench and f"{bench}.{spec[1]}" not in self.figures:
                self.set(bench, spec[1], None, f"not measured: {reason}")

    def as_dict(self) -> dict[str, Any]:
        figures = [asdict(self.figures[f"{b}.{n}"]) for b, n, *_ in FIGURES]
        goals = [f for f in figures if f["goal"] != "(detail)"]
        return {
            "generated_at": datetime.now(UTC).isoformat(),
            "host": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "load_average": os.getloadavg(),
                "cpu_model": baselines.cpu_model(),
                "interpreter_seconds": self.interpreter_seconds,
            },
            "options": self.options,
            "figures": figures,
            "goals_met": [f"{f['bench']}.{f['name']}" for f in goals if f["met"] is True],
            "goals_missed": [f"{f['bench']}.{f['name']}" for f in goals if f["met"] is False],
            "not_measured": [f"{f['bench']}.{f['name']}" for f in figures if f["value"] is None],
            "measurements": self.measurements,
        }


# ---------------------------------------------------------------------------------------------
# Running the real command, measured


@dataclass
class Run:
    seconds: float
    peak_tree_rss: int  # bytes: the process and all its descendants, summed at each sample
    peak_process_rss: int  # bytes: the largest single process seen
    stdout: str
    stderr: str
    returncode: int


def wmo_lake_command() -> list[str]:
    script = Path(sys.executable).parent / "wmo-lake"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from wmo_lake.cli import main; main()"]


def run_measured(args: list[str], interval: float = 0.02, sample: bool = True) -> Run:
    """Run `wmo-lake ARGS`, sampling the RSS of it and every child until it exits."""
    return run_command([*wmo_lake_command(), *args], interval, sample)


def run_command(command: list[str], interval: float = 0.02, sample: bool = True) -> Run:
    """Run any command the same way (the anchors that are processes of their own). Without
    `sample`, only timed: the sampler (a walk of the process table and every member's RSS, 50
    times a second) competes for the 2 cores with the command it measures, and made a 1.7 s
    ingest take 1.9 s; a figure of speed is timed unsampled, its peak RSS from another run."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = psutil.Popen(command, stdout=out, stderr=err)
        peak_tree = peak_one = 0
        if not sample:
            proc.wait()
        while proc.poll() is None:
            total = 0
            try:
                members = [proc, *proc.children(recursive=True)]
            except psutil.Error:
                members = [proc]
            for member in members:
                try:
                    rss = member.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                peak_one = max(peak_one, rss)
            peak_tree = max(peak_tree, total)
            with contextlib.suppress(psutil.TimeoutExpired):  # (ends as soon as it exits)
                proc.wait(timeout=interval)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        run = Run(
            seconds,
            peak_tree,
            peak_one,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            proc.returncode,
        )
    if run.returncode != 0:
        raise BenchError(f"{' '.join(command)} exited {run.returncode}: {run.stderr[-2000:]}")
    return run


class BenchError(Exception):
    """A benchmark could not run; the message says which command and why."""


def command_exists(*words: str) -> bool:
    """Whether `wmo-lake WORDS...` is a command (read from the click tree, no process started)."""
    import click

    from wmo_lake.cli import cli

    command: Any = cli
    for word in words:
        if not isinstance(command, click.Group):
            return False
        command = command.get_command(click.Context(command), word)
        if command is None:
            return False
    return True


def ingest(paths: list[Path], lake: Path, workers: int | None, sample: bool = False) -> Run:
    """`wmo-lake ingest`, timed; with `sample`, its peak RSS too (see run_command)."""
    args = ["ingest", *map(str, paths), "--lake", str(lake), "--json"]
    return run_measured(args + (["--workers", str(workers)] if workers else []), sample=sample)


_READY_LAKES: dict[Path, tuple[Path, Run]] = {}


def ingested_lake_dir(tree: realistic_trees.Tree, out: Path) -> Path:
    """Where the lake of `tree` is cached: the lake format is part of the name, so a lake of an
    older layout is rebuilt, not refused."""
    from wmo_lake.store import FORMAT_VERSION

    return out / "lakes" / f"{tree.root.name}-format{FORMAT_VERSION}"


def cached_lake(tree: realistic_trees.Tree, out: Path, workers: int | None) -> Path:
    """The lake of `tree` under out/lakes/, brought up to date by a real ingest (once per run):
    incremental, so a no-op when nothing changed, a full re-read when EXTRACT_VERSION moved."""
    if tree.root not in _READY_LAKES:
        lake = ingested_lake_dir(tree, out)
        _READY_LAKES[tree.root] = (lake, ingest([tree.root], lake, workers))
    return _READY_LAKES[tree.root][0]


# The root filesystem here is ext4 without a journal, which, allocating an inode, steps one by one
# past those freed in the last 5 s (305 s while their inode table block is dirty): fs/ext4/
# ialloc.c, find_inode_bit -> recently_deleted. An ingest of 8,192 small trials (2,350 new files
# and dirs) right after an rmtree of the previous repeat's lake took 3.31-3.37 s against 2.95 s
# into a fresh dir, all of it system time. So a lake measured again is set aside (a rename frees
# no inode) and the set-aside dirs are deleted once the run is over: no measured command follows
# a mass deletion of the bench's own making.
SET_ASIDE = "set-aside"


def set_aside(path: Path, out: Path) -> None:
    """Move `path` (if it exists) out of the way, to be deleted by `empty_set_aside`."""
    if not path.exists():
        return
    trash = out / "work" / SET_ASIDE
    trash.mkdir(parents=True, exist_ok=True)
    path.rename(Path(tempfile.mkdtemp(prefix=f"{path.name}-", dir=trash)) / path.name)


def empty_set_aside(out: Path) -> None:
    shutil.rmtree(out / "work" / SET_ASIDE, ignore_errors=True)


def files_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float], unit: str = "x", digits: int = 3) -> str:
    """The repeats' range, for a detail: on a shared, noisy machine the median hides it."""
    if len(values) < 2:
        return ""
    return f"; the {len(values)} repeats {min(values):.{digits}f}-{max(values):.{digits}f}{unit}"


def mb(n_bytes: float) -> float:
    return n_bytes / 1e6


# ---------------------------------------------------------------------------------------------
# The benches


def bench_ingest(report: Report, tree: realistic_trees.Tree, args: argparse.Namespace) -> None:
    """Issue 2.9: throughput vs orjson, peak RSS at two sizes, re-ingest, lake size."""
    work = args.out / "work"
    results = tree.files("result.json")
    result_bytes = sum(p.stat().st_size for p in results)
    baselines.warm_tree(tree.root)  # the page cache warm for both sides
    small_jobs = tree.job_dirs()[: max(1, args.small_trials // tree.spec.trials_per_job)]
    small_paths = [job.parent for job in small_jobs]  # step-NNNN dirs: batch = the job dir name
    small_results = [p for job in small_jobs for p in job.glob("*/result.json")]

    ratios, ingest_seconds, anchor_seconds, full_runs = [], [], [], []
    floor_ratios = []
    lake = work / "ingest-lake"
    for _ in range(args.repeat):
        floor = baselines.msgspec_needed_fields_seconds(results)
        anchor, _ = baselines.orjson_load_seconds(results)
        set_aside(lake, args.out)
        run = ingest([tree.root], lake, args.workers)
        anchor_seconds.append(anchor)
        ingest_seconds.append(run.seconds)
        full_runs.append(run)
        ratios.append(anchor / run.seconds)
        floor_ratios.append(floor / run.seconds)
    summary = json.loads(full_runs[-1].stdout)
    if summary.get("trials_new") != len(results) or summary.get("problems"):
        raise BenchError(f"the bench tree did not ingest cleanly: {summary}")
    reingests = [ingest([tree.root], lake, args.workers) for _ in range(args.repeat)]
    reingest_s = median([r.seconds for r in reingests])
    re_summary = json.loads(reingests[-1].stdout)
    lake_bytes = files_bytes(lake)
    raw_bytes = files_bytes(tree.root) - (tree.root / realistic_trees.COMPLETE_MARK).stat().st_size

    small_lake = work / "ingest-lake-small"
    small_runs = []
    for _ in range(args.repeat):
        set_aside(small_lake, args.out)
        small_runs.append(ingest(small_paths, small_lake, args.workers, sample=True))
    set_aside(small_lake, args.out)
    set_aside(lake, args.out)  # the peak RSS of a whole first ingest, sampled
    memory_runs = [ingest([tree.root], lake, args.workers, sample=True)]

    peak_full = max(r.peak_tree_rss for r in memory_runs)
    peak_small = max(r.peak_tree_rss for r in small_runs)
    ingest_s = median(ingest_seconds)
    anchor_s = median(anchor_seconds)
    report.set(
        "ingest",
        "throughput_ratio",
        median(ratios),
        f"wmo-lake ingest {mb(result_bytes) / ingest_s:.0f} MB/s (median {ingest_s:.2f} s, "
        f"process start and commit included) vs orjson.loads {mb(result_bytes) / anchor_s:.0f} "
        f"MB/s ({anchor_s:.2f} s), over {len(results)} result.json = {mb(result_bytes):.0f} MB"
        + spread(ratios),
    )
    report.set("ingest", "throughput_mb_s", mb(result_bytes) / ingest_s)
    report.set(
        "ingest",
        "msgspec_floor_ratio",
        median(floor_ratios),
        "ingest rate / a single-threaded msgspec decode of just the fields the tables need, "
        "prompts included (the single-core floor of a JSON pass; the ingest reads the "
        "prompts from their text, so it can pass it)",
    )
    report.set(
        "ingest",
        "peak_rss_small_mib",
        peak_small / MIB,
        f"{len(small_results)} trials; largest single process "
        f"{max(r.peak_process_rss for r in small_runs) / MIB:.0f} MiB",
    )
    report.set(
        "ingest",
        "peak_rss_full_mib",
        peak_full / MIB,
        f"{len(results)} trials; RSS summed over the process tree (shared pages counted in "
        f"every process: an upper bound); largest single process "
        f"{max(r.peak_process_rss for r in memory_runs) / MIB:.0f} MiB",
    )
    report.set(
        "ingest",
        "peak_rss_growth",
        peak_full / peak_small,
        f"peak at {len(results)} trials / peak at {len(small_results)} trials",
    )
    report.set(
        "ingest",
        "reingest_fraction",
        reingest_s / ingest_s,
        f"unchanged re-ingest {reingest_s:.2f} s, process start included (trials_unchanged="
        f"{re_summary.get('trials_unchanged')}, committed={re_summary.get('committed')}) vs "
        f"first {ingest_s:.2f} s; inside the process (the summary's own `seconds`): "
        f"{re_summary.get('seconds', 0):.2f} s vs {summary.get('seconds', 0):.2f} s",
    )
    report.set(
        "ingest",
        "lake_size_ratio",
        raw_bytes / lake_bytes,
        f"raw tree {mb(raw_bytes):.0f} MB (every file) vs lake {mb(lake_bytes):.1f} MB "
        "(every file under the lake dir, lake.duckdb included)",
    )
    report.measurements["ingest"] = {
        "trials": len(results),
        "small_trials": len(small_results),
        "result_json_bytes": result_bytes,
        "mean_result_json_mb": round(mb(result_bytes) / len(results), 2),
        "raw_tree_bytes": raw_bytes,
        "lake_bytes": lake_bytes,
        "ingest_seconds": ingest_seconds,
        "orjson_seconds": anchor_seconds,
        "reingest_seconds": [r.seconds for r in reingests],
        "peak_tree_rss_full": [r.peak_tree_rss for r in memory_runs],
        "peak_tree_rss_small": [r.peak_tree_rss for r in small_runs],
        "small_ingest_seconds": [r.seconds for r in small_runs],
        "summary": summary,
    }
    set_aside(lake, args.out)


def _symlink_slice(root: Path, steps: list[Path]) -> Path:
    """A root of symlinks to real step dirs, laid out like the tree (`run/harbor/step-NNNN`)."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "run" / "harbor").mkdir(parents=True)
    for step in steps:
        (root / "run" / "harbor" / step.name).symlink_to(step, target_is_directory=True)
    return root


def _tiny_tree(args: argparse.Namespace) -> realistic_trees.Tree:
    return realistic_trees.cached(
        replace(realistic_trees.TINY, trials=args.tiny_trials), args.out, workers=args.gen_workers
    )


def bench_small(report: Report, args: argparse.Namespace) -> None:
    """Issue 14.2: 8,192 trials of harbor's smallest realistic size (the tiny tree's first
    steps, through symlinks) vs a single-threaded orjson.loads of the same result.json files."""
    tiny = _tiny_tree(args)
    steps = sorted({job.parent for job in tiny.job_dirs()})
    wanted = min(SMALL_TRIALS, args.tiny_trials)
    chosen = steps[: max(1, wanted // tiny.spec.trials_per_job)]
    root = _symlink_slice(args.out / "work" / "small-slice", chosen)
    results = sorted(root.glob("run/harbor/step-*/*/*/result.json"))
    baselines.warm_tree(root)  # the page cache warm for both sides
    lake = args.out / "work" / "small-lake"
    ratios, seconds, anchors = [], [], []
    for _ in range(args.repeat):
        anchor, _ = baselines.orjson_load_seconds(results)
        set_aside(lake, args.out)
        run = ingest([root], lake, args.workers)
        anchors.append(anchor)
        seconds.append(run.seconds)
        ratios.append(anchor / run.seconds)
    set_aside(lake, args.out)
    runs = [ingest([root], lake, args.workers, sample=True)]  # the peak RSS, from its own run
    set_aside(lake, args.out)
    n = len(results)
    report.set(
        "small",
        "throughput_ratio",
        median(ratios),
        f"{n} small trials: wmo-lake ingest {median(seconds):.2f} s (process start and commit "
        f"included) vs orjson.loads of their result.json {median(anchors):.2f} s" + spread(ratios),
    )
    report.set(
        "small",
        "trials_per_s",
        n / median(seconds),
        f"{n} trials" + spread([n / s for s in seconds], " trials/s", digits=0),
    )
    report.set(
        "small",
        "peak_rss_mib",
        max(r.peak_tree_rss for r in runs) / MIB,
        f"summed over the process tree; largest process "
        f"{max(r.peak_process_rss for r in runs) / MIB:.0f} MiB",
    )
    report.measurements["small"] = {"trials": n, "ingest_seconds": seconds, "orjson": anchors}


def bench_growth(report: Report, args: argparse.Namespace) -> None:
    """Issue 14.5: adding one 128-trial step (real harbor JSON) to a lake of >= 1,000 steps (a
    copy of `big_lake`) vs adding it to an empty lake; then opening the big lake for a query."""
    from wmo_lake.lake import connect

    big = big_lake(args)
    step_spec = replace(realistic_trees.TINY, trials=128, trials_per_job=128, seed=14)
    step_tree = realistic_trees.cached(step_spec, args.out, workers=args.gen_workers)
    (step_dir,) = sorted({job.parent for job in step_tree.job_dirs()})
    work = args.out / "work"
    root = work / "growth-step"
    shutil.rmtree(root, ignore_errors=True)
    (root / "added" / "harbor").mkdir(parents=True)
    (root / "added" / "harbor" / "step-9999").symlink_to(step_dir, target_is_directory=True)
    empty, grown = work / "growth-empty", work / "growth-big"
    ratios, into_big, into_empty, opens, scans = [], [], [], [], []
    n_steps = 0
    for _ in range(args.repeat):
        set_aside(empty, args.out)
        set_aside(grown, args.out)
        shutil.copytree(big, grown, symlinks=True)
        alone = ingest([root], empty, args.workers)
        added = ingest([root], grown, args.workers)
        into_empty.append(alone.seconds)
        into_big.append(added.seconds)
        ratios.append(added.seconds / alone.seconds)
        # Opening for a query: connect() and ask about the step just added (its partition only).
        started = time.perf_counter()
        con = connect(grown)
        con.execute("SELECT count(*) FROM jobs WHERE step = 9999").fetchall()
        opens.append(time.perf_counter() - started)
        # Detail: a query that reads every partition of a table (one file per step at least).
        started = time.perf_counter()
        n_steps = con.execute("SELECT count(DISTINCT batch) FROM jobs").fetchall()[0][0]
        scans.append(time.perf_counter() - started)
        con.close()
    for leftover in (empty, grown):
        set_aside(leftover, args.out)
    short = n_steps - 1 < GROWTH_STEPS and not args.quick
    report.set(
        "growth",
        "add_step_ratio",
        median(ratios),
        f"ingest of one 128-trial step into a lake of {n_steps - 1} steps "
        f"{median(into_big):.2f} s vs into an empty lake {median(into_empty):.2f} s "
        "(process start, catalog, manifest and lake.duckdb included)"
        + spread(ratios)
        + (f"; fewer than {GROWTH_STEPS} steps: --tiny-trials too small" if short else ""),
    )
    report.set(
        "growth",
        "open_seconds",
        median(opens),
        "connect() + SELECT count(*) FROM jobs WHERE step = 9999 (the step just added), "
        f"in-process; then a scan of every partition of jobs ({n_steps} steps) "
        f"{median(scans):.3f} s",
    )
    report.measurements["growth"] = {
        "into_big_seconds": into_big,
        "into_empty_seconds": into_empty,
        "open_seconds": opens,
        "all_partitions_scan_seconds": scans,
    }


def _stats_json(lake: Path) -> tuple[float, list[dict[str, Any]]]:
    run = run_measured(["stats", "--lake", str(lake), "--json"], sample=False)
    return run.seconds, json.loads(run.stdout)


def _same_stats(ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> list[str]:
    """Differences between two stats lists, batch by batch (floats to 1e-12)."""
    by_batch = {row["batch"]: row for row in theirs}
    differences = []
    if sorted(by_batch) != sorted(row["batch"] for row in ours):
        return ["the batches differ"]
    for row in ours:
        other = by_batch[row["batch"]]
        for key, value in row.items():
            got = other.get(key)
            same = (
                abs(value - got) <= 1e-12
                if isinstance(value, float) and isinstance(got, int | float)
                else value == got
            )
            if not same:
                differences.append(f"{row['batch']}.{key}: python {value!r} vs lake {got!r}")
    return differences


def bench_stats(report: Report, tree: realistic_trees.Tree, args: argparse.Namespace) -> None:
    """Issue 3.5: stats vs re-reading the trial dirs; stats over a 100k-trial lake."""
    if not command_exists("stats"):
        report.unavailable("stats", "`wmo-lake stats` does not exist yet")
        return
    lake = cached_lake(tree, args.out, args.workers)
    baselines.orjson_load_seconds(tree.files("result.json"))  # warm the page cache
    ratios, stats_seconds, anchor_seconds = [], [], []
    python_stats: list[dict[str, Any]] = []
    lake_stats: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        python_stats = list(oracle.batch_stats(oracle.read_tree(tree.root)).values())
        anchor_seconds.append(time.perf_counter() - started)
        seconds, lake_stats = _stats_json(lake)
        stats_seconds.append(seconds)
        ratios.append(anchor_seconds[-1] / seconds)
    differences = _same_stats(python_stats, lake_stats)
    report.set(
        "stats",
        "speedup_vs_python",
        median(ratios),
        f"`wmo-lake stats --json` {median(stats_seconds):.2f} s (process start included) vs "
        f"plain Python re-reading {len(tree.trial_dirs())} trial dirs "
        f"{median(anchor_seconds):.2f} s",
    )
    report.set(
        "stats",
        "agrees_with_python",
        not differences,
        "every batch, every column equal" if not differences else "; ".join(differences[:5]),
    )

    _bench_tiny_lake(report, args)


def big_lake(args: argparse.Namespace) -> Path:
    """The 100k-trial lake of the stats and growth benches: GROWTH_STEPS steps (>= 1,000, one
    batch each) of --tiny-trials in all, written through the lake's own Commit
    (bench/synthetic.py), built once and cached in OUT/lakes/."""
    steps = min(GROWTH_STEPS, args.tiny_trials)
    spec = synthetic.Spec(steps=steps, trials_per_step=max(1, args.tiny_trials // steps))
    return synthetic.cached(spec, args.out)


def _bench_tiny_lake(report: Report, args: argparse.Namespace) -> None:
    """Stats over a lake of 100k trials in 1,000 batches (goal < 1 s, process start included):
    the synthetic lake of `big_lake`."""
    from wmo_lake.lake import connect

    started = time.perf_counter()
    tiny_lake = big_lake(args)
    built = time.perf_counter() - started
    tiny_seconds = []
    tiny_stats: list[dict[str, Any]] = []
    for _ in range(args.repeat):
        seconds, tiny_stats = _stats_json(tiny_lake)
        tiny_seconds.append(seconds)
    view_seconds = []
    rows: list[Any] = []
    for _ in range(args.repeat):
        started = time.perf_counter()
        rows = connect(tiny_lake).execute("SELECT * FROM rollout_stats").fetchall()
        view_seconds.append(time.perf_counter() - started)
    n_trials = sum(row["trials"] for row in tiny_stats)
    report.set(
        "stats",
        "tiny_lake_stats_seconds",
        median(tiny_seconds),
        f"`wmo-lake stats --json` over {n_trials} trials in {len(tiny_stats)} batches "
        f"(process start included; load {os.getloadavg()[0]:.1f})",
    )
    report.set(
        "stats",
        "tiny_lake_view_seconds",
        median(view_seconds),
        f"in-process connect() + SELECT * FROM rollout_stats ({len(rows)} rows)",
    )
    report.measurements["stats_tiny"] = {
        "tiny_trials": n_trials,
        "tiny_batches": len(tiny_stats),
        "tiny_stats_seconds": tiny_seconds,
        "tiny_view_seconds": view_seconds,
        "tiny_lake_seconds": round(built, 1),
        "tiny_lake_bytes": files_bytes(tiny_lake),
    }


def bench_export(report: Report, tree: realistic_trees.Tree, args: argparse.Namespace) -> None:
    """Issue 4.6: `wmo-lake export datums` vs the same merge in plain Python from the spans."""
    if not command_exists("export", "datums"):
        report.unavailable("export", "`wmo-lake export datums` does not exist yet")
        return
    import pyarrow.parquet as pq

    from wmo_lake.store import Store

    lake = cached_lake(tree, args.out, args.workers)
    store = Store(lake)
    span_files = store.files(store.read_manifest(), "spans")
    work = args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    ratios, export_seconds, anchor_seconds, mb_rates = [], [], [], []
    tokens = parquet_bytes = 0
    totals = DatumTotals()
    for attempt in range(args.repeat):
        target = work / f"datums-{attempt}.parquet"
        for stale in (target, target.with_name(target.name + ".manifest.json")):
            stale.unlink(missing_ok=True)
        run = run_measured(
            ["export", "datums", "--lake", str(lake), "--out", str(target), "--no-split-guard"],
            sample=False,
        )
        meta = pq.read_table(target, columns=["n_tokens", "loss_tokens"])
        tokens = sum(meta.column("n_tokens").to_pylist())
        loss_tokens = sum(meta.column("loss_tokens").to_pylist())
        rows = meta.num_rows
        parquet_bytes = target.stat().st_size
        anchor_out = work / f"python-datums-{attempt}.parquet"
        started = time.perf_counter()
        totals = datums_from_spans(span_files, anchor_out)
        anchor = time.perf_counter() - started
        export_seconds.append(run.seconds)
        anchor_seconds.append(anchor)
        ratios.append((tokens / run.seconds) / (totals.tokens / anchor))
        mb_rates.append(mb(parquet_bytes) / run.seconds)
        for leftover in (target, target.with_name(target.name + ".manifest.json"), anchor_out):
            leftover.unlink(missing_ok=True)
    agree = (rows, tokens, loss_tokens) == (totals.datums, totals.tokens, totals.loss_tokens)
    report.set(
        "export",
        "tokens_per_s_ratio",
        median(ratios),
        f"export {tokens / median(export_seconds):,.0f} tok/s ({median(export_seconds):.2f} s, "
        f"process start included) vs plain Python {totals.tokens / median(anchor_seconds):,.0f} "
        f"tok/s ({median(anchor_seconds):.2f} s)" + spread(ratios),
    )
    report.set("export", "tokens_per_s", tokens / median(export_seconds))
    report.set(
        "export",
        "parquet_mb_s",
        median(mb_rates),
        f"{mb(parquet_bytes):.1f} MB of Parquet, {rows} datums",
    )
    report.set(
        "export",
        "agrees_with_python",
        agree,
        f"datums / tokens / loss tokens: export {rows} / {tokens} / {loss_tokens}, "
        f"python {totals.datums} / {totals.tokens} / {totals.loss_tokens}",
    )
    report.measurements["export"] = {
        "export_seconds": export_seconds,
        "python_seconds": anchor_seconds,
        "datums": rows,
        "tokens": tokens,
        "parquet_bytes": parquet_bytes,
    }


def bench_prompts(report: Report, tree: realistic_trees.Tree, args: argparse.Namespace) -> None:
    """Issue 14.4: `SELECT * FROM spans_full` over the bench lake (every full prompt, streamed
    as Arrow record batches through connect()) vs re-reading the same prompts from result.json
    with orjson. Both in this process, interleaved; the prompts are checked equal in count."""
    from wmo_lake.lake import connect

    lake = cached_lake(tree, args.out, args.workers)
    results = tree.files("result.json")
    baselines.orjson_load_seconds(results)  # warm the page cache
    ratios, view_seconds, anchor_seconds = [], [], []
    view_tokens = anchor_tokens = 0
    for _ in range(args.repeat):
        started = time.perf_counter()
        anchor_tokens = baselines.prompt_tokens_from_results(results)
        anchor_seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        con = connect(lake)
        view_tokens = 0
        for batch in con.sql("SELECT * FROM spans_full").to_arrow_reader(1024):
            view_tokens += len(batch.column("prompt_token_ids").flatten())
        con.close()
        view_seconds.append(time.perf_counter() - started)
        ratios.append(anchor_seconds[-1] / view_seconds[-1])
    if view_tokens != anchor_tokens:
        raise BenchError(
            f"spans_full gave {view_tokens} prompt tokens, result.json {anchor_tokens}"
        )
    report.set(
        "prompts",
        "spans_full_ratio",
        median(ratios),
        f"SELECT * FROM spans_full {median(view_seconds):.2f} s (connect included) vs orjson "
        f"re-reading the prompts of {len(results)} result.json {median(anchor_seconds):.2f} s; "
        f"{view_tokens:,} prompt tokens",
    )
    report.set("prompts", "spans_full_seconds", median(view_seconds))
    report.measurements["prompts"] = {
        "spans_full_seconds": view_seconds,
        "orjson_seconds": anchor_seconds,
        "prompt_tokens": view_tokens,
    }


def bench_trajectories(report: Report, args: argparse.Namespace) -> None:
    """Issue 5.5: ingest of long ATIF trajectories vs orjson.loads of the same files. The whole
    ingest's rate (process start, result.json and commit included) is the figure; the marginal
    rate (minus the ingest of a twin tree without trajectory.json) shows the trajectory cost."""
    from wmo_lake.lake import connect
    from wmo_lake.tables import TABLES

    if "steps" not in TABLES:
        report.unavailable("trajectories", "the steps table does not exist yet")
        return
    spec = replace(
        realistic_trees.QUICK_TRAJECTORIES if args.quick else realistic_trees.TRAJECTORIES,
        trials=args.trajectory_trials,
    )
    tree = realistic_trees.cached(spec, args.out, workers=args.gen_workers)
    twin = realistic_trees.cached(
        replace(spec, omit_trajectories=True), args.out, workers=args.gen_workers
    )
    files = tree.files("agent/trajectory.json")
    n_bytes = sum(p.stat().st_size for p in files)
    baselines.warm_tree(tree.root)  # the page cache warm for both sides
    baselines.warm_tree(twin.root)
    lake = args.out / "work" / "trajectory-lake"
    ratios, marginal_ratios, ingest_seconds, twin_seconds, anchor_seconds = [], [], [], [], []
    n_steps = 0
    for _ in range(args.repeat):
        anchor, _ = baselines.orjson_load_seconds(files)
        set_aside(lake, args.out)
        run = ingest([tree.root], lake, args.workers)
        (n_steps,) = connect(lake).execute("SELECT count(*) FROM steps").fetchone() or (0,)
        set_aside(lake, args.out)
        without = ingest([twin.root], lake, args.workers)
        set_aside(lake, args.out)
        anchor_seconds.append(anchor)
        ingest_seconds.append(run.seconds)
        twin_seconds.append(without.seconds)
        ratios.append(anchor / run.seconds)
        marginal_ratios.append(anchor / max(run.seconds - without.seconds, 1e-3))
    marginal = max(median(ingest_seconds) - median(twin_seconds), 1e-3)
    report.set(
        "trajectories",
        "throughput_ratio",
        median(ratios),
        f"ingest {mb(n_bytes) / median(ingest_seconds):.0f} MB/s of trajectory.json (the whole "
        f"ingest: process start, result.json, commit; {median(ingest_seconds):.2f} s) vs "
        f"orjson.loads {mb(n_bytes) / median(anchor_seconds):.0f} MB/s; {len(files)} "
        f"trajectories, {mb(n_bytes):.0f} MB, {n_steps} steps" + spread(ratios),
    )
    report.set("trajectories", "throughput_mb_s", mb(n_bytes) / median(ingest_seconds))
    report.set(
        "trajectories",
        "marginal_throughput_ratio",
        median(marginal_ratios),
        f"trajectory bytes / (ingest of the tree - ingest of its twin without trajectory.json: "
        f"{median(ingest_seconds):.2f} - {median(twin_seconds):.2f} s) = "
        f"{mb(n_bytes) / marginal:.0f} MB/s" + spread(marginal_ratios),
    )
    report.measurements["trajectories"] = {
        "trajectories": len(files),
        "bytes": n_bytes,
        "steps": n_steps,
        "ingest_seconds": ingest_seconds,
        "twin_ingest_seconds": twin_seconds,
        "orjson_seconds": anchor_seconds,
    }


def bench_report(report: Report, args: argparse.Namespace) -> None:
    """Issue 10.4: `wmo-lake report` over 100 steps x 1,000 trials, from the lake (goal < 5 s,
    process start and writing the ~5 MB page included). The lake is a synthetic one written
    through the lake's own Commit (bench/synthetic.py: tasks over steps, pass/fail, stop
    reasons, spans, tests, problems), built once and cached. `wmo-lake stats --json` over the
    same lake is the detail ratio: what the page costs beyond the rollout_stats query itself."""
    if not command_exists("report"):
        report.unavailable("report", "`wmo-lake report` does not exist yet")
        return
    per_step = max(1, args.tiny_trials // REPORT_STEPS)
    spec = synthetic.Spec(steps=REPORT_STEPS, trials_per_step=per_step)
    lake = synthetic.cached(spec, args.out)
    page = args.out / "work" / "report.html"
    page.parent.mkdir(parents=True, exist_ok=True)
    report_seconds, stats_seconds = [], []
    summary = ""
    for _ in range(args.repeat):
        run = run_measured(["report", "--lake", str(lake), "--out", str(page)], sample=False)
        report_seconds.append(run.seconds)
        summary = run.stdout.strip()
        stats_seconds.append(_stats_json(lake)[0])
    report.set(
        "report",
        "hundred_step_report_seconds",
        median(report_seconds),
        f"`wmo-lake report` (process start included): {summary}; "
        f"page {mb(page.stat().st_size):.1f} MB",
    )
    report.set(
        "report",
        "report_over_stats",
        median(report_seconds) / median(stats_seconds),
        f"`wmo-lake stats --json` over the same lake: {median(stats_seconds):.2f} s",
    )
    report.measurements["report"] = {
        "trials": spec.steps * spec.trials_per_step,
        "steps": REPORT_STEPS,
        "report_seconds": report_seconds,
        "stats_seconds": stats_seconds,
        "page_bytes": page.stat().st_size,
    }


# ---------------------------------------------------------------------------------------------
# Report


RECORDS_QUERY = "SELECT * FROM trial_records"
# DuckDB's own COPY of the same query, from the same lake.duckdb, to a file, as a process of its
# own (so process start and DuckDB's import count on both sides). Its views name their files
# relative to the lake dir: the plain client sets file_search_path, as the README says.
COPY_SCRIPT = (
    "import duckdb, os, sys; con = duckdb.connect(sys.argv[1], read_only=True); "
    "con.execute('SET file_search_path = ?', [os.path.dirname(os.path.abspath(sys.argv[1]))]); "
    "con.execute(f\"COPY ({sys.argv[2]}) TO '{sys.argv[3]}' (FORMAT csv, HEADER)\")"
)


def _lines(path: Path) -> int:
    with open(path, "rb") as stream:
        count = sum(1 for _ in stream)
    path.unlink()
    return count


def bench_sql(report: Report, tree: realistic_trees.Tree, args: argparse.Namespace) -> None:
    """Issue 9.2: `sql --format csv` of trial_records vs DuckDB's COPY of the same query to a
    file (time and peak RSS); 9.3: the light trial_records vs cells, the spans view as detail."""
    if not command_exists("tables"):
        report.unavailable("sql", "`wmo-lake sql` does not stream yet")
        return
    lake = cached_lake(tree, args.out, args.workers)
    work = args.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    ours_csv, theirs_csv = work / "sql-records.csv", work / "copy-records.csv"

    def sql_csv(query: str) -> Run:
        ours_csv.unlink(missing_ok=True)
        return run_measured(
            ["sql", "--lake", str(lake), "--format", "csv", "--output", str(ours_csv), query]
        )

    sql_csv(RECORDS_QUERY)  # warm: lake.duckdb and the Parquet pages
    ratios, ours, theirs, peaks = [], [], [], []
    light, cells, rows_equal, n_rows = [], [], True, 0
    for _ in range(args.repeat):
        theirs_csv.unlink(missing_ok=True)
        copy = run_command(
            [
                sys.executable,
                "-c",
                COPY_SCRIPT,
                str(lake / "lake.duckdb"),
                RECORDS_QUERY,
                str(theirs_csv),
            ]
        )
        run = sql_csv(RECORDS_QUERY)
        theirs.append(copy.seconds)
        ours.append(run.seconds)
        peaks.append(run.peak_tree_rss)
        ratios.append(run.seconds / copy.seconds)
        n_rows = _lines(ours_csv) - 1
        rows_equal &= n_rows == _lines(theirs_csv) - 1 > 0
        cells.append(sql_csv("SELECT * FROM cells").seconds)
        light.append(sql_csv(RECORDS_QUERY).seconds)
    ours_csv.unlink(missing_ok=True)
    report.set(
        "sql",
        "csv_vs_duckdb_copy",
        median(ratios),
        f'`wmo-lake sql --format csv -o F "{RECORDS_QUERY}"` {median(ours):.2f} s vs '
        f"DuckDB's COPY ... TO F {median(theirs):.2f} s ({n_rows} rows; process start included)",
    )
    report.set(
        "sql",
        "csv_peak_rss_mib",
        max(peaks) / MIB,
        "peak RSS of the wmo-lake sql process, largest of the repeats",
    )
    report.set("sql", "csv_rows_equal_copy", rows_equal, f"{n_rows} rows on both sides")
    report.set(
        "sql",
        "light_records_vs_cells",
        median(light) / median(cells),
        f"SELECT * FROM trial_records {median(light):.2f} s vs SELECT * FROM cells "
        f"{median(cells):.2f} s (both `wmo-lake sql --format csv`)",
    )
    spans_out = args.out / "work" / "records-with-spans.parquet"
    spans_out.parent.mkdir(parents=True, exist_ok=True)
    spans_out.unlink(missing_ok=True)
    heavy = run_measured(
        [
            "sql",
            "--lake",
            str(lake),
            "--format",
            "parquet",
            "--output",
            str(spans_out),
            "SELECT * FROM trial_records_with_spans",
        ]
    )
    spans_out.unlink(missing_ok=True)
    report.set(
        "sql",
        "records_with_spans_seconds",
        heavy.seconds,
        f"SELECT * FROM trial_records_with_spans to Parquet (every prompt rebuilt); peak RSS "
        f"{heavy.peak_tree_rss / MIB:.0f} MiB",
    )


def shown_number(value: float, check: Goal) -> str:
    """`value` to 4 significant digits, or as many more as it takes for the shown number to get
    the verdict the exact one got: a ratio of 1.99984 against ">= 2x" is shown as 1.9998, not 2."""
    for digits in range(4, 18):
        text = f"{value:,.{digits}g}"
        if check is None or check(float(text.replace(",", ""))) == check(value):
            return text
    return repr(value)


def render(report: dict[str, Any]) -> str:
    lines = [
        f"wmo-lake bench  {report['generated_at']}  ({report['host']['cpus']} cores, load "
        f"{report['host']['load_average'][0]:.1f}, repeat {report['options']['repeat']}"
        f"{', QUICK smoke run: figures not meaningful' if report['options']['quick'] else ''})",
        "Ratios are against anchors measured in this same run.",
        f"Machine: {report['host']['cpu_model'] or 'CPU model unknown'}, Python "
        f"{report['host']['python']}; {baselines.LOOP_STEPS:,} steps of a Python loop "
        f"{report['host']['interpreter_seconds']} s (absolute figures scale with it).",
        "",
        f"{'figure':44} {'value':>14}  {'goal':28} verdict",
    ]
    bench = None
    for fig in report["figures"]:
        if fig["bench"] != bench:
            bench = fig["bench"]
            lines.append(f"-- {bench}")
        value = fig["value"]
        check = SPECS[fig["bench"], fig["name"]][4]
        shown = (
            "n/a"
            if value is None
            else f"{shown_number(value, check)} {fig['unit']}".strip()
            if isinstance(value, int | float) and not isinstance(value, bool)
            else str(value).lower()
        )
        verdict = {True: "MET", False: "MISSED", None: ""}[fig["met"]]
        if value is None:
            verdict = "NOT MEASURED"
        lines.append(f"  {fig['name']:42} {shown:>14}  {fig['goal']:28} {verdict}")
        if fig["detail"]:
            lines.append(f"      {fig['detail']}")
    lines += [
        "",
        f"goals met ({len(report['goals_met'])}): {', '.join(report['goals_met']) or '-'}",
        f"goals missed ({len(report['goals_missed'])}): {', '.join(report['goals_missed']) or '-'}",
        f"not measured: {', '.join(report['not_measured']) or '-'}",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--trials", type=int, default=128, help="trials in the bench tree [default: 128]"
    )
    parser.add_argument(
        "--small-trials",
        type=int,
        default=32,
        help="trials of the smaller ingest the peak RSS is compared with (also trials per job)",
    )
    parser.add_argument(
        "--tiny-trials",
        type=int,
        default=None,
        help="trials of the small-trial stats and report lakes [default: 100000; --quick: 300]",
    )
    parser.add_argument(
        "--trajectory-trials",
        type=int,
        default=None,
        help="trials of the trajectory tree [default: 128; --quick: 4]",
    )
    parser.add_argument(
        "--repeat", type=int, default=None, help="runs per figure, median kept [default: 3]"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="cache and report dir")
    parser.add_argument(
        "--only",
        default=",".join(BENCHES),
        help=f"comma-separated benches to run, of {', '.join(BENCHES)}",
    )
    parser.add_argument(
        "--workers", type=int, default=None, help="wmo-lake ingest --workers [default: all cores]"
    )
    parser.add_argument(
        "--gen-workers", type=int, default=os.cpu_count() or 1, help="processes writing trees"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: tiny trees, one repeat (checks the code paths; figures mean nothing)",
    )
    args = parser.parse_args(argv)
    only = [b.strip() for b in args.only.split(",") if b.strip()]
    unknown = sorted(set(only) - set(BENCHES))
    if unknown:
        parser.error(f"--only: unknown bench {', '.join(unknown)}; choose from {BENCHES}")
    args.only = only
    if args.quick:
        args.trials, args.small_trials = realistic_trees.QUICK_ROLLOUTS.trials, 4
    defaults = {
        "tiny_trials": (100_000, 300),
        "trajectory_trials": (
            realistic_trees.TRAJECTORIES.trials,
            realistic_trees.QUICK_TRAJECTORIES.trials,
        ),
        "repeat": (3, 1),
    }
    for name, (full, quick) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    if args.trials % args.small_trials:
        parser.error("--trials must be a multiple of --small-trials (one job per small ingest)")
    args.out = args.out.resolve()
    return args


def _generated(tree: realistic_trees.Tree | None) -> realistic_trees.Tree:
    if tree is None:  # run() generates it whenever a bench that reads it is selected
        raise RuntimeError("the rollouts tree was not generated")
    return tree


def precompile() -> None:
    """Byte-compile the package first, as installing a wheel does (an editable install does not,
    and under PYTHONDONTWRITEBYTECODE every `wmo-lake` process would compile its modules again:
    ~45 ms a start that the anchors, importing precompiled site-packages, never pay)."""
    import compileall

    import wmo_lake

    compileall.compile_dir(Path(wmo_lake.__file__).parent, quiet=1)


def run(argv: list[str] | None = None, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the selected benches; returns the report (also written to OUT/report.json)."""
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    empty_set_aside(args.out)  # (a run that was stopped)
    precompile()
    options = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    report = Report(options)
    report.interpreter_seconds = round(baselines.interpreter_seconds(), 3)
    base = realistic_trees.QUICK_ROLLOUTS if args.quick else realistic_trees.TreeSpec()
    spec = replace(base, trials=args.trials, trials_per_job=args.small_trials)
    tree = None
    if {"ingest", "stats", "export", "prompts", "sql"} & set(args.only):
        tree = realistic_trees.cached(spec, args.out, log=log, workers=args.gen_workers)
    steps: dict[str, Callable[[], None]] = {
        "ingest": lambda: bench_ingest(report, _generated(tree), args),
        "stats": lambda: bench_stats(report, _generated(tree), args),
        "export": lambda: bench_export(report, _generated(tree), args),
        "prompts": lambda: bench_prompts(report, _generated(tree), args),
        "small": lambda: bench_small(report, args),
        "growth": lambda: bench_growth(report, args),
        "trajectories": lambda: bench_trajectories(report, args),
        "report": lambda: bench_report(report, args),
        "sql": lambda: bench_sql(report, _generated(tree), args),
    }
    try:
        for name in BENCHES:
            if name not in args.only:
                report.unavailable(name, "not selected (--only)")
                continue
            log(f"running {name} ...")
            try:
                steps[name]()
            except BenchError as error:
                report.unavailable(name, str(error))
    finally:
        empty_set_aside(args.out)
    result = report.as_dict()
    (args.out / "report.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    return result


def main() -> None:
    result = run()
    print(render(result))
    print(f"\nreport: {Path(result['options']['out']) / 'report.json'}")


if __name__ == "__main__":
    main()
