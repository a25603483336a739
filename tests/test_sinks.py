"""The two collection paths, chosen per job from its config.json (seed 000, upstream agents.py).

pi-bridge jobs (agents[0].kwargs.token_sink_dir) read spans only from their own
`{token_sink_dir}/{trial}.jsonl` and stop reasons only from the wmo-run.json trace; terminus-2 jobs
read spans only from rollout_details and reconstruct the stop reason, a trace or not."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner, Result
from harbor_shapes import add_agent, write_job, write_sink, write_trial
from pydantic import TypeAdapter

from wmo_lake.cli import cli
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.store import Store

RECORDED = [([1, 2], [3], [-0.5]), ([1, 2, 3, 4], [5, 6], [-0.1, -0.2])]


def _span(i: int, prompt: list[int], sampled: list, logprobs: list[float] | None = None) -> str:
    logprobs = logprobs if logprobs is not None else [-0.5] * len(sampled)
    return json.dumps(
        {
            "call_index": i,
            "prompt_token_ids": prompt,
            "sampled_token_ids": sampled,
            "sampled_logprobs": logprobs,
        }
    )


def _pi_job(runs: Path, step: int, sinks: Path | str) -> Path:
    return write_job(
        runs / "exp" / "harbor" / f"step-{step:04d}" / "job", token_sink_dir=str(sinks)
    )


def _spans(lake: Path) -> dict[tuple[str, str], list]:
    rows = (
        connect(lake)
        .sql(
            "SELECT batch, trial_name, list(sampled_token_ids ORDER BY call_index) FROM spans_full "
            "GROUP BY ALL"
        )
        .fetchall()
    )
    return {(batch.split("/")[2], name): ids for batch, name, ids in rows}


def test_pi_bridge_spans_come_only_from_the_jobs_own_sink(tmp_path: Path) -> None:
    sinks = tmp_path / "runs" / "exp" / "tokens" / "step-0001"
    job = _pi_job(tmp_path / "runs", 1, sinks)
    write_trial(job, "sink__1", turns=[([9], [9], [-0.9])])  # rollout_details: ignored
    write_trial(job, "none__1", turns=[([9], [9], [-0.9])])  # no sink file: no spans
    write_sink(sinks, "sink__1", RECORDED)
    ingest([tmp_path / "runs"], tmp_path / "lake")
    con = connect(tmp_path / "lake")
    assert con.sql(
        "SELECT trial_name, spans_status, n_spans FROM trials ORDER BY 1"
    ).fetchall() == [("none__1", "absent", 0), ("sink__1", "sink", 2)]
    assert con.sql(
        "SELECT call_index, prompt_token_ids, sampled_token_ids, source FROM spans_full ORDER BY 1"
    ).fetchall() == [(0, [1, 2], [3], "sink"), (1, [1, 2, 3, 4], [5, 6], "sink")]
    assert con.sql("SELECT collection_path, token_sink_dir, sink_dir FROM jobs").fetchall() == [
        ("pi-bridge", str(sinks), str(sinks))
    ]


def _ingested(tmp_path: Path) -> duckdb.DuckDBPyConnection:
    """`tmp_path/runs` ingested into `tmp_path/lake`, connected."""
    ingest([tmp_path / "runs"], tmp_path / "lake")
    return connect(tmp_path / "lake")


def test_each_trial_is_read_by_the_collection_path_of_the_agent_it_ran(tmp_path: Path) -> None:
    """A job of two agents, terminus-2 (agents[0]) and the pi bridge (agents[1], its own sink
    dir, which does not exist for a third agent): each trial records its agent, and is read by
    that agent's path: rollout_details and the reconstruction, or its sink and its trace."""
    sinks = tmp_path / "runs" / "exp" / "tokens" / "step-0001"
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job", max_turns=5)
    bridge = json.loads((_pi_job(tmp_path / "other", 1, sinks) / "config.json").read_text())[
        "agents"
    ][0]
    lost = {**bridge, "kwargs": {**bridge["kwargs"], "token_sink_dir": str(tmp_path / "gone")}}
    config = json.loads((job / "config.json").read_text())
    config["agents"] += [bridge, lost]
    (job / "config.json").write_text(json.dumps(config, indent=4))
    trace = {"stop_reason": "budget"}
    write_trial(job, "t2__1", turns=[([9], [9], [-0.9])], n_episodes=5, trace=trace)
    write_trial(job, "pi__1", turns=[([9], [9], [-0.9])], trace=trace, agent=bridge)
    write_trial(job, "lost__1", turns=[([9], [9], [-0.9])], trace=trace, agent=lost)
    write_sink(sinks, "pi__1", RECORDED)
    write_sink(sinks, "t2__1", RECORDED)  # not its agent's sink dir: never read
    con = _ingested(tmp_path)
    assert con.sql(
        "SELECT t.trial_name, t.collection_path, t.spans_status, t.n_spans, r.stop_reason"
        " FROM trials AS t JOIN trial_stop_reasons AS r USING (trial_key) ORDER BY 1"
    ).fetchall() == [
        ("lost__1", "pi-bridge", "sink_dir_missing", 0, "budget"),
        ("pi__1", "pi-bridge", "sink", 2, "budget"),
        ("t2__1", "terminus-2", "ok", 1, "max_turns"),  # 5 episodes >= 5, the trace ignored
    ]
    assert con.sql("SELECT collection_path FROM jobs").fetchall() == [("terminus-2",)]
    assert con.sql("SELECT kind, trial_name, path FROM problems").fetchall() == [
        ("sink_dir_missing", "lost__1", str(tmp_path / "gone"))
    ]


def test_a_pi_bridge_job_without_its_config_reads_its_trials_sinks(tmp_path: Path) -> None:
    """A pi-bridge job dir copied without its config.json: every trial still records its agent
    and token_sink_dir, so spans come from its sink and the stop reason from its trace."""
    sinks = tmp_path / "runs" / "exp" / "tokens" / "step-0001"
    job = _pi_job(tmp_path / "runs", 1, sinks)
    write_trial(job, "sink__1", turns=[([9], [9], [-0.9])], trace={"stop_reason": "budget"})
    write_sink(sinks, "sink__1", RECORDED)
    (job / "config.json").unlink()
    assert _ingested(tmp_path).sql(
        "SELECT t.spans_status, t.n_spans, t.collection_path, r.stop_reason"
        " FROM trials AS t JOIN trial_stop_reasons AS r USING (trial_key)"
    ).fetchall() == [("sink", 2, "pi-bridge", "budget")]


def test_terminus_2_reads_rollout_details_and_never_a_sink(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "t__1", turns=[([1], [2], [-0.1])], trace={"stop_reason": "budget"})
    write_trial(job, "t__2", rollout_details=None, n_episodes=1, declared_complete=True)
    write_sink(job, "t__2", RECORDED)  # a sink-shaped file beside it is not read
    ingest([tmp_path / "runs"], tmp_path / "lake")
    con = connect(tmp_path / "lake")
    assert con.sql(
        "SELECT t.trial_name, t.spans_status, r.stop_reason, r.stop_source FROM trials AS t "
        "JOIN trial_stop_reasons AS r USING (trial_key) ORDER BY 1"
    ).fetchall() == [
        ("t__1", "ok", "submitted", "reconstructed"),  # the trace says budget: ignored
        ("t__2", "absent", "submitted", "reconstructed"),
    ]
    # ignored for the stop reason (issue 8), yet the evidence table says it is there (issue 2)
    assert con.sql(
        "SELECT trial_name, has_trace, trace_stop_reason FROM stop_reasons ORDER BY 1"
    ).fetchall() == [("t__1", True, "budget"), ("t__2", False, None)]
    assert con.sql("SELECT collection_path, token_sink_dir FROM jobs").fetchall() == [
        ("terminus-2", None)
    ]


def test_two_steps_whose_sinks_share_trial_names_each_read_their_own(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for step in (1, 2):
        sinks = runs / "exp" / "tokens" / f"step-{step:04d}"
        job = _pi_job(runs, step, sinks)
        for name in ("a__1", "b__1"):
            write_trial(job, name, trial_id=f"{step}-{name}")
            write_sink(sinks, name, [([step], [step * 10 + ord(name[0])], [-0.5])])
    ingest([runs], tmp_path / "lake")
    assert _spans(tmp_path / "lake") == {
        ("step-0001", "a__1"): [[107]],
        ("step-0001", "b__1"): [[108]],
        ("step-0002", "a__1"): [[117]],
        ("step-0002", "b__1"): [[118]],
    }


def test_the_sink_is_named_after_the_trial_dir(tmp_path: Path) -> None:
    """agents.py derives the sink's name from the logs dir ({trial_dir}/agent), not result.json."""
    sinks = tmp_path / "sinks"
    job = _pi_job(tmp_path / "runs", 1, sinks)
    trial_dir = write_trial(job, "dir-name__1", result_overrides={"trial_name": "recorded__1"})
    assert trial_dir.name == "dir-name__1"
    write_sink(sinks, "dir-name__1", RECORDED)
    write_sink(sinks, "recorded__1", [([7], [7], [-0.7])])
    ingest([tmp_path / "runs"], tmp_path / "lake")
    assert _spans(tmp_path / "lake") == {("step-0001", "recorded__1"): [[3], [5, 6]]}


def test_a_relative_sink_dir_resolves_under_the_nearest_ancestor_holding_it(
    tmp_path: Path,
) -> None:
    """The collector records run_dir/tokens/step-NNNN, relative when its run dir was."""
    runs = tmp_path / "work" / "runs"
    job = _pi_job(runs, 1, "runs/exp/tokens/step-0001")
    write_trial(job, "t__1")
    write_sink(runs / "exp" / "tokens" / "step-0001", "t__1", RECORDED)  # under work/
    write_sink(tmp_path / "runs" / "exp" / "tokens" / "step-0001", "t__1", [([7], [7], [-0.7])])
    ingest([runs], tmp_path / "lake")
    assert _spans(tmp_path / "lake") == {("step-0001", "t__1"): [[3], [5, 6]]}  # the nearer one
    ((sink_dir,),) = connect(tmp_path / "lake").sql("SELECT sink_dir FROM jobs").fetchall()
    assert sink_dir == str(runs / "exp" / "tokens" / "step-0001")


def test_a_missing_sink_dir_is_one_problem_and_sink_root_remaps_it(tmp_path: Path) -> None:
    recorded = "/nonexistent/old-home/runs/exp/tokens/step-0001"
    runs = tmp_path / "runs"
    job = _pi_job(runs, 1, recorded)
    write_trial(job, "a__1")
    write_trial(job, "b__1")
    summary = ingest([runs], tmp_path / "lake")
    con = connect(tmp_path / "lake")
    assert summary.problems == 1
    assert con.sql(
        "SELECT unit_key, batch, trial_name, path, kind, message FROM problems"
    ).fetchall() == [
        (
            f"job:{job}",
            "exp/harbor/step-0001/job",
            None,
            recorded,
            "sink_dir_missing",
            f"job {job} records token_sink_dir {recorded!r}, but no such dir exists (looked for "
            f"{recorded}); its trials have no spans. If the tree was moved or copied, point at the "
            "sinks with --sink-root OLD=NEW (OLD: the recorded prefix, NEW: where it is now)",
        )
    ]
    assert con.sql("SELECT DISTINCT spans_status FROM trials").fetchall() == [("sink_dir_missing",)]
    con.close()

    write_sink(runs / "exp" / "tokens" / "step-0001", "a__1", RECORDED)
    summary = ingest(
        [runs], tmp_path / "lake", sink_roots=(("/nonexistent/old-home/runs", str(runs)),)
    )
    assert summary.problems == 0 and summary.trials_replaced == 2
    con = connect(tmp_path / "lake")
    assert con.sql("SELECT count(*) FROM problems").fetchall() == [(0,)]
    assert con.sql("SELECT trial_name, spans_status FROM trials ORDER BY 1").fetchall() == [
        ("a__1", "sink"),
        ("b__1", "absent"),
    ]


def test_stats_says_why_trials_of_a_missing_sink_dir_have_no_spans(tmp_path: Path) -> None:
    """The no-spans note blamed the trials ("recorded no token spans") when their job's sink dir
    is missing (a tree moved since it ran), which only the problems table said."""
    runs = tmp_path / "runs"
    job = _pi_job(runs, 1, "/nonexistent/old-home/runs/exp/tokens/step-0001")
    write_trial(job, "a__1")
    write_trial(job, "b__1")
    present = _pi_job(runs, 2, runs / "exp" / "tokens" / "step-0002")
    write_trial(present, "a__1")  # (its sink dir exists; this trial wrote no sink)
    (runs / "exp" / "tokens" / "step-0002").mkdir(parents=True)
    ingest([runs], tmp_path / "lake")
    result = CliRunner().invoke(cli, ["stats", "--lake", str(tmp_path / "lake"), "--notes", "full"])
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stdout.splitlines() if "recorded no token spans" in line]
    assert notes == [
        "note: exp/harbor/step-0001/job: 2/2 trial(s) recorded no token spans (reward signal, no "
        "training data); 2 of them because their pi-bridge sink dir does not exist (problems "
        "kind 'sink_dir_missing'): for a tree moved since it ran, ingest it again with "
        "--sink-root OLD=NEW",
        "note: exp/harbor/step-0002/job: 1/1 trial(s) recorded no token spans (reward signal, no "
        "training data)",
    ]


def test_a_copied_tree_reads_its_own_sinks_through_sink_root(tmp_path: Path) -> None:
    original = tmp_path / "orig" / "runs"
    sinks = original / "exp" / "tokens" / "step-0001"
    write_trial(_pi_job(original, 1, sinks), "t__1")
    write_sink(sinks, "t__1", RECORDED)
    copy = tmp_path / "copy" / "runs"
    shutil.copytree(original, copy)
    write_sink(copy / "exp" / "tokens" / "step-0001", "t__1", [([4], [4], [-0.4])])
    result = CliRunner().invoke(
        cli,
        [
            "ingest",
            str(copy),
            "--lake",
            str(tmp_path / "lake"),
            "--sink-root",
            f"{original}={copy}",
        ],
    )
    assert result.exit_code == 0, result.output
    assert _spans(tmp_path / "lake") == {("step-0001", "t__1"): [[4]]}


def test_the_lake_remembers_sink_root_for_later_ingests(tmp_path: Path) -> None:
    """A plain ingest after one given --sink-root (a nightly job's, say) reads the moved tree's
    sinks where that one did: re-reading a changed trial without the remap lost its spans (and
    counted it a trial that recorded none). OLD=OLD undoes the remap."""
    original = tmp_path / "orig" / "runs"
    sinks = original / "exp" / "tokens" / "step-0001"
    job = _pi_job(original, 1, sinks)
    write_trial(job, "t__1")
    write_sink(sinks, "t__1", RECORDED)
    copy = tmp_path / "copy" / "runs"
    shutil.copytree(original, copy)
    write_sink(copy / "exp" / "tokens" / "step-0001", "t__1", [([4], [4], [-0.4])])
    lake = tmp_path / "lake"

    def run(*args: str) -> Result:
        result = CliRunner().invoke(cli, ["ingest", str(copy), "--lake", str(lake), *args])
        assert result.exit_code == 0, result.output
        return result

    run("--sink-root", f"{original}={copy}")
    shutil.rmtree(original)  # (the cluster's copy is gone)
    trial_result = copy / "exp" / "harbor" / "step-0001" / "job" / "t__1" / "result.json"
    trial_result.write_text(trial_result.read_text() + "\n")  # changed: read again
    again = run()
    assert "1 replaced" in again.stdout
    assert again.stderr == (
        f"note: sinks read with --sink-root {original}={copy}, remembered from an earlier ingest\n"
    )
    assert _spans(lake) == {("step-0001", "t__1"): [[4]]}
    assert json.loads(run("--json").stdout)["sink_roots_remembered"] == [f"{original}={copy}"]
    undone = run("--sink-root", f"{original}={original}")
    assert "1 replaced" in undone.stdout and "remembered" not in undone.stderr
    assert _spans(lake) == {}  # (the recorded dir is gone: sink_dir_missing)
    assert "remembered" not in run().stderr  # (OLD=OLD is what it remembers now)


def test_remembered_remaps_the_longest_old_wins_and_an_undo_holds(tmp_path: Path) -> None:
    """A remap of /gone/a/b remembered, then one of /gone/a given: the broader one came first
    and shadowed the other, so a plain ingest of run b lost its spans. An undo (OLD=OLD) by an
    ingest that read nothing was not remembered, nor one spelled `/gone/a` for `/gone/a/`."""
    runs = tmp_path / "runs"
    for run, recorded in (("ra", "/gone/a/tokens/step-0001"), ("rb", "/gone/a/b/tokens/step-0001")):
        job = write_job(runs / run / "harbor" / "step-0001" / "job", token_sink_dir=recorded)
        write_trial(job, "t__1", reward=1.0)
    write_sink(tmp_path / "x" / "tokens" / "step-0001", "t__1", RECORDED[:1])
    write_sink(tmp_path / "y" / "tokens" / "step-0001", "t__1", RECORDED)
    lake = tmp_path / "lake"

    def statuses() -> list[tuple[str, int]]:
        query = "SELECT spans_status, n_spans FROM trials ORDER BY batch"
        return connect(lake).execute(query).fetchall()

    ingest([runs / "rb"], lake, sink_roots=(("/gone/a/b", str(tmp_path / "y")),))
    ingest([runs / "ra"], lake, sink_roots=(("/gone/a/", str(tmp_path / "x")),))
    assert statuses() == [("sink", 1), ("sink", 2)]
    (runs / "rb" / "harbor" / "step-0001" / "job" / "t__1" / "result.json").touch()
    assert ingest([runs], lake).trials_replaced == 1  # (rb read again: y's sink, not x/b's)
    assert statuses() == [("sink", 1), ("sink", 2)]
    preview = ingest([tmp_path / "x"], lake, sink_roots=(("/gone/a", "/gone/a"),), dry_run=True)
    assert preview.would_remember_remaps and "would remember the --sink-root" in preview.line()
    undone = ingest([tmp_path / "x"], lake, sink_roots=(("/gone/a", "/gone/a"),))
    assert undone.committed  # (it read nothing, but the lake forgets the remap)
    assert Store(lake).read_manifest().sink_roots == [("/gone/a/b", str(tmp_path / "y"))]
    assert not ingest([runs], lake, dry_run=True).would_remember_remaps
    assert ingest([runs], lake).sink_roots_remembered == [f"/gone/a/b={tmp_path / 'y'}"]
    assert statuses() == [("sink_dir_missing", 0), ("sink", 2)]
    # Two commands giving other remaps in turn (two nightly jobs) commit nothing once both are
    # remembered: the order the list is kept in is no change (it was one generation a night).
    for _ in range(2):
        for given in (("/old1", "/new1"), ("/old2", "/new2")):
            last = ingest([runs], lake, sink_roots=(given,))
    assert not last.committed


def test_sink_root_must_be_old_equals_new(tmp_path: Path) -> None:
    write_trial(write_job(tmp_path / "runs" / "job"), "t__1")
    result = CliRunner().invoke(
        cli, ["ingest", str(tmp_path / "runs"), "--lake", str(tmp_path / "l"), "--sink-root", "x"]
    )
    assert result.exit_code == 2
    assert "--sink-root takes OLD=NEW" in result.output


@pytest.mark.parametrize(
    ("lines", "advice"),
    [
        ([_span(0, [1], [2]), "{not json"], "line 2"),
        ([_span(0, [1], [2], [-0.1, -0.2])], "line 1"),
        ([_span(0, [1], [2.5])], "line 1"),  # no int (TokenSpan's lax mode takes 2.0, not 2.5)
        ([_span(0, [1], [2]), _span(0, [1, 2, 3], [4])], "call_index sequence [0, 0]"),
        ([_span(1, [1], [2])], "call_index sequence [1]"),
    ],
    ids=["invalid-json", "logprob-mismatch", "fractional-token", "repeated-index", "not-from-zero"],
)
def test_corrupt_sink_gives_no_spans_and_actionable_problem(
    tmp_path: Path, lines: list[str], advice: str
) -> None:
    sinks = tmp_path / "sinks"
    write_trial(_pi_job(tmp_path / "runs", 1, sinks), "pi__1")
    sinks.mkdir()
    (sinks / "pi__1.jsonl").write_text("\n".join(lines) + "\n")
    summary = ingest([tmp_path / "runs"], tmp_path / "lake")
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT spans_status, n_spans FROM trials").fetchall() == [
        ("sink_corrupt", 0)
    ]
    assert con.execute("SELECT count(*) FROM spans").fetchall() == [(0,)]
    ((kind, message),) = con.execute("SELECT kind, message FROM problems").fetchall()
    assert kind == "sink_corrupt" and summary.problems == 1
    assert advice in message and "delete this step's token sink directory" in message


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda path: os.mkfifo(path), "not a regular file (a FIFO, socket or device)"),
        (lambda path: path.mkdir(), "Is a directory"),
    ],
    ids=["fifo", "dir"],
)
def test_what_is_no_file_in_the_sinks_place_is_a_corrupt_sink_not_an_absent_one_or_a_hang(
    tmp_path: Path, make: Callable[[Path], None], why: str
) -> None:
    """A FIFO (or a dir) named like the trial's sink: not silently 'absent', and never an open
    that waits forever for a writer. The trial is kept, its spans are a problem that says why."""
    sinks = tmp_path / "sinks"
    write_trial(_pi_job(tmp_path / "runs", 1, sinks), "pi__1")
    sinks.mkdir()
    make(sinks / "pi__1.jsonl")
    done: list[object] = []
    reader = threading.Thread(
        target=lambda: done.append(ingest([tmp_path / "runs"], tmp_path / "lake")), daemon=True
    )
    reader.start()
    reader.join(timeout=60)
    assert not reader.is_alive(), "the ingest blocked on the sink"
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT spans_status, n_spans FROM trials").fetchall() == [
        ("sink_corrupt", 0)
    ]
    ((kind, message),) = con.execute("SELECT kind, message FROM problems").fetchall()
    assert kind == "sink_corrupt"
    assert message.startswith(f"cannot read token sink {sinks / 'pi__1.jsonl'}: {why}; ")


def test_a_sink_line_is_read_as_tokenspan_reads_it(tmp_path: Path) -> None:
    """WMO's TokenSpan is a plain pydantic model (lax): upstream keeps `1.0`, `"2"` and `true`
    as token ids and `"-0.5"` as a logprob, so the lake does too, with the values pydantic makes
    of them."""
    sinks = tmp_path / "sinks"
    write_trial(_pi_job(tmp_path / "runs", 1, sinks), "pi__1")
    sinks.mkdir()
    line = {
        "call_index": 0.0,
        "prompt_token_ids": [1.0, "2", True],
        "sampled_token_ids": [" 4 ", 5],
        "sampled_logprobs": ["-0.5", -1],
    }
    (sinks / "pi__1.jsonl").write_text(json.dumps(line) + "\n")
    ingest([tmp_path / "runs"], tmp_path / "lake")
    # what TokenSpan's field types make of the line, validated as it validates (JSON, lax)
    ids, logprobs = TypeAdapter(list[int]), TypeAdapter(list[float])
    expected = (
        0,
        ids.validate_json(json.dumps(line["prompt_token_ids"])),
        ids.validate_json(json.dumps(line["sampled_token_ids"])),
        logprobs.validate_json(json.dumps(line["sampled_logprobs"])),
    )
    got = (
        connect(tmp_path / "lake")
        .sql(
            "SELECT call_index, prompt_token_ids, sampled_token_ids, sampled_logprobs "
            "FROM spans_full"
        )
        .fetchall()
    )
    assert got == [expected]
    assert expected[1] == [1, 2, 1]  # (so the case is what it says: every value coerced)


def test_a_token_id_beyond_64_bits_is_out_of_range_and_names_the_sink(tmp_path: Path) -> None:
    """TokenSpan keeps a Python int of any size; Parquet and Tinker hold 64 bits: no spans, and
    a problem naming the sink file it came from."""
    sinks = tmp_path / "sinks"
    write_trial(_pi_job(tmp_path / "runs", 1, sinks), "pi__1")
    sinks.mkdir()
    (sinks / "pi__1.jsonl").write_text(_span(0, [1, 2**63], [3]) + "\n")
    ingest([tmp_path / "runs"], tmp_path / "lake")
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT spans_status, n_spans FROM trials").fetchall() == [
        ("out_of_range", 0)
    ]
    ((kind, path, message),) = con.execute("SELECT kind, path, message FROM problems").fetchall()
    assert kind == "out_of_range" and path == str(sinks / "pi__1.jsonl")
    assert message.startswith("pi__1.jsonl: a token id does not fit in 64 bits")


def test_editing_a_sink_reingests_the_trial(tmp_path: Path) -> None:
    sinks = tmp_path / "sinks"
    write_trial(_pi_job(tmp_path / "runs", 1, sinks), "pi__1")
    write_sink(sinks, "pi__1", RECORDED[:1])
    ingest([tmp_path / "runs"], tmp_path / "lake")
    write_sink(sinks, "pi__1", RECORDED)
    summary = ingest([tmp_path / "runs"], tmp_path / "lake")
    assert summary.trials_replaced == 1
    assert connect(tmp_path / "lake").execute("SELECT n_spans FROM trials").fetchall() == [(2,)]


def test_editing_the_sink_of_a_trial_whose_agent_only_its_result_records_reingests_it(
    tmp_path: Path,
) -> None:
    """A job of two agents, terminus-2 (agents[0]) and the pi bridge (its own sink dir); the
    bridge's trial has no config.json, so only its result.json says which agent it ran: a sink
    edited after an ingest is read by the next one, as a fresh ingest (and upstream's
    load_trial_spans) reads both of its lines."""
    sinks = tmp_path / "sinks"
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job")
    bridge = add_agent(job, "pi", token_sink_dir=str(sinks))
    write_trial(job, "pi__1", agent=bridge)
    (job / "pi__1" / "config.json").unlink()
    write_sink(sinks, "pi__1", RECORDED[:1])
    ingest([tmp_path / "runs"], tmp_path / "lake")
    write_sink(sinks, "pi__1", RECORDED)
    summary = ingest([tmp_path / "runs"], tmp_path / "lake")
    assert summary.trials_replaced == 1
    assert connect(tmp_path / "lake").execute(
        "SELECT collection_path, n_spans FROM trials"
    ).fetchall() == [("pi-bridge", 2)]


@pytest.mark.parametrize("job_agents", ["none", "another"])
def test_editing_the_sink_only_a_trials_result_names_reingests_it(
    tmp_path: Path, job_agents: str
) -> None:
    """As above, but the job's config.json names no agent of that sink dir: it names no agents
    at all, or a pi bridge of another sink dir. The walk cannot know which sink to watch, so the
    catalog keeps the dir the read found it in (CatalogEntry.read_sink): an edit of it is read
    by the next ingest, and an unchanged tree stays unchanged."""
    sinks = tmp_path / "sinks"
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job")
    bridge = add_agent(job, "pi", token_sink_dir=str(tmp_path / "other-sinks"))
    trial_agent = json.loads(json.dumps(bridge))
    trial_agent["kwargs"]["token_sink_dir"] = str(sinks)
    write_trial(job, "pi__1", agent=trial_agent)
    (job / "pi__1" / "config.json").unlink()
    if job_agents == "none":
        config = json.loads((job / "config.json").read_text())
        config["agents"] = []
        (job / "config.json").write_text(json.dumps(config))
    write_sink(sinks, "pi__1", RECORDED[:1])
    lake = tmp_path / "lake"
    ingest([tmp_path / "runs"], lake)
    assert ingest([tmp_path / "runs"], lake).trials_unchanged == 1
    write_sink(sinks, "pi__1", RECORDED)
    assert ingest([tmp_path / "runs"], lake).trials_replaced == 1
    assert connect(lake).execute("SELECT collection_path, n_spans FROM trials").fetchall() == [
        ("pi-bridge", 2)
    ]


@pytest.mark.parametrize("where", ["sink-root added", "sink-root dropped", "nearer dir"])
def test_where_the_sink_only_a_trials_result_names_is_found_again_by_each_ingest(
    tmp_path: Path, where: str
) -> None:
    """The sinks of an agent only a trial's result.json names are resolved again by each ingest:
    the catalog kept the dir the first read found, so `--sink-root OLD=NEW` given later (as the
    sink_dir_missing problem advises), dropped later, or a nearer ancestor gaining a relative
    sink dir left the lake as it was ("nothing changed"), unlike a fresh ingest."""
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job")
    add_agent(job, "pi", token_sink_dir=str(tmp_path / "other-sinks"))
    relative = where == "nearer dir"
    recorded = "sinks/C" if relative else "/nonexistent/old/C"
    trial_agent = json.loads(json.dumps(add_agent(job, "pi2", token_sink_dir=recorded)))
    config = json.loads((job / "config.json").read_text())
    config["agents"] = config["agents"][:-1]  # (the job names another agent only)
    (job / "config.json").write_text(json.dumps(config))
    write_trial(job, "pi__1", agent=trial_agent)
    (job / "pi__1" / "config.json").unlink()
    if relative:  # found under the far ancestor first; then the nearer one holds the dir too
        write_sink(tmp_path / "sinks" / "C", "pi__1", RECORDED[:1])
    else:
        write_sink(tmp_path / "new" / "C", "pi__1", RECORDED)
    remap = ("--sink-root", f"/nonexistent/old={tmp_path / 'new'}")
    undo = ("--sink-root", "/nonexistent/old=/nonexistent/old")  # (the lake remembers a remap)
    first, second = {
        "sink-root added": ((), remap),
        "sink-root dropped": (remap, undo),
        "nearer dir": ((), ()),
    }[where]

    def run(lake: Path, options: tuple[str, ...]) -> Result:
        args = ["ingest", str(tmp_path / "runs"), "--lake", str(lake), *options]
        return CliRunner().invoke(cli, args)

    assert run(tmp_path / "lake", first).exit_code == 0
    if relative:
        write_sink(tmp_path / "runs" / "sinks" / "C", "pi__1", RECORDED)
    assert "nothing changed" not in run(tmp_path / "lake", second).output
    assert run(tmp_path / "fresh", second).exit_code == 0
    assert "nothing changed" in run(tmp_path / "lake", second).output
    query = "SELECT spans_status, n_spans FROM trials"
    fresh = connect(tmp_path / "fresh").execute(query).fetchall()
    assert connect(tmp_path / "lake").execute(query).fetchall() == fresh
    problems = "SELECT kind FROM problems ORDER BY ALL"
    assert (
        connect(tmp_path / "lake").execute(problems).fetchall()
        == connect(tmp_path / "fresh").execute(problems).fetchall()
    )


def test_a_sink_recorded_otherwise_than_the_watched_one_is_watched_as_recorded(
    tmp_path: Path,
) -> None:
    """The trial's agent records another token_sink_dir than the job's pi bridge, which
    `--sink-root` maps to the same dir today: watched through the job's record only, dropping
    the remap moved the trial's sinks and the lake said "nothing changed"."""
    new = tmp_path / "new" / "step-0001"
    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job")
    trial_agent = json.loads(json.dumps(add_agent(job, "pi", token_sink_dir=str(new))))
    trial_agent["kwargs"]["token_sink_dir"] = "/nonexistent/old/step-0001"
    write_trial(job, "pi__1", agent=trial_agent)
    (job / "pi__1" / "config.json").unlink()
    write_sink(new, "pi__1", RECORDED)
    remap = ["--sink-root", f"/nonexistent/old={tmp_path / 'new'}"]

    def run(lake: Path, *options: str) -> Result:
        args = ["ingest", str(tmp_path / "runs"), "--lake", str(lake), *options]
        return CliRunner().invoke(cli, args)

    run(tmp_path / "lake", *remap)
    assert "nothing changed" in run(tmp_path / "lake", *remap).output
    assert "nothing changed" in run(tmp_path / "lake").output  # (the lake remembers the remap)
    undo = ["--sink-root", "/nonexistent/old=/nonexistent/old"]
    assert "nothing changed" not in run(tmp_path / "lake", *undo).output
    run(tmp_path / "fresh")
    query = "SELECT spans_status, n_spans FROM trials"
    assert connect(tmp_path / "lake").execute(query).fetchall() == [("sink_dir_missing", 0)]
    assert connect(tmp_path / "fresh").execute(query).fetchall() == [("sink_dir_missing", 0)]


def test_editing_the_sink_of_a_trial_in_a_job_dir_that_lost_its_config_reingests_it(
    tmp_path: Path,
) -> None:
    """A pi-bridge job dir without its config.json (no agent of its job names the sink dir),
    whose trial has no config.json either: only its result.json names the sink it is read from,
    so the sink an ingest read is watched by the next one, which reads the edited sink's two
    lines as a fresh ingest does (and also when the sink is removed: no spans then)."""
    sinks = tmp_path / "sinks"
    job = _pi_job(tmp_path / "runs", 1, sinks)
    write_trial(job, "pi__1")
    (job / "pi__1" / "config.json").unlink()
    (job / "config.json").unlink()
    write_sink(sinks, "pi__1", RECORDED[:1])
    ingest([tmp_path / "runs"], tmp_path / "lake")
    write_sink(sinks, "pi__1", RECORDED)
    summary = ingest([tmp_path / "runs"], tmp_path / "lake")
    assert summary.trials_replaced == 1
    query = "SELECT collection_path, spans_status, n_spans FROM trials"
    assert connect(tmp_path / "lake").execute(query).fetchall() == [("pi-bridge", "sink", 2)]
    assert ingest([tmp_path / "runs"], tmp_path / "lake").trials_unchanged == 1
    (sinks / "pi__1.jsonl").unlink()
    assert ingest([tmp_path / "runs"], tmp_path / "lake").trials_replaced == 1
    assert connect(tmp_path / "lake").execute(query).fetchall() == [("pi-bridge", "absent", 0)]


def test_a_pi_bridge_job_of_one_agent_reads_its_trials_sinks_whatever_they_record(
    tmp_path: Path,
) -> None:
    """A pi-bridge job whose config.json names one agent ran every trial under it: a trial whose
    own record leaves token_sink_dir out (a hand-made tree) is still read from its sink and its
    trace, as the job's agent wrote them."""
    sinks = tmp_path / "runs" / "exp" / "tokens" / "step-0001"
    job = _pi_job(tmp_path / "runs", 1, sinks)
    bare = {"name": "pi-bridge", "kwargs": {}}
    write_trial(
        job, "sink__1", turns=[([9], [9], [-0.9])], trace={"stop_reason": "budget"}, agent=bare
    )
    write_sink(sinks, "sink__1", RECORDED)
    assert _ingested(tmp_path).sql(
        "SELECT t.spans_status, t.n_spans, t.collection_path, r.stop_reason"
        " FROM trials AS t JOIN trial_stop_reasons AS r USING (trial_key)"
    ).fetchall() == [("sink", 2, "pi-bridge", "budget")]


# A pi-bridge token sink read as seed 000's `load_trial_spans` reads it: blank (or whitespace)
# lines are skipped, and the spans must come in call_index order 0..n-1 AS WRITTEN (a sink whose
# lines are out of order was appended by more than one recorder: the seed raises, the lake keeps
# no spans and reports `sink_corrupt`). Expected values are what seed 000's `load_trial_spans`
# returned on these exact files: blank-lines -> [(0, [2]), (1, [4])]; out-of-order ->
# ValueError "call_index sequence [1, 0]". Kills sink.py without the blank-line skip, and with
# the order check relaxed to `sorted(observed)`.
def _lake(tmp_path: Path, text: str) -> Path:
    sinks = tmp_path / "sinks"
    job = write_job(tmp_path / "runs/exp/harbor/step-0001/job", token_sink_dir=str(sinks))
    write_trial(job, "pi__1")
    sinks.mkdir()
    (sinks / "pi__1.jsonl").write_text(text)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    return tmp_path / "lake"


def test_blank_lines_in_a_sink_are_skipped(tmp_path: Path) -> None:
    text = "\n".join([_span(0, [1], [2]), "", "   ", _span(1, [1, 2, 3], [4])]) + "\n\n"
    con = connect(_lake(tmp_path, text))
    try:
        status = con.sql("SELECT spans_status, n_spans FROM trials").fetchall()
        rows = con.sql(
            "SELECT call_index, sampled_token_ids FROM spans ORDER BY call_index"
        ).fetchall()
    finally:
        con.close()
    assert status == [("sink", 2)]
    assert [(i, list(s)) for i, s in rows] == [(0, [2]), (1, [4])]  # seed 000's spans


def test_a_sink_written_out_of_order_is_corrupt(tmp_path: Path) -> None:
    text = "\n".join([_span(1, [1, 2, 3], [4]), _span(0, [1], [2])]) + "\n"
    con = connect(_lake(tmp_path, text))
    try:
        status = con.sql("SELECT spans_status, n_spans FROM trials").fetchall()
        problems = con.sql("SELECT kind, message FROM problems").fetchall()
    finally:
        con.close()
    assert status == [("sink_corrupt", 0)]  # seed 000 raises: call_index sequence [1, 0]
    assert [kind for kind, _ in problems] == ["sink_corrupt"]
    assert "call_index sequence [1, 0]" in problems[0][1]
