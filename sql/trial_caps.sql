-- trial_caps: one row per trial, the caps its stop reason and its spans are judged against.
-- WMO's `read_terminus_stop_reason(max_turns=...)`, `rollout_stats(max_tokens=...)` and the
-- datum budget: a query-time setting wins (SET VARIABLE wmo_max_turns / wmo_max_tokens /
-- wmo_context_budget; WMO: "pass THIS run's cap when re-reading another run's records"), else
-- the cap the trial's agent ran under: its job's record of it (jobs) when the job names one
-- agent (jobs.n_agents = 1: every trial ran it) or the trial records none (trials.agent_source
-- null), else the trial's own record (trials.max_turns, max_tokens, context_limit: a job of
-- several agents runs each trial under one of them; a job dir without its config.json), else
-- the setting's default (see the settings view; max_turns has none: it then stays null, and
-- the max_turns test is skipped).
-- job_key and collection_path: the trial's job, and how its spans and stop reason were read (its
-- agent's, else its job's), so `trial_stop_reasons` needs no other pass over trials.
CREATE OR REPLACE VIEW trial_caps AS
SELECT
    t.trial_key,
    t.batch,
    t.job_key,
    coalesce(
        s.max_turns,
        CASE
            WHEN j.n_agents = 1 OR t.agent_source IS NULL THEN j.max_turns
            ELSE t.max_turns
        END,
        s.max_turns_default
    ) AS max_turns,
    coalesce(
        s.max_tokens,
        CASE
            WHEN j.n_agents = 1 OR t.agent_source IS NULL THEN j.max_tokens
            ELSE t.max_tokens
        END,
        s.max_tokens_default
    ) AS max_tokens,
    coalesce(
        s.context_budget,
        CASE
            WHEN j.n_agents = 1 OR t.agent_source IS NULL THEN j.context_limit
            ELSE t.context_limit
        END,
        s.context_budget_default
    ) AS context_budget,
    coalesce(t.collection_path, j.collection_path) AS collection_path  -- (a lake of before it)
FROM trials AS t
CROSS JOIN settings AS s
LEFT JOIN jobs AS j ON j.job_key = t.job_key;
