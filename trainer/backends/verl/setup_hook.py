"""What every Ray worker process of a verl run needs before verl's code runs in it.

The executor sets ``runtime_env["worker_process_setup_hook"] =
"trainer.backends.verl.setup_hook.setup_worker"`` on the whole job, so Ray calls this in the
TaskRunner (where advantages are computed), in the agent-loop workers (where our flows run) and in
every other worker, before any task.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

HOOK = "trainer.backends.verl.setup_hook.setup_worker"


def setup_worker() -> None:
    """Install our estimators in verl (:func:`.estimators.install`) and load the recipe plugins."""
    from trainer.backends.verl.estimators import install
    from trainer.plugins import load_plugins

    install()
    # The agent loop scores final answers with the reward function of each row's data_source and
    # builds the recipes' tools and envs: their registries fill when the plugins are imported.
    load_plugins()
    logger.debug("agent-r1 verl worker setup done")
