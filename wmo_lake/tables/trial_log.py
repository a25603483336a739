"""Turns harbor drops, counted from the trial's `trial.log` (a `trials` column).

When a completion stops at max_tokens (`finish_reason: length`), harbor's LLM layer raises
`OutputLengthExceededError` before it builds a response, so that turn leaves no token ids, no
logprobs and no trajectory step: terminus-2 only logs "Output length exceeded: ..." to the
trial's logger (trial.log) and re-asks, with the cut-off answer in the next prompt. WMO's
`truncated_spans` (a span that sampled >= max_tokens) cannot see such a turn, since it has no
span. The log line is the only record, so it is counted here: one per dropped turn.
"""

from __future__ import annotations

from pathlib import Path

from wmo_lake.jsonfile import read_file
from wmo_lake.tables.fields import ProblemLog

TRIAL_LOG = "trial.log"
# terminus-2's `self.logger.debug(f"Output length exceeded: {e}")` (harbor 0.26), one line per
# dropped turn; matched anywhere in a line so a log format with a prefix still counts.
DROPPED_TURN_MARK = b"Output length exceeded: "


def dropped_turns(trial_dir: Path | str, problems: ProblemLog) -> int | None:
    """Turns cut at max_tokens that harbor kept no record of; None without a readable trial.log."""
    path = f"{trial_dir}/{TRIAL_LOG}"
    try:
        data = read_file(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        problems.add(
            "unreadable_file",
            path,
            f"cannot read {path}: {error.strerror or error}; its dropped turns (output length "
            "exceeded) are unknown",
        )
        return None
    return sum(1 for line in data.splitlines() if DROPPED_TURN_MARK in line)
