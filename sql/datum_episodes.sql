-- datum_episodes: one row per trial with at least one span (an episode), and per trial whose stop
-- reason is context_overflow even without spans (upstream data.py checks the stop reason before
-- the spans, so such a trial is an overflow drop), with its group advantage and whether it is
-- dropped whole (issue 4; never truncated: that would misalign tokens and logprobs). n_datums / datum_tokens / loss_tokens: its sequences with a sampled
-- token (the rows `datums` gives it when it is kept), their tokens and their sampled tokens. Rules:
--   reward, passed, infra_failed, task_id, attempt come from `cells`, stop_reason from
--     `trial_stop_reasons` (the columns trial_records shows; read there to skip its span lists);
--   advantage = reward - mean(reward) over the batch's trials of the same task (the group
--     `cells` ranks attempts in, as upstream's scorer groups them), every trial
--     counted (with or without spans), infra-failed stand-in rewards included (tinker-cookbook
--     compute_advantages: centred on the group mean, no std scaling); the mean is Python's
--     sum(rewards) / len(rewards) to the last bit, summed exactly as rollout_stats sums scores
--     (whole units of 2^-40 as integers, the remainders below as doubles, rounded once), where
--     avg() folds left and misses 0.1 + 0.2 + 0.3 = 0.6. The rewards are first scaled by the
--     power of two that brings the group's largest into [1, 2) (exact): unscaled, a group of tiny
--     rewards (9.4e-12 and 2.4e-15) has remainders wider than a double, whose sum is rounded
--     before the total is, one bit off Python's (as a group whose rewards lie more than 2^52
--     apart still can be, at a rounding tie: README, "On Spark");
--   drop_reason 'overflow' when stop_reason = 'context_overflow' or any span's prompt + sampled
--     length exceeds the context budget (`trial_caps`: wmo_context_budget, else the one the
--     trial's agent recorded: llm_kwargs.context_limit, else the pi bridge's context_window;
--     else the setting's default); else 'overlong' when any merged sequence with sampled
--     tokens is longer than max_datum_tokens (see the settings view); else NULL.
CREATE OR REPLACE VIEW datum_episodes AS
WITH group_tops AS (
    SELECT
        *,
        max(reward) OVER (PARTITION BY batch, task_id) AS group_top
    FROM cells
),
rough_exponents AS (
    -- floor(log2) of the group's largest reward when positive: e, or one off next to a power of
    -- two, where log2 rounds across it (DuckDB's log2(0.12499999999999999) is -3.0; Spark's,
    -- log(x) / log(2), floors 2^-29 one low)
    SELECT
        *,
        CASE WHEN group_top > 0.0 THEN floor(log2(group_top)) END AS rough_exponent
    FROM group_tops
),
scaled AS (
    -- 2^-e for the group's largest reward in [2^e, 2^(e+1)), the rough exponent put right by
    -- comparing with its powers of two, which are exact (capped: a subnormal's scale would be
    -- infinite); 1.0 for a group of zeros
    SELECT
        *,
        CASE
            WHEN group_top > 0.0 THEN pow(2.0, least(-(CASE
                WHEN pow(2.0, rough_exponent) > group_top THEN rough_exponent - 1
                WHEN pow(2.0, rough_exponent + 1) <= group_top THEN rough_exponent + 1
                ELSE rough_exponent
            END), 1000.0))
            ELSE 1.0
        END AS reward_scale
    FROM rough_exponents
),
reward_parts AS (
    -- 1099511627776 = 2^40: scaling by a power of two is exact
    SELECT
        *,
        CAST(floor(reward * reward_scale * 1099511627776.0) AS BIGINT) AS reward_units,
        reward * reward_scale * 1099511627776.0
        - floor(reward * reward_scale * 1099511627776.0) AS reward_remainder
    FROM scaled
),
group_sums AS (
    SELECT
        *,
        count(*) OVER task_group AS group_trials,
        sum(reward_units) OVER task_group AS group_units,
        sum(reward_remainder) OVER task_group AS group_remainder
    FROM reward_parts
    WINDOW task_group AS (PARTITION BY batch, task_id)
),
records AS (
    SELECT
        c.batch,
        c.run,
        c.step,
        c.task_id,
        c.attempt,
        c.trial_name,
        c.trial_key,
        c.reward,
        c.passed,
        c.infra_failed,
        r.stop_reason,
        -- the units total rounded once, with what that rounding dropped and the remainders
        -- added back before the divisions (both exact but the last)
        c.reward - (
            CAST(c.group_units AS DOUBLE)
            + (
                CAST(c.group_units - CAST(CAST(c.group_units AS DOUBLE) AS BIGINT) AS DOUBLE)
                + c.group_remainder
            )
        ) / 1099511627776.0 / c.reward_scale / c.group_trials AS advantage,
        k.context_budget,
        s.max_datum_tokens
    FROM group_sums AS c
    JOIN trial_stop_reasons AS r ON r.trial_key = c.trial_key
    JOIN trial_caps AS k ON k.trial_key = c.trial_key
    CROSS JOIN settings AS s
),
per_episode AS (
    SELECT
        trial_key,
        CAST(sum(n_spans) AS BIGINT) AS n_spans,
        count(*) AS n_sequences,
        count(*) FILTER (WHERE loss_tokens > 0) AS n_datums,
        max(longest_span_tokens) AS longest_span_tokens,
        max(n_tokens) FILTER (WHERE loss_tokens > 0) AS longest_datum_tokens,
        CAST(coalesce(sum(n_tokens) FILTER (WHERE loss_tokens > 0), 0) AS BIGINT) AS datum_tokens,
        CAST(sum(loss_tokens) AS BIGINT) AS loss_tokens
    FROM datum_sequences
    GROUP BY trial_key
)
SELECT
    r.batch,
    r.run,
    r.step,
    r.task_id,
    r.attempt,
    r.trial_name,
    r.trial_key,
    r.reward,
    r.passed,
    r.infra_failed,
    r.stop_reason,
    r.advantage,
    r.context_budget,
    r.max_datum_tokens,
    CAST(coalesce(e.n_spans, 0) AS BIGINT) AS n_spans,
    coalesce(e.n_sequences, 0) AS n_sequences,
    coalesce(e.n_datums, 0) AS n_datums,
    e.longest_span_tokens,
    e.longest_datum_tokens,
    CAST(coalesce(e.datum_tokens, 0) AS BIGINT) AS datum_tokens,
    CAST(coalesce(e.loss_tokens, 0) AS BIGINT) AS loss_tokens,
    CASE
        WHEN r.stop_reason = 'context_overflow' OR e.longest_span_tokens > r.context_budget
            THEN 'overflow'
        WHEN e.longest_datum_tokens > r.max_datum_tokens THEN 'overlong'
    END AS drop_reason
FROM records AS r
LEFT JOIN per_episode AS e USING (trial_key)
WHERE e.trial_key IS NOT NULL OR r.stop_reason = 'context_overflow';
