"""Checks that turn a silent trap into a warning a person reads.

A reward key that no trial has makes every trial an "infra failure" with a 0.0 stand-in: the
numbers look like a broken batch, not like a typo. `reward_key_warning` says so and names the keys
that do occur. `connect()` warns (`RewardKeyWarning`) over the whole lake; `stats` and the exports
check their own scope and exit 1 on it under `--strict`.

    message = reward_key_warning(con, batch_glob="exp1/*")   # None when the key occurs
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


class RewardKeyWarning(UserWarning):
    """The reward key in force occurs in no trial in scope (every reward reads as missing)."""


# The reward key in force, and whether any trial in scope has it (stops at the first that does).
KEY_QUERY = """
WITH scope AS (
    SELECT rewards FROM trials
    WHERE ($batch_glob IS NULL OR batch GLOB $batch_glob) AND ($run IS NULL OR run = $run)
)
SELECT
    s.reward_key,
    EXISTS (SELECT 1 FROM scope WHERE map_contains(rewards, s.reward_key)) AS found
FROM settings AS s
"""
SCOPE_KEYS_QUERY = """
SELECT key, count(*) AS trials
FROM (
    SELECT unnest(map_keys(rewards)) AS key FROM trials
    WHERE ($batch_glob IS NULL OR batch GLOB $batch_glob) AND ($run IS NULL OR run = $run)
)
GROUP BY key
ORDER BY key
"""


def reward_key_warning(
    con: duckdb.DuckDBPyConnection, *, batch_glob: str | None = None, run: str | None = None
) -> str | None:
    """Why the reward key in force reads nothing in scope, or None when some trial has it (or
    no trial in scope has any reward key at all: then nothing points at a typo)."""
    params = {"batch_glob": batch_glob, "run": run}
    ((reward_key, found),) = con.execute(KEY_QUERY, params).fetchall()
    if found:
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


__all__ = ["RewardKeyWarning", "reward_key_warning"]
