"""The verl backend: verl 0.9.1's PPO trainer on a Ray GPU cluster (vLLM rollouts, FSDP updates).

:mod:`.backend` declares what it honours and what its launch needs. Our flows, envs, tools and
rewards run inside verl through :mod:`.agent_loop`; :mod:`.command` turns a RunConfig into verl's
Hydra overrides; :mod:`.driver` is what ``python -m trainer run --run-id N`` runs for a verl run (the
Ray job's entrypoint). Importing this package needs neither verl nor torch.
"""

from __future__ import annotations

from trainer.backends.verl.backend import VerlBackend

__all__ = ["VerlBackend"]
