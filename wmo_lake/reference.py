"""The README's reference (its Tables and Views sections) as data: what each table and view
holds, one row per what, and what each column means. `wmo-lake tables` and `wmo-lake schema`
print it beside what the lake actually has, so the two cannot drift apart silently (the README is
held complete by tests/test_readme.py).

The README comes from the checkout when there is one, else from the installed package's metadata
(it is the package's long description).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path


@dataclass
class Entry:
    """One table or view as the README describes it."""

    name: str
    kind: str  # "table" or "view"
    grain: str  # "one row per ..."
    columns: dict[str, str] = field(default_factory=dict)  # column -> meaning ('' when none)


def readme_text() -> str:
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "sql" / "trial_records.sql").is_file() and (checkout / "README.md").is_file():
        return (checkout / "README.md").read_text(encoding="utf-8")
    # installed: the README is the package's long description (a README.md in the dir that holds
    # the installed package, site-packages or an app's root, is another project's)
    from importlib import metadata

    try:
        return metadata.metadata("wmo-lake").get_payload() or ""  # type: ignore[attr-defined]
    except metadata.PackageNotFoundError:
        return ""


def _section(text: str, title: str) -> str:
    start = text.find(f"\n{title}\n")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _names(cell: str) -> list[str]:
    return re.findall(r"`([a-z_]+)`", cell) or [cell.strip("` ")]


def split_columns(text: str) -> list[tuple[str, str]]:
    """`a, b (what b is, with, commas), c` -> [(a, ''), (b, 'what b is, ...'), (c, '')]."""
    items, depth, current = [], 0, ""
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    items.append(current)
    result = []
    for item in items:
        match = re.match(r"\s*`?([a-z_][a-z0-9_]*)`?\s*(?:\((.*)\))?\s*$", item, re.S)
        if match:
            result.append((match.group(1), (match.group(2) or "").strip()))
    return result


@cache
def reference() -> dict[str, Entry]:
    """name -> Entry for every table and view the README's reference describes."""
    text = readme_text()
    entries: dict[str, Entry] = {}
    tables = _section(text, "## Tables")
    for block in re.split(r"\n### ", tables)[1:]:
        heading, _, body = block.partition("\n")
        names = _names(heading.split(":", 1)[0])
        grain = heading.split(":", 1)[1].strip() if ":" in heading else ""
        rows = [_cells(line) for line in body.splitlines() if line.startswith("|")]
        if not rows:
            continue
        header, body_rows = rows[0], [r for r in rows[2:] if len(r) >= 2]
        if header[:1] == ["column"] and "meaning" in header:
            meaning = header.index("meaning")
            for name in names:
                entry = entries.setdefault(name, Entry(name, "table", grain))
                for cells in body_rows:
                    for column in cells[0].replace("`", "").split(","):
                        entry.columns[column.strip()] = (
                            cells[meaning] if meaning < len(cells) else ""
                        )
        elif header[:1] == ["table"]:
            for cells in body_rows:
                (name,) = _names(cells[0])[:1]
                entry = Entry(name, "table", f"one row per {cells[1]}")
                entry.columns = dict(split_columns(cells[2]))
                entries[name] = entry
    views = _section(text, "## Views").split("\n### ", 1)[0]  # the view table, not the rules
    rows = [_cells(line) for line in views.splitlines() if line.startswith("| `")]
    for cells in rows:
        if len(cells) < 3:
            continue
        names = _names(cells[0])
        grains = [g.strip() for g in cells[1].split(" / ")]
        columns = dict(split_columns(cells[2]))
        for i, name in enumerate(names):
            grain = grains[i] if len(grains) == len(names) else cells[1]
            entries[name] = Entry(name, "view", f"one row per {grain}", dict(columns))
    return entries


# Columns that mean the same in every table and view that has them (identities and values
# passed through as read), so a view's meaning may come from a table's. Any other name may be
# the view's own computation (`n_spans` of a merged sequence, the `settings` override of
# `max_turns`): a table's meaning would be wrong there, and none is shown instead.
SHARED_COLUMNS = frozenset(
    {
        "trial_key", "batch", "run", "step", "trial_name", "job_key", "task_name",
        "artifact_dir", "exception_type", "agent_config", "collection_path", "trace_source",
        "model_name", "call_index", "prompt_len", "n_sampled", "sampled_token_ids",
        "prompt_prefix_len", "trajectory_status", "declared_complete",
    }
)  # fmt: skip


# Views whose columns are, but for their own, the columns of the views they select them from
# as they are (sql/trial_records.sql: `cells` and `trial_stop_reasons`): their meaning too.
PASSED_THROUGH = {
    "trial_records": ("cells", "trial_stop_reasons"),
    "trial_records_with_spans": ("trial_records", "cells", "trial_stop_reasons"),
    "datums": ("cells",),
}


def column_meaning(name: str, column: str) -> str:
    """What `column` of table or view `name` means: its own entry first, then the views it
    passes the column through from (`PASSED_THROUGH`), else, for a column every table shares
    the meaning of (`SHARED_COLUMNS`), what it means in a table."""
    entries = reference()
    for source in (name, *PASSED_THROUGH.get(name, ())):
        entry = entries.get(source)
        if entry is not None and entry.columns.get(column):
            return entry.columns[column]
    if column not in SHARED_COLUMNS:
        return ""
    for entry in entries.values():
        if entry.kind == "table" and entry.columns.get(column):
            return entry.columns[column]
    return ""
