"""The `wmo-lake` command: a thin click layer over the library.

Each subcommand lives in wmo_lake/commands/ (its docstring is its --help); the options they share
are in wmo_lake/commands/options.py.
"""

from __future__ import annotations

import click

from wmo_lake import __version__
from wmo_lake.commands.export import export
from wmo_lake.commands.ingest import ingest
from wmo_lake.commands.sql import sql
from wmo_lake.commands.stats import stats


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wmo-lake")
def cli() -> None:
    """Harbor agent-training rollouts as a columnar lake, and every batch-health metric as SQL.

    \b
    wmo-lake ingest runs/                 read run trees into ./lake (Parquet)
    wmo-lake sql "SELECT ... FROM trials"  ask anything, across every batch
    wmo-lake stats                         per-batch RolloutStats
    wmo-lake export datums --out F.parquet  training datums for a trainer (Tinker)
    wmo-lake export conversations --out F   SFT conversations from ATIF trajectories

    The lake is also a DuckDB database: `duckdb lake/lake.duckdb`.
    """


for command in (ingest, sql, stats, export):
    cli.add_command(command)


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
