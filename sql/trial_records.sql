-- trial_records: one row per trial, WMO's `TrialRecord` (wmo.distill.tokens) without its token
-- spans: the scorer's cell (`cells`) joined with the trial's stop reason (`trial_stop_reasons`)
-- and its span count. Light on purpose: no prompt is rebuilt, so it costs about what `cells`
-- costs. The spans themselves (full prompts) are opt-in: `trial_records_with_spans`.
CREATE OR REPLACE VIEW trial_records AS
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
    c.artifact_dir,
    c.trial_key
FROM cells AS c
JOIN trial_stop_reasons AS r ON r.trial_key = c.trial_key
JOIN trials AS t ON t.trial_key = c.trial_key;
