"""Spans from the WMO pi-bridge token sink ({SINK}/{trial_name}.jsonl), for trials whose
result.json records no rollout details (seed 000, `load_trial_spans`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harbor_shapes import write_job, write_trial

from wmo_lake.ingest import ingest
from wmo_lake.lake import connect


def _span(
    i: int, prompt: list[int], sampled: list[int], logprobs: list[float] | None = None
) -> str:
    return json.dumps(
        {
            "call_index": i,
            "prompt_token_ids": prompt,
            "sampled_token_ids": sampled,
            "sampled_logprobs": logprobs if logprobs is not None else [-0.5] * len(sampled),
        }
    )


def _setup(tmp_path: Path, details) -> tuple[Path, Path]:
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "pi__1", trial_id="pi", rollout_details=details)
    sink = tmp_path / "sink"
    sink.mkdir()
    return tmp_path / "runs", sink


@pytest.mark.parametrize("details", [None, [], "absent"], ids=["null", "empty", "absent"])
def test_sink_spans_when_no_rollout_details(tmp_path: Path, details) -> None:
    runs, sink = _setup(tmp_path, None if details == "absent" else details)
    if details == "absent":
        path = runs / "job" / "pi__1" / "result.json"
        doc = json.loads(path.read_text())
        del doc["agent_result"]["rollout_details"]
        path.write_text(json.dumps(doc, indent=4))
    (sink / "pi__1.jsonl").write_text(
        _span(0, [1, 2], [3]) + "\n\n" + _span(1, [1, 2, 3, 4], [5, 6]) + "\n"
    )
    ingest([runs], tmp_path / "lake", sinks=[sink])
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT spans_status, n_spans FROM trials").fetchall() == [("sink", 2)]
    rows = con.execute(
        "SELECT call_index, prompt_token_ids, sampled_token_ids, source FROM spans_full ORDER BY 1"
    ).fetchall()
    assert rows == [(0, [1, 2], [3], "sink"), (1, [1, 2, 3, 4], [5, 6], "sink")]


def test_without_sinks_the_trial_has_no_spans(tmp_path: Path) -> None:
    runs, sink = _setup(tmp_path, None)
    (sink / "pi__1.jsonl").write_text(_span(0, [1], [2]) + "\n")
    ingest([runs], tmp_path / "lake")
    assert connect(tmp_path / "lake").execute(
        "SELECT spans_status, n_spans FROM trials"
    ).fetchall() == [("absent", 0)]


def test_first_sink_dir_holding_the_file_wins(tmp_path: Path) -> None:
    runs, sink = _setup(tmp_path, None)
    other = tmp_path / "other"
    other.mkdir()
    (other / "pi__1.jsonl").write_text(_span(0, [9], [8]) + "\n")
    (sink / "pi__1.jsonl").write_text(_span(0, [1], [2]) + "\n")
    ingest([runs], tmp_path / "lake", sinks=[tmp_path / "missing", other, sink])
    assert connect(tmp_path / "lake").execute(
        "SELECT prompt_token_ids FROM spans_full"
    ).fetchall() == [([9],)]


def test_recorded_rollout_details_win_over_a_sink(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "pi__1", turns=[([1], [2], [-0.1])])
    sink = tmp_path / "sink"
    sink.mkdir()
    (sink / "pi__1.jsonl").write_text(_span(0, [9], [8]) + "\n")
    ingest([tmp_path / "runs"], tmp_path / "lake", sinks=[sink])
    assert connect(tmp_path / "lake").execute(
        "SELECT source, sampled_token_ids FROM spans"
    ).fetchall() == [("rollout_details", [2])]


@pytest.mark.parametrize(
    ("lines", "advice"),
    [
        ([_span(0, [1], [2]), "{not json"], "line 2"),
        ([_span(0, [1], [2], [-0.1, -0.2])], "line 1"),
        ([_span(0, [1], ["2"])], "line 1"),
        ([_span(0, [1], [2]), _span(0, [1, 2, 3], [4])], "call_index sequence [0, 0]"),
        ([_span(1, [1], [2])], "call_index sequence [1]"),
    ],
    ids=["invalid-json", "logprob-mismatch", "string-token", "repeated-index", "not-from-zero"],
)
def test_corrupt_sink_gives_no_spans_and_actionable_problem(
    tmp_path: Path, lines: list[str], advice: str
) -> None:
    runs, sink = _setup(tmp_path, None)
    (sink / "pi__1.jsonl").write_text("\n".join(lines) + "\n")
    summary = ingest([runs], tmp_path / "lake", sinks=[sink])
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT spans_status, n_spans FROM trials").fetchall() == [
        ("sink_corrupt", 0)
    ]
    assert con.execute("SELECT count(*) FROM spans").fetchall() == [(0,)]
    ((kind, message),) = con.execute("SELECT kind, message FROM problems").fetchall()
    assert kind == "sink_corrupt" and summary.problems == 1
    assert advice in message and "delete this step's token sink directory" in message


def test_editing_a_sink_reingests_the_trial(tmp_path: Path) -> None:
    runs, sink = _setup(tmp_path, None)
    (sink / "pi__1.jsonl").write_text(_span(0, [1], [2]) + "\n")
    ingest([runs], tmp_path / "lake", sinks=[sink])
    (sink / "pi__1.jsonl").write_text(_span(0, [1], [2]) + "\n" + _span(1, [1, 2, 7], [3]) + "\n")
    summary = ingest([runs], tmp_path / "lake", sinks=[sink])
    assert summary.trials_replaced == 1
    assert connect(tmp_path / "lake").execute("SELECT n_spans FROM trials").fetchall() == [(2,)]
