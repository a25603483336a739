"""The lake on disk: Parquet segments, a catalog of what was ingested, and an atomic manifest.

    LAKE/manifest.json      the current generation: every live file, by table and partition
    LAKE/tables/<table>/run=<run>/step=<step>/<gen>-<id>.parquet
                            segments: rows of the units one commit wrote, Hive-partitioned
    LAKE/catalog/run=<run>/step=<step>/<gen>-<id>.msgpack
                            one entry per ingested dir: its unit, fingerprint, problems
    LAKE/lake.duckdb                   views over the live files, for a DuckDB client
    LAKE/.lock                         held by the one ingest that may write
    LAKE/.staging/                     its copies of the stored tables' rows (stored_copies.py)

Every row sits in the partition of its unit's run and step (a trial's, a job's: the labels of
its job dir; `__HIVE_DEFAULT_PARTITION__` when it has none, as in Hive and Spark). Run labels are
escaped as Hive and Spark escape partition values (`escape_partition_value`), so Spark, Trino or
DuckDB (`hive_partitioning = true`) read a table's dir directly and decode the same values; the
files carry the `run` and `step` columns too, with the same values.

A commit (wmo_lake/commit.py) writes new files under fresh names, then replaces manifest.json in
one rename: a reader or a SIGKILL at any moment sees the previous generation or the next, never a
mix. Files no manifest (current or previous) names are garbage, removed by the next ingest.

This module needs neither pyarrow nor duckdb, so an ingest that finds nothing changed starts fast.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shlex
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from wmo_lake.catalog import CatalogEntry, CatalogKeys

T = TypeVar("T")
# Reads a segment (its path) whole: None, or the words it failed with (`unreadable_segments`)
SegmentReader = Callable[[str], str | None]

MANIFEST = "manifest.json"
STAGING = ".staging"  # an ingest's copies of the stored tables' rows (wmo_lake/stored_copies.py)
DUCKDB_FILE = "lake.duckdb"
DUCKDB_STAMP = ".lake.duckdb.stamp"  # the generation lake.duckdb was built for
CORRUPT_DUCKDB = "Corrupt database file"  # DuckDB's words for a block whose checksum fails
FORMAT = "wmo-lake"
FORMAT_VERSION = 3  # 2: the catalog is msgpack; 3: tables and catalog partitioned by run, step
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # a null (or empty) run or step, as Hive writes it
# What Hive and Spark escape in a partition value (FileUtils / ExternalCatalogUtils): the path
# separator, `=`, `%`, quotes, glob and URI characters, control characters. Spark decodes each
# %XX as one character, so non-ASCII text stays as it is (UTF-8 in the path) to round-trip.
_ESCAPED = frozenset("\"#%'*/:=?\\\x7f{[]^") | frozenset(map(chr, range(1, 32)))
# Catalog kinds: what an ingested dir turned out to be.
TRIAL = "trial"
UNREADABLE = "unreadable_trial"
OTHER = "other"  # a result.json that is not a trial's (a job's, say)
DUPLICATE = "duplicate"
JOB = "job"
WALK = "walk"


def escape_partition_value(value: str | int | None) -> str:
    """A run or step as a path segment's value, escaped as Hive and Spark do."""
    if value is None or value == "":
        return DEFAULT_PARTITION
    escaped = "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in str(value))
    if escaped == DEFAULT_PARTITION:  # a run dir so named would read as null: its '_' escaped
        return "%5F" + escaped[1:]  # (readers compare the name before they unescape it)
    return escaped


def unescape_partition_value(text: str) -> str | None:
    if text == DEFAULT_PARTITION:
        return None
    out, i = [], 0
    while i < len(text):
        if text[i] == "%" and _is_hex(text[i + 1 : i + 3]):
            out.append(chr(int(text[i + 1 : i + 3], 16)))
            i += 3
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _is_hex(text: str) -> bool:
    return len(text) == 2 and all(c in "0123456789abcdefABCDEF" for c in text)


@functools.lru_cache(maxsize=4096, typed=True)  # asked per trial; a lake has few (run, step)s
def partition_of(run: str | None, step: int | None) -> str:
    """The partition (a path below tables/<table>/) of a unit's rows: `run=<run>/step=<step>`."""
    return f"run={escape_partition_value(run)}/step={escape_partition_value(step)}"


@functools.lru_cache(maxsize=4096)  # the segment writer asks once per unit
def partition_values(partition: str) -> tuple[str | None, int | None]:
    """(run, step) of a partition path made by `partition_of`."""
    run_part, step_part = partition.split("/")
    run = unescape_partition_value(run_part.removeprefix("run="))
    step = unescape_partition_value(step_part.removeprefix("step="))
    return run, None if step is None else int(step)


# The longest file name Linux's and macOS's file systems take (NAME_MAX: ext4, XFS, btrfs, APFS).
NAME_MAX_BYTES = 255


def oversized_partition_dir(run: str | None) -> str | None:
    """The `run=<run>` dir name when its escaped run is longer than a file name can be (each of
    `#%:=?...` is 3 bytes escaped): no lake can hold that partition. None when it fits."""
    name = f"run={escape_partition_value(run)}"
    return name if len(name.encode("utf-8")) > NAME_MAX_BYTES else None


NO_PARTITION = partition_of(None, None)  # walk problems; rows of a dir outside step-NNNN paths


def segment_prefix(generation: int, token: str, label: str = "") -> str:
    """The name stem of a generation's new files: `<generation>-<token><label>`."""
    return f"{generation:06d}-{token}{label}"


def crash_point(name: str) -> None:
    """Fault injection for the crash tests: SIGKILL ourselves at a named point of a commit when
    WMO_LAKE_CRASH_AT names it, SIGINT (a Ctrl-C) when WMO_LAKE_INTERRUPT_AT does, SIGTERM when
    WMO_LAKE_TERMINATE_AT does. Costs three dict lookups otherwise."""
    environ = os.environ
    if environ.get("WMO_LAKE_CRASH_AT") == name:
        os.kill(os.getpid(), 9)
    if environ.get("WMO_LAKE_INTERRUPT_AT") == name:
        os.kill(os.getpid(), 2)
    if environ.get("WMO_LAKE_TERMINATE_AT") == name:
        os.kill(os.getpid(), 15)


def pause_point() -> None:
    """Fault injection for the signal tests: hold a reader (a Spark task before a dir, a reader
    process before a chunk) until a writer opens the FIFO that WMO_LAKE_PAUSE_FIFO names (the
    test's sign that a read is under way: a trial's own files are never waited on, see
    jsonfile.read_file); once the test removed it, no reader waits. Costs one dict lookup
    otherwise."""
    fifo = os.environ.get("WMO_LAKE_PAUSE_FIFO")
    if fifo:
        try:
            with open(fifo, "rb") as held:
                held.read()
        except FileNotFoundError:
            return


class LakeError(Exception):
    """A lake that cannot be used as asked; the message says what to do."""


def hint_lake_option(lake: Path | str, given: str | None = None) -> str:
    """The ` --lake DIR` a hint's command carries, so it runs on this lake as printed: `given`
    when a CLI says it (its own rule: only when --lake was on the command line), else the
    lake a library caller named, shell-quoted."""
    if given is not None:
        return given
    return f" --lake {shlex.quote(str(lake))}"


MIXED = "mixed"  # a table whose files were written with different schemas (see Manifest.schemas)
# table -> partition -> its segments (paths relative to the lake), as the manifest lists them
PartitionedFiles = dict[str, dict[str, list[str]]]


@dataclass
class Manifest:
    generation: int = 0
    tables: PartitionedFiles = field(default_factory=dict)
    catalog: dict[str, str] = field(default_factory=dict)  # partition -> its catalog file
    previous: list[str] = field(default_factory=list)
    updated_at: str | None = None
    # table -> the digest of the schema every one of its files was written with, or MIXED
    schemas: dict[str, str] = field(default_factory=dict)
    # partition -> the extract version every trial and job of it was read under, or MIXED; a
    # partition not named was written by a wmo-lake older than this record (extract logic 12)
    extractions: dict[str, str] = field(default_factory=dict)
    # the `--sink-root OLD=NEW` remaps ingests were given, applied to every later ingest (a
    # re-read without them would lose the spans of a run tree moved since it ran)
    sink_roots: list[tuple[str, str]] = field(default_factory=list)

    def table_files(self, table: str) -> list[str]:
        """Every live segment of `table`, partition by partition."""
        return [rel for rels in self.tables.get(table, {}).values() for rel in rels]

    def live_files(self) -> list[str]:
        files = [rel for table in self.tables for rel in self.table_files(table)]
        return files + list(self.catalog.values())


def refuse_shadowed_files(root: Path, manifest: Manifest) -> None:
    """LakeError when the working directory holds a file of the same relative name as one of the
    lake's segments (it is a copy of the lake, or the lake is a copy of it): DuckDB reads a
    view's relative file name against the working directory before `file_search_path`, so
    every query would read that file instead of the lake's own. One stat in the common case."""
    if not os.path.isdir("tables"):
        return
    here = os.path.realpath(os.getcwd())
    if here == os.path.realpath(root):
        return
    for rel in (rel for table in manifest.tables for rel in manifest.table_files(table)):
        if not os.path.exists(rel):
            continue
        with contextlib.suppress(OSError):
            if os.path.samefile(rel, root / rel):
                continue  # (the same file: a hard link, or a dir linked to it)
        raise LakeError(
            f"the working directory {here} holds {rel}, a file of the same name as one of the "
            f"lake {root}'s (one lake is a copy of the other): DuckDB reads the lake's files by "
            "names relative to the working directory first, so it would read that one instead. "
            "Run wmo-lake from another directory (the lake's own works)"
        )


# `Store.sync_files` syncs more paths than this from SYNC_THREADS threads.
SERIAL_SYNCS = 4
SYNC_THREADS = 8


def fsync_path(path: Path | str) -> None:
    """fsync a file or a dir (a new name in a dir is durable once the dir is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _ends_as_parquet(path: str) -> bool:
    """Whether `path` is a file ending in Parquet's magic bytes, as every segment written whole
    does (one cut short by an interrupted copy does not; DuckDB would only say "No magic bytes
    found" at the first query that reads it)."""
    try:
        with open(path, "rb") as file:
            file.seek(-4, os.SEEK_END)
            return file.read(4) == b"PAR1"
    except OSError:  # gone, a dir, or shorter than the magic bytes
        return False


def decoding_failure(error: BaseException) -> bool:
    """Whether `error` is what DuckDB or pyarrow raise for bytes of a Parquet file that do not
    decode: DuckDB's bare Error ("Variable-length int over 10 bytes", "TProtocolException: ...";
    a query's own mistakes raise subclasses: Binder, Conversion, Invalid Input...) or its
    "Invalid unicode" in a column name, any of pyarrow's, or the bindings' failure to decode a
    name (UnicodeDecodeError; nanobind's "conversion error" RuntimeError)."""
    kind = type(error)
    if kind.__name__ == "Error" and kind.__module__ in ("duckdb", "_duckdb"):
        return True
    if kind.__name__ == "InvalidInputException" and "Invalid unicode" in str(error):
        return True
    return (
        kind.__module__.startswith("pyarrow")
        or isinstance(error, UnicodeDecodeError)
        or (isinstance(error, RuntimeError) and "nanobind" in str(error))
    )


def may_be_damage(error: BaseException) -> bool:
    """Whether a failed query's `error` may be the lake's damage, worth `Store.damage` (which
    costs a read of the files): it names a Parquet file, it is DuckDB's checksum failure (a
    lake.duckdb changed in place), or a decoding failure."""
    text = str(error)
    return ".parquet" in text or CORRUPT_DUCKDB in text or decoding_failure(error)


def _live_segments(manifest: Manifest, partitions: Collection[str] | None) -> list[str]:
    """The segments the manifest names, of `partitions` (else all)."""
    return [
        rel
        for files in manifest.tables.values()
        for partition, rels in files.items()
        if partitions is None or partition in partitions
        for rel in rels
    ]


def _not_read_by_duckdb(con: Any, paths: list[str]) -> list[tuple[str, str]]:
    """(path, DuckDB's words) for each of `paths` DuckDB cannot read whole: all read in one
    query, halved while it fails (a query a file cost ~4 ms, 4 s for a 128-step lake)."""
    import duckdb

    try:  # (a hash of every column: each page is decoded)
        con.execute(
            "SELECT bit_xor(hash(COLUMNS(*))) FROM read_parquet(?, union_by_name = true)", [paths]
        ).fetchall()
        return []
    except duckdb.Error as failure:
        if len(paths) == 1:
            return [(paths[0], first_line(failure))]
    half = len(paths) // 2
    return _not_read_by_duckdb(con, paths[:half]) + _not_read_by_duckdb(con, paths[half:])


def first_line(error: BaseException) -> str:
    """The first line of `error`'s words (its type's name when it has none)."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write `path` so that it holds the old or the new content, never a torn one."""
    tmp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
    try:
        with open(tmp, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
    except BaseException:  # (a full disk, `path` a dir: no temp file left behind)
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


class InterruptedAfterCommit(KeyboardInterrupt):
    """Ctrl-C once a change of the lake was committed: its new generation is the lake's; what
    was left undone is only lake.duckdb's rebuild (and the sweep of the replaced files)."""

    def __init__(
        self, root: Path, generation: int, command: str = "ingest", *, rebuilt: bool = False
    ) -> None:
        super().__init__(root, generation)
        self.generation = generation
        self.message = (
            f"interrupted after the commit: {committed_message(root, generation)}"
            if rebuilt  # (stopped once all was done: the lock's release, say)
            else f"interrupted after the commit: generation {generation} is the lake at {root}, "
            "but lake.duckdb was not rebuilt (wmo-lake reads the lake as it is; for a plain "
            f"DuckDB client, run the same {command} again: it rebuilds lake.duckdb and changes "
            "nothing else)"
        )


def committed_message(root: Path, generation: int) -> str:
    """What a command that changed the lake says when stopped once all its work was done (the
    lock's release, its summary's print): `stopping.finished`'s text."""
    return f"generation {generation} is the lake at {root}, and lake.duckdb is up to date"


def failed_after_commit(root: Path, generation: int, command: str, error: LakeError) -> LakeError:
    """`error`, raised by lake.duckdb's rebuild once a change of the lake was committed (a segment
    of a partition the change did not touch was deleted by hand, say), saying that the change
    itself is in: it read as if nothing had happened."""
    return LakeError(
        f"the {command} is committed (generation {generation} is the lake at {root}), but "
        "lake.duckdb could not be rebuilt, so a plain DuckDB client still reads the lake as it "
        f"was before: {error}"
    )


class Store:
    """One lake directory."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.interrupted = False  # set by `lock`: the last writer did not finish cleanly
        absolute = os.path.abspath(self.root)
        if "," in absolute:
            # DuckDB's file_search_path, which the views' relative file names resolve against,
            # is a comma-separated list: `/x/new,lake` would be `/x/new` and `lake`, and a copy
            # named `lake,copy` would read the original's files
            raise LakeError(
                f"the lake path {absolute} holds a comma, which DuckDB cannot "
                "take as the lake's search path; name the lake dir (and its parents) without one"
            )
        if "\\" in absolute:
            # DuckDB reads a backslash in a file path as a separator: `back\slash/lake.duckdb`
            # opened `back/slash/lake.duckdb`, so a lake committed there could never be read
            raise LakeError(
                f"the lake path {absolute} holds a backslash, which DuckDB reads as a path "
                "separator; name the lake dir (and its parents) without one"
            )

    def owns(self, path: Path | str) -> bool:
        """Whether `path` is, or would be, one of the files the lake manages: its manifest,
        catalog, segments, lake.duckdb and the hidden files beside them (a file of yours in the
        lake dir, such as the demo's report.html, is not)."""
        relative = os.path.relpath(os.path.realpath(path), os.path.realpath(self.root))
        if relative == ".":
            return True
        first = relative.split(os.sep, 1)[0]
        if first == "..":
            return False
        return first in ("tables", "catalog", MANIFEST, DUCKDB_FILE) or first.startswith(".")

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST

    def exists(self) -> bool:
        return self.manifest_path.is_file()

    def committed_since(self, base: Manifest) -> int | None:
        """The generation on disk when a commit moved the lake past `base` (a command stopped
        after its commit, whose own record of it may not have been made yet), else None."""
        try:
            generation = self.read_manifest().generation
        except LakeError:
            return None
        return generation if generation != base.generation else None

    def read_manifest(self) -> Manifest:
        if not self.exists():
            return Manifest()
        # what to do when the manifest is damaged: the run trees are the source of the lake
        rebuild = "ingest the runs again into a new lake directory"
        try:
            raw = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except OSError as error:
            raise LakeError(f"cannot read {self.manifest_path}: {error}") from error
        except ValueError as error:
            raise LakeError(
                f"cannot read {self.manifest_path}: {error}; it is not the JSON a wmo-lake "
                f"commit writes (cut off or edited): {rebuild}"
            ) from error
        if not isinstance(raw, dict):
            raise LakeError(
                f"{self.manifest_path} is not a wmo-lake manifest: a JSON object was expected, "
                f"got {type(raw).__name__}; {rebuild}"
            )
        if raw.get("format") != FORMAT:  # another tool's dir: never advise deleting it
            raise LakeError(
                f"{self.root} is not a wmo-lake lake: its {MANIFEST} says format "
                f"{raw.get('format')!r}, not {FORMAT!r}; give --lake a directory of its own "
                "(a new one is made by `wmo-lake ingest`)"
            )
        version = raw.get("format_version")
        if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            written_by = raw.get("wmo_lake_version")
            raise LakeError(
                f"{self.root} is a wmo-lake lake of format version {version}, newer than this "
                f"wmo-lake reads ({FORMAT_VERSION}): it was written by wmo-lake "
                f"{written_by if isinstance(written_by, str) else 'of a later release'}. "
                "Upgrade wmo-lake to read it (pip install -U wmo-lake); keep the lake as it is"
            )
        if version != FORMAT_VERSION:
            raise LakeError(
                f"{self.root} is not a wmo-lake lake of format version {FORMAT_VERSION} "
                f"(manifest says {raw.get('format')!r} {raw.get('format_version')!r}); "
                "ingest into a new lake directory (or delete this one and ingest its runs "
                "again: format 3 partitions every table by run and step)"
            )
        for key, kind in (("generation", int), ("tables", dict)):
            if not isinstance(raw.get(key), kind):
                raise LakeError(
                    f"{self.manifest_path}: field {key!r} must be {kind.__name__}, got "
                    f"{raw.get(key)!r}; the manifest was edited or damaged: {rebuild}"
                )
        return Manifest(
            generation=raw["generation"],
            tables=raw["tables"],
            catalog=raw.get("catalog") or {},
            previous=raw.get("previous", []),
            updated_at=raw.get("updated_at"),
            schemas=raw.get("schemas") or {},
            extractions=raw.get("extractions") or {},
            sink_roots=_sink_roots(raw.get("sink_roots"), self.manifest_path),
        )

    def missing_segments(
        self, manifest: Manifest, partitions: Collection[str] | None = None
    ) -> list[str]:
        """The live segments the manifest names (of `partitions`, else all) that are not on
        disk whole (deleted or moved by hand, or cut short by an interrupted copy): asked once a
        read has failed, and by an ingest for the partitions it walks, so a query over a
        working lake pays no open per file."""
        root = str(self.root)
        live = _live_segments(manifest, partitions)
        return [rel for rel in live if not _ends_as_parquet(f"{root}/{rel}")]

    def damaged_error(
        self,
        manifest: Manifest,
        partitions: Collection[str] | None = None,
        error: BaseException | None = None,
        reader: SegmentReader | None = None,
    ) -> LakeError | None:
        """A LakeError naming the manifest's missing segments (of `partitions`, else all), when
        there are any: the lake lost their rows, and an ingest would count their trials
        unchanged (it reads no segment). With the `error` a read of the lake failed with, also
        the segments whole in size that cannot be read (`unreadable_segments`)."""
        missing = self.missing_segments(manifest, partitions)
        unreadable = (
            self.unreadable_segments(manifest, error, partitions, reader)
            if not missing and error is not None
            else []
        )
        if not missing and not unreadable:
            return None
        gone = [rel for rel in missing if not os.path.lexists(self.root / rel)]
        cut = [rel for rel in missing if rel not in gone]
        said = [
            f"is missing {len(gone)} of its Parquet files ({gone[0]}{', ...' * (len(gone) > 1)})"
            if gone
            else "",
            f"holds {len(cut)} of its Parquet files cut short or unreadable "
            f"({cut[0]}{', ...' * (len(cut) > 1)})"
            if cut
            else "",
            f"holds {len(unreadable)} of its Parquet files that cannot be read "
            f"({unreadable[0][0]}: {unreadable[0][1]}{'; ...' * (len(unreadable) > 1)})"
            if unreadable
            else "",
        ]
        how = (
            "changed in place outside wmo-lake (a stray write or a disk error, say)"
            if unreadable
            else "deleted, moved or cut short outside wmo-lake (an interrupted copy, say)"
        )
        return LakeError(
            f"the lake at {self.root} {' and '.join(filter(None, said))}: they were {how}, and "
            "their rows with them; put them back whole, or ingest the runs again into a new "
            "lake directory"
        )

    def unreadable_segments(
        self,
        manifest: Manifest,
        error: BaseException,
        partitions: Collection[str] | None = None,
        reader: SegmentReader | None = None,
    ) -> list[tuple[str, str]]:
        """(segment, the reader's words) for each live segment (of `partitions`) that ends as
        Parquet does, so `missing_segments` passes it, but that cannot be read: its bytes changed
        in place (a stray write, a disk error). Asked once a read of the lake failed with
        `error`: the segments it names are read again by DuckDB; when it names none, every one of
        `partitions`, or of the lake when `error` is a decoding failure (`decoding_failure`): a
        read of the lake once. `reader`: the one that failed, when not DuckDB (a commit's rewrite
        reads with pyarrow): what DuckDB reads is read again by it, its words when it fails."""
        root = str(self.root)
        live = _live_segments(manifest, partitions)
        # (an export's error wraps the query's: raised `from None`, it is still the context)
        chain = [error]
        while (inner := chain[-1].__cause__ or chain[-1].__context__) and len(chain) < 8:
            chain.append(inner)
        text = "\n".join(map(str, chain))
        if CORRUPT_DUCKDB in text:
            return []  # (lake.duckdb's own damage: `cache_damage`)
        suspects = [rel for rel in live if rel in text]
        if not suspects and (partitions is not None or any(map(decoding_failure, chain))):
            suspects = live  # (a few partitions' files, as a rewrite of them read: any error)
        if not suspects:
            return []
        import duckdb

        tables: dict[str, list[str]] = {}  # (a table's files share its schema: read together)
        for rel in suspects:
            tables.setdefault(rel.split("/")[1], []).append(f"{root}/{rel}")
        with duckdb.connect() as con:
            unreadable = [
                (path.removeprefix(f"{root}/"), words)
                for paths in tables.values()
                for path, words in _not_read_by_duckdb(con, paths)
            ]
        if not unreadable and reader is not None:
            # (the reader that failed, when not DuckDB: pyarrow refuses some bytes DuckDB reads
            # or skips, a footer's ARROW:schema, a page header)
            unreadable = [(rel, words) for rel in suspects if (words := reader(f"{root}/{rel}"))]
        return unreadable

    def damage(self, error: BaseException | None = None) -> LakeError | None:
        """`damaged_error` of the whole lake, asked once a read of it has failed (None also when
        the manifest cannot be read: the read's own error says that); else, when that read's
        `error` is DuckDB's checksum failure, `cache_damage`'s."""
        try:
            damaged = self.damaged_error(self.read_manifest(), error=error)
        except LakeError:
            return None
        return damaged or self.cache_damage(error)

    def cache_damage(self, error: BaseException | None) -> LakeError | None:
        """A LakeError saying what to do when `error` is DuckDB's checksum failure: lake.duckdb
        (or the copy a query built from it) was changed in place since its build, which its
        stamp's size does not see. It is a cache of the Parquet files: deleting it loses
        nothing, and the next query or ingest builds the views from the files."""
        if error is None or CORRUPT_DUCKDB not in str(error):
            return None
        built = self.root / DUCKDB_FILE
        return LakeError(
            f"{built} is damaged (DuckDB: {first_line(error)}); it only "
            "caches the lake's Parquet files: delete it "
            f"(`rm {shlex.quote(str(built))}`) and run the command again (queries then read the "
            f"Parquet files, and the next `wmo-lake ingest` writes {DUCKDB_FILE} anew)"
        )

    @contextlib.contextmanager
    def naming_damage(
        self,
        manifest: Manifest,
        errors: type[BaseException] | tuple[type[BaseException], ...],
        partitions: Collection[str] | None = None,
        reader: SegmentReader | None = None,
    ) -> Iterator[None]:
        """Around a read of the lake's segments: one of `errors` is `damaged_error`'s LakeError
        when segments are gone or cut short (DuckDB's or pyarrow's own words name no remedy),
        else raised as it is."""
        try:
            yield
        except errors as error:
            damaged = self.damaged_error(manifest, partitions, error, reader)
            damaged = damaged or self.cache_damage(error)
            if damaged is not None:
                raise damaged from error
            raise

    @contextlib.contextmanager
    def saying_damage(
        self, errors: type[BaseException] | tuple[type[BaseException], ...]
    ) -> Iterator[None]:
        """`naming_damage` for a caller without the manifest at hand (read on a failure only)."""
        try:
            yield
        except errors as error:
            damaged = self.damage(error)
            if damaged is not None:
                raise damaged from error
            raise

    def duckdb_stamp(self, manifest: Manifest, views: str) -> str:
        """What lake.duckdb was built for: the generation, and `views` (a digest of its views)."""
        return f"{manifest.generation}:{manifest.updated_at}:{views}"

    def duckdb_file_current(self, views: str, manifest: Manifest | None = None) -> bool:
        """Whether LAKE/lake.duckdb was built for the current generation and these views (its
        sidecar says). `manifest`: the current one when the caller has read it (a lake of many
        steps has a large one), else it is read here."""
        try:
            stamp, _, size = (self.root / DUCKDB_STAMP).read_text(encoding="utf-8").partition("\n")
            built = self.root / DUCKDB_FILE
            whole = str(built.stat().st_size) == size and _is_duckdb_file(built)
        except OSError:
            return False
        if manifest is None:
            manifest = self.read_manifest()
        return whole and stamp == self.duckdb_stamp(manifest, views)

    def write_duckdb_stamp(self, stamp: str) -> None:
        """Record that LAKE/lake.duckdb, just built, holds `stamp`, with its size: a file cut
        short or overwritten since (its header whole or not) is not current, and the next ingest
        builds it again, without opening it (an unchanged re-ingest imports no duckdb)."""
        size = (self.root / DUCKDB_FILE).stat().st_size
        atomic_write_bytes(self.root / DUCKDB_STAMP, f"{stamp}\n{size}".encode())

    def files(self, manifest: Manifest, table: str) -> list[Path]:
        return [self.root / rel for rel in manifest.table_files(table)]

    def read_catalog(
        self, manifest: Manifest, partitions: Iterable[str] | None = None
    ) -> dict[str, CatalogEntry]:
        """The catalog entries of `partitions` (all when None), by source."""
        from wmo_lake.catalog import decode_catalog

        catalog: dict[str, CatalogEntry] = {}
        wanted = manifest.catalog if partitions is None else set(partitions)
        for partition, data in self._catalog_files(manifest, wanted):
            entries = self._decoded(decode_catalog, data, manifest.catalog[partition])
            catalog.update((entry.source, entry) for entry in entries)
        return catalog

    def read_catalog_keys(
        self, manifest: Manifest, partitions: Iterable[str]
    ) -> Iterator[tuple[str, list[CatalogKeys]]]:
        """(partition, the source and unit key of each of its entries) of `partitions`."""
        from wmo_lake.catalog import decode_catalog_keys

        for partition, data in self._catalog_files(manifest, partitions):
            yield partition, self._decoded(decode_catalog_keys, data, manifest.catalog[partition])

    def _decoded(self, decode: Callable[[bytes], list[T]], data: bytes, rel: str) -> list[T]:
        """A catalog file's entries; one cut short or edited outside wmo-lake (an interrupted
        copy of the lake) is a LakeError naming it, as a segment cut short is."""
        import msgspec

        try:
            return decode(data)
        except msgspec.DecodeError as error:  # (a ValidationError too)
            raise LakeError(
                f"the lake at {self.root} holds its catalog file {rel} cut short or unreadable "
                f"({error}): it was cut or edited outside wmo-lake (an interrupted copy, say); "
                "put it back whole, or ingest the runs again into a new lake directory"
            ) from error

    def _catalog_files(
        self, manifest: Manifest, partitions: Iterable[str]
    ) -> Iterator[tuple[str, bytes]]:
        """(partition, its catalog file's bytes) of those of `partitions` that have one, read
        by path strings (a lake of 1,000 steps has 1,000 files to read)."""
        from wmo_lake.jsonfile import read_file

        root = str(self.root)
        for partition in partitions:
            rel = manifest.catalog.get(partition)
            if rel is None:
                continue
            try:
                data = read_file(f"{root}/{rel}")
            except FileNotFoundError as error:
                raise LakeError(
                    f"the lake at {self.root} is missing its catalog file {rel}: it was deleted "
                    "or moved outside wmo-lake (an interrupted copy, say); put it back, or ingest "
                    "the runs again into a new lake directory"
                ) from error
            except OSError as error:  # (not "cannot write the lake": this is a read)
                raise LakeError(
                    f"cannot read the lake's catalog file {self.root / rel}: "
                    f"{error.strerror or error}; make it a readable file again (as wmo-lake "
                    "wrote it), or ingest the runs again into a new lake directory"
                ) from error
            yield partition, data

    def write_catalog(self, rel: str, catalog: Iterable[CatalogEntry], sync: bool = True) -> None:
        """One partition's catalog file, under a fresh name (so no rename), synced unless
        `sync` is False (then the caller syncs it with `sync_files`, before the manifest)."""
        from wmo_lake.catalog import encode_catalog

        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as stream:
            stream.write(encode_catalog(catalog))
        if sync:
            self.sync_files([rel])

    def sync_files(self, rels: Iterable[str]) -> None:
        """fsync these files (relative to the lake) and their dirs. Many files written first
        and synced together cost about one journal commit, where writing and syncing each in
        turn costs one per file (~2 ms each: 0.6 s for a 128-step ingest); and synced from a
        few threads, the device's waits overlap (a 128-step ingest's catalog: 256 fsyncs,
        38-88 ms one after another, 18-26 ms from 8 threads)."""
        files = [self.root / rel for rel in rels]
        paths = files + list(dict.fromkeys(path.parent for path in files))
        if len(paths) <= SERIAL_SYNCS:
            for path in paths:
                fsync_path(path)
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="wmo-lake-sync") as pool:
            for _ in pool.map(fsync_path, paths):  # (each result, so an error is raised)
                pass

    def collect_garbage(
        self,
        manifest: Manifest,
        partitions: Iterable[str] | None = None,
        dropped: Iterable[str] = (),
        *,
        temporaries: bool = True,
    ) -> None:
        """Remove files neither this generation nor the previous one names (readers of the
        previous generation may still be scanning): `dropped` (the files the previous
        generation no longer needed), then whatever else lies in `partitions` (every partition
        when None: after an interrupted ingest, whose files may be anywhere), then, when
        `temporaries`, the lake's temporary files (`remove_temporaries`)."""
        keep = set(manifest.live_files()) | set(manifest.previous)
        for rel in dropped:
            if rel not in keep:
                with contextlib.suppress(OSError):
                    (self.root / rel).unlink()
        # (folder, its path in the lake) by path strings: pathlib's rglob and relative_to cost
        # ~0.1 s over a step per partition, relative_to alone ~0.1 ms a folder
        if partitions is None:
            folders = ["tables", "catalog"]
        else:
            tables = [p.name for p in (self.root / "tables").glob("*") if p.is_dir()]
            folders = [
                folder
                for partition in partitions
                for folder in [
                    *(f"tables/{table}/{partition}" for table in tables),
                    f"catalog/{partition}",
                ]
            ]
        root = str(self.root)
        for rel_top in folders:
            top = f"{root}/{rel_top}"
            for directory, _, names in os.walk(top):
                rel_dir = rel_top + directory[len(top) :]
                for name in names:
                    path = f"{directory}/{name}"
                    if f"{rel_dir}/{name}" not in keep and os.path.isfile(path):
                        with contextlib.suppress(OSError):
                            os.unlink(path)
        if temporaries:
            self.remove_temporaries()

    def remove_temporaries(self) -> None:
        """Remove the temporary files (`.<name>.<token>.tmp`) a killed writer left in the lake's
        root. Only while nothing of this process is writing one (an atomic write's file)."""
        for tmp in self.root.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()

    def clear_staging(self) -> None:
        """Remove what an ingest left in LAKE/.staging (only the lock's holder uses it)."""
        staging = self.root / STAGING
        if staging.exists():  # (shutil only then: an unchanged re-ingest is mostly start-up)
            import shutil

            shutil.rmtree(staging, ignore_errors=True)

    @contextlib.contextmanager
    def read_lock(self, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
        """For a dry run, which writes nothing: the lock held shared, so a writer's commit is
        not read half-done, and nothing created. A lake this process may not write (a read-only
        mount, a lake with no .lock) is read without it, as a query reads it."""
        with contextlib.ExitStack() as held:
            try:
                stream = held.enter_context(open(self.root / ".lock"))
            except OSError:
                stream = None
            if stream is not None:
                self._take(stream, fcntl.LOCK_SH, on_wait)
                held.callback(fcntl.flock, stream, fcntl.LOCK_UN)
            yield

    def _take(self, stream: IO[str], mode: int, on_wait: Callable[[str], None] | None) -> None:
        """flock `stream` in `mode`, telling `on_wait` who holds the lock while we wait."""
        try:
            fcntl.flock(stream, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            stream.seek(0)
            holder = stream.read().strip() or "another process"
            if on_wait:
                lock = self.root / ".lock"
                on_wait(f"waiting for {holder} to finish writing {self.root} (lock: {lock}) ...")
            fcntl.flock(stream, mode)

    @contextlib.contextmanager
    def lock(
        self, on_wait: Callable[[str], None] | None = None, command: str = "ingest"
    ) -> Iterator[None]:
        """Hold the lake's write lock; `on_wait` is told who holds it while we wait (`command`:
        what this process is, as the next writer waiting is told)."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / ".lock"
        with open(path, "a+") as stream:
            self._take(stream, fcntl.LOCK_EX, on_wait)
            stream.seek(0)
            # A holder that did not finish cleanly (killed, or an error) left its pid here: its
            # files may lie in any partition, so the next commit sweeps them all.
            self.interrupted = bool(stream.read().strip())
            stream.seek(0)
            stream.truncate()
            stream.write(f"wmo-lake {command} pid {os.getpid()}")
            stream.flush()
            try:
                yield
                stream.seek(0)
                stream.truncate()
            finally:
                fcntl.flock(stream, fcntl.LOCK_UN)


def _sink_roots(raw: Any, path: Path) -> list[tuple[str, str]]:
    """The manifest's remembered `--sink-root` remaps; a LakeError when they are not pairs of
    non-empty strings (an edited manifest)."""
    if raw is None:
        return []  # (a lake written before the remaps were remembered)
    if isinstance(raw, list) and all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) and x for x in pair)
        for pair in raw
    ):
        return [(old, new) for old, new in raw]
    raise LakeError(
        f"{path}: field 'sink_roots' must be a list of [OLD, NEW] path pairs, got {raw!r}; the "
        "manifest was edited or damaged: restore it, or write [] there and give `wmo-lake "
        "ingest` its --sink-root options again"
    )


def _is_duckdb_file(path: Path) -> bool:
    """Whether `path` starts as a DuckDB database file does (its magic bytes after the header's
    checksum): a lake.duckdb overwritten by hand to its old size is not read as current."""
    with open(path, "rb") as file:
        return file.read(12)[8:12] == b"DUCK"
