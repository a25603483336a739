"""Checks that turn a silent trap into a warning a person reads.

A reward key that no trial has makes every trial an "infra failure" with a 0.0 stand-in: the
numbers look like a broken batch, not like a typo. `reward_key_warning` says so and names the keys
that do occur. `connect()` and Spark's `register()` warn (`RewardKeyWarning`) over the whole lake;
`stats` and the exports check their own scope and exit 1 on it under `--strict`.

    message = reward_key_warning(con, batch_glob="exp1/*")   # None when the key occurs
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb


class RewardKeyWarning(UserWarning):
    """The reward key in force occurs in no trial in scope (every reward reads as missing)."""


# Whether any trial in scope has the reward key in force: LIMIT 1 without an order lets DuckDB
# stop at the first match instead of reading every trial's rewards (an EXISTS reads them all).
KEY_QUERY = """
SELECT 1
FROM trials
WHERE ($batch_glob IS NULL OR batch GLOB $batch_glob)
  AND ($run IS NULL OR run = $run)
  AND map_contains(rewards, $reward_key)
LIMIT 1
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


def warn_on_unused_reward_key(
    con: duckdb.DuckDBPyConnection,
    *,
    batch_glob: str | None = None,
    run: str | None = None,
    rewrite: Callable[[str], str] | None = None,
) -> None:
    """A `RewardKeyWarning` when the reward key in force on `con` occurs in no trial in scope
    (`reward_key_warning`), pointing at the first caller outside this package; `rewrite` turns
    the message into its caller's terms (the Python API's `reward_key=`)."""
    message = reward_key_warning(con, batch_glob=batch_glob, run=run)
    if message is not None:
        package = os.path.dirname(os.path.abspath(__file__))
        text = message if rewrite is None else rewrite(message)
        warnings.warn(text, RewardKeyWarning, skip_file_prefixes=(package,))


__all__ = ["RewardKeyWarning", "reward_key_warning", "warn_on_unused_reward_key"]
