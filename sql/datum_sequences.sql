-- datum_sequences: one row per merged training sequence of an episode (issue 4), empty ones
-- included, measured from span lengths alone (no token list is built): n_tokens = the opening
-- prompt + every appended context delta + every sampled token (datum_spans.context_tokens +
-- n_sampled), loss_tokens = the sampled tokens, longest_span_tokens = the longest prompt +
-- sampled length of its spans (what the context budget is held against). A sequence with
-- loss_tokens = 0 is skipped by `datums`; the others are its rows, in sequence_index order.
CREATE OR REPLACE VIEW datum_sequences AS
SELECT
    trial_key,
    any_value(batch) AS batch,
    sequence_index,
    count(*) AS n_spans,
    sum(context_tokens + n_sampled)::BIGINT AS n_tokens,
    sum(n_sampled)::BIGINT AS loss_tokens,
    max(prompt_len + n_sampled)::BIGINT AS longest_span_tokens
FROM datum_spans
GROUP BY trial_key, sequence_index;
