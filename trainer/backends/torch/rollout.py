"""The torch backend's rollout: n samples of every prompt through its flow, concurrently.

Every trajectory is one ``flow.run`` coroutine; all of them share the generation engine, which batches
whatever they ask for at the same time. Flows, scoring and metrics are the shared
:mod:`trainer.rollout`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from trainer.llm import LLMClient, SamplingParams
from trainer.mdp import Trajectory
from trainer.rollout import Row, make_flow

if TYPE_CHECKING:
    from trainer.config import RunConfig


async def _run_one(
    row: Row,
    sampling: SamplingParams,
    engine: LLMClient,
    tokenizer: Any,
    config: RunConfig,
    *,
    traj_id: str,
    group_id: str,
    rollout_index: int,
) -> Trajectory:
    flow = make_flow(row, engine, tokenizer, config)
    # The torch engine batches best when it knows how many flows are live; other clients need not.
    track = getattr(engine, "track", None)
    with track() if track is not None else contextlib.nullcontext():
        output = await flow.run(sampling, **row)
    return output.to_trajectory(row, traj_id=traj_id, group_id=group_id, rollout_index=rollout_index)


async def _rollout(
    rows: Sequence[Row],
    n: int,
    sampling: SamplingParams,
    engine: LLMClient,
    tokenizer: Any,
    config: RunConfig,
    tag: str,
) -> list[Trajectory]:
    # Rows are grouped by position, not by extra_info.index: a small dataset may put one row in a
    # batch twice, and those are two prompts with two baselines.
    runs = [
        _run_one(
            row,
            sampling,
            engine,
            tokenizer,
            config,
            traj_id=f"{tag}-p{i}-s{k}",
            group_id=f"{tag}-p{i}",
            rollout_index=k,
        )
        for i, row in enumerate(rows)
        for k in range(n)
    ]
    return list(await asyncio.gather(*runs))


def rollout(
    rows: Sequence[Row],
    *,
    n: int,
    sampling: SamplingParams,
    engine: LLMClient,
    tokenizer: Any,
    config: RunConfig,
    tag: str,
) -> list[Trajectory]:
    """n trajectories per row, ordered row by row and sample by sample; final answers not yet scored."""
    return asyncio.run(_rollout(rows, n, sampling, engine, tokenizer, config, tag))
