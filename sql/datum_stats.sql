-- datum_stats: one row per batch (every batch with trials), the health of its training datums
-- (issue 4): episodes (trials with spans), kept_episodes (episodes not dropped: the ones
-- `datums` is built from; one whose turns sampled nothing gives no datum), datums, fragments
-- (datums beyond the first of their episode: prefix breaks), fragmentation_rate = fragments /
-- datums (0.0 when no datums), overflow_drops / overlong_drops (episodes dropped whole, see
-- datum_episodes; a context_overflow trial without spans is an overflow drop too, so episodes
-- minus the drops is no count of kept episodes), loss_tokens (sampled tokens trained on) and
-- context_tokens (mask-0 tokens) over the datums kept. Counted from datum_episodes' lengths:
-- exactly the rows of `datums`, without building their token lists.
CREATE OR REPLACE VIEW datum_stats AS
WITH batches AS (
    SELECT batch, any_value(run) AS run, any_value(step) AS step
    FROM cells
    GROUP BY batch
),
per_batch AS (
    SELECT
        batch,
        count(*) FILTER (WHERE n_spans > 0) AS episodes,
        count(*) FILTER (WHERE n_spans > 0 AND drop_reason IS NULL) AS kept_episodes,
        count(*) FILTER (WHERE drop_reason = 'overflow') AS overflow_drops,
        count(*) FILTER (WHERE drop_reason = 'overlong') AS overlong_drops,
        sum(n_datums) FILTER (WHERE drop_reason IS NULL) AS datums,
        sum(n_datums - 1) FILTER (WHERE drop_reason IS NULL AND n_datums > 0) AS fragments,
        sum(loss_tokens) FILTER (WHERE drop_reason IS NULL) AS loss_tokens,
        sum(datum_tokens - loss_tokens) FILTER (WHERE drop_reason IS NULL) AS context_tokens
    FROM datum_episodes
    GROUP BY batch
)
SELECT
    b.batch,
    b.run,
    b.step,
    coalesce(e.episodes, 0) AS episodes,
    coalesce(e.kept_episodes, 0) AS kept_episodes,
    coalesce(e.datums, 0)::BIGINT AS datums,
    coalesce(e.fragments, 0)::BIGINT AS fragments,
    CASE WHEN coalesce(e.datums, 0) = 0 THEN 0.0 ELSE e.fragments / e.datums END
        AS fragmentation_rate,
    coalesce(e.overflow_drops, 0) AS overflow_drops,
    coalesce(e.overlong_drops, 0) AS overlong_drops,
    coalesce(e.loss_tokens, 0)::BIGINT AS loss_tokens,
    coalesce(e.context_tokens, 0)::BIGINT AS context_tokens
FROM batches AS b
LEFT JOIN per_batch AS e USING (batch);
