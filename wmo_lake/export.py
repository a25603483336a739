"""The shared export discipline now lives in `wmo_lake.exports.discipline`; this name stays so
`from wmo_lake.export import ExportError` keeps working."""

from wmo_lake.exports.discipline import *  # noqa: F403
