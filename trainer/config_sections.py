"""RunConfig's sections: one frozen pydantic model per concern, with help text per field.

:class:`trainer.config.RunConfig` puts them together and checks them across sections. Every section
rejects unknown fields (a typo must not silently fall back to a default) and non-finite numbers.

The names of the algos registries a section may hold are spelled out here, with what kind each
estimator is, so that the config, the presets and the web app need neither torch nor the registries;
tests/trainer/test_config.py checks that they match the registries exactly.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

Estimator = Literal["gae", "token_gae", "grpo", "rloo", "reinforce", "gigpo"]
PolicyLoss = Literal["vanilla", "gspo", "reinforce"]
KlKind = Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3"]
LossAggMode = Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]
KlMode = Literal["loss", "reward", "none"]  # where the KL to the reference goes
# How the data sources verl scores are scored (docs/rewards.md#verl-and-lenient-rules).
RewardRule = Literal["verl", "lenient"]

CRITIC_ESTIMATORS = frozenset({"gae", "token_gae"})
# Estimators that compare steps sharing an anchor observation (StepBatch.anchor_index).
ANCHOR_ESTIMATORS = frozenset({"gigpo"})
# Estimators whose baseline comes from the other samples of the same prompt
# (docs/algorithms.md#advantage-estimators).
GROUP_ESTIMATORS = frozenset({"grpo", "rloo", "gigpo"})
# Of those, the ones for which one sample per prompt makes every advantage zero (a size-1 group).
GROUP_NEEDS_TWO = frozenset({"grpo", "gigpo"})


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, validate_default=True)


def section(kind: type[Section], description: str) -> Any:
    """The RunConfig field that holds one section: the section's own defaults unless a config sets it."""
    return Field(default_factory=kind, description=description)


class ModelConfig(Section):
    path: str = Field(
        default="",
        description="Local Hugging Face model folder (or a name the backend resolves offline) to train.",
    )
    dtype: Literal["float32", "bfloat16"] = Field(
        default="float32",
        description="Dtype the policy, reference and critic weights are held and computed in; with "
        "bfloat16 the optimizer keeps fp32 master copies of the trained weights.",
    )
    trust_remote_code: bool = Field(
        default=False, description="Allow the model folder's own Python code to run when loading it."
    )
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in the backward pass to save memory."
    )
    lora_rank: int = Field(
        default=0,
        ge=0,
        description="Train low-rank adapters of this rank on every linear layer instead of all the weights "
        "(0 trains every weight). Adapters learn with a larger optim.lr, about ten times full fine-tuning's.",
    )
    lora_alpha: int = Field(
        default=16,
        ge=1,
        description="LoRA scaling: the adapters' update is multiplied by lora_alpha / lora_rank.",
    )


class DataConfig(Section):
    train_path: str = Field(
        default="",
        description="Parquet file of training rows (the data contract). Webapp runs replace it with "
        "the dataset downloaded for the run.",
    )
    val_path: str | None = Field(
        default=None, description="Parquet file of validation rows; none disables validation."
    )
    max_prompt_length: int = Field(
        default=1024,
        ge=1,
        description="Longest prompt in tokens; a step whose prompt is longer ends the episode.",
    )
    max_response_length: int = Field(
        default=512,
        ge=1,
        description="A trajectory's response budget: the most model tokens it generates over all its "
        "steps (the episode ends when it is spent). verl counts the tool and env tokens between turns too.",
    )
    shuffle: bool = Field(default=True, description="Shuffle the training rows every epoch (seeded).")
    val_max_samples: int | None = Field(
        default=None, ge=1, description="Validate on at most this many rows; none uses the whole split."
    )
    rewards: dict[str, str] = Field(
        default_factory=dict,
        description="data_source → reward function for this run (built in or the team's), ahead of the "
        "routing table: the datasets' mappings, frozen when the experiment is made.",
    )
    reward_rule: RewardRule = Field(
        default="verl",
        description="How rows of the data sources verl 0.9.1 scores (openai/gsm8k, lighteval/MATH, "
        "math_dapo, aime*, searchR1_*, ...) are scored. verl: exactly as verl's default_compute_score "
        "scores them (GSM8K wants '#### 72'), so curves compare with published verl runs. lenient: our "
        "lenient rewards (they also accept 'The answer is 72'). Other data sources, our recipes' among "
        "them, have one reward either way, and data.rewards wins over both.",
    )


class RolloutConfig(Section):
    n: int = Field(default=4, ge=1, description="Trajectories sampled per prompt (the group size).")
    temperature: float = Field(default=1.0, ge=0.0, description="Sampling temperature; 0 decodes greedily.")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(
        default=128, ge=1, description="Most tokens generated in one step (one LLM call)."
    )
    max_steps: int = Field(default=5, ge=1, description="Most LLM calls (steps) in one trajectory.")
    agent_name: str = Field(
        default="agent_env_loop",
        min_length=1,
        description="Flow that runs rows without an agent_name column (the FLOWS registry).",
    )
    context_policy: Literal["append", "sliding_window"] = Field(
        default="append", description="How the next prompt is rebuilt from the history each step."
    )
    window: int = Field(
        default=4, ge=1, description="Most recent steps the sliding_window context policy keeps."
    )
    env_type: str = Field(
        default="tool", min_length=1, description="Environment for rows whose env_kwargs name none (ENVS)."
    )
    tools: list[str] = Field(default_factory=list, description="Tools offered to the agent (TOOLS registry).")
    tool_format: str = Field(
        default="hermes", min_length=1, description="How tool calls are written and parsed (FORMATS)."
    )
    env_kwargs: dict[str, JsonValue] = Field(
        default_factory=dict, description="Default environment settings; a row's env_kwargs override them."
    )
    tool_warmup_steps: int = Field(
        default=0,
        ge=0,
        description="Training steps before the tool-use health checks (malformed calls, tool avoidance, "
        "tools dropped while reward rose) judge the run: a policy still learning the call format starts "
        "malformed (docs/health.md#tool-use).",
    )


class AlgorithmConfig(Section):
    estimator: Estimator = Field(
        default="grpo", description="Advantage estimator (docs/algorithms.md#advantage-estimators)."
    )
    policy_loss: PolicyLoss = Field(
        default="vanilla", description="Policy loss (docs/algorithms.md#policy-losses)."
    )
    gamma: float = Field(default=1.0, ge=0.0, le=1.0, description="Discount factor between steps.")
    lam: float = Field(default=1.0, ge=0.0, le=1.0, description="GAE lambda.")
    norm_adv_by_std: bool = Field(
        default=True, description="Divide group advantages by the group's std (false gives Dr.GRPO)."
    )
    kl_mode: KlMode = Field(
        default="loss",
        description="Where the KL to the reference model goes: a loss term, the reward, or nowhere.",
    )
    kl_coef: float = Field(default=0.001, ge=0.0, description="Weight of the KL term.")
    kl_kind: KlKind = Field(
        default="low_var_kl", description="KL estimator (k1, k2 = mse, k3 = low_var_kl, abs)."
    )
    clip_low: float = Field(default=0.2, ge=0.0, lt=1.0, description="PPO ratio clip below: 1 - clip_low.")
    clip_high: float = Field(default=0.2, ge=0.0, description="PPO ratio clip above: 1 + clip_high.")
    dual_clip_c: float = Field(
        default=3.0, gt=1.0, description="Dual-clip bound on the loss for negative advantages."
    )
    loss_agg_mode: LossAggMode = Field(
        default="token-mean", description="How per-token losses are averaged into one number."
    )
    entropy_coef: float = Field(default=0.0, ge=0.0, description="Weight of the entropy bonus.")
    gigpo_step_weight: float = Field(
        default=1.0, ge=0.0, description="GiGPO: weight of the step-level (anchor group) advantage."
    )
    skip_zero_advantage_groups: bool = Field(
        default=False,
        description="Leave out of the actor update the groups whose advantages are all zero: their "
        "forward and backward passes are saved, and the loss is averaged over the other groups only.",
    )


class OptimConfig(Section):
    lr: float = Field(default=1e-6, gt=0.0, description="Actor learning rate (AdamW).")
    critic_lr: float = Field(default=1e-5, gt=0.0, description="Critic learning rate (AdamW).")
    weight_decay: float = Field(default=0.01, ge=0.0, description="AdamW weight decay.")
    grad_clip: float = Field(default=1.0, gt=0.0, description="Clip the gradient's global norm to this.")
    ppo_epochs: int = Field(default=1, ge=1, description="Passes over each rollout batch.")
    mini_batch_size: int = Field(
        default=4, ge=1, description="Trajectories per optimizer step; a trajectory's steps are never split."
    )
    micro_batch_size: int = Field(
        default=4, ge=1, description="Step rows per forward/backward pass (gradient accumulation)."
    )
    warmup_steps: int = Field(default=0, ge=0, description="Linear learning-rate warmup, in training steps.")


class TrainerConfig(Section):
    total_steps: int = Field(
        default=10, ge=1, description="Training steps (one rollout batch + update each)."
    )
    batch_size: int = Field(default=4, ge=1, description="Prompts per training step.")
    seed: int = Field(default=42, description="Seed for data order, sampling and initialisation.")
    val_every: int = Field(
        default=0, ge=0, description="Validate every N steps and at the end (0 = only at the end)."
    )
    save_every: int = Field(
        default=0, ge=0, description="Checkpoint every N steps and at the end (0 = only at the end)."
    )
    checkpoint_dir: str | None = Field(
        default=None, description="Folder for Hugging Face format checkpoints; none saves nothing."
    )
    resume: bool = Field(
        default=False,
        description="Make the run resumable: checkpoints also hold the optimizer and RNG state, and the run "
        "continues from the latest checkpoint in checkpoint_dir when there is one. Off, checkpoints hold "
        "the weights only (about a third of the size).",
    )
    keep_checkpoints: int | None = Field(
        default=1,
        ge=1,
        description="Keep only the newest k checkpoints: an older one is deleted once a newer one is "
        "complete. The default keeps the last one; none keeps every checkpoint.",
    )
    checkpoint_on_cancel: bool = Field(
        default=False,
        description="Write a checkpoint of the last finished step when the run is cancelled. Off, a "
        "cancelled run writes none (its earlier checkpoints stay).",
    )
    device: Literal["cpu", "cuda", "auto"] = Field(
        default="auto", description="Where the torch backend runs; auto picks cuda when available."
    )
    num_threads: int | None = Field(
        default=None, ge=1, description="torch CPU threads; none leaves torch's default."
    )


class EvaluationConfig(Section):
    """An evaluation run: the model scored on a split with k samples per prompt, no update
    (docs/evaluations.md)."""

    enabled: bool = Field(
        default=False,
        description="Evaluate instead of training: rollout.n samples of every row of data.val_path "
        "(at most data.val_max_samples rows), scored, with no update; reports eval/... metrics.",
    )
    checkpoint: str | None = Field(
        default=None,
        description="A checkpoint folder (step_*) whose policy/ weights are evaluated; none evaluates "
        "model.path itself.",
    )


class SftConfig(Section):
    """A supervised fine-tuning run on demonstrations instead of RL (docs/sft.md#the-sft-stage)."""

    enabled: bool = Field(
        default=False,
        description="Fine-tune on the conversations of data.train_path (the chat-messages layout) instead "
        "of RL: loss on the assistant's tokens only, trainer.batch_size conversations per step, validation "
        "loss on data.val_path; reports sft/loss and val/loss.",
    )
    max_length: int = Field(
        default=2048,
        ge=16,
        description="Tokens per packed sequence: conversations are packed back to back up to this length "
        "(a longer conversation is cut to it).",
    )
    train_turns: Literal["all", "tool_calls"] = Field(
        default="all",
        description="Which assistant turns carry the loss: all, or only the turns that call a tool (a "
        "tool result follows them), which teaches the call and leaves the answers to RL "
        "(docs/sft.md#which-turns-are-trained).",
    )


class StartFromConfig(Section):
    """The checkpoint a run's weights start from: another run's, e.g. an SFT run's (docs/sft.md#start-from)."""

    run: int | None = Field(
        default=None,
        ge=1,
        description="The run whose checkpoint this run starts from; none starts from model.path.",
    )
    step: int | None = Field(
        default=None, ge=0, description="That run's checkpoint step; none takes its latest checkpoint."
    )
    checkpoint: str | None = Field(
        default=None,
        description="The checkpoint folder (step_*) the web app resolved start_from.run and step to; its "
        "policy/ weights replace model.path's. Set by the server only.",
    )
    optimizer: bool = Field(
        default=False,
        description="Keep the optimiser state of that checkpoint too (AdamW's moments), not only its "
        "weights: its run must have set trainer.resume, and this run must train the same way (same "
        "algorithm, no LoRA).",
    )


class ResourcesConfig(Section):
    gpus_per_node: int = Field(default=0, ge=0, description="GPUs the run needs on each node.")
    nodes: int = Field(default=1, ge=1, description="Nodes the run spans (verl backend only).")
    cpus: int = Field(default=2, ge=1, description="CPUs the run needs (the Ray job's entrypoint_num_cpus).")
    memory_gb: float = Field(
        default=0,
        ge=0,
        description="Memory the run needs in GiB (the Ray job's entrypoint_memory); 0 asks none.",
    )
    where: dict[str, float] = Field(
        default_factory=dict,
        description="Where to run: custom resources a Ray node must offer, as name=amount, e.g. node_a=1 "
        "for a node started with --resources='{\"node_a\": 1}' (docs/ray.md#several-nodes). Ray executor only.",
    )

    @field_validator("where", mode="before")
    @classmethod
    def _where_from_text(cls, value: object) -> object:
        """The form's text "a=1, b=0.5" as the mapping a YAML config writes."""
        return parse_where(value) if isinstance(value, str) else value

    @field_validator("where")
    @classmethod
    def _where_amounts(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [name for name, amount in value.items() if amount <= 0 or not name.strip()]
        if bad:
            raise ValueError(f"give each resource a name and an amount above 0: {', '.join(bad)}")
        return value


def parse_where(text: str) -> dict[str, object]:
    """ "node_a=1, fast_disk=0.5" → {"node_a": "1", "fast_disk": "0.5"} (pydantic checks the amounts);
    a name alone asks 1 of it."""
    pairs = [part.strip() for part in text.replace(";", ",").split(",") if part.strip()]
    return {name.strip(): amount.strip() or "1" for name, _, amount in (p.partition("=") for p in pairs)}


def where_text(where: dict[str, float]) -> str:
    """The mapping as the form shows it: "node_a=1, fast_disk=0.5"."""
    return ", ".join(f"{name}={amount:g}" for name, amount in where.items())


class ReportConfig(Section):
    jsonl_path: str | None = Field(
        default=None, description="Append every metric, trajectory and status as JSON lines to this file."
    )
    console: bool = Field(
        default=True, description="Log metrics to the console (and a progress bar on a TTY)."
    )
    token_signals: Literal["all", "sample", "none"] | None = Field(
        default=None,
        description="Which trajectories keep their per-token signals (advantage, log-prob, ratio, entropy, "
        "clipped, KL) for the trajectory page: all, a sample of report.token_signals_per_step each step, or "
        "none (None: a sample). Backend verl records advantage, log-prob, entropy and KL, not the ratio "
        "and clip of its update (docs/verl.md#token-signals).",
    )
    token_signals_per_step: int = Field(
        default=4, ge=1, description="Trajectories per step that keep their per-token signals when sampling."
    )
