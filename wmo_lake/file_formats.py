"""Which format a file is written in, from its name: the one rule `sql --output`, the exports'
`--out` and the Python API's exports share, so a file's name never lies about its content."""

from __future__ import annotations

from pathlib import Path


class FormatError(ValueError):
    """A file name whose extension names a format the writer does not write, or another one than
    the format asked for."""


# What a file name's extension says its format is: any other extension names a format nothing
# here writes (.xlsx, .tsv, .gz, .html, ...), so a file under that name would lie about its content.
EXTENSION_FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".txt": "table",
}


def format_for(
    path: Path, fmt: str | None, allowed: tuple[str, ...], *, option: str, writer: str
) -> str:
    """The format to write `path` in: `fmt` (--format) if given, else the one its extension
    names, else (no extension) allowed[0]. An extension naming another format than `fmt`, or
    none that `writer` writes, is a FormatError, so a file's name never lies about its content."""
    chosen = _format_for(path, fmt, allowed, option=option, writer=writer)
    if chosen != "table":  # (the table is written by Python, which takes any name)
        try:
            str(path).encode("utf-8")
        except UnicodeEncodeError:  # bytes of another encoding, kept by Python as surrogates
            raise FormatError(
                f"{option} {str(path)!r} is not a UTF-8 file name, which DuckDB and the "
                "export manifests cannot take: name the file in UTF-8"
            ) from None
    return chosen


def _format_for(
    path: Path, fmt: str | None, allowed: tuple[str, ...], *, option: str, writer: str
) -> str:
    if fmt is not None and fmt not in allowed:  # (the CLI's choices stop it; the API's fmt=)
        raise FormatError(f"--format {fmt!r} is not one of {', '.join(allowed)}")
    suffix = path.suffix.lower()
    named = EXTENSION_FORMATS.get(suffix)
    if suffix and named not in allowed:
        taken = ", ".join(ext for ext, name in EXTENSION_FORMATS.items() if name in allowed)
        raise FormatError(
            f"{option} {path} names a {suffix} file, which {writer} does not write: name "
            f"it {_renamed(path, fmt, allowed)} (the extensions it takes: {taken}, or none for "
            f"{allowed[0]})"
        )
    if fmt is None:
        return named or allowed[0]
    if named is not None and named != fmt:
        raise FormatError(
            f"{option} {path} has the extension {suffix} but --format {fmt} was given: "
            f"name it {path.with_suffix('.' + _extension(fmt))} (without --format, what the "
            "extension says is written)"
        )
    return fmt


def _renamed(path: Path, fmt: str | None, allowed: tuple[str, ...]) -> Path:
    """`path` (in its own directory) with an extension for `fmt` (or any allowed format when
    None): out/r.csv.gz -> out/r.csv, r.xlsx -> r.txt."""
    inner = EXTENSION_FORMATS.get(Path(path.stem).suffix.lower())
    if inner in allowed and fmt in (None, inner):
        return path.with_suffix("")
    return path.with_suffix(f".{_extension(fmt or allowed[0])}")


def _extension(fmt: str) -> str:
    return "txt" if fmt == "table" else fmt


def refuse_lake_file(path: Path, lake: Path, *, option: str) -> None:
    """A FormatError when `path` is one of the lake's own files (`Store.owns`): written there,
    a query's result replaced the manifest or a segment, and the lake was lost or short of
    rows without a word."""
    from wmo_lake.store import LakeError, Store

    try:
        owned = Store(lake).owns(path)
    except LakeError:
        return  # (a lake path it refuses is said by the command itself)
    if owned:
        raise FormatError(
            f"{option} {path} is one of the lake's own files (the lake at {lake}): writing it "
            "would damage the lake; write the output elsewhere"
        )
