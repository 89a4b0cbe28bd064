"""Our policy and value losses inside verl: each trajectory row split into its steps first.

A verl row is a whole multi-turn trajectory (``agent_loop.py``); our losses are defined over steps:
GSPO takes one importance ratio per step, and the seq-mean aggregations weigh every step the same.
The adapter finds the steps with the estimators' layout (:func:`~.estimators.step_layout`, one run of
mask-1 tokens per step), gathers log-probs, advantages and values into step rows, runs the function
of ``trainer.algos.losses`` that the torch backend runs, and scales the result the way verl scales a
micro-batch's loss, so that verl's sum over micro-batches and data-parallel ranks is the mini-batch
loss (docs/verl.md#policy-losses).

Policy losses are registered in verl's policy-loss registry as ``agent_r1_<name>``; the critic's loss
has no registry, so :func:`install` points the v1 trainer's critic at :func:`verl_value_loss`, and
the actor workers' ``ppo_loss`` at :func:`verl_ppo_loss`, which hands the per-token ratio and clip
decision of the rows the run keeps signals of to :mod:`.signals` (docs/verl.md#token-signals).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypedDict

from torch import Tensor

from trainer.algos.losses import POLICY_LOSSES, LossInputs, LossParams, masked_mean, value_loss
from trainer.backends.verl import signals
from trainer.backends.verl.command import verl_loss_name
from trainer.backends.verl.estimators import StepLayout, step_layout
from trainer.backends.verl.metric_keys import VERL_KEY_ALIASES

# Where a policy loss leaves its per-token signals ([b, R], signals.UPDATE_SIGNALS) while
# verl_ppo_loss asks for them; None otherwise.
_CAPTURED: ContextVar[dict[str, Tensor] | None] = ContextVar("agent_r1_captured_signals", default=None)

# Our metric names (trainer.algos.losses, "actor/" + name on the torch backend) as verl spells them,
# so that verl's metrics of our losses reach the run under the keys its own losses use.
_VERL_KEYS = {ours: theirs for theirs, ours in VERL_KEY_ALIASES.items()}


def verl_metric_key(name: str) -> str:
    """verl's key for the metric ``name`` of our policy losses (``clipfrac`` → ``actor/pg_clipfrac``)."""
    key = f"actor/{name}"
    return _VERL_KEYS.get(key, key)


def micro_batch_scale(layout: StepLayout, agg_mode: str, batch_info: Mapping[str, Any]) -> float:
    """The weight of our loss over one micro-batch's steps in verl's sum over micro-batches.

    verl divides each micro-batch's loss by the whole mini-batch (``global_batch_info``: its token
    count for token-mean, its number of rows for the seq modes, over all data-parallel ranks) and
    multiplies by ``dp_size``, as the ranks average their gradients (core_algos.agg_loss). Our loss is
    the micro-batch's own mean, so it is weighted by tokens here / tokens in the mini-batch, or by
    steps here / rows (trajectories) in the mini-batch. Without batch info, verl's local
    normalisation: 1.
    """
    dp_size = int(batch_info.get("dp_size") or 1)
    if agg_mode == "token-mean":
        here, total = float(layout.mask.sum()), batch_info.get("batch_num_tokens")
    else:
        here, total = float(layout.steps), batch_info.get("global_batch_size")
    if total is None:
        if dp_size > 1:
            raise ValueError(f"verl gave no mini-batch size for {agg_mode} on {dp_size} data-parallel ranks")
        return 1.0
    return here / max(float(total), 1.0) * dp_size


class ClipParameters(TypedDict):
    clip_low: float
    clip_high: float
    dual_clip_c: float


def clip_parameters(config: Any) -> ClipParameters:
    """clip_low, clip_high and dual_clip_c from verl's actor config, read as verl's vanilla loss does."""
    if config is None:
        raise ValueError("verl called an agent_r1 policy loss without the actor config")
    clip = config.clip_ratio
    low = config.clip_ratio_low if config.clip_ratio_low is not None else clip
    high = config.clip_ratio_high if config.clip_ratio_high is not None else clip
    return {
        "clip_low": float(low),
        "clip_high": float(high),
        "dual_clip_c": float(config.get("clip_ratio_c", 3.0)),
    }


@dataclass(frozen=True)
class VerlPolicyLoss:
    """One of :data:`POLICY_LOSSES` with the signature verl calls registered policy losses with.

    verl 0.9.1 calls it once per micro-batch from ``workers/utils/losses.py`` ``ppo_loss`` with
    keyword arguments; all tensors are [b, R] trajectory rows and ``config`` is the actor config
    (``clip_ratio*``, ``global_batch_info``). Returns (loss, metrics) with float metrics, as verl's own.
    """

    name: str

    @property
    def verl_name(self) -> str:
        return verl_loss_name(self.name)

    def __call__(
        self,
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        if rollout_is_weights is not None:
            raise ValueError(
                f"policy loss {self.verl_name} does not apply rollout-correction weights: leave verl's "
                "algorithm.rollout_correction off"
            )
        layout = step_layout(response_mask)
        captured = _CAPTURED.get()
        token_out: dict[str, Tensor] | None = None if captured is None else {}
        inputs = LossInputs(
            layout.gather(log_prob),
            layout.gather(old_log_prob),
            layout.gather(advantages),
            layout.valid.to(log_prob.dtype),
            token_out=token_out,
        )
        params = LossParams(agg_mode=loss_agg_mode, **clip_parameters(config))
        loss, metrics = POLICY_LOSSES.get(self.name)(inputs, params)
        if captured is not None and token_out is not None:
            captured.update({name: layout.scatter(token_out[name]) for name in signals.UPDATE_SIGNALS})
        scale = micro_batch_scale(layout, loss_agg_mode, config.global_batch_info)
        return loss * scale, {verl_metric_key(key): float(value) for key, value in metrics.items()}


VERL_POLICY_LOSSES: dict[str, VerlPolicyLoss] = {
    verl_loss_name(name): VerlPolicyLoss(name) for name in POLICY_LOSSES.names()
}


def verl_ppo_loss(
    config: Any, model_output: Any, data: Any, dp_group: Any = None
) -> tuple[Tensor, dict[str, Any]]:
    """verl's actor loss (``workers/utils/losses.py`` ``ppo_loss``, unchanged), and for the rows the
    driver marked (:data:`.signals.KEPT_FIELD`) the ratio and clip decision our policy loss computed
    per token, sent to the run: the trajectory page's update-time signals (docs/verl.md#token-signals).

    A micro-batch is seen once per PPO epoch; the last one sent wins, as on the torch backend.
    """
    from verl.workers.utils.losses import ppo_loss

    if not signals.has_field(data, signals.KEPT_FIELD):
        return ppo_loss(config, model_output, data, dp_group)
    captured: dict[str, Tensor] = {}
    token = _CAPTURED.set(captured)
    try:
        loss, metrics = ppo_loss(config, model_output, data, dp_group)
    finally:
        _CAPTURED.reset(token)
    signals.report_update_signals(signals.run_reporter(), data, captured)
    return loss, metrics


def verl_value_loss(
    config: Any, model_output: Any, data: Any, dp_group: Any = None
) -> tuple[Tensor, dict[str, Any]]:
    """Our clipped value loss over the steps of a critic micro-batch, in place of verl's ``value_loss``
    (``workers/utils/losses.py``), with its signature, inputs and metric keys."""
    from verl.utils.metric import AggregationType, Metric
    from verl.workers.utils.padding import no_padding_2_padding

    vpreds = no_padding_2_padding(model_output["values"], data)
    batch_info = {key: data[key] for key in ("dp_size", "batch_num_tokens", "global_batch_size")}
    fields = data.select("values", "returns", "response_mask").to_padded_tensor()
    mask = fields["response_mask"]
    layout = step_layout(mask)
    loss, metrics = value_loss(
        layout.gather(vpreds),
        layout.gather(fields["values"]),
        layout.gather(fields["returns"]),
        layout.valid.to(vpreds.dtype),
        clip=config.cliprange_value,
        agg_mode=config.loss_agg_mode,
    )
    loss = loss * micro_batch_scale(layout, config.loss_agg_mode, batch_info)
    # Scaled by the mini-batch, micro-batch losses add up to its loss (verl sums the metric then).
    global_norm = batch_info["batch_num_tokens"] is not None or batch_info["global_batch_size"] is not None
    aggregation = AggregationType.SUM if global_norm or batch_info["dp_size"] > 1 else AggregationType.MEAN
    return loss, {
        "critic/vf_loss": Metric(value=loss.detach(), aggregation=aggregation),
        "critic/vf_clipfrac": float(metrics["vf_clipfrac"]),
        "critic/vpred_mean": float(masked_mean(vpreds.detach(), mask)),
    }


def install() -> None:
    """Register our policy losses in verl, give the v1 trainer's critic our value loss and the actor
    workers our wrapper of their loss; safe to call again.

    ``core_algos.register_policy_loss`` is verl's extension point for policy losses. The critic's loss
    has none: ``trainer/ppo/v1/trainer_base.py`` hands ``partial(value_loss, config=...)`` to the
    critic workers from its module namespace, so that name is pointed here (docs/verl.md#policy-losses).
    The actor workers build theirs the same way from ``workers/engine_workers.py``'s ``ppo_loss``
    (``init_model``, after this hook has run in their process).
    """
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.v1 import trainer_base
    from verl.workers import engine_workers

    for verl_name, loss in VERL_POLICY_LOSSES.items():
        if core_algos.POLICY_LOSS_REGISTRY.get(verl_name) != loss:
            core_algos.register_policy_loss(verl_name)(loss)
    trainer_base.value_loss = verl_value_loss
    engine_workers.ppo_loss = verl_ppo_loss
