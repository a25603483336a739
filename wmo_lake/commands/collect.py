"""`wmo-lake collect`: one training step's harbor job, run (or resumed), ingested, reported."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import click

from wmo_lake.commands.options import (
    fail,
    lake_hint,
    lake_option,
    setting_options,
    settings_from,
)
from wmo_lake.settings import whole_number
from wmo_lake.stopping import query_interrupted, sigterm_stops, stopped_message
from wmo_lake.store import LakeError
from wmo_lake.terminal import printable


@click.command()
@click.option(
    "--template",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="A harbor JobConfig file (YAML or JSON): agent, environment, tasks or datasets.",
)
@click.option(
    "--run-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The training run's dir; the step's job goes to RUN_DIR/harbor/step-NNNN.",
)
@click.option("--step", required=True, type=int, help="The 0-based training step.")
@click.option(
    "--tasks",
    "tasks_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Run only the task ids in this file (one per line, a JSON list, or a task registry "
    "of {id, ...} objects).",
)
@click.option(
    "--task",
    "task_ids",
    multiple=True,
    metavar="ID",
    help="Run only this task (its name, e.g. 'org/task', its dir name, or a task dir); "
    "repeatable. A task named twice runs once: --attempts sets its group size.",
)
@click.option(
    "--attempts",
    type=whole_number(1),
    metavar="N",
    help="Attempts per task (n_attempts, the group size) [default: the template's].",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a template field by its dotted path, VALUE read as YAML; repeatable. "
    "E.g. --set agents.0.kwargs.max_turns=8",
)
@lake_option
@setting_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print what ran and the step's stats (rollout_stats columns) and notes as JSON.",
)
@click.option(
    "--quiet", "-q", is_flag=True, help="No progress on stderr: neither these lines nor harbor's."
)
def collect(
    template: Path,
    run_dir: Path,
    step: int,
    tasks_file: Path | None,
    task_ids: tuple[str, ...],
    attempts: int | None,
    sets: tuple[str, ...],
    lake: Path,
    as_json: bool,
    quiet: bool,
    **options: Any,
) -> None:
    """Run one training step's rollouts as a harbor job, ingest them, print the step's stats.

    The template is validated as harbor's JobConfig (a bad one: exit 2, naming the field) and
    pinned to this step: jobs dir RUN_DIR/harbor/step-NNNN, job name 'rollouts' unless the
    template names one, only the given tasks (an unknown id: exit 2, before anything runs),
    n_attempts from --attempts. harbor runs the job with its progress display (on stderr;
    none with --quiet).

    Run the same command again after an interruption (Ctrl-C, a crash, SIGKILL) and the step
    resumes: finished trials are kept, unfinished ones run again, none twice. A step whose
    trials are all done is not run again; it is only ingested and reported. A step dir written
    under another config is refused (exit 2), never mixed.

    Then the step's job is ingested into the lake and its rollout stats (WMO's RolloutStats)
    printed with WMO's warnings. Exit 0 when the job ran, even if trials failed; 1 when harbor
    or the ingest failed; 2 on usage errors. Needs the harbor extra (pip install
    'wmo-lake[harbor]'). The environment and the agent's keys are harbor's business: set them
    as for `harbor run` (e.g. OPENAI_API_KEY, PYTHONPATH for an environment import_path).

    \b
    Examples:
      wmo-lake collect --template job.yaml --run-dir runs/exp1 --step 0
      wmo-lake collect --template job.yaml --run-dir runs/exp1 --step 7 \\
          --tasks train-batch-7.txt --attempts 8 --set agents.0.kwargs.max_turns=30
      wmo-lake collect --template job.yaml --run-dir runs/exp1 --step 7 --task e2e/hello-file \\
          --json --lake /data/lake
    """
    from wmo_lake.collector import CollectError, HarborRunError, MissingHarborError
    from wmo_lake.collector import collect as run_collect

    def say(message: str) -> None:
        if not quiet:
            click.echo(message, err=True)

    planned: list[Any] = []  # the plan, once made (for the message of an interruption)

    def on_plan(plan: Any, state: Any) -> None:
        planned.append(plan)
        tasks = len(plan.task_names)
        line = (
            f"step {plan.step}: {tasks} task(s) x {plan.config.n_attempts} attempt(s) = "
            f"{plan.trials_planned} trial(s) -> {plan.job_dir}"
        )
        if state.removed:
            line += f"; removed {len(state.removed)} interrupted trial dir(s)"
        if state.removed_job_result:
            line += "; removed the job's cut-off result.json (harbor writes it again)"
        if state.done_trials >= plan.trials_planned and state.finished:
            line += "; already complete, not run again"
        elif state.done_trials:
            line += f"; resuming: {state.done_trials} already done"
        say(line)

    def on_trial_done(name: str, done: int, total: int) -> None:
        if not sys.stderr.isatty():  # on a terminal harbor's own display shows this
            say(f"  {done}/{total} {name}")

    # SIGTERM (what a scheduler sends) stops harbor's job the way Ctrl-C does: its trials are
    # cancelled and their environments torn down, not left running
    try:
        # harbor's progress display writes to stdout; keep stdout for the report (and --json).
        # Not harbor's `quiet` for -q: the template's config is recorded, and a resume compares it
        with sigterm_stops(), _harbor_display(quiet):
            result = run_collect(
                template,
                run_dir,
                step,
                tasks=task_ids,
                tasks_file=tasks_file,
                attempts=attempts,
                sets=sets,
                lake=lake,
                settings=settings_from(options),
                on_plan=on_plan,
                on_trial_done=on_trial_done,
                lake_args=lake_hint(click.get_current_context(), lake),
            )
    except CollectError as error:
        fail(str(error), 2)
    except (MissingHarborError, HarborRunError, LakeError) as error:
        if planned and not quiet and not sys.stderr.isatty():
            click.echo("", err=True)  # (harbor's last progress frame ends without a newline)
        fail(str(error))
    except KeyboardInterrupt:
        _interrupted(step, planned, quiet)
    except Exception as error:
        if not query_interrupted(error):  # (a Ctrl-C that DuckDB took, in the ingest's commit)
            raise
        _interrupted(step, planned, quiet)
    if as_json:
        click.echo(json.dumps(result.as_dict(), ensure_ascii=False, indent=2))
        return
    from wmo_lake.stats import table_lines

    if result.harbor_ran and not sys.stderr.isatty():
        say("")  # harbor's last progress frame ends without a newline off a terminal
    say(result.ingest.line())
    rows = [result.stats_row] if result.stats_row is not None else []
    for line in table_lines(rows):
        click.echo(line)
    if result.notes:
        click.echo("")
        for note in result.notes:
            click.echo(f"note: {printable(note)}")


@contextlib.contextmanager
def _harbor_display(quiet: bool) -> Iterator[None]:
    """harbor's display (rich, on whatever sys.stdout is) on stderr, or nowhere with --quiet."""
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(open(os.devnull, "w")) if quiet else sys.stderr
        stack.enter_context(contextlib.redirect_stdout(sink))
        yield


def _interrupted(step: int, planned: list[Any], quiet: bool) -> NoReturn:
    """Say what an interrupted step left behind, and exit as the signal does (130 or 143)."""
    where = f" {planned[0].job_dir}" if planned else ""
    if not quiet:
        click.echo("", err=True)  # (harbor's last progress frame ends without a newline)
    said, code = stopped_message(
        f"interrupted: step {step} stopped; the trials it finished are kept in{where} "
        "(unfinished ones run again): run the same command again to resume it"
        if planned
        else f"interrupted: step {step} was not started; nothing was run"
    )
    click.echo(said, err=True)
    sys.exit(code)
