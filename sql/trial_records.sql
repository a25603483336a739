-- trial_records: one row per trial, seed 000's TrialRecord: the scorer's cell (`cells`) joined
-- with the trial's stop reason (`trial_stop_reasons`) and its token spans in call order (`spans`,
-- full prompts given back by `spans_full`). `spans` is an empty list when the trial recorded no
-- trustworthy training evidence (see trials.spans_status for why).
CREATE OR REPLACE VIEW trial_records AS
WITH span_lists AS (
    SELECT
        trial_key,
        -- in call order by sorting on the first field (list(... ORDER BY) does not transpile)
        list_sort(
            list(
                {
                    'call_index': call_index,
                    'prompt_token_ids': prompt_token_ids,
                    'sampled_token_ids': sampled_token_ids,
                    'sampled_logprobs': sampled_logprobs
                }
            )
        ) AS spans
    FROM spans_full
    GROUP BY trial_key
)
SELECT
    c.batch,
    c.run,
    c.step,
    c.task_id,
    c.attempt,
    c.trial_name,
    c.reward,
    c.passed,
    c.infra_failed,
    c.tests_passed,
    c.tests_resolved,
    c.tests_unresolved,
    c.graded_score,
    r.stop_reason,
    coalesce(t.n_spans, 0) AS n_spans,
    coalesce(l.spans, []) AS spans,
    c.artifact_dir,
    c.trial_key
FROM cells AS c
JOIN trial_stop_reasons AS r ON r.trial_key = c.trial_key
JOIN trials AS t ON t.trial_key = c.trial_key
LEFT JOIN span_lists AS l ON l.trial_key = c.trial_key;
