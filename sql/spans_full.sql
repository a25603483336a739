-- spans_full: one row per sampled turn (a `spans` row) with its FULL prompt given back.
-- Storage keeps each prompt as (prompt_prefix_len, prompt_new_ids): the prefix it shares with the
-- previous turn's full prompt + sampled tokens, then the new tokens. The full prompt of turn i is
-- (full_prompt[i-1] || sampled[i-1])[1 : prefix_len] || prompt_new_ids, turn 0 being its new ids.
CREATE OR REPLACE VIEW spans_full AS
WITH RECURSIVE rebuilt(trial_key, call_index, prompt_token_ids, sampled_token_ids) AS (
    SELECT trial_key, call_index, prompt_new_ids, sampled_token_ids
    FROM spans
    WHERE call_index = 0
    UNION ALL
    SELECT
        s.trial_key,
        s.call_index,
        list_concat(
            list_slice(list_concat(r.prompt_token_ids, r.sampled_token_ids), 1, s.prompt_prefix_len),
            s.prompt_new_ids
        ),
        s.sampled_token_ids
    FROM rebuilt AS r
    JOIN spans AS s
        ON s.trial_key = r.trial_key AND s.call_index = r.call_index + 1
)
SELECT
    s.trial_key,
    s.batch,
    s.trial_name,
    s.call_index,
    r.prompt_token_ids,
    s.sampled_token_ids,
    s.sampled_logprobs,
    s.prompt_len,
    s.n_sampled,
    s.source
FROM spans AS s
JOIN rebuilt AS r USING (trial_key, call_index);
