"""Every column of every lake table, declared once: its name, its Arrow type, where in which
source file it comes from, and what it means (as Inspect AI's `analysis` package declares its
columns). From these follow:

- each table's Arrow schema (`arrow_schema`, used by `wmo_lake/tables/`);
- the fields the typed msgspec decoder of result.json reads (`tables/trial_result.py`), so a
  column read from a new result.json field is never silently null;
- the README's column tables (`python -m wmo_lake.columns README.md` rewrites them;
  tests/test_readme.py holds the README to them);
- the extract version (`extract_version`): any change of a name, type or source re-reads every
  ingested dir on the next ingest, so no trial keeps a null new column.

`source` is `(file, path)`: the file relative to the trial dir (a job's files are `<job>/...`),
and a dotted path in it (`[0]` one list item, `[]` every item); `None` for a value wmo-lake
derives (keys, labels, statuses, counts), which `meaning` then explains.

This module needs no pyarrow: the ingest's fingerprint reads the extract version from it.
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# The Arrow types columns may have, by the name a spec gives them.
STRING = "string"
INT32 = "int32"
INT64 = "int64"
FLOAT64 = "float64"
BOOL = "bool"
TIMESTAMP = "timestamp[us, UTC]"
LIST_INT64 = "list<int64>"
LIST_FLOAT64 = "list<float64>"
LIST_STRING = "list<string>"
MAP_STRING_STRING = "map<string, string>"

# Bump for a change of extraction the specs do not show (a fixed bug, a new reading of a field):
# the extract version is this and the specs' digest.
EXTRACT_LOGIC_VERSION = "28"  # 2: trajectories / steps / tool_calls; 3: collection paths;
# 4: rewards as harbor's TrialResult reads them; a byte-order mark is not JSON; sink lines lax;
# a CTRF summary count past 64 bits leaves the summary out; n_episodes past 64 bits clamped;
# 5: a broken trial config.json, a trace that is no object and a time that is none are problems;
# 6: a task_id object is the member of harbor's union it validates as (most fields given);
# 7: token counts, cost and ATIF step ints read as harbor's pydantic models read them (5.0, "5");
# 8: trial times read as harbor's TrialResult reads them (lowercase t/z, unix times; no basic form);
# 9: terminus-2's max_episodes / episodes are the turn cap; a trial's collection path its agent's;
# 10: a job naming one agent judges its trials by its own record of it (jobs.n_agents);
# 11: kwargs.max_turns read as Terminus2Options reads it (pydantic, lax: "5" and 5.0 are 5)
# 12: the manifest records the rules each partition was read under (a lake without that record
# is older: its next ingest reads everything again, so the record is complete from then on)
# 13: a broken dir in a job dir known only by its other trials counts as an unreadable trial, a
# result.json with trial_name makes its dir a trial whatever its config.json says; a token id
# past a double's range (1e400) is malformed spans, not an extract_failed trial
# 14: an unreadable trial is one problems row; a CTRF skipped / pending / other count past 64
# bits is null (the summary still grades); the trace is read on the terminus-2 path too (evidence)
# 15: an absent trajectory schema_version is harbor's default, no problem; an unreadable trial's
# rows logged before it was found unreadable are folded into its one row
# 16: an agent/ dir that cannot be listed still gives its wmo-run.json and the continuations
# trajectory.json names (read by name), and is said as an unreadable_dir problem
# 17: llm_kwargs.max_tokens / context_limit read as TinkerLLM reads them (pydantic, lax: 4.0 is 4;
# a context_limit of 0 or false is none, 10.5 is 10)
# 18: a task_id object's member as harbor reads result.json (JSON mode): a git id and a package
# with as many fields given is the git id; a continuation of a name no rule watches is watched
# (the catalog keeps the names a read's chain met)
# 19: a trial's sinks that only its result.json names are watched as its agent records them
# (CatalogEntry.read_sink: the recorded token_sink_dir, resolved again by each fingerprint)
# 20: a time harbor reads whose UTC falls outside years 1-9999 is a null with a problem (its trial
# was lost as extract_failed); trial times pydantic refuses are refused (a fast path took
# `...T01`, `+05`, `T012550Z`); an ATIF step time as harbor's Step validates it (`2026-12-01Z`);
# a dir whose reading raised is an unreadable_trial row (it was not counted in unreadable_trials)
# 21: a trajectory's final_metrics and a step's cost_usd read as harbor's models read them ("2250",
# NaN, inf; they were null, the totals without a word); a float field's integer past a double's
# range is inf, as harbor reads it; a phase's duration from its times in their own offsets (one
# whose UTC no datetime holds); `trial_name: ""` is a trial (harbor's model takes it)
# 22: that trial is named by its dir (WMO's TrialRecord needs a name); a trial time's offset past
# 23:59 (+05:60) is refused, as pydantic refuses it (the fast path read it)
# 23: a continuation in a dir under agent/ is followed, as harbor's export follows it; a step's
# is_copied_context read as harbor's Step reads it (1 is true)
# 24: a continuation is known by its file, not its spelling (`./x.json`, a link: read once; a ref
# back to a file read ends the chain, said); an empty ref is no continuation, as harbor reads it
# 25: a leftover continuation that is a link to a file read is not read again
# 26: ATIF fields harbor's model refuses are said (arguments not an object, an observation's content
# of another type, tool_definitions not a list, a ref not a string); a content part neither text
# nor image / audio is left out (it was a `media` entry, its episode excluded as multimodal);
# embedded subagents sharing a trajectory_id are two traces (they were read as one)
# 27: an exception_info without its exception_type or exception_message (harbor's model refuses
# the file) is said as a problem; a trace name is unique across the trial (a subagent named `main`,
# or as another file's subagent, was read into that trace)
# 28: ATIF fields harbor's model requires or types that were read without a word are said (agent
# name / version / model_name, session_id, a step's message and step_id, null arguments, an empty
# `steps`, an embedded subagent without trajectory_id)


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    source: tuple[str, str] | None
    meaning: str

    @property
    def file(self) -> str | None:
        return None if self.source is None else self.source[0]

    @property
    def path(self) -> str | None:
        return None if self.source is None else self.source[1]


@dataclass(frozen=True)
class TableSpec:
    name: str
    grain: str  # what one row is
    unit_column: str  # names the unit a row belongs to: a re-ingested unit replaces its own rows
    columns: tuple[Column, ...]

    @property
    def names(self) -> list[str]:
        return [column.name for column in self.columns]


RESULT = "result.json"  # the trial's: harbor's TrialResult
JOB_CONFIG = "<job>/config.json"  # harbor's JobConfig
JOB_RESULT = "<job>/result.json"  # harbor's JobResult
CTRF = "verifier/ctrf.json"
# A CTRF summary's counts, a column each (`ctrf_passed`, ...). Defined here, not in ctrf.py (which
# grades with them), so that connect(), which checks the lake's extract version, needs no msgspec.
OPTIONAL_COUNTS = ("passed", "failed")  # may be null: no summary reading without both
DEFAULTED_COUNTS = ("skipped", "pending", "other")  # absent -> 0; null is rejected
SUMMARY_COUNTS = OPTIONAL_COUNTS + DEFAULTED_COUNTS
TRIAL_LOG = "trial.log"  # harbor's log of the trial
TRAJECTORY = "agent/trajectory*.json"  # every ATIF file of the trial (see the README)

# The identity every trial table carries.
TRIAL_KEY = Column(
    "trial_key",
    STRING,
    (RESULT, "id"),
    "the TrialResult `id`, or `dir:` + the resolved trial dir when it has none",
)
BATCH = Column(
    "batch",
    STRING,
    None,
    "the job dir's path relative to the PATH ingested; from its run dir when it is or lies under "
    "`<run>/harbor/step-NNNN/` (see Discovery)",
)
RUN = Column("run", STRING, None, "the path component before `harbor/`, when there is one")
STEP = Column(
    "step",
    INT64,
    None,
    "the integer of a `step-NNNN` path component, else null (also past 64 bits: an "
    "`out_of_range` problem)",
)
# The lake's Hive partition columns: every table has them, and the segment writer sets them from
# the partition of the unit's rows (wmo_lake/store.py), so a table's extraction may leave them out.
PARTITION_COLUMNS = frozenset({RUN.name, STEP.name})
TRIAL_NAME = Column(
    "trial_name",
    STRING,
    (RESULT, "trial_name"),
    "as recorded (an empty one: the trial dir's name, as WMO's TrialRecord names it; said in "
    "problems)",
)
# Which ATIF file a trajectory row comes from.
FILE = Column(
    "file",
    STRING,
    None,
    "the trajectory file (`trajectory.json`, `trajectory.cont-1.json`, ...; an embedded "
    "subagent is `<file>#<trajectory_id>`)",
)
FILE_INDEX = Column("file_index", INT32, None, "the file's rank among the trial's trajectory files")
TRACE_SOURCE = Column(
    "trace_source",
    STRING,
    None,
    "`main` for trajectory.json and its continuations, else the subagent's name "
    "(`summarization-1-summary`; a name another trace of the trial has, `main` too, is read "
    "as `<name>-2`)",
)
STEP_INDEX = Column("step_index", INT32, None, "0-based position of the step in its file")
STEP_ID = Column("step_id", INT64, (TRAJECTORY, "steps[].step_id"), "as recorded")


PHASES = ("environment_setup", "agent_setup", "agent_execution", "verifier")

JOBS = TableSpec(
    "jobs",
    "job dir",
    "job_key",
    (
        Column("job_key", STRING, None, "`job:` + the job dir's resolved path"),
        BATCH,
        RUN,
        STEP,
        Column("job_dir", STRING, None, "the job dir as walked"),
        Column("job_name", STRING, (JOB_CONFIG, "job_name"), "as recorded"),
        Column("job_id", STRING, (JOB_RESULT, "id"), "as recorded"),
        Column("agent_import_path", STRING, (JOB_CONFIG, "agents[0].import_path"), "as recorded"),
        Column("agent_name", STRING, (JOB_CONFIG, "agents[0].name"), "as recorded"),
        Column("model_name", STRING, (JOB_CONFIG, "agents[0].model_name"), "as recorded"),
        Column(
            "n_agents",
            INT64,
            (JOB_CONFIG, "agents"),
            "how many agents the job names (harbor runs every task x attempt under each): with "
            "one, its trials are judged by this row's caps and collection path; null without a "
            "config.json",
        ),
        Column(
            "n_attempts",
            INT64,
            (JOB_CONFIG, "n_attempts"),
            "null when harbor's default was omitted",
        ),
        Column(
            "max_turns",
            INT64,
            (JOB_CONFIG, "agents[0].kwargs.max_turns, else .max_episodes, else .episodes"),
            "the turn cap (terminus-2 still honours its older names, in that order)",
        ),
        Column(
            "max_tokens",
            INT64,
            (JOB_CONFIG, "agents[0].kwargs.llm_kwargs.max_tokens"),
            "the output cap per turn",
        ),
        Column(
            "context_limit",
            INT64,
            (
                JOB_CONFIG,
                "agents[0].kwargs.llm_kwargs.context_limit, else agents[0].kwargs.context_window",
            ),
            "the context budget (terminus-2 records both with the collector's "
            "context_budget_tokens; the pi bridge records only context_window)",
        ),
        Column(
            "model_path",
            STRING,
            (JOB_CONFIG, "agents[0].kwargs.llm_kwargs.model_path"),
            "as recorded",
        ),
        Column("temperature", FLOAT64, (JOB_CONFIG, "agents[0].kwargs.temperature"), "as recorded"),
        Column("agent_kwargs", STRING, (JOB_CONFIG, "agents[0].kwargs"), "as JSON text"),
        Column(
            "started_at",
            STRING,
            (JOB_RESULT, "started_at"),
            "as written (harbor writes job times without a zone, so they are not read as UTC)",
        ),
        Column("finished_at", STRING, (JOB_RESULT, "finished_at"), "as written, like started_at"),
        Column("n_total_trials", INT64, (JOB_RESULT, "n_total_trials"), "as recorded"),
        Column(
            "config_status", STRING, None, "`<job>/config.json`: `ok`, `absent` or `unreadable`"
        ),
        Column(
            "result_status", STRING, None, "`<job>/result.json`: `ok`, `absent` or `unreadable`"
        ),
        Column(
            "collection_path",
            STRING,
            (JOB_CONFIG, "agents[0].kwargs.token_sink_dir"),
            "`pi-bridge` when that is a non-empty string (upstream agents.py), else `terminus-2` "
            "(WMO's two assemblers, `wmo.distill.tokens`; see the rules)",
        ),
        Column(
            "token_sink_dir",
            STRING,
            (JOB_CONFIG, "agents[0].kwargs.token_sink_dir"),
            "as recorded (pi-bridge jobs)",
        ),
        Column(
            "sink_dir",
            STRING,
            None,
            "where its sinks were looked for: the recorded dir after `--sink-root`, a relative "
            "one under the nearest ancestor of the job dir holding it",
        ),
    ),
)

TRIALS = TableSpec(
    "trials",
    "trial",
    "trial_key",
    (
        TRIAL_KEY,
        Column("trial_id", STRING, (RESULT, "id"), "the TrialResult `id`"),
        BATCH,
        RUN,
        STEP,
        Column("job_key", STRING, None, "the trial's job (`jobs.job_key`)"),
        TRIAL_NAME,
        Column("task_name", STRING, (RESULT, "task_name"), "as recorded"),
        Column("trial_uri", STRING, (RESULT, "trial_uri"), "where harbor ran it, as recorded"),
        Column("source", STRING, (RESULT, "source"), "the dataset it came from, as recorded"),
        Column("task_checksum", STRING, (RESULT, "task_checksum"), "as recorded"),
        Column(
            "task_id_path",
            STRING,
            (RESULT, "task_id.path"),
            "the task id as harbor records it: a local task's path, or the path in a git repo",
        ),
        Column("task_id_git_url", STRING, (RESULT, "task_id.git_url"), "a git task's repo"),
        Column("task_id_git_commit_id", STRING, (RESULT, "task_id.git_commit_id"), "its commit"),
        Column(
            "task_id_package",
            STRING,
            (RESULT, "task_id.org"),
            "a package task's `org/name` (`task_id.org`, `task_id.name`)",
        ),
        Column("task_id_ref", STRING, (RESULT, "task_id.ref"), "a package task's ref"),
        Column(
            "task_id_name",
            STRING,
            None,
            "harbor's `task_id.get_name()` (a local or git task's dir name, a package's "
            "`org/name`): the task id WMO's scorer groups trials by, and `cells.task_id` (which "
            "takes `task_name` when this is null)",
        ),
        Column("artifact_dir", STRING, None, "the trial dir"),
        Column("agent_name", STRING, (RESULT, "agent_info.name"), "as recorded"),
        Column("agent_version", STRING, (RESULT, "agent_info.version"), "as recorded"),
        Column("model_name", STRING, (RESULT, "agent_info.model_info.name"), "as recorded"),
        Column("model_provider", STRING, (RESULT, "agent_info.model_info.provider"), "as recorded"),
        Column(
            "agent_source",
            STRING,
            None,
            "where the trial's own agent was read: `result.json` (its `config.agent`, every "
            "field written), else `config.json` (its `agent`, which harbor writes without its "
            "defaults); null when neither records one (its job's `agents[0]` then stands in)",
        ),
        Column(
            "agent_config",
            STRING,
            (RESULT, "config.agent"),
            "the agent the trial ran (harbor's `AgentConfig`: name, import_path, model_name, "
            "kwargs, ...), from `agent_source`, as JSON text with sorted keys and without the "
            "fields at their defaults (null, false, [], {}), so either file gives the same text: "
            "the agent `cells` ranks attempts among (a job of several agents runs every task "
            "under each)",
        ),
        Column(
            "max_turns",
            INT64,
            (RESULT, "config.agent.kwargs.max_turns, else .max_episodes, else .episodes"),
            "the turn cap the trial's agent ran under (terminus-2 still honours its older names, "
            "in that order), from `agent_source`",
        ),
        Column(
            "max_tokens",
            INT64,
            (RESULT, "config.agent.kwargs.llm_kwargs.max_tokens"),
            "the output cap per turn it ran under, from `agent_source`",
        ),
        Column(
            "context_limit",
            INT64,
            (RESULT, "config.agent.kwargs.llm_kwargs.context_limit, else .context_window"),
            "the context budget it ran under, from `agent_source` (as `jobs.context_limit`)",
        ),
        Column(
            "collection_path",
            STRING,
            (RESULT, "config.agent.kwargs.token_sink_dir"),
            "how its spans and stop reason were read: `pi-bridge` when its agent (else its job's "
            "`agents[0]`) records a non-empty token_sink_dir, else `terminus-2` (see the rules)",
        ),
        *[
            Column(name, INT64, (RESULT, f"agent_result.{name}"), "the agent's total")
            for name in ("n_input_tokens", "n_cache_tokens", "n_output_tokens")
        ],
        Column("cost_usd", FLOAT64, (RESULT, "agent_result.cost_usd"), "the agent's total"),
        Column(
            "rewards",
            MAP_STRING_STRING,
            (RESULT, "verifier_result.rewards"),
            "key -> the value's JSON text as harbor's `TrialResult` reads it: a number as "
            "written (`1` stays an int), a bool or numeric string as the number pydantic's lax "
            'mode makes of it (`true` -> `1.0`, `"0.5"` -> `0.5`), anything else as written',
        ),
        Column("exception_type", STRING, (RESULT, "exception_info.exception_type"), "as recorded"),
        Column(
            "exception_message", STRING, (RESULT, "exception_info.exception_message"), "as recorded"
        ),
        Column(
            "n_episodes",
            INT64,
            (RESULT, "agent_result.metadata.n_episodes"),
            "when an integer (one past 64 bits is the nearest 64-bit value, which compares with "
            "max_turns as it does; a `problems` row says so)",
        ),
        Column(
            "started_at",
            TIMESTAMP,
            (RESULT, "started_at"),
            "UTC, as harbor's TrialResult reads it (a naive time as UTC, a unix time read)",
        ),
        Column("finished_at", TIMESTAMP, (RESULT, "finished_at"), "UTC, like started_at"),
        *[
            Column(
                f"{phase}_sec",
                FLOAT64,
                (RESULT, phase),
                "the phase's duration: finished_at - started_at",
            )
            for phase in PHASES
        ],
        Column("multi_step", BOOL, (RESULT, "step_results"), "whether it is non-empty"),
        Column(
            "n_rollout_segments",
            INT32,
            (RESULT, "agent_result.rollout_details"),
            "how many segments it has (only the first is trainable)",
        ),
        Column(
            "spans_status",
            STRING,
            None,
            "why it has or lacks spans: `ok`, `empty`, `absent` (terminus-2: no rollout details; "
            "pi-bridge: no sink file), `multi_step`, `malformed`, `unaligned_turns`, "
            "`logprob_mismatch`, `out_of_range`, `sink`, `sink_corrupt`, `sink_dir_missing`",
        ),
        Column("n_spans", INT32, None, "rows in `spans`"),
        Column(
            "dropped_turns",
            INT32,
            (TRIAL_LOG, 'lines "Output length exceeded: ..."'),
            "turns stopped at max_tokens (`finish_reason: length`) that harbor dropped: no span, "
            "no trajectory step, only that terminus-2 log line, counted here; null without a "
            "trial.log",
        ),
        Column(
            "ctrf_status",
            STRING,
            None,
            "`verifier/ctrf.json`: `ok`, `absent`, `unreadable`, `not_ctrf` (upstream's CTRF "
            "model rejects it)",
        ),
        Column(
            "ctrf_summary_present",
            BOOL,
            (CTRF, "results.summary"),
            "the summary has `passed` and `failed`",
        ),
        Column(
            "ctrf_summary_valid",
            BOOL,
            (CTRF, "results.summary"),
            "the summary was read (upstream's CTRF model accepted it)",
        ),
        *[
            Column(
                f"ctrf_{name}",
                INT64,
                (CTRF, f"results.summary.{name}"),
                'the summary count as upstream\'s CTRF model reads it (`2.0` and `"2"` are 2; '
                "`skipped`, `pending`, `other` default to 0)",
            )
            for name in SUMMARY_COUNTS
        ],
        Column(
            "ctrf_n_tests",
            INT32,
            (CTRF, "results.tests"),
            "its length (0 when absent; null when the report is not `ok`)",
        ),
        Column("result_bytes", INT64, None, "the size of result.json"),
    ),
)

SPANS = TableSpec(
    "spans",
    "sampled turn",
    "trial_key",
    (
        TRIAL_KEY,
        BATCH,
        TRIAL_NAME,
        Column("call_index", INT32, None, "0-based turn"),
        Column(
            "prompt_len",
            INT32,
            (RESULT, "agent_result.rollout_details[0].prompt_token_ids[]"),
            "the full prompt's length (or the sink's `prompt_token_ids`)",
        ),
        Column(
            "prompt_prefix_len",
            INT32,
            None,
            "length of the prefix the prompt shares with the previous turn's prompt + sampled "
            "tokens",
        ),
        Column(
            "prompt_new_ids",
            LIST_INT64,
            (RESULT, "agent_result.rollout_details[0].prompt_token_ids[]"),
            "the prompt's tokens after that prefix",
        ),
        Column(
            "sampled_token_ids",
            LIST_INT64,
            (RESULT, "agent_result.rollout_details[0].completion_token_ids[]"),
            "as recorded (or the sink's `sampled_token_ids`)",
        ),
        Column(
            "sampled_logprobs",
            LIST_FLOAT64,
            (RESULT, "agent_result.rollout_details[0].logprobs[]"),
            "as recorded (or the sink's `sampled_logprobs`)",
        ),
        Column("n_sampled", INT32, None, "`len(sampled_token_ids)`"),
        Column(
            "source",
            STRING,
            None,
            "`rollout_details` (terminus-2 path) or `sink` (pi-bridge path: "
            "`{token_sink_dir}/{trial dir name}.jsonl`)",
        ),
        RUN,
        STEP,
    ),
)

STOP_REASONS = TableSpec(
    "stop_reasons",
    "trial (the evidence its stop reason is derived from)",
    "trial_key",
    (
        TRIAL_KEY,
        BATCH,
        TRIAL_NAME,
        Column(
            "exception_type", STRING, (RESULT, "exception_info.exception_type"), "when a string"
        ),
        Column("n_episodes", INT64, (RESULT, "agent_result.metadata.n_episodes"), "as in `trials`"),
        Column(
            "trajectory_status",
            STRING,
            None,
            "`agent/trajectory.json`: `ok`, `absent`, `unreadable`, `malformed`",
        ),
        Column(
            "declared_complete",
            BOOL,
            ("agent/trajectory.json", "steps[].tool_calls[].function_name"),
            "the last `agent` step calls `mark_task_complete`",
        ),
        Column(
            "has_trace",
            BOOL,
            None,
            "a `wmo-run.json` exists (`agent/` first, then the trial root); read on both paths, "
            "the stop reason takes it on the pi-bridge path only",
        ),
        Column("trace_path", STRING, None, "which one"),
        Column("trace_stop_reason", STRING, ("wmo-run.json", "stop_reason"), "when a string"),
        RUN,
        STEP,
    ),
)

TESTS = TableSpec(
    "tests",
    "CTRF test",
    "trial_key",
    (
        TRIAL_KEY,
        BATCH,
        TRIAL_NAME,
        Column(
            "test_index",
            INT32,
            None,
            "position in `results.tests` (a report upstream's model rejects has no rows)",
        ),
        Column("name", STRING, (CTRF, "results.tests[].name"), "null when not a string"),
        Column(
            "status", STRING, (CTRF, "results.tests[].status"), 'as recorded (`""` when absent)'
        ),
        Column("duration", FLOAT64, (CTRF, "results.tests[].duration"), "null when not a number"),
        RUN,
        STEP,
    ),
)

TRAJECTORIES = TableSpec(
    "trajectories",
    "trajectory file of a trial",
    "trial_key",
    (
        TRIAL_KEY,
        BATCH,
        TRIAL_NAME,
        FILE,
        FILE_INDEX,
        TRACE_SOURCE,
        Column("status", STRING, None, "`ok`, `unreadable` or `malformed`"),
        Column("bytes", INT64, None, "the file's size"),
        Column("schema_version", STRING, (TRAJECTORY, "schema_version"), "as recorded"),
        Column("session_id", STRING, (TRAJECTORY, "session_id"), "as recorded"),
        Column("agent_name", STRING, (TRAJECTORY, "agent.name"), "as recorded"),
        Column("agent_version", STRING, (TRAJECTORY, "agent.version"), "as recorded"),
        Column("model_name", STRING, (TRAJECTORY, "agent.model_name"), "as recorded"),
        Column(
            "tool_definitions",
            STRING,
            (TRAJECTORY, "agent.tool_definitions"),
            "as JSON text (indent=2, as harbor's export embeds them), null when none",
        ),
        Column(
            "continued_trajectory_ref",
            STRING,
            (TRAJECTORY, "continued_trajectory_ref"),
            "the continuation file it names",
        ),
        Column("n_steps", INT32, (TRAJECTORY, "steps"), "how many steps it has"),
        Column(
            "total_prompt_tokens",
            INT64,
            (TRAJECTORY, "final_metrics.total_prompt_tokens"),
            "as recorded",
        ),
        Column(
            "total_completion_tokens",
            INT64,
            (TRAJECTORY, "final_metrics.total_completion_tokens"),
            "as recorded",
        ),
        Column(
            "total_cached_tokens",
            INT64,
            (TRAJECTORY, "final_metrics.total_cached_tokens"),
            "as recorded",
        ),
        Column(
            "total_cost_usd", FLOAT64, (TRAJECTORY, "final_metrics.total_cost_usd"), "as recorded"
        ),
        RUN,
        STEP,
    ),
)

STEPS = TableSpec(
    "steps",
    "ATIF step",
    "trial_key",
    (
        TRIAL_KEY,
        BATCH,
        TRIAL_NAME,
        FILE,
        FILE_INDEX,
        TRACE_SOURCE,
        STEP_INDEX,
        STEP_ID,
        Column("source", STRING, (TRAJECTORY, "steps[].source"), "`system`, `user` or `agent`"),
        Column("timestamp", TIMESTAMP, (TRAJECTORY, "steps[].timestamp"), "UTC"),
        Column("model_name", STRING, (TRAJECTORY, "steps[].model_name"), "as recorded"),
        Column("message", STRING, (TRAJECTORY, "steps[].message"), "its text parts, joined"),
        Column(
            "reasoning_content", STRING, (TRAJECTORY, "steps[].reasoning_content"), "as recorded"
        ),
        Column(
            "n_tool_calls",
            INT32,
            (TRAJECTORY, "steps[].tool_calls"),
            "how many (the calls are `tool_calls` rows)",
        ),
        Column(
            "observation",
            STRING,
            (TRAJECTORY, "steps[].observation.results[].content"),
            "every result's text, joined with a newline",
        ),
        Column(
            "media",
            LIST_STRING,
            (TRAJECTORY, "steps[].message"),
            "the non-text parts of the message and observation, as `type:path`",
        ),
        Column(
            "observation_media",
            LIST_STRING,
            (TRAJECTORY, "steps[].observation.results[].content"),
            "those of the observation alone (an episode ends before its last step's observation)",
        ),
        Column(
            "prompt_tokens", INT64, (TRAJECTORY, "steps[].metrics.prompt_tokens"), "as recorded"
        ),
        Column(
            "completion_tokens",
            INT64,
            (TRAJECTORY, "steps[].metrics.completion_tokens"),
            "as recorded",
        ),
        Column(
            "cached_tokens", INT64, (TRAJECTORY, "steps[].metrics.cached_tokens"), "as recorded"
        ),
        Column("cost_usd", FLOAT64, (TRAJECTORY, "steps[].metrics.cost_usd"), "as recorded"),
        Column("llm_call_count", INT64, (TRAJECTORY, "steps[].llm_call_count"), "as recorded"),
        Column("is_copied_context", BOOL, (TRAJECTORY, "steps[].is_copied_context"), "as recorded"),
        RUN,
        STEP,
    ),
)

TOOL_CALLS = TableSpec(
    "tool_calls",
    "tool call of an ATIF step",
    "trial_key",
    (
        TRIAL_KEY,
        BATCH,
        TRIAL_NAME,
        FILE,
        FILE_INDEX,
        TRACE_SOURCE,
        Column(
            "step_index",
            INT32,
            None,
            "the step's (joins `steps` on trial_key, file_index, step_index)",
        ),
        STEP_ID,
        Column("call_index", INT32, None, "0-based position in the step's tool_calls"),
        Column(
            "tool_call_id", STRING, (TRAJECTORY, "steps[].tool_calls[].tool_call_id"), "as recorded"
        ),
        Column(
            "function_name",
            STRING,
            (TRAJECTORY, "steps[].tool_calls[].function_name"),
            "as recorded",
        ),
        Column(
            "arguments",
            STRING,
            (TRAJECTORY, "steps[].tool_calls[].arguments"),
            "as JSON text, rendered as harbor's trace export renders it (`{}` when absent)",
        ),
        RUN,
        STEP,
    ),
)

PROBLEMS = TableSpec(
    "problems",
    "thing that could not be read as expected",
    "unit_key",
    (
        Column(
            "unit_key",
            STRING,
            None,
            "the trial (`trial_key`), job (`job:...`), dir (`dir:...`), duplicate (`dup:...`) "
            "or walk (`walk:...`) it belongs to",
        ),
        Column("batch", STRING, None, "when known"),
        Column("trial_name", STRING, None, "when known"),
        Column("path", STRING, None, "the file or dir"),
        Column(
            "kind",
            STRING,
            None,
            "`unreadable_trial` (one row per unreadable trial, naming its causes by kind: "
            "`missing_result`, ..., `extract_failed`: a dir whose reading raised what no rule "
            "expects, a wmo-lake bug), `invalid_json`, `empty_file`, `not_utf8`, "
            "`lone_surrogate`, `not_an_object`, `not_a_trial_result`, `unreadable_file`, "
            "`wrong_type`, `malformed_spans`, `unaligned_turns`, `logprob_mismatch`, "
            "`out_of_range`, `sink_corrupt`, `sink_dir_missing`, `not_ctrf`, `invalid_reward`, "
            "`coerced_reward`, `malformed_trajectory`, `missing_continuation`, `missing_task`, "
            "`duplicate_trial`, `symlink_loop`, `unreadable_dir`, `not_a_directory`, "
            "`not_utf8_name`, `name_too_long`",
        ),
        Column(
            "message",
            STRING,
            None,
            "what was wrong (file, field, what was expected) and what to do",
        ),
        RUN,
        STEP,
    ),
)

SPECS: dict[str, TableSpec] = {
    spec.name: spec
    for spec in (
        JOBS,
        TRIALS,
        SPANS,
        STOP_REASONS,
        TESTS,
        TRAJECTORIES,
        STEPS,
        TOOL_CALLS,
        PROBLEMS,
    )
}


def arrow_type(name: str) -> pa.DataType:
    import pyarrow as pa

    types = {
        STRING: pa.string,
        INT32: pa.int32,
        INT64: pa.int64,
        FLOAT64: pa.float64,
        BOOL: pa.bool_,
        TIMESTAMP: lambda: pa.timestamp("us", tz="UTC"),
        LIST_INT64: lambda: pa.list_(pa.int64()),
        LIST_FLOAT64: lambda: pa.list_(pa.float64()),
        LIST_STRING: lambda: pa.list_(pa.string()),
        MAP_STRING_STRING: lambda: pa.map_(pa.string(), pa.string()),
    }
    return types[name]()


def arrow_schema(spec: TableSpec) -> pa.Schema:
    import pyarrow as pa

    return pa.schema([(column.name, arrow_type(column.type)) for column in spec.columns])


def extract_version(specs: dict[str, TableSpec] | None = None) -> str:
    """EXTRACT_LOGIC_VERSION and a digest of every table's column names, types and sources
    (meanings are documentation: a re-read would change nothing)."""
    specs = SPECS if specs is None else specs
    parts = [
        f"{spec.name}/{spec.unit_column}/{column.name}/{column.type}/{column.source}"
        for spec in specs.values()
        for column in spec.columns
    ]
    digest = hashlib.sha1("\n".join(parts).encode()).hexdigest()[:12]
    return f"{EXTRACT_LOGIC_VERSION}-{digest}"


def result_fields(specs: dict[str, TableSpec] | None = None) -> dict[str, set[str]]:
    """The result.json fields the trial tables read: top-level key -> the keys read under it
    (empty when the whole value is read)."""
    specs = SPECS if specs is None else specs
    fields: dict[str, set[str]] = {}
    for spec in specs.values():
        for column in spec.columns:
            if column.file != RESULT or column.path is None:
                continue
            top, _, rest = column.path.partition(".")
            below = fields.setdefault(top, set())
            if rest:
                below.add(re.split(r"[.\[]", rest, maxsplit=1)[0])
    return fields


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def readme_table(spec: TableSpec) -> str:
    """The README's markdown table of one table's columns."""
    lines = ["| column | type | from | meaning |", "| --- | --- | --- | --- |"]
    for column in spec.columns:
        where = "-" if column.source is None else f"`{column.file}` `{column.path}`"
        lines.append(
            f"| {column.name} | {column.type} | {_cell(where)} | {_cell(column.meaning)} |"
        )
    return "\n".join(lines) + "\n"


def readme_heading(spec: TableSpec) -> str:
    return f"### `{spec.name}`: one row per {spec.grain}"


def rewrite_readme(text: str) -> str:
    """`text` (the README) with each table's column table replaced by the one its spec gives: the
    markdown table that follows the table's heading."""
    for spec in SPECS.values():
        heading = readme_heading(spec)
        start = text.find(heading + "\n")
        if start < 0:
            raise ValueError(f"the README has no heading {heading!r}")
        table_start = text.index("\n|", start) + 1
        table_end = table_start
        while text.startswith("|", table_end):
            table_end = text.index("\n", table_end) + 1
        text = text[:table_start] + readme_table(spec) + text[table_end:]
    return text


def main(argv: list[str]) -> int:
    """`python -m wmo_lake.columns README.md`: rewrite the README's column tables from the specs."""
    if len(argv) != 1:
        print("usage: python -m wmo_lake.columns README.md", file=sys.stderr)
        return 2
    path = Path(argv[0])
    path.write_text(rewrite_readme(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


__all__ = ["SPECS", "Column", "TableSpec", "arrow_schema", "extract_version", "result_fields"]
