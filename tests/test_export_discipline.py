"""The shared export discipline (`wmo_lake.exports.discipline`, seed 001): task registry, split
guard, no overwrite, atomic dataset + manifest, and the verifying loader core. Datums and
conversations exports both rely on these; here they are held on a toy line-per-row dataset."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from harbor_shapes import dump, real_trajectory, write_job, write_trial

from wmo_lake.cli import cli
from wmo_lake.exports import discipline as export
from wmo_lake.exports.conversations import load_verified
from wmo_lake.exports.discipline import ExportError, SplitGuard
from wmo_lake.ingest import ingest

TASKS = [
    {"id": "t/train-1", "split": "train", "repository": "x"},
    {"id": "t/train-2", "split": "train"},
    {"id": "t/dev", "split": "dev"},
    {"id": "t/holdout", "split": "holdout"},
    {"id": "t/custom", "split": "custom"},
]


def write_registry(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def lines_writer(rows: list[str]) -> Any:
    def write(path: Path) -> int:
        path.write_text("".join(f"{row}\n" for row in rows), encoding="utf-8")
        return len(rows)

    return write


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def task_of(rows: list[str]) -> list[str]:
    return [row.split(" ")[0] for row in rows]


# --- registry ------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["list", "object"])
def test_registry_reads_a_list_or_a_tasks_object(tmp_path: Path, shape: str) -> None:
    value: Any = TASKS if shape == "list" else {"tasks": TASKS, "version": 3}
    path = write_registry(tmp_path / "tasks.json", value)
    registry = export.load_registry(path)
    assert registry.splits == {task["id"]: task["split"] for task in TASKS}
    assert registry.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert registry.train_ids() == ["t/train-1", "t/train-2"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("not json {", "not valid UTF-8 JSON"),
        ('"a string"', "must be a JSON list of tasks"),
        ('{"tasks": 3}', "must be a JSON list of tasks"),
        ("[]", "lists no tasks"),
        ('{"tasks": []}', "lists no tasks"),
        ('[{"id": "a", "split": "train"}, 7]', "entry 1 (7): each task must be an object"),
        ('[{"split": "train"}]', 'entry 0 ({"split": "train"}): `id` must be a non-empty string'),
        ('[{"id": "", "split": "train"}]', 'entry 0 ({"id": "", "split": "train"}): `id`'),
        ('[{"id": 5, "split": "train"}]', "`id` must be a non-empty string"),
        (
            '[{"id": "a", "split": "train"}, {"id": "a", "split": "dev"}]',
            'entry 1 ({"id": "a", "split": "dev"}): duplicate id \'a\'',
        ),
        ('[{"id": "a", "split": "test"}]', '`split` is "test", expected one of train, dev'),
        ('[{"id": "a"}]', 'entry 0 ({"id": "a"}): `split` is missing'),
    ],
)
def test_malformed_registry_errors_name_the_entry(
    tmp_path: Path, value: str, expected: str
) -> None:
    path = tmp_path / "tasks.json"
    path.write_text(value, encoding="utf-8")
    with pytest.raises(ExportError) as error:
        export.load_registry(path)
    assert expected in str(error.value)
    assert str(path) in str(error.value)


def test_missing_registry_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"cannot read the task registry .*missing\.json"):
        export.load_registry(tmp_path / "missing.json")


# --- split guard ---------------------------------------------------------------------------------


def test_guard_choice_is_required_and_exclusive(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="refusing to export without a split guard") as error:
        export.require_guard_choice(None, False)
    assert "--tasks" in str(error.value) and "--no-split-guard" in str(error.value)
    with pytest.raises(ExportError, match="contradict"):
        export.require_guard_choice(tmp_path / "tasks.json", True)
    export.require_guard_choice(tmp_path / "tasks.json", False)
    export.require_guard_choice(None, True)


def test_guard_keeps_train_tasks_and_counts_the_rest(tmp_path: Path) -> None:
    registry = export.load_registry(write_registry(tmp_path / "tasks.json", TASKS))
    guard = SplitGuard(registry)
    kept = guard.keep({"t/train-1": 4, "t/dev": 2, "t/holdout": 1, "t/custom": 3, "t/train-2": 0})
    assert sorted(kept) == ["t/train-1", "t/train-2"]
    assert dict(guard.excluded) == {"split_dev": 2, "split_holdout": 1, "split_custom": 3}


def test_guard_stops_on_an_unregistered_task(tmp_path: Path) -> None:
    registry = export.load_registry(write_registry(tmp_path / "tasks.json", TASKS))
    with pytest.raises(ExportError, match=r"task\(s\) 't/ghost' are not in the task registry"):
        SplitGuard(registry).keep({"t/train-1": 1, "t/ghost": 1})


def test_no_guard_keeps_everything() -> None:
    guard = SplitGuard(None)
    assert guard.keep({"a": 1, "b": 2, None: 1}) == ["a", "b", None]
    assert not guard.excluded


# --- writing -------------------------------------------------------------------------------------


def entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_write_export_writes_dataset_and_manifest(tmp_path: Path) -> None:
    registry = export.load_registry(write_registry(tmp_path / "tasks.json", TASKS))
    out = tmp_path / "data.txt"
    manifest = export.write_export(
        out,
        lines_writer(["t/train-1 a", "t/train-2 b"]),
        kind="lines",
        registry=registry,
        excluded={"split_dev": 2},
        extra=lambda: {"parameters": {"x": 1}},
    )
    assert entries(tmp_path) == ["data.txt", "data.txt.manifest.json", "tasks.json"]
    on_disk = json.loads((tmp_path / "data.txt.manifest.json").read_text(encoding="utf-8"))
    assert on_disk == manifest
    assert manifest["dataset_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert manifest["dataset_bytes"] == out.stat().st_size
    assert manifest["rows"] == 2
    assert manifest["dataset"] == "data.txt"
    assert manifest["kind"] == "lines"
    assert manifest["schema_version"] == 1
    assert manifest["split"] == "train"
    assert manifest["tasks_sha256"] == hashlib.sha256(registry.path.read_bytes()).hexdigest()
    assert manifest["excluded"] == {"split_dev": 2}
    assert manifest["parameters"] == {"x": 1}
    assert "not proof of correct grading" in manifest["trust"]
    assert manifest["wmo_lake_version"]
    assert manifest["created_at"].endswith("Z")


def test_without_guard_the_manifest_says_so(tmp_path: Path) -> None:
    manifest = export.write_export(
        tmp_path / "d.txt", lines_writer(["a"]), kind="lines", registry=None, excluded={}
    )
    assert (manifest["split"], manifest["tasks_sha256"]) == (None, None)


@pytest.mark.parametrize("existing", ["d.txt", "d.txt.manifest.json"])
def test_never_overwrites_the_dataset_or_its_manifest(tmp_path: Path, existing: str) -> None:
    (tmp_path / existing).write_text("precious", encoding="utf-8")
    called = []
    with pytest.raises(ExportError, match="already exists; an export never overwrites"):
        export.write_export(
            tmp_path / "d.txt",
            lambda path: called.append(path) or 0,
            kind="lines",
            registry=None,
            excluded={},
        )
    assert called == []
    assert entries(tmp_path) == [existing]
    assert (tmp_path / existing).read_text(encoding="utf-8") == "precious"


def _lines(path: Path) -> int:
    path.write_text("a\n", encoding="utf-8")
    return 1


def test_missing_output_directories_are_made(tmp_path: Path) -> None:
    """As WMO's `training_data` does (`output.parent.mkdir(parents=True)`); an export into a
    missing dir was refused ("create it first")."""
    out = tmp_path / "new" / "deeper" / "d.txt"
    manifest = export.write_export(out, _lines, kind="lines", registry=None, excluded={})
    assert manifest["rows"] == 1
    assert entries(out.parent) == ["d.txt", "d.txt.manifest.json"]


def test_a_failed_export_removes_the_directories_it_made(tmp_path: Path) -> None:
    (tmp_path / "kept").mkdir()

    def fail(path: Path) -> int:
        raise ExportError("nothing to export")

    with pytest.raises(ExportError, match="nothing to export"):
        export.write_export(
            tmp_path / "kept" / "new" / "deeper" / "d.txt",
            fail,
            kind="lines",
            registry=None,
            excluded={},
        )
    assert entries(tmp_path) == ["kept"] and entries(tmp_path / "kept") == []


def test_a_missing_directory_stepped_back_out_of_is_not_made(tmp_path: Path) -> None:
    """`--out typo/../d.txt` made `typo`, and left it beside the export it was not part of."""
    with pytest.raises(ExportError, match=r"typo does not exist, and the path steps back out"):
        export.write_export(
            tmp_path / "typo" / ".." / "d.txt", _lines, kind="lines", registry=None, excluded={}
        )
    assert entries(tmp_path) == []
    (tmp_path / "afile").write_text("x", encoding="utf-8")  # (there, but no dir: said so)
    with pytest.raises(ExportError, match=r"afile is not a directory$"):
        export.refuse_existing(tmp_path / "afile" / ".." / "d.txt")


def test_an_output_directory_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x", encoding="utf-8")
    with pytest.raises(ExportError, match=r"cannot make the directory .* is not a directory"):
        export.refuse_existing(tmp_path / "file" / "sub" / "d.txt")


@pytest.mark.parametrize("failure", ["dataset", "manifest", "interrupt"])
def test_a_failed_export_leaves_nothing_behind(tmp_path: Path, failure: str) -> None:
    out = tmp_path / "d.txt"

    def write(path: Path) -> int:
        path.write_text("half a dataset", encoding="utf-8")
        if failure == "dataset":
            raise OSError("disk full")
        if failure == "interrupt":
            raise KeyboardInterrupt
        return 1

    def extra() -> dict[str, Any]:
        raise RuntimeError("manifest failed")

    with pytest.raises((OSError, KeyboardInterrupt, RuntimeError)):
        export.write_export(out, write, kind="lines", registry=None, excluded={}, extra=extra)
    assert entries(tmp_path) == []


def test_a_target_appearing_meanwhile_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "d.txt"

    def write(path: Path) -> int:
        path.write_text("ours\n", encoding="utf-8")
        export.manifest_path(out).write_text("theirs", encoding="utf-8")  # a racing writer
        return 1

    with pytest.raises(ExportError, match="appeared while exporting"):
        export.write_export(out, write, kind="lines", registry=None, excluded={})
    # our manifest could not be placed (it is linked first), so our dataset never was
    assert entries(tmp_path) == ["d.txt.manifest.json"]
    assert export.manifest_path(out).read_text(encoding="utf-8") == "theirs"


def test_sigkill_mid_export_leaves_neither_file_and_the_next_export_cleans_up(
    tmp_path: Path,
) -> None:
    out = tmp_path / "d.txt"
    started = tmp_path / "started"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from wmo_lake.exports import discipline as export

        def write(path):
            path.write_text("partial", encoding="utf-8")
            Path({str(started)!r}).write_text("1")
            time.sleep(60)
            return 1

        export.write_export(Path({str(out)!r}), write, kind="lines", registry=None, excluded={{}})
        """
    )
    process = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert started.exists(), "the export subprocess did not start writing"
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    started.unlink()
    assert not out.exists() and not export.manifest_path(out).exists()
    leftovers = entries(tmp_path)
    assert leftovers == [f".d.txt.{process.pid}.partial"]  # hidden, and only the temp file
    export.write_export(out, lines_writer(["a"]), kind="lines", registry=None, excluded={})
    assert entries(tmp_path) == ["d.txt", "d.txt.manifest.json"]


def _killed_after_link(out: Path, links: int) -> None:
    """An export to `out` SIGKILLed right after its `links`-th os.link."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from wmo_lake.exports import discipline as export

        link, done = os.link, []
        def link_then_die(source, target):
            link(source, target)
            done.append(target)
            if len(done) == {links}:
                os.kill(os.getpid(), signal.SIGKILL)
        export.os.link = link_then_die
        write = lambda path: path.write_text("a\\n", encoding="utf-8") and 1
        export.write_export(Path({str(out)!r}), write, kind="lines", registry=None, excluded={{}})
        """
    )
    killed = subprocess.run([sys.executable, "-c", script], check=False)
    assert killed.returncode == -signal.SIGKILL


@pytest.mark.parametrize("links", [1, 2])
def test_sigkill_between_the_links_leaves_what_the_next_export_removes(
    tmp_path: Path, links: int
) -> None:
    """Two names cannot be placed at once: a kill between them leaves a placeholder manifest
    (and, after the second link, FILE), which no loader takes and the next export removes."""
    out = tmp_path / "d.txt"
    _killed_after_link(out, links)
    left = [e for e in entries(tmp_path) if not e.endswith(".partial")]
    assert left == ["d.txt", "d.txt.manifest.json"][2 - links :]
    says = "does not exist" if links == 1 else "placeholder of an export that did not finish"
    with pytest.raises(ExportError, match=says):
        export.load_verified(out, read_lines, task_of, kind="lines")
    export.write_export(out, lines_writer(["b"]), kind="lines", registry=None, excluded={})
    assert entries(tmp_path) == ["d.txt", "d.txt.manifest.json"]
    assert export.load_verified(out, read_lines, task_of, kind="lines") == ["b"]


def test_a_manifest_whose_dataset_moved_away_is_refused_not_replaced(tmp_path: Path) -> None:
    """Issue 4 and seed 001: FILE.manifest.json existing stops the export, written nothing."""
    out = tmp_path / "d.txt"
    export.write_export(out, lines_writer(["a"]), kind="lines", registry=None, excluded={})
    out.rename(tmp_path / "uploaded.txt")
    before = export.manifest_path(out).read_bytes()
    with pytest.raises(ExportError, match=r"d\.txt\.manifest\.json already exists"):
        export.write_export(out, lines_writer(["b"]), kind="lines", registry=None, excluded={})
    assert export.manifest_path(out).read_bytes() == before and not out.exists()


def test_what_an_unfinished_export_left_is_kept_when_it_is_not_its_own(tmp_path: Path) -> None:
    out = tmp_path / "d.txt"
    _killed_after_link(out, 2)
    out.unlink()
    out.write_text("someone else's\n", encoding="utf-8")  # not the bytes the placeholder records
    with pytest.raises(ExportError, match=r"d\.txt already exists"):
        export.refuse_existing(out)
    assert out.read_text(encoding="utf-8") == "someone else's\n"
    placeholder = json.loads(export.manifest_path(out).read_text(encoding="utf-8"))
    out.unlink()
    parent = os.getppid()  # an export still running
    placeholder[export.UNFINISHED] |= {"pid": parent, "started": export._process_started(parent)}
    export.manifest_path(out).write_text(json.dumps(placeholder))
    with pytest.raises(ExportError, match=r"manifest\.json already exists"):
        export.refuse_existing(out)


def test_a_placeholder_whose_pid_another_process_now_has_is_removed(tmp_path: Path) -> None:
    """The pid of an export killed long ago may be a live process's again: its placeholder,
    taken for a running export's, refused every export to FILE until that process ended."""
    out = tmp_path / "d.txt"
    _killed_after_link(out, 1)
    placeholder = json.loads(export.manifest_path(out).read_text(encoding="utf-8"))
    started = placeholder[export.UNFINISHED]["started"]
    assert isinstance(started, int)
    placeholder[export.UNFINISHED]["pid"] = os.getppid()  # alive, and started at another time
    assert export._process_started(os.getppid()) != started
    export.manifest_path(out).write_text(json.dumps(placeholder))
    export.write_export(out, lines_writer(["b"]), kind="lines", registry=None, excluded={})
    assert export.load_verified(out, read_lines, task_of, kind="lines") == ["b"]


def test_a_live_exporter_whose_start_cannot_be_read_keeps_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user's process under /proc's hidepid=2 shows no start time: its live export's
    placeholder was taken for a dead one's and removed, with its FILE."""
    out = tmp_path / "d.txt"
    _killed_after_link(out, 2)
    placeholder = json.loads(export.manifest_path(out).read_text(encoding="utf-8"))
    placeholder[export.UNFINISHED]["pid"] = os.getppid()  # alive
    export.manifest_path(out).write_text(json.dumps(placeholder))
    monkeypatch.setattr(export, "_process_started", lambda pid: None)
    with pytest.raises(ExportError, match="already exists"):
        export.refuse_existing(out)
    assert out.exists() and export.manifest_path(out).exists()


@pytest.mark.parametrize("links", [1, 2])
def test_ctrl_c_right_after_a_link_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, links: int
) -> None:
    """A Ctrl-C between a link and the export's note of it left that name (FILE without its
    manifest, refused by every loader and every later export)."""
    link, done = os.link, []

    def link_then_interrupt(source: str, target: str) -> None:
        link(source, target)
        done.append(target)
        if len(done) == links:
            raise KeyboardInterrupt

    monkeypatch.setattr(export.os, "link", link_then_interrupt)
    out = tmp_path / "d.txt"
    with pytest.raises(KeyboardInterrupt):
        export.write_export(out, lines_writer(["a"]), kind="lines", registry=None, excluded={})
    assert entries(tmp_path) == []


def test_a_manifest_of_another_dataset_is_not_taken_for_an_orphan(tmp_path: Path) -> None:
    out = tmp_path / "d.txt"
    export.manifest_path(out).write_text(
        json.dumps({export.UNFINISHED: {"pid": 2**22 + 7}, "dataset": "other.txt"})
    )
    with pytest.raises(ExportError, match="already exists"):
        export.refuse_existing(out)


# --- verified load -------------------------------------------------------------------------------


@pytest.fixture
def exported(tmp_path: Path) -> tuple[Path, Path]:
    tasks = write_registry(tmp_path / "tasks.json", TASKS)
    out = tmp_path / "d.txt"
    export.write_export(
        out,
        lines_writer(["t/train-1 a", "t/train-2 b", "t/train-1 c"]),
        kind="lines",
        registry=export.load_registry(tasks),
        excluded={},
    )
    return out, tasks


def load(out: Path, tasks: Path | None) -> list[str]:
    rows: list[str] = export.load_verified(out, read_lines, task_of, kind="lines", tasks=tasks)
    return rows


def test_load_verified_returns_the_rows(exported: tuple[Path, Path]) -> None:
    out, tasks = exported
    assert load(out, tasks) == ["t/train-1 a", "t/train-2 b", "t/train-1 c"]
    assert load(out, None) == ["t/train-1 a", "t/train-2 b", "t/train-1 c"]


def rewrite_manifest(out: Path, **changes: Any) -> None:
    path = export.manifest_path(out)
    manifest = json.loads(path.read_text(encoding="utf-8"))
    manifest.update(changes)
    path.write_text(json.dumps(manifest), encoding="utf-8")


def test_a_tampered_dataset_fails(exported: tuple[Path, Path]) -> None:
    out, tasks = exported
    out.write_text(out.read_text(encoding="utf-8") + "t/train-2 extra\n", encoding="utf-8")
    with pytest.raises(ExportError, match="was changed after export"):
        load(out, tasks)


def test_a_tampered_row_count_fails(exported: tuple[Path, Path]) -> None:
    out, tasks = exported
    rewrite_manifest(out, rows=2)
    with pytest.raises(ExportError, match="holds 3 rows but its manifest records 2"):
        load(out, tasks)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"schema_version": 2}, "schema_version is 2, expected 1"),
        ({"kind": "datums"}, "kind is 'datums', expected 'lines'"),
        ({"rows": "3"}, "rows must be an integer"),
        ({"split": None}, "split is None, expected 'train'"),
        ({"tasks_sha256": "0" * 64}, "was exported against a task registry with sha256"),
    ],
)
def test_a_tampered_manifest_fails(
    exported: tuple[Path, Path], changes: dict[str, Any], expected: str
) -> None:
    out, tasks = exported
    rewrite_manifest(out, **changes)
    with pytest.raises(ExportError, match=expected):
        load(out, tasks)


def test_a_tampered_split_fails_with_no_registry_given_too(
    exported: tuple[Path, Path], tmp_path: Path
) -> None:
    """Seed 001 loads only a 'train' manifest, registry or not: a manifest edited to say 'dev'
    loaded without a word when no registry was given. An export writes 'train' with a
    registry's sha256, or null with none (--no-split-guard), and nothing else."""
    out, _ = exported
    assert load(out, None) == ["t/train-1 a", "t/train-2 b", "t/train-1 c"]
    rewrite_manifest(out, split="dev")
    with pytest.raises(ExportError, match=r"split is 'dev', expected 'train'.*changed after"):
        load(out, None)
    unguarded = tmp_path / "unguarded.txt"
    export.write_export(
        unguarded, lines_writer(["t/x a"]), kind="lines", registry=None, excluded={}
    )
    assert load(unguarded, None) == ["t/x a"]
    rewrite_manifest(unguarded, split="train")  # (no registry vouches for a train split)
    with pytest.raises(ExportError, match="split is 'train', expected null"):
        load(unguarded, None)


def test_another_registry_fails(exported: tuple[Path, Path], tmp_path: Path) -> None:
    out, _ = exported
    other = write_registry(tmp_path / "other.json", [*TASKS, {"id": "t/new", "split": "train"}])
    with pytest.raises(ExportError, match="load it with the registry it was exported with"):
        load(out, other)


def test_missing_or_broken_manifest_fails(exported: tuple[Path, Path]) -> None:
    out, tasks = exported
    companion = export.manifest_path(out)
    companion.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ExportError, match="is not a JSON object"):
        load(out, tasks)
    companion.write_text("{", encoding="utf-8")
    with pytest.raises(ExportError, match="cannot read the manifest"):
        load(out, tasks)
    companion.unlink()
    with pytest.raises(ExportError, match=r"manifest\.json is missing"):
        load(out, tasks)
    with pytest.raises(ExportError, match="does not exist"):
        load(out.with_name("other.txt"), tasks)


def test_rows_of_a_non_train_task_fail(tmp_path: Path) -> None:
    tasks = write_registry(tmp_path / "tasks.json", TASKS)
    out = tmp_path / "d.txt"
    # write_export trusts its caller's rows; the loader does not
    export.write_export(
        out,
        lines_writer(["t/train-1 a", "t/dev b"]),
        kind="lines",
        registry=export.load_registry(tasks),
        excluded={},
    )
    with pytest.raises(ExportError, match=r"rows of task 't/dev'.*split 'dev', not 'train'"):
        load(out, tasks)


def test_errors_are_the_python_types_seed_001_raises(tmp_path: Path) -> None:
    """Seed 001 raises FileExistsError for an existing output and ValueError for a dataset that
    does not match its manifest: code written against it catches ours too."""
    out = tmp_path / "d.txt"
    export.write_export(out, lines_writer(["a"]), kind="lines", registry=None, excluded={})
    with pytest.raises(FileExistsError, match="already exists"):
        export.write_export(out, lines_writer(["b"]), kind="lines", registry=None, excluded={})
    out.write_text("changed\n", encoding="utf-8")
    with pytest.raises(ValueError, match="sha256"):
        export.load_verified(out, read_lines, task_of, kind="lines")


# With `--no-split-guard` every task is exported, a trial whose result.json names no task (no
# `task_id`, no `task_name`: `cells.task_id` null) too. Pins `Export.kept`'s
# `IS NOT DISTINCT FROM` (a plain `=` drops the null task's rows from the conversations export).
#
# Expected values: harbor's `traces export` (harbor/utils/traces_utils.py) writes one row per agent
# episode of every trial dir with a trajectory, whatever its task; the README: "`--no-split-guard`
# if you really mean to export every task" (the refusal's own words, exports/discipline.py) and
# "One row per agent episode ... as harbor's `traces export` defines it". The real terminus-2
# trajectory has three agent steps (tests/test_export_conversations.py EPISODES_PER_TRIAL).
EPISODES_PER_TRIAL = 3


def test_a_trial_without_a_task_is_exported_when_the_guard_is_off(tmp_path: Path) -> None:
    job = write_job(tmp_path / "runs" / "main")
    write_trial(job, "named__1", task_name="demo/a", reward=1.0)
    taskless = write_trial(
        job, "taskless__1", reward=1.0, result_overrides={"task_id": None, "task_name": None}
    )
    trajectory = real_trajectory()  # (distinct text: not a duplicate of named__1's episodes)
    trajectory["steps"][0]["message"] += "\n[taskless]"
    dump(taskless / "agent" / "trajectory.json", trajectory)
    ingest([tmp_path / "runs"], tmp_path / "lake", workers=1)
    out = tmp_path / "all.jsonl"
    lake = str(tmp_path / "lake")
    args = ["export", "conversations", "--lake", lake, "--out", str(out), "--json"]
    result = CliRunner().invoke(cli, [*args, "--no-split-guard"])
    assert result.exit_code == 0, result.output
    rows = load_verified(out).to_dicts()
    by_trial = {
        name: [r for r in rows if r["trial_name"] == name] for name in ("named__1", "taskless__1")
    }
    assert len(by_trial["named__1"]) == EPISODES_PER_TRIAL
    assert len(by_trial["taskless__1"]) == EPISODES_PER_TRIAL
    assert all(r["task_id"] is None for r in by_trial["taskless__1"])
    assert json.loads(result.output)["rows"] == 2 * EPISODES_PER_TRIAL
