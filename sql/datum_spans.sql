-- datum_spans: one row per `spans` row, placed in the merged training sequence it belongs to
-- (issue 4, tinker-cookbook `trajectory_to_data` prefix merge over WMO's `tokens` spans).
-- A span continues the previous span's sequence iff its prompt extends the accumulated tokens
-- (previous prompt + its sampled tokens) as an exact list prefix. Storage already measured that:
-- prompt_prefix_len is the prefix shared with exactly those tokens, so the test is
-- prompt_prefix_len = previous prompt_len + previous n_sampled, and the appended context is then
-- exactly prompt_new_ids. Any other span starts a new sequence with its whole prompt.
CREATE OR REPLACE VIEW datum_spans AS
WITH placed AS (
    SELECT
        trial_key,
        batch,
        trial_name,
        call_index,
        prompt_len,
        prompt_prefix_len,
        n_sampled,
        coalesce(
            call_index > 0
            AND prompt_prefix_len
                = lag(prompt_len + n_sampled) OVER (PARTITION BY trial_key ORDER BY call_index),
            false
        ) AS extends_previous
    FROM spans
)
SELECT
    trial_key,
    batch,
    trial_name,
    call_index,
    prompt_len,
    prompt_prefix_len,
    n_sampled,
    extends_previous,
    -- 0-based index of the merged sequence in the episode, empty ones included
    sum(CASE WHEN extends_previous THEN 0 ELSE 1 END) OVER (
        PARTITION BY trial_key ORDER BY call_index ROWS UNBOUNDED PRECEDING
    )::BIGINT - 1 AS sequence_index,
    -- context tokens this span appends: the new prompt tokens, or the whole prompt at a start
    CASE WHEN extends_previous THEN prompt_len - prompt_prefix_len ELSE prompt_len END
        AS context_tokens
FROM placed;
