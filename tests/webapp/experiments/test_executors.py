"""Executors declare what shared code asks of them (docs/architecture.md#adding-an-executor-slurm-kubernetes):
a toy executor registered here is limited, reaped, logged and filed as it declares, with no edit to
the launcher, the reaper or the log tail; the external executor refuses to start a run; and no
product code compares an executor's name."""

from __future__ import annotations

import ast
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import pytest

from trainer.config import RunConfig
from webapp.experiments import run_files, services
from webapp.experiments.executors import (
    EXECUTORS,
    EXTERNAL_EXECUTOR,
    ExecutorState,
    StartRefused,
    reaped_executors,
)
from webapp.experiments.logs import log_tail
from webapp.experiments.models import Experiment, Run, RunStatus, TeamRunLimit
from webapp.experiments.tasks import reap_runs
from webapp.experiments.waiting_line import places_in_line

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class ToyExecutor:
    """Declares what a test sets and records what shared code asked of it."""

    folder: Path
    name: str = "toy"
    limited_by_team: bool = True
    reaped: bool = True
    refs_at_start: list[str] = field(default_factory=list)
    polled: list[int] = field(default_factory=list)
    cleaned: list[int] = field(default_factory=list)

    def files_dir(self, run: Run) -> Path:
        return self.folder / f"toy-run-{run.pk}"

    def planned_ref(self, run: Run) -> str:
        return f"toy-plan:{run.pk}"

    def start(self, run: Run, token: str) -> str:
        self.refs_at_start.append(Run.objects.get(pk=run.pk).executor_ref)
        return f"toy:{run.pk}"

    def poll(self, run: Run) -> ExecutorState:
        self.polled.append(run.pk)
        return ExecutorState(alive=False, exit_code=0, message="the toy job ended")

    def stop(self, run: Run, *, force: bool = False) -> None:
        raise AssertionError("nothing here stops a run")

    def locate(self, run: Run) -> str:
        return ""

    def clean_up(self, run: Run) -> None:
        self.cleaned.append(run.pk)

    def log_tail(self, run: Run, max_bytes: int) -> str:
        return f"what the toy kept of run {run.pk}"[-max_bytes:]


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[ToyExecutor]:
    executor = ToyExecutor(tmp_path)
    EXECUTORS.add(executor.name, executor)
    try:
        yield executor
    finally:
        EXECUTORS.unregister(executor.name)


def queued_runs(team: Any, executor: str, count: int) -> list[Run]:
    experiment = Experiment.objects.create(team=team, name=f"on {executor}", task="arithmetic")
    runs = []
    for seed in range(count):
        run = Run.objects.create(experiment=experiment, team=team, seed=seed, config={}, executor=executor)
        assert run.enqueue()
        runs.append(run)
    return runs


def test_the_teams_limit_holds_the_runs_of_an_executor_that_declares_itself_limited(
    personas: Any, toy: ToyExecutor
) -> None:
    team = personas["acme"]
    TeamRunLimit.set(team, 1)
    first, second = queued_runs(team, toy.name, 2)
    services.start_run(first)
    services.start_run(second)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == RunStatus.STARTING and first.executor_ref == f"toy:{first.pk}"
    assert toy.refs_at_start == [f"toy-plan:{first.pk}"]  # the planned ref was recorded before start
    assert second.status == RunStatus.QUEUED and second.held_at is not None
    assert places_in_line(team.pk) == {second.pk: 1}


def test_an_executor_not_limited_by_the_team_starts_every_run_past_the_limit(
    personas: Any, toy: ToyExecutor
) -> None:
    toy.limited_by_team = False
    team = personas["acme"]
    TeamRunLimit.set(team, 1)
    runs = queued_runs(team, toy.name, 2)
    for run in runs:
        services.start_run(run)
    assert [Run.objects.get(pk=run.pk).status for run in runs] == [RunStatus.STARTING] * 2
    assert places_in_line(team.pk) == {}


def test_the_reaper_reconciles_a_reaped_executors_runs_and_leaves_the_others_to_their_clients(
    personas: Any, toy: ToyExecutor
) -> None:
    (run,) = queued_runs(personas["acme"], toy.name, 1)
    services.start_run(run)
    reap_runs()
    run.refresh_from_db()
    assert (run.status, run.message) == (RunStatus.SUCCEEDED, "the toy job ended")
    assert toy.polled == [run.pk] and toy.cleaned == [run.pk] and not run.is_external

    toy.reaped = False
    outside = Run.objects.create(experiment=run.experiment, team=run.team, seed=9, executor=toy.name,
                                 status=RunStatus.RUNNING)  # fmt: skip
    reap_runs()
    outside.refresh_from_db()
    assert outside.status == RunStatus.RUNNING and toy.polled == [run.pk] and outside.is_external


def test_a_runs_log_tail_and_files_folder_are_where_its_executor_says(
    personas: Any, toy: ToyExecutor
) -> None:
    (run,) = queued_runs(personas["acme"], toy.name, 1)
    assert log_tail(run) == f"what the toy kept of run {run.pk}"  # the trainer sent none
    assert run_files.run_files_dir(run) == toy.files_dir(run)
    assert Path(run_files.checkpoint_dir(run)).parent == toy.files_dir(run)


def test_starting_a_run_reported_from_outside_refuses_with_a_message_and_fails_it(personas: Any) -> None:
    (run,) = queued_runs(personas["acme"], EXTERNAL_EXECUTOR, 1)
    with pytest.raises(StartRefused, match=f"run {run.pk} is reported from outside .* does not start"):
        EXECUTORS.get(EXTERNAL_EXECUTOR).start(run, "a token")
    services.start_run(run)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert run.message.startswith(f"run {run.pk} is reported from outside (an MLflow client or an import)")
    assert run.is_external


def test_a_config_may_name_exactly_the_executors_the_studio_starts() -> None:
    # The trainer validates configs without Django: its choices are a list of their own, kept equal.
    choices = get_args(RunConfig.model_fields["executor"].annotation)
    assert sorted(choices) == reaped_executors()


# --- no product code asks for an executor by name --------------------------------------------------

QUERY_CALLS = {"filter", "exclude", "get", "Q", "When"}


def _is_executor_name(node: ast.expr) -> bool:
    """An executor's name as code holds it: a literal registry name, ``….executor``, ``executor_name``
    or a ``…_EXECUTOR`` constant."""
    if isinstance(node, ast.Constant):
        return node.value in EXECUTORS.names()
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name in ("executor", "executor_name") or name.endswith("_EXECUTOR")


def _name_comparisons(tree: ast.AST) -> Iterator[int]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            equality = not all(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
            if equality and any(_is_executor_name(side) for side in [node.left, *node.comparators]):
                yield node.lineno
        elif isinstance(node, ast.Call):
            func = node.func
            called = (
                func.attr
                if isinstance(func, ast.Attribute)
                else func.id
                if isinstance(func, ast.Name)
                else ""
            )
            if called in QUERY_CALLS and any(keyword.arg == "executor" for keyword in node.keywords):
                yield node.lineno  # a query comparing the stored name: filter by a declaration instead


def test_no_product_code_compares_an_executors_name() -> None:
    found = []
    for path in sorted((ROOT / "webapp").rglob("*.py")):
        if "migrations" not in path.parts:
            lines = _name_comparisons(ast.parse(path.read_text(), filename=str(path)))
            found += [f"{path.relative_to(ROOT)}:{line}" for line in lines]
    names = "|".join(EXECUTORS.names())
    in_templates = re.compile(rf"executor *(==|!=|in) |(==|!=) *[\"']({names})[\"']")
    for path in sorted((ROOT / "templates").rglob("*.html")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if in_templates.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}")
    assert found == [], "ask the run's executor what it declares (executor_of, names_where), not its name"


def test_a_local_run_lives_while_any_process_of_its_group_does(
    personas: Any, settings: Any, tmp_path: Path
) -> None:
    """The group's leader answers at once; a member that outlives it is still found (docs/scaling.md#the-reaper)."""
    settings.VAR_DIR = str(tmp_path)
    local = EXECUTORS.get("local")
    (run,) = queued_runs(personas["acme"], "local", 1)
    leader = subprocess.Popen(["sleep", "60"], start_new_session=True)
    run.executor_ref = f"pgid:{leader.pid}"
    assert local.poll(run).alive
    leader.kill()
    leader.wait()
    assert not local.poll(run).alive
    # The launch shell gone, its trainer still running in the group: the run is alive until it ends.
    shell = subprocess.Popen(
        ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )  # the orphan's output goes elsewhere, so the shell's pipe closes when the shell ends
    assert shell.stdout is not None
    orphan = int(shell.stdout.readline())
    shell.wait()
    run.executor_ref = f"pgid:{shell.pid}"
    try:
        assert local.poll(run).alive
    finally:
        os.kill(orphan, signal.SIGKILL)
    for _ in range(50):  # init reaps it
        if not local.poll(run).alive:
            break
        time.sleep(0.1)
    state = local.poll(run)
    assert not state.alive and "disappeared" in state.message
