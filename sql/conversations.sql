-- One row per conversation harbor's own trace export makes of a trial's ATIF trajectories
-- (harbor 0.26 utils/traces_utils.py, issue 5; mirrored, never imported):
-- * the main trace (trajectory.json, then its continuations, file by file): one row per agent
--   EPISODE, i.e. per agent step that is not copied context, holding the steps of its file up to
--   and including that step; `episode` counts them 0.. across the files of the trial;
-- * each subagent trajectory (trace_source e.g. summarization-1-summary): one row, the whole file,
--   when it has an agent step.
-- Roles and contents as harbor builds them: system and user steps -> user; an agent step ->
-- assistant, "<think>reasoning</think>", the message ("<think>" restored when only "</think>" is
-- there), and one "<tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>" per call, joined by
-- newlines; an agent step's observation -> a user message after it, except after the episode's
-- own last step (its observation belongs to the next episode; subagents keep every observation);
-- agent.tool_definitions go into the first system message of a main file as <tools>...</tools>.
CREATE OR REPLACE VIEW conversations AS
WITH call_blocks AS (
    SELECT
        trial_key,
        file_index,
        step_index,
        -- in call order: the (call_index, block) pairs sorted, then joined
        array_to_string(
            list_transform(
                list_sort(list({'call_index': call_index, 'block': block})), lambda c: c.block
            ),
            chr(10)
        ) AS blocks
    FROM (
        SELECT
            *,
            '<tool_call>' || chr(10) || '{"name": ' || name_json
            || ', "arguments": ' || arguments || '}' || chr(10) || '</tool_call>' AS block
        FROM (
            SELECT
                *,
                -- the name as a JSON string: to_json of a one-field object, its key cut off
                -- (to_json of a bare string does not exist on every engine)
                CASE
                    WHEN function_name IS NULL THEN 'null'
                    ELSE substring(
                        CAST(to_json({'n': function_name}) AS VARCHAR),
                        6,
                        length(CAST(to_json({'n': function_name}) AS VARCHAR)) - 6
                    )
                END AS name_json
            FROM tool_calls
        ) AS named
    ) AS blocked
    GROUP BY trial_key, file_index, step_index
),

first_system_steps AS (
    SELECT trial_key, file_index, min(step_index) AS step_index, true AS is_first_system
    FROM steps
    WHERE source = 'system' AND trace_source = 'main'
    GROUP BY trial_key, file_index
),

turns AS (
    SELECT
        s.trial_key,
        s.file_index,
        s.step_index,
        s.source,
        s.observation,
        -- media in the step's own message, and in its observation (`media` holds both), apart:
        -- an episode's last step contributes its message, not its observation
        array_length(s.media) > coalesce(array_length(s.observation_media), 0) AS message_media,
        array_length(s.observation_media) > 0 AS observation_media,
        CASE s.source WHEN 'agent' THEN 'assistant' ELSE 'user' END AS role,
        CASE
            WHEN s.source = 'agent' THEN concat_ws(
                chr(10),
                CASE
                    WHEN s.reasoning_content <> ''
                        THEN '<think>' || s.reasoning_content || '</think>'
                END,
                CASE
                    WHEN s.message = '' THEN NULL
                    WHEN contains(s.message, '</think>') AND NOT contains(s.message, '<think>')
                        THEN '<think>' || s.message
                    ELSE s.message
                END,
                c.blocks
            )
            WHEN f.is_first_system AND t.tool_definitions IS NOT NULL
                THEN '<tools>' || chr(10) || t.tool_definitions || chr(10) || '</tools>'
                || chr(10) || chr(10) || coalesce(s.message, '')
            ELSE coalesce(s.message, '')
        END AS content
    FROM steps AS s
    LEFT JOIN call_blocks AS c USING (trial_key, file_index, step_index)
    LEFT JOIN first_system_steps AS f USING (trial_key, file_index, step_index)
    LEFT JOIN trajectories AS t USING (trial_key, file_index)
    WHERE s.source IN ('system', 'user', 'agent')
),

messages AS (
    -- each turn, and after an agent turn with an observation, that observation as a user turn
    SELECT
        trial_key,
        file_index,
        step_index,
        unnest(
            CASE
                WHEN source = 'agent' AND observation IS NOT NULL
                    THEN [
                        {'part': 0, 'role': role, 'content': content, 'media': message_media},
                        {
                            'part': 1,
                            'role': 'user',
                            'content': observation,
                            'media': observation_media
                        }
                    ]
                ELSE [{'part': 0, 'role': role, 'content': content, 'media': message_media}]
            END
        ) AS turn
    FROM turns
),

main_ends AS (
    SELECT
        trial_key,
        batch,
        trial_name,
        trace_source,
        file_index,
        step_index AS end_index,
        CAST(row_number() OVER (PARTITION BY trial_key ORDER BY file_index, step_index) AS BIGINT)
        - 1 AS episode,
        false AS keeps_last_observation
    FROM steps
    WHERE trace_source = 'main' AND source = 'agent' AND NOT coalesce(is_copied_context, false)
),

subagent_ends AS (
    SELECT
        trial_key,
        batch,
        trial_name,
        trace_source,
        file_index,
        max(step_index) AS end_index,
        0 AS episode,
        true AS keeps_last_observation
    FROM steps
    WHERE trace_source <> 'main'
    GROUP BY trial_key, batch, trial_name, trace_source, file_index
    HAVING bool_or(source = 'agent')
),

ends AS (
    SELECT
        *,
        trace_source <> 'main'
        OR episode = max(episode) OVER (PARTITION BY trial_key, trace_source) AS is_last_episode
    FROM (SELECT * FROM main_ends UNION ALL SELECT * FROM subagent_ends)
)

SELECT
    e.trial_key,
    e.batch,
    e.trial_name,
    e.trace_source,
    e.episode,
    e.is_last_episode,
    t.file AS last_file,
    t.model_name,
    -- in step order, a turn before its observation: (step, part, message) sorted
    list_transform(
        list_sort(
            list({
                'step_index': m.step_index,
                'part': m.turn.part,
                'message': {'role': m.turn.role, 'content': m.turn.content}
            })
        ),
        lambda x: x.message
    ) AS messages,
    count(*) AS n_messages,
    bool_or(m.turn.media) AS has_media
FROM ends AS e
JOIN messages AS m
    ON
        m.trial_key = e.trial_key
        AND m.file_index = e.file_index
        AND (
            m.step_index < e.end_index
            OR (m.step_index = e.end_index AND (m.turn.part = 0 OR e.keeps_last_observation))
        )
LEFT JOIN trajectories AS t ON t.trial_key = e.trial_key AND t.file_index = e.file_index
GROUP BY ALL
