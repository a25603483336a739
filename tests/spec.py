"""Column lists the issues specify, written once for every test that checks them (taken from
the issue texts, not from the code under test)."""

DATUM_COLUMNS = [
    "batch",
    "run",
    "step",
    "task_id",
    "attempt",
    "trial_name",
    "fragment_index",
    "model_input_tokens",
    "loss_mask",
    "sampled_logprobs",
    "n_tokens",
    "loss_tokens",
    "reward",
    "passed",
    "infra_failed",
    "advantage",
]

ROLLOUT_STATS_COLUMNS = [
    "batch",
    "run",
    "step",
    "trials",
    "trials_with_spans",
    "solve_rate",
    "graded_solve_rate",
    "graded_trials",
    "raw_solve_rate",
    "executed_trials",
    "infra_failed_trials",
    "empty_span_trials",
    "truncated_spans",
    "truncated_span_trials",
    "stop_reason_counts",
    "scaffold_loss_rate",
    "unreadable_trials",
]

# issue 11: rollout_stats columns after the seed's (which keep their exact values)
ROLLOUT_STATS_EXTRA_COLUMNS = [
    "dropped_turns",
    "dropped_turn_trials",
    "verifier_error_trials",
    "verifier_scaffold_loss_rate",
]

# seed 000's TrialRecord, as issue 3 lists its columns
RECORD_COLUMNS = [
    "batch",
    "run",
    "step",
    "task_id",
    "attempt",
    "trial_name",
    "reward",
    "passed",
    "infra_failed",
    "tests_passed",
    "tests_resolved",
    "tests_unresolved",
    "graded_score",
    "stop_reason",
    "n_spans",
    "spans",
    "artifact_dir",
]
