-- trial_stop_reasons: one row per trial, why its episode ended (WMO's `tokens`), from the evidence in
-- `stop_reasons`, the caps and the collection path in `trial_caps` (the trial's agent's).
--   pi-bridge path (the agent's kwargs carry token_sink_dir): the wmo-run.json trace's
--   stop_reason (agent/ first, then the trial root) when it is a string, else null; no trace is
--   null too (`read_trial_stop_reason`): never reconstructed from the exception.
--   terminus-2 path (every other trial; a wmo-run.json is ignored): the reconstruction
--   (`read_terminus_stop_reason`), in this order: the
--   recorded exception (AgentTimeoutError -> budget, ContextLengthExceededError ->
--   provider_error, any other -> error); a missing or non-integer n_episodes -> null;
--   n_episodes >= max_turns -> max_turns (skipped when no max_turns is known; a completion
--   declared on exactly the last allowed turn still reads max_turns); a trajectory whose last
--   agent step called mark_task_complete -> submitted; else error.
-- exception_side says whose exception it was, beside (never instead of) the seed's reason: an
--   exception raised by harbor's verifier phase (the classes of harbor.verifier.verifier plus
--   harbor.trial.errors.VerifierTimeoutError) is 'verifier', any other recorded exception
--   'agent' (the episode and its environment), no exception null. A verifier crash still reads
--   `error`; rollout_stats counts how much of the scaffold loss is the verifier's.
CREATE OR REPLACE VIEW trial_stop_reasons AS
SELECT
    s.trial_key,
    s.batch,
    CASE
        WHEN c.collection_path = 'pi-bridge' THEN s.trace_stop_reason
        WHEN s.exception_type = 'AgentTimeoutError' THEN 'budget'
        WHEN s.exception_type = 'ContextLengthExceededError' THEN 'provider_error'
        WHEN s.exception_type IS NOT NULL THEN 'error'
        WHEN s.n_episodes IS NULL THEN NULL
        WHEN s.n_episodes >= c.max_turns THEN 'max_turns'
        WHEN coalesce(s.declared_complete, false) THEN 'submitted'
        ELSE 'error'
    END AS stop_reason,
    CASE WHEN c.collection_path = 'pi-bridge' THEN 'trace' ELSE 'reconstructed' END
        AS stop_source,
    c.max_turns,
    CASE
        WHEN s.exception_type IN (
            'AddTestsDirError',
            'DownloadVerifierDirError',
            'RewardFileEmptyError',
            'RewardFileNotFoundError',
            'VerifierOutputParseError',
            'VerifierTimeoutError'
        ) THEN 'verifier'
        WHEN s.exception_type IS NOT NULL THEN 'agent'
    END AS exception_side
FROM stop_reasons AS s
JOIN trial_caps AS c ON c.trial_key = s.trial_key;
