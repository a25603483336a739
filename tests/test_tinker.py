"""`wmo_lake.exports.datums.to_tinker` (issue 4, item 4): real `tinker.Datum`s in the shifted
next-token layout, pinned on hand-worked examples (tinker-cookbook's semantics, without depending
on it)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import polars as pl
import pytest

from wmo_lake.exports.datums import to_tinker

tinker = pytest.importorskip("tinker")

# The example, unshifted as the datums view gives it (see test_views_datums.py):
# turns [1,2,3]->[10,11], [1,2,3,10,11,4,5]->[12], [7,8]->[13,14], advantage 0.5.
ROWS: list[dict[str, Any]] = [
    {
        "model_input_tokens": [1, 2, 3, 10, 11, 4, 5, 12],
        "loss_mask": [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0],
        "sampled_logprobs": [0.0, 0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3],
        "advantage": 0.5,
    },
    {
        "model_input_tokens": [7, 8, 13, 14],
        "loss_mask": [0.0, 0.0, 1.0, 1.0],
        "sampled_logprobs": [0.0, 0.0, -0.4, -0.5],
        "advantage": 0.5,
    },
]


def values(datum: Any, key: str) -> np.ndarray:
    return datum.loss_fn_inputs[key].to_numpy()


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "ppo", "cispo", "dro"])
def test_policy_losses_get_logprobs_and_masked_advantages(loss_fn: str) -> None:
    first, second = to_tinker(ROWS, loss_fn=loss_fn)
    assert isinstance(first, tinker.Datum)
    assert isinstance(first.model_input, tinker.ModelInput)
    assert first.model_input.to_ints() == [1, 2, 3, 10, 11, 4, 5]
    assert set(first.loss_fn_inputs) == {"target_tokens", "logprobs", "advantages"}  # no "mask"
    for key in first.loss_fn_inputs:
        assert isinstance(first.loss_fn_inputs[key], tinker.TensorData)
    target = first.loss_fn_inputs["target_tokens"]
    assert target.dtype == "int64" and target.shape == [7]
    assert values(first, "target_tokens").tolist() == [2, 3, 10, 11, 4, 5, 12]
    assert values(first, "target_tokens").dtype == np.int64
    for key in ("logprobs", "advantages"):
        assert first.loss_fn_inputs[key].dtype == "float32"
        assert first.loss_fn_inputs[key].shape == [7]
        assert values(first, key).dtype == np.float32
    np.testing.assert_array_equal(
        values(first, "logprobs"),
        np.array([0.0, 0.0, -0.1, -0.2, 0.0, 0.0, -0.3], dtype=np.float32),
    )
    np.testing.assert_array_equal(
        values(first, "advantages"),
        np.array([0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.5], dtype=np.float32),
    )
    assert second.model_input.to_ints() == [7, 8, 13]
    assert values(second, "target_tokens").tolist() == [8, 13, 14]
    np.testing.assert_array_equal(values(second, "advantages"), np.float32([0.0, 0.5, 0.5]))
    np.testing.assert_array_equal(values(second, "logprobs"), np.float32([0.0, -0.4, -0.5]))


def test_cross_entropy_gets_weights_from_the_loss_mask() -> None:
    first, second = to_tinker(ROWS, loss_fn="cross_entropy")
    assert set(first.loss_fn_inputs) == {"target_tokens", "weights"}
    weights = first.loss_fn_inputs["weights"]
    assert weights.dtype == "float32" and weights.shape == [7]
    assert values(first, "weights").tolist() == [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert values(second, "weights").tolist() == [0.0, 1.0, 1.0]
    assert values(second, "target_tokens").tolist() == [8, 13, 14]


def test_negative_advantage_and_a_polars_frame() -> None:
    frame = pl.DataFrame(
        {
            "model_input_tokens": [[5, 6, 7]],
            "loss_mask": [[0.0, 1.0, 1.0]],
            "sampled_logprobs": [[0.0, -1.5, -0.25]],
            "advantage": [-0.75],
            "trial_name": ["t"],  # other columns are ignored
        }
    )
    (datum,) = to_tinker(frame)
    assert datum.model_input.to_ints() == [5, 6]
    assert values(datum, "target_tokens").tolist() == [6, 7]
    assert values(datum, "advantages").tolist() == [-0.75, -0.75]
    assert values(datum, "logprobs").tolist() == [-1.5, -0.25]


def test_an_empty_frame_gives_no_datums() -> None:
    assert to_tinker([]) == []


def test_unknown_loss_is_refused() -> None:
    with pytest.raises(ValueError, match="loss_fn 'gspo' is not supported; choose one of"):
        to_tinker(ROWS, loss_fn="gspo")


def test_a_one_token_datum_is_refused() -> None:
    row = {"model_input_tokens": [4], "loss_mask": [1.0], "sampled_logprobs": [-1.0]}
    with pytest.raises(ValueError, match="needs at least 2 tokens"):
        to_tinker([{**row, "advantage": 1.0}])


def test_missing_tinker_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tinker", None)  # `import tinker` now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'wmo-lake\[tinker\]'"):
        to_tinker(ROWS)
