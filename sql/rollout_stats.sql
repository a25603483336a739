-- rollout_stats: one row per batch, seed 003's `rollout_stats` over the batch's trial records,
-- plus batch, run, step and unreadable_trials (trial dirs with no readable result.json, from the
-- `problems` the ingest recorded; a batch of only those still gets a row).
--   solve_rate = passed / executed (not infra_failed) trials; graded_solve_rate = mean
--   graded_score over executed trials that have one (graded_trials); raw_solve_rate = passed /
--   all trials; truncated_spans = spans with len(sampled) >= max_tokens (`trial_caps`);
--   stop_reason_counts = reason -> trials, keys sorted, a null (or empty) reason counted as
--   'unknown'; scaffold_loss_rate = trials whose reason is not 'submitted' / trials with a
--   reason (null and '' are no reason, as the seed's truthiness test). An empty denominator
--   gives 0.0, a null measurement the counts tell apart from a score.
-- Beside the seed's columns (which keep their exact values), two things the seed cannot see:
--   dropped_turns / dropped_turn_trials: turns stopped at max_tokens that harbor kept no span or
--   step of (`trials.dropped_turns`, from trial.log); verifier_error_trials: trials whose
--   exception was raised by the verifier (`trial_stop_reasons.exception_side`), and
--   verifier_scaffold_loss_rate: the part of scaffold_loss_rate made of those trials (same
--   denominator), so scaffold_loss_rate - verifier_scaffold_loss_rate is the agent's.
-- graded_solve_rate sums left to right in (task_id, attempt) order, as Python's sum() over the
-- scorer's task x attempt cells, so it equals the seed's float exactly rather than to a ulp.
CREATE OR REPLACE VIEW rollout_stats AS
WITH truncation AS (
    SELECT s.trial_key, count(*) AS truncated_spans
    FROM spans AS s
    JOIN trial_caps AS k ON k.trial_key = s.trial_key
    WHERE s.n_sampled >= k.max_tokens
    GROUP BY s.trial_key
),
records AS (
    SELECT
        c.batch,
        c.task_id,
        c.attempt,
        c.passed,
        c.infra_failed,
        c.graded_score,
        r.stop_reason,
        coalesce(r.stop_reason, '') <> '' AS has_stop_reason,
        coalesce(t.n_spans, 0) AS n_spans,
        coalesce(x.truncated_spans, 0) AS truncated_spans,
        coalesce(t.dropped_turns, 0) AS dropped_turns,
        r.exception_side = 'verifier' AS verifier_error
    FROM cells AS c
    JOIN trial_stop_reasons AS r ON r.trial_key = c.trial_key
    JOIN trials AS t ON t.trial_key = c.trial_key
    LEFT JOIN truncation AS x ON x.trial_key = c.trial_key
),
per_batch AS (
    SELECT
        batch,
        count(*) AS trials,
        count(*) FILTER (WHERE n_spans > 0) AS trials_with_spans,
        count(*) FILTER (WHERE NOT infra_failed) AS executed_trials,
        count(*) FILTER (WHERE NOT infra_failed AND passed) AS executed_passed,
        count(*) FILTER (WHERE passed) AS passed_trials,
        list(graded_score ORDER BY task_id, attempt)
            FILTER (WHERE NOT infra_failed AND graded_score IS NOT NULL) AS graded_scores,
        sum(truncated_spans) AS truncated_spans,
        count(*) FILTER (WHERE truncated_spans > 0) AS truncated_span_trials,
        count(*) FILTER (WHERE has_stop_reason) AS with_stop_reason,
        count(*) FILTER (WHERE has_stop_reason AND stop_reason = 'submitted') AS submitted,
        sum(dropped_turns) AS dropped_turns,
        count(*) FILTER (WHERE dropped_turns > 0) AS dropped_turn_trials,
        count(*) FILTER (WHERE verifier_error) AS verifier_error_trials,
        count(*) FILTER (
            WHERE verifier_error AND has_stop_reason AND stop_reason <> 'submitted'
        ) AS verifier_lost
    FROM records
    GROUP BY batch
),
reason_totals AS (
    SELECT
        batch,
        CASE WHEN has_stop_reason THEN stop_reason ELSE 'unknown' END AS reason,
        count(*) AS n
    FROM records
    GROUP BY ALL
),
reason_maps AS (
    SELECT batch, map_from_entries(list((reason, n) ORDER BY reason)) AS stop_reason_counts
    FROM reason_totals
    GROUP BY batch
),
unreadable AS (
    SELECT batch, count(*) AS unreadable_trials
    FROM problems
    WHERE kind = 'unreadable_trial' AND batch IS NOT NULL
    GROUP BY batch
),
batches AS (
    SELECT batch FROM per_batch
    UNION
    SELECT batch FROM unreadable
),
labels AS (
    -- run / step come with the trials; a batch of only unreadable trials takes its job's.
    SELECT batch, arg_min(run, source) AS run, arg_min(step, source) AS step
    FROM (
        SELECT batch, run, step, 0 AS source FROM trials
        UNION ALL
        SELECT batch, run, step, 1 AS source FROM jobs
    )
    GROUP BY batch
)
SELECT
    b.batch,
    l.run,
    l.step,
    coalesce(p.trials, 0) AS trials,
    coalesce(p.trials_with_spans, 0) AS trials_with_spans,
    CASE
        WHEN p.executed_trials > 0 THEN p.executed_passed::DOUBLE / p.executed_trials
        ELSE 0.0
    END AS solve_rate,
    CASE
        WHEN len(p.graded_scores) > 0
            THEN list_reduce(p.graded_scores, lambda acc, x: acc + x, 0.0::DOUBLE)
                / len(p.graded_scores)
        ELSE 0.0
    END AS graded_solve_rate,
    coalesce(len(p.graded_scores), 0)::BIGINT AS graded_trials,
    CASE WHEN p.trials > 0 THEN p.passed_trials::DOUBLE / p.trials ELSE 0.0 END AS raw_solve_rate,
    coalesce(p.executed_trials, 0) AS executed_trials,
    coalesce(p.trials - p.executed_trials, 0) AS infra_failed_trials,
    coalesce(p.trials - p.trials_with_spans, 0) AS empty_span_trials,
    coalesce(p.truncated_spans, 0)::BIGINT AS truncated_spans,
    coalesce(p.truncated_span_trials, 0) AS truncated_span_trials,
    coalesce(m.stop_reason_counts, MAP {}::MAP(VARCHAR, BIGINT)) AS stop_reason_counts,
    CASE
        WHEN p.with_stop_reason > 0
            THEN (p.with_stop_reason - p.submitted)::DOUBLE / p.with_stop_reason
        ELSE 0.0
    END AS scaffold_loss_rate,
    coalesce(u.unreadable_trials, 0) AS unreadable_trials,
    coalesce(p.dropped_turns, 0)::BIGINT AS dropped_turns,
    coalesce(p.dropped_turn_trials, 0) AS dropped_turn_trials,
    coalesce(p.verifier_error_trials, 0) AS verifier_error_trials,
    CASE
        WHEN p.with_stop_reason > 0 THEN p.verifier_lost::DOUBLE / p.with_stop_reason
        ELSE 0.0
    END AS verifier_scaffold_loss_rate
FROM batches AS b
LEFT JOIN labels AS l ON l.batch = b.batch
LEFT JOIN per_batch AS p ON p.batch = b.batch
-- (m and u are read in the select list, past a lambda the SQL linter cannot parse)
LEFT JOIN reason_maps AS m ON m.batch = b.batch  -- noqa: ST11
LEFT JOIN unreadable AS u ON u.batch = b.batch  -- noqa: ST11
ORDER BY l.run NULLS LAST, l.step NULLS LAST, b.batch;
