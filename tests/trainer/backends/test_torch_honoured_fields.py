"""The torch backend acts on every RunConfig field it honours.

A backend lists only what it refuses (``Backend.refused``); every other field counts as honoured
(``trainer.config.honoured_fields``). This test holds the torch backend to that: for each honoured
field it runs a tiny random model through the CLI's run path (``trainer.cli.run_training``, which
applies the run's reward mapping and calls the backend) once with a base config and once with that
one field changed, and asserts that what the run built or did differs.

What is compared (:func:`observe`):

- what the backend built, recorded where it builds it: the model loaders' arguments, the flows and
  the samplers the rollout made, the models, optimisers, generation engine and thread budget of the
  run, the reporters the CLI adds and the launch's ``Job``;
- what it did: the statuses it reported, its metrics (not the timings), its trajectories (texts,
  rewards, advantages, token signals), its checkpoints, the files it wrote, the trained weights and
  the number of forward passes of the policy.

A field whose effect only shows where it matters (``algorithm.lam`` needs GAE and several steps,
``algorithm.clip_low`` a ratio away from 1) gets the base overrides it needs in :data:`PROBES`. A new
RunConfig field fails ``test_every_honoured_field_has_a_probe`` until it gets a probe, and its probe
fails until the backend reads it. The runs use one CPU thread, so two runs of one config are the same
to the last bit (``test_a_run_observed_twice_is_observed_the_same``): a difference is the field's.
"""

from __future__ import annotations

import math
import shutil
import signal
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.backends import BACKENDS, LaunchEnv
from trainer.backends.torch import evaluate, loop
from trainer.backends.torch import rollout as torch_rollout
from trainer.cli import local_reporters, run_training
from trainer.config import RunConfig, honoured_fields
from trainer.envs.base import ENVS, AgentEnv, prompt_messages
from trainer.mdp import Action, Observation
from trainer.registry import Registry
from trainer.report.reporters import MemoryReporter, MultiReporter
from trainer.rewards import DATA_SOURCES, REWARDS, Route
from trainer.tools.formats import FORMATS

TASK = "letters"
VERL_NAMED = "letters_as_verl_names_it"  # a data_source that verl's rule scores otherwise than ours
ENV = LaunchEnv(run_id="7", api_url="http://web:8000/", token="r7_secret")
# Metrics that measure time: they differ between any two runs.
TIMED_KEYS = ("timing/", "perf/samples_per_s", "perf/tokens_per_s")

# Fields about the run rather than its training: nothing the backend builds or does depends on them.
NOT_BUILT = {
    "name": "the run's label: the web app and the CLI show it",
    "preset": "RunConfig.from_preset applies the preset's values before any backend sees the config",
    "backend": "picks the backend itself (BACKENDS.get)",
    "executor": "the web app's launcher picks the executor that starts the job",
    "start_from.run": "the web app resolves it (with start_from.step) to start_from.checkpoint",
    "start_from.step": "the web app resolves it (with start_from.run) to start_from.checkpoint",
    # It needs a resumable checkpoint, which no probe here writes.
    "start_from.optimizer": "tests/trainer/backends/test_torch_fork.py checks the moments it loads",
    "rollout.tool_warmup_steps": "the web app's tool-use health checks read it (docs/health.md#tool-use)",
    # Asked of Ray for the job's entrypoint (Job.memory_gb, Job.resources), as resources.cpus is.
    "resources.memory_gb": "tests/trainer/backends/test_backends.py checks the job asks Ray for it",
    "resources.where": "tests/webapp/experiments/test_ray_cluster.py places a run on the node it names",
}


def letters(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    """The share of letters in the answer: a reward that differs between any two samples."""
    return sum(c.isalpha() for c in solution_str) / max(len(solution_str), 1)


def vowels(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> float:
    return sum(c in "aeiou" for c in solution_str.lower()) / max(len(solution_str), 1)


class Chatter(AgentEnv):
    """An env that never ends an episode by itself (rollout.max_steps does): it asks for more after
    each answer and rewards each step with its share of letters."""

    def reset(self, **row: Any) -> Observation:
        self.messages = prompt_messages(row)
        return Observation(messages=list(self.messages))

    async def step(self, action: Action) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        ask = str(self.env_kwargs.get("ask", "More."))
        self.messages += [{"role": "assistant", "content": action.text}, {"role": "user", "content": ask}]
        return Observation(messages=list(self.messages)), letters(action.text, None, {}), False, {}


@dataclass(frozen=True)
class Probe:
    """How to see one field's effect: the value it changes to, on a config of ``preset`` with
    ``context`` on top of :data:`BASE`. A string value may name a prepared file as ``{name}``."""

    value: Any
    context: Mapping[str, Any] = field(default_factory=dict)
    preset: str = "grpo"
    cancel_after: int | None = None  # a SIGTERM after this step, as a cancel sends (the run ends cancelled)


# Several steps per trajectory, each rewarded by the env: discounts and step-level estimators matter.
MULTI = {"rollout.env_type": "chatter", "rollout.max_steps": 3}
VAL = {"data.val_path": "{val}"}
CHECKPOINTS = {"trainer.checkpoint_dir": "{out}", "trainer.total_steps": 2}
DEMOS = {"data.train_path": "{demos}"}  # rows with both RL columns and demonstrations
TOOLS = {"rollout.tools": ["echo"]}
SIGNALS_SAMPLED = {"report.token_signals": "sample"}

PROBES: dict[str, Probe] = {
    # The validation key of rows without a data_source (scored through data.rewards' "" entry).
    "task": Probe("other-task", {"data.val_path": "{val_unnamed}", "data.rewards": {"": TASK}}),
    "resources.cpus": Probe(3),
    "resources.gpus_per_node": Probe(1),
    "model.path": Probe("{sharp}"),
    "model.dtype": Probe("bfloat16"),
    "model.trust_remote_code": Probe(True),
    "model.gradient_checkpointing": Probe(True),
    "model.lora_rank": Probe(4),
    "model.lora_alpha": Probe(32, {"model.lora_rank": 4}),
    "data.train_path": Probe("{train_other}"),
    "data.val_path": Probe("{val}"),
    "data.max_prompt_length": Probe(8),
    "data.max_response_length": Probe(4),
    "data.shuffle": Probe(False, {"trainer.seed": 1}),  # seed 42 shuffles rows 0 and 1 first, as unshuffled
    "data.val_max_samples": Probe(1, VAL),
    "data.rewards": Probe({TASK: "vowels"}),
    # Rows of a data source with a verl rule (vowels) beside its lenient one (letters).
    "data.reward_rule": Probe("lenient", {"data.train_path": "{train_verl}"}),
    "rollout.n": Probe(4),
    "rollout.temperature": Probe(0.5),
    "rollout.top_p": Probe(0.5),
    "rollout.max_new_tokens": Probe(2),
    "rollout.max_steps": Probe(1, MULTI),
    "rollout.agent_name": Probe("single_step"),
    "rollout.context_policy": Probe("sliding_window", MULTI),
    "rollout.window": Probe(1, {**MULTI, "rollout.context_policy": "sliding_window"}),
    "rollout.env_type": Probe("chatter"),
    "rollout.tools": Probe(["echo"]),
    "rollout.tool_format": Probe("hermes-again", TOOLS),
    "rollout.env_kwargs": Probe({"ask": "Go on."}, MULTI),
    "algorithm.estimator": Probe("rloo"),
    "algorithm.policy_loss": Probe("gspo"),
    "algorithm.gamma": Probe(0.5, MULTI, preset="reinforce"),
    "algorithm.lam": Probe(0.5, MULTI, preset="ppo"),
    "algorithm.norm_adv_by_std": Probe(False),
    "algorithm.kl_mode": Probe("reward"),
    "algorithm.kl_coef": Probe(1.0),
    "algorithm.kl_kind": Probe("k1"),
    "algorithm.clip_low": Probe(0.0),
    "algorithm.clip_high": Probe(0.0),
    "algorithm.dual_clip_c": Probe(1.0001),
    "algorithm.loss_agg_mode": Probe("seq-mean-token-sum"),
    "algorithm.entropy_coef": Probe(0.1),
    "algorithm.gigpo_step_weight": Probe(0.5, MULTI, preset="gigpo"),
    "algorithm.skip_zero_advantage_groups": Probe(True),
    "optim.lr": Probe(1e-3),
    "optim.critic_lr": Probe(1e-3, preset="ppo"),
    "optim.weight_decay": Probe(0.5),
    "optim.grad_clip": Probe(1e-4),
    "optim.ppo_epochs": Probe(2),
    "optim.mini_batch_size": Probe(4),
    "optim.micro_batch_size": Probe(1),
    "optim.warmup_steps": Probe(2),
    "trainer.total_steps": Probe(2),
    "trainer.batch_size": Probe(3),
    "trainer.seed": Probe(7),
    "trainer.val_every": Probe(1, {**VAL, "trainer.total_steps": 2}),
    "trainer.save_every": Probe(1, CHECKPOINTS),
    "trainer.checkpoint_dir": Probe("{out}"),
    "trainer.resume": Probe(True, CHECKPOINTS),
    "trainer.keep_checkpoints": Probe(None, {**CHECKPOINTS, "trainer.save_every": 1}),
    "trainer.checkpoint_on_cancel": Probe(True, {**CHECKPOINTS, "trainer.total_steps": 3}, cancel_after=1),
    "trainer.device": Probe("cuda" if not torch.cuda.is_available() else "auto"),
    "trainer.num_threads": Probe(2),
    "report.jsonl_path": Probe("{out}/run.jsonl"),
    "report.console": Probe(False),
    "report.token_signals": Probe("none"),
    "report.token_signals_per_step": Probe(1, SIGNALS_SAMPLED),
    "evaluation.enabled": Probe(True, VAL),
    "evaluation.checkpoint": Probe("{eval_checkpoint}", {**VAL, "evaluation.enabled": True}),
    "sft.enabled": Probe(True, DEMOS),
    "sft.max_length": Probe(16, {**DEMOS, "sft.enabled": True}),
    "sft.train_turns": Probe("tool_calls", {**DEMOS, "sft.enabled": True}),
    "start_from.checkpoint": Probe("{eval_checkpoint}"),
}

# The config every probe starts from: two prompts of n = 2 samples, two mini-batches (so π_old has
# its own pass and the second one trains on a policy that moved), one step, one CPU thread.
BASE = {
    "task": TASK,
    "data.max_prompt_length": 256,
    "rollout.n": 2,
    "rollout.max_new_tokens": 3,
    "trainer.batch_size": 2,
    "trainer.total_steps": 1,
    "trainer.device": "cpu",
    "trainer.num_threads": 1,
    "optim.lr": 1e-2,
    "optim.mini_batch_size": 2,
    "optim.micro_batch_size": 2,
    "algorithm.skip_zero_advantage_groups": False,
}


# -- what a run built and did -------------------------------------------------------------------


class BuildLog:
    """What the torch backend builds, recorded at the functions it builds it with."""

    def __init__(self) -> None:
        self.loaded: list[tuple[str, dict[str, Any]]] = []
        self.flows: set[str] = set()
        self.samplers: list[tuple[int, str]] = []
        self.run: Any = None
        self.built: dict[str, Any] | None = None
        self.forward_passes = 0

    def install(self, patch: pytest.MonkeyPatch) -> None:
        for module in (loop, evaluate):
            patch.setattr(module, "load_policy", self._logged(module.load_policy, "load_policy"))
            patch.setattr(module, "load_tokenizer", self._logged(module.load_tokenizer, "load_tokenizer"))
            patch.setattr(module, "rollout", self._sampling(module.rollout))
        patch.setattr(torch_rollout, "make_flow", self._flows(torch_rollout.make_flow))
        patch.setattr(loop, "setup_run", self._setup(loop.setup_run))

    def _logged(self, load: Callable[..., Any], name: str) -> Callable[..., Any]:
        def logged(path: Any, **options: Any) -> Any:
            self.loaded.append((f"{name} {path}", {key: str(value) for key, value in options.items()}))
            return load(path, **options)

        return logged

    def _sampling(self, rollout: Callable[..., Any]) -> Callable[..., Any]:
        def logged(prompts: Any, *, n: int, sampling: Any, **rest: Any) -> Any:
            self.samplers.append((n, repr(sampling)))
            return rollout(prompts, n=n, sampling=sampling, **rest)

        return logged

    def _flows(self, make_flow: Callable[..., Any]) -> Callable[..., Any]:
        def logged(*args: Any, **kwargs: Any) -> Any:
            flow = make_flow(*args, **kwargs)
            settings = {
                k: getattr(v, "__name__", v) for k, v in vars(flow).items() if k not in ("llm", "tokenizer")
            }
            self.flows.add(f"{type(flow).__name__} {sorted(settings.items())}")
            return flow

        return logged

    def _setup(self, setup_run: Callable[..., Any]) -> Callable[..., Any]:
        def logged(config: RunConfig) -> Any:
            run = self.run = setup_run(config)
            self.built = built_run(run)
            run.models.policy.get_decoder().register_forward_pre_hook(self._count)
            return run

        return logged

    def _count(self, *_: Any) -> None:
        self.forward_passes += 1

    def trained_weights(self) -> torch.Tensor | None:
        if self.run is None:
            return None
        return torch.cat([p.detach().flatten().double() for p in self.run.models.policy.parameters()])


def built_run(run: Any) -> dict[str, Any]:
    """The models, optimisers, engine, threads and rows a training run set up."""
    models = run.models
    optimizers = [models.actor_optimizer, models.critic_optimizer]
    return {
        "models": [model_summary(m) for m in (models.policy, models.reference, models.critic)],
        "optimizers": [
            None if o is None else [(g["lr"], g["weight_decay"]) for g in o.param_groups] for o in optimizers
        ],
        "options": (str(models.device), models.share_prefixes, models.reference_is_base),
        "engine_seed": run.engine.generator.initial_seed(),
        "threads": run.threads.most,
        "rows": (len(run.train_rows), len(run.val_rows)),
    }


def model_summary(model: Any) -> dict[str, Any] | None:
    if model is None:
        return None
    parameters = list(model.parameters())
    return {
        "class": type(model).__name__,
        "dtypes": sorted({str(p.dtype) for p in parameters}),
        "trainable": sum(p.numel() for p in parameters if p.requires_grad),
        "checkpointing": any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules()),
        "adapters": repr(getattr(model, "peft_config", None)),
    }


@dataclass
class CancelAfter(MemoryReporter):
    """Sends the process the SIGTERM a cancel sends, once step ``cancel_after`` is done: the CLI's
    handler asks the backend to stop before the next step."""

    cancel_after: int | None = None

    def heartbeat(self, step: int, total: int) -> None:
        super().heartbeat(step, total)
        if step == self.cancel_after:
            signal.raise_signal(signal.SIGTERM)


def observe(config: RunConfig, out: Path, cancel_after: int | None = None) -> dict[str, Any]:
    """Run ``config`` as the CLI runs it and return what it built and did (outputs under ``out``)."""
    log, memory = BuildLog(), CancelAfter(cancel_after=cancel_after)
    with pytest.MonkeyPatch.context() as patch:
        log.install(patch)
        run_training(config, MultiReporter([memory, *local_reporters(config, progress=False)]))
    job = BACKENDS.get("torch").job(config, ENV)
    return {
        "job": (job.num_cpus, job.num_gpus, sorted(job.env)),
        "reporters": [type(r).__name__ for r in local_reporters(config, progress=False)],
        "loaded": log.loaded,
        "flows": sorted(log.flows),
        "samplers": log.samplers,
        "run": log.built,
        "statuses": memory.statuses,
        "metrics": [
            (step, {k: v for k, v in m.items() if not k.startswith(TIMED_KEYS)}) for step, m in memory.metrics
        ],
        "trajectories": [(step, [trajectory_summary(t) for t in ts]) for step, ts in memory.trajectories],
        "checkpoints": [(r.step, Path(r.path).name, r.deleted) for r in memory.checkpoint_records],
        "files": sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()),
        "weights": log.trained_weights(),
        "forward_passes": log.forward_passes,
    }


def trajectory_summary(trajectory: Any) -> tuple[Any, ...]:
    steps = [
        (s.prompt_text, s.response_text, s.reward, s.advantage, s.value, sorted(s.token_signals))
        for s in trajectory.steps
    ]
    return trajectory.group_id, trajectory.data_source, steps


def same(a: Any, b: Any) -> bool:
    """Equal, floats and tensors to within rounding."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        both = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
        return both and a.shape == b.shape and torch.allclose(a, b, rtol=1e-9, atol=0)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9) or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def differing(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return [part for part in a if not same(a[part], b[part])]


# -- the runs -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def test_entries() -> Iterator[None]:
    """The rewards, env and tool format the probes name, registered for this module only."""
    added: list[tuple[Registry[Any], str, Any]] = [
        (REWARDS, TASK, letters),
        (REWARDS, "vowels", vowels),
        (DATA_SOURCES.exact, VERL_NAMED, Route(TASK, verl="vowels")),
        (ENVS, "chatter", Chatter),
        (FORMATS, "hermes-again", FORMATS.get("hermes")),
    ]
    for registry, name, entry in added:
        registry.add(name, entry)
    yield
    for registry, name, _ in added:
        registry.unregister(name)


class Runs:
    """Builds the configs of the probes and observes them; base observations are kept per context."""

    def __init__(self, root: Path, files: Mapping[str, str]) -> None:
        self.root, self.files = root, files
        self.bases: dict[str, dict[str, Any]] = {}
        self.count = 0

    def resolve(self, value: Any, out: Path) -> Any:
        if isinstance(value, str) and "{" in value:
            return value.format(out=out, **self.files)
        if isinstance(value, dict):
            return {k: self.resolve(v, out) for k, v in value.items()}
        return value

    def config(self, probe: Probe, out: Path, change: str | None = None) -> RunConfig:
        values = {**BASE, "model.path": self.files["tiny"], "data.train_path": self.files["train"]}
        values.update(probe.context)
        if change is not None:
            values[change] = probe.value
        return RunConfig.from_preset(probe.preset, **{k: self.resolve(v, out) for k, v in values.items()})

    def observe(self, probe: Probe, change: str | None = None) -> dict[str, Any]:
        self.count += 1
        out = self.root / f"run{self.count}"
        out.mkdir()
        return observe(self.config(probe, out, change), out, probe.cancel_after)

    def base(self, probe: Probe) -> dict[str, Any]:
        key = repr((probe.preset, sorted(probe.context.items()), probe.cancel_after))
        if key not in self.bases:
            self.bases[key] = self.observe(probe)
        return self.bases[key]


@pytest.fixture(scope="module")
def runs(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_model_dir: Path,
    sharp_tiny_model_dir: Path,
    test_entries: None,
) -> Runs:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("honoured")

    def rows(name: str, count: int, text: str, data_source: str = TASK, *, demos: bool = False) -> str:
        table = [
            {
                "data_source": data_source,
                "prompt": [{"role": "user", "content": text.format(i=i)}],
                "reward_model": {"style": "rule", "ground_truth": ""},
                "extra_info": {"index": i},
            }
            for i in range(count)
        ]
        for i, row in enumerate(table if demos else []):
            row["messages"] = [*row["prompt"], {"role": "assistant", "content": f"Answer number {i} here."}]
        pq.write_table(pa.Table.from_pylist(table), root / name)
        return str(root / name)

    checkpoint = root / "step_1"
    shutil.copytree(sharp_tiny_model_dir, checkpoint / "policy")
    files = {
        "tiny": str(tiny_model_dir),
        "sharp": str(sharp_tiny_model_dir),
        "train": rows("train.parquet", 6, "Say something #{i}"),
        "demos": rows("demos.parquet", 6, "Say something #{i}", demos=True),
        "train_other": rows("other.parquet", 4, "Name a colour #{i}"),
        "train_verl": rows("verl.parquet", 6, "Say something #{i}", data_source=VERL_NAMED),
        "val": rows("val.parquet", 3, "Question {i}?"),
        "val_unnamed": rows("val_unnamed.parquet", 3, "Question {i}?", data_source=""),
        "eval_checkpoint": str(checkpoint),
    }
    return Runs(root, files)


def test_every_honoured_field_has_a_probe() -> None:
    assert set(PROBES) | set(NOT_BUILT) == honoured_fields("torch")
    assert set(PROBES) & set(NOT_BUILT) == set()


def test_a_run_observed_twice_is_observed_the_same(runs: Runs) -> None:
    first, again = runs.base(Probe(None)), runs.observe(Probe(None))
    assert first["statuses"][-1][0] == "succeeded", first["statuses"]
    assert first["metrics"] and first["trajectories"] and first["weights"] is not None
    assert differing(first, again) == []


@pytest.mark.parametrize("path", sorted(PROBES))
def test_changing_an_honoured_field_changes_what_the_torch_backend_builds_or_does(
    runs: Runs, path: str
) -> None:
    probe = PROBES[path]
    base = runs.base(probe)
    ended = "cancelled" if probe.cancel_after is not None else "succeeded"
    assert base["statuses"][-1][0] == ended, base["statuses"]
    changed = runs.observe(probe, change=path)
    assert differing(base, changed) != [], (
        f"changing {path} to {probe.value!r} changed nothing the run built or did"
    )
