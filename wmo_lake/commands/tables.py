"""`wmo-lake tables` and `wmo-lake schema NAME`: what the lake holds, and what each column means."""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Any

import click
import duckdb

from wmo_lake.commands.options import fail, fail_if_damaged, lake_failure, lake_hint, lake_option
from wmo_lake.store import LakeError
from wmo_lake.terminal import render_table, terminal_width


def _names(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    """(name, 'table' | 'view') for every table and view of the lake, tables first."""
    from wmo_lake.lake import view_sources
    from wmo_lake.tables import TABLES

    return [(name, "table") for name in TABLES] + [(name, "view") for name, _ in view_sources()]


def _count(con: duckdb.DuckDBPyConnection, name: str) -> int:
    (count,) = con.execute(f'SELECT count(*) FROM "{name}"').fetchone() or (0,)
    return int(count)


@click.command()
@lake_option
@click.option(
    "--counts/--no-counts",
    default=True,
    show_default=True,
    help="Count each table's and view's rows (views that rebuild prompts or datums take longest).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array of objects.")
@click.pass_context
def tables(ctx: click.Context, lake: Path, counts: bool, as_json: bool) -> None:
    """List every table and view of the lake: kind, row count, and what one row is.

    Tables hold what was ingested; views are SQL over them (`sql/*.sql`), computed at query time
    under the query-time settings. `wmo-lake schema NAME` shows one's columns.

    \b
    Examples:
      wmo-lake tables
      wmo-lake tables --no-counts --json
    """
    from wmo_lake.lake import connect
    from wmo_lake.reference import reference

    try:
        con = connect(lake, check=False)
    except LakeError as error:
        lake_failure(ctx, lake, error)
    described = reference()
    rows: list[dict[str, Any]] = []
    try:
        for name, kind in _names(con):
            entry = described.get(name)
            rows.append(
                {
                    "name": name,
                    "kind": kind,
                    "rows": _count(con, name) if counts else None,
                    "one_row_per": (entry.grain.removeprefix("one row per ") if entry else ""),
                }
            )
    except duckdb.Error as error:
        # (a segment deleted or cut short by hand, lake.duckdb changed: named, with what to do)
        fail_if_damaged(lake, error)
        fail(f"counting rows failed: {error}")
    finally:
        con.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    headers = ["name", "kind", "rows", "one row per"] if counts else ["name", "kind", "one row per"]
    body = [
        [row["name"], row["kind"]] + ([str(row["rows"])] if counts else []) + [row["one_row_per"]]
        for row in rows
    ]
    right = [False, False, True, False] if counts else [False, False, False]
    render_table(
        headers,
        body,
        right_aligned=right,
        file=sys.stdout,
        width=terminal_width(sys.stdout),
        narrower="use --json",
    )


@click.command()
@click.argument("name")
@lake_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON array of objects.")
@click.pass_context
def schema(ctx: click.Context, name: str, lake: Path, as_json: bool) -> None:
    """Show the columns of table or view NAME: name, DuckDB type, and meaning (from the README's
    reference, the same text as `wmo-lake tables`).

    \b
    Examples:
      wmo-lake schema trials
      wmo-lake schema rollout_stats --json
    """
    from wmo_lake.lake import connect
    from wmo_lake.reference import column_meaning, reference

    try:
        con = connect(lake, check=False)
    except LakeError as error:
        lake_failure(ctx, lake, error)
    try:
        known = [known_name for known_name, _ in _names(con)]
        # as DuckDB resolves a name (`DESCRIBE TRIALS` is trials): case aside
        name = next((k for k in known if k.lower() == name.lower()), name)
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            listing = f"`wmo-lake tables{lake_hint(ctx, lake)}`"
            fail(f"no table or view named {name!r}{hint}; {listing} lists them", 2)
        described = con.sql(f'DESCRIBE "{name}"').fetchall()
    except duckdb.Error as error:
        fail_if_damaged(lake, error)  # (its files' schema is read: a footer overwritten in place)
        fail(f"cannot describe {name}: {error}")
    finally:
        con.close()
    entry = reference().get(name)
    rows = [
        {"column": column, "type": kind, "meaning": column_meaning(name, column)}
        for column, kind, *_ in described
    ]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if entry is not None:
        click.echo(f"{name} ({entry.kind}): {entry.grain}")
    render_table(
        ["column", "type", "meaning"],
        [[row["column"], row["type"], row["meaning"]] for row in rows],
        file=sys.stdout,
        width=terminal_width(sys.stdout),
        narrower="use --json",
    )
