"""Checks that turn a silent trap into a warning a person reads.

A lake whose rows an older wmo-lake read (before a fixed bug or a new reading of a field) gives
that older version's numbers until its runs are ingested again: `connect()` says so
(`StaleRulesWarning`), naming the partitions, from the manifest's record of the extraction rules
each partition was read under (Manifest.extractions).

A reward key that no trial has makes every trial an "infra failure" with a 0.0 stand-in: the
numbers look like a broken batch, not like a typo. `reward_key_warning` says so and names the keys
that do occur. `connect()` and Spark's `register()` warn (`RewardKeyWarning`) over the whole lake;
`stats`, `compare`, `report`, `collect` and the exports check their own scope (the trials they
show), and `stats` and the exports exit 1 on it under `--strict`.

    message = reward_key_warning(con, batch_glob="exp1/*")   # None when the key occurs
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from wmo_lake.selection import NO_RUN, scope_sql

if TYPE_CHECKING:
    import duckdb

    from wmo_lake.store import Manifest


class LakeWarning(UserWarning):
    """A warning about what a lake's numbers mean (the CLI prints it as one `warning:` line)."""


class RewardKeyWarning(LakeWarning):
    """The reward key in force occurs in no trial in scope (every reward reads as missing)."""


class InvalidRewardWarning(LakeWarning):
    """Trials in an export's scope carry a reward that is no measurement (a 0.0 stand-in)."""


class StaleRulesWarning(LakeWarning):
    """Some of the lake's rows were read by an older wmo-lake's extraction rules."""


class NoMatchWarning(LakeWarning):
    """A selection (`batch=`, `run=`) that matches no batch: its result is empty."""


class NoTrialsWarning(LakeWarning):
    """A path given to `ingest()` holds no trial dir (a typo, a run not written yet): nothing
    of it is in the lake (`wmo-lake ingest` says so on stderr, `--strict` exits 1)."""


class UnfinishedJobWarning(LakeWarning):
    """A batch in scope comes from a harbor job that has not finished: its figures are of the
    trials written so far (upstream's scorer refuses such a job: 'harbor job did not finish')."""


class ShortJobWarning(LakeWarning):
    """A batch in scope comes from a finished harbor job the lake holds fewer trials of than it
    plans: its figures are of a part of the step (upstream's scorer would not score it as it
    is: scoring it again resumes the job, which runs the missing trials). Or it holds more,
    trials whose dirs are gone (a resume deleted them; an ingest without --prune kept them)."""


class PooledBatchWarning(LakeWarning):
    """A batch in scope is labelled from more than one job dir (two run trees with the same run
    name, or a job dir that moved): its figures pool their trials as one batch."""


# partitions a StaleRulesWarning names before it says how many more there are
NAMED_PARTITIONS = 3


# warnings point at the caller outside the package (its dir with a separator: a caller's
# `wmo_lake_train.py` beside the package dir starts with the dir's name too)
_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Whether any trial in scope has the reward key in force: LIMIT 1 without an order lets DuckDB
# stop at the first match instead of reading every trial's rewards (an EXISTS reads them all).
KEY_QUERY = f"""
SELECT 1
FROM trials
WHERE {scope_sql()}
  AND ($batches IS NULL OR list_contains(CAST($batches AS VARCHAR[]), batch))
  AND map_contains(rewards, $reward_key)
LIMIT 1
"""
SCOPE_KEYS_QUERY = f"""
SELECT key, count(*) AS trials
FROM (
    SELECT unnest(map_keys(rewards)) AS key FROM trials
    WHERE {scope_sql()}
      AND ($batches IS NULL OR list_contains(CAST($batches AS VARCHAR[]), batch))
)
GROUP BY key
ORDER BY key
"""


def reward_key_warning(
    con: duckdb.DuckDBPyConnection,
    *,
    batch_glob: str | None = None,
    run: str | None = None,
    batches: Sequence[str] | None = None,
) -> str | None:
    """Why the reward key in force reads nothing in scope (the trials of `batch_glob`, `run` and
    `batches`, each when given), or None when some trial has it (or no trial in scope has any
    reward key at all: then nothing points at a typo)."""
    params = {"batch_glob": batch_glob, "run": run, "batches": batches}
    ((reward_key,),) = con.execute("SELECT reward_key FROM settings").fetchall()
    if con.execute(KEY_QUERY, {**params, "reward_key": reward_key}).fetchall():
        return None
    keys = con.execute(SCOPE_KEYS_QUERY, params).fetchall()
    if not keys:
        return None
    occurring = ", ".join(f"{key!r} ({n} trials)" for key, n in keys)
    return (
        f"reward key {reward_key!r} occurs in no trial in scope, so every trial reads as an infra "
        f"failure with a 0.0 stand-in; the keys that occur: {occurring}. Pass --reward-key KEY "
        "(SQL: SET VARIABLE wmo_reward_key = 'KEY')"
    )


# Trials in scope whose reward under the key in force is there but no measurement (1.5, NaN, "abc",
# null), as `stats` notes them per batch.
INVALID_REWARDS_QUERY = f"""
SELECT count(*) AS trials, count(DISTINCT batch) AS batches,
    arg_min(reward_json, trial_name) AS example
FROM cells
WHERE {scope_sql()}
  AND ($batches IS NULL OR list_contains(CAST($batches AS VARCHAR[]), batch))
  AND infra_failed AND reward_json IS NOT NULL
"""


def invalid_reward_warning(
    con: duckdb.DuckDBPyConnection,
    *,
    batch_glob: str | None = None,
    run: str | None = None,
    batches: Sequence[str] | None = None,
) -> str | None:
    """What an export says when batches in scope hold trials whose reward is no measurement:
    upstream's scorer raises for each such batch as a whole (no datum of it reaches a trainer),
    where the lake reads those trials as infra failures with the 0.0 stand-in and keeps the rest
    of the batch. None when there are none."""
    params = {"batch_glob": batch_glob, "run": run, "batches": batches}
    ((count, n_batches, example),) = con.execute(INVALID_REWARDS_QUERY, params).fetchall()
    if not count:
        return None
    return (
        f"{n_batches} batch(es) in scope hold {count} trial(s) whose reward is no measurement "
        f"(e.g. {example}; expected a number in [0, 1]): WMO's scorer refuses such a batch "
        "whole, where the lake reads those trials as infra failures with a 0.0 stand-in and "
        "exports the rest of the batch (problems kind 'invalid_reward'); fix the verifier's "
        "output, or leave those batches out (--batch, --run)"
    )


def warn_on_unused_reward_key(
    con: duckdb.DuckDBPyConnection,
    *,
    batch_glob: str | None = None,
    run: str | None = None,
    batches: Sequence[str] | None = None,
    rewrite: Callable[[str], str] | None = None,
    invalid_rewards: bool = False,
) -> None:
    """A `RewardKeyWarning` when the reward key in force on `con` occurs in no trial in scope
    (`reward_key_warning`), pointing at the first caller outside this package; `rewrite` turns
    the message into its caller's terms (the Python API's `reward_key=`). `invalid_rewards`
    (an export's): also an `InvalidRewardWarning` for rewards that are no measurement."""
    found = scope_warning(
        con, batch_glob=batch_glob, run=run, batches=batches, invalid_rewards=invalid_rewards
    )
    if found is not None:
        warn_from_caller(found[0], found[1], rewrite)


def scope_warning(
    con: duckdb.DuckDBPyConnection,
    *,
    batch_glob: str | None = None,
    run: str | None = None,
    batches: Sequence[str] | None = None,
    invalid_rewards: bool = False,
) -> tuple[str, type[LakeWarning]] | None:
    """The one warning about the rewards in scope, and its category: a reward key no trial has
    (`reward_key_warning`), else, with `invalid_rewards` (an export's), rewards that are no
    measurement (`invalid_reward_warning`); None when neither."""
    message = reward_key_warning(con, batch_glob=batch_glob, run=run, batches=batches)
    if message is not None:
        return message, RewardKeyWarning
    if invalid_rewards:  # (with no trial holding the key, none holds an invalid value)
        message = invalid_reward_warning(con, batch_glob=batch_glob, run=run, batches=batches)
        if message is not None:
            return message, InvalidRewardWarning
    return None


def warn_from_caller(
    message: str, category: type[LakeWarning], rewrite: Callable[[str], str] | None = None
) -> None:
    """Warn `message` (in the caller's terms, by `rewrite`) pointing at the first caller outside
    this package."""
    text = message if rewrite is None else rewrite(message)
    warnings.warn(text, category, skip_file_prefixes=(_PACKAGE,))


# Whether the selection matches a batch, as `rollout_stats` has them: every job dir is one,
# with or without trials (an empty job dir; one whose trial dirs are all unreadable).
ANY_BATCH_QUERY = f"""
SELECT 1
FROM (
    SELECT batch, run FROM jobs
    UNION ALL
    SELECT batch, run FROM trials
    UNION ALL
    SELECT batch, run FROM problems WHERE kind = 'unreadable_trial' AND batch IS NOT NULL
)
WHERE {scope_sql()}
LIMIT 1
"""


def matches_a_batch(
    con: duckdb.DuckDBPyConnection, batch_glob: str | None, run: str | None
) -> bool:
    """Whether the selection matches a batch `stats` lists, trials or none."""
    return bool(con.execute(ANY_BATCH_QUERY, {"batch_glob": batch_glob, "run": run}).fetchall())


# The runs of the lake's batches as rollout_stats labels them (NO_RUN: those outside a run), of
# the same job dirs, trials and unreadable trials as ANY_BATCH_QUERY.
RUNS_QUERY = f"""
SELECT DISTINCT coalesce(run, '{NO_RUN}') AS run FROM (
    SELECT run FROM jobs
    UNION ALL
    SELECT run FROM trials
    UNION ALL
    SELECT run FROM problems WHERE kind = 'unreadable_trial' AND batch IS NOT NULL
)
ORDER BY run
"""


def runs_held(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The lake's runs, sorted; [] when it has no batches at all."""
    return [run for (run,) in con.execute(RUNS_QUERY).fetchall()]


def warn_on_no_match(con: duckdb.DuckDBPyConnection, batch: str | None, run: str | None) -> None:
    """A `NoMatchWarning` for an empty result of a selection that matches no batch (a typo in a
    glob reads as a step with no trials), pointing at the first caller outside this package. A
    selection of batches that hold no readable trial (which `stats` lists) gets none."""
    if matches_a_batch(con, batch, run):
        return
    given = ", ".join(
        f"{name}={value!r}" for name, value in (("batch", batch), ("run", run)) if value is not None
    )
    warn_from_caller(
        f"no batch matches {given} (the result is empty); wl.stats(lake) lists them ('*' in a "
        "batch glob crosses '/')",
        NoMatchWarning,
    )


def stale_rules_warning(manifest: Manifest, lake: str) -> str | None:
    """Why some of the lake's numbers may not be this version's, or None when every partition
    was read under this version's extraction rules (or the lake holds none)."""
    from wmo_lake.columns import extract_version

    current = extract_version()
    stale = [p for p in manifest.catalog if manifest.extractions.get(p) != current]
    if not stale:
        return None
    named = "; ".join(_partition_label(p) for p in stale[:NAMED_PARTITIONS])
    more = len(stale) - NAMED_PARTITIONS
    if more > 0:
        named += f"; and {more} more"
    return (
        f"{len(stale)} of the {len(manifest.catalog)} (run, step) partitions of the lake {lake} "
        f"hold rows an older wmo-lake read ({named}), so their numbers may differ from what this "
        "version reads from the same files (a bug fixed since, a field read anew); run `wmo-lake "
        "ingest` on their run trees again to read them by this version's rules (`wmo-lake ingest "
        "--prune` when trial dirs of theirs are gone from disk: a gone dir's rows cannot be read "
        "again)"
    )


def _partition_label(partition: str) -> str:
    """`run exp1, step 3` (or `no run`, `no step`) for a partition path."""
    from wmo_lake.store import partition_values

    run, step = partition_values(partition)
    return ("no run" if run is None else f"run {run}") + (
        ", no step" if step is None else f", step {step}"
    )


def warn_on_stale_rules(
    manifest: Manifest, lake: str, rewrite: Callable[[str], str] | None = None
) -> None:
    """A `StaleRulesWarning` when part of the lake was read by older rules (`stale_rules_warning`),
    pointing at the first caller outside this package; `rewrite` as for
    `warn_on_unused_reward_key`."""
    message = stale_rules_warning(manifest, lake)
    if message is not None:
        warn_from_caller(message, StaleRulesWarning, rewrite)


__all__ = [
    "LakeWarning",
    "NoMatchWarning",
    "RewardKeyWarning",
    "StaleRulesWarning",
    "matches_a_batch",
    "reward_key_warning",
    "stale_rules_warning",
    "warn_on_no_match",
    "warn_on_stale_rules",
    "warn_on_unused_reward_key",
]
