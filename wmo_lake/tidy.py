"""Tidying a lake: `forget` removes whole batches, `prune` (ingest --prune) drops the trials whose
dirs are gone. Both change the lake the way an ingest does: under the lake's lock, through one
Commit (rows filtered out of the segments that hold them, the catalog rewritten, the manifest
swapped in one rename), so a crash at any point leaves the previous generation whole.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from wmo_lake.catalog import CatalogEntry, shadows_of
from wmo_lake.selection import labels_matching
from wmo_lake.stopping import finished, stopped_by_user
from wmo_lake.store import (
    JOB,
    TRIAL,
    UNREADABLE,
    WALK,
    InterruptedAfterCommit,
    LakeError,
    Manifest,
    Store,
    committed_message,
    crash_point,
    failed_after_commit,
)


@dataclass
class Removal:
    """What a forget or prune removed (or, with dry_run, would remove)."""

    lake: str
    generation: int
    committed: bool
    dry_run: bool
    batches: list[str] = field(default_factory=list)
    trials: int = 0
    unreadable_trials: int = 0
    jobs: int = 0
    other: int = 0  # dirs that are neither trials nor jobs, whose `problems` rows went
    dirs: list[str] = field(default_factory=list)  # the trial dirs removed
    other_dirs: list[str] = field(default_factory=list)  # those other dirs
    seconds: float = 0.0

    def add(self, entry: CatalogEntry) -> None:
        if entry.kind == TRIAL and entry.unit_key is None:  # superseded: its trial is another
            return  # dir's, so nothing of the lake's goes with it
        # (a walk problem with a batch: a trial dir of a job the walk could not read)
        unreadable = entry.kind == UNREADABLE or (entry.kind == WALK and entry.batch is not None)
        self.trials += entry.kind == TRIAL
        self.unreadable_trials += unreadable
        self.jobs += entry.kind == JOB
        # Another dir (a stray result.json that is not a trial's, say) holds rows only when it
        # has a problem, under its label as `problems.batch`; without one it is bookkeeping.
        other = entry.kind not in (TRIAL, UNREADABLE, JOB) and not unreadable
        if other and entry.unit_key is None:
            return
        if entry.batch not in self.batches:
            self.batches.append(entry.batch or "")
        if other:
            self.other += 1
            self.other_dirs.append(entry.source)
        elif unreadable or entry.kind == TRIAL:
            self.dirs.append(entry.source.removeprefix("walk:"))

    def line(self) -> str:
        verb = "would remove" if self.dry_run else "removed"
        where = (
            f"-> {self.lake} generation {self.generation}"
            if self.committed
            else "(dry run: nothing changed)"
            if self.dry_run
            else "(nothing matched: nothing changed)"
        )
        others = f", and the problems of {self.other} other dirs" if self.other else ""
        return (
            f"{verb} {self.trials} trials, {self.unreadable_trials} unreadable trials and "
            f"{self.jobs} jobs{others} in {len(self.batches)} batches {where}"
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def forget(
    lake: str | Path,
    batch_glob: str,
    *,
    dry_run: bool = False,
    on_wait: Callable[[str], None] | None = None,
) -> Removal:
    """Remove every batch matching `batch_glob` (DuckDB's GLOB, as `stats --batch` matches:
    '*' crosses '/'): its trials, unreadable trials, jobs and their problems, atomically."""
    started = time.perf_counter()
    store = Store(lake)
    if not store.exists():
        raise LakeError(f"no lake at {store.root} (no manifest.json): nothing to forget")
    if not batch_glob:
        raise LakeError("an empty batch glob matches nothing; name the batches to forget")
    with store.read_lock(on_wait) if dry_run else store.lock(on_wait, "forget"):
        base = store.read_manifest()
        catalog = store.read_catalog(base)
        labels = {entry.batch for entry in catalog.values() if entry.batch is not None}
        matching = labels_matching(labels, batch_glob)
        matched = [entry for entry in catalog.values() if entry.batch in matching]
        removal = _remove(store, base, catalog, matched, dry_run)
    removal.seconds = time.perf_counter() - started
    return removal


def _remove(
    store: Store,
    base: Manifest,
    catalog: dict[str, CatalogEntry],
    entries: Iterable[CatalogEntry],
    dry_run: bool,
) -> Removal:
    removal = Removal(str(store.root), base.generation, committed=False, dry_run=dry_run)
    entries = sorted(entries, key=lambda e: (e.batch or "", e.source))
    for entry in entries:
        removal.add(entry)
    removal.batches.sort()
    from wmo_lake.lake import ensure_duckdb_file

    if dry_run or not entries:
        if not dry_run:  # (a forget stopped after its commit left lake.duckdb to rebuild)
            ensure_duckdb_file(store, manifest=base)
        return removal
    # The dirs outside these batches that a removed trial was taken over from leave the catalog
    # too: unchanged, they would never be read again, so ingesting them could not bring it back.
    gone = {e.source for e in entries}
    lost = {e.unit_key for e in entries if e.kind == TRIAL and e.unit_key}
    entries += [e for e in shadows_of(catalog.values(), lost) if e.source not in gone]
    from wmo_lake.commit import Commit

    commit = Commit(store, base)
    try:
        for entry in entries:
            if entry.unit_key:
                commit.remove_units([entry.unit_key], entry.partition)
        gone = {e.source for e in entries}
        manifest = commit.finish(
            (e for source, e in catalog.items() if source not in gone),
            touched={e.partition for e in entries},
        )
        crash_point("after_commit")
    except InterruptedAfterCommit as stopped:  # (said in forget's words)
        raise InterruptedAfterCommit(store.root, stopped.generation, "forget") from None
    except BaseException as error:
        commit.abort()
        committed = store.committed_since(base)  # (stopped right after the commit returned)
        if isinstance(error, KeyboardInterrupt) and committed is not None:
            raise InterruptedAfterCommit(store.root, committed, "forget") from None
        raise
    rebuilt = False
    try:
        ensure_duckdb_file(store, manifest=manifest)
        rebuilt = True
        finished(committed_message(store.root, manifest.generation))
        crash_point("after_duckdb_file")
    except LakeError as error:
        raise failed_after_commit(store.root, manifest.generation, "forget", error) from error
    except BaseException as error:
        # (a Ctrl-C inside one of the rebuild's DuckDB queries is DuckDB's own error)
        if stopped_by_user(error):
            raise InterruptedAfterCommit(
                store.root, manifest.generation, "forget", rebuilt=rebuilt
            ) from None
        raise
    removal.generation = manifest.generation
    removal.committed = True
    return removal


def gone_entries(
    catalog: dict[str, CatalogEntry],
    roots: Iterable[str | os.PathLike[str]],
    found_dirs: set[str],
    found_jobs: set[str],
    found_walks: set[str],
    unlisted: Iterable[str] = (),
) -> list[CatalogEntry]:
    """The catalog entries under `roots` (real paths) whose dir was not found again: trial dirs
    (and other dirs an ingest read), job dirs and walk problems that are gone. A dir behind one
    the walk could not list (`unlisted`, real paths), or in or under one the OS cannot search,
    is not known to be gone: a run dir that cannot be read for a moment must not empty the lake
    of its trials, nor its job dir of its row. A walk problem is what the last walk found, so
    one it did not find again goes all the same."""
    prefixes = [os.path.realpath(root) for root in roots]
    hidden = [os.path.realpath(directory) for directory in unlisted]

    def under(path: str, directory: str) -> bool:
        return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)

    def behind_unlisted(path: str) -> bool:
        if f"job:{os.path.dirname(path)}" in found_jobs:
            return False  # its job dir was listed (reached by a link, say): a trial gone is gone
        # (an unlisted dir above a PATH, reached by a link back up, hides nothing the walk
        # reached from that PATH below it)
        return any(
            under(path, dark)
            and not any(under(path, p) and p != dark and under(p, dark) for p in prefixes)
            for dark in hidden
        )

    gone = []
    for source, entry in catalog.items():
        paths: tuple[str, ...]
        if entry.kind == JOB:
            path, found = source.removeprefix("job:"), found_jobs
            paths = (path,)
        elif entry.kind == WALK:
            # (its real path when the walk met it, which may be a link now (its dir moved and
            # linked back); resolved too: an older lake keys it by the path the walk spelled)
            path, found = source.removeprefix("walk:"), found_walks
            paths = (path, os.path.realpath(path))
        else:
            path, found = source, found_dirs
            paths = (path,)
        if not any(under(at, p) for at in paths for p in prefixes) or source in found:
            continue
        if entry.kind == WALK or (_searchable(path) and not behind_unlisted(path)):
            gone.append(entry)
    return gone


def _searchable(path: str) -> bool:
    """Whether the OS can say what is in `path` (a dir, or nothing there): not when `path` or a
    dir above it cannot be searched (a job dir chmod 600 lists its trial dirs' names, yet its
    config.json cannot be read, so the walk finds no job there)."""
    try:
        os.lstat(os.path.join(path, "config.json"))
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        return False
    return True
