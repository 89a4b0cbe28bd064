"""The torch backend's SFT mode (``sft.enabled``): the policy learns to write the assistant turns of
demonstrations, with the loss on those tokens only (docs/sft.md#the-sft-stage).

One step: trainer.batch_size conversations, packed into rows of at most sft.max_length tokens,
optim.micro_batch_size rows per forward and backward pass, one optimizer step with the loss averaged
over every trained token of the batch. Validation loss on data.val_path's conversations every
trainer.val_every steps and at the end; checkpoints as a training run writes them, so an RL run can
start from one (``start_from``) and an evaluation can score one.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from trainer.backends.torch.checkpoint import load_training_state
from trainer.backends.torch.checkpoint_folders import latest_checkpoint
from trainer.backends.torch.data import batch_for_step
from trainer.backends.torch.fork import keep_start_optimizer
from trainer.backends.torch.loop import (
    TrainResult,
    initial_weights,
    load_trained_policy,
    resolve_device,
    save_and_prune,
    thread_budget,
)
from trainer.backends.torch.optim import adamw
from trainer.backends.torch.sft_data import (
    IGNORED,
    Example,
    PackedBatch,
    encode,
    load_conversations,
    pack,
    packed_batch,
)
from trainer.backends.torch.update import Models, optimizer_step
from trainer.contract import (
    ACTOR_GRAD_NORM,
    ACTOR_LR,
    POLICY_FOLDER,
    SFT_LOSS,
    SFT_TOKENS_PER_S,
    SFT_TRAINED_TOKENS,
    TIMING_STEP_S,
    TIMING_VAL_S,
    VAL_LOSS,
)
from trainer.models import load_tokenizer, resolve_model_path
from trainer.rollout import stop_token_ids

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.report.reporters import Reporter

logger = logging.getLogger(__name__)


@dataclass
class SftRun:
    config: RunConfig
    tokenizer: Any
    models: Models
    train: list[Example]
    val: list[Example]
    start_step: int = 1
    last_metrics: dict[str, float] = field(default_factory=dict)

    @property
    def generators(self) -> dict[str, torch.Generator]:
        return {}  # the data order is a function of the seed and the step (batch_for_step)


def encode_file(config: RunConfig, tokenizer: Any, path: str, *, limit: int | None = None) -> list[Example]:
    """Every conversation of a demonstrations file, encoded as the run's flows prompt the model."""
    stops = set(stop_token_ids(tokenizer))
    return [
        encode(
            tokenizer,
            conversation,
            tool_format=config.rollout.tool_format,
            stop_ids=stops,
            max_length=config.sft.max_length,
        )
        for conversation in load_conversations(path, limit=limit)
    ]


def setup_sft(config: RunConfig) -> SftRun:
    """Seed, encode the demonstrations, load the policy (from the latest checkpoint when resuming)."""
    random.seed(config.trainer.seed)
    torch.manual_seed(config.trainer.seed)
    device = resolve_device(config.trainer.device)
    if not config.data.train_path:
        raise ValueError("data.train_path is empty: set it to a parquet file of demonstrations")
    tokenizer = load_tokenizer(
        resolve_model_path(config.model.path), trust_remote_code=config.model.trust_remote_code
    )
    train = encode_file(config, tokenizer, config.data.train_path)
    val = (
        encode_file(config, tokenizer, config.data.val_path, limit=config.data.val_max_samples)
        if config.data.val_path
        else []
    )
    resume_from = latest_checkpoint(config.trainer.checkpoint_dir) if config.trainer.resume else None
    weights = resume_from / POLICY_FOLDER if resume_from else initial_weights(config)
    policy = load_trained_policy(config, weights).to(device)
    if config.model.gradient_checkpointing:
        policy.gradient_checkpointing_enable()
        if config.model.lora_rank > 0:  # frozen embeddings: checkpointed layers need an input with a gradient
            policy.enable_input_require_grads()
    optimizer = adamw(policy.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
    models = Models(
        policy=policy, actor_optimizer=optimizer, pad_token_id=int(tokenizer.pad_token_id), device=device
    )
    run = SftRun(config, tokenizer, models, train, val)
    if resume_from is None:
        keep_start_optimizer(config, models)
    if resume_from is not None:
        resumed = load_training_state(resume_from, models, generators=run.generators)
        run.start_step, run.last_metrics = resumed.step + 1, dict(resumed.state.get("metrics") or {})
    logger.info(
        "SFT on %d conversations (%d trained tokens), %d for validation, from %s",
        len(train),
        sum(example.trained_tokens for example in train),
        len(val),
        weights,
    )
    return run


def loss_sum(policy: Any, batch: PackedBatch) -> torch.Tensor:
    """The summed cross-entropy of the trained tokens of a packed batch. The LM head runs on those
    positions only: on a 135M model with a 49k vocabulary it is the largest matmul."""
    dtype = policy.dtype
    mask = torch.zeros(batch.attention_mask.shape, dtype=dtype, device=batch.attention_mask.device)
    mask = mask.masked_fill(~batch.attention_mask, torch.finfo(dtype).min)
    hidden = policy.get_decoder()(
        input_ids=batch.input_ids, attention_mask=mask, position_ids=batch.position_ids, use_cache=False
    ).last_hidden_state
    trained = batch.labels != IGNORED
    logits = policy.get_output_embeddings()(hidden[trained])
    return F.cross_entropy(logits.float(), batch.labels[trained], reduction="sum")


def _chunks(rows: list[list[int]], size: int) -> list[list[list[int]]]:
    return [rows[start : start + size] for start in range(0, len(rows), size)]


def sft_step(run: SftRun, step: int) -> dict[str, float]:
    """One optimizer step on the step's conversations; its metrics."""
    config, models = run.config, run.models
    started = time.perf_counter()
    examples = batch_for_step(
        run.train, step, config.trainer.batch_size, seed=config.trainer.seed, shuffle=config.data.shuffle
    )
    rows = pack(examples, config.sft.max_length)
    trained = sum(example.trained_tokens for example in examples)
    lr = config.optim.lr * (min(1.0, step / config.optim.warmup_steps) if config.optim.warmup_steps else 1.0)
    for group in models.actor_optimizer.param_groups:
        group["lr"] = lr
    models.policy.train()
    total = 0.0
    for chunk in _chunks(rows, config.optim.micro_batch_size):
        batch = packed_batch(examples, chunk, models.pad_token_id).to(models.device)
        loss = loss_sum(models.policy, batch)
        (loss / max(trained, 1)).backward()
        total += float(loss.detach())
    grad_norm = optimizer_step(models.actor_optimizer, config.optim.grad_clip)
    elapsed = time.perf_counter() - started
    tokens = sum(len(example.input_ids) for example in examples)
    return {
        SFT_LOSS: total / max(trained, 1),
        SFT_TRAINED_TOKENS: float(trained),
        SFT_TOKENS_PER_S: tokens / max(elapsed, 1e-9),
        ACTOR_LR: lr,
        ACTOR_GRAD_NORM: grad_norm,
        TIMING_STEP_S: elapsed,
    }


@torch.no_grad()
def validation_loss(run: SftRun) -> dict[str, float]:
    """The mean loss per trained token over every validation conversation."""
    started = time.perf_counter()
    run.models.policy.eval()
    rows = pack(run.val, run.config.sft.max_length)
    total, trained = 0.0, 0
    for chunk in _chunks(rows, run.config.optim.micro_batch_size):
        batch = packed_batch(run.val, chunk, run.models.pad_token_id).to(run.models.device)
        total += float(loss_sum(run.models.policy, batch))
        trained += batch.trained_tokens
    return {VAL_LOSS: total / max(trained, 1), TIMING_VAL_S: time.perf_counter() - started}


def _is_due(step: int, every: int, last: int) -> bool:
    return step == last or (every > 0 and step % every == 0)


def train_sft(
    config: RunConfig, reporter: Reporter, *, stop_event: threading.Event | None = None
) -> TrainResult:
    """Fine-tune ``config``'s policy for trainer.total_steps steps; statuses are the caller's, as for
    :func:`trainer.backends.torch.loop.train`."""
    threads = thread_budget(config)
    run = setup_sft(config)
    total = config.trainer.total_steps
    reporter.heartbeat(run.start_step - 1, total)
    last_step, checkpoint = run.start_step - 1, None
    for step in range(run.start_step, total + 1):
        if stop_event is not None and stop_event.is_set():
            checkpoint = save_and_prune(run, last_step, reporter) if last_step >= run.start_step else None
            return TrainResult(
                "cancelled", last_step, last_step - run.start_step + 1, run.last_metrics, checkpoint
            )
        threads.refresh()
        run.last_metrics = sft_step(run, step)
        last_step = step
        if run.val and _is_due(step, config.trainer.val_every, total):
            run.last_metrics.update(validation_loss(run))
        reporter.log_metrics(step, run.last_metrics)
        if _is_due(step, config.trainer.save_every, total):
            checkpoint = save_and_prune(run, step, reporter)
        reporter.heartbeat(step, total)
    return TrainResult("succeeded", last_step, last_step - run.start_step + 1, run.last_metrics, checkpoint)
