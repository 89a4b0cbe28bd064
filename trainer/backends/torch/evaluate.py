"""The torch backend's evaluation mode (``evaluation.enabled``): a model, or a checkpoint's
``policy/`` weights, samples rollout.n answers to every row of data.val_path through the shared
rollout layer, scored, with no update (docs/evaluations.md).

The rows go in batches of trainer.batch_size prompts, one reported step each (metrics, trajectories
and a heartbeat, as a training step reports), so the run page, the rollout viewer and the group
view read an evaluation as they read a training run; the ``eval/...`` metrics follow at the last step.
"""

from __future__ import annotations

import logging
import random
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from trainer.backends.torch.checkpoint import policy_folder
from trainer.backends.torch.data import load_rows
from trainer.backends.torch.engine import TorchGenerationEngine
from trainer.backends.torch.loop import (
    DTYPES,
    TrainResult,
    initial_weights,
    resolve_device,
    sampling_params,
    thread_budget,
)
from trainer.backends.torch.rollout import rollout
from trainer.evaluation import metrics_of, record_accuracy
from trainer.mdp import Trajectory
from trainer.models import load_policy, load_tokenizer, resolve_model_path
from trainer.rollout import rollout_metrics, score_rewards, stop_token_ids

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.report.reporters import Reporter

logger = logging.getLogger(__name__)


def frozen_engine(
    config: RunConfig, weights: Path, tokenizer: Any, device: torch.device, threads: Any
) -> TorchGenerationEngine:
    """A generation engine over the policy in ``weights``, loaded for inference only (evaluation,
    the playground)."""
    trust = config.model.trust_remote_code
    policy = load_policy(weights, dtype=DTYPES[config.model.dtype], trust_remote_code=trust)
    policy = policy.to(device).eval().requires_grad_(False)
    return TorchGenerationEngine(
        policy,
        stop_token_ids=stop_token_ids(tokenizer, policy.generation_config),
        pad_token_id=int(tokenizer.pad_token_id),
        device=device,
        seed=config.trainer.seed,
        threads=threads,
    )


def evaluated_weights(config: RunConfig) -> Path:
    """The folder whose weights are evaluated: the checkpoint's policy/, else the weights the
    experiment starts from (its start_from checkpoint, or model.path)."""
    if config.evaluation.checkpoint:
        return policy_folder(config.evaluation.checkpoint, "evaluation.checkpoint")
    return initial_weights(config)


def evaluate(
    config: RunConfig, reporter: Reporter, *, stop_event: threading.Event | None = None
) -> TrainResult:
    """Evaluate ``config``'s model on its val rows; statuses are the caller's, as for :func:`train`."""
    if not config.data.val_path:
        raise ValueError("an evaluation scores the rows of data.val_path: set data.val_path")
    threads = thread_budget(config)
    random.seed(config.trainer.seed)
    torch.manual_seed(config.trainer.seed)
    device = resolve_device(config.trainer.device)
    rows = load_rows(config.data.val_path, limit=config.data.val_max_samples)
    weights = evaluated_weights(config)
    # The tokenizer of the model the run started from: a checkpoint saves the same one beside its weights.
    tokenizer = load_tokenizer(
        resolve_model_path(config.model.path), trust_remote_code=config.model.trust_remote_code
    )
    engine = frozen_engine(config, weights, tokenizer, device, threads)
    k, size = config.rollout.n, config.trainer.batch_size
    batches = [rows[start : start + size] for start in range(0, len(rows), size)]
    total = len(batches)
    logger.info("evaluating %s on %d rows, %d samples each, in %d batches", weights, len(rows), k, total)
    reporter.heartbeat(0, total)
    scored: list[Trajectory] = []
    for step, prompts in enumerate(batches, start=1):
        if stop_event is not None and stop_event.is_set():
            logger.info("stop requested: stopped after batch %d of %d", step - 1, total)
            return TrainResult("cancelled", step - 1, step - 1, metrics_of(scored, k) if scored else {})
        trajectories = rollout(
            prompts,
            n=k,
            sampling=sampling_params(config),
            engine=engine,
            tokenizer=tokenizer,
            config=config,
            tag=f"eval{step}",
        )
        score_rewards(trajectories, prompts, k)
        record_accuracy(trajectories)
        reporter.log_metrics(step, rollout_metrics(trajectories))
        reporter.log_trajectories(step, trajectories)
        reporter.heartbeat(step, total)
        scored += trajectories
    metrics = metrics_of(scored, k)
    reporter.log_metrics(total, metrics)
    logger.info("evaluation done: %s", ", ".join(f"{key} {value:.4g}" for key, value in metrics.items()))
    return TrainResult("succeeded", total, total, metrics)
