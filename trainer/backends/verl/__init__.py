"""The verl backend: verl 0.9.1's PPO trainer on a Ray GPU cluster (vLLM rollouts, FSDP updates).

Our flows, envs, tools and rewards run inside verl through :mod:`.agent_loop`; :mod:`.command` turns a
RunConfig into verl's Hydra overrides; :mod:`.driver` is what ``python -m trainer run --run-id N``
runs for a verl run (the Ray job's entrypoint). Importing this package needs neither verl nor torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import threading

    from trainer.config import RunConfig
    from trainer.report.reporters import Reporter


def train(config: RunConfig, reporter: Reporter, *, stop_event: threading.Event | None = None) -> Any:
    """Run verl's trainer for ``config`` as a child process (see :func:`.driver.train`)."""
    from trainer.backends.verl.driver import train as run_driver

    return run_driver(config, reporter, stop_event=stop_event)


__all__ = ["train"]
