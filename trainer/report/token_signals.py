"""Which trajectories keep their per-token signals (report.token_signals), for both backends
(docs/rollouts.md#token-signals)."""

from __future__ import annotations

from trainer.config import RunConfig

Policy = str | None  # report.token_signals: "all", "sample", "none", or None for the default (a sample)


def keeps_token_signals(config: RunConfig) -> bool:
    return config.report.token_signals != "none"


def kept_trajectories(policy: Policy, per_step: int, count: int) -> list[int]:
    """Which of a training step's ``count`` trajectories keep their signals: all, none, or
    ``per_step`` of them spread evenly over the batch (so over its groups)."""
    if policy == "none":
        return []
    if policy == "all" or count <= per_step:
        return list(range(count))
    return sorted({i * count // per_step for i in range(per_step)})
