-- datum_stats: one row per batch (every batch with trials), the health of its training datums (issue 4):
-- datums, fragments (datums beyond the first of their episode: prefix breaks),
-- fragmentation_rate = fragments / datums (0.0 when no datums), overflow_drops / overlong_drops
-- (dropped episodes, see datum_episodes), loss_tokens (sampled tokens trained on) and
-- context_tokens (mask-0 tokens) over the kept datums.
CREATE OR REPLACE VIEW datum_stats AS
WITH per_batch_datums AS (
    SELECT
        batch,
        count(*) AS datums,
        count(*) FILTER (WHERE fragment_index > 0) AS fragments,
        sum(loss_tokens) AS loss_tokens,
        sum(n_tokens - loss_tokens) AS context_tokens
    FROM datums
    GROUP BY batch
),
batches AS (
    SELECT batch, any_value(run) AS run, any_value(step) AS step
    FROM cells
    GROUP BY batch
),
per_batch_episodes AS (
    SELECT
        batch,
        count(*) AS episodes,
        count(*) FILTER (WHERE drop_reason = 'overflow') AS overflow_drops,
        count(*) FILTER (WHERE drop_reason = 'overlong') AS overlong_drops
    FROM datum_episodes
    GROUP BY batch
)
SELECT
    b.batch,
    b.run,
    b.step,
    coalesce(e.episodes, 0) AS episodes,
    coalesce(d.datums, 0) AS datums,
    coalesce(d.fragments, 0) AS fragments,
    CASE WHEN coalesce(d.datums, 0) = 0 THEN 0.0 ELSE d.fragments / d.datums END
        AS fragmentation_rate,
    coalesce(e.overflow_drops, 0) AS overflow_drops,
    coalesce(e.overlong_drops, 0) AS overlong_drops,
    coalesce(d.loss_tokens, 0)::BIGINT AS loss_tokens,
    coalesce(d.context_tokens, 0)::BIGINT AS context_tokens
FROM batches AS b
LEFT JOIN per_batch_episodes AS e USING (batch)
LEFT JOIN per_batch_datums AS d USING (batch);
