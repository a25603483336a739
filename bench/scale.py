"""A synthetic lake of N trials written straight to Parquet (no raw JSON), and the report-style
queries timed on it with DuckDB and with Spark: the README's "At scale" figures.

    python -m bench.scale --trials 1000000 --out /tmp/scale-lake        # build (once) and time
    python -m bench.scale --trials 1000000 --out /tmp/scale-lake --spark
    python -m bench.scale --out /tmp/scale-lake --ingest TREE      # ingest trials/s a core

Shape: steps of 1,000 trials (125 tasks x 8 attempts), 8 sampled turns a trial (token lists left
empty: the queries timed read lengths, not tokens), rewards 0/1, CTRF summaries, no trajectories.
The tables go through the lake's own Commit, one Hive partition per step (`run=scale/step=N`), so
`connect()` and `wmo_lake.spark.register` open it like any ingested lake.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from wmo_lake.commit import Commit
from wmo_lake.store import Manifest, Store, partition_of
from wmo_lake.tables import TABLES

TRIALS_PER_STEP = 1000
TASKS_PER_STEP = 125
TURNS = 8
QUERIES = {
    "rollout_stats": "SELECT * FROM rollout_stats",
    "solve rate by step": "SELECT step, avg(CASE WHEN passed THEN 1.0 ELSE 0.0 END) AS solve "
    "FROM cells GROUP BY step ORDER BY step",
    "stop reasons": "SELECT stop_reason, count(*) AS n FROM trial_stop_reasons GROUP BY ALL",
}


def table(name: str, n: int, columns: dict[str, Any]) -> pa.Table:
    """A `name` table of n rows: the given columns, every other column null."""
    schema = TABLES[name].schema
    arrays = [
        pa.array(columns[f.name], f.type) if f.name in columns else pa.nulls(n, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def step_tables(step: int, rng: np.random.Generator) -> dict[str, pa.Table]:
    n = TRIALS_PER_STEP
    batch = f"scale/harbor/step-{step:04d}/job"
    job_key = f"job:/{batch}"
    index = np.arange(n)
    names = [f"t{step}-{i:04d}" for i in index]
    keys = [f"k{step}-{i:04d}" for i in index]
    reward = rng.random(n) < 0.4
    passed_tests = rng.integers(0, 11, n)
    episodes = rng.integers(1, 40, n)
    trials = table(
        "trials",
        n,
        {
            "trial_key": keys,
            "trial_id": keys,
            "batch": [batch] * n,
            "run": ["scale"] * n,
            "step": [step] * n,
            "job_key": [job_key] * n,
            "trial_name": names,
            "task_name": [f"task-{i % TASKS_PER_STEP:03d}" for i in index],
            "task_id_name": [f"task-{i % TASKS_PER_STEP:03d}" for i in index],  # harbor's id
            "rewards": [[("reward", "1.0" if r else "0.0")] for r in reward],
            "n_episodes": episodes,
            "n_spans": [TURNS] * n,
            "spans_status": ["ok"] * n,
            "ctrf_status": ["ok"] * n,
            "ctrf_summary_present": [True] * n,
            "ctrf_summary_valid": [True] * n,
            "ctrf_passed": passed_tests,
            "ctrf_failed": 10 - passed_tests,
            "multi_step": [False] * n,
        },
    )
    stop_reasons = table(
        "stop_reasons",
        n,
        {
            "trial_key": keys,
            "batch": [batch] * n,
            "trial_name": names,
            "n_episodes": episodes,
            "declared_complete": rng.random(n) < 0.7,
            "has_trace": [False] * n,
        },
    )
    spans_n = n * TURNS
    empty_ids: list[list[int]] = [[] for _ in range(spans_n)]
    spans = table(
        "spans",
        spans_n,
        {
            "trial_key": np.repeat(keys, TURNS),
            "batch": [batch] * spans_n,
            "trial_name": np.repeat(names, TURNS),
            "call_index": np.tile(np.arange(TURNS), n),
            "prompt_len": rng.integers(1000, 30000, spans_n),
            "prompt_prefix_len": [0] * spans_n,
            "prompt_new_ids": empty_ids,
            "sampled_token_ids": empty_ids,
            "sampled_logprobs": empty_ids,
            "n_sampled": rng.integers(1, 9000, spans_n),
            "source": ["rollout_details"] * spans_n,
        },
    )
    jobs = table(
        "jobs",
        1,
        {
            "job_key": [job_key],
            "batch": [batch],
            "run": ["scale"],
            "step": [step],
            "max_turns": [30],
            "max_tokens": [4096],  # recorded per job, as harbor writes it
            "context_limit": [65536],
            "config_status": ["ok"],
            "result_status": ["ok"],
        },
    )
    return {"trials": trials, "stop_reasons": stop_reasons, "spans": spans, "jobs": jobs}


def build(out: Path, trials: int, seed: int = 0) -> None:
    """Write the synthetic lake at `out` in one commit (steps of TRIALS_PER_STEP trials)."""
    store = Store(out)
    out.mkdir(parents=True, exist_ok=True)
    commit = Commit(store, Manifest())
    rng = np.random.default_rng(seed)
    for step in range(trials // TRIALS_PER_STEP):
        for name, rows in step_tables(step, rng).items():
            commit.append(name, rows, partition_of("scale", step))
    commit.finish([])


def timed(run: Any, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def ingest_rates(tree: Path, out: Path) -> None:
    """Per-core ingest rate on a real-shaped tree: the local ingest on one reader (`--workers
    1`, the anchor) and the Spark ingest on one core (`local[1]`), in the same run, each into a
    fresh lake; the session starts before the clock (a cluster's is already up)."""
    import shutil

    from wmo_lake.ingest import ingest
    from wmo_lake.spark import ingest as spark_ingest
    from wmo_lake.spark import local_session

    json_bytes = sum(p.stat().st_size for p in tree.rglob("*.json"))
    spark = local_session("local[1]")
    for label, run in [
        ("local --workers 1", lambda lake: ingest([tree], lake, workers=1)),
        ("spark local[1]", lambda lake: spark_ingest(spark, [tree], lake)),
    ]:
        lake = out / f"ingest-{label.split()[0]}"
        shutil.rmtree(lake, ignore_errors=True)
        summary = run(lake)
        trials = summary.trials_new + summary.trials_replaced
        print(
            f"ingest  {label}: {trials} trials, {json_bytes / 1e6:.0f} MB of JSON in "
            f"{summary.seconds:.1f}s: {trials / summary.seconds:.2f} trials/s, "
            f"{json_bytes / 1e6 / summary.seconds:.1f} MB/s a core",
            flush=True,
        )
        shutil.rmtree(lake, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--spark", action="store_true", help="also time on Spark local[*]")
    parser.add_argument(
        "--no-duckdb", action="store_true", help="skip the DuckDB timings (with --spark)"
    )
    parser.add_argument(
        "--ingest",
        type=Path,
        metavar="TREE",
        help="only time the per-core ingest of TREE, locally and on Spark local[1]",
    )
    args = parser.parse_args()
    if args.ingest:
        ingest_rates(args.ingest, args.out)
        return
    if not (args.out / "manifest.json").exists():
        start = time.perf_counter()
        build(args.out, args.trials)
        print(f"built {args.trials:,} trials in {time.perf_counter() - start:.1f}s")
    size = sum(p.stat().st_size for p in (args.out / "tables").rglob("*.parquet"))
    print(f"lake: {size / 1e6:.1f} MB of Parquet")
    from wmo_lake.lake import connect

    con = connect(args.out)
    for label, query in {} if args.no_duckdb else QUERIES.items():
        seconds = timed(lambda q=query: con.sql(q).fetchall())
        print(f"duckdb  {label}: {seconds:.2f}s (median of 3)", flush=True)
    if args.spark:
        from wmo_lake.spark import local_session, register

        spark = local_session()
        start = time.perf_counter()
        register(spark, args.out)
        print(f"spark   register: {time.perf_counter() - start:.1f}s", flush=True)
        for label, query in QUERIES.items():  # one run each: a Spark query here takes minutes
            seconds = timed(lambda q=query: spark.sql(q).collect(), repeat=1)
            print(f"spark   {label}: {seconds:.2f}s (one run)", flush=True)


if __name__ == "__main__":
    main()
