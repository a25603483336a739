"""wmo-lake: harbor agent-training rollouts as a columnar lake with SQL views.

The Python API (`import wmo_lake as wl`; see wmo_lake/api.py): wl.ingest, wl.connect, wl.query,
wl.stats, wl.trials, wl.records, wl.export_datums, wl.export_conversations, wl.load_datums,
wl.load_conversations. Loaded on first use, so `wmo-lake` starts without it.

`wmo_lake.collect(...)` runs one training step's harbor job and ingests it (wmo_lake/collector.py).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wmo_lake.collector import StepResult

__version__ = "0.1.0"

_API = {
    "connect",
    "export_conversations",
    "export_datums",
    "load_conversations",
    "load_datums",
    "query",
    "records",
    "trials",
    "LakeError",
}
# API names that are also submodules (wmo_lake/ingest.py, wmo_lake/stats.py).
_SUBMODULE_API = ("ingest", "stats")


class _ApiAndModule:
    # `wl.ingest(...)` calls the API function, whose help and signature it shows;
    # `wmo_lake.ingest.X` is still the submodule's X (imports, attribute access and
    # monkeypatching reach the module).

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def _module(self) -> ModuleType:
        return importlib.import_module(f"{__name__}.{object.__getattribute__(self, '_name')}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function()(*args, **kwargs)

    def _function(self) -> Any:
        from wmo_lake import api

        return getattr(api, object.__getattribute__(self, "_name"))

    # (properties: an instance's __doc__ is found on its class before any __getattr__, so
    # help(wl.ingest) showed this class and inspect.signature gave (*args, **kwargs); help()
    # draws no signature for an object that is not a function, so the doc opens with it)
    @property
    def __doc__(self) -> str | None:  # type: ignore[override]
        import inspect

        function = object.__getattribute__(self, "_function")()
        name = object.__getattribute__(self, "_name")
        return f"{name}{inspect.signature(function)}\n\n{inspect.getdoc(function)}"

    @property
    def __wrapped__(self) -> Any:
        return object.__getattribute__(self, "_function")()

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._module(), attribute)

    def __setattr__(self, attribute: str, value: Any) -> None:
        setattr(self._module(), attribute, value)

    def __delattr__(self, attribute: str) -> None:
        delattr(self._module(), attribute)

    def __repr__(self) -> str:
        return f"<wmo_lake.{object.__getattribute__(self, '_name')}: API function and module>"


class _Package(ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SUBMODULE_API and isinstance(value, ModuleType):
            return  # a submodule import: it stays in sys.modules, the name stays the API entry
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
ingest = _ApiAndModule("ingest")
stats = _ApiAndModule("stats")


# collect's errors (wmo_lake/collector.py, which imports harbor only when a job runs)
_COLLECT_ERRORS = {"CollectError", "HarborRunError", "MissingHarborError"}


def __getattr__(name: str) -> Any:
    if name in _API:
        from wmo_lake import api

        return getattr(api, name)
    if name in _COLLECT_ERRORS:
        from wmo_lake import collector

        return getattr(collector, name)
    raise AttributeError(f"module 'wmo_lake' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API, *_COLLECT_ERRORS])


def collect(*args: Any, **kwargs: Any) -> StepResult:
    """Run one training step's harbor job, ingest it, and return its stats and records.

    See `wmo_lake.collector.collect` (harbor is imported only when this is called).

        result = wmo_lake.collect("job.yaml", "runs/exp1", step, lake="lake")
        result.stats, result.records      # polars DataFrames
    """
    from wmo_lake.api import collect as collect_step

    return collect_step(*args, **kwargs)  # (its errors name these arguments, not CLI options)
