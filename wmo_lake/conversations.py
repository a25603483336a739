"""The conversations export now lives in `wmo_lake.exports.conversations` (a kind of
`wmo_lake.exports`); this name stays so `from wmo_lake.conversations import load_verified` keeps
working."""

from wmo_lake.exports.conversations import *  # noqa: F403
from wmo_lake.exports.conversations import __all__ as __all__
