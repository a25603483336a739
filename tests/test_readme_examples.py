"""The README's Python examples run as written: every ```python block, in order, in one
namespace, in a folder holding the bundled harbor runs (fixtures/harbor), a lake ingested from
them at ./lake and a task registry tasks.json (every task train)."""

from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from pathlib import Path

import pytest

from wmo_lake.checks import RewardKeyWarning

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
# Every python block, but the training-loop sketch of `wmo_lake.collect`: it runs a harbor job
# with an agent and names the reader's own functions (tests/test_collector*.py cover collect).
BLOCKS = [
    block
    for block in re.findall(r"```python\n(.*?)```", README, re.S)
    if "wmo_lake.collect(" not in block
]


@pytest.fixture
def workdir(tmp_path: Path):
    from wmo_lake.ingest import ingest

    shutil.copytree(ROOT / "fixtures" / "harbor", tmp_path / "fixtures" / "harbor")
    ingest([tmp_path / "fixtures" / "harbor"], tmp_path / "lake", workers=1)
    from wmo_lake.lake import connect

    con = connect(tmp_path / "lake", check=False)
    tasks = sorted(t for (t,) in con.execute("SELECT DISTINCT task_id FROM cells").fetchall())
    con.close()
    (tmp_path / "tasks.json").write_text(json.dumps([{"id": t, "split": "train"} for t in tasks]))
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def test_the_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 3
    assert any("import wmo_lake as wl" in block for block in BLOCKS)


def test_every_python_block_runs(workdir: Path) -> None:
    namespace: dict[str, object] = {}
    for index, block in enumerate(BLOCKS):
        # A reader copying an example onto the bundled runs should not meet a warning that their
        # reward key matches nothing: the examples name a key those runs have.
        with warnings.catch_warnings():
            warnings.simplefilter("error", RewardKeyWarning)
            try:
                exec(compile(block, f"README.md python block {index}", "exec"), namespace)
            except Exception as error:  # the failing block, whole, in the report
                raise AssertionError(f"README python block {index} failed:\n{block}") from error
    assert (workdir / "step7.parquet").is_file() and (workdir / "sft.jsonl").is_file()
