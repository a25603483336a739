-- trial_caps: one row per trial, the caps its stop reason and its spans are judged against.
-- Seed 000 `read_terminus_stop_reason(max_turns=...)` and seed 003 `rollout_stats(max_tokens=...)`:
-- a query-time override wins (SET VARIABLE wmo_max_turns / wmo_max_tokens; seed 003: "pass THIS
-- run's cap when re-reading another run's records"), else the trial's job's recorded
-- agents[0].kwargs.max_turns / kwargs.llm_kwargs.max_tokens. max_tokens falls back to 8192; a
-- max_turns neither recorded nor overridden stays null, and the max_turns test is then skipped.
CREATE OR REPLACE VIEW trial_caps AS
WITH overrides AS (
    SELECT
        CAST(getvariable('wmo_max_turns') AS BIGINT) AS max_turns,
        CAST(getvariable('wmo_max_tokens') AS BIGINT) AS max_tokens
)
SELECT
    t.trial_key,
    t.batch,
    coalesce(o.max_turns, j.max_turns) AS max_turns,
    coalesce(o.max_tokens, j.max_tokens, 8192) AS max_tokens
FROM trials AS t
CROSS JOIN overrides AS o
LEFT JOIN jobs AS j ON j.job_key = t.job_key;
