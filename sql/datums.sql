-- datums: one row per training sequence, UNshifted (issue 4; tinker-cookbook
-- `trajectory_to_data` semantics over seed 000's spans). Per kept episode (datum_episodes with
-- no drop_reason), spans in call_index order accumulate into one sequence while each prompt
-- extends the accumulated tokens (datum_spans): the appended context (prompt_new_ids) gets loss
-- mask 0.0 and logprob 0.0, the sampled tokens mask 1.0 and their sampled logprobs. A span that
-- does not extend starts a new sequence with its whole prompt: its first `prompt_prefix_len`
-- tokens are the previous sequence's first tokens, so whole prompts are rebuilt per sequence,
-- never per span. Sequences without a sampled token are skipped; fragment_index numbers the rest
-- (0-based, > 0 means the episode's prompt broke its prefix before this datum).
CREATE OR REPLACE VIEW datums AS
WITH RECURSIVE
kept AS (
    SELECT * FROM datum_episodes WHERE drop_reason IS NULL
),
pieces AS (
    SELECT
        p.trial_key,
        p.sequence_index,
        p.call_index,
        p.extends_previous,
        p.prompt_len,
        p.prompt_prefix_len,
        p.n_sampled,
        s.prompt_new_ids,
        -- what this span appends after the sequence's opening prompt
        CASE
            WHEN p.extends_previous THEN s.prompt_new_ids || s.sampled_token_ids
            ELSE s.sampled_token_ids
        END AS tokens,
        list_resize([]::DOUBLE[], CASE WHEN p.extends_previous THEN p.context_tokens ELSE 0 END, 0.0)
            AS context_zeros,
        s.sampled_logprobs
    FROM datum_spans AS p
    JOIN spans AS s USING (trial_key, call_index)
    WHERE p.trial_key IN (SELECT trial_key FROM kept)
),
sequences AS (
    SELECT
        trial_key,
        sequence_index,
        sum(n_sampled) AS loss_tokens,
        flatten(list(tokens ORDER BY call_index)) AS body_tokens,
        flatten(
            list(context_zeros || list_resize([]::DOUBLE[], n_sampled, 1.0) ORDER BY call_index)
        ) AS body_mask,
        flatten(list(context_zeros || sampled_logprobs ORDER BY call_index)) AS body_logprobs
    FROM pieces
    GROUP BY trial_key, sequence_index
),
openings AS (
    -- the span that opens each sequence: its prompt is the sequence's context
    SELECT trial_key, sequence_index, prompt_len, prompt_prefix_len, prompt_new_ids
    FROM pieces
    WHERE NOT extends_previous
),
sequence_parts AS (
    SELECT * FROM sequences JOIN openings USING (trial_key, sequence_index)
),
-- whole tokens per sequence; a later opening prompt = previous sequence[:prefix] || new ids
built(trial_key, sequence_index, model_input_tokens) AS (
    SELECT trial_key, sequence_index, prompt_new_ids || body_tokens
    FROM sequence_parts
    WHERE sequence_index = 0
    UNION ALL
    SELECT
        f.trial_key,
        f.sequence_index,
        list_slice(b.model_input_tokens, 1, f.prompt_prefix_len) || f.prompt_new_ids
            || f.body_tokens
    FROM built AS b
    JOIN sequence_parts AS f
        ON f.trial_key = b.trial_key AND f.sequence_index = b.sequence_index + 1
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
    b.model_input_tokens,
    list_resize([]::DOUBLE[], q.prompt_len, 0.0) || q.body_mask AS loss_mask,
    list_resize([]::DOUBLE[], q.prompt_len, 0.0) || q.body_logprobs AS sampled_logprobs,
    len(b.model_input_tokens)::BIGINT AS n_tokens,
    q.loss_tokens::BIGINT AS loss_tokens,
    k.reward,
    k.passed,
    k.infra_failed,
    k.advantage
FROM sequence_parts AS q
JOIN built AS b USING (trial_key, sequence_index)
JOIN kept AS k USING (trial_key)
WHERE q.loss_tokens > 0;
