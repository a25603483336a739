"""Smoke test of `make bench`: every benchmark code path on a tiny tree, no timings asserted.

Checks that the report carries every figure beside its goal, that the generated tree is really
harbor-shaped (result.json byte-identical to json.dumps(indent=4), the real sample's fields), and
that wmo-lake reads the generated spans back exactly as the JSON holds them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bench import __main__ as bench
from bench import realistic_trees
from wmo_lake.lake import connect

REAL_RESULT = realistic_trees.REAL_TRIAL / "result.json"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("bench-out")
    argv = ["--quick", "--out", str(out), "--workers", "1", "--gen-workers", "1"]
    report = bench.run(
        [*argv, "--tiny-trials", "16", "--trajectory-trials", "2"], log=lambda _: None
    )
    return report, out


def _tree(out: Path, spec: realistic_trees.TreeSpec) -> realistic_trees.Tree:
    root = out / "trees" / spec.key()
    assert (root / realistic_trees.COMPLETE_MARK).is_file()
    return realistic_trees.Tree(root, spec)


def test_report_has_every_figure_beside_its_goal(run: tuple[dict[str, Any], Path]) -> None:
    report, out = run
    assert json.loads((out / "report.json").read_text()) == json.loads(json.dumps(report))
    names = [(f["bench"], f["name"]) for f in report["figures"]]
    assert names == [(bench_name, name) for bench_name, name, *_ in bench.FIGURES]
    for figure in report["figures"]:
        assert figure["value"] is not None, figure  # every feature has landed: all measured
        assert figure["goal"]
        if figure["goal"] == "(detail)":
            assert figure["met"] is None
        else:
            assert isinstance(figure["met"], bool)
    goals = {f"{f['bench']}.{f['name']}" for f in report["figures"] if f["goal"] != "(detail)"}
    assert set(report["goals_met"]) | set(report["goals_missed"]) == goals
    assert not set(report["goals_met"]) & set(report["goals_missed"])
    text = bench.render(report)
    # the machine's speed, so that absolute figures can be compared across machines
    assert report["host"]["interpreter_seconds"] > 0
    assert f"Python loop {report['host']['interpreter_seconds']} s" in text
    for bench_name, name, *_ in bench.FIGURES:
        assert name in text and f"-- {bench_name}" in text


def test_the_lake_agrees_with_the_plain_python_anchors(run: tuple[dict[str, Any], Path]) -> None:
    figures = {f"{f['bench']}.{f['name']}": f for f in run[0]["figures"]}
    assert figures["stats.agrees_with_python"]["value"] is True, figures["stats.agrees_with_python"]
    assert figures["export.agrees_with_python"]["value"] is True, figures[
        "export.agrees_with_python"
    ]


def test_result_json_is_harbor_shaped(run: tuple[dict[str, Any], Path]) -> None:
    tree = _tree(run[1], realistic_trees.QUICK_ROLLOUTS)
    real_keys = set(json.loads(REAL_RESULT.read_text()))
    results = tree.files("result.json")
    assert len(results) == realistic_trees.QUICK_ROLLOUTS.trials
    for path in results:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text)
        assert text == json.dumps(doc, indent=4), path  # harbor writes indent=4
        assert set(doc) == real_keys
        (detail,) = doc["agent_result"]["rollout_details"]
        prompts, completions = detail["prompt_token_ids"], detail["completion_token_ids"]
        assert doc["agent_result"]["metadata"]["n_episodes"] == len(prompts) >= 3
        for before, sampled, after in zip(prompts, completions, prompts[1:], strict=False):
            assert after[: len(before) + len(sampled)] == before + sampled  # prefix-chained
            assert len(after) > len(before) + len(sampled)  # plus a new delta
        for sampled, logprobs in zip(completions, detail["logprobs"], strict=True):
            assert len(sampled) == len(logprobs)
            # float32 values widened to float64, as a sampler's logprobs are
            assert all(float(np.float32(x)) == x <= 0 for x in logprobs)


def test_wmo_lake_reads_the_generated_spans_exactly(run: tuple[dict[str, Any], Path]) -> None:
    out = run[1]
    tree = _tree(out, realistic_trees.QUICK_ROLLOUTS)
    con = connect(bench.ingested_lake_dir(tree, out))
    for path in tree.files("result.json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        (detail,) = doc["agent_result"]["rollout_details"]
        rows = con.execute(
            "SELECT prompt_token_ids, sampled_token_ids, sampled_logprobs FROM spans_full "
            "WHERE trial_name = ? ORDER BY call_index",
            [doc["trial_name"]],
        ).fetchall()
        expected = list(
            zip(
                detail["prompt_token_ids"],
                detail["completion_token_ids"],
                detail["logprobs"],
                strict=True,
            )
        )
        assert [tuple(row) for row in rows] == expected, path


def test_trajectory_tree_is_long_atif(run: tuple[dict[str, Any], Path]) -> None:
    spec = replace(realistic_trees.QUICK_TRAJECTORIES, trials=2)
    files = _tree(run[1], spec).files("agent/trajectory.json")
    assert len(files) == 2
    twin = _tree(run[1], replace(spec, omit_trajectories=True))
    assert len(twin.trial_dirs()) == 2 and not twin.files("agent/trajectory.json")
    for path in files:
        text = path.read_text(encoding="utf-8")
        doc = json.loads(text)
        assert text == json.dumps(doc, indent=2)  # terminus-2 writes its trajectory indent=2
        assert doc["schema_version"] == "ATIF-v1.8"
        agent_steps = [s for s in doc["steps"] if s["source"] == "agent"]
        assert len(agent_steps) >= 40
        assert all(len(s["observation"]["results"][0]["content"]) >= 1000 for s in agent_steps)


@pytest.mark.parametrize(
    "rows",
    [[["1", "22"], []], [], [["-0.5"]], [[], ["7", "8", "9"]]],
)
def test_template_splices_rows_exactly_as_json_dumps(rows: list[list[str]]) -> None:
    template = realistic_trees.Template(
        {"a": {"b": ["@@x@@", {"c": "@@y@@"}], "d": "@@z@@"}}, indent=4
    )
    value = [[json.loads(item) for item in row] for row in rows]
    text = template.render(x=realistic_trees.Rows(rows), y={"k": [1, None]}, z=None)
    assert text == json.dumps({"a": {"b": [value, {"c": {"k": [1, None]}}], "d": None}}, indent=4)


def test_measured_lakes_are_set_aside_and_deleted_after_the_run(
    run: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    assert not (run[1] / "work" / bench.SET_ASIDE).exists()  # emptied once the run was over
    # a lake set aside is moved whole (no file freed) and gone only when emptied
    lake = tmp_path / "work" / "lake"
    (lake / "tables").mkdir(parents=True)
    (lake / "tables" / "rows.parquet").write_bytes(b"rows")
    inode = (lake / "tables" / "rows.parquet").stat().st_ino
    bench.set_aside(lake, tmp_path)
    assert not lake.exists()
    (moved,) = (tmp_path / "work" / bench.SET_ASIDE).glob("*/lake/tables/rows.parquet")
    assert moved.stat().st_ino == inode and moved.read_bytes() == b"rows"
    bench.set_aside(lake, tmp_path)  # (nothing there: nothing to do)
    bench.empty_set_aside(tmp_path)
    assert not (tmp_path / "work" / bench.SET_ASIDE).exists()


def test_warm_tree_reads_every_file_through_symlinks(tmp_path: Path) -> None:
    from bench import baselines

    (tmp_path / "real" / "trial").mkdir(parents=True)
    (tmp_path / "real" / "trial" / "result.json").write_bytes(b"{}")
    (tmp_path / "real" / "trial" / "log.txt").write_bytes(b"12345")
    (tmp_path / "slice").mkdir()
    (tmp_path / "slice" / "step").symlink_to(tmp_path / "real", target_is_directory=True)
    assert baselines.warm_tree(tmp_path / "slice") == 7
