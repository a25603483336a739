-- settings: one row, the query-time settings every view reads (the only getvariable() calls).
-- A setting set with SET VARIABLE wmo_<name> wins; otherwise its default, which comes from the
-- registry (wmo_lake/settings.py) through the one-row setting_defaults table, so no default is
-- written in SQL. A per-batch setting (max_turns, max_tokens, context_budget) shows the value set
-- (NULL: each batch's recorded value applies) and, as <name>_default, the fallback for a batch that
-- recorded none; the view that applies it takes coalesce(set, recorded, default).
CREATE OR REPLACE VIEW settings AS
SELECT
    coalesce(CAST(getvariable('wmo_reward_key') AS VARCHAR), d.reward_key) AS reward_key,
    coalesce(CAST(getvariable('wmo_reward_mode') AS VARCHAR), d.reward_mode) AS reward_mode,
    CAST(getvariable('wmo_max_turns') AS BIGINT) AS max_turns,
    d.max_turns AS max_turns_default,
    CAST(getvariable('wmo_max_tokens') AS BIGINT) AS max_tokens,
    d.max_tokens AS max_tokens_default,
    CAST(getvariable('wmo_context_budget') AS BIGINT) AS context_budget,
    d.context_budget AS context_budget_default,
    coalesce(CAST(getvariable('wmo_max_datum_tokens') AS BIGINT), d.max_datum_tokens)
        AS max_datum_tokens
FROM setting_defaults AS d;
