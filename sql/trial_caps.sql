-- trial_caps: one row per trial, the caps its stop reason and its spans are judged against.
-- WMO's `read_terminus_stop_reason(max_turns=...)` and `rollout_stats(max_tokens=...)`:
-- a query-time setting wins (SET VARIABLE wmo_max_turns / wmo_max_tokens; WMO: "pass THIS
-- run's cap when re-reading another run's records"), else the trial's job's recorded
-- agents[0].kwargs.max_turns / kwargs.llm_kwargs.max_tokens, else the setting's default (see the
-- settings view; max_turns has none: it then stays null, and the max_turns test is skipped).
-- job_key: the trial's job, so `trial_stop_reasons` reads its collection path without another
-- pass over trials.
CREATE OR REPLACE VIEW trial_caps AS
SELECT
    t.trial_key,
    t.batch,
    t.job_key,
    coalesce(s.max_turns, j.max_turns, s.max_turns_default) AS max_turns,
    coalesce(s.max_tokens, j.max_tokens, s.max_tokens_default) AS max_tokens
FROM trials AS t
CROSS JOIN settings AS s
LEFT JOIN jobs AS j ON j.job_key = t.job_key;
