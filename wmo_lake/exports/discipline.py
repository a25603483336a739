"""The export discipline every training dataset shares (WMO's `training_data`), whatever its rows.

Every kind (`wmo_lake.exports.datums`, `wmo_lake.exports.conversations`, and any to come) plugs
into this one implementation of:

- the steps of an export, in order (`Request`, `Export`): the guard choice, the registry, the
  refusal to overwrite, the connection with the query-time settings in force, the batches in scope
  (`scope_condition`, bound parameters), the split guard over the kind's rows, the atomic write
  with the shared manifest (its `parameters` and the `settings` view's row as it was);

- the task registry (`load_registry`): a JSON list, or `{"tasks": [...]}`, of objects with a unique
  non-empty string `id` and a `split` in train / dev / holdout / custom. A malformed registry is an
  `ExportError` naming the entry.
- the split guard (`require_guard_choice`, `SplitGuard`): only `train` tasks are exported; rows of
  other splits are counted as excluded (reason `split_<split>`); a task missing from the registry
  stops the export with an error naming it. An export with neither a registry nor an explicit
  `no_split_guard` is refused.
- never overwrite, write atomically (`write_export`): if FILE or FILE.manifest.json exists, nothing
  is written; both are written to hidden temp files beside FILE, fsynced, then linked into place
  (a link never replaces an existing file), and removed again if anything fails, so an interrupted
  export leaves neither FILE nor its manifest (temp files a SIGKILL leaves are hidden
  `.FILE.<pid>.partial` files, removed by the next export to the same FILE).
- the manifest (`FILE.manifest.json`) with the dataset's sha256 and row count, the registry's
  sha256 and split, the wmo-lake version, the time and the trust note; callers add their own keys.
- the verifying loader core (`load_verified`): dataset sha256, row count, registry sha256 + train
  split, every row's task a registered train task;
- the summary lines every kind prints (`summary_lines`, `excluded_text`).

A kind module brings its query, its rows' writer and reader, and its own `summary`.

Every failure is an `ExportError` whose message names the file / entry / field and says what to do.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wmo_lake import __version__
from wmo_lake.selection import scope_sql
from wmo_lake.stopping import QUICK_EXIT_ON_STOP, ctrl_c_stops, finished
from wmo_lake.store import fsync_path
from wmo_lake.terminal import printable

if TYPE_CHECKING:
    import duckdb

SCHEMA_VERSION = 1
SPLITS = ("train", "dev", "holdout", "custom")
TRAIN = "train"
TRUST_NOTE = (
    "Local verifier results are inputs, not proof of correct grading: rewards and pass/fail are "
    "whatever each trial's verifier wrote."
)
MAX_REGISTRY_BYTES = 64 * 2**20


class ExportError(ValueError):
    """An export or a verified load that cannot proceed; the message says why and what to do.
    A ValueError, as WMO's `training_data` exporter and loader raise for a dataset that does not
    hold."""


class ExportUsageError(ExportError):
    """What the command line gave is wrong, not the lake (a --batch / --run that matches no
    batch, a --where that is no condition over the columns, a --tasks registry that cannot be
    read or is no registry): the CLI exits 2 on it, as on its other usage errors (and as
    `collect --tasks` does)."""


class DatasetExistsError(ExportError, FileExistsError):
    """FILE or FILE.manifest.json exists: an export never overwrites (WMO's `training_data` raises
    FileExistsError for it)."""


def manifest_path(dataset: Path | str) -> Path:
    """FILE.manifest.json, beside FILE."""
    return Path(str(dataset) + ".manifest.json")


def sha256_file(path: Path | str) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- the task registry and the split guard ------------------------------------------------------


@dataclass(frozen=True)
class TaskRegistry:
    """A loaded task registry: `splits` maps each task id to its split; `sha256` is the file's."""

    path: Path
    sha256: str
    splits: dict[str, str]

    def train_ids(self) -> list[str]:
        return sorted(task for task, split in self.splits.items() if split == TRAIN)


def _describe(entry: Any) -> str:
    text = json.dumps(entry, ensure_ascii=False, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def load_registry(path: Path | str) -> TaskRegistry:
    """Read and validate a task registry; `ExportUsageError` (what --tasks names is wrong) naming
    the offending entry otherwise."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ExportUsageError(
            f"cannot read the task registry {path}: {error.strerror or error}; pass --tasks a "
            "readable JSON file"
        ) from None
    if len(data) > MAX_REGISTRY_BYTES:
        raise ExportUsageError(f"task registry {path} is over {MAX_REGISTRY_BYTES} bytes")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExportUsageError(f"task registry {path} is not valid UTF-8 JSON: {error}") from None
    tasks = value.get("tasks") if isinstance(value, dict) else value
    if not isinstance(tasks, list):
        raise ExportUsageError(
            f"task registry {path} must be a JSON list of tasks or an object "
            '{"tasks": [...]}; got ' + type(value).__name__
        )
    if not tasks:
        raise ExportUsageError(f"task registry {path} lists no tasks")
    splits: dict[str, str] = {}
    for index, entry in enumerate(tasks):
        where = f"task registry {path}, entry {index} ({_describe(entry)})"
        if not isinstance(entry, dict):
            raise ExportUsageError(f"{where}: each task must be an object with `id` and `split`")
        task_id = entry.get("id")
        if not isinstance(task_id, str) or not task_id:
            raise ExportUsageError(f"{where}: `id` must be a non-empty string")
        if task_id in splits:
            raise ExportUsageError(f"{where}: duplicate id {task_id!r}; each task must appear once")
        split = entry.get("split")
        if split not in SPLITS:
            said = json.dumps(split) if "split" in entry else "missing"
            raise ExportUsageError(
                f"{where}: `split` is {said}, expected one of {', '.join(SPLITS)}"
            )
        splits[task_id] = split
    return TaskRegistry(path=path, sha256=hashlib.sha256(data).hexdigest(), splits=splits)


def require_guard_choice(tasks: Path | str | None, no_split_guard: bool) -> None:
    """Refuse an export that neither names a registry nor explicitly opts out of the guard."""
    if tasks is not None and no_split_guard:
        raise ExportError("--tasks and --no-split-guard contradict each other; pass one of them")
    if tasks is None and not no_split_guard:
        raise ExportError(
            "refusing to export without a split guard: pass --tasks REGISTRY.json so that only "
            "train-split tasks are exported (dev / holdout tasks must never reach a trainer), or "
            "--no-split-guard if you really mean to export every task"
        )


@dataclass
class SplitGuard:
    """Which task ids an export keeps, and the excluded row counts by reason.

    `SplitGuard(registry).keep(counts)` takes {task_id: rows} and returns the task ids to keep;
    with `registry=None` (the guard is off) every task is kept.
    """

    registry: TaskRegistry | None
    excluded: Counter[str] = field(default_factory=Counter)
    narrowing: str = "--batch / --run"  # the export's options that narrow it, named in advice

    def keep(self, rows_by_task: Mapping[str | None, int]) -> list[str | None]:
        if self.registry is None:
            return list(rows_by_task)
        unknown = sorted(str(t) for t in rows_by_task if t not in self.registry.splits)
        if unknown:
            shown = ", ".join(repr(t) for t in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
            raise ExportError(
                f"task(s) {shown} are not in the task registry {self.registry.path}; add them "
                f"with their split (or narrow the export with {self.narrowing}) so no "
                "unregistered task reaches a trainer"
            )
        kept: list[str | None] = []
        for task, count in rows_by_task.items():
            split = self.registry.splits[task]  # type: ignore[index]
            if split == TRAIN:
                kept.append(task)
            elif count:
                self.excluded[f"split_{split}"] += count
        return kept


# --- writing: no overwrite, atomic pair, manifest -------------------------------------------------


def refuse_existing(dataset: Path) -> None:
    """`ExportError` when FILE or FILE.manifest.json exists (an export never overwrites) or FILE's
    directory is something else than a directory (a missing one is made by `write_export`, as
    WMO's `training_data` makes it). `write_export` checks this itself; call it early to fail
    fast. What an interrupted export left is removed first (`_remove_unfinished`)."""
    if not dataset.parent.is_dir():
        _missing_dirs(dataset)
        return  # (nothing can exist in a directory not yet made)
    _remove_unfinished(dataset)
    for target in (dataset, manifest_path(dataset)):
        if target.exists() or target.is_symlink():
            raise DatasetExistsError(
                f"{target} already exists; an export never overwrites a dataset or its manifest, "
                "so choose a new --out FILE (or remove both files yourself)"
            )


def _missing_dirs(dataset: Path) -> list[Path]:
    """The directories above FILE that do not exist yet, deepest first; `ExportError` when one
    of its ancestors is a file (or a link to nothing), so none can be made."""
    missing = []
    directory = dataset.parent
    while not directory.is_dir():
        if directory.exists() or directory.is_symlink() or directory == directory.parent:
            raise ExportError(
                f"cannot make the directory of --out {dataset}: {directory} is not a directory"
            )
        if directory.name == "..":  # (`typo/../x`: made, typo would be left beside it)
            blocker = directory.parent
            why = (
                "is not a directory"
                if blocker.exists() or blocker.is_symlink()
                else "does not exist, and the path steps back out of it; name the directory "
                "the file goes in"
            )
            raise ExportError(f"cannot make the directory of --out {dataset}: {blocker} {why}")
        missing.append(directory)
        directory = directory.parent
    return missing


def _make_dirs(dataset: Path) -> list[Path]:
    """Make FILE's missing directories (as `training_data`'s `mkdir(parents=True)`); those made,
    deepest first, so a failed export removes them again."""
    missing = _missing_dirs(dataset)
    made: list[Path] = []
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            continue  # (made by someone else meanwhile: not ours to remove)
        except OSError as error:
            _remove_dirs(made)
            raise ExportError(
                f"cannot make the directory of --out {dataset}: {directory}: {error.strerror}"
            ) from None
        made.insert(0, directory)
    return made


def _remove_dirs(made: list[Path]) -> None:
    for directory in made:
        with contextlib.suppress(OSError):  # (only when empty: nothing of anyone's is lost)
            directory.rmdir()


# The key of the placeholder manifest `write_export` links first: {pid, started, dataset_sha256}
# (`started`: the process's start time, so a pid reused by another process is not taken for it).
UNFINISHED = "unfinished_export"


def _unfinished(manifest: Any) -> dict[str, Any] | None:
    mark = manifest.get(UNFINISHED) if isinstance(manifest, dict) else None
    return mark if isinstance(mark, dict) else None


def _remove_unfinished(dataset: Path) -> None:
    """Remove what an export to FILE killed between its links left: its placeholder manifest and,
    when it got that far, FILE itself (known by the digest the placeholder records). A real
    manifest is never removed (its dataset moved away, say), nor what an export running now
    placed, nor a FILE of other bytes."""
    companion = manifest_path(dataset)
    if companion.is_symlink():
        return
    try:
        manifest = json.loads(companion.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # (none, or not one of ours: refused as it is)
    mark = _unfinished(manifest)
    if mark is None or manifest.get("dataset") != dataset.name:
        return
    pid = mark.get("pid")
    if isinstance(pid, int) and pid != os.getpid() and _alive(pid):
        started, now = mark.get("started"), _process_started(pid)
        if started is None or now is None or started == now:
            return  # (an export writing FILE now, or one this process cannot tell apart)
    if dataset.is_symlink() or (dataset.exists() and not dataset.is_file()):
        return
    if dataset.is_file():
        if sha256_file(dataset) != mark.get("dataset_sha256"):
            return
        dataset.unlink()
    companion.unlink(missing_ok=True)


def _partial(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.partial")


def _remove_stale_partials(target: Path) -> None:
    """Remove temp files of earlier exports to `target` whose process is gone (e.g. SIGKILLed)."""
    pattern = re.compile(re.escape(f".{target.name}.") + r"(\d+)\.partial")
    with contextlib.suppress(OSError):
        for entry in target.parent.iterdir():
            match = pattern.fullmatch(entry.name)
            if not match:
                continue
            pid = int(match.group(1))
            if pid != os.getpid() and not _alive(pid):
                entry.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _process_started(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (Linux's /proc/PID/stat field 22);
    None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # (after the command name's closing paren, which the name itself may contain)
            fields = stat.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def _fsync(path: Path) -> None:
    with path.open("rb+") as stream:
        os.fsync(stream.fileno())


def base_manifest(
    *,
    kind: str,
    dataset: Path,
    dataset_sha256: str,
    rows: int,
    registry: TaskRegistry | None,
    excluded: Mapping[str, int],
) -> dict[str, Any]:
    """The manifest keys every export carries; `write_export` merges the caller's keys after these.

    schema_version, kind, dataset (file name), dataset_sha256, dataset_bytes, rows, split ("train",
    or null without a split guard), tasks_sha256 / tasks_path (null without one), excluded (reason
    -> count), wmo_lake_version, created_at (UTC ISO-8601), trust.
    """
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "dataset": dataset.name,
        "dataset_sha256": dataset_sha256,
        "dataset_bytes": dataset.stat().st_size,
        "rows": rows,
        "split": TRAIN if registry is not None else None,
        "tasks_sha256": registry.sha256 if registry is not None else None,
        "tasks_path": str(registry.path) if registry is not None else None,
        "excluded": dict(sorted(excluded.items())),
        "wmo_lake_version": __version__,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "trust": TRUST_NOTE,
    }


def write_export(
    out: Path | str,
    write_dataset: Callable[[Path], int],
    *,
    kind: str,
    registry: TaskRegistry | None,
    excluded: Mapping[str, int],
    extra: Mapping[str, Any] | Callable[[], Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """Write FILE and FILE.manifest.json atomically, never overwriting; return the manifest.

    `write_dataset(tmp_path)` writes the dataset to `tmp_path` and returns its row count. The
    manifest is `base_manifest(...)` plus `extra` (a mapping, or a callable run after the dataset
    is written). Refuses (ExportError) when either target exists, before writing anything.
    """
    out = Path(out)
    companion = manifest_path(out)
    refuse_existing(out)
    made = _make_dirs(out)
    _remove_stale_partials(out)
    _remove_stale_partials(companion)
    tmp_data, tmp_manifest = _partial(out), _partial(companion)
    installed: list[Path] = []
    written = False
    try:
        rows = write_dataset(tmp_data)
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(1) as pool:  # the device's wait beside the hash (~7 ms each)
            synced = pool.submit(_fsync, tmp_data)
            digest = sha256_file(tmp_data)
            synced.result()
        manifest = base_manifest(
            kind=kind,
            dataset=tmp_data,
            dataset_sha256=digest,
            rows=rows,
            registry=registry,
            excluded=excluded,
        )
        manifest["dataset"] = out.name
        manifest.update(extra() if callable(extra) else (extra or {}))
        # Two names cannot be placed at once. A placeholder manifest goes first, then FILE,
        # then the manifest over the placeholder: a kill between them leaves a placeholder (and
        # maybe FILE) that no loader takes and the next export to FILE removes.
        mark = {
            "pid": os.getpid(),
            "started": _process_started(os.getpid()),
            "dataset_sha256": digest,
        }
        placeholder: dict[str, Any] = {UNFINISHED: mark, "dataset": out.name}
        for tmp, target, text in (
            (tmp_manifest, companion, json.dumps(placeholder) + "\n"),
            (tmp_data, out, None),
        ):
            if text is not None:
                tmp_manifest.write_text(text, "utf-8")
            try:
                # os.link fails when the target exists: no overwrite, even of one that appeared
                os.link(tmp, target)
            except FileExistsError:
                raise DatasetExistsError(
                    f"{target} appeared while exporting; nothing was written, choose a new --out"
                ) from None
            installed.append(target)
            tmp.unlink()
        tmp_manifest.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", "utf-8")
        _fsync(tmp_manifest)
        os.replace(tmp_manifest, companion)
        written = True  # (from here, a stop removes nothing: both files are whole)
        finished(f"{out} and its manifest are written in full")
        for directory in [out, *made]:  # (a directory made here: its own entry in its parent)
            fsync_path(directory.parent)
        return manifest
    except BaseException:
        if written:
            raise
        for target in installed:
            target.unlink(missing_ok=True)
        for tmp, target in ((tmp_manifest, companion), (tmp_data, out)):
            # (a Ctrl-C between a link and its `installed.append`: the name is our file's)
            with contextlib.suppress(OSError):
                if target not in installed and os.path.samefile(tmp, target):
                    target.unlink()
        raise
    finally:
        tmp_data.unlink(missing_ok=True)
        tmp_manifest.unlink(missing_ok=True)
        if not written:
            _remove_dirs(made)


# --- the verifying loader ------------------------------------------------------------------------


def read_manifest(dataset: Path | str) -> dict[str, Any]:
    """The manifest beside `dataset`, as a dict; `ExportError` when missing or not a JSON object."""
    companion = manifest_path(dataset)
    try:
        value = json.loads(companion.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ExportError(
            f"{companion} is missing; a dataset is only loaded with the manifest its export wrote"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExportError(f"cannot read the manifest {companion}: {error}") from None
    if not isinstance(value, dict):
        raise ExportError(f"manifest {companion} is not a JSON object")
    if _unfinished(value) is not None:
        raise ExportError(
            f"{companion} is the placeholder of an export that did not finish (interrupted, or "
            "still running): no dataset to load; export again to the same FILE, which removes it"
        )
    return value


def verify_manifest(
    dataset: Path | str,
    *,
    kind: str,
    tasks: Path | str | None = None,
) -> tuple[dict[str, Any], TaskRegistry | None]:
    """Check FILE against its manifest before any row is read: schema_version, kind, the dataset's
    sha256, the split (train with a registry's sha256, null without) and, when `tasks` is given,
    the registry's sha256. Returns the manifest and the loaded registry (None without `tasks`)."""
    dataset = Path(dataset)
    if not dataset.is_file():
        raise ExportError(f"dataset {dataset} does not exist")
    manifest = read_manifest(dataset)
    companion = manifest_path(dataset)
    if manifest.get("schema_version") != SCHEMA_VERSION:
        raise ExportError(
            f"manifest {companion}: schema_version is {manifest.get('schema_version')!r}, "
            f"expected {SCHEMA_VERSION}"
        )
    if manifest.get("kind") != kind:
        raise ExportError(
            f"manifest {companion}: kind is {manifest.get('kind')!r}, expected {kind!r} (is this "
            "the right kind of dataset?)"
        )
    actual = sha256_file(dataset)
    if manifest.get("dataset_sha256") != actual:
        raise ExportError(
            f"dataset {dataset} has sha256 {actual} but its manifest records "
            f"{manifest.get('dataset_sha256')!r}: the dataset or the manifest was changed after "
            "export; re-export it"
        )
    if not isinstance(manifest.get("rows"), int) or isinstance(manifest.get("rows"), bool):
        raise ExportError(f"manifest {companion}: rows must be an integer")
    # (an export writes split 'train' with a registry's sha256, or neither: --no-split-guard;
    # seed 001 loads only 'train', also with no registry given)
    guarded = manifest.get("tasks_sha256") is not None
    if manifest.get("split") != (TRAIN if guarded else None):
        raise ExportError(
            f"manifest {companion}: split is {manifest.get('split')!r}, expected "
            + (
                "'train' (it records a task registry)"
                if guarded
                else "null (it records no task registry: exported with --no-split-guard)"
            )
            + "; the manifest was changed after export: re-export it"
        )
    registry = None
    if tasks is not None:
        registry = load_registry(tasks)
        if manifest.get("tasks_sha256") is None:
            raise ExportError(
                f"dataset {dataset} was exported without a split guard (--no-split-guard): no "
                f"task registry vouches for its splits, so {tasks} cannot; load it with no "
                f"registry, or export it again with --tasks {tasks}"
            )
        if manifest.get("tasks_sha256") != registry.sha256:
            raise ExportError(
                f"dataset {dataset} was exported against a task registry with sha256 "
                f"{manifest.get('tasks_sha256')!r}, not {tasks} ({registry.sha256}); load it with "
                "the registry it was exported with"
            )
    return manifest, registry


def verify_rows(
    dataset: Path | str,
    manifest: Mapping[str, Any],
    task_ids: Iterable[str | None],
    registry: TaskRegistry | None,
) -> None:
    """Check the rows read from `dataset`: their count equals the manifest's `rows`, and with a
    registry every row's task is a registered train task."""
    task_list = list(task_ids)
    if manifest.get("rows") != len(task_list):
        raise ExportError(
            f"dataset {dataset} holds {len(task_list)} rows but its manifest records "
            f"{manifest.get('rows')!r}; re-export it"
        )
    if registry is None:
        return
    for task in dict.fromkeys(task_list):
        split = registry.splits.get(task)  # type: ignore[arg-type]
        if split != TRAIN:
            raise ExportError(
                f"dataset {dataset} holds rows of task {task!r}, which the registry "
                f"{registry.path} gives split {split!r}, not 'train'"
            )


def load_verified(
    dataset: Path | str,
    read_rows: Callable[[Path], Any],
    task_ids_of: Callable[[Any], Iterable[str | None]],
    *,
    kind: str,
    tasks: Path | str | None = None,
) -> Any:
    """The generic verified load: `verify_manifest`, then `read_rows(dataset)` (any row container),
    then `verify_rows` over `task_ids_of(rows)`. Returns the rows."""
    dataset = Path(dataset)
    manifest, registry = verify_manifest(dataset, kind=kind, tasks=tasks)
    try:
        rows = read_rows(dataset)
    except ExportError:
        raise
    except Exception as error:
        raise ExportError(f"cannot read dataset {dataset}: {error}") from None
    verify_rows(dataset, manifest, task_ids_of(rows), registry)
    return rows


# --- what every kind prints ----------------------------------------------------------------------


def summary_lines(manifest: Mapping[str, Any], out: Path) -> list[str]:
    """The manifest and split-guard lines of every export's summary."""
    guard = (
        f"train tasks of {manifest.get('tasks_path')}"
        if manifest.get("split")
        else "OFF (--no-split-guard)"
    )
    return [
        f"manifest: {manifest_path(out)}  sha256 {manifest['dataset_sha256'][:16]}...",
        f"split guard: {guard}",
    ]


def excluded_text(manifest: Mapping[str, Any]) -> str:
    """The excluded counts by reason, or `none`."""
    excluded = manifest.get("excluded") or {}
    return ", ".join(f"{reason} {count}" for reason, count in excluded.items()) or "none"


# --- one export in progress: the steps every kind takes, in order -------------------------------


@dataclass(frozen=True)
class Request:
    """What every export is asked, whatever its kind: the lake, the file to write, the split guard
    (a registry or an explicit opt-out), which batches, and the query-time settings
    ({variable or name: value}, as `wmo_lake.lake.connect` takes them)."""

    lake: Path
    out: Path
    tasks: Path | None = None
    no_split_guard: bool = False
    batch_glob: str | None = None
    run: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    # run on the export's own connection before any row is read (the CLI's scoped reward-key
    # warning, which may stop the export): one connection instead of two. Without it the
    # connection gives connect()'s own RewardKeyWarning over the whole lake.
    check: Callable[[Any], None] | None = None
    # the ` --lake DIR` a hint's command repeats (the CLI's, only when --lake was given); None:
    # the lake above, so a library caller's hint runs on the lake it named
    lake_args: str | None = None

    @property
    def scope(self) -> dict[str, Any]:
        """The bound parameters of `scope_condition`."""
        return {"batch_glob": self.batch_glob, "run": self.run}

    def command(self, command: str, arguments: str) -> str:
        """A hint's `wmo-lake COMMAND ARGUMENTS`, naming this export's lake (see lake_args)."""
        from wmo_lake.store import hint_lake_option

        words = " ".join(word for word in ("wmo-lake", command, arguments) if word)
        return f"`{words}{hint_lake_option(self.lake, self.lake_args)}`"

    def parameters(self) -> dict[str, Any]:
        """The manifest's `parameters` every kind shares; a kind adds its own."""
        return {
            "lake": str(Path(self.lake).resolve()),
            "batch": self.batch_glob,
            "run": self.run,
            "tasks": None if self.tasks is None else str(self.tasks),
            "no_split_guard": self.no_split_guard,
        }


def scope_condition(batch: str = "batch", run: str = "run") -> str:
    """The batches an export reads, as SQL over `batch` / `run` columns with the bound parameters
    $batch_glob and $run (NULL matches everything): never pasted, always bound."""
    return scope_sql(batch, run)


def nothing_in_scope(request: Request, con: duckdb.DuckDBPyConnection) -> str:
    """Why an export found no trial to read: the lake is empty, the --batch / --run given match
    no batch (ExportUsageError when the lake has some), or the batches they match hold no trial
    of their own (empty job dirs, trial dirs that could not be read, copies of trials the lake
    holds from other dirs)."""
    from wmo_lake.checks import matches_a_batch, runs_held

    selection = [
        (flag, value)
        for flag, value in (("--batch", request.batch_glob), ("--run", request.run))
        if value is not None
    ]
    given = " ".join(f"{flag} {value!r}" for flag, value in selection)
    if matches_a_batch(con, request.batch_glob, request.run):
        which = f"the batches {given} matches" if given else "the lake's batches"
        stats = request.command(
            "stats", " ".join(f"{flag} {shlex.quote(value)}" for flag, value in selection)
        )
        return (
            f"{which} hold no trial of their own: empty job dirs, trial dirs whose result.json "
            "could not be read, or copies of trials the lake holds from another dir; "
            f"{stats} lists them, with their unreadable trials"
        )
    if not given:
        return f"the lake has no batches yet: {request.command('ingest', 'RUNS')} reads some"
    message = f"no batch matches {given}; see {request.command('stats', '')} for the batches"
    runs = runs_held(con)
    if runs:  # a typo, not an empty export: listed as `compare` lists them
        raise ExportUsageError(f"{message} (runs: {printable(', '.join(runs))})")
    return message


class Export:
    """One export in progress. Opening it does what every kind does before its query: the guard
    choice, the registry, the refusal to overwrite, the connection with the settings in force
    (`settings`: the `settings` view's row, recorded in the manifest). Then a kind counts its rows
    by task, `keep_train_tasks` applies the split guard (a temp table `kept_tasks(task)` the kind's
    query joins, see `kept`), and `write` writes the pair atomically with the shared manifest.

        with Export(request, kind="datums") as export:
            export.keep_train_tasks(rows_by_task)
            manifest = export.write(write_dataset, excluded=..., parameters=..., extra=...)
    """

    def __init__(self, request: Request, *, kind: str) -> None:
        from wmo_lake.lake import connect, settings_row

        require_guard_choice(request.tasks, request.no_split_guard)
        self.request = request
        self.kind = kind
        self.registry = load_registry(request.tasks) if request.tasks is not None else None
        refuse_existing(Path(request.out))  # before the (possibly long) query
        # (only `export datums` has --where)
        narrowing = "--batch / --run / --where" if kind == "datums" else "--batch / --run"
        self.guard = SplitGuard(self.registry, narrowing=narrowing)
        self.con = connect(request.lake, dict(request.settings), check=request.check is None)
        try:
            if request.check is not None:
                request.check(self.con)
            self.settings = settings_row(self.con)
        except BaseException:
            self.con.close()
            raise
        self.heard: list[int] = []  # the Ctrl-Cs (or SIGTERMs) heard while it runs
        self._stops = contextlib.ExitStack()

    def __enter__(self) -> Export:
        interrupt = bool(QUICK_EXIT_ON_STOP)  # (the program's own process, which ends at once)
        self._stops.enter_context(ctrl_c_stops(self.con, self.heard, interrupt))
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc_info: object) -> None:
        self._stops.close()
        if kind is None:
            self.con.close()
            return
        # A Ctrl-C inside DuckDB may surface as another error (the connection busy with the
        # interrupted call, a gathered column cut short), and closing the connection too:
        # either would hide the stop the user asked for.
        with contextlib.suppress(Exception):
            self.con.close()
        if self.heard and not issubclass(kind, KeyboardInterrupt):
            raise KeyboardInterrupt from None

    def keep_train_tasks(self, rows_by_task: Mapping[str | None, int]) -> list[str | None]:
        """The split guard over the rows in scope ({task: rows}): the kept tasks go into the temp
        table `kept_tasks(task)` (and are returned), the rest are counted in `guard.excluded`."""
        kept = self.guard.keep(rows_by_task)
        self.con.execute("CREATE TEMP TABLE kept_tasks (task VARCHAR)")
        if kept:
            self.con.executemany("INSERT INTO kept_tasks VALUES (?)", [[t] for t in kept])
        return kept

    @staticmethod
    def kept(task_column: str) -> str:
        """SQL: the row's task (`task_column`) is one `keep_train_tasks` kept."""
        return (
            "EXISTS (SELECT 1 FROM kept_tasks AS k "
            f"WHERE k.task IS NOT DISTINCT FROM {task_column})"
        )

    def write(
        self,
        write_dataset: Callable[[Path], int],
        *,
        excluded: Mapping[str, int],
        parameters: Mapping[str, Any] | Callable[[], Mapping[str, Any]] = lambda: {},
        extra: Callable[[], Mapping[str, Any]] = lambda: {},
    ) -> dict[str, Any]:
        """`write_export` with the manifest every kind shares: `parameters` (the request's plus
        the kind's), `settings` (the settings view's row as it was) and the kind's `extra` keys,
        taken once the dataset is written."""

        def manifest_keys() -> dict[str, Any]:
            own = parameters() if callable(parameters) else parameters
            keys = dict(extra())
            keys["parameters"] = self.request.parameters() | dict(own)
            keys["settings"] = self.settings
            return keys

        def write_unless_stopped(path: Path) -> int:
            rows = write_dataset(path)
            if self.heard:  # (a result an interrupt cut short raises nothing in DuckDB 2.0)
                raise KeyboardInterrupt
            return rows

        return write_export(
            Path(self.request.out),
            write_unless_stopped,
            kind=self.kind,
            registry=self.registry,
            excluded=excluded,
            extra=manifest_keys,
        )
