-- settings: one row, the query-time settings every view reads (the only getvariable() calls).
-- A setting set with SET VARIABLE wmo_<name> wins; otherwise its default, which comes from the
-- registry (wmo_lake/settings.py) through the one-row setting_defaults table, so no default is
-- written in SQL. A per-batch setting (max_turns, max_tokens, context_budget) shows the value set
-- (NULL: each batch's recorded value applies) and, as <name>_default, the fallback for a batch that
-- recorded none; the view that applies it takes coalesce(set, recorded, default).
-- A value set is held to what its --<name> option and the API take (Setting.check): a count is a
-- positive whole number (3.5, 0 and -3 are refused, where a cast would read them as counts), the
-- reward key nonempty (upstream's scorer refuses ''); else every view reading it fails, saying so.
CREATE OR REPLACE VIEW settings AS
WITH set_values AS (
    SELECT
        CAST(getvariable('wmo_reward_key') AS VARCHAR) AS reward_key,
        CAST(getvariable('wmo_reward_mode') AS VARCHAR) AS reward_mode,
        getvariable('wmo_max_turns') AS max_turns,
        getvariable('wmo_max_tokens') AS max_tokens,
        getvariable('wmo_context_budget') AS context_budget,
        getvariable('wmo_max_datum_tokens') AS max_datum_tokens
),
-- NULL when unset; the count when whole and positive; else the error's text
checked AS (
    SELECT
        reward_key,
        reward_mode,
        CASE
            WHEN max_turns IS NULL THEN NULL
            WHEN TRY_CAST(max_turns AS BIGINT) >= 1
                AND TRY_CAST(max_turns AS DOUBLE) = TRY_CAST(max_turns AS BIGINT)
                THEN CAST(max_turns AS BIGINT)
            ELSE error(
                'wmo_max_turns must be a positive whole number, got ' || CAST(max_turns AS VARCHAR)
                || '; set one, or RESET VARIABLE wmo_max_turns'
            )
        END AS max_turns,
        CASE
            WHEN max_tokens IS NULL THEN NULL
            WHEN TRY_CAST(max_tokens AS BIGINT) >= 1
                AND TRY_CAST(max_tokens AS DOUBLE) = TRY_CAST(max_tokens AS BIGINT)
                THEN CAST(max_tokens AS BIGINT)
            ELSE error(
                'wmo_max_tokens must be a positive whole number, got '
                || CAST(max_tokens AS VARCHAR) || '; set one, or RESET VARIABLE wmo_max_tokens'
            )
        END AS max_tokens,
        CASE
            WHEN context_budget IS NULL THEN NULL
            WHEN TRY_CAST(context_budget AS BIGINT) >= 1
                AND TRY_CAST(context_budget AS DOUBLE) = TRY_CAST(context_budget AS BIGINT)
                THEN CAST(context_budget AS BIGINT)
            ELSE error(
                'wmo_context_budget must be a positive whole number, got '
                || CAST(context_budget AS VARCHAR)
                || '; set one, or RESET VARIABLE wmo_context_budget'
            )
        END AS context_budget,
        CASE
            WHEN max_datum_tokens IS NULL THEN NULL
            WHEN TRY_CAST(max_datum_tokens AS BIGINT) >= 1
                AND TRY_CAST(max_datum_tokens AS DOUBLE) = TRY_CAST(max_datum_tokens AS BIGINT)
                THEN CAST(max_datum_tokens AS BIGINT)
            ELSE error(
                'wmo_max_datum_tokens must be a positive whole number, got '
                || CAST(max_datum_tokens AS VARCHAR)
                || '; set one, or RESET VARIABLE wmo_max_datum_tokens'
            )
        END AS max_datum_tokens
    FROM set_values
)
SELECT
    CASE
        WHEN v.reward_key = '' THEN error(
            'wmo_reward_key must be nonempty text; set a key, or RESET VARIABLE wmo_reward_key'
        )
        ELSE coalesce(v.reward_key, d.reward_key)
    END AS reward_key,
    coalesce(v.reward_mode, d.reward_mode) AS reward_mode,
    v.max_turns,
    d.max_turns AS max_turns_default,
    v.max_tokens,
    d.max_tokens AS max_tokens_default,
    v.context_budget,
    d.context_budget AS context_budget_default,
    coalesce(v.max_datum_tokens, d.max_datum_tokens) AS max_datum_tokens
FROM setting_defaults AS d
CROSS JOIN checked AS v;
