"""The exports package (issue 12, item 3): a new kind is a small module plugging into the one
discipline (`wmo_lake.exports.discipline`): here a toy kind that writes one trial name per line,
through `Request` and `Export`, gets the guard, the scope, the settings, the manifest, the
never-overwrite write and the verified load without writing any of them itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harbor_shapes import write_job, write_trial

from wmo_lake.exports import conversations, datums, discipline
from wmo_lake.exports.discipline import Export, ExportError, Request, scope_condition
from wmo_lake.ingest import ingest


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kinds")
    for step, names in (("step-0001", ("a__1", "b__1")), ("step-0002", ("a__2",))):
        job = write_job(root / "runs" / "exp" / "harbor" / step / "job")
        for name in names:
            write_trial(job, name, task_name=f"demo/{name[0]}", reward=1.0)
    ingest([root / "runs"], root / "lake", workers=1)
    return root / "lake"


def export_names(request: Request) -> dict:
    """The whole toy kind: its query, its guard step, its writer."""
    with Export(request, kind="names") as export:
        query = f"SELECT task_id, trial_name FROM cells WHERE {scope_condition()}"
        rows = export.con.execute(query, request.scope).fetchall()
        counts: dict[str | None, int] = {}
        for task, _ in rows:
            counts[task] = counts.get(task, 0) + 1
        export.keep_train_tasks(counts)
        kept = export.con.execute(
            f"SELECT trial_name FROM ({query}) AS d WHERE {export.kept('d.task_id')} "
            "ORDER BY trial_name",
            request.scope,
        ).fetchall()

        def write(path: Path) -> int:
            path.write_text("".join(f"{name}\n" for (name,) in kept), encoding="utf-8")
            return len(kept)

        return export.write(write, excluded=export.guard.excluded, parameters={"toy": True})


def test_a_kind_plugs_into_the_discipline(lake: Path, tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.json"
    registry = [{"id": "a", "split": "train"}, {"id": "b", "split": "dev"}]
    tasks.write_text(json.dumps(registry), encoding="utf-8")
    out = tmp_path / "names.txt"
    request = Request(
        lake, out, tasks=tasks, run="exp", settings={"reward_mode": "positive-binary"}
    )
    manifest = export_names(request)
    assert out.read_text(encoding="utf-8") == "a__1\na__2\n"
    assert manifest["kind"] == "names" and manifest["rows"] == 2
    assert manifest["excluded"] == {"split_dev": 1}
    assert manifest["parameters"] == {
        "lake": str(lake.resolve()),
        "batch": None,
        "run": "exp",
        "tasks": str(tasks),
        "no_split_guard": False,
        "toy": True,
    }
    assert manifest["settings"]["reward_mode"] == "positive-binary"
    rows = discipline.load_verified(
        out, lambda p: p.read_text().split(), lambda r: ["a"] * len(r), kind="names"
    )
    assert rows == ["a__1", "a__2"]
    with pytest.raises(ExportError, match="already exists"):
        export_names(request)


def test_the_scope_is_bound_not_pasted(lake: Path, tmp_path: Path) -> None:
    request = Request(
        lake, tmp_path / "one.txt", no_split_guard=True, batch_glob="exp/harbor/step-0002/*"
    )
    export_names(request)
    assert (tmp_path / "one.txt").read_text(encoding="utf-8") == "a__2\n"
    hostile = Request(lake, tmp_path / "none.txt", no_split_guard=True, run="x' OR true --")
    assert export_names(hostile)["rows"] == 0  # matched as a value: no run has that name
    assert "x' OR true" not in scope_condition()


def test_the_guard_choice_comes_first(lake: Path, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="refusing to export without a split guard"):
        Export(Request(lake, tmp_path / "x.txt"), kind="names")
    assert not (tmp_path / "x.txt").exists()


def test_each_kind_brings_its_own_summary() -> None:
    manifest = {
        "rows": 2,
        "dataset_sha256": "ab" * 32,
        "split": None,
        "excluded": {"duplicate": 1},
        "sources": [{}],
        "format": "jsonl",
        "trials": {"in_scope": 3, "without_episodes": {"no_trajectory": 1}},
        "exported": {"tokens": 10, "loss_tokens": 4},
        "datum_stats": {"fragments": 0, "datums": 2},
    }
    out = Path("d.out")
    for kind, first in ((datums, "wrote 2 datums"), (conversations, "wrote 2 conversations")):
        text = kind.summary(manifest, out)
        assert text.startswith(first)
        assert "split guard: OFF (--no-split-guard)" in text
        assert "duplicate 1" in text
