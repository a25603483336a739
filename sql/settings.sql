-- settings: one row, the query-time settings every view reads (the only getvariable() calls).
-- A setting set with SET VARIABLE wmo_<name> wins; otherwise its default, which comes from the
-- registry (wmo_lake/settings.py) through the one-row setting_defaults table, so no default is
-- written in SQL. A per-batch setting (max_turns, max_tokens, context_budget) shows the value set
-- (NULL: each batch's recorded value applies) and, as <name>_default, the fallback for a batch that
-- recorded none; the view that applies it takes coalesce(set, recorded, default).
-- A value set is held to what its --<name> option and the API take (Setting.check): a count is a
-- whole number >= 1 as written (3.5, 0 and -3 are refused, where a cast would read them as
-- counts), the reward key nonempty (upstream's scorer refuses ''); else every view reading that
-- setting fails, naming the variable.
CREATE OR REPLACE VIEW settings AS
WITH set_values AS (
    -- as text: what was set, however it was typed ('4' and 4 alike); a count's text must be
    -- digits (a cast reads '3.5' as 4), at most 2^63 - 1 (past it the cast's own error named
    -- no variable)
    SELECT
        CAST(getvariable('wmo_reward_key') AS VARCHAR) AS reward_key,
        CAST(getvariable('wmo_reward_mode') AS VARCHAR) AS reward_mode,
        CAST(getvariable('wmo_max_turns') AS VARCHAR) AS max_turns,
        CAST(getvariable('wmo_max_tokens') AS VARCHAR) AS max_tokens,
        CAST(getvariable('wmo_context_budget') AS VARCHAR) AS context_budget,
        CAST(getvariable('wmo_max_datum_tokens') AS VARCHAR) AS max_datum_tokens
)
SELECT
    CASE
        WHEN v.reward_key = '' THEN error(
            'wmo_reward_key must be nonempty text'
            || '; set another value, or RESET VARIABLE wmo_reward_key for the default'
        )
        ELSE coalesce(v.reward_key, d.reward_key)
    END AS reward_key,
    coalesce(v.reward_mode, d.reward_mode) AS reward_mode,
    CASE
        WHEN
            regexp_matches(coalesce(v.max_turns, '1'), '^[1-9][0-9]{0,18}$')
            AND lpad(coalesce(v.max_turns, '1'), 19, '0') <= '9223372036854775807'
            THEN CAST(v.max_turns AS BIGINT)
        ELSE error(
            'wmo_max_turns must be a whole number >= 1, got ' || v.max_turns
            || '; set another value, or RESET VARIABLE wmo_max_turns for the default'
        )
    END AS max_turns,
    d.max_turns AS max_turns_default,
    CASE
        WHEN
            regexp_matches(coalesce(v.max_tokens, '1'), '^[1-9][0-9]{0,18}$')
            AND lpad(coalesce(v.max_tokens, '1'), 19, '0') <= '9223372036854775807'
            THEN CAST(v.max_tokens AS BIGINT)
        ELSE error(
            'wmo_max_tokens must be a whole number >= 1, got ' || v.max_tokens
            || '; set another value, or RESET VARIABLE wmo_max_tokens for the default'
        )
    END AS max_tokens,
    d.max_tokens AS max_tokens_default,
    CASE
        WHEN
            regexp_matches(coalesce(v.context_budget, '1'), '^[1-9][0-9]{0,18}$')
            AND lpad(coalesce(v.context_budget, '1'), 19, '0') <= '9223372036854775807'
            THEN CAST(v.context_budget AS BIGINT)
        ELSE error(
            'wmo_context_budget must be a whole number >= 1, got ' || v.context_budget
            || '; set another value, or RESET VARIABLE wmo_context_budget for the default'
        )
    END AS context_budget,
    d.context_budget AS context_budget_default,
    coalesce(
        CASE
            WHEN
                regexp_matches(coalesce(v.max_datum_tokens, '1'), '^[1-9][0-9]{0,18}$')
                AND lpad(coalesce(v.max_datum_tokens, '1'), 19, '0') <= '9223372036854775807'
                THEN CAST(v.max_datum_tokens AS BIGINT)
            ELSE error(
                'wmo_max_datum_tokens must be a whole number >= 1, got ' || v.max_datum_tokens
                || '; set another value, or RESET VARIABLE wmo_max_datum_tokens for the default'
            )
        END,
        d.max_datum_tokens
    ) AS max_datum_tokens
FROM setting_defaults AS d
CROSS JOIN set_values AS v;
