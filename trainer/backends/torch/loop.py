"""The torch training loop: rollout → reward → advantage → update → log, one step at a time.

Single process, CPU or one GPU. Read :func:`train_step` for what one step does and :func:`train`
for the run around it (validation, checkpoints, resume, cancellation).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch

from trainer.backends.torch.batch import StepRows, flatten
from trainer.backends.torch.checkpoint import (
    folder_size,
    load_training_state,
    policy_folder,
    prune_checkpoints,
    save_checkpoint,
)
from trainer.backends.torch.checkpoint_folders import checkpoint_step, latest_checkpoint
from trainer.backends.torch.data import Row, batch_for_step, load_rows
from trainer.backends.torch.engine import TorchGenerationEngine
from trainer.backends.torch.fork import keep_start_optimizer
from trainer.backends.torch.optim import adamw
from trainer.backends.torch.rollout import rollout
from trainer.backends.torch.threads import ThreadBudget
from trainer.backends.torch.timing import timed
from trainer.backends.torch.update import (
    Models,
    Prepared,
    is_on_policy,
    kl_enabled,
    prepare_update,
    token_signals_of,
    update_policy,
)
from trainer.contract import (
    ACTOR_LR,
    PERF_GENERATED_TOKENS,
    PERF_SAMPLES_PER_S,
    PERF_TOKENS_PER_S,
    POLICY_FOLDER,
    TIMING_CHECKPOINT_S,
    TIMING_ENV_S,
    TIMING_GENERATE_S,
    TIMING_REWARD_S,
    TIMING_ROLLOUT_S,
    TIMING_STEP_S,
    TIMING_UPDATE_S,
    TIMING_VAL_S,
)
from trainer.llm import SamplingParams
from trainer.models import (
    ValueHeadModel,
    is_adapter,
    load_policy,
    load_tokenizer,
    resolve_model_path,
    with_lora,
)
from trainer.report.token_signals import kept_trajectories
from trainer.rollout import rollout_metrics, score_rewards, stop_token_ids, validation_metrics

if TYPE_CHECKING:
    from trainer.config import RunConfig
    from trainer.report.reporters import Reporter

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    status: Literal["succeeded", "cancelled"]
    last_step: int  # the last completed training step (the resume point's step when none ran)
    steps_run: int  # steps this call ran (a resumed run counts from where it picked up)
    metrics: dict[str, float] = field(default_factory=dict)  # the last step's
    checkpoint: Path | None = None


@dataclass
class Run:
    """Everything a training run holds between steps."""

    config: RunConfig
    tokenizer: Any
    models: Models
    engine: TorchGenerationEngine
    minibatch_generator: torch.Generator
    train_rows: list[Row]
    val_rows: list[Row]
    start_step: int = 1
    last_metrics: dict[str, float] = field(default_factory=dict)
    threads: ThreadBudget | None = None

    @property
    def generators(self) -> dict[str, torch.Generator]:
        return {"sampler": self.engine.generator, "minibatch": self.minibatch_generator}


# -- setup ------------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("trainer.device is cuda but torch sees no GPU: set trainer.device to cpu or auto")
    return torch.device(name)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # model.dtype's choices


def initial_weights(config: RunConfig) -> Path:
    """The weights a run starts from: the policy of its start_from checkpoint (docs/sft.md#start-from),
    else model.path."""
    if config.start_from.checkpoint:
        return policy_folder(config.start_from.checkpoint, "start_from.checkpoint")
    return resolve_model_path(config.model.path)


def load_trained_policy(config: RunConfig, path: Path) -> Any:
    """The policy to train from ``path``: every weight, or LoRA adapters (model.lora_rank). A LoRA
    checkpoint of this run's own resumes its adapters; a start_from checkpoint is merged first, so
    the new adapters (and the reference, their base) start from the model it holds."""
    lora = config.model.lora_rank > 0
    starts_from_checkpoint = bool(config.start_from.checkpoint) and path == initial_weights(config)
    continues_adapters = lora and is_adapter(path) and not starts_from_checkpoint
    policy = load_policy(
        path,
        dtype=DTYPES[config.model.dtype],
        trust_remote_code=config.model.trust_remote_code,
        trainable_adapter=continues_adapters,
    )
    if lora and not continues_adapters:
        return with_lora(policy, rank=config.model.lora_rank, alpha=config.model.lora_alpha)
    # A merged adapter comes back frozen (PEFT loads it for inference); full fine-tuning trains it all.
    return policy if lora else policy.requires_grad_(True)


def build_models(config: RunConfig, device: torch.device, tokenizer: Any, checkpoint: Path | None) -> Models:
    """Policy and critic (from ``checkpoint`` when resuming), reference (the original model), optimizers.

    Every model's weights are in ``model.dtype``; the optimizers keep fp32 masters of bf16 weights.
    """
    initial = initial_weights(config)
    dtype, remote = DTYPES[config.model.dtype], config.model.trust_remote_code
    policy = load_trained_policy(config, checkpoint / POLICY_FOLDER if checkpoint else initial).to(device)
    lora = config.model.lora_rank > 0
    reference = None
    wants_reference = config.algorithm.kl_mode != "none" and config.algorithm.kl_coef > 0
    if wants_reference and not lora:
        # Always the model training started from, also on resume: the KL anchors to it.
        # (With LoRA the original model is the policy with its adapters off: Models.reference_model.)
        reference = (
            load_policy(initial, dtype=dtype, trust_remote_code=remote)
            .to(device)
            .eval()
            .requires_grad_(False)
        )
    critic = critic_optimizer = None
    if config.use_critic:
        critic_path = checkpoint / "critic" if checkpoint else resolve_model_path(config.model.path)
        critic = ValueHeadModel.from_pretrained(critic_path, dtype=dtype, trust_remote_code=remote).to(device)
        critic_optimizer = adamw(
            critic.parameters(), lr=config.optim.critic_lr, weight_decay=config.optim.weight_decay
        )
    if config.model.gradient_checkpointing:
        for model in (policy, critic.backbone if critic is not None else None):
            if model is not None:
                # transformers 5.24 renamed it; the old name still works but warns.
                enable = (
                    getattr(model, "activation_checkpointing_enable", None)
                    or model.gradient_checkpointing_enable
                )
                enable()
        if lora:  # frozen embeddings: checkpointed layers need an input that asks for a gradient
            policy.enable_input_require_grads()
    actor_optimizer = adamw(policy.parameters(), lr=config.optim.lr, weight_decay=config.optim.weight_decay)
    return Models(
        policy=policy,
        actor_optimizer=actor_optimizer,
        pad_token_id=int(tokenizer.pad_token_id),
        device=device,
        reference=reference,
        critic=critic,
        critic_optimizer=critic_optimizer,
        share_prefixes=not config.model.gradient_checkpointing,
        reference_is_base=wants_reference and lora,
    )


def setup_run(config: RunConfig) -> Run:
    """Seed, load data and models (from the latest checkpoint when resuming), build the engine."""
    threads = thread_budget(config)
    random.seed(config.trainer.seed)
    torch.manual_seed(config.trainer.seed)
    device = resolve_device(config.trainer.device)
    if not config.data.train_path:
        raise ValueError("data.train_path is empty: set it to a parquet file of training rows")
    train_rows = load_rows(config.data.train_path)
    val_rows = (
        load_rows(config.data.val_path, limit=config.data.val_max_samples) if config.data.val_path else []
    )
    base = resolve_model_path(config.model.path)
    resume_from = latest_checkpoint(config.trainer.checkpoint_dir) if config.trainer.resume else None
    tokenizer = load_tokenizer(base, trust_remote_code=config.model.trust_remote_code)
    models = build_models(config, device, tokenizer, resume_from)
    engine = TorchGenerationEngine(
        models.policy,
        stop_token_ids=stop_token_ids(tokenizer, models.policy.generation_config),
        pad_token_id=int(tokenizer.pad_token_id),
        device=device,
        seed=config.trainer.seed,
        threads=threads,
    )
    minibatch_generator = torch.Generator().manual_seed(config.trainer.seed + 1)
    run = Run(config, tokenizer, models, engine, minibatch_generator, train_rows, val_rows, threads=threads)
    if resume_from is None:
        keep_start_optimizer(config, models)
    if resume_from is not None:
        resumed = load_training_state(resume_from, models, generators=run.generators)
        run.start_step = resumed.step + 1
        run.last_metrics = dict(resumed.state.get("metrics") or {})
        logger.info("resuming from %s (step %d)", resume_from, resumed.step)
    return run


# -- one training step ------------------------------------------------------------------------


def thread_budget(config: RunConfig) -> ThreadBudget:
    """At most trainer.num_threads (torch's default when unset), fewer while the machine is busy."""
    threads = ThreadBudget(config.trainer.num_threads or torch.get_num_threads())
    threads.refresh()
    return threads


def sampling_params(config: RunConfig, *, greedy: bool = False) -> SamplingParams:
    return SamplingParams(
        temperature=config.rollout.temperature,
        top_p=config.rollout.top_p,
        max_new_tokens=config.rollout.max_new_tokens,
        greedy=greedy or config.rollout.temperature == 0,
    )


def set_learning_rates(run: Run, step: int) -> float:
    """Linear warmup over ``optim.warmup_steps`` training steps, then constant."""
    warmup = run.config.optim.warmup_steps
    factor = min(1.0, step / warmup) if warmup > 0 else 1.0
    for group in run.models.actor_optimizer.param_groups:
        group["lr"] = run.config.optim.lr * factor
    if run.models.critic_optimizer is not None:
        for group in run.models.critic_optimizer.param_groups:
            group["lr"] = run.config.optim.critic_lr * factor
    return run.config.optim.lr * factor


def train_step(run: Run, step: int, reporter: Reporter) -> dict[str, float]:
    config = run.config
    if run.threads is not None:
        run.threads.refresh()
    started, generating = time.perf_counter(), run.engine.busy_s
    prompts = batch_for_step(
        run.train_rows, step, config.trainer.batch_size, seed=config.trainer.seed, shuffle=config.data.shuffle
    )
    # 1. rollout: n samples per prompt through the flows, generation batched across all of them
    trajectories = rollout(
        prompts,
        n=config.rollout.n,
        sampling=sampling_params(config),
        engine=run.engine,
        tokenizer=run.tokenizer,
        config=config,
        tag=f"step{step}",
    )
    rollout_s = time.perf_counter() - started
    generate_s = run.engine.busy_s - generating  # the rest of the rollout: envs and tools
    timings = {TIMING_GENERATE_S: generate_s, TIMING_ENV_S: max(0.0, rollout_s - generate_s)}
    # 2. reward: the reward function scores every final answer
    with timed(timings, TIMING_REWARD_S):
        score_rewards(trajectories, prompts, config.rollout.n)
    metrics = rollout_metrics(trajectories) | timings
    updated = time.perf_counter()
    trainable = [t for t in trajectories if t.steps]
    if trainable:
        # 3. advantage: values, π_old and π_ref where needed, then the estimator
        rows = flatten(trainable)
        prepared = prepare_update(rows, run.models, config)
        # 4. update: critic, then actor over mini-batches of whole trajectories
        metrics[ACTOR_LR] = set_learning_rates(run, step)
        metrics.update(update_policy(rows, prepared, run.models, config, generator=run.minibatch_generator))
        keep_token_signals(run, rows, prepared)
    else:
        logger.warning(
            "step %d: no trajectory has a step (every prompt is over data.max_prompt_length?)", step
        )
    update_s = time.perf_counter() - updated
    # 5. log
    generated = float(sum(len(s.response_ids) for t in trajectories for s in t.steps))
    metrics.update(
        {
            TIMING_ROLLOUT_S: rollout_s,
            TIMING_UPDATE_S: update_s,
            TIMING_STEP_S: time.perf_counter() - started,
            PERF_SAMPLES_PER_S: len(trajectories) / max(rollout_s + update_s, 1e-9),
            PERF_GENERATED_TOKENS: generated,
            PERF_TOKENS_PER_S: generated / generate_s if generate_s > 0 else 0.0,
        }
    )
    reporter.log_metrics(step, metrics)
    reporter.log_trajectories(step, trajectories)
    return metrics


def token_signal_trajectories(config: RunConfig, count: int) -> list[int]:
    """Which of a step's ``count`` trajectories keep their per-token signals (report.token_signals)."""
    return kept_trajectories(config.report.token_signals, config.report.token_signals_per_step, count)


def keep_token_signals(run: Run, rows: StepRows, prepared: Prepared) -> None:
    """Put the per-token signals and each token's text on the steps of the kept trajectories."""
    for t in token_signal_trajectories(run.config, len(rows.trajectories)):
        for row in rows.rows_of_traj[t]:
            step = rows.steps[row]
            step.token_texts = run.tokenizer.batch_decode([[token] for token in step.response_ids])
            step.token_signals = token_signals_of(rows, prepared, row)


def validate(run: Run, step: int) -> dict[str, float]:
    """Greedy decoding on the validation rows: ``val/<task>/acc`` per data_source."""
    started = time.perf_counter()
    trajectories = rollout(
        run.val_rows,
        n=1,
        sampling=sampling_params(run.config, greedy=True),
        engine=run.engine,
        tokenizer=run.tokenizer,
        config=run.config,
        tag=f"val{step}",
    )
    score_rewards(trajectories, run.val_rows, 1)
    metrics = validation_metrics(trajectories, run.config.task)
    metrics[TIMING_VAL_S] = time.perf_counter() - started
    return metrics


# -- the run ----------------------------------------------------------------------------------


class Checkpointable(Protocol):
    """What a checkpoint saves of a run, RL (Run) or SFT (SftRun)."""

    config: RunConfig
    tokenizer: Any
    models: Models
    last_metrics: dict[str, float]

    @property
    def generators(self) -> dict[str, torch.Generator]: ...


def save_and_prune(run: Checkpointable, step: int, reporter: Reporter) -> Path | None:
    """Checkpoint ``step`` (weights, plus optimizer and RNG states when the run is resumable), then
    delete the oldest beyond trainer.keep_checkpoints (docs/checkpoints.md)."""
    config, metrics = run.config, run.last_metrics
    trainer = config.trainer
    if not trainer.checkpoint_dir:
        return None
    if trainer.resume:  # a resume from this checkpoint supersedes only the steps after it
        reporter.settle()
    path = save_checkpoint(
        trainer.checkpoint_dir,
        step,
        run.models,
        run.tokenizer,
        generators=run.generators,
        metrics=metrics,
        config_json=config.to_json(),
        resumable=trainer.resume,
    )
    reporter.log_checkpoint(step, str(path), metrics, size_bytes=folder_size(path))
    if trainer.keep_checkpoints is not None:
        for old in prune_checkpoints(trainer.checkpoint_dir, trainer.keep_checkpoints):
            reporter.log_checkpoint(checkpoint_step(old), str(old), deleted=True)
    return path


def _is_due(step: int, every: int, last: int) -> bool:
    return step == last or (every > 0 and step % every == 0)


def _describe(run: Run) -> str:
    config = run.config
    trajectories = config.trainer.batch_size * config.rollout.n
    old = "reused from the current policy (one epoch, one mini-batch)"
    if not is_on_policy(config, trajectories) or kl_enabled(config, "reward"):
        old = "a separate no-grad pass"
    return (
        f"torch backend on {run.models.device}: preset {config.preset}, estimator {config.algorithm.estimator}, "
        f"loss {config.algorithm.policy_loss}, π_old {old}, reference model "
        f"{_reference_description(run.models)}, critic "
        f"{'trained' if run.models.critic is not None else 'none'}"
    )


def _reference_description(models: Models) -> str:
    if models.reference is not None:
        return "loaded"
    return "the policy with its LoRA adapters off" if models.reference_is_base else "not needed"


def train(config: RunConfig, reporter: Reporter, *, stop_event: threading.Event | None = None) -> TrainResult:
    """Train ``config`` to ``trainer.total_steps``, reporting metrics, trajectories, heartbeats and checkpoints.

    Checks ``stop_event`` between steps: when set, writes a checkpoint (with
    trainer.checkpoint_on_cancel) and returns a result with status ``cancelled``. Run statuses are the
    caller's to report (the CLI owns them), and exceptions propagate so the caller can report ``failed``.
    """
    run = setup_run(config)
    total = config.trainer.total_steps
    logger.info(_describe(run))
    if run.start_step > 1:
        logger.info("resumed: continuing at step %d of %d", run.start_step, total)
    reporter.heartbeat(run.start_step - 1, total)
    last_step, checkpoint = run.start_step - 1, None
    for step in range(run.start_step, total + 1):
        if stop_event is not None and stop_event.is_set():
            return _cancel(run, last_step, reporter)
        run.last_metrics = train_step(run, step, reporter)
        last_step = step
        if run.val_rows and _is_due(step, config.trainer.val_every, total):
            val_metrics = validate(run, step)
            reporter.log_metrics(step, val_metrics)
            run.last_metrics.update(val_metrics)
        if _is_due(step, config.trainer.save_every, total):
            # After the step's own time was taken: stacked on top of it (docs/health.md#time-breakdown).
            saving: dict[str, float] = {}
            with timed(saving, TIMING_CHECKPOINT_S):
                checkpoint = save_and_prune(run, step, reporter)
            if checkpoint is not None:
                reporter.log_metrics(step, saving)
        reporter.heartbeat(step, total)
    return TrainResult("succeeded", last_step, last_step - run.start_step + 1, run.last_metrics, checkpoint)


def _cancel(run: Run, last_step: int, reporter: Reporter) -> TrainResult:
    # A checkpoint on cancel only when asked: a cancelled run is rarely one to continue, and each
    # checkpoint of a full model is its whole size on disk (docs/checkpoints.md#cancelling).
    wanted = run.config.trainer.checkpoint_on_cancel and last_step >= run.start_step
    checkpoint = save_and_prune(run, last_step, reporter) if wanted else None
    logger.info("stop requested: stopped after step %d", last_step)
    return TrainResult("cancelled", last_step, last_step - run.start_step + 1, run.last_metrics, checkpoint)
