"""model.lora_rank: a LoRA run trains its adapters only, and its checkpoint is a usable model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from trainer.backends.torch.batch import flatten, model_inputs
from trainer.backends.torch.checkpoint import save_checkpoint
from trainer.backends.torch.forward import response_logits
from trainer.backends.torch.loop import setup_run, train_step
from trainer.config import RunConfig
from trainer.model_size import checkpoint_bytes
from trainer.models import is_adapter, load_policy
from trainer.registry import Registry
from trainer.report.reporters import MemoryReporter
from trainer.rewards import REWARDS


def says_a(solution_str: str, ground_truth: Any, extra_info: dict[str, Any]) -> dict[str, float]:
    return {"score": float("a" in solution_str.lower())}


def test_a_lora_run_trains_only_its_adapters_and_checkpoints_a_loadable_adapter(
    tiny_model_dir: Path,
    rows_file: Callable[..., Path],
    temp_register: Callable[[Registry[Any], str, Any], Any],
    tmp_path: Path,
) -> None:
    temp_register(REWARDS, "says_a", says_a)
    config = RunConfig.from_preset(
        "grpo",
        **{
            "model.path": str(tiny_model_dir),
            "model.lora_rank": 4,
            "data.train_path": str(rows_file("train.parquet", 4, "says_a", agent_name="single_step")),
            "rollout.n": 4,
            "rollout.max_new_tokens": 6,
            "trainer.batch_size": 2,
            "trainer.device": "cpu",
            "optim.lr": 5e-2,
            "optim.mini_batch_size": 8,
            "optim.micro_batch_size": 8,
            "algorithm.skip_zero_advantage_groups": False,
        },
    )
    run = setup_run(config)
    policy = run.models.policy
    before = {name: p.detach().clone() for name, p in policy.named_parameters()}
    trainable = {name for name, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)

    reporter = MemoryReporter()
    metrics = [train_step(run, step, reporter) for step in (1, 2)]
    assert all(m["actor/updates"] == 1.0 for m in metrics)
    assert metrics[1]["actor/pg_loss"] != metrics[0]["actor/pg_loss"]
    changed = {name for name, p in policy.named_parameters() if not torch.equal(p, before[name])}
    assert changed and changed <= trainable  # the base weights stay exactly as loaded

    path = save_checkpoint(
        tmp_path / "ckpt", 2, run.models, run.tokenizer, generators=run.generators, metrics={},
        config_json=config.to_json(), resumable=False,
    )  # fmt: skip
    assert is_adapter(path / "policy")
    assert not (path / "policy" / "model.safetensors").exists()  # the adapter, not a second full model
    # The form's expected size (docs/checkpoints.md#sizes) is the adapter's, not the model's.
    adapter_file = path / "policy" / "adapter_model.safetensors"
    header = int.from_bytes(adapter_file.read_bytes()[:8], "little")  # safetensors' JSON header length
    adapter_bytes = adapter_file.stat().st_size - 8 - header
    expected = checkpoint_bytes(str(tiny_model_dir), dtype="float32", lora_rank=4)
    assert expected is not None and abs(adapter_bytes - expected) < 0.05 * expected
    # The adapter loads onto the base model it names and gives the trained policy's outputs.
    loaded = load_policy(path / "policy")
    rows = flatten(reporter.trajectories[-1][1])
    inputs = model_inputs(rows.steps, list(range(rows.num_rows)), int(run.tokenizer.pad_token_id))
    policy.eval()
    with torch.no_grad():
        assert torch.allclose(response_logits(loaded, inputs), response_logits(policy, inputs), atol=1e-4)
