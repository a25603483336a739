"""Typed reads from decoded JSON: a value of the wrong type becomes a `problems` row, never a crash.

Harbor writes `null` liberally, so null reads as "not recorded" and is never a problem; a value of
another type than the schema expects (a string where a list belongs, a bool where a count belongs)
is recorded once, with the file, the field and what was expected.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from wmo_lake.columns import SPECS, arrow_schema
from wmo_lake.jsonfile import to_json_text

if TYPE_CHECKING:
    from pydantic import TypeAdapter

PROBLEMS_SCHEMA = arrow_schema(SPECS["problems"])

Text = str  # `str` is also a method name of Fields; annotations after it say Text
Integer = int  # and so is `int`


@dataclass
class ProblemLog:
    """The problems found while reading one unit (a trial or a job), in the `problems` schema."""

    unit_key: str
    batch: str | None
    trial_name: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)

    def add(self, kind: str, path: Path | str, message: str) -> None:
        self.rows.append(
            {
                "unit_key": self.unit_key,
                "batch": self.batch,
                "trial_name": self.trial_name,
                "path": str(path),
                "kind": kind,
                "message": message,
            }
        )

    def table(self) -> pa.Table:
        """The `problems` rows as an Arrow table."""
        return pa.Table.from_pylist(self.rows, schema=PROBLEMS_SCHEMA)


def parse_time(value: str | None) -> datetime | None:
    """An ATIF step's ISO-8601 timestamp as harbor's `Step` validates it (fromisoformat of the
    text with each `Z` read as `+00:00`: `2026-12-01Z` is a time), as UTC; a naive one is taken as
    UTC. Raises OverflowError for one whose UTC falls outside years 1-9999."""
    return None if value is None else _utc(_iso_time(value.replace("Z", "+00:00")))


# harbor's own spelling of a time, which pydantic and fromisoformat read alike (the fast path):
# fromisoformat alone also takes `...T01`, `+05`, `T012550Z`, `+05:30:15` and `+05:60`, which
# pydantic refuses
_HARBOR_TIME = re.compile(
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d{1,9})?"  # date, time, fraction
    r"(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)?"  # the zone: an offset of at most 23:59
)


def parse_model_instant(value: Any) -> datetime | None:
    """A datetime field of harbor's `TrialResult` as its model (pydantic) reads it, aware (a
    naive one taken as UTC) but in its own offset: a duration between two of them is harbor's
    even where one's UTC falls outside years 1-9999. None when the model refuses it. harbor's
    own spelling (`2026-11-29T19:20:34.716395Z`, an offset, a space) is read by fromisoformat,
    fast; any other goes through pydantic: a lowercase t or z, a unix time (a number or a numeric
    string), and the ISO basic form `20261129T192034Z`, which fromisoformat would take and
    pydantic refuses."""
    parsed = None
    if isinstance(value, str) and _HARBOR_TIME.fullmatch(value):
        parsed = _iso_time(value)
    if parsed is None and not isinstance(value, bool) and isinstance(value, str | int | float):
        read = harbor_lax(value, datetime)
        parsed = read if isinstance(read, datetime) else None
    if parsed is not None and parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed


def _iso_time(text: str) -> datetime | None:
    # (not contextlib.suppress: read ten times a trial, its context manager costs ~3 us a time)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def _utc(parsed: datetime | None) -> datetime | None:
    if parsed is None:
        return None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


# What a time is said to be when its UTC falls outside what a datetime (and so the column) holds.
OUT_OF_RANGE_TIME = "a time whose UTC falls within years 1 to 9999"


def json_type_name(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


class Fields:
    """Typed access into one decoded JSON document, reporting wrong types to a ProblemLog."""

    def __init__(self, doc: Any, path: Path, problems: ProblemLog) -> None:
        self.doc = doc
        self.path = path
        self.problems = problems
        self._reported: set[tuple[str, ...]] = set()

    def _wrong(
        self, keys: Sequence[str], value: Any, expected: str, shown: str | None = None
    ) -> None:
        if tuple(keys) in self._reported:  # one row per bad field, however often it is read
            return
        self._reported.add(tuple(keys))
        self.problems.add(
            "wrong_type",
            self.path,
            f"{self.path.name}: {'.'.join(keys)} is {shown or json_type_name(value)}, expected "
            f"{expected}; "
            "the column is left null",
        )

    def get(self, *keys: str) -> Any:
        """The value at `keys`, None when any level is missing or null."""
        value = self.doc
        for key in keys:  # (~45 reads a trial: plain dicts all the way down, checked cheaply)
            if type(value) is dict:
                value = value.get(key)
            elif value is None:
                return None
            else:
                return self._checked_get(keys)
        return value

    def _checked_get(self, keys: tuple[str, ...]) -> Any:
        """`get` for a path that meets something other than a plain dict: a level that is not
        an object is reported."""
        value = self.doc
        for depth, key in enumerate(keys):
            if value is None:
                return None
            if not isinstance(value, dict):
                self._wrong(keys[:depth], value, "an object")
                return None
            value = value.get(key)
        return value

    def int(self, *keys: str) -> int | None:
        value = self.get(*keys)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not fits_int64(value):
            self._wrong(keys, value, "an integer")
            return None
        return value

    def model_int(self, *keys: str) -> Integer | None:
        """An `int` field of a harbor pydantic model, read as that model reads it (`harbor_lax`:
        5.0 and "5" are 5, reported; 5.5 is wrong)."""
        value = self.get(*keys)
        if value is None or (type(value) is int and fits_int64(value)):
            return value
        read = harbor_lax(value, int)
        if not isinstance(read, int):
            self._wrong(keys, value, "an integer")
            return None
        if not fits_int64(read):
            self._wrong(keys, value, "an integer a 64-bit column holds")
            return None
        self._coerced(keys, value, read, "an integer")
        return read

    def model_number(self, *keys: str) -> float | None:
        """A `float` field of a harbor pydantic model, read as that model reads it ("0.01")."""
        value = self.get(*keys)
        read = model_float(value)
        if read is None and value is not None:
            self._wrong(keys, value, "a number")
        elif is_coerced(value):
            self._coerced(keys, value, read)
        return read

    def _coerced(
        self, keys: Sequence[str], value: Any, read: Any, expected: str = "a number"
    ) -> None:
        self.problems.add(
            "wrong_type",
            self.path,
            f"{self.path.name}: {'.'.join(keys)} is {json_type_name(value)}, "
            f"{to_json_text(value)}, expected {expected}; read as {read!r}, as harbor's model "
            "(pydantic, lax mode) reads it",
        )

    def number(self, *keys: str) -> float | None:
        value = self.get(*keys)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self._wrong(keys, value, "a number")
            return None
        if not fits_double(value):
            self._wrong(keys, value, "a number a double can hold")
            return None
        return float(value)

    def time(self, *keys: Text) -> datetime | None:
        """A `TrialResult` time as UTC, read as harbor's model reads it (`instant`); one it
        refuses is reported like a wrong type, and so is one whose UTC no column holds."""
        instant = self.instant(*keys)
        try:
            return _utc(instant)
        except OverflowError:  # (harbor reads it; `0001-01-01T00:00:00+01:00` is year 0 in UTC)
            self._wrong(keys, self.get(*keys), OUT_OF_RANGE_TIME, shown=repr(self.get(*keys)))
            return None

    def instant(self, *keys: Text) -> datetime | None:
        """A `TrialResult` time as harbor's model reads it (`parse_model_instant`), in its own
        offset: for a duration. One the model refuses is reported like a wrong type."""
        value = self.get(*keys)
        if value is None:
            return None
        parsed = parse_model_instant(value)
        if parsed is None:
            shown = repr(value) if isinstance(value, str) else None
            self._wrong(keys, value, "an ISO-8601 time", shown=shown)
        return parsed

    def str(self, *keys: str) -> str | None:
        value = self.get(*keys)
        if value is None:
            return None
        if not isinstance(value, str):
            self._wrong(keys, value, "a string")
            return None
        return value

    def obj(self, *keys: Text) -> dict[Text, Any] | None:
        value = self.get(*keys)
        if value is None:
            return None
        if not isinstance(value, dict):
            self._wrong(keys, value, "an object")
            return None
        return value

    def list(self, *keys: Text) -> list[Any] | None:
        value = self.get(*keys)
        if value is None:
            return None
        if not isinstance(value, list):
            self._wrong(keys, value, "an array")
            return None
        return value


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def harbor_lax(value: Any, kind: Any) -> Any | None:
    """`value` as a harbor model's field of type `kind` reads it: pydantic in lax mode, from the
    JSON (a numeric string or a bool becomes a number, 5.0 an int); None when it rejects it."""
    from pydantic import ValidationError  # (only for a value not already of its type)

    try:
        return _adapter(kind).validate_json(to_json_text(value))
    except ValidationError:
        return None


@cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    from pydantic import TypeAdapter

    return TypeAdapter(kind)


def model_float(value: Any) -> float | None:
    """`value` as a `float` field of a harbor model reads it (pydantic, lax): a JSON number as
    it is (NaN and infinities too; an integer past a double's range is infinite), a numeric
    string or a bool as pydantic makes it; None when pydantic refuses it."""
    if value is None:
        return None
    if type(value) is float:
        return value
    if type(value) is int and fits_double(value):
        return float(value)
    read = harbor_lax(value, float)
    return read if isinstance(read, float) else None


def is_coerced(value: Any) -> bool:
    """Whether a harbor model's number field holding `value` made it a number (a string, a
    bool): reported, as read."""
    return isinstance(value, str | bool)


def fits_int64(value: int) -> bool:
    """Whether a 64-bit integer column holds `value`."""
    return INT64_MIN <= value <= INT64_MAX


def is_real_number(value: Any) -> bool:
    """A JSON number that is not a bool and not NaN/inf, nor an integer past a double's range."""
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and (fits_double(value) if isinstance(value, int) else math.isfinite(value))
    )


def fits_double(value: int | float) -> bool:
    """Whether float(value) is finite for a JSON integer (a 400-digit one raises OverflowError;
    a float is always one)."""
    return not isinstance(value, int) or -_DOUBLE_MAX <= value <= _DOUBLE_MAX


_DOUBLE_MAX = 1.7976931348623157e308  # (sys.float_info.max)
