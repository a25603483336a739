-- datums: one row per training sequence, UNshifted (issue 4; tinker-cookbook
-- `trajectory_to_data` semantics over WMO's `tokens` spans). Per kept episode (datum_episodes with
-- no drop_reason), spans in call_index order accumulate into one sequence while each prompt
-- extends the accumulated tokens (datum_spans): the appended context (prompt_new_ids) gets loss
-- mask 0.0 and logprob 0.0, the sampled tokens mask 1.0 and their sampled logprobs. A span that
-- does not extend starts a new sequence with its whole prompt: the first `prompt_prefix_len`
-- tokens it keeps of the sequences before it (prompt_bases, mask 0.0) || its prompt_new_ids.
-- Sequences without a sampled token are skipped; fragment_index numbers the rest (0-based, > 0
-- means the episode's prompt broke its prefix before this datum). No recursion: each sequence is
-- its base || its spans' pieces, ordered by sorting (call_index, piece) pairs.
CREATE OR REPLACE VIEW datums AS
WITH kept AS (
    SELECT * FROM datum_episodes WHERE drop_reason IS NULL
),
pieces AS (
    -- what each span appends; zeros are made by mapping the token list they stand for
    -- (placement from datum_spans, token lists joined from `spans` after its windows)
    SELECT
        d.trial_key,
        d.sequence_index,
        d.call_index,
        d.n_sampled,
        d.context_tokens,
        s.prompt_new_ids || s.sampled_token_ids AS tokens,
        list_transform(s.prompt_new_ids, lambda token: 0.0::DOUBLE)
        || list_transform(s.sampled_token_ids, lambda token: 1.0::DOUBLE) AS mask,
        list_transform(s.prompt_new_ids, lambda token: 0.0::DOUBLE) || s.sampled_logprobs
            AS logprobs
    FROM datum_spans AS d
    JOIN spans AS s ON s.trial_key = d.trial_key AND s.call_index = d.call_index
    WHERE d.trial_key IN (SELECT trial_key FROM kept)
),
sequences AS (
    SELECT
        trial_key,
        sequence_index,
        sum(n_sampled)::BIGINT AS loss_tokens,
        sum(context_tokens + n_sampled)::BIGINT AS n_tokens,
        list_sort(
            list({'call_index': call_index, 'tokens': tokens, 'mask': mask, 'logprobs': logprobs})
        ) AS ordered
    FROM pieces
    GROUP BY trial_key, sequence_index
),
bodies AS (
    SELECT
        q.trial_key,
        q.sequence_index,
        q.loss_tokens,
        q.n_tokens,
        coalesce(b.base_token_ids, []) AS base,
        flatten(list_transform(q.ordered, lambda piece: piece.tokens)) AS tokens,
        flatten(list_transform(q.ordered, lambda piece: piece.mask)) AS mask,
        flatten(list_transform(q.ordered, lambda piece: piece.logprobs)) AS logprobs
    FROM sequences AS q
    LEFT JOIN prompt_bases AS b USING (trial_key, sequence_index)
    WHERE q.loss_tokens > 0
)
SELECT
    k.batch,
    k.run,
    k.step,
    k.task_id,
    k.attempt,
    k.trial_name,
    (row_number() OVER (PARTITION BY q.trial_key ORDER BY q.sequence_index) - 1)::INTEGER
        AS fragment_index,
    q.base || q.tokens AS model_input_tokens,
    list_transform(q.base, lambda token: 0.0::DOUBLE) || q.mask AS loss_mask,
    list_transform(q.base, lambda token: 0.0::DOUBLE) || q.logprobs AS sampled_logprobs,
    q.n_tokens,
    q.loss_tokens,
    k.reward,
    k.passed,
    k.infra_failed,
    k.advantage
FROM bodies AS q
JOIN kept AS k USING (trial_key);
