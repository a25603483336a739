"""wmo-lake: harbor agent-training rollouts as a columnar lake with SQL views."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wmo_lake.collector import StepResult

__version__ = "0.1.0"


def collect(*args: Any, **kwargs: Any) -> StepResult:
    """Run one training step's harbor job, ingest it, and return its stats and records.

    See `wmo_lake.collector.collect` (harbor is imported only when this is called).

        result = wmo_lake.collect("job.yaml", "runs/exp1", step, lake="lake")
        result.stats, result.records      # polars DataFrames
    """
    from wmo_lake.collector import collect as collect_step

    return collect_step(*args, **kwargs)
