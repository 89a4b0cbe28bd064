"""Whether the web app accepts a config for a team: the one function every entry point calls (the
experiment form, the REST API and so the `studio` CLI, sweeps, evaluations, the demo, and launch),
so that none of them can check less (docs/architecture.md#how-a-config-is-accepted).

:func:`accept` takes a member's mapping of fields (or a RunConfig) and returns the frozen config the
team may run, or raises :class:`Refused` naming each field to change. It checks in one fixed order,
and stops at the first step that refuses:

1. validation: RunConfig's own fields and cross-field checks, the backend's refusals among them
   (``Backend.problems``);
2. confinement: what a config may name on the server (docs/security.md#server-paths);
3. creation limits: a known task, a name and a seed that fit the database;
4. the backend's own deeper check (``Backend.check``; verl runs verl's ``validate_config``);
5. the datasets' reward mappings frozen into ``data.rewards``, then what the team can use: its
   datasets, a model, its tools and rewards (docs/datasets.md#create-time-checks), whether each
   dataset fits the task, and the checkpoint ``start_from`` names (resolved to its folder,
   docs/sft.md#start-from).

A config refused at steps 1 to 4 is not a valid config (the REST API's 400); one refused at step 5 is
valid but names what this team cannot use (422).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Annotated, Any

from django.conf import settings
from pydantic import Field, ValidationError

from tasks_lib.registry import load_recipes
from trainer.backends import BACKENDS
from trainer.config import RunConfig, flatten_paths, validation_errors
from trainer.contract import INT4_MAX
from trainer.model_size import OFFLINE_MODELS
from webapp.accounts.models import Team
from webapp.datasets.models import Dataset
from webapp.experiments.start_from import StartRefused, with_start_checkpoint
from webapp.tools.models import (
    REWARDS,
    TOOLS,
    TeamReward,
    TeamTool,
    ToolStatus,
    ToolUnavailable,
    builtin_tools,
)

Problem = tuple[str, str]  # (the dotted path of the field to change, what is wrong and what to set)

MAX_SEEDS = 20  # one run each: more is a sweep, not an experiment
MAX_NAME_LENGTH = 200  # an experiment's name; each run's name adds " · seed N" within Run.name's 250
MAX_DESCRIPTION_LENGTH = 10_000
Seed = Annotated[int, Field(ge=0, le=INT4_MAX, description=f"A seed: 0 to {INT4_MAX}.")]


class Refused(ValueError):
    """A config the team may not run: ``problems`` are (field path, message), all from one step.
    ``valid``: the config itself is valid, but names what this team cannot use."""

    def __init__(self, problems: list[Problem], *, valid: bool = False) -> None:
        self.problems = problems
        self.valid = valid
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))

    def by_path(self) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = {}
        for path, message in self.problems:
            grouped.setdefault(path, []).append(message)
        return grouped


def accept(team: Team, candidate: Mapping[str, Any] | RunConfig, *, evaluation: bool = False) -> RunConfig:
    """The frozen config ``team`` may run, or :class:`Refused`. A mapping takes its fields (nested or by
    dotted path) over its task recipe's defaults over its preset's (RunConfig.from_mapping's rule).
    ``evaluation``: the server made this config to evaluate a model (docs/evaluations.md), so its
    ``evaluation`` section is the server's choice, not the member's."""
    load_recipes()  # their defaults sit under the mapping's values, and their tasks are the known ones
    config = validated(candidate)
    config = confined(config, evaluation=evaluation)
    refuse(limit_problems(config))
    refuse(backend_check_problems(config))
    config = with_dataset_rewards(team, config)
    refuse(team_problems(team, config) + fit_problems(team, config), valid=True)
    try:
        return with_start_checkpoint(team, config)
    except StartRefused as refused:
        raise Refused([refused.problem], valid=True) from None


def refuse(problems: list[Problem], *, valid: bool = False) -> None:
    if problems:
        raise Refused(problems, valid=valid)


# Where a run's checkpoints go is the server's choice at launch (Experiment._queue_run sets the run's own
# folder); until then a config that saves or resumes names this stand-in, which RunConfig asks for.
LAUNCH_CHECKPOINT_DIR = "(the run's own folder, set at launch)"
CHECKPOINT_DIR_PATH = "trainer.checkpoint_dir"


def validated(candidate: Mapping[str, Any] | RunConfig) -> RunConfig:
    """Step 1: RunConfig's validation (its cross-field checks call the backend's ``problems``). A config
    that saves every N steps or is resumable (docs/resume.md) gets LAUNCH_CHECKPOINT_DIR."""
    if isinstance(candidate, RunConfig):
        return candidate
    try:
        return RunConfig.from_mapping(candidate)
    except ValidationError as error:
        problems = validation_errors(error)
        if CHECKPOINT_DIR_PATH in problems and not flatten_paths(candidate).get(CHECKPOINT_DIR_PATH):
            return validated({**flatten_paths(candidate), CHECKPOINT_DIR_PATH: LAUNCH_CHECKPOINT_DIR})
        raise Refused([(p, m) for p, messages in problems.items() for m in messages]) from None
    except (ValueError, KeyError) as error:  # from_mapping reads the preset first: not a preset's name
        raise Refused([("preset", str(error))]) from None


# -- step 2: confinement (docs/security.md#server-paths) ----------------------------------------------


def model_folder(path: str) -> str | None:
    """``path`` as a folder under STUDIO_MODELS_DIR (relative paths are inside it), else None.
    Symlinks are resolved first: a link inside the folder that points out of it is out of it."""
    root = os.path.realpath(str(settings.MODELS_DIR))
    candidate = os.path.realpath(path if os.path.isabs(path) else os.path.join(root, path))
    if candidate != root and PurePosixPath(candidate).is_relative_to(root):
        return candidate
    return None


def confined(config: RunConfig, *, evaluation: bool = False) -> RunConfig:
    """The config with its model folder spelled out under STUDIO_MODELS_DIR; Refused when it names what
    a member's config may not: the trainer runs as the service's own user. ``trainer.checkpoint_dir``
    is the server's choice at launch, whatever the config says."""
    problems: list[Problem] = []
    if config.report.jsonl_path:
        why = "runs of the web app write no files a config names (the web app stores their results)"
        problems.append(("report.jsonl_path", f"{why}: leave report.jsonl_path empty"))
    if not evaluation and (config.evaluation.enabled or config.evaluation.checkpoint):
        how = "an evaluation is made from a checkpoint's Evaluate link or POST /api/t/<team>/evaluations"
        problems.append(
            (
                "evaluation.enabled",
                f"an experiment's config trains; {how}, which pick the weights: leave evaluation unset",
            )
        )
    if config.start_from.checkpoint and config.start_from.run is None:
        problems.append(
            (
                "start_from.checkpoint",
                "the server picks the checkpoint folder: set start_from.run (and start_from.step) instead",
            )
        )
    model = config.model.path
    folder = model if model in OFFLINE_MODELS else model_folder(model) if model else None
    if model and folder is None:
        choices = (
            f"an offline model ({', '.join(sorted(OFFLINE_MODELS))}) or a folder under STUDIO_MODELS_DIR"
        )
        problems.append(
            ("model.path", f"{model!r} is outside the models folder {settings.MODELS_DIR}: name {choices}")
        )
    refuse(problems)
    return config if folder in (None, model) else config.with_overrides(**{"model.path": folder})


# -- steps 3 and 4: creation limits, the backend's own check ------------------------------------------


def limit_problems(config: RunConfig) -> list[Problem]:
    """What an experiment's config may not be beyond RunConfig's checks: an unknown task, a name or a
    seed the database cannot hold."""
    problems = []
    tasks = load_recipes().names()
    if config.task not in tasks:
        problems.append(
            ("task", f"unknown task {config.task!r}: set task to one of {', '.join(sorted(tasks))}")
        )
    if len(config.name) > MAX_NAME_LENGTH:
        problems.append(("name", f"at most {MAX_NAME_LENGTH} characters, not {len(config.name)}"))
    if not 0 <= config.trainer.seed <= INT4_MAX:
        problems.append(("trainer.seed", f"a seed lies between 0 and {INT4_MAX}"))
    if (config.start_from.step or 0) > INT4_MAX:  # a fork's or a start's step (docs/checkpoints.md#fork)
        problems.append(("start_from.step", f"a checkpoint step lies between 0 and {INT4_MAX}"))
    if (config.start_from.run or 0) > 2**63 - 1:
        problems.append(("start_from.run", "not a run's id"))
    return problems


def backend_check_problems(config: RunConfig) -> list[Problem]:
    """The backend's deeper check of a valid config, its objections on our fields."""
    try:
        return BACKENDS.get(config.backend).check(config)
    except ImportError as error:  # the web host lacks the backend's libraries: nothing can check it
        why = f"the {config.backend} backend cannot be checked on this server ({error})"
        return [("backend", f"{why}: install its libraries (see docs/recipes.md) or choose another backend")]


# -- step 5: what the team can use ---------------------------------------------------------------------


def with_dataset_rewards(team: Team, config: RunConfig) -> RunConfig:
    """The config with its datasets' reward mappings under its own ``data.rewards`` (which win), so a
    mapping to a since-deleted reward is refused too."""
    merged: dict[str, str] = {}
    for reference in (config.data.val_path, config.data.train_path):  # train's mapping over val's
        dataset = Dataset.resolve(team, reference)
        if dataset is not None:
            merged.update(dataset.effective_reward_map())
    merged.update(config.data.rewards)
    return config if merged == config.data.rewards else config.with_overrides(**{"data.rewards": merged})


def _datasets(config: RunConfig) -> list[tuple[str, str | None]]:
    return [("data.train_path", config.data.train_path), ("data.val_path", config.data.val_path)]


def team_problems(team: Team, config: RunConfig) -> list[Problem]:
    """Everything the config names that the team cannot use: datasets, the model, tools, rewards."""
    builtin_tools()  # every recipe's tools and rewards registered
    problems: list[Problem] = []
    for path, reference in _datasets(config):
        if (path == "data.train_path" or reference) and Dataset.resolve(team, reference) is None:
            problems.append(
                (
                    path,
                    f"{reference or '(empty)'} is not a valid dataset of this team: name one "
                    "as dataset:<id> (the datasets page lists them)",
                )
            )
    if not config.model.path.strip():
        problems.append(
            ("model.path", "no model: set model.path (a built-in model name or a Hugging Face folder)")
        )
    return problems + _tool_problems(team, config) + _reward_problems(team, config)


def _tool_problems(team: Team, config: RunConfig) -> list[Problem]:
    ready = {tool.name: tool for tool in TeamTool.objects.filter(team=team, status=ToolStatus.READY)}
    problems: list[Problem] = []
    for name in config.rollout.tools:
        if name in TOOLS:
            continue
        if name not in ready:
            problems.append(("rollout.tools", f"tool {name!r} does not exist (or is not ready) in this team"))
            continue
        try:
            ready[name].run_spec()  # what the run will be given: refused now if it could not be
        except ToolUnavailable as exc:
            problems.append(("rollout.tools", str(exc)))
    return problems


def _reward_problems(team: Team, config: RunConfig) -> list[Problem]:
    team_rewards = set(TeamReward.objects.filter(team=team).values_list("name", flat=True))
    return [
        ("data.rewards", f"{source!r} is mapped to the reward {reward!r}, which does not exist in this team")
        for source, reward in config.data.rewards.items()
        if reward not in REWARDS and reward not in team_rewards
    ]


def fit_problems(team: Team, config: RunConfig) -> list[Problem]:
    """Each dataset whose rows another task's reward scores (docs/datasets.md#create-time-checks)."""
    problems = []
    for path, reference in _datasets(config):
        dataset = Dataset.resolve(team, reference)
        mismatch = dataset.task_mismatch(config.task) if dataset is not None else None
        if mismatch:
            problems.append((path, mismatch))
        elif dataset is not None and dataset.holds_demonstrations != config.sft.enabled:
            problems.append((path, _layout_mismatch(dataset.name, sft=config.sft.enabled)))
    return problems


def _layout_mismatch(name: str, *, sft: bool) -> str:
    if sft:
        return (
            f"{name} holds RL rows, but an SFT run trains on demonstrations (a messages column, "
            "docs/sft.md#demonstrations): choose a demonstrations dataset"
        )
    return f"{name} holds demonstrations for an SFT run: choose a dataset of RL rows, or set sft.enabled"
