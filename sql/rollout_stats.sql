-- rollout_stats: one row per batch, WMO's `rollout_stats` over the batch's trial records,
-- plus batch, run, step and unreadable_trials (trial dirs that could not be read, mostly for no
-- readable result.json: the `problems` the ingest recorded; a batch of only those still gets a row). Every job dir is a
-- batch: one with no trial dirs gets trials = 0 and every rate 0.0 (WMO's `rollout_stats`: "An empty batch ...
-- report[s] a 0.0 solve rate over zero executed trials").
--   solve_rate = passed / executed (not infra_failed) trials; graded_solve_rate = mean
--   graded_score over executed trials that have one (graded_trials); raw_solve_rate = passed /
--   all trials; truncated_spans = spans with len(sampled) >= max_tokens (`trial_caps`, `span_lengths`);
--   stop_reason_counts = reason -> trials, keys sorted, a null (or empty) reason counted as
--   'unknown'; scaffold_loss_rate = trials whose reason is not 'submitted' / trials with a
--   reason (null and '' are no reason, as WMO's truthiness test). An empty denominator
--   gives 0.0, a null measurement the counts tell apart from a score.
-- Beside the seed's columns (which keep their exact values), two things the seed cannot see:
--   dropped_turns / dropped_turn_trials: turns stopped at max_tokens that harbor kept no span or
--   step of (`trials.dropped_turns`, from trial.log); verifier_error_trials: trials whose
--   exception was raised by the verifier (`trial_stop_reasons.exception_side`), and
--   verifier_scaffold_loss_rate: the part of scaffold_loss_rate made of those trials (same
--   denominator), so scaffold_loss_rate - verifier_scaffold_loss_rate is the agent's.
-- graded_solve_rate = sum(scores) / n as WMO's Python computes it: Python >= 3.12's sum() of
-- floats is compensated (in practice the correctly rounded sum, whatever the order), which a left
-- fold misses in the last digit (0.1 + 0.2 + 0.3). Summed here exactly and in any order, so any
-- engine gives the same float: each score (in [0, 1]) splits into whole units of 2^-40 (exact
-- BIGINTs, summed exactly) and the remainder below (summed as doubles, far below the last digit
-- of the total); the total is rounded once.
CREATE OR REPLACE VIEW rollout_stats AS
WITH truncation AS (
    SELECT s.trial_key, count(*) AS truncated_spans
    FROM span_lengths AS s
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
        -- 1099511627776 = 2^40: scaling by a power of two is exact
        CAST(floor(c.graded_score * 1099511627776.0) AS BIGINT) AS graded_units,
        c.graded_score * 1099511627776.0 - floor(c.graded_score * 1099511627776.0)
            AS graded_remainder,
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
        count(*) FILTER (WHERE NOT infra_failed AND graded_score IS NOT NULL) AS graded_trials,
        sum(graded_units) FILTER (WHERE NOT infra_failed) AS graded_units,
        sum(graded_remainder) FILTER (WHERE NOT infra_failed) AS graded_remainder,
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
    -- keys in order: the entries sorted as (reason, n) pairs (list(... ORDER BY) does not
    -- transpile; sorting the list does)
    SELECT
        batch,
        map_from_entries(list_sort(list({'reason': reason, 'n': n}))) AS stop_reason_counts
    FROM reason_totals
    GROUP BY batch
),
graded_sums AS (
    -- the exact sum of the scores: the units total (< 2^63) rounded once, with what rounding
    -- it dropped and the remainders added back before the one division
    SELECT
        batch,
        graded_trials,
        CAST(graded_units AS DOUBLE)
        + (
            CAST(graded_units - CAST(CAST(graded_units AS DOUBLE) AS BIGINT) AS DOUBLE)
            + graded_remainder
        ) AS scaled_sum
    FROM per_batch
    WHERE graded_trials > 0
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
    UNION
    SELECT batch FROM jobs
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
        WHEN p.executed_trials > 0 THEN CAST(p.executed_passed AS DOUBLE) / p.executed_trials
        ELSE 0.0
    END AS solve_rate,
    -- 1099511627776 = 2^40 (an exact division)
    coalesce(g.scaled_sum / 1099511627776.0 / g.graded_trials, 0.0)
        AS graded_solve_rate,
    coalesce(p.graded_trials, 0) AS graded_trials,
    CASE WHEN p.trials > 0 THEN CAST(p.passed_trials AS DOUBLE) / p.trials ELSE 0.0 END
        AS raw_solve_rate,
    coalesce(p.executed_trials, 0) AS executed_trials,
    coalesce(p.trials - p.executed_trials, 0) AS infra_failed_trials,
    coalesce(p.trials - p.trials_with_spans, 0) AS empty_span_trials,
    CAST(coalesce(p.truncated_spans, 0) AS BIGINT) AS truncated_spans,
    coalesce(p.truncated_span_trials, 0) AS truncated_span_trials,
    coalesce(m.stop_reason_counts, CAST(map() AS MAP(VARCHAR, BIGINT))) AS stop_reason_counts,
    CASE
        WHEN p.with_stop_reason > 0
            THEN CAST(p.with_stop_reason - p.submitted AS DOUBLE) / p.with_stop_reason
        ELSE 0.0
    END AS scaffold_loss_rate,
    coalesce(u.unreadable_trials, 0) AS unreadable_trials,
    CAST(coalesce(p.dropped_turns, 0) AS BIGINT) AS dropped_turns,
    coalesce(p.dropped_turn_trials, 0) AS dropped_turn_trials,
    coalesce(p.verifier_error_trials, 0) AS verifier_error_trials,
    CASE
        WHEN p.with_stop_reason > 0 THEN CAST(p.verifier_lost AS DOUBLE) / p.with_stop_reason
        ELSE 0.0
    END AS verifier_scaffold_loss_rate
FROM batches AS b
LEFT JOIN labels AS l ON l.batch = b.batch
LEFT JOIN per_batch AS p ON p.batch = b.batch
-- (m and u are read in the select list, past a lambda the SQL linter cannot parse)
LEFT JOIN reason_maps AS m ON m.batch = b.batch  -- noqa: ST11
LEFT JOIN graded_sums AS g ON g.batch = b.batch
LEFT JOIN unreadable AS u ON u.batch = b.batch  -- noqa: ST11
ORDER BY l.run NULLS LAST, l.step NULLS LAST, b.batch;
