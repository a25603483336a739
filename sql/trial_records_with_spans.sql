-- trial_records_with_spans: one row per trial, WMO's whole `TrialRecord` (wmo.distill.tokens):
-- the `trial_records` row plus its token spans in call order (`spans`, full prompts given back by
-- `spans_full`). `spans` is an empty list when the trial recorded no trustworthy training
-- evidence (see trials.spans_status for why). Rebuilding prompts is the expensive part: ask for
-- this view only when the spans are needed.
CREATE OR REPLACE VIEW trial_records_with_spans AS
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
    r.batch,
    r.run,
    r.step,
    r.task_id,
    r.attempt,
    r.trial_name,
    r.reward,
    r.passed,
    r.infra_failed,
    r.tests_passed,
    r.tests_resolved,
    r.tests_unresolved,
    r.graded_score,
    r.stop_reason,
    r.n_spans,
    coalesce(l.spans, []) AS spans,
    r.artifact_dir,
    r.trial_key
FROM trial_records AS r
LEFT JOIN span_lists AS l ON l.trial_key = r.trial_key;
