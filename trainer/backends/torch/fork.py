"""A fork that keeps the optimiser state of the checkpoint it starts from (docs/checkpoints.md#fork).

The weights come from ``start_from.checkpoint``'s ``policy/`` as for any start; with
``start_from.optimizer`` the actor's AdamW moments come from its ``optimizer.pt`` as well, so the
fork continues the parent's optimisation instead of warming its moments up from zero. The
hyperparameters are this run's: the learning rate is set at every step (``set_learning_rates``), and
the weight decay is put back after loading, so a fork with half the learning rate trains with it.
The critic, when the preset has one, starts fresh as for any start_from, and so does its optimiser.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from trainer.contract import OPTIMIZER_FILE

if TYPE_CHECKING:
    from trainer.backends.torch.update import Models
    from trainer.config import RunConfig

logger = logging.getLogger(__name__)


def keep_start_optimizer(config: RunConfig, models: Models) -> bool:
    """Load the actor's optimiser state of the start_from checkpoint when the config asks; whether it did."""
    start = config.start_from
    if not (start.optimizer and start.checkpoint):
        return False
    path = Path(start.checkpoint) / OPTIMIZER_FILE
    if not path.is_file():  # the web app checked it at create time; the folder may have gone since
        raise FileNotFoundError(
            f"start_from.optimizer is set but {path} is missing: start without the optimiser state"
        )
    saved = torch.load(path, map_location="cpu", weights_only=False)
    models.actor_optimizer.load_state_dict(saved["actor"])
    for group in models.actor_optimizer.param_groups:
        group["weight_decay"] = config.optim.weight_decay
    logger.info("optimiser state kept from %s", path)
    return True
