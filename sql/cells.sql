-- cells: one row per trial, the upstream harbor scorer's reading of it (missing_reward="zero"),
-- the cell WMO's `distill.tokens` assembles a TrialRecord from and `rollout_stats` scores.
--   task_id = harbor's task_id.get_name() (trials.task_id_name; task_name only when result.json
--   records no task_id), as WMO's scorer groups trials (not task_name: "demo/hello-offline" is
--   task "hello-offline" there); attempt = 1-based rank of trial_name (ascending) among the
--   batch's trials of that task, whichever agent of the job ran them (upstream's scorer.py
--   groups by task alone; harbor runs every task x attempt under each agent of a job);
--   agent_config is beside it (the trial's recorded AgentConfig, null when it records none).
--   reward: the value under the reward key (settings.reward_key, SET VARIABLE wmo_reward_key) in
--   verifier_result.rewards when it is a number, finite, and in [0, 1], as upstream's scorer sees
--   it: through harbor's TrialResult model, which makes a bool or a numeric string a number
--   (`true` -> 1.0, "0.5" -> 0.5), as the ingest stores it (tables/trials.py, harbor_number).
--   Otherwise the trial has no measured reward: reward = 0.0 stand-in, infra_failed = true.
--   A measured reward means infra_failed = false whatever exception the trial carries.
--   passed: settings.reward_mode 'raw' = reward is 1.0; 'positive-binary' = reward > 0.
--   graded tests (upstream ctrf.py over verifier/ctrf.json): the summary reading (passed, resolved =
--   passed + failed, unresolved = skipped + pending + other) and the itemized reading of
--   results.tests[].status (passed = "passed", resolved = "passed" or "failed", unresolved = the
--   rest); a reading with resolved = 0 is absent; the itemized one wins when both exist.
--   graded_score = passed / resolved, null (never 0.0) when there are no graded tests.
-- Extraction decisions this view relies on (tables/tests.py): a report that is missing, unreadable
-- or not CTRF (ctrf_status <> 'ok') grades nothing; summary counts that are not non-negative
-- integers (ctrf_summary_valid = false) mean the WHOLE report grades nothing, items included; a
-- null optional count (skipped / pending / other) reads as 0; the summary reading exists only when
-- passed and failed are both present (ctrf_summary_present).
CREATE OR REPLACE VIEW cells AS
-- One pass over trials: each CTE adds its columns to the trial's row (no join back by trial_key).
WITH item_counts AS (
    SELECT
        trial_key,
        count(*) FILTER (WHERE status = 'passed') AS passed,
        count(*) FILTER (WHERE status IN ('passed', 'failed')) AS resolved
    FROM tests
    GROUP BY trial_key
),
reward_texts AS (
    -- rewards values are JSON texts: "1", "1.0", "\"x\"", "null", "NaN", "Infinity" (a bool or a
    -- numeric string is stored as the number harbor's model makes of it).
    SELECT
        t.*,
        t.rewards[s.reward_key] AS reward_json,
        s.reward_mode
    FROM trials AS t
    CROSS JOIN settings AS s
),
reward_values AS (
    -- A JSON number starts with '-' or a digit (NaN / Infinity / -Infinity do not, bools and
    -- strings do not); 1e400 parses to infinity, which the [0, 1] test rejects (so does NaN).
    SELECT
        *,
        CASE
            WHEN regexp_matches(reward_json, '^-?[0-9]')
                THEN TRY_CAST(reward_json AS DOUBLE)
        END AS reward_number
    FROM reward_texts
),
measured AS (
    SELECT
        *,
        CASE WHEN reward_number BETWEEN 0.0 AND 1.0 THEN reward_number END AS measured_reward
    FROM reward_values
),
readings AS (
    SELECT
        m.*,
        m.ctrf_status = 'ok' AND (m.ctrf_summary_valid IS DISTINCT FROM false) AS report_grades,
        -- itemized reading (results.tests was a list)
        m.ctrf_n_tests IS NOT NULL AND coalesce(i.resolved, 0) > 0 AS items_present,
        coalesce(i.passed, 0) AS items_passed,
        coalesce(i.resolved, 0) AS items_resolved,
        m.ctrf_n_tests - coalesce(i.resolved, 0) AS items_unresolved,
        -- summary reading (DECIMAL(38, 0): two int64 counts may not sum in int64)
        coalesce(m.ctrf_summary_present, false)
            AND CAST(m.ctrf_passed AS DECIMAL(38, 0)) + m.ctrf_failed > 0 AS summary_present,
        CAST(m.ctrf_passed AS DECIMAL(38, 0)) AS summary_passed,
        CAST(m.ctrf_passed AS DECIMAL(38, 0)) + m.ctrf_failed AS summary_resolved,
        -- (a count past 64 bits is stored null: the sum, unresolved, is null too)
        CAST(m.ctrf_skipped AS DECIMAL(38, 0))
            + m.ctrf_pending
            + m.ctrf_other AS summary_unresolved
    FROM measured AS m
    LEFT JOIN item_counts AS i ON i.trial_key = m.trial_key
),
reading AS (
    SELECT
        *,
        CASE
            WHEN report_grades AND items_present THEN 'items'
            WHEN report_grades AND summary_present THEN 'summary'
        END AS tests_reading
    FROM readings
),
graded AS (
    SELECT
        *,
        CASE tests_reading
            WHEN 'items' THEN CAST(items_passed AS DECIMAL(38, 0))
            WHEN 'summary' THEN summary_passed
        END AS graded_passed,
        CASE tests_reading
            WHEN 'items' THEN CAST(items_resolved AS DECIMAL(38, 0))
            WHEN 'summary' THEN summary_resolved
        END AS graded_resolved,
        CASE tests_reading
            WHEN 'items' THEN CAST(items_unresolved AS DECIMAL(38, 0))
            WHEN 'summary' THEN summary_unresolved
        END AS graded_unresolved
    FROM reading
)
SELECT
    trial_key,
    batch,
    run,
    step,
    job_key,
    agent_config,
    coalesce(task_id_name, task_name) AS task_id,
    -- (BIGINT in both engines: Spark's row_number() is an int)
    CAST(row_number() OVER (
        -- (trial_key breaks a tie of two dirs recording one trial_name: the same ranks however
        -- the trials were read; upstream's stable sort keeps them in the order it loaded them)
        PARTITION BY batch, coalesce(task_id_name, task_name) ORDER BY trial_name, trial_key
    ) AS BIGINT) AS attempt,
    trial_name,
    coalesce(measured_reward, 0.0) AS reward,
    CASE reward_mode
        WHEN 'raw' THEN coalesce(measured_reward, 0.0) = 1.0
        WHEN 'positive-binary' THEN coalesce(measured_reward, 0.0) > 0.0
        ELSE error(
            'wmo_reward_mode must be ''raw'' or ''positive-binary'', got ''' || reward_mode
            || '''; set one of them, or RESET VARIABLE wmo_reward_mode for the default'
        )
    END AS passed,
    measured_reward IS NULL AS infra_failed,
    reward_json,
    TRY_CAST(graded_passed AS BIGINT) AS tests_passed,
    TRY_CAST(graded_resolved AS BIGINT) AS tests_resolved,
    TRY_CAST(graded_unresolved AS BIGINT) AS tests_unresolved,
    CAST(graded_passed AS DOUBLE) / CAST(graded_resolved AS DOUBLE) AS graded_score,
    tests_reading,
    exception_type,
    artifact_dir
FROM graded;
