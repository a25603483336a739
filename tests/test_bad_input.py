"""Bad input never crashes the ingest or loses a good trial: each case becomes a `problems` row
(file, field, what was expected) and the good trial beside it is stored whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harbor_shapes import real_result, write_job, write_trial

from reference import oracle
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect


def _ingest_beside_a_good_trial(tmp_path: Path, make_bad) -> tuple[object, list[tuple]]:
    job = write_job(tmp_path / "runs" / "job")
    write_trial(job, "good__1", trial_id="good")
    bad = write_trial(job, "bad__1", trial_id="bad")
    make_bad(bad)
    summary = ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    good = con.execute("SELECT n_spans, rewards FROM trials WHERE trial_key = 'good'").fetchall()
    assert good == [(3, {"reward": "1.0"})], "the good trial must survive whole"
    problems = con.execute(
        "SELECT kind, path, message FROM problems WHERE trial_name = 'bad__1' ORDER BY kind"
    ).fetchall()
    return summary, problems


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        (b'{"id": "bad", "trial_name": "bad__1", "agent_result": {"n_in', "invalid_json"),
        (b"", "empty_file"),
        (b"   \n", "empty_file"),
        (b'{"id": "bad", "trial_name": "bad\xff\xfe__1"}', "not_utf8"),
        (b'[{"trial_name": "bad__1"}]', "not_an_object"),
        (b'{"id": "bad"}', "not_a_trial_result"),
        # a row logged while reading (the surrogate), then no trial result: still one row
        (b'["\\ud800"]', "lone_surrogate"),
    ],
    ids=["truncated", "empty", "blank", "non-utf8", "array", "no-trial-name", "surrogate-array"],
)
def test_unreadable_result_is_an_unreadable_trial(
    tmp_path: Path, content: bytes, kind: str
) -> None:
    summary, problems = _ingest_beside_a_good_trial(
        tmp_path, lambda d: (d / "result.json").write_bytes(content)
    )
    assert summary.unreadable_trials == 1
    # one problems row for the unreadable trial (issue 2), its cause in the message
    assert [p[0] for p in problems] == ["unreadable_trial"]
    assert problems[0][1] == str(tmp_path / "runs" / "job" / "bad__1")
    assert f"({kind}: " in problems[0][2] and "result.json" in problems[0][2]


def _rewrite(trial_dir: Path, change) -> None:
    doc = json.loads((trial_dir / "result.json").read_text())
    change(doc)
    (trial_dir / "result.json").write_text(json.dumps(doc, indent=4))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d["agent_result"].update(n_input_tokens="2250"), "agent_result.n_input_tokens"),
        (lambda d: d["agent_result"].update(cost_usd=True), "agent_result.cost_usd"),
        (lambda d: d["agent_result"]["metadata"].update(n_episodes="3"), "n_episodes"),
        (lambda d: d.update(agent_info="terminus-2"), "agent_info"),
        (lambda d: d.update(exception_info=["boom"]), "exception_info"),
        (lambda d: d["verifier_result"].update(rewards=[1.0]), "verifier_result.rewards"),
        (lambda d: d.update(started_at=True), "started_at"),  # (12: a unix time to harbor)
        (
            lambda d: d.update(finished_at="yesterday"),
            "finished_at is 'yesterday', expected an ISO",
        ),
        (
            lambda d: d["agent_execution"].update(started_at="2026-13-45T99:00:00Z"),
            "agent_execution.started_at is '2026-13-45T99:00:00Z', expected an ISO",
        ),
    ],
    ids=[
        "str-count",
        "bool-cost",
        "str-episodes",
        "str-object",
        "list-object",
        "list-rewards",
        "bool-time",
        "text-time",
        "impossible-phase-time",
    ],
)
def test_wrong_types_are_problems_and_the_trial_is_kept(tmp_path: Path, change, field: str) -> None:
    summary, problems = _ingest_beside_a_good_trial(tmp_path, lambda d: _rewrite(d, change))
    assert summary.trials_new == 2
    assert [p[0] for p in problems] == ["wrong_type"]
    assert field in problems[0][2] and "result.json" in problems[0][2]


def test_nulls_in_nested_fields_are_not_problems(tmp_path: Path) -> None:
    def nulls(doc: dict) -> None:
        doc["agent_info"]["model_info"] = None
        doc["agent_result"]["metadata"] = None
        doc["agent_result"]["rollout_details"] = None
        doc["verifier_result"] = {"rewards": None}
        doc["agent_execution"] = None

    _, problems = _ingest_beside_a_good_trial(tmp_path, lambda d: _rewrite(d, nulls))
    assert problems == []
    row = (
        connect(tmp_path / "lake")
        .execute(
            "SELECT model_name, n_episodes, spans_status, rewards, agent_execution_sec "
            "FROM trials WHERE trial_key = 'bad'"
        )
        .fetchall()
    )
    assert row == [(None, None, "absent", None, None)]


@pytest.mark.parametrize(
    ("details", "status"),
    [
        ("not a list", "malformed"),
        (["not an object"], "malformed"),
        (
            [{"prompt_token_ids": "1 2 3", "completion_token_ids": [[1]], "logprobs": [[0.0]]}],
            "malformed",
        ),
        (
            [{"prompt_token_ids": [[1, True]], "completion_token_ids": [[1]], "logprobs": [[0.0]]}],
            "malformed",
        ),
        (
            [{"prompt_token_ids": [[1]], "completion_token_ids": [[1]], "logprobs": [["x"]]}],
            "malformed",
        ),
        (
            [
                {
                    "prompt_token_ids": [[1], [1, 2]],
                    "completion_token_ids": [[2]],
                    "logprobs": [[0.0]],
                }
            ],
            "unaligned_turns",
        ),
        (
            [{"prompt_token_ids": [[1]], "completion_token_ids": [[2, 3]], "logprobs": [[0.0]]}],
            "logprob_mismatch",
        ),
        (
            [{"prompt_token_ids": [[2**70]], "completion_token_ids": [[2]], "logprobs": [[0.0]]}],
            "out_of_range",
        ),
    ],
    ids=[
        "string",
        "item-string",
        "prompt-string",
        "bool-token",
        "string-logprob",
        "unaligned",
        "mismatch",
        "huge-id",
    ],
)
def test_untrustworthy_spans_give_no_rows_and_a_problem(
    tmp_path: Path, details, status: str
) -> None:
    _, problems = _ingest_beside_a_good_trial(
        tmp_path,
        lambda d: _rewrite(d, lambda doc: doc["agent_result"].update(rollout_details=details)),
    )
    con = connect(tmp_path / "lake")
    assert con.execute(
        "SELECT spans_status, n_spans FROM trials WHERE trial_key = 'bad'"
    ).fetchall() == [(status, 0)]
    assert con.execute("SELECT count(*) FROM spans WHERE trial_key = 'bad'").fetchall() == [(0,)]
    kind = {"malformed": "malformed_spans"}.get(status, status)
    assert [p[0] for p in problems] == [kind]
    assert "result.json" in problems[0][2] and "no training data" in problems[0][2]


@pytest.mark.parametrize(
    ("details", "where"),
    [
        ({"prompt_token_ids": [[1]], "completion_token_ids": [[2]]}, "logprobs is missing"),
        (
            {"prompt_token_ids": [[1]], "completion_token_ids": None, "logprobs": [[0.0]]},
            "completion_token_ids is null",
        ),
        (
            {"prompt_token_ids": "1 2 3", "completion_token_ids": [[1]], "logprobs": [[0.0]]},
            "prompt_token_ids is a string, expected an array of arrays",
        ),
        (
            {"prompt_token_ids": [[1], 2], "completion_token_ids": [[1]], "logprobs": [[0.0]]},
            "prompt_token_ids[1] is a number, expected an array",
        ),
        (
            {"prompt_token_ids": [[1, 5, True]], "completion_token_ids": [[1]], "logprobs": [[0]]},
            "prompt_token_ids[0][2] is a boolean, expected an integer",
        ),
        (
            {"prompt_token_ids": [[1]], "completion_token_ids": [[1]], "logprobs": [[-0.5, "x"]]},
            "logprobs[0][1] is a string, expected a number",
        ),
    ],
    ids=["no-logprobs", "null-completions", "string-prompts", "number-turn", "bool-id", "str-lp"],
)
def test_malformed_spans_name_the_first_bad_field(tmp_path: Path, details, where: str) -> None:
    _, problems = _ingest_beside_a_good_trial(
        tmp_path,
        lambda d: _rewrite(d, lambda doc: doc["agent_result"].update(rollout_details=[details])),
    )
    assert [p[0] for p in problems] == ["malformed_spans"]
    assert f"({where}; " in problems[0][2]


def test_broken_side_files_are_problems(tmp_path: Path) -> None:
    def break_side_files(trial_dir: Path) -> None:
        (trial_dir / "verifier" / "ctrf.json").write_bytes(b'{"results": {"tests": [')
        (trial_dir / "agent" / "trajectory.json").write_bytes(b"\xff\xfe not json")
        (trial_dir / "agent" / "wmo-run.json").write_text("[1, 2]")

    _, problems = _ingest_beside_a_good_trial(tmp_path, break_side_files)
    assert [p[0] for p in problems] == ["invalid_json", "not_an_object", "not_utf8"]
    (trace_problem,) = [p for p in problems if p[0] == "not_an_object"]
    assert trace_problem[1].endswith("agent/wmo-run.json")
    assert "terminus-2's is reconstructed), so nothing else changes" in trace_problem[2]
    row = (
        connect(tmp_path / "lake")
        .execute(
            "SELECT trajectory_status, declared_complete, has_trace, trace_stop_reason "
            "FROM stop_reasons WHERE trial_key = 'bad'"
        )
        .fetchall()
    )
    # a terminus-2 job: its wmo-run.json is evidence (issue 2), not its stop reason (issue 8)
    assert row == [("unreadable", False, True, None)]


def test_nan_and_huge_numbers_read_like_the_seeds_json_loads(tmp_path: Path) -> None:
    def nan_reward(trial_dir: Path) -> None:
        text = (trial_dir / "result.json").read_text()
        text = text.replace('"reward": 1.0', '"reward": NaN').replace(
            '"cost_usd": 0.0066', '"cost_usd": 1e400'
        )
        (trial_dir / "result.json").write_text(text)

    summary, problems = _ingest_beside_a_good_trial(tmp_path, nan_reward)
    assert summary.trials_new == 2
    row = (
        connect(tmp_path / "lake")
        .execute("SELECT rewards['reward'], isinf(cost_usd) FROM trials WHERE trial_key = 'bad'")
        .fetchall()
    )
    assert row == [("NaN", True)]
    assert [p[0] for p in problems] == ["invalid_reward"]  # a NaN reward is no measurement


def test_a_key_written_twice_reads_as_its_last_value_like_json_loads(tmp_path: Path) -> None:
    def doubled(trial_dir: Path) -> None:
        path = trial_dir / "result.json"
        text = path.read_text()
        text = text.replace('"reward": 1.0', '"reward": 1.0, "reward": 0.0', 1)
        text = text.replace('"n_input_tokens": ', '"n_input_tokens": 7, "n_input_tokens": ', 1)
        assert '"reward": 0.0' in text and '"n_input_tokens": 7,' in text
        path.write_text(text)

    summary, problems = _ingest_beside_a_good_trial(tmp_path, doubled)
    assert (summary.trials_new, problems) == (2, [])
    written = json.loads((tmp_path / "runs" / "job" / "bad__1" / "result.json").read_text())
    con = connect(tmp_path / "lake")
    row = con.execute(
        "SELECT t.rewards['reward'], t.n_input_tokens, c.reward, c.passed "
        "FROM trials AS t JOIN cells AS c USING (trial_key) WHERE trial_key = 'bad'"
    ).fetchone()
    reward = written["verifier_result"]["rewards"]["reward"]
    assert reward == 0.0  # (json.loads keeps the last)
    assert row == (str(reward), written["agent_result"]["n_input_tokens"], reward, False)


def test_very_large_result_json(tmp_path: Path) -> None:
    """50 MB+ of indent=4 tokens (DuckDB's read_json would refuse an object over 16 MB)."""
    job = write_job(tmp_path / "runs" / "job")
    # Each prompt extends the last prompt + completion, as a real chat does.
    chained, context = [], list(range(20_000))
    for _ in range(36):
        chained.append((list(context), [7] * 500, [-0.5] * 500))
        context = context + [7] * 500 + list(range(1_500))
    trial_dir = write_trial(job, "big__1", trial_id="big", turns=chained)
    assert (trial_dir / "result.json").stat().st_size > 50 * 2**20
    summary = ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert summary.trials_new == 1 and summary.problems == 0
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT n_spans FROM trials").fetchall() == [(36,)]
    last = con.execute(
        "SELECT len(prompt_token_ids), prompt_token_ids[-1] FROM spans_full WHERE call_index = 35"
    ).fetchall()
    assert last == [(len(chained[35][0]), chained[35][0][-1])]


def test_result_json_is_real_sample_shaped() -> None:
    """Guard for the helpers above: the template really is harbor's TrialResult."""
    doc = real_result()
    assert {"id", "trial_name", "agent_result", "verifier_result", "exception_info"} <= set(doc)


def test_lone_surrogate_escapes_are_replaced_and_reported(tmp_path: Path) -> None:
    """json.dumps writes a str holding surrogateescape'd bytes as a lone `\\udce9` escape: valid
    JSON that json.loads reads, but no UTF-8 column can hold it. Each becomes U+FFFD, one
    `lone_surrogate` problem per file names its fields, and nothing else of the trial is lost."""

    def surrogates(trial_dir: Path) -> None:
        _rewrite(
            trial_dir,
            lambda d: d.update(
                exception_info={"exception_type": "OSError", "exception_message": "caf\udce9"}
            ),
        )
        path = trial_dir / "agent" / "trajectory.json"
        doc = json.loads(path.read_text())
        doc["steps"][1]["message"] = "ls caf\udce9.txt"
        doc["steps"][1]["tool_calls"] = [
            {"tool_call_id": "c", "function_name": "bash", "arguments": {"f\udce9": "x\udce9"}}
        ]
        path.write_text(json.dumps(doc))  # ensure_ascii: the lone surrogates as \udce9

    summary, problems = _ingest_beside_a_good_trial(tmp_path, surrogates)
    assert summary.trials_new == 2
    assert sorted((p[0], Path(p[1]).name) for p in problems) == [
        ("lone_surrogate", "result.json"),
        ("lone_surrogate", "trajectory.json"),
    ]
    messages = " ".join(p[2] for p in problems)
    for field in ("exception_info.exception_message", "steps[1].message", "'f\\udce9' (a key)"):
        assert field in messages
    con = connect(tmp_path / "lake")
    trial = con.execute("SELECT exception_message FROM trials WHERE trial_key = 'bad'").fetchall()
    assert trial == [("caf\ufffd",)]
    step = con.execute(
        "SELECT message FROM steps WHERE trial_key = 'bad' AND step_index = 1"
    ).fetchall()
    assert step == [("ls caf\ufffd.txt",)]
    call = con.execute(
        "SELECT arguments FROM tool_calls WHERE trial_key = 'bad' AND step_index = 1"
    ).fetchall()
    assert call == [('{"f\ufffd": "x\ufffd"}',)]


def test_counts_read_as_harbors_pydantic_models_read_them(tmp_path: Path) -> None:
    """AgentContext's n_input_tokens: int, cost_usd: float and ATIF Step.step_id: int are
    pydantic fields in lax mode: 5.0 -> 5, "7" -> 7, "0.01" -> 0.01; 5.5 is no int (null)."""

    def lax(trial_dir: Path) -> None:
        _rewrite(
            trial_dir,
            lambda d: d["agent_result"].update(
                n_input_tokens=5.0, n_output_tokens="7", n_cache_tokens=5.5, cost_usd="0.01"
            ),
        )
        path = trial_dir / "agent" / "trajectory.json"
        doc = json.loads(path.read_text())
        doc["steps"][1].update(step_id="2", metrics={"prompt_tokens": 100.0})
        path.write_text(json.dumps(doc))

    summary, problems = _ingest_beside_a_good_trial(tmp_path, lax)
    assert summary.trials_new == 2
    con = connect(tmp_path / "lake")
    row = con.execute(
        "SELECT n_input_tokens, n_output_tokens, n_cache_tokens, cost_usd FROM trials "
        "WHERE trial_key = 'bad'"
    ).fetchall()
    assert row == [(5, 7, None, 0.01)]
    step = con.execute(
        "SELECT step_id, prompt_tokens FROM steps WHERE trial_key = 'bad' AND step_index = 1"
    ).fetchall()
    assert step == [(2, 100)]
    assert [p[0] for p in problems] == ["wrong_type"] * 6  # every non-plain value is named
    joined = "\n".join(p[2] for p in problems)
    assert "n_cache_tokens is a number, expected an integer; the column is left null" in joined
    assert "read as 0.01" in joined and "read as 5" in joined


DEEP = 10_000  # past every JSON reader's recursion limit (msgspec's, json's, pydantic's)


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("name", "kinds"),
    [
        ("result.json", ["unreadable_trial"]),
        ("agent/trajectory.json", ["invalid_json"]),
        ("verifier/ctrf.json", ["invalid_json"]),
        ("config.json", ["invalid_json"]),
    ],
)
def test_json_nested_past_the_readers_limit_is_a_problem(
    tmp_path: Path, name: str, kinds: list[str]
) -> None:
    """It raised RecursionError through the ingest, which committed nothing."""

    def nest(trial_dir: Path) -> None:
        text = (trial_dir / name).read_text()
        (trial_dir / name).write_text(text.replace("{", '{"deep": ' + _nested(DEEP) + ",", 1))

    summary, problems = _ingest_beside_a_good_trial(tmp_path, nest)
    assert [p[0] for p in problems] == kinds
    unreadable = name == "result.json"  # (one row for the trial dir, naming the file)
    assert problems[0][1].endswith("bad__1" if unreadable else name)
    assert "nest" in problems[0][2] and (not unreadable or name in problems[0][2])
    assert summary.unreadable_trials == unreadable


@pytest.mark.parametrize(
    ("where", "change", "kinds"),
    [
        # (harbor's model reads a float field's 401-digit integer as inf: stored as read)
        ("result.json", lambda d: d["agent_result"].update(cost_usd=10**400), []),
        (
            "result.json",
            lambda d: d["agent_result"]["rollout_details"][0]["logprobs"][0].__setitem__(
                0, 10**400
            ),
            ["malformed_spans"],
        ),
        ("ctrf", lambda d: d["results"]["tests"][0].update(duration=10**400), []),
        (
            "trajectory",
            lambda d: d["steps"][-1].setdefault("metrics", {}).update(cost_usd=10**400),
            [],
        ),
    ],
    ids=["cost_usd", "logprob", "ctrf-duration", "step-cost"],
)
def test_an_integer_past_a_doubles_range_is_not_a_crash(
    tmp_path: Path, where: str, change, kinds: list[str]
) -> None:
    """float() of a 401-digit integer raised OverflowError through the ingest."""
    files = {"ctrf": "verifier/ctrf.json", "trajectory": "agent/trajectory.json"}

    def huge(trial_dir: Path) -> None:
        path = trial_dir / files.get(where, where)
        doc = json.loads(path.read_text())
        change(doc)
        path.write_text(json.dumps(doc))

    summary, problems = _ingest_beside_a_good_trial(tmp_path, huge)
    assert summary.trials_new == 2 and summary.unreadable_trials == 0
    assert [p[0] for p in problems] == kinds


@pytest.mark.parametrize(
    ("field", "kinds"),
    [
        ("prompt_token_ids", ["malformed_spans"]),
        ("completion_token_ids", ["malformed_spans"]),
        ("logprobs", []),  # inf, a float: the seed's _float_lists takes it
    ],
)
def test_a_number_past_a_doubles_range_in_the_rollout_lists_is_not_a_crash(
    tmp_path: Path, field: str, kinds: list[str]
) -> None:
    """`1e400` among the token ids: the checked path decoded each list with msgspec, which
    refuses a number out of a double's range, and the trial was lost as extract_failed. The
    seed's json.loads reads it as inf: no token id, and a logprob."""

    def huge(trial_dir: Path) -> None:
        path = trial_dir / "result.json"
        doc = json.loads(path.read_text())
        doc["agent_result"]["rollout_details"][0][field][0][0] = 987654321
        path.write_text(json.dumps(doc).replace("987654321", "1e400"))

    summary, problems = _ingest_beside_a_good_trial(tmp_path, huge)
    assert summary.trials_new == 2 and summary.unreadable_trials == 0
    assert [p[0] for p in problems] == kinds


def test_paths_recorded_in_files_that_no_path_can_be(tmp_path: Path) -> None:
    """A NUL in a recorded token_sink_dir or task path (ValueError), a task path under a user
    that does not exist (RuntimeError from expanduser): each raised through the ingest."""
    job = write_job(tmp_path / "runs" / "job", token_sink_dir="/tmp/sinks\u0000x")
    write_trial(job, "a__1", trial_id="a")
    b = write_trial(job, "b__1", trial_id="b")
    c = write_trial(job, "c__1", trial_id="c")
    for trial_dir, path in ((b, "/tasks/he\u0000llo"), (c, "~nosuchuser-wmo/tasks/hello")):
        _rewrite(trial_dir, lambda d, path=path: d["task_id"].update(path=path))
    summary = ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert (summary.trials_new, summary.unreadable_trials) == (3, 0)
    kinds = connect(tmp_path / "lake").execute("SELECT DISTINCT kind FROM problems").fetchall()
    assert kinds == [("sink_dir_missing",)]


def test_a_dir_whose_reading_raises_is_an_unreadable_trial(tmp_path: Path, monkeypatch) -> None:
    """What no rule expects (a wmo-lake bug) costs that dir, said and counted, not the ingest."""
    from wmo_lake import extract

    read = extract.decode_trial_result

    def trips_on_bad(data: bytes, path: Path, problems: object) -> object:
        if "bad__1" in str(path):
            raise KeyError("a surprise")
        return read(data, path, problems)

    monkeypatch.setattr(extract, "decode_trial_result", trips_on_bad)
    summary, problems = _ingest_beside_a_good_trial(tmp_path, lambda d: None)
    assert (summary.trials_new, summary.unreadable_trials) == (1, 1)
    [(kind, path, message)] = problems
    assert (kind, path) == ("unreadable_trial", str(tmp_path / "runs" / "job" / "bad__1"))
    assert "could not be read (extract_failed: KeyError: 'a surprise')" in message
    # counted where the message says it is (its kind was extract_failed, which stats missed)
    con = connect(tmp_path / "lake")
    stats = con.execute("SELECT trials, unreadable_trials FROM rollout_stats").fetchall()
    assert stats == [(1, 1)]


@pytest.mark.parametrize(
    ("where", "written"),
    [
        ("started_at", "0001-01-01T00:00:00+01:00"),
        ("finished_at", "9999-12-31T23:59:59-01:00"),
        ("step", "9999-12-31T23:59:59-01:00"),
        ("step", "0001-01-01T00:00:00+01:00"),
    ],
)
def test_a_time_harbor_reads_past_the_years_a_datetime_holds_keeps_its_trial(
    tmp_path: Path, where: str, written: str
) -> None:
    """A time harbor's models accept whose UTC falls in year 0 or 10000: Python's OverflowError
    lost the trial (extract_failed, and not even counted as unreadable). The trial stays, the
    time is null, and a problem names the value."""

    def far_time(trial_dir: Path) -> None:
        if where == "step":
            path = trial_dir / "agent" / "trajectory.json"
            doc = json.loads(path.read_text())
            doc["steps"][0]["timestamp"] = written
            path.write_text(json.dumps(doc))
        else:
            _rewrite(trial_dir, lambda d: _set(d, where.split("."), written))

    summary, problems = _ingest_beside_a_good_trial(tmp_path, far_time)
    assert (summary.trials_new, summary.unreadable_trials) == (2, 0)
    [(kind, _, message)] = problems
    assert kind == "wrong_type" and "years 1 to 9999" in message
    assert written in message if where != "step" else "steps[0].timestamp" in message


def _set(doc: dict, keys: list[str], value: object) -> None:
    for key in keys[:-1]:
        if not isinstance(doc.get(key), dict):
            doc[key] = {}
        doc = doc[key]
    doc[keys[-1]] = value


def test_a_file_holding_json_null_is_a_problem_not_a_missing_file(tmp_path: Path) -> None:
    """`null` read as absent, without a word, where `42` was reported."""

    def null_trajectory(trial_dir: Path) -> None:
        (trial_dir / "agent" / "trajectory.json").write_text("null")

    _, problems = _ingest_beside_a_good_trial(tmp_path, null_trajectory)
    assert [(p[0], Path(p[1]).name) for p in problems] == [
        ("malformed_trajectory", "trajectory.json")
    ]
    assert "holds JSON null, expected an ATIF trajectory object" in problems[0][2]
    job = tmp_path / "runs" / "job"
    for name in ("config.json", "result.json"):
        (job / name).write_text("null")
    ingest([tmp_path / "runs"], tmp_path / "lake2", workers=1)
    con = connect(tmp_path / "lake2")
    assert con.execute("SELECT config_status, result_status FROM jobs").fetchall() == [
        ("unreadable", "unreadable")
    ]
    kinds = con.execute("SELECT kind, path FROM problems WHERE trial_name IS NULL").fetchall()
    assert sorted(kinds) == [
        ("not_an_object", str(job / "config.json")),
        ("not_an_object", str(job / "result.json")),
    ]


def test_a_trial_that_names_no_task_is_kept_and_said(tmp_path: Path) -> None:
    """A result.json with neither a task_id harbor can name nor a task_name (harbor's own model
    refuses it) is kept under a null task_id, and a `missing_task` problem says so; before, it
    was taken silently."""
    summary, problems = _ingest_beside_a_good_trial(
        tmp_path, lambda d: _rewrite(d, lambda doc: doc.update(task_id=None, task_name=None))
    )
    assert summary.trials_new == 2
    assert [p[0] for p in problems] == ["missing_task"]
    assert "names no task" in problems[0][2]
    con = connect(tmp_path / "lake")
    assert con.sql("SELECT task_id FROM cells WHERE trial_name = 'bad__1'").fetchall() == [(None,)]


def test_an_agent_dir_that_cannot_be_listed_still_gives_its_trace_and_named_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent/ dir that may be entered but not listed (execute without read permission, which
    root ignores, so the listing is refused here by hand) hid its wmo-run.json, so a pi-bridge
    trial's stop reason was unknown, and every continuation: the stop reason is now the trace's,
    the continuation trajectory.json names is read, and what a listing alone could find (a
    subagent's trajectory) is said as a problem, not silently missed."""
    import os

    (tmp_path / "sinks").mkdir()
    job = write_job(tmp_path / "runs" / "job", token_sink_dir=str(tmp_path / "sinks"))
    trial = write_trial(job, "locked__1", trace={"stop_reason": "max_turns"})
    agent = trial / "agent"
    main = json.loads((agent / "trajectory.json").read_text())
    continuation = {**main, "steps": main["steps"][-1:]}
    main["continued_trajectory_ref"] = "trajectory.cont-1.json"
    (agent / "trajectory.json").write_text(json.dumps(main))
    (agent / "trajectory.cont-1.json").write_text(json.dumps(continuation))
    real_listdir = os.listdir

    def listdir(path="."):  # type: ignore[no-untyped-def]
        if os.fspath(path) == str(agent):
            raise PermissionError(13, "Permission denied", str(agent))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    con = connect(tmp_path / "lake")
    stop = con.execute("SELECT stop_reason FROM trial_records").fetchall()
    assert stop == [("max_turns",)]
    files = con.execute("SELECT file FROM trajectories ORDER BY file").fetchall()
    assert [Path(f).name for (f,) in files] == ["trajectory.cont-1.json", "trajectory.json"]
    problems = con.execute("SELECT kind, path, message FROM problems").fetchall()
    assert [(kind, path) for kind, path, _ in problems] == [("unreadable_dir", str(agent))]
    assert "cannot be listed" in problems[0][2] and "subagent" in problems[0][2]
    # A continuation read by name changes: its dir cannot be listed, so the trial's fingerprint
    # cannot watch it, and the next ingest reads the trial again (it kept the old steps).
    (n_steps,) = con.execute("SELECT count(*) FROM steps").fetchone() or (0,)
    con.close()
    continuation["steps"] = continuation["steps"] * 3
    (agent / "trajectory.cont-1.json").write_text(json.dumps(continuation))
    again = ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    assert again.trials_unchanged == 0
    con = connect(tmp_path / "lake")
    assert con.execute("SELECT count(*) FROM steps").fetchone() == (n_steps + 2,)


def test_an_empty_trial_name_is_still_a_trial(tmp_path: Path) -> None:
    """harbor's TrialResult takes `trial_name: ""` (a str), so upstream's scorer scores the
    trial; it was lost as an unreadable trial whose message said it had no trial_name."""
    from harbor.models.trial.result import TrialResult

    def unnamed(trial_dir: Path) -> None:
        _rewrite(trial_dir, lambda d: d.update(trial_name=""))
        doc = json.loads((trial_dir / "result.json").read_text())  # (its id is a UUID in harbor)
        TrialResult.model_validate({**doc, "id": "00000000-0000-0000-0000-000000000001"})

    summary, problems = _ingest_beside_a_good_trial(tmp_path, unnamed)
    assert (summary.trials_new, summary.unreadable_trials) == (2, 0)
    # named by its dir, as seed 000's TrialRecord names a trial (its name must not be empty)
    [(kind, _, message)] = problems
    assert kind == "wrong_type" and 'trial_name is ""' in message and "'bad__1'" in message
    con = connect(tmp_path / "lake")
    names = con.execute("SELECT trial_name FROM trial_records ORDER BY 1").fetchall()
    assert names == [("bad__1",), ("good__1",)]
    assert con.execute("SELECT trials, unreadable_trials FROM rollout_stats").fetchall() == [(2, 0)]
    expected = oracle.batch_stats(oracle.read_tree(tmp_path / "runs"))
    assert [(row["trials"], row["unreadable_trials"]) for row in expected.values()] == [(2, 0)]


@pytest.mark.parametrize(
    ("info", "said"),
    [
        ({"exception_type": None, "exception_message": "boom"}, "exception_type is null"),
        ({"exception_message": "boom"}, "exception_type is missing"),
        ({"exception_type": "AgentTimeoutError"}, "exception_message is missing"),
    ],
    ids=["type-null", "type-missing", "message-missing"],
)
def test_an_exception_info_harbors_model_refuses_is_said(
    tmp_path: Path, info: dict, said: str
) -> None:
    """An exception_info without its type or message is a result.json harbor's TrialResult
    refuses (upstream's scorer never loads the trial): the lake keeps the trial, as an infra
    failure with no reward, and says what is missing; it was taken without a word."""
    from harbor.models.trial.result import TrialResult

    full = {
        "exception_traceback": "Traceback ...",
        "occurred_at": "2026-01-01T00:00:00Z",
    }

    def refused(bad: Path) -> None:
        _rewrite(bad, lambda doc: doc.update(exception_info=full | info, verifier_result=None))
        with pytest.raises(ValueError, match="exception_info"):
            TrialResult.model_validate_json((bad / "result.json").read_bytes())

    summary, problems = _ingest_beside_a_good_trial(tmp_path, refused)
    assert summary.trials_new == 2
    assert [p[0] for p in problems] == ["wrong_type"], problems
    assert said in problems[0][2] and "harbor's TrialResult model refuses" in problems[0][2]
    con = connect(tmp_path / "lake")
    assert con.sql("SELECT infra_failed FROM cells WHERE trial_name = 'bad__1'").fetchall() == [
        (True,)
    ]


def test_a_required_field_no_table_reads_missing_is_read_without_a_problem(
    tmp_path: Path,
) -> None:
    """harbor's TrialResult refuses a result.json without `trial_uri` or `task_checksum`; no
    table reads either, so the lake reads the trial as any other and records nothing (README:
    checked field by field for what the tables read, not as a whole TrialResult)."""
    from harbor.models.trial.result import TrialResult

    def unchecked(bad: Path) -> None:
        _rewrite(bad, lambda doc: [doc.pop(field) for field in ("trial_uri", "task_checksum")])
        with pytest.raises(ValueError, match="trial_uri"):
            TrialResult.model_validate_json((bad / "result.json").read_bytes())

    summary, problems = _ingest_beside_a_good_trial(tmp_path, unchecked)
    assert (summary.trials_new, summary.unreadable_trials, problems) == (2, 0, [])
    con = connect(tmp_path / "lake")
    rows = con.sql("SELECT trial_name, n_spans FROM trials ORDER BY 1").fetchall()
    assert rows == [("bad__1", 3), ("good__1", 3)]


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda text: text[: len(text) // 2], "probably truncated while being written"),
        (lambda text: text[:-3] + b'"tr', "probably truncated while being written"),
        (lambda text: text + b"\0" * 4096, "a whole JSON document followed by NUL bytes"),
        (lambda text: text + text, "and more text follows (two documents, or text appended)"),
        (lambda text: text.decode().encode("utf-16-le"), "it looks like UTF-16 text"),
        (lambda text: text.replace(b'": ', b'" ', 1), "before its end"),
        (lambda text: text[: len(text) // 2] + b"\0" * 4096, "probably truncated"),
        (lambda text: b"\0" * len(text), "it holds only NUL bytes"),
    ],
    ids=[
        "cut",
        "cut-in-a-string",
        "nul-tail",
        "two-documents",
        "utf-16",
        "broken-inside",
        "cut-then-nul",
        "all-nul",
    ],
)
@pytest.mark.parametrize("name", ["result.json", "verifier/ctrf.json"])
def test_invalid_json_says_what_is_wrong_with_it(
    tmp_path: Path, damage, says: str, name: str
) -> None:
    """Every invalid JSON but a BOM and deep nesting was said to be 'probably truncated while
    being written', also a whole document followed by another, or by a crash's NUL bytes."""
    _, problems = _ingest_beside_a_good_trial(
        tmp_path, lambda bad: (bad / name).write_bytes(damage((bad / name).read_bytes()))
    )
    # (an unreadable result.json is the trial's one row, naming the file's problem)
    [(kind, path, message)] = problems
    ctrf = name.endswith("ctrf.json")
    assert kind == ("invalid_json" if ctrf else "unreadable_trial")
    assert path.endswith("bad__1/verifier/ctrf.json" if ctrf else "bad__1"), path
    assert "is not valid JSON" in message and says in message, message
    assert ("truncated" in message) == ("truncated" in says), message
