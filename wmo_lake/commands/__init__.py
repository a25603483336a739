"""The `wmo-lake` subcommands, one module each; wmo_lake/cli.py assembles them."""
