"""The datums export now lives in `wmo_lake.exports.datums` (a kind of `wmo_lake.exports`); this
name stays so `from wmo_lake.datums import load_verified, to_tinker` keeps working."""

from wmo_lake.exports.datums import *  # noqa: F403
from wmo_lake.exports.datums import __all__ as __all__
