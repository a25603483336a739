-- spans_full: one row per sampled turn (a `spans` row) with its FULL prompt given back.
-- Storage keeps each prompt as (prompt_prefix_len, prompt_new_ids): the prefix it shares with the
-- previous turn's full prompt + sampled tokens, then the new tokens. Within a merged sequence
-- (datum_spans: each prompt extends the previous prompt + sampled tokens whole), turn k's prompt
-- is the sequence's base (prompt_bases: what it kept of the sequences before it; empty for the
-- first) || for every turn j <= k of the sequence, in call order, turn j-1's sampled_token_ids
-- (none for its first turn) || turn j's prompt_new_ids. That is a running concatenation (a
-- window), never a recursion, so any number of turns.
CREATE OR REPLACE VIEW spans_full AS
WITH pieces AS (
    SELECT
        s.*,
        d.sequence_index,
        coalesce(
            lag(s.sampled_token_ids) OVER (
                PARTITION BY s.trial_key, d.sequence_index ORDER BY s.call_index
            ),
            []
        )
        || s.prompt_new_ids AS appended
    FROM spans AS s
    JOIN datum_spans AS d ON d.trial_key = s.trial_key AND d.call_index = s.call_index
),
running AS (
    SELECT
        *,
        flatten(
            list(appended) OVER (
                PARTITION BY trial_key, sequence_index
                ORDER BY call_index
                ROWS UNBOUNDED PRECEDING
            )
        ) AS sequence_prompt
    FROM pieces
)
SELECT
    r.trial_key,
    r.batch,
    r.trial_name,
    r.call_index,
    CASE
        WHEN b.base_token_ids IS NULL THEN r.sequence_prompt
        ELSE b.base_token_ids || r.sequence_prompt
    END AS prompt_token_ids,
    r.sampled_token_ids,
    r.sampled_logprobs,
    r.prompt_len,
    r.n_sampled,
    r.source
FROM running AS r
LEFT JOIN prompt_bases AS b USING (trial_key, sequence_index);
