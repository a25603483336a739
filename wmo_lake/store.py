"""The lake on disk: Parquet segments, a catalog of what was ingested, and an atomic manifest.

    LAKE/manifest.json                 the current generation: every live file, by table
    LAKE/tables/<table>/<gen>-<id>.parquet   segments: rows of the units one commit wrote
    LAKE/catalog/<gen>-<id>.msgpack    one entry per ingested dir: its unit, fingerprint, problems
    LAKE/lake.duckdb                   views over the live files, for any DuckDB client
    LAKE/.lock                         held by the one ingest that may write

A commit (wmo_lake/commit.py) writes new files under fresh names, then replaces manifest.json in
one rename: a reader or a SIGKILL at any moment sees the previous generation or the next, never a
mix. Files no manifest (current or previous) names are garbage, removed by the next ingest.

This module needs neither pyarrow nor duckdb, so an ingest that finds nothing changed starts fast.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

MANIFEST = "manifest.json"
DUCKDB_FILE = "lake.duckdb"
DUCKDB_STAMP = ".lake.duckdb.stamp"  # the generation lake.duckdb was built for
FORMAT = "wmo-lake"
FORMAT_VERSION = 2  # 2: the catalog is msgpack
# Catalog kinds: what an ingested dir turned out to be.
TRIAL = "trial"
UNREADABLE = "unreadable_trial"
OTHER = "other"  # a result.json that is not a trial's (a job's, say)
DUPLICATE = "duplicate"
JOB = "job"
WALK = "walk"


def segment_prefix(generation: int, token: str, label: str = "") -> str:
    """The name stem of a generation's new files: `<generation>-<token><label>`."""
    return f"{generation:06d}-{token}{label}"


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: SIGKILL ourselves at a named point of a commit when
    WMO_LAKE_CRASH_AT names it. Costs one dict lookup otherwise."""
    if os.environ.get("WMO_LAKE_CRASH_AT") == name:
        os.kill(os.getpid(), 9)


class LakeError(Exception):
    """A lake that cannot be used as asked; the message says what to do."""


@dataclass
class Manifest:
    generation: int = 0
    tables: dict[str, list[str]] = field(default_factory=dict)
    catalog: str | None = None
    previous: list[str] = field(default_factory=list)
    updated_at: str | None = None

    def live_files(self) -> list[str]:
        files = [f for paths in self.tables.values() for f in paths]
        return files + ([self.catalog] if self.catalog else [])


class CatalogEntry(msgspec.Struct, array_like=True):
    """One ingested dir: the unit its rows belong to and what decides whether to read it again."""

    source: str  # the dir's real path (job:PATH for a job, walk:PATH for a walk problem)
    unit_key: str | None  # the unit its rows belong to; None once another dir owns that trial
    kind: str  # TRIAL | UNREADABLE | OTHER | DUPLICATE | JOB | WALK
    job_key: str | None
    batch: str | None
    fingerprint: str
    n_problems: int = 0


_CATALOG = msgspec.msgpack.Decoder(list[CatalogEntry])


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `path` so that it holds the old or the new content, never a torn one."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "wb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class Store:
    """One lake directory."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def read_manifest(self) -> Manifest:
        if not self.exists():
            return Manifest()
        try:
            raw = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise LakeError(f"cannot read {self.manifest_path}: {error}") from error
        if raw.get("format") != FORMAT or raw.get("format_version") != FORMAT_VERSION:
            raise LakeError(
                f"{self.root} is not a wmo-lake lake of format version {FORMAT_VERSION} "
                f"(manifest says {raw.get('format')!r} {raw.get('format_version')!r}); "
                "ingest into a new --lake directory"
            )
        return Manifest(
            generation=raw["generation"],
            tables=raw["tables"],
            catalog=raw.get("catalog"),
            previous=raw.get("previous", []),
            updated_at=raw.get("updated_at"),
        )

    def duckdb_stamp(self, manifest: Manifest, views: str) -> str:
        """What lake.duckdb was built for: the generation, and `views` (a digest of its views)."""
        return f"{manifest.generation}:{manifest.catalog}:{views}"

    def duckdb_file_current(self, views: str) -> bool:
        """Whether LAKE/lake.duckdb was built for the current generation and these views (its
        sidecar says)."""
        try:
            stamp = (self.root / DUCKDB_STAMP).read_text(encoding="utf-8")
        except OSError:
            return False
        return (self.root / DUCKDB_FILE).exists() and stamp == self.duckdb_stamp(
            self.read_manifest(), views
        )

    def files(self, manifest: Manifest, table: str) -> list[Path]:
        return [self.root / rel for rel in manifest.tables.get(table, [])]

    def read_catalog(self, manifest: Manifest) -> dict[str, CatalogEntry]:
        if not manifest.catalog:
            return {}
        entries = _CATALOG.decode((self.root / manifest.catalog).read_bytes())
        return {entry.source: entry for entry in entries}

    def write_catalog(self, rel: str, catalog: Iterable[CatalogEntry]) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, msgspec.msgpack.encode(list(catalog)))

    def collect_garbage(self, manifest: Manifest) -> None:
        """Remove files neither this generation nor the previous one names (readers of the
        previous generation may still be scanning)."""
        keep = set(manifest.live_files()) | set(manifest.previous)
        for folder in ("tables", "catalog"):
            for path in (self.root / folder).rglob("*"):
                if path.is_file() and path.relative_to(self.root).as_posix() not in keep:
                    with contextlib.suppress(OSError):
                        path.unlink()
        for tmp in self.root.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()

    @contextlib.contextmanager
    def lock(self, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """Hold the lake's write lock; `on_wait` is told who holds it while we wait."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / ".lock"
        with open(path, "a+") as stream:
            try:
                fcntl.flock(stream, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                stream.seek(0)
                holder = stream.read().strip() or "another process"
                if on_wait:
                    on_wait(
                        f"waiting for {holder} to finish writing {self.root} (lock: {path}) ..."
                    )
                fcntl.flock(stream, fcntl.LOCK_EX)
            stream.seek(0)
            stream.truncate()
            stream.write(f"wmo-lake ingest pid {os.getpid()}")
            stream.flush()
            try:
                yield
            finally:
                stream.seek(0)
                stream.truncate()
                fcntl.flock(stream, fcntl.LOCK_UN)
