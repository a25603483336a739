"""Spans from the WMO pi-bridge token sink: `{SINK}/{trial_name}.jsonl`, one `TokenSpan` JSON
per line (WMO's `distill.tokens.load_trial_spans`). Imported only when a trial has a sink file,
since pydantic is the one thing here no other table needs."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, model_validator

from wmo_lake.jsonfile import read_file
from wmo_lake.tables.fields import ProblemLog
from wmo_lake.tables.spans import SINK, SINK_CORRUPT, Spans, Turn, compress


class SinkSpan(BaseModel):
    """One line of the WMO pi-bridge token sink, validated as WMO's `TokenSpan` validates it:
    pydantic's default (lax) mode, so `1.0`, `"1"` or `true` is token id 1 and `"-0.1"` a
    logprob, what upstream's `load_trial_spans` keeps (`TokenSpan.model_validate_json`).
    `TokenSpan` is not among the seeds; its closest public source (the sibling `wmh` package's
    `providers/tinker.py`) declares these fields and the alignment check, with no strict config."""

    call_index: int = Field(ge=0)
    prompt_token_ids: list[int]
    sampled_token_ids: list[int]
    sampled_logprobs: list[float]

    @model_validator(mode="after")
    def _aligned(self) -> SinkSpan:
        if len(self.sampled_token_ids) != len(self.sampled_logprobs):
            raise ValueError(
                f"{len(self.sampled_token_ids)} sampled token(s) against "
                f"{len(self.sampled_logprobs)} logprob(s)"
            )
        return self


def from_sink(sink_path: Path, problems: ProblemLog) -> Spans:
    """Spans from a pi-bridge sink file; none at all when any line is invalid (as WMO's
    `distill.tokens`)."""
    advice = "the sink is corrupt, so delete this step's token sink directory and re-run the step"
    try:  # (read_file: a FIFO or a dir in the sink's place is an error, not a hang)
        text = read_file(sink_path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as error:
        why = error.strerror or error if isinstance(error, OSError) else error
        problems.add(
            "sink_corrupt", sink_path, f"cannot read token sink {sink_path}: {why}; {advice}"
        )
        return Spans(SINK_CORRUPT, [])
    spans: list[SinkSpan] = []
    for line_number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            spans.append(SinkSpan.model_validate_json(line))
        except ValidationError as error:
            reason = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'line'}: {e['msg']}"
                for e in error.errors()
            )
            problems.add(
                "sink_corrupt",
                sink_path,
                f"invalid token span on line {line_number} of {sink_path} ({reason}); {advice}",
            )
            return Spans(SINK_CORRUPT, [])
    observed = [span.call_index for span in spans]
    if observed != list(range(len(spans))):
        problems.add(
            "sink_corrupt",
            sink_path,
            f"token sink {sink_path} has call_index sequence {observed[:20]}"
            f"{'...' if len(observed) > 20 else ''}, expected 0..{len(spans) - 1}; more than one "
            "recorder appended to it (e.g. a re-run trial reused the sink), so delete this step's "
            "token sink directory and re-run the step",
        )
        return Spans(SINK_CORRUPT, [])
    turns = [Turn(s.prompt_token_ids, s.sampled_token_ids, s.sampled_logprobs) for s in spans]
    return Spans(SINK, compress(turns), "sink")
