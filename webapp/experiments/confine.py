"""What a member's RunConfig may name on the server (docs/security.md#server-paths).

A run's trainer runs as the service's own user, so a config must not point it at the server's files:

- ``report.jsonl_path`` must be empty: the web app stores a run's results, and a path there would
  have the trainer create folders and append to any file the service user can write;
- ``model.path`` is an offline model's alias or a folder under ``STUDIO_MODELS_DIR`` (a relative
  path is taken inside it), never any other folder;
- ``data.train_path`` / ``data.val_path`` name usable datasets of the team as ``dataset:<id>``,
  which the trainer downloads over the API: webapp.experiments.checks refuses any other (422).

- ``evaluation`` must be unset: an evaluation's checkpoint folder is the server's choice
  (webapp.experiments.evaluations), from a checkpoint the run reported.

``trainer.checkpoint_dir`` is the server's choice at launch (webapp.experiments.services.checkpoint_dir),
whatever the config says. Refusals carry the field's dotted path, as RunConfig's own checks do.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from django.conf import settings

from trainer.config import OFFLINE_MODELS, RunConfig

Problem = tuple[str, str]


class ConfigRefused(ValueError):
    """A config that names what it may not; ``problems`` are (field path, message)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{path}: {message}" for path, message in problems))


def model_folder(path: str) -> str | None:
    """``path`` as a folder under STUDIO_MODELS_DIR (relative paths are inside it), else None.
    Symlinks are resolved first: a link inside the folder that points out of it is out of it."""
    root = os.path.realpath(str(settings.MODELS_DIR))
    candidate = os.path.realpath(path if os.path.isabs(path) else os.path.join(root, path))
    if candidate != root and PurePosixPath(candidate).is_relative_to(root):
        return candidate
    return None


def confined(config: RunConfig) -> RunConfig:
    """The config with its model folder spelled out under STUDIO_MODELS_DIR; ConfigRefused otherwise."""
    problems: list[Problem] = []
    if config.report.jsonl_path:
        problems.append(
            (
                "report.jsonl_path",
                "runs of the web app write no files a config names (their results are stored by the "
                "web app): leave report.jsonl_path empty",
            )
        )
    if config.evaluation.enabled or config.evaluation.checkpoint:
        problems.append(
            (
                "evaluation.enabled",
                "an experiment's config trains; an evaluation is made from a checkpoint's Evaluate link "
                "or POST /api/t/<team>/evaluations, which pick the weights: leave evaluation unset",
            )
        )
    model = config.model.path
    folder = model if model in OFFLINE_MODELS else model_folder(model) if model else None
    if model and folder is None:
        aliases = ", ".join(sorted(OFFLINE_MODELS))
        problems.append(
            (
                "model.path",
                f"{model!r} is outside the models folder {settings.MODELS_DIR}: name an offline model "
                f"({aliases}) or a folder under STUDIO_MODELS_DIR",
            )
        )
    if problems:
        raise ConfigRefused(problems)
    return config if folder in (None, model) else config.with_overrides(**{"model.path": folder})
