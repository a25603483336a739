"""wmo-lake: harbor agent-training rollouts as a columnar lake with SQL views."""

__version__ = "0.1.0"
