"""The catalog: one entry per ingested dir, kept per partition as a msgpack file.

Its own module so that opening a lake for queries (which never reads the catalog) does not
import msgspec; the ingest, the commit and `forget` read and write it."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from wmo_lake.store import DUPLICATE, NO_PARTITION, TRIAL


class CatalogEntry(msgspec.Struct, array_like=True, gc=False):
    """One ingested dir: the unit its rows belong to and what decides whether to read it again.
    (Never tracked by the cyclic collector: it holds no containers, and a lake of 1,000 steps
    has 100k of them.)"""

    source: str  # the dir's real path (job:PATH for a job, walk:PATH for a walk problem)
    unit_key: str | None  # the unit its rows belong to; None once another dir owns that trial
    kind: str  # TRIAL | UNREADABLE | OTHER | DUPLICATE | JOB | WALK
    job_key: str | None
    batch: str | None
    fingerprint: str
    n_problems: int = 0
    partition: str = NO_PARTITION  # where its rows are (partition_of its run and step)
    # The trial a TRIAL dir holds (a DUPLICATE's: the trial another dir holds), kept once another
    # dir took it over (unit_key None): when that dir's rows go, this dir must be read again.
    # None in catalogs written before it was recorded.
    trial_key: str | None = None
    # The extract version the dir was read under (Manifest.extractions sums a partition's up).
    # None in catalogs written before it was recorded (extract logic 12).
    extraction: str | None = None
    # The token_sink_dir (as its agent records it) a pi-bridge trial was read from when the walk
    # could not know it (only its result.json names its agent): its fingerprint resolves it
    # again and watches the sink there too (fingerprint.with_read_sink).
    read_sink: str | None = None
    # The agent/ files its continuation chain named that no rule watches by name: its
    # fingerprint watches them too (fingerprint.with_named).
    named: tuple[str, ...] = ()


def is_shadow(entry: CatalogEntry) -> bool:
    """A dir whose trial another dir holds: superseded (a later ingest read the trial from
    another dir) or a duplicate (another dir was read first in the same ingest). It has no
    trial rows of its own."""
    return entry.kind == DUPLICATE or (entry.kind == TRIAL and entry.unit_key is None)


def shadows_of(catalog: Iterable[CatalogEntry], lost: set[str]) -> list[CatalogEntry]:
    """The shadows (`is_shadow`) of the trials in `lost` (whose rows went): the dirs to read
    again. A shadow of an older catalog, whose trial is not recorded, counts as one of each."""
    if not lost:
        return []
    return [
        entry
        for entry in catalog
        if is_shadow(entry) and (entry.trial_key is None or entry.trial_key in lost)
    ]


class CatalogKeys(msgspec.Struct, array_like=True, gc=False):
    """The leading fields of a CatalogEntry: which dir, and the unit it holds. Decoded from an
    entry, the rest of it is skipped (half the time of a whole entry)."""

    source: str
    unit_key: str | None


_DECODER = msgspec.msgpack.Decoder(list[CatalogEntry])
_KEYS_DECODER = msgspec.msgpack.Decoder(list[CatalogKeys])


def decode_catalog(data: bytes) -> list[CatalogEntry]:
    return _DECODER.decode(data)


def decode_catalog_keys(data: bytes) -> list[CatalogKeys]:
    return _KEYS_DECODER.decode(data)


def encode_catalog(catalog: Iterable[CatalogEntry]) -> bytes:
    return msgspec.msgpack.encode(list(catalog))
