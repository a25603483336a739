"""`import wmo_lake as wl`: DataFrames back, settings as keyword arguments, errors in Python."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import polars as pl
import pytest
from harbor_shapes import write_job, write_trial

import wmo_lake as wl
from wmo_lake.checks import NoMatchWarning, NoTrialsWarning, RewardKeyWarning
from wmo_lake.export import ExportError
from wmo_lake.lake import NoLakeError
from wmo_lake.store import LakeError


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api")
    job = write_job(root / "runs" / "exp" / "harbor" / "step-0001" / "job", max_turns=3)
    write_trial(job, "a__1", trial_id="a", reward=1, turns=[([1, 2], [3], [-0.5])])
    write_trial(job, "b__1", trial_id="b", reward=0.0)
    summary = wl.ingest(root / "runs", lake=root / "lake", workers=1)
    assert summary.trials_new == 2 and "2 trials" in summary.line()
    return root / "lake"


def test_reads_are_polars_dataframes(lake: Path) -> None:
    stats = wl.stats(lake)
    assert isinstance(stats, pl.DataFrame)
    assert stats.row(0, named=True)["trials"] == 2 and stats["solve_rate"].to_list() == [0.5]
    trials = wl.trials(lake)
    assert trials.sort("trial_name")["passed"].to_list() == [True, False]
    assert {"n_spans", "task_id", "reward", "stop_reason"} <= set(trials.columns)
    records = wl.records(lake)
    assert "spans" not in records.columns and records.height == 2
    spans = wl.records(lake, with_spans=True).sort("trial_name")["spans"].to_list()
    assert spans[0] == [
        {
            "call_index": 0,
            "prompt_token_ids": [1, 2],
            "sampled_token_ids": [3],
            "sampled_logprobs": [-0.5],
        }
    ]


def test_settings_are_keyword_arguments(lake: Path) -> None:
    mode = wl.stats(lake, reward_mode="positive-binary", max_turns=1)
    assert mode["scaffold_loss_rate"].to_list() == [1.0]
    with pytest.warns(RewardKeyWarning, match="'score' occurs in no trial"):
        con = wl.connect(lake, reward_key="score")
    assert con.execute("SELECT getvariable('wmo_reward_key')").fetchall() == [("score",)]
    with pytest.raises(TypeError, match="unknown setting 'reward'"):
        wl.stats(lake, reward="x")


def test_filters(lake: Path) -> None:
    assert wl.stats(lake, run="exp").height == 1
    with pytest.warns(NoMatchWarning):
        assert wl.stats(lake, run="nope").height == 0
    assert wl.records(lake, batch="exp/*").height == 2


def test_errors_speak_python(lake: Path, tmp_path: Path) -> None:
    with pytest.raises(LakeError) as missing:
        wl.stats(tmp_path / "nowhere")
    assert "--" not in str(missing.value) and "wmo-lake" not in str(missing.value)
    (tmp_path / "afile").write_text("")  # (it said "ingest into it first")
    with pytest.raises(NoLakeError, match=r"afile: it is a file, not a lake directory$"):
        wl.stats(tmp_path / "afile")
    with pytest.raises(ExportError) as guard:
        wl.export_datums(lake, tmp_path / "d.parquet")
    assert "tasks=" in str(guard.value) and "no_split_guard=True" in str(guard.value)
    assert "--" not in str(guard.value)
    with pytest.raises(ExportError) as nothing:
        wl.export_datums(lake, tmp_path / "d.parquet", no_split_guard=True, batch="zzz/*")
    assert "batch=" in str(nothing.value) and "--batch" not in str(nothing.value)
    assert str(nothing.value).endswith("see wmo_lake.stats() for the batches (runs: exp)")
    odd = tmp_path / "odd`lake"  # (a backtick cut the rewrite of a hint naming the lake)
    shutil.copytree(lake, odd)
    with pytest.raises(ExportError) as named:
        wl.export_datums(odd, tmp_path / "d.parquet", no_split_guard=True, batch="zzz/*")
    assert str(named.value) == str(nothing.value)
    with pytest.raises(ValueError) as setting:  # a bad argument value, as Python has it
        wl.stats(lake, max_turns=0)
    assert "(max_turns) must be a positive integer" in str(setting.value)
    assert isinstance(setting.value, LakeError)  # (what the commands catch)


def test_exports_and_loads(lake: Path, tmp_path: Path) -> None:
    manifest = wl.export_datums(lake, tmp_path / "d.parquet", no_split_guard=True)
    datums = wl.load_datums(tmp_path / "d.parquet")
    assert isinstance(datums, pl.DataFrame) and datums.height == manifest["rows"] > 0
    wl.export_conversations(lake, tmp_path / "c.jsonl", no_split_guard=True)
    conversations = wl.load_conversations(tmp_path / "c.jsonl")
    assert isinstance(conversations, pl.DataFrame) and "messages" in conversations.columns


def test_submodules_stay_reachable() -> None:
    """wl.ingest / wl.stats are API functions, and the modules of the same name still import."""
    import wmo_lake.ingest
    import wmo_lake.stats
    from wmo_lake.stats import STATS_QUERY

    assert callable(wl.ingest) and callable(wl.stats)
    assert wmo_lake.stats.STATS_QUERY is STATS_QUERY
    assert wmo_lake.ingest.IngestSummary is not None


def test_help_of_the_api_functions_named_like_modules_is_theirs() -> None:
    """help(wl.ingest) showed the proxy class (its own docstring was found before the API
    function's) and inspect.signature gave (*args, **kwargs)."""
    import inspect
    import pydoc

    from wmo_lake import api

    for name in ("ingest", "stats"):
        proxy, function = getattr(wl, name), getattr(api, name)
        assert inspect.signature(proxy) == inspect.signature(function)
        shown = pydoc.render_doc(proxy, renderer=pydoc.plaintext)
        assert f"{name}{inspect.signature(function)}" in shown
        assert inspect.getdoc(function).splitlines()[0] in shown


def test_an_error_from_python_names_a_command_the_api_lacks_as_the_command_line() -> None:
    """`wmo-lake forget --batch B --lake L` (no wl.forget) was rewritten to "wmo_lake.forget()",
    its batch dropped; `wmo-lake export datums` to "wmo_lake.export()". A command the API has,
    with options it takes, is the function; one with an option it lacks stays a command line."""
    from wmo_lake.api import _pythonic
    from wmo_lake.store import LakeError

    said = str(
        _pythonic(
            LakeError(
                "`wmo-lake forget --batch exp1/harbor/step-0000/rollouts --lake lake` drops it; "
                "`wmo-lake export datums --lake L --out F` writes them; `wmo-lake ingest RUNS "
                "--lake L` reads them, `wmo-lake ingest --prune` drops the gone; --batch X"
            )
        )
    )
    assert "`wmo-lake forget --batch exp1/harbor/step-0000/rollouts --lake lake` drops it" in said
    assert "wmo_lake.export_datums() writes them; wmo_lake.ingest() reads them" in said
    assert "`wmo-lake ingest --prune` drops the gone; batch=X" in said
    # an option before prose or punctuation is the argument's name, not glued to the next word
    prose = "give --lake a directory of its own; pass --tasks a file (--batch, --run) --lake, or"
    assert str(_pythonic(LakeError(prose))) == (
        "give lake a directory of its own; pass tasks a file (batch, run) lake, or"
    )
    # (a value that starts with such a word is a value: `--out a.csv` lost its `=`)
    valued = "--out a.csv names a .csv file; --tasks the-tasks.json; --lake in/lake"
    assert str(_pythonic(LakeError(valued))) == (
        "out=a.csv names a .csv file; tasks=the-tasks.json; lake=in/lake"
    )


@pytest.fixture(scope="module")
def two_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run a's trials record the reward key 'reward', run b's only 'score'."""
    root = tmp_path_factory.mktemp("api-keys")
    for run, rewards in (("a", {"reward": 1.0}), ("b", {"score": 1.0})):
        job = write_job(root / "runs" / run / "harbor" / "step-0001" / "job")
        write_trial(job, f"{run}__1", trial_id=run, rewards=rewards, turns=[([1], [2], [-0.1])])
    wl.ingest(root / "runs", lake=root / "lake", workers=1)
    return root / "lake"


def test_the_reward_key_warning_looks_at_the_selected_batches(
    two_keys: Path, tmp_path: Path
) -> None:
    """A key other batches have does not hide that the selected ones lack it; the warning names
    the keys in scope, as a Python argument, at the caller's line."""
    with pytest.warns(RewardKeyWarning) as caught:
        wl.stats(two_keys, run="b")
    message = str(caught[0].message)
    assert "'reward' occurs in no trial in scope" in message and "'score' (1 trials)" in message
    assert "'reward' (" not in message and "reward_key=KEY" in message and "--" not in message
    assert caught[0].filename == __file__
    for read in (wl.trials, wl.records):
        with pytest.warns(RewardKeyWarning, match="'score' \\(1 trials\\)"):
            read(two_keys, batch="b/*")
    with pytest.warns(RewardKeyWarning, match="'score' \\(1 trials\\)"):
        wl.export_datums(two_keys, tmp_path / "d.parquet", no_split_guard=True, run="b")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # in scope: no warning
        assert wl.stats(two_keys, run="a")["solve_rate"].to_list() == [1.0]


def test_export_file_names_follow_the_clis_rule(lake: Path, tmp_path: Path) -> None:
    """An extension that names another format than the export writes is refused, as the CLI
    refuses it (never Parquet in a .csv); conversations take their format from it."""
    named = f"out={tmp_path / 'd.csv'} names a .csv file, which this export does not write: "
    with pytest.raises(ExportError, match=re.escape(f"{named}name it {tmp_path / 'd.parquet'}")):
        wl.export_datums(lake, tmp_path / "d.csv", no_split_guard=True)
    assert not (tmp_path / "d.csv").exists()
    wl.export_conversations(lake, tmp_path / "c.parquet", no_split_guard=True)
    assert (tmp_path / "c.parquet").read_bytes()[:4] == b"PAR1"
    assert wl.load_conversations(tmp_path / "c.parquet").height > 0
    with pytest.raises(ExportError, match=r"has the extension \.parquet but fmt=jsonl was given"):
        wl.export_conversations(lake, tmp_path / "e.parquet", fmt="jsonl", no_split_guard=True)
    with pytest.raises(ExportError, match=r"^episodes='first' is not one of all, last$"):
        wl.export_conversations(lake, tmp_path / "f.jsonl", episodes="first", no_split_guard=True)


@pytest.mark.parametrize("sql", ["", "  \n", "-- only a comment"])
def test_a_query_with_no_statement_is_a_clear_error(lake: Path, sql: str) -> None:
    with pytest.raises(ValueError, match=r"^query\(\): "):
        wl.query(lake, sql)


def test_a_query_that_would_write_a_file_is_refused(lake: Path) -> None:
    """The lake is read-only to query(): a COPY TO wrote any file, the lake's own manifest
    too (the lake was then unreadable); a SET returns no rows to give."""
    manifest = (lake / "manifest.json").read_bytes()
    copy = f"COPY (SELECT 1 AS x) TO '{lake / 'manifest.json'}' (FORMAT csv)"
    with pytest.raises(ValueError, match=r"^query\(\): COPY may write a file"):
        wl.query(lake, copy)
    # (a PREPARE may hold one: EXECUTE wrote the manifest over; an ATTACH makes a database file)
    with pytest.raises(ValueError, match=r"^query\(\): PREPARE may write a file"):
        wl.query(lake, f"PREPARE p AS {copy}; EXECUTE p; SELECT 1 AS ok")
    with pytest.raises(ValueError, match=r"^query\(\): ATTACH may write a file"):
        wl.query(lake, f"ATTACH '{lake / 'other.db'}' AS other; SELECT 1 AS ok")
    assert (lake / "manifest.json").read_bytes() == manifest
    assert not (lake / "other.db").exists()
    with pytest.raises(ValueError, match=r"returns no rows"):
        wl.query(lake, "SET VARIABLE wmo_max_tokens = 3")
    assert wl.query(lake, "SET VARIABLE n = 3; SELECT getvariable('n') AS n")["n"].to_list() == [3]


@pytest.mark.parametrize(
    "sql",
    [
        "SET enable_profiling = 'json'; SET profiling_output = '{target}'; SELECT 1 AS x",
        "PRAGMA profiling_output = '{target}'; PRAGMA enable_profiling; SELECT 1 AS x",
        "SET log_query_path = '{target}'; SELECT 1 AS x",
        "CALL enable_logging(storage = 'file', storage_path = '{dir}'); SELECT 1 AS x",
        "FROM enable_logging(storage = 'file', storage_path = '{dir}'); SELECT 1 AS x",
    ],
    ids=["profile", "pragma", "query-log", "logging", "logging-table-function"],
)
def test_a_setting_that_writes_a_file_is_refused(lake: Path, sql: str) -> None:
    """A SET (or PRAGMA, or CALL) that has DuckDB write a file is a write too: a profile went
    over the lake's manifest, and the lake was unreadable."""
    manifest = (lake / "manifest.json").read_bytes()
    query = sql.format(target=lake / "manifest.json", dir=lake / "logs")
    with pytest.raises(ValueError, match=r"^query\(\): \w+ would have DuckDB write files"):
        wl.query(lake, query)
    assert (lake / "manifest.json").read_bytes() == manifest
    assert not (lake / "logs").exists()
    # (settings that write nothing still run: a log kept in memory, a profile reset)
    for harmless in (
        "SET threads = 1",
        "CALL enable_logging(level = 'info')",
        "RESET profiling_output",
        "SET VARIABLE profiling_output = 1",
        "SET logging_sink = 'memory'",
    ):
        assert wl.query(lake, f"{harmless}; SELECT 2 AS x")["x"].to_list() == [2], harmless


def test_an_interval_is_a_clear_error_that_says_what_to_query(lake: Path) -> None:
    """`finished_at - started_at` raised polars' ComputeError about Arrow's interval type."""
    with pytest.raises(
        ValueError, match=r"column 'took' is or holds an INTERVAL.*epoch\(finished_at"
    ):
        wl.query(lake, "SELECT finished_at - started_at AS took FROM trials")
    seconds = wl.query(lake, "SELECT epoch(finished_at - started_at) AS took FROM trials")
    assert seconds["took"].dtype == pl.Float64 and seconds.height > 0


@pytest.mark.parametrize(
    ("select", "kind"),
    [
        ("SELECT list(finished_at - started_at) AS v FROM trials", "INTERVAL"),
        ("SELECT {'took': finished_at - started_at} AS v FROM trials", "INTERVAL"),
        ("SELECT '0101'::BIT AS v", "BIT"),
        ("SELECT '12:00:00+05:30'::TIMETZ AS v", "TIME WITH TIME ZONE"),
        ("SELECT [123456789012345678901234567890123::BIGNUM] AS v", "BIGNUM"),
        ("SELECT union_value(k := 2) AS v", "UNION"),
        ("SELECT [42::VARIANT] AS v", "VARIANT"),
    ],
)
def test_a_value_polars_would_get_changed_is_a_clear_error(
    lake: Path, select: str, kind: str
) -> None:
    """An INTERVAL in a list or struct ended in a Rust panic (not an Exception), and a BIT, a
    TIMETZ or a BIGNUM reached polars changed (bytes; the offset dropped) without a word."""
    with pytest.raises(ValueError, match=rf"column 'v' is or holds an? {kind}"):
        wl.query(lake, select)
    assert wl.query(lake, "SELECT {'interval': 1} AS v")["v"].to_list() == [{"interval": 1}]


def test_values_reach_polars_unchanged(lake: Path) -> None:
    """DuckDB hands a UHUGEINT to Arrow as a signed 128-bit value (2^128 - 1 came out -1): it
    is now Decimal(38, 0), exact, or an error past 10^38. Times are UTC instants."""
    import duckdb

    frame = wl.query(lake, "SELECT 5::UHUGEINT AS small, 10::UBIGINT AS u")
    assert frame["small"].to_list() == [5] and frame["u"].to_list() == [10]
    with pytest.raises(duckdb.ConversionException):
        wl.query(lake, "SELECT 340282366920938463463374607431768211455::UHUGEINT AS top")
    started = wl.trials(lake).schema["started_at"]
    assert isinstance(started, pl.Datetime) and started.time_zone in ("UTC", "Etc/UTC")


def test_conversations_load_with_the_types_they_were_written_with(tmp_path: Path) -> None:
    """load_conversations guessed its dtypes from the first rows: 40 trials without a reward
    (the verifier never ran) before a passing one made `reward` a Null column, and the 1.0
    after them failed the load (polars' ComputeError), from a file that verified."""
    import json

    job = write_job(tmp_path / "runs" / "exp" / "harbor" / "step-0001" / "job")
    for i in range(40):  # the verifier never ran: no reward; each its own conversation
        trial = write_trial(job, f"a{i:02d}__1", trial_id=f"a{i}", verifier_result=None)
        path = trial / "agent" / "trajectory.json"
        trajectory = json.loads(path.read_text())
        trajectory["steps"][0]["message"] += f" (variant {i})"
        path.write_text(json.dumps(trajectory))
    write_trial(job, "z__1", trial_id="z", reward=1.0)
    wl.ingest(tmp_path / "runs", lake=tmp_path / "lake", workers=1)
    for out in (tmp_path / "c.jsonl", tmp_path / "c.parquet"):
        manifest = wl.export_conversations(tmp_path / "lake", out, no_split_guard=True)
        frame = wl.load_conversations(out)
        assert frame.height == manifest["rows"] > 100
        assert frame.schema["reward"] == pl.Float64 and frame.schema["episode"] == pl.Int64
        assert frame["reward"].null_count() == frame.height - 3  # the passing trial's 3 turns
        assert frame["reward"].drop_nulls().to_list() == [1.0, 1.0, 1.0]


def test_ingest_into_a_file_names_the_argument(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValueError, match=r"^ingest\(\): lake='.*afile' is a file; give a lake"):
        wl.ingest(tmp_path / "runs", lake=tmp_path / "afile")


def test_a_ctrl_c_duckdb_took_is_a_keyboard_interrupt(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB reports a Ctrl-C that lands in its query as its own RuntimeError('Query
    interrupted'), which a script's `except KeyboardInterrupt` let through (12 of 31 stops of
    an export landed so, in connecting). Every wl.* call raises it as the KeyboardInterrupt it
    was; nothing is written."""
    from wmo_lake import lake as lake_module

    def interrupted(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(lake_module, "connect", interrupted)
    out = tmp_path / "d.parquet"
    with pytest.raises(KeyboardInterrupt):
        wl.export_datums(lake, out, no_split_guard=True)
    with pytest.raises(KeyboardInterrupt):
        wl.stats(lake)
    assert not out.exists()


def test_ingest_of_a_path_with_no_trial_dirs_warns(tmp_path: Path) -> None:
    """The CLI says `warning: no trial dirs under PATH`; ingest() said nothing, so a mistyped
    path in a notebook read as a success."""
    runs = tmp_path / "runs"
    write_trial(write_job(runs / "exp/harbor/step-0001/job"), "a__1", reward=1)
    (tmp_path / "empty").mkdir()
    with pytest.warns(NoTrialsWarning, match=r"^ingest\(\): no trial dirs under .*empty$") as seen:
        summary = wl.ingest([runs, tmp_path / "empty"], lake=tmp_path / "lake")
    assert len(seen) == 1 and summary.trials_new == 1
    assert seen[0].filename == __file__  # (pointing at the caller's line)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        wl.ingest(runs, lake=tmp_path / "lake")


@pytest.mark.parametrize("out", ["o.jsonl", "o.csv", "o"])
def test_a_format_the_export_does_not_write_is_named_as_such(
    lake: Path, tmp_path: Path, out: str
) -> None:
    """fmt='csv' was answered by the file name ('name it o.csv', also for o.csv itself)."""
    with pytest.raises(ExportError, match=r"^fmt='csv' is not one of jsonl, parquet$"):
        wl.export_conversations(lake, tmp_path / out, fmt="csv", no_split_guard=True)


def test_a_connection_per_thread_keeps_its_own_settings(lake: Path) -> None:
    """The README's advice for threads (a `con.cursor()` has none of the connection's settings):
    each thread's own wl.connect() reads its own settings, however the threads interleave."""
    from concurrent.futures import ThreadPoolExecutor

    def settings_of(max_tokens: int) -> tuple[int, int]:
        con = wl.connect(lake, max_tokens=max_tokens)
        try:
            for _ in range(5):
                ((seen,),) = con.execute("SELECT max_tokens FROM settings").fetchall()
                assert seen == max_tokens
            return max_tokens, seen
        finally:
            con.close()

    with ThreadPoolExecutor(4) as pool:
        assert sorted(pool.map(settings_of, range(3, 11))) == [(n, n) for n in range(3, 11)]


@pytest.mark.parametrize("call", ["stats", "trials", "records"])
def test_a_selection_that_matches_nothing_is_warned(lake: Path, call: str) -> None:
    """A glob that forgot `harbor/` gave an empty frame without a word: read as a step with no
    trials (the exports refuse the same typo, and `wmo-lake stats` says so)."""
    from wmo_lake.checks import NoMatchWarning

    with pytest.warns(
        NoMatchWarning, match=r"^no batch matches run='nope' \(the result is empty\)"
    ):
        frame = getattr(wl, call)(lake, run="nope")
    assert frame.is_empty()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", NoMatchWarning)
        assert not getattr(wl, call)(lake, batch="*").is_empty()


def test_batches_without_readable_trials_are_a_match(tmp_path: Path) -> None:
    """A run of only unreadable trials and an empty job dir are batches (`stats` lists them):
    an empty frame of theirs is no typo, so no "no batch matches"; an export of them says why
    it has nothing to write."""
    from edge_case_trees import write_unreadable_trial

    runs = tmp_path / "runs"
    write_unreadable_trial(
        write_job(runs / "dead" / "harbor" / "step-0000" / "job"), "x__1", "missing"
    )
    write_trial(write_job(runs / "live" / "harbor" / "step-0000" / "job"), "t__1", reward=1.0)
    write_job(runs / "live" / "harbor" / "step-0001" / "job")
    shutil.copytree(runs / "live" / "harbor" / "step-0000", runs / "zcopy" / "harbor" / "step-0000")
    lake = tmp_path / "lake"
    wl.ingest(runs, lake=lake, workers=1)  # (zcopy/'s trial is live/'s, read first)
    selections = [{"run": "dead"}, {"batch": "live/harbor/step-0001/*"}, {"run": "zcopy"}]
    for selection in selections:
        assert wl.stats(lake, **selection).height == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error", NoMatchWarning)
            assert wl.trials(lake, **selection).is_empty()
            assert wl.records(lake, **selection).is_empty()
        with pytest.raises(ExportError) as refused:
            wl.export_datums(lake, tmp_path / "d.parquet", no_split_guard=True, **selection)
        assert "hold no trial of their own" in str(refused.value), refused.value
        assert "no batch matches" not in str(refused.value)
    with pytest.warns(NoMatchWarning):
        assert wl.trials(lake, run="nope").is_empty()


def test_a_warning_points_at_a_caller_named_like_the_package(lake: Path) -> None:
    """A caller's `wmo_lake_train.py` beside the package dir starts with the package dir's path:
    its warnings were taken for the library's own and pointed at `sys:1`."""
    import wmo_lake

    caller = str(Path(wmo_lake.__file__).parent.parent / "wmo_lake_train.py")
    code = compile("wl.stats(lake, reward_key='nope')", caller, "exec")
    with pytest.warns(RewardKeyWarning) as caught:
        exec(code, {"wl": wl, "lake": lake})
    assert [warning.filename for warning in caught] == [caller]


def test_a_warning_made_an_error_leaves_no_connection_open(lake: Path) -> None:
    import contextlib
    import os
    import warnings

    def open_lake_files() -> int:
        targets = []
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):  # (the listing's own fd is gone by now)
                targets.append(os.readlink(f"/proc/self/fd/{fd}"))
        return sum(1 for target in targets if target.startswith(str(lake)))

    before = open_lake_files()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RewardKeyWarning)
        for _ in range(3):
            with pytest.raises(RewardKeyWarning):
                wl.connect(lake, reward_key="nope")
    assert open_lake_files() == before


def test_arguments_of_the_wrong_kind_are_named(lake: Path, tmp_path: Path) -> None:
    """Each was a DuckDB binder error, an AttributeError, or silently read: sink_roots=['ab']
    as OLD='a', NEW='b'; workers=0 as one process."""
    runs = tmp_path / "runs"
    write_trial(write_job(runs / "exp" / "harbor" / "step-0000" / "job"), "t__1")
    with pytest.raises(TypeError, match=r"^batch must be a str .*got 3$"):
        wl.stats(lake, batch=3)
    with pytest.raises(TypeError, match=r"^run must be a str"):
        wl.export_datums(lake, tmp_path / "d.parquet", no_split_guard=True, run=1)
    with pytest.raises(TypeError, match=r"^query\(\): sql must be a str of SQL, got NoneType"):
        wl.query(lake, None)  # type: ignore[arg-type]
    for roots in (["ab"], ["/old=/new"], {"/old": "/new"}):
        with pytest.raises(TypeError, match="each of sink_roots must be an \\(OLD, NEW\\) pair"):
            wl.ingest(runs, tmp_path / "lake", sink_roots=roots)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"workers must be >= 1"):
        wl.ingest(runs, tmp_path / "lake", workers=0)
    with pytest.raises(LakeError, match=r"must be a positive integer \(a 64-bit one\)"):
        wl.stats(lake, max_tokens=2**70)  # (a setting's error, as for max_turns=0)
    assert not (tmp_path / "lake").exists()
    assert wl.ingest(runs, tmp_path / "lake", sink_roots=[("/old", tmp_path)]).trials_new == 1


@pytest.mark.parametrize("damage", ["cut", "deleted"])
def test_a_query_over_a_damaged_segment_raises_a_lake_error_naming_it(
    tmp_path: Path, lake: Path, damage: str
) -> None:
    """A spans segment cut short (or deleted) by hand, lake.duckdb whole: query() raised DuckDB's
    "No magic bytes found" where `wmo-lake sql` names the file and what to do."""
    copy = tmp_path / "lake"
    shutil.copytree(lake, copy)
    (segment,) = (copy / "tables" / "spans").rglob("*.parquet")
    if damage == "cut":
        segment.write_bytes(segment.read_bytes()[:100])
    else:
        segment.unlink()
    rel = segment.relative_to(copy).as_posix()
    with pytest.raises(LakeError, match="put them back whole, or ingest the runs again") as error:
        wl.query(copy, "SELECT count(*) FROM spans")
    assert rel in str(error.value)
    with pytest.raises(LakeError, match=re.escape(rel)):
        wl.records(copy, with_spans=True)
    # so do the exports (they raised DuckDB's error, or an ExportError wrapping it): datums
    # read spans, conversations steps
    with pytest.raises(LakeError, match=re.escape(rel)):
        wl.export_datums(copy, tmp_path / "d.parquet", no_split_guard=True)
    (steps,) = (copy / "tables" / "steps").rglob("*.parquet")
    steps.write_bytes(steps.read_bytes()[:100])
    with pytest.raises(LakeError, match="put them back whole"):
        wl.export_conversations(copy, tmp_path / "c.jsonl", no_split_guard=True)
    # a query's own mistake over the same lake is still its own error
    with pytest.raises(Exception, match="nosuch") as own:
        wl.query(copy, "SELECT * FROM nosuch")
    assert not isinstance(own.value, LakeError)
    assert wl.query(copy, "SELECT count(*) AS n FROM trials")["n"].to_list() == [2]
