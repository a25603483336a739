-- span_lengths: one row per span (as `spans`), its token counts without its tokens: what
-- `rollout_stats` counts truncated turns on (n_sampled >= max_tokens). A plain projection of
-- `spans`; LAKE/lake.duckdb stores its rows (spans' files hold the tokens, so reading them for
-- these columns costs a file open per step), every other reader gets this view.
CREATE OR REPLACE VIEW span_lengths AS
SELECT
    trial_key,
    batch,
    trial_name,
    run,
    step,
    call_index,
    prompt_len,
    n_sampled
FROM spans;
