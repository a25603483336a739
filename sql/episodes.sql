-- One row per trial (every `trials` row: an oracle / nop trial without a trajectory is here with
-- has_trajectory = false and zero counts): the numbers people otherwise compute by hand from its
-- ATIF trajectories (issue 5). Steps marked is_copied_context repeat earlier steps (a
-- continuation or a subagent starts with them), so they are left out of every count and sum.
-- agent_turns = the main trace's agent steps = the episodes harbor's trace export makes;
-- subagent_turns = the agent steps of subagent trajectories (context summarization);
-- tokens and cost sum every file's step metrics (harbor's final_metrics of trajectory.json sum
-- the same: its own steps plus its subagents'); declared_complete = the main trace's LAST agent
-- step (across continuations) calls mark_task_complete (WMO's test, over the whole trace);
-- the time span runs from the first to the last step timestamp. Counts and token sums are summed
-- exactly (DECIMAL(38, 0)) and are BIGINT, null for a total no 64-bit integer holds: the same
-- in DuckDB (whose BIGINT sum is a HUGEINT) and Spark (whose BIGINT sum overflows, an error).
CREATE OR REPLACE VIEW episodes AS
WITH original_steps AS (
    SELECT *
    FROM steps
    WHERE NOT coalesce(is_copied_context, false)
),

step_totals AS (
    SELECT
        trial_key,
        count(*) AS n_steps,
        count(*) FILTER (WHERE source = 'agent' AND trace_source = 'main') AS agent_turns,
        count(*) FILTER (WHERE source = 'agent' AND trace_source <> 'main') AS subagent_turns,
        coalesce(sum(CAST(n_tool_calls AS DECIMAL(38, 0))), 0) AS tool_calls,
        coalesce(sum(CAST(prompt_tokens AS DECIMAL(38, 0))), 0) AS prompt_tokens,
        coalesce(sum(CAST(completion_tokens AS DECIMAL(38, 0))), 0) AS completion_tokens,
        coalesce(sum(CAST(cached_tokens AS DECIMAL(38, 0))), 0) AS cached_tokens,
        sum(cost_usd) AS cost_usd
    FROM original_steps
    GROUP BY trial_key
),

time_spans AS (
    SELECT trial_key, min(timestamp) AS started_at, max(timestamp) AS finished_at
    FROM steps
    GROUP BY trial_key
),

calls_by_function AS (
    SELECT
        trial_key,
        -- keys in order: the (name, count) entries sorted (list(... ORDER BY) does not transpile)
        map_from_entries(list_sort(list({'function_name': function_name, 'n': n})))
            AS tool_calls_by_function
    FROM (
        SELECT c.trial_key, coalesce(c.function_name, '<unnamed>') AS function_name, count(*) AS n
        FROM tool_calls AS c
        JOIN original_steps AS s USING (trial_key, file_index, step_index)
        GROUP BY ALL
    )
    GROUP BY trial_key
),

last_agent_steps AS (
    SELECT trial_key, file_index, step_index
    FROM steps
    WHERE source = 'agent' AND trace_source = 'main'
    QUALIFY
        row_number() OVER (PARTITION BY trial_key ORDER BY file_index DESC, step_index DESC) = 1
),

completions AS (
    SELECT
        l.trial_key,
        coalesce(bool_or(c.function_name = 'mark_task_complete'), false) AS declared_complete
    FROM last_agent_steps AS l
    LEFT JOIN tool_calls AS c USING (trial_key, file_index, step_index)
    GROUP BY l.trial_key
),

files AS (
    SELECT
        trial_key,
        count(*) AS n_files,
        count(*) FILTER (WHERE trace_source <> 'main') AS n_subagent_files,
        -- the one main trajectory.json (file 0) of the trial
        max(CASE WHEN file_index = 0 AND trace_source = 'main' THEN status END) AS main_status
    FROM trajectories
    GROUP BY trial_key
)

SELECT
    tr.trial_key,
    tr.batch,
    tr.trial_name,
    tr.task_name,
    coalesce(f.n_files, 0) > 0 AS has_trajectory,
    coalesce(f.main_status, 'absent') AS trajectory_status,
    coalesce(f.n_files, 0) AS n_files,
    coalesce(f.n_subagent_files, 0) AS n_subagent_files,
    coalesce(st.n_steps, 0) AS n_steps,
    coalesce(st.agent_turns, 0) AS agent_turns,
    coalesce(st.subagent_turns, 0) AS subagent_turns,
    TRY_CAST(coalesce(st.tool_calls, 0) AS BIGINT) AS tool_calls,
    coalesce(cf.tool_calls_by_function, CAST(map() AS MAP(VARCHAR, BIGINT)))
        AS tool_calls_by_function,
    TRY_CAST(coalesce(st.prompt_tokens, 0) AS BIGINT) AS prompt_tokens,
    TRY_CAST(coalesce(st.completion_tokens, 0) AS BIGINT) AS completion_tokens,
    TRY_CAST(coalesce(st.cached_tokens, 0) AS BIGINT) AS cached_tokens,
    st.cost_usd,
    coalesce(co.declared_complete, false) AS declared_complete,
    ts.started_at,
    ts.finished_at,
    CAST(date_diff('microsecond', ts.started_at, ts.finished_at) AS DOUBLE) / 1000000.0 AS span_sec
FROM trials AS tr
LEFT JOIN step_totals AS st USING (trial_key)
LEFT JOIN time_spans AS ts USING (trial_key)
LEFT JOIN calls_by_function AS cf USING (trial_key)
LEFT JOIN completions AS co USING (trial_key)
LEFT JOIN files AS f USING (trial_key)
