"""Plain-Python reference implementations of the lake's rules, shared by the tests (which hold
the SQL views against them) and the benchmarks (which time them as anchors and check the lake's
results against them). They read trial dirs and files themselves and never import wmo_lake, so
they stay independent of the code they check.

- `reference.oracle`: seed 000's TrialRecord assembly and seed 003's `rollout_stats`, from trial
  dirs (`read_tree`, `batch_stats`).
- `reference.datums`: issue 4's datum merge from the lake's `spans` Parquet files.
"""
