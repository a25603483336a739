-- prompt_bases: one row per merged sequence (datum_spans.sequence_index) after the first of an
-- episode whose prompts broke their prefix: base_token_ids, the first prompt_prefix_len tokens of
-- its opening prompt, i.e. what it keeps of the tokens accumulated before it. Sequences that keep
-- nothing (prompt_prefix_len 0) have no row.
-- Rule, without recursion (so without a depth limit: Spark stops at 100 levels): sequence c's
-- accumulated tokens are base_c || C_c, where C_c is its spans' prompt_new_ids ||
-- sampled_token_ids in call order, and base_c is the first L_c tokens (L_c: its opening span's
-- prompt_prefix_len) of the previous sequence's accumulated tokens. Unrolled, base_c is, in order
-- of d, the first (m - L_d) tokens of C_d for every earlier sequence d with m > L_d, where
-- m = min(L_e for d < e <= c) and L_0 = 0.
CREATE OR REPLACE VIEW prompt_bases AS
WITH sequences AS (
    SELECT
        trial_key,
        sequence_index,
        max(CASE WHEN NOT extends_previous THEN prompt_prefix_len END) AS kept_len
    FROM datum_spans
    GROUP BY trial_key, sequence_index
),
broken AS (
    SELECT trial_key
    FROM sequences
    GROUP BY trial_key
    HAVING max(sequence_index) > 0
),
streams AS (
    -- C_d, ordered by sorting (call_index, tokens) pairs: list(... ORDER BY) does not transpile
    -- (the token lists read from `spans`, filtered before they meet a window or a join)
    SELECT
        p.trial_key,
        p.sequence_index,
        flatten(
            list_transform(
                list_sort(
                    list({
                        'call_index': s.call_index,
                        'tokens': s.prompt_new_ids || s.sampled_token_ids
                    })
                ),
                lambda piece: piece.tokens
            )
        ) AS tokens
    FROM (SELECT * FROM spans WHERE trial_key IN (SELECT trial_key FROM broken)) AS s
    JOIN datum_spans AS p ON p.trial_key = s.trial_key AND p.call_index = s.call_index
    GROUP BY p.trial_key, p.sequence_index
),
reach AS (
    -- for each later sequence c and earlier d = e - 1: how far into the accumulated tokens c
    -- keeps what d wrote, min(L_e) over d < e <= c (a running min from c down)
    SELECT
        later.trial_key,
        later.sequence_index,
        earlier.sequence_index - 1 AS source_index,
        min(earlier.kept_len) OVER (
            PARTITION BY later.trial_key, later.sequence_index
            ORDER BY earlier.sequence_index DESC
            ROWS UNBOUNDED PRECEDING
        ) AS kept_end
    FROM sequences AS later
    JOIN sequences AS earlier
        ON
            earlier.trial_key = later.trial_key
            AND earlier.sequence_index BETWEEN 1 AND later.sequence_index
    WHERE later.trial_key IN (SELECT trial_key FROM broken)
),
pieces AS (
    SELECT
        r.trial_key,
        r.sequence_index,
        r.source_index,
        array_slice(s.tokens, 1, r.kept_end - source.kept_len) AS tokens
    FROM reach AS r
    JOIN sequences AS source
        ON source.trial_key = r.trial_key AND source.sequence_index = r.source_index
    JOIN streams AS s ON s.trial_key = r.trial_key AND s.sequence_index = r.source_index
    WHERE r.kept_end > source.kept_len
)
SELECT
    trial_key,
    sequence_index,
    flatten(
        list_transform(
            list_sort(list({'source_index': source_index, 'tokens': tokens})),
            lambda piece: piece.tokens
        )
    ) AS base_token_ids
FROM pieces
GROUP BY trial_key, sequence_index;
