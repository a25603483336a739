"""`trajectories`: one row per ATIF trajectory file of a trial, and the reading of all of them.

A trial's agent/ dir may hold, besides `trajectory.json`:
- continuations (`trajectory.cont-N.json`, linear-history summarization): the main trace goes on
  in them. They are read in the order harbor's export follows them (each file's
  `continued_trajectory_ref`), then any continuation no reference reaches, by N, so a summarized
  episode is whole even when a reference is missing;
- subagent trajectories (`trajectory.<name>.json`, e.g. `trajectory.summarization-1-summary.json`):
  each is its own trace, named as harbor's export names it (`summarization-1-summary`).
Subagents embedded in a document (ATIF-v1.7 `subagent_trajectories`) are traces too, labelled
`<file>#<trajectory_id>` and named by their trajectory_id.

Each file is read once (msgspec, into the Structs of atif.py) and dropped before the next; a file
that cannot be read, or is not an ATIF trajectory, becomes a `problems` row and a `trajectories`
row with its status, and the trial and its other files are kept.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
from msgspec import UNSET

from wmo_lake.columns import SPECS, arrow_schema
from wmo_lake.fingerprint import named_token, watched_by_name
from wmo_lake.jsonfile import ReadFailure
from wmo_lake.pending import PendingRows
from wmo_lake.tables import atif, steps, tool_calls
from wmo_lake.tables.fields import (
    PROBLEMS_SCHEMA,
    Fields,
    ProblemLog,
    json_type_name,
)
from wmo_lake.tables.steps import CALL_COLUMNS, MAIN, STEP_COLUMNS, FileLabel, WrongTypes

SCHEMA = arrow_schema(SPECS["trajectories"])

MAIN_FILE = "trajectory.json"
_CONTINUATION = re.compile(r"trajectory\.cont-(\d+)\.json")
_SUBAGENT = re.compile(r"trajectory\.(.+)\.json")

OK = "ok"
UNREADABLE = "unreadable"
MALFORMED = "malformed"


def _columns(names: tuple[str, ...]) -> dict[str, list[Any]]:
    return {name: [] for name in names}


@dataclass
class Found:
    """Every trajectory row of one trial, gathered file by file: the files as rows, the steps
    and tool calls as one list per column (a long trajectory has thousands)."""

    files: list[dict[str, Any]] = field(default_factory=list)
    # continuations named under a name no fingerprint rule watches: name -> its size and mtime
    # just before the read (fingerprint.named_token; '-' when it was not there)
    named: dict[str, str] = field(default_factory=dict)
    steps: dict[str, list[Any]] = field(default_factory=lambda: _columns(STEP_COLUMNS))
    calls: dict[str, list[Any]] = field(default_factory=lambda: _columns(CALL_COLUMNS))
    # Trace names (trace_source) given so far: one name is one trace across the whole trial
    # (the conversations view keys on it), `main` the trajectory.json chain's.
    traces: set[str] = field(default_factory=lambda: {MAIN})
    # The subagent files' names, which harbor's export gives them: an embedded subagent whose
    # id is one of them yields it (`trace_name`)
    reserved: set[str] = field(default_factory=set)

    def trace_name(self, name: str, embedded: bool = False) -> str:
        """`name` for a new trace, or `name-2`, `name-3`, ... when another trace of the trial
        has it (`main`, a subagent of another document, a subagent file's name)."""
        unique = unique_name(name, self.traces | self.reserved if embedded else self.traces)
        self.traces.add(unique)
        return unique

    def label(self, name: str, trace_source: str) -> FileLabel:
        """The next trajectory's label: files are ranked in the order they are added."""
        return FileLabel(name, len(self.files), trace_source)

    def tables(self, identity: dict[str, str]) -> dict[str, PendingRows]:
        files = {name: [row[name] for row in self.files] for name in FILE_COLUMNS}
        return {
            "trajectories": _table(files, identity),
            "steps": _table(self.steps, identity),
            "tool_calls": _table(self.calls, identity),
        }


# The columns extraction fills: all but the trial identity and the partition (run and step,
# which the segment writer sets from the partition).
FILE_COLUMNS = tuple(name for name in SCHEMA.names[3:] if name not in ("run", "step"))


def _table(columns: dict[str, list[Any]], identity: dict[str, str]) -> PendingRows:
    rows = len(columns["file"])
    identity_columns = {
        name: [identity[name]] * rows for name in ("trial_key", "batch", "trial_name")
    }
    return PendingRows(identity_columns | columns, rows)


# The schema versions harbor's Trajectory knows (its `schema_version` Literal), as read here.
SCHEMA_VERSIONS = frozenset(f"ATIF-v1.{minor}" for minor in range(9))


def _check_header(path: Path, doc: atif.Trajectory, problems: ProblemLog) -> None:
    """What harbor's Trajectory requires of a document beside its steps: a known
    `schema_version` when there is one (absent, harbor takes ATIF-v1.8) and an `agent` object.
    Either wrong is said; the steps are read anyway."""
    version = doc.schema_version
    if version is not UNSET and not (isinstance(version, str) and version in SCHEMA_VERSIONS):
        shown = doc.schema_version if isinstance(doc.schema_version, str) else None
        problems.add(
            "wrong_type",
            path,
            f"{path.name}: schema_version is "
            f"{repr(shown) if shown else json_type_name(doc.schema_version)}, expected one of "
            "ATIF-v1.0 to ATIF-v1.8; its steps are read as ATIF-v1.8's",
        )
    if not isinstance(doc.agent, dict):
        problems.add(
            "wrong_type",
            path,
            f"{path.name}: agent is {json_type_name(doc.agent)}, expected an object (harbor's "
            "Agent: name, version); the agent columns are left null",
        )
    else:  # (harbor's Agent)
        for key, required in (("name", True), ("version", True), ("model_name", False)):
            value = doc.agent.get(key)
            if not isinstance(value, str) and (required or value is not None):
                _wrong_field(path, problems, f"agent.{key}", value, "a string")
    if doc.session_id is not None and not isinstance(doc.session_id, str):
        _wrong_field(path, problems, "session_id", doc.session_id, "a string")
    if doc.steps == []:
        _wrong_field(
            path,
            problems,
            "steps",
            doc.steps,
            "at least one step (harbor's Trajectory requires one)",
            "the file adds no step",
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def add_file(
    found: Found,
    path: Path,
    label: FileLabel,
    doc: Any,
    size: int | None,
    problems: ProblemLog,
    report: bool = True,
) -> str | None:
    """Add one decoded trajectory file's rows; returns its `continued_trajectory_ref`.
    `report=False` when the caller has already recorded why the file could not be read."""
    row: dict[str, Any] = dict.fromkeys(FILE_COLUMNS)
    row.update(file=label.name, file_index=label.index, trace_source=label.trace_source, bytes=size)
    found.files.append(row)
    if isinstance(doc, ReadFailure):
        row["status"] = UNREADABLE
        if report:
            problems.add(doc.kind, path, doc.message + "; its steps are not in the lake")
        return None
    if not isinstance(doc, atif.Trajectory) or not isinstance(doc.steps, list):
        row["status"] = MALFORMED
        if report:
            problems.add(
                "malformed_trajectory",
                path,
                f"{path} is not an ATIF trajectory (expected an object with a `steps` array); "
                "its steps are not in the lake. Re-run the trial or restore the file",
            )
        return None
    _check_header(path, doc, problems)
    agent = doc.agent if isinstance(doc.agent, dict) else {}
    tools = agent.get("tool_definitions")
    if tools is not None and not isinstance(tools, list):
        _wrong_field(path, problems, "agent.tool_definitions", tools, "an array of objects")
        tools = None
    ref = _text(doc.continued_trajectory_ref)
    if ref is None and doc.continued_trajectory_ref not in (None, UNSET):
        _wrong_field(
            path,
            problems,
            "continued_trajectory_ref",
            doc.continued_trajectory_ref,
            "a file name",
            "no continuation is followed from it",
        )
    # (harbor's FinalMetrics: read as its pydantic model reads it, "2250" and 300.0 are 2250 and
    # 300; what it refuses or no column holds is a problem)
    final = Fields({"final_metrics": doc.final_metrics}, path, problems)
    row.update(
        status=OK,
        schema_version=_text(doc.schema_version),
        session_id=_text(doc.session_id),
        agent_name=_text(agent.get("name")),
        agent_version=_text(agent.get("version")),
        model_name=_text(agent.get("model_name")),
        tool_definitions=json.dumps(tools, ensure_ascii=False, indent=2) if tools else None,
        continued_trajectory_ref=ref,
        n_steps=len(doc.steps),
        total_prompt_tokens=final.model_int("final_metrics", "total_prompt_tokens"),
        total_completion_tokens=final.model_int("final_metrics", "total_completion_tokens"),
        total_cached_tokens=final.model_int("final_metrics", "total_cached_tokens"),
        total_cost_usd=final.model_number("final_metrics", "total_cost_usd"),
    )
    wrong = WrongTypes(path)
    steps.add_steps(doc.steps, label, wrong, found.steps, found.calls)
    wrong.report(problems)
    # ATIF-v1.7 subagents embedded in this document: each its own trace, named by trajectory_id.
    # (Harbor's export reads none of them; a name another trace of the trial has is made unique:
    # two traces under one name would be read as one conversation.)
    embedded = doc.subagent_trajectories
    ids: set[str] = set()
    for position, sub in enumerate(embedded if isinstance(embedded, list) else []):
        sub_id = sub.trajectory_id if isinstance(sub, atif.Trajectory) else None
        given = sub_id if isinstance(sub_id, str) and sub_id else f"subagent-{position}"
        if isinstance(sub, atif.Trajectory) and not isinstance(sub_id, str):
            _wrong_field(
                path,
                problems,
                f"subagent_trajectories[{position}].trajectory_id",
                sub_id,
                "a string (harbor requires one of an embedded subagent)",
                f"it is read as {given!r}",
            )
        if given in ids:
            name = found.trace_name(f"subagent-{position}", embedded=True)
            problems.add(
                "wrong_type",
                path,
                f"{path.name}: subagent_trajectories[{position}] is named {given!r}, as an "
                "earlier subagent is (harbor's Trajectory refuses the file: trajectory_ids must "
                f"be unique); it is read as {name!r}",
            )
        else:
            name = found.trace_name(given, embedded=True)
        ids.add(given)
        add_file(found, path, found.label(f"{label.name}#{name}", name), sub, None, problems)
    return ref


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or `name-2`, `name-3`, ... the first that is not taken."""
    candidate, number = name, 1
    while candidate in taken:
        number += 1
        candidate = f"{name}-{number}"
    return candidate


def _wrong_field(
    path: Path,
    problems: ProblemLog,
    name: str,
    value: Any,
    expected: str,
    outcome: str = "the column is left null",
) -> None:
    problems.add(
        "wrong_type",
        path,
        f"{path.name}: {name} is {json_type_name(value)}, expected {expected}; {outcome}",
    )


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def read_trajectories(
    agent_dir: Path,
    main_status: str,
    main_doc: Any,
    problems: ProblemLog,
    main_size: int | None = None,
    names_listed: list[str] | None = None,
) -> Found:
    """Every trajectory file of a trial. trajectory.json comes as the caller already read and
    judged it (`main_status` absent / unreadable / malformed / ok, the decoded `main_doc` when
    ok, and `main_size`, its bytes when they were read), so that file is never read twice and
    its problems are not recorded twice. `names_listed`: the dir's listing, when the caller
    has it."""
    found = Found()
    if names_listed is None:
        from wmo_lake.fingerprint import agent_listing

        names_listed = agent_listing(str(agent_dir.parent))
    if names_listed is None:
        # Entered but not listed: the continuations trajectory.json names are still found by
        # name; none it does not name, nor a subagent's, can be, which is said.
        problems.add(
            "unreadable_dir",
            agent_dir,
            f"{agent_dir} cannot be listed (no read permission?): only the trajectory files "
            "reached by name from trajectory.json are read; a subagent's trajectory, or a "
            "continuation nothing names, would be missed",
        )
    unlisted = names_listed is None
    names = set(names_listed or ())
    found.reserved = {name for name in map(_subagent_file, names) if name not in (None, MAIN)}
    ref: str | None = None
    main_path = agent_dir / MAIN_FILE
    if main_status != "absent":
        # An unreadable file stands in as a ReadFailure, a malformed one as a non-object.
        doc = main_doc if main_status == "ok" else None
        if main_status == "unreadable":
            doc = ReadFailure(main_status, "")
        label = found.label(MAIN_FILE, MAIN)
        # (the size the read saw; a stat only for a file that could not be read: ~20 us a trial)
        size = main_size if main_size is not None else _size(main_path)
        ref = add_file(found, main_path, label, doc, size, problems, report=False)
        del doc
    del main_doc

    # The continuation chain, as harbor's export follows it, then continuations nothing reached.
    # A file is known by what it is (device, inode), not by how a ref spells it: `./x.json`,
    # `parts/../x.json` or a link is read once, and a ref back to a file read ends the chain.
    seen_refs = {MAIN_FILE}
    read_files: set[tuple[int, int]] = set()
    if ref:
        read_files.add(_identity(main_path) or _NO_FILE)
    while ref:  # (an empty ref is no continuation, as harbor reads it)
        # harbor follows `agent_dir / ref` wherever it leads; a ref out of agent/ (`../x.json`,
        # an absolute path) is never followed here, one into a dir under it (`parts/x.json`) is
        inside = _within(ref)
        nested = inside and "/" in ref  # (not in the agent/ listing: watched by name)
        if ref not in seen_refs and inside and (nested or not watched_by_name(ref)):
            found.named[ref] = named_token(str(agent_dir.parent), ref)
        path = agent_dir / ref
        if ref not in names and inside and (unlisted or nested) and os.path.isfile(path):
            names.add(ref)  # (found by name: in an unlistable dir, or in a dir under agent/)
        identity = _identity(path) if inside and ref in names else None
        if identity is None or identity in read_files:
            if identity is not None:
                why = "a file its chain already read (a loop)"
            elif inside:
                why = "which is not a file in that dir"
            else:
                why = "which is outside it (a reference out of agent/ is not read)"
            problems.add(
                "missing_continuation",
                path,
                f"{agent_dir} names continuation {ref!r}, {why}; the main trace ends before it",
            )
            break
        seen_refs.add(ref)
        read_files.add(identity)
        doc, size = atif.read(path, problems)
        ref = add_file(found, path, found.label(ref, MAIN), doc, size, problems)
        del doc
    listed = set(names_listed or ())  # (what a glob of agent/ finds, as harbor's scans do)
    unreached = sorted(
        (int(m.group(1)), name)
        for name in listed
        if (m := _CONTINUATION.fullmatch(name)) and name not in seen_refs
    )
    if unreached and not read_files:  # (the main file, known only once there is a chain)
        read_files.add(_identity(main_path) or _NO_FILE)
    for _, name in unreached:
        identity = _identity(agent_dir / name)
        if identity in read_files:  # (a link to a file read: once is enough)
            continue
        if identity is not None:
            read_files.add(identity)
        doc, size = atif.read(agent_dir / name, problems)
        add_file(found, agent_dir / name, found.label(name, MAIN), doc, size, problems)
        del doc

    # Subagent trajectories, by harbor's rule: every trajectory.*.json without ".cont-".
    for name in sorted(listed):
        subagent = _subagent_file(name)
        if subagent is None:
            continue
        doc, size = atif.read(agent_dir / name, problems)
        label = found.label(name, found.trace_name(subagent))
        add_file(found, agent_dir / name, label, doc, size, problems)
        del doc
    return found


def _subagent_file(name: str) -> str | None:
    """The subagent a file in agent/ holds, by harbor's rule (every trajectory.*.json without
    ".cont-", named by what the `*` matched), or None."""
    match = _SUBAGENT.fullmatch(name)
    if not match or ".cont-" in name or name == MAIN_FILE:
        return None
    return match.group(1)


def _within(ref: str) -> bool:
    """Whether a continuation reference names a path in or under agent/ (not `..`, not `/x`)."""
    if os.path.isabs(ref):
        return False
    normal = os.path.normpath(ref)
    return normal != ".." and not normal.startswith("../")


_NO_FILE = (-1, -1)  # (the identity of a main trace that is not there: no file has it)


def _identity(path: Path) -> tuple[int, int] | None:
    """What file `path` is (device, inode), None when it is no file there."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # (ValueError: a NUL in a ref)
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def read_trial_trajectories(trial_dir: Path | str) -> dict[str, pa.Table]:
    """The `trajectories`, `steps` and `tool_calls` tables of one trial dir, read exactly as ingest
    reads them (one read per file), with its problems as a fourth table. For `make bench` (issue 5,
    item 5) and for a quick look at one trial without a lake."""
    trial_dir = Path(trial_dir)
    identity = {"trial_key": f"dir:{trial_dir}", "batch": "", "trial_name": trial_dir.name}
    problems = ProblemLog(unit_key=identity["trial_key"], batch="", trial_name=trial_dir.name)
    path = trial_dir / "agent" / MAIN_FILE
    doc, size = atif.read(path, problems)
    if doc is None:
        status = "absent"
    elif isinstance(doc, ReadFailure):
        status = UNREADABLE
        problems.add(doc.kind, path, doc.message)
    elif not atif.is_trajectory(doc):
        status = MALFORMED
        problems.add("malformed_trajectory", path, f"{path} is not an ATIF trajectory")
    else:
        status = OK
    found = read_trajectories(trial_dir / "agent", status, doc, problems, size)
    schemas = {"trajectories": SCHEMA, "steps": steps.SCHEMA, "tool_calls": tool_calls.SCHEMA}
    tables = {name: rows.to_table(schemas[name]) for name, rows in found.tables(identity).items()}
    tables["problems"] = pa.Table.from_pylist(problems.rows, schema=PROBLEMS_SCHEMA)
    return tables
