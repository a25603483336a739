"""The caps an agent ran under, read from harbor's `AgentConfig` as recorded: a job's first agent
(`jobs`) and each trial's own agent (`trials`), one reading for both."""

from __future__ import annotations

import math

from wmo_lake.tables.fields import Fields, fits_int64

# terminus-2's turn cap and its older names, in the order its __init__ honours them (harbor
# agents/terminus_2/terminus_2.py: max_turns when not None, else max_episodes, else episodes).
TURN_CAP_KEYS = ("max_turns", "max_episodes", "episodes")


def turn_cap(agent: Fields, *at: str) -> int | None:
    """The turn cap of the agent at `at` in `agent`'s document: the first of TURN_CAP_KEYS its
    kwargs record (not null), read as harbor reads it. A later name never stands in for an
    earlier one of the wrong type: harbor would not run under it either (that one is reported,
    the cap left null)."""
    for key in TURN_CAP_KEYS:
        if agent.get(*at, "kwargs", key) is not None:
            # max_turns goes through Terminus2Options (pydantic, lax: "3" and 3.0 are 3); the
            # older names reach its __init__ as they are
            if key == "max_turns":
                return agent.model_int(*at, "kwargs", key)
            return agent.int(*at, "kwargs", key)
    return None


def context_budget(agent: Fields, *at: str) -> int | None:
    """The collector's context budget as the agent recorded it: terminus-2's
    `llm_kwargs.context_limit`, else the `context_window` the pi bridge (and terminus-2's scorer
    too) is given; both are the run's `rollout.context_budget_tokens`."""
    limit = _tinker_context_limit(agent, *at)
    return limit if limit is not None else agent.int(*at, "kwargs", "context_window")


def _tinker_context_limit(agent: Fields, *at: str) -> int | None:
    """terminus-2's `llm_kwargs.context_limit` as TinkerLLM runs under it: `context_limit or
    DEFAULT_CONTEXT_LIMIT` (0, 0.0 and false are no limit of the run's), then `prompt_tokens >
    context_limit` as numbers: 10.0 is a budget of 10 (read as pydantic's lax mode reads an
    int, and reported), and 10.5 one of 10 too, since a count of tokens passes 10.5 exactly
    when it passes 10."""
    keys = (*at, "kwargs", "llm_kwargs", "context_limit")
    value = agent.get(*keys)
    if not value:
        return None
    if type(value) is float and math.isfinite(value) and not value.is_integer():
        return math.floor(value) if fits_int64(math.floor(value)) else None
    return agent.model_int(*keys) or None  # ("0" is no budget either)


def caps(agent: Fields, *at: str) -> dict[str, int | None]:
    """`max_turns`, `max_tokens` (the output cap per turn) and `context_limit` of an agent."""
    return {
        "max_turns": turn_cap(agent, *at),
        # TinkerLLM samples under tinker's SamplingParams(max_tokens=...), a pydantic model in
        # lax mode: 4.0 and "4" are 4
        "max_tokens": agent.model_int(*at, "kwargs", "llm_kwargs", "max_tokens"),
        "context_limit": context_budget(agent, *at),
    }
