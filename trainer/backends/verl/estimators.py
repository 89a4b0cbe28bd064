"""Our advantage estimators inside verl: an adapter from verl's trajectory rows to :class:`StepBatch`.

In verl a row is a whole trajectory: its response holds every turn, model tokens with mask 1 and
tool/env tokens with mask 0 (see ``agent_loop.py``). A step is one run of mask-1 tokens. The adapter
turns a batch of such rows into one :class:`~trainer.algos.advantages.StepBatch` row per step (the
step's own tokens; a reward that sits between two steps counts for the step before it, on its last
token), runs ``ESTIMATORS[name]`` on it, the same function the torch backend runs, and puts the
per-token results back where the step's tokens lie in verl's (batch, response_length) tensors.

Parameters reach the math as arguments, read from the algorithm config verl hands its estimators:
``gamma``, ``lam`` and ``norm_adv_by_std_in_grpo`` are verl's own fields, GiGPO's step weight rides
under our key ``algorithm.agent_r1``. verl calls a registered estimator without critic values or
per-step data, so :func:`install` adds those two for the estimators that read them (docs/verl.md#advantages).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from trainer.algos.advantages import DEFAULT_PARAMS, ESTIMATORS, EstimatorParams, StepBatch
from trainer.backends.verl.command import ALGORITHM_KEY, STEP_WEIGHT_KEY, verl_estimator_name
from trainer.backends.verl.signals import (
    KEPT_FIELD,
    Fetch,
    Mark,
    has_field,
    report_token_signals,
    run_reporter,
)
from trainer.config_sections import ANCHOR_ESTIMATORS, CRITIC_ESTIMATORS
from trainer.report.reporters import Reporter

# The per-token field our agent loop adds to each verl row: the anchor id (Step.anchor_id) of the
# step a model token belongs to, 0 on tool/env tokens. GiGPO reads it at each step's first token.
ANCHOR_FIELD = "agent_r1_anchor_ids"
# verl computes advantages for training batches only; TransferQueue keeps those in this partition.
TRAIN_PARTITION = "train"


# -- verl rows <-> step rows ----------------------------------------------------------------------


@dataclass(frozen=True)
class StepLayout:
    """Where the S steps of a verl batch of B rows x R response positions lie.

    ``row`` / ``start`` / ``length``: [S], steps in row order and, within a row, in token order.
    ``flat`` [S, W]: each step token's index in the flattened [B * R] batch (W = the longest step),
    valid where ``valid`` [S, W] is True; None when every row is one step from its first position
    (a single-step task), and then the rows are the steps as they are (``valid`` is the mask).
    """

    mask: Tensor  # [B, R] bool
    is_start: Tensor  # [B, R] bool, True on each step's first token
    row: Tensor
    start: Tensor
    length: Tensor
    flat: Tensor | None
    valid: Tensor

    @property
    def steps(self) -> int:
        return int(self.row.shape[0])

    def gather(self, x: Tensor) -> Tensor:
        """[B, R] per-token values -> [S, W] on each step's tokens, 0 past the step's end.

        When the rows are the steps, ``x`` itself: what lies off the mask stays (the estimators
        read only masked positions, save token rewards, which :func:`step_batch` clears there).
        """
        if self.flat is None:
            return x
        return x.reshape(-1)[self.flat].masked_fill_(~self.valid, 0)

    def at_starts(self, x: Tensor) -> Tensor:
        """[B, R] -> [S]: the value at each step's first token."""
        return x[self.row, self.start]

    def scatter(self, per_token: Tensor) -> Tensor:
        """[S, W] estimator output (0 off the steps' tokens) -> [B, R], 0 where no step token lies."""
        if self.flat is None:
            return per_token
        out = per_token.new_zeros(self.mask.numel())
        out[self.flat[self.valid]] = per_token[self.valid]
        return out.view(self.mask.shape)

    def owners(self) -> Tensor:
        """[B, R]: the step each position counts for (the last one started at or before it, else the
        row's first); -1 in a row without a step."""
        per_row = self.is_start.sum(1)
        first = per_row.cumsum(0) - per_row  # the number of each row's first step
        owner = first[:, None] + (self.is_start.cumsum(1) - 1).clamp(min=0)
        return torch.where(per_row[:, None] > 0, owner, torch.full_like(owner, -1))


def step_layout(response_mask: Tensor) -> StepLayout:
    """Find the steps (runs of mask-1 tokens) of every row of ``response_mask`` [B, R]."""
    mask = response_mask > 0
    rows, length = mask.shape
    is_start = mask & ~F.pad(mask[:, :-1], (1, 0))
    row, start = is_start.nonzero(as_tuple=True)  # row-major: rows in order, steps in token order
    if row.numel() == rows and not bool(start.any()):
        return StepLayout(mask, is_start, row, start, mask.sum(1), None, mask)
    _, end = (mask & ~F.pad(mask[:, 1:], (0, 1))).nonzero(as_tuple=True)
    run = end - start + 1
    width = int(run.max()) if run.numel() else 0
    offsets = torch.arange(width, device=mask.device)
    flat = row[:, None] * length + (start[:, None] + offsets).clamp(max=max(length - 1, 0))
    return StepLayout(mask, is_start, row, start, run, flat, offsets[None, :] < run[:, None])


def group_ids(index: Sequence[Any]) -> Tensor:
    """Prompt uids [B] -> group numbers in order of first appearance (ascending when a prompt's rows
    sit together, which keeps the estimators on their fast path)."""
    _, first, inverse = np.unique(np.asarray(index, dtype=str), return_index=True, return_inverse=True)
    rank = np.empty_like(first)
    rank[np.argsort(first)] = np.arange(first.size)
    return torch.as_tensor(rank[inverse.reshape(-1)], dtype=torch.long)


def step_batch(
    layout: StepLayout,
    token_level_rewards: Tensor,
    index: Sequence[Any],
    *,
    values: Tensor | None = None,
    anchors: Tensor | None = None,
) -> StepBatch:
    """verl's rows as step rows: rewards, values and anchor ids per step, prompt uid as the group.

    A reward on a position outside every step (a tool token after a step, say) is added to the last
    token of the step it counts for, so every step reward r_t = the sum of its row of the StepBatch.
    """
    rewards = layout.gather(token_level_rewards)
    off_steps = token_level_rewards.masked_fill(layout.mask, 0)
    if bool(off_steps.any()):
        outside = off_steps != 0
        owner = layout.owners()[outside]
        kept = owner >= 0
        carried = rewards.new_zeros(layout.steps).index_add_(
            0, owner[kept], off_steps[outside][kept].to(rewards.dtype)
        )
        rewards = rewards.masked_fill(~layout.valid, 0) if layout.flat is None else rewards
        rewards[torch.arange(layout.steps, device=rewards.device), layout.length - 1] += carried
    group_of_row = group_ids(index).to(layout.row.device)
    return StepBatch(
        token_rewards=rewards,
        response_mask=layout.valid.to(rewards.dtype),
        values=None if values is None else layout.gather(values.to(rewards.dtype)),
        traj_index=layout.row,
        group_index=group_of_row[layout.row],
        anchor_index=None if anchors is None else layout.at_starts(anchors).long(),
    )


def verl_advantages(
    name: str,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Sequence[Any],
    *,
    values: Tensor | None = None,
    anchors: Tensor | None = None,
    params: EstimatorParams = DEFAULT_PARAMS,
) -> tuple[Tensor, Tensor]:
    """``ESTIMATORS[name]`` on verl's rows: (advantages, returns), both [B, R], 0 off the steps.

    token_level_rewards, response_mask, values, anchors: [B, R]; index: [B] prompt uids.
    """
    layout = step_layout(response_mask)
    batch = step_batch(layout, token_level_rewards, index, values=values, anchors=anchors)
    advantages, returns = ESTIMATORS.get(name)(batch, params)
    return layout.scatter(advantages), layout.scatter(returns)


# -- verl's estimator interface -------------------------------------------------------------------


def estimator_parameters(config: Mapping[str, Any] | None) -> EstimatorParams:
    """Our estimator parameters from verl's algorithm config (a DictConfig or AlgoConfig; None: defaults)."""
    if config is None:
        return DEFAULT_PARAMS
    ours = config.get(ALGORITHM_KEY) or {}
    return EstimatorParams(
        gamma=float(config.get("gamma", 1.0)),
        lam=float(config.get("lam", 1.0)),
        norm_adv_by_std=bool(config.get("norm_adv_by_std_in_grpo", True)),
        step_weight=float(ours.get(STEP_WEIGHT_KEY, 1.0)),
    )


@dataclass(frozen=True)
class VerlEstimator:
    """One of :data:`ESTIMATORS` with the signature verl calls registered estimators with.

    verl's ``compute_advantage`` passes ``token_level_rewards``, ``response_mask``, ``index`` (the
    prompt uids) and ``config`` (the algorithm config); :func:`install` adds ``values`` and
    ``anchors`` for the estimators that read them.
    """

    name: str

    @property
    def verl_name(self) -> str:
        return verl_estimator_name(self.name)

    @property
    def reads_step_inputs(self) -> bool:
        return self.name in CRITIC_ESTIMATORS or self.name in ANCHOR_ESTIMATORS

    def __call__(
        self,
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: Sequence[Any] | None = None,
        config: Mapping[str, Any] | None = None,
        values: Tensor | None = None,
        anchors: Tensor | None = None,
        **unused: Any,
    ) -> tuple[Tensor, Tensor]:
        if index is None:
            raise ValueError(f"estimator {self.name!r} needs the prompt uid of every row (verl's index)")
        return verl_advantages(
            self.name,
            token_level_rewards,
            response_mask,
            index,
            values=values,
            anchors=anchors,
            params=estimator_parameters(config),
        )


VERL_ESTIMATORS: dict[str, VerlEstimator] = {
    verl_estimator_name(name): VerlEstimator(name) for name in ESTIMATORS.names()
}


# -- the hook -------------------------------------------------------------------------------------


def _fields_from_transfer_queue(batch_keys: Sequence[str], names: Sequence[str]) -> dict[str, Tensor]:
    """Fields ``names`` of the training rows ``batch_keys`` from TransferQueue, each padded to [B, R]."""
    import transfer_queue as tq

    fields = tq.kv_batch_get(keys=list(batch_keys), partition_id=TRAIN_PARTITION, select_fields=list(names))
    padded = fields.to_padded_tensor()
    return {name: padded[name] for name in names}


def _anchors_from_transfer_queue(batch_keys: Sequence[str]) -> Tensor:
    """The :data:`ANCHOR_FIELD` of the training rows ``batch_keys`` as [B, R], from TransferQueue."""
    return _fields_from_transfer_queue(batch_keys, [ANCHOR_FIELD])[ANCHOR_FIELD]


def _mark_in_transfer_queue(batch_keys: Sequence[str], flags: Tensor) -> None:
    """Store ``flags`` [B] as the :data:`~.signals.KEPT_FIELD` of the training rows ``batch_keys``."""
    import transfer_queue as tq
    from tensordict import TensorDict

    fields = TensorDict({KEPT_FIELD: flags}, batch_size=[len(batch_keys)])
    tq.kv_batch_put(keys=list(batch_keys), partition_id=TRAIN_PARTITION, fields=fields)


def with_step_inputs(
    verl_step: Callable[..., Any],
    anchors_for: Callable[[Sequence[str]], Tensor] = _anchors_from_transfer_queue,
    *,
    fetch: Fetch = _fields_from_transfer_queue,
    mark: Mark = _mark_in_transfer_queue,
    reporter_for: Callable[[], Reporter | None] = run_reporter,
) -> Callable[..., Any]:
    """verl v1's advantage step (``compute_advantage_for_multi_trajectories``) that gives our
    estimators the critic values and anchor ids verl's own call leaves out (others go to
    ``verl_step``), then sends the kept trajectories' per-token signals and marks their rows for the
    actor update (:mod:`.signals`).

    ``data`` holds the batch verl fetched for the step (rewards after any KL penalty, the response
    mask, the rollout, old and reference log-probs, the critic's ``values`` when there is a critic,
    the ``uid`` of every row).
    """

    def compute_advantage_for_multi_trajectories(
        data: Any, batch_keys: Sequence[str], adv_estimator: Any, **kwargs: Any
    ) -> Any:
        estimator = VERL_ESTIMATORS.get(str(getattr(adv_estimator, "value", adv_estimator)))
        if estimator is None or not estimator.reads_step_inputs:
            data = verl_step(data, batch_keys=batch_keys, adv_estimator=adv_estimator, **kwargs)
        else:
            _our_advantages(data, batch_keys, estimator, anchors_for, kwargs.get("config"))
        report_token_signals(
            reporter_for(), data.batch, batch_keys, kwargs.get("config"), fetch=fetch, mark=mark
        )
        return data

    compute_advantage_for_multi_trajectories.agent_r1 = True  # type: ignore[attr-defined]
    return compute_advantage_for_multi_trajectories


def _our_advantages(
    data: Any,
    batch_keys: Sequence[str],
    estimator: VerlEstimator,
    anchors_for: Callable[[Sequence[str]], Tensor],
    config: Mapping[str, Any] | None,
) -> None:
    batch = data.batch
    values = batch["values"] if estimator.name in CRITIC_ESTIMATORS and has_field(batch, "values") else None
    anchors = anchors_for(batch_keys) if estimator.name in ANCHOR_ESTIMATORS else None
    if anchors is not None and anchors.shape != batch["response_mask"].shape:
        raise ValueError(
            f"{ANCHOR_FIELD} has shape {tuple(anchors.shape)}, the response mask "
            f"{tuple(batch['response_mask'].shape)}: the rows did not come from our agent loop"
        )
    batch["advantages"], batch["returns"] = estimator(
        token_level_rewards=batch["token_level_rewards"],
        response_mask=batch["response_mask"],
        index=data.non_tensor_batch["uid"],
        config=config,
        values=values,
        anchors=anchors,
    )


def install() -> None:
    """Register our estimators in verl's registry and route their step inputs; safe to call again.

    The registry is verl's own extension point. Critic values and anchor ids have none: verl's call
    of a registered estimator passes rewards, mask, uids and config only, and its v1 trainer fetches
    a fixed list of fields for the step, so the one hook wraps that step (docs/verl.md#advantages).
    """
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import trainer_base

    for verl_name, estimator in VERL_ESTIMATORS.items():
        if core_algos.ADV_ESTIMATOR_REGISTRY.get(verl_name) != estimator:
            core_algos.register_adv_est(verl_name)(estimator)
    current = trainer_base.compute_advantage_for_multi_trajectories
    if not getattr(current, "agent_r1", False):
        trainer_base.compute_advantage_for_multi_trajectories = with_step_inputs(current)
