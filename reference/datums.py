"""Issue 4's datum merge in plain Python (tinker-cookbook's prefix merge), from the lake's `spans`
Parquet read with pyarrow: the `wmo-lake export datums` benchmark's anchor, independent of wmo_lake.
It restates the drop caps' defaults on purpose (an independent reading, like reference.oracle).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class DatumTotals:
    """What the anchor's datums add up to, to hold against the export's."""

    datums: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    parquet_bytes: int = 0


def datums_from_spans(
    span_files: list[Path],
    out: Path,
    context_budget: int = 65536,
    max_datum_tokens: int = 65536,
    overflow_trials: frozenset[str] = frozenset(),
) -> DatumTotals:
    """Issue 4's merge in plain Python: read `spans` with pyarrow, rebuild each full prompt from
    (prompt_prefix_len, prompt_new_ids), merge a trial's turns while each prompt extends the
    accumulated tokens, drop whole episodes that overflow or are overlong, write Parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = [
        "trial_key",
        "call_index",
        "prompt_prefix_len",
        "prompt_new_ids",
        "sampled_token_ids",
        "sampled_logprobs",
    ]
    by_trial: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in span_files:
        for row in pq.read_table(path, columns=columns).to_pylist():
            by_trial[row["trial_key"]].append(row)

    rows: dict[str, list[Any]] = defaultdict(list)
    totals = DatumTotals()
    for trial_key, turns in by_trial.items():
        turns.sort(key=lambda t: t["call_index"])
        sequences: list[tuple[list[int], list[float], list[float]]] = []
        tokens: list[int] = []
        mask: list[float] = []
        logprobs: list[float] = []
        previous: list[int] = []  # the previous turn's full prompt + sampled tokens
        dropped = trial_key in overflow_trials
        for turn in turns:
            prompt = previous[: turn["prompt_prefix_len"]] + turn["prompt_new_ids"]
            sampled = turn["sampled_token_ids"]
            if len(prompt) + len(sampled) > context_budget:
                dropped = True
            if len(prompt) >= len(tokens) and prompt[: len(tokens)] == tokens and tokens:
                delta = prompt[len(tokens) :]
            else:
                if any(m for m in mask):
                    sequences.append((tokens, mask, logprobs))
                tokens, mask, logprobs = [], [], []
                delta = prompt
            tokens.extend(delta)
            tokens.extend(sampled)
            mask.extend([0.0] * len(delta))
            mask.extend([1.0] * len(sampled))
            logprobs.extend([0.0] * len(delta))
            logprobs.extend(turn["sampled_logprobs"])
            previous = prompt + sampled
        if any(m for m in mask):
            sequences.append((tokens, mask, logprobs))
        if dropped or any(len(s[0]) > max_datum_tokens for s in sequences):
            continue
        for index, (seq_tokens, seq_mask, seq_logprobs) in enumerate(sequences):
            rows["trial_key"].append(trial_key)
            rows["fragment_index"].append(index)
            rows["model_input_tokens"].append(seq_tokens)
            rows["loss_mask"].append(seq_mask)
            rows["sampled_logprobs"].append(seq_logprobs)
            totals.datums += 1
            totals.tokens += len(seq_tokens)
            totals.loss_tokens += int(sum(seq_mask))
    table = pa.table(
        {
            "trial_key": pa.array(rows["trial_key"], pa.string()),
            "fragment_index": pa.array(rows["fragment_index"], pa.int32()),
            "model_input_tokens": pa.array(rows["model_input_tokens"], pa.list_(pa.int64())),
            "loss_mask": pa.array(rows["loss_mask"], pa.list_(pa.float32())),
            "sampled_logprobs": pa.array(rows["sampled_logprobs"], pa.list_(pa.float32())),
        }
    )
    pq.write_table(table, out, compression="zstd")
    totals.parquet_bytes = out.stat().st_size
    return totals
