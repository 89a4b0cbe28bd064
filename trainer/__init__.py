"""Agent-R1 trainer: a step-level MDP for multi-step LLM agents and the RL algorithms that train them.

This package never imports Django or ``tasks_lib``; recipes plug in through the
``agent_r1_studio.tasks`` entry-point group (see ``trainer.plugins``).

Importing it registers the built-in backends and presets in the registries RunConfig's validation asks
(:data:`trainer.backend_protocol.BACKENDS`, :data:`trainer.config.PRESETS`): the config sits below
them and never imports them (docs/architecture.md#inside-the-trainer). Python runs this ``__init__``
before any module of the package, so no code sees those registries empty. The backends come first:
RunConfig's ``backend`` field takes its choices from their registry when trainer.config is imported,
which importing the presets does.
"""

from __future__ import annotations

from trainer import backends as _builtin_backends  # noqa: F401
from trainer.algos import presets as _builtin_presets  # noqa: F401
