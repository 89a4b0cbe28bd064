"""Starting a playground session (one at a time per member) and the worker's side of it
(docs/playground.md).

The request checks what it can without a model — the choices are the experiment's checkpoints still
on disk or its base model, the tools are the experiment's — and queues a job. The worker loads each
chosen model in turn and runs the prompt through the agent loop, storing every step as it comes.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow.parquet as pq
from django.conf import settings
from django.db import connection, transaction

from trainer.config import RunConfig
from trainer.contract import POLICY_FOLDER
from trainer.envs import parse_env_kwargs
from webapp.datasets.models import Dataset
from webapp.experiments.jobs import Job, JobKind, JobRefused, TooManyJobs
from webapp.experiments.models import Experiment, Run
from webapp.experiments.run_files import checkpoint_folder
from webapp.playground.models import BASE_MODEL, AnswerStatus, PlaygroundAnswer, PlaygroundSession

logger = logging.getLogger(__name__)

PLAYGROUND_JOB = "playground"
PLAYGROUND_TASK = "webapp.playground.tasks.playground_task"
PLAYGROUND = JobKind(PLAYGROUND_JOB, PLAYGROUND_TASK, most=1)  # one session at a time per member
MAX_SIDES = 2


class PlaygroundRefused(ValueError):
    """A request the playground cannot take; the message says why, ``field`` which field."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Ask:
    """What a member asked: which models, which prompt (typed, or a row of the experiment's data),
    which of the experiment's tools."""

    choices: Sequence[str]
    prompt: str = ""
    ground_truth: str = ""
    split: str = "train"
    row_index: int | None = None
    tools: Sequence[str] | None = None  # None: all of the experiment's


def experiment_config(experiment: Experiment) -> RunConfig:
    return RunConfig.model_validate(experiment.config)


def model_choices(experiment: Experiment) -> list[tuple[str, str]]:
    """(value, label) of what may answer: the base model, then every checkpoint still on disk."""
    config = experiment_config(experiment)
    choices = [(BASE_MODEL, f"base model ({config.start_from.checkpoint or config.model.path})")]
    for run in experiment.runs.order_by("pk"):
        for checkpoint in run.checkpoints.filter(deleted=False).order_by("step"):
            choices.append((f"{run.pk}:{checkpoint.step}", f"run {run.pk} · step {checkpoint.step}"))
    return choices


def _resolve_choice(experiment: Experiment, choice: str) -> tuple[Run | None, int | None, str]:
    """(run, step, label) of one choice; PlaygroundRefused for one the experiment does not have."""
    labels = dict(model_choices(experiment))
    if choice not in labels:
        raise PlaygroundRefused(f"{choice!r} is neither the base model nor a checkpoint on disk", "models")
    if choice == BASE_MODEL:
        return None, None, labels[choice]
    run_id, step = (int(part) for part in choice.split(":"))
    return Run.objects.get(pk=run_id), step, labels[choice]


def _dataset_row(experiment: Experiment, split: str, index: int) -> tuple[dict[str, Any], str]:
    config = experiment_config(experiment)
    reference = config.data.val_path if split == "val" else config.data.train_path
    dataset = Dataset.resolve(experiment.team, reference)
    if dataset is None or not dataset.is_usable:
        raise PlaygroundRefused(f"the experiment has no usable {split} dataset", "row_index")
    table = pq.read_table(dataset.path)
    if not 0 <= index < table.num_rows:
        raise PlaygroundRefused(f"{dataset.name} has rows 0 to {table.num_rows - 1}", "row_index")
    return table.slice(index, 1).to_pylist()[0], f"{dataset.name} row {index}"


def _typed_row(experiment: Experiment, prompt: str, ground_truth: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        "data_source": experiment.task,
        "prompt": [{"role": "user", "content": prompt}],
        "extra_info": {"index": 0},
    }
    if ground_truth:
        row["reward_model"] = {"style": "rule", "ground_truth": ground_truth}
    return row


def _with_tools(row: dict[str, Any], config: RunConfig, tools: Sequence[str]) -> dict[str, Any]:
    """The row offering exactly ``tools`` (a row of another env type keeps its own settings)."""
    env_kwargs = parse_env_kwargs(row.get("env_kwargs"))
    if env_kwargs.get("env_type", config.rollout.env_type) == "tool":
        env_kwargs.update(tools=list(tools), tool_format=config.rollout.tool_format)
    return {**row, "env_kwargs": json.dumps(env_kwargs, sort_keys=True)}


def _budget(config: RunConfig) -> dict[str, Any]:
    from trainer.playground import Budget

    total = settings.PLAYGROUND_MAX_TOKENS
    budget = Budget(
        max_steps=config.rollout.max_steps,
        max_new_tokens=min(config.rollout.max_new_tokens, total),
        max_total_tokens=total,
        time_s=float(settings.PLAYGROUND_TIME_S),
    )
    return asdict(budget)


def start(experiment: Experiment, user: Any, ask: Ask) -> PlaygroundSession:
    """The session and its queued job. PlaygroundRefused for a bad request, or while the member's
    previous session still runs (one at a time per member)."""
    config = experiment_config(experiment)
    choices = list(dict.fromkeys(ask.choices))
    if not 1 <= len(choices) <= MAX_SIDES:
        raise PlaygroundRefused(f"choose one or {MAX_SIDES} different models", "models")
    sides = [_resolve_choice(experiment, choice) for choice in choices]
    tools = list(config.rollout.tools if ask.tools is None else ask.tools)
    unknown = sorted(set(tools) - set(config.rollout.tools))
    if unknown:
        raise PlaygroundRefused(f"not a tool of this experiment: {', '.join(unknown)}", "tools")
    if ask.row_index is not None:
        row, source = _dataset_row(experiment, ask.split, ask.row_index)
    elif ask.prompt.strip():
        row, source = _typed_row(experiment, ask.prompt.strip(), ask.ground_truth.strip()), ""
    else:
        raise PlaygroundRefused("type a prompt or pick a dataset row", "prompt")
    row = _with_tools(row, config, tools)
    with transaction.atomic():
        try:
            job = Job.start(PLAYGROUND, experiment.team, user=user)
        except TooManyJobs:
            raise PlaygroundRefused(
                "your previous playground session is still running: wait for it to end", "models"
            ) from None
        session = PlaygroundSession.objects.create(
            team=experiment.team,
            experiment=experiment,
            job=job,
            created_by=user,
            prompt=_last_user_message(row),
            row=row,
            source=source,
            tools=tools,
            budget=_budget(config),
        )
        for position, (run, step, label) in enumerate(sides):
            PlaygroundAnswer.objects.create(
                session=session, position=position, run=run, step=step, label=label
            )
        job.enqueue()
    return session


def _last_user_message(row: dict[str, Any]) -> str:
    users = [m.get("content", "") for m in row.get("prompt") or [] if m.get("role") == "user"]
    return str(users[-1]) if users else ""


# -- the worker's side ---------------------------------------------------------------------------


def work(job: Job) -> dict[str, Any]:
    """The job's work: every answer of its session in turn."""
    session = PlaygroundSession.objects.filter(job=job).select_related("experiment", "team").first()
    if session is None:
        raise JobRefused("the playground session is gone")
    for answer in session.answers.select_related("run"):
        answer_one(session, answer)
    return {"session": session.pk}


def answer_one(session: PlaygroundSession, answer: PlaygroundAnswer) -> None:
    """Run the session's row on one answer's model, storing each step as it arrives."""
    from trainer.models import ModelNotAvailableError
    from trainer.team import UnavailableTool
    from webapp.tools.models import ToolUnavailable

    _set(answer, status=AnswerStatus.RUNNING)
    try:
        _play(session, answer)
    except (FileNotFoundError, ValueError, ModelNotAvailableError, UnavailableTool, ToolUnavailable) as error:
        _set(answer, status=AnswerStatus.FAILED, message=str(error))
    except Exception:
        logger.exception("playground answer %s failed", answer.pk)
        _set(answer, status=AnswerStatus.FAILED, message="the worker failed on this answer; it is logged")


def _set(answer: PlaygroundAnswer, **changes: Any) -> None:
    # Race: none: only the worker that claimed the session's job writes its answers.
    PlaygroundAnswer.objects.filter(pk=answer.pk).update(**changes)
    for name, value in changes.items():
        setattr(answer, name, value)


def _play(session: PlaygroundSession, answer: PlaygroundAnswer) -> None:
    from trainer.models import resolve_model_path
    from trainer.playground import Budget, load_engine, play
    from trainer.team import run_scope
    from webapp.tools.models import specs_for_run

    config = (
        RunConfig.model_validate(answer.run.config) if answer.run else experiment_config(session.experiment)
    )
    steps: list[dict[str, Any]] = []
    # The agent loop calls on_step inside its asyncio event loop, where Django refuses database calls
    # (SynchronousOnlyOperation): each step's write goes through this one thread, awaited there.
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="playground-steps")

    def on_step(view: dict[str, Any]) -> None:
        steps.append(view)
        changes = {"steps": list(steps), "response_tokens": sum(step["tokens"] for step in steps)}
        writer.submit(_set, answer, **changes).result()

    rewards = sorted(set(config.data.rewards.values()))
    specs = specs_for_run(session.team, list(session.tools), rewards)
    with run_scope(specs, config.data.rewards, config.data.reward_rule), _closing(writer):
        llm, tokenizer = load_engine(_weights(answer, config), resolve_model_path(config.model.path), config)
        result = play(
            session.row,
            llm=llm,
            tokenizer=tokenizer,
            config=config,
            budget=Budget(**session.budget),
            on_step=on_step,
        )
    _set(
        answer,
        status=AnswerStatus.DONE,
        steps=result.steps,
        stop_reason=result.stop_reason,
        reward=result.reward,
        response_tokens=result.response_tokens,
    )


@contextlib.contextmanager
def _closing(writer: ThreadPoolExecutor) -> Iterator[None]:
    """Shut the step writer down with its thread's database connection."""
    try:
        yield
    finally:
        writer.submit(lambda: connection.close()).result()  # looked up in the writer's own thread
        writer.shutdown()


def _weights(answer: PlaygroundAnswer, config: RunConfig) -> Any:
    """The policy folder of the answer's checkpoint, or the weights its experiment starts from."""
    from trainer.backends.torch.loop import initial_weights

    if answer.run is None or answer.step is None:
        return initial_weights(config)
    checkpoint = answer.run.checkpoints.filter(step=answer.step, deleted=False).first()
    folder = checkpoint_folder(checkpoint) if checkpoint is not None else None
    if folder is None or not (folder / POLICY_FOLDER).is_dir():
        raise FileNotFoundError(f"the checkpoint of run {answer.run.pk} step {answer.step} has no files left")
    return folder / POLICY_FOLDER
