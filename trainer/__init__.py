"""Agent-R1 trainer: a step-level MDP for multi-step LLM agents and the RL algorithms that train them.

This package never imports Django or ``tasks_lib``; recipes plug in through the
``agent_r1_studio.tasks`` entry-point group (see ``trainer.plugins``).

Importing it registers the built-in algorithm presets in the registry that RunConfig's validation asks
(:data:`trainer.config.PRESETS`). The config sits below the presets and never imports them; Python
runs this ``__init__`` before any module of the package, so no code sees that registry empty.
"""

from __future__ import annotations

from trainer.algos import presets as _builtin_presets  # noqa: F401
