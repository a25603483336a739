"""A lake whose rows an older wmo-lake read says so: the manifest records the extraction rules each
(run, step) partition was read under, and `connect()` (so every command) warns while any partition
holds rows of older rules, naming them, until an ingest reads them again."""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from harbor_shapes import write_job, write_trial

from wmo_lake import fingerprint
from wmo_lake.checks import StaleRulesWarning, stale_rules_warning
from wmo_lake.cli import cli
from wmo_lake.columns import extract_version
from wmo_lake.ingest import ingest
from wmo_lake.lake import connect
from wmo_lake.store import MIXED, Store

OLD_RULES = "0-older"
# (the suite turns this warning into an error: here it is what is tested)
pytestmark = pytest.mark.filterwarnings("default::wmo_lake.checks.StaleRulesWarning")


def _tree(root: Path) -> Path:
    """Two runs of two steps, each step one job of two trials; step 1 of run a has two jobs."""
    for run in ("a", "b"):
        for step in (1, 2):
            job = write_job(root / "runs" / run / "harbor" / f"step-{step:04d}" / "job1")
            for i in range(2):
                write_trial(job, f"t__{i}", trial_id=f"{run}-{step}-{i}")
    extra = write_job(root / "runs" / "a" / "harbor" / "step-0001" / "job2")
    write_trial(extra, "u__0", trial_id="a-1-extra")
    return root / "runs"


def _ingest_under_older_rules(
    paths: list[Path], lake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ingest by a wmo-lake of other extraction rules: its fingerprints and its record differ."""
    with monkeypatch.context() as patch:
        patch.setattr(fingerprint, "EXTRACT_VERSION", OLD_RULES)
        # (the module: the package's `ingest` is the function)
        patch.setattr(sys.modules["wmo_lake.ingest"], "EXTRACT_VERSION", OLD_RULES)
        ingest(paths, lake, workers=1)


def _stale_warnings(lake: Path) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        connect(lake).close()
    return [str(w.message) for w in caught if issubclass(w.category, StaleRulesWarning)]


def _extractions(lake: Path) -> dict[str, str]:
    return Store(lake).read_manifest().extractions


def test_a_fresh_ingest_records_this_versions_rules_and_does_not_warn(tmp_path: Path) -> None:
    ingest([_tree(tmp_path)], tmp_path / "lake")
    assert _extractions(tmp_path / "lake") == {
        f"run={run}/step={step}": extract_version() for run in "ab" for step in (1, 2)
    }
    assert _stale_warnings(tmp_path / "lake") == []


def test_rows_of_older_rules_from_a_dir_gone_from_disk_are_dropped_by_prune_as_the_warning_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trial dir deleted since an older wmo-lake read it (harbor's job resume deletes one it
    runs again) cannot be read again: the warning named only a re-ingest, which never cleared
    it. It names --prune, which does."""
    runs, lake = _tree(tmp_path), tmp_path / "lake"
    _ingest_under_older_rules([runs], lake, monkeypatch)
    shutil.rmtree(runs / "b" / "harbor" / "step-0002" / "job1" / "t__1")
    ingest([runs], lake)
    (message,) = _stale_warnings(lake)
    assert message.startswith("1 of the 4 (run, step) partitions") and "run b, step 2" in message
    assert "(`wmo-lake ingest --prune` when trial dirs of theirs are gone from disk" in message
    ingest([runs], lake, prune=True)
    assert _stale_warnings(lake) == []


def test_rows_of_older_rules_warn_until_their_runs_are_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, lake = _tree(tmp_path), tmp_path / "lake"
    _ingest_under_older_rules([runs], lake, monkeypatch)
    (message,) = _stale_warnings(lake)
    assert message.startswith("4 of the 4 (run, step) partitions of the lake")
    assert "run a, step 1; run a, step 2; run b, step 1; and 1 more" in message
    assert "wmo-lake ingest" in message

    ingest([runs / "a"], lake)  # run a only: run b's rows are still the older rules'
    (message,) = _stale_warnings(lake)
    assert message.startswith("2 of the 4 ")
    assert "(run b, step 1; run b, step 2)" in message

    ingest([runs], lake)
    assert _stale_warnings(lake) == []
    assert set(_extractions(lake).values()) == {extract_version()}


def test_a_partition_read_in_part_is_mixed_and_still_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, lake = _tree(tmp_path), tmp_path / "lake"
    _ingest_under_older_rules([runs], lake, monkeypatch)
    ingest([runs / "a" / "harbor" / "step-0001" / "job2"], lake)  # one of the step's two jobs
    assert _extractions(lake)["run=a/step=1"] == MIXED
    (message,) = _stale_warnings(lake)
    assert "run a, step 1" in message and message.startswith("4 of the 4 ")

    ingest([runs / "a" / "harbor" / "step-0001" / "job1"], lake)  # now the rest of it
    assert _extractions(lake)["run=a/step=1"] == extract_version()
    assert _stale_warnings(lake)[0].startswith("3 of the 4 ")


def test_a_lake_older_than_the_record_warns_and_its_next_ingest_reads_it_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, lake = _tree(tmp_path), tmp_path / "lake"
    _ingest_under_older_rules([runs], lake, monkeypatch)
    manifest_path = lake / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["extractions"]  # as a wmo-lake before extract logic 12 wrote it
    manifest_path.write_text(json.dumps(manifest))
    assert _stale_warnings(lake)[0].startswith("4 of the 4 ")

    summary = ingest([runs], lake)
    assert (summary.trials_replaced, summary.trials_unchanged) == (9, 0)
    assert _stale_warnings(lake) == []


@pytest.fixture
def half_stale(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A lake whose run b an older wmo-lake read, and run a this one."""
    runs, lake = _tree(tmp_path), tmp_path / "lake"
    _ingest_under_older_rules([runs / "b"], lake, monkeypatch)
    ingest([runs / "a"], lake)
    return lake


def test_forgetting_the_stale_batches_ends_the_warning(half_stale: Path) -> None:
    lake = half_stale
    assert "run b" in _stale_warnings(lake)[0]
    result = CliRunner().invoke(cli, ["forget", "--lake", str(lake), "--batch", "b/*"])
    assert result.exit_code == 0, result.output
    assert _stale_warnings(lake) == []


def test_every_command_prints_it_as_one_warning_line(half_stale: Path) -> None:
    """(`ingest` of another tree and `forget` of other batches printed none: they change the lake
    and read no view.)"""
    lake = half_stale
    elsewhere = half_stale.parent / "elsewhere"
    write_trial(write_job(elsewhere / "c" / "harbor" / "step-0001" / "job"), "t__1")
    for command in (
        ["stats"],
        ["sql", "SELECT count(*) AS n FROM trials"],
        ["ingest", str(elsewhere)],
        ["forget", "--batch", "c/*"],
        ["forget", "--batch", "nothing/*", "--dry-run"],
    ):
        result = CliRunner().invoke(cli, [*command, "--lake", str(lake)])
        assert result.exit_code == 0, result.output
        lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
        assert len(lines) == 1 and "2 of the " in lines[0] and "run b, step 1" in lines[0]


def test_the_python_api_says_it_in_python_terms(half_stale: Path) -> None:
    """From `wmo_lake.stats()` the warning named the CLI's `wmo-lake ingest`; a warning made an
    error leaves no connection open (see test_lake_connect)."""
    import wmo_lake as wl

    with pytest.warns(StaleRulesWarning) as caught:
        wl.stats(half_stale)
    (message,) = [str(w.message) for w in caught if issubclass(w.category, StaleRulesWarning)]
    assert "run wmo_lake.ingest() on their run trees again" in message
    # (the API's ingest has no prune: that advice stays the command line it is)
    assert message.count("wmo-lake ingest") == 1 and "(`wmo-lake ingest --prune` when" in message
    assert caught[0].filename == __file__


# The stale-rules warning names up to NAMED_PARTITIONS (3) partitions, then "and N more" only
# when there are more (checks.py: "partitions a StaleRulesWarning names before it says how many more
# there are"; tests/test_stale_rules.py holds 4 stale -> "...; and 1 more"). Exactly three stale
# partitions are all named, with no "and 0 more". Pins `if more > 0` in checks.stale_rules_warning.
def test_three_stale_partitions_are_named_without_a_count_of_more() -> None:
    partitions = ["run=a/step=1", "run=a/step=2", "run=b/step=1"]
    manifest = SimpleNamespace(catalog=partitions, extractions={p: "older" for p in partitions})
    message = stale_rules_warning(manifest, "LAKE")  # type: ignore[arg-type]
    assert message is not None
    assert message.startswith("3 of the 3 (run, step) partitions of the lake LAKE")
    assert "(run a, step 1; run a, step 2; run b, step 1)" in message
    assert "more" not in message
