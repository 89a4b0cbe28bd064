"""The torch backend's SFT stage (docs/sft.md#the-sft-stage): the loss falls on assistant tokens only,
conversations are packed as if each ran alone, checkpoints are written, and an RL run starts from one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from trainer.backends.torch.backend import TorchBackend
from trainer.backends.torch.checkpoint_folders import complete_checkpoints
from trainer.backends.torch.loop import setup_run
from trainer.backends.torch.sft import encode_file, loss_sum, setup_sft
from trainer.backends.torch.sft_data import (
    IGNORED,
    Conversation,
    Example,
    encode,
    flow_messages,
    pack,
    packed_batch,
)
from trainer.config import RunConfig
from trainer.contract import SFT_LOSS, VAL_LOSS
from trainer.models import load_tokenizer
from trainer.report.reporters import MemoryReporter
from trainer.rollout import stop_token_ids

CALL = '<tool_call>{"name": "echo", "arguments": {"text": "k%d"}}</tool_call>'
TOOLS = [{"name": "echo", "description": "Echo text.", "parameters": {"type": "object"}}]


def demo(i: int) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": f"What is k{i}?"},
        {"role": "assistant", "content": CALL % i},
        {"role": "tool", "content": f"value {i}"},
        {"role": "assistant", "content": f"<answer>{i}</answer>"},
    ]


@pytest.fixture
def demos_file(tmp_path: Path) -> Callable[[str, int], Path]:
    def write(name: str, count: int) -> Path:
        rows = [{"messages": demo(i), "tools": TOOLS} for i in range(count)]
        path = tmp_path / name
        pq.write_table(pa.Table.from_pylist(rows), path)
        return path

    return write


def sft_config(model: Path, train: Path, **overrides: Any) -> RunConfig:
    values = {
        "model.path": str(model),
        "data.train_path": str(train),
        "sft.enabled": True,
        "sft.max_length": 512,
        "trainer.batch_size": 4,
        "trainer.total_steps": 6,
        "trainer.device": "cpu",
        "optim.lr": 1e-2,
        "optim.micro_batch_size": 2,
        **overrides,
    }
    return RunConfig.from_preset("grpo", **values)


def test_the_loss_mask_covers_the_assistant_turns_only_and_each_ends_at_its_stop_token(
    smol_tokenizer: Any,
) -> None:
    conversation = Conversation(demo(3), TOOLS)
    stops = set(stop_token_ids(smol_tokenizer))
    example = encode(smol_tokenizer, conversation, tool_format="hermes", stop_ids=stops, max_length=4096)
    trained = smol_tokenizer.decode(
        [t for t, m in zip(example.input_ids, example.loss_mask, strict=True) if m]
    )
    assert trained == CALL % 3 + "<|im_end|>" + "<answer>3</answer><|im_end|>"
    untrained = smol_tokenizer.decode(
        [t for t, m in zip(example.input_ids, example.loss_mask, strict=True) if not m]
    )
    assert "What is k3?" in untrained and "<tool_response>\nvalue 3\n</tool_response>" in untrained
    assert '"name": "echo"' in untrained  # the tool list joined the system message, as the flow writes it


def test_training_only_the_turns_that_call_a_tool_leaves_the_answer_untrained(smol_tokenizer: Any) -> None:
    conversation = Conversation(demo(3), TOOLS)
    stops = set(stop_token_ids(smol_tokenizer))
    example = encode(
        smol_tokenizer, conversation, tool_format="hermes", stop_ids=stops, max_length=4096, calls_only=True
    )
    trained = smol_tokenizer.decode(
        [t for t, m in zip(example.input_ids, example.loss_mask, strict=True) if m]
    )
    assert trained == CALL % 3 + "<|im_end|>"  # the call and its stop token; not the answer
    everything = encode(smol_tokenizer, conversation, tool_format="hermes", stop_ids=stops, max_length=4096)
    assert example.input_ids == everything.input_ids  # the same tokens, fewer of them trained


def test_tool_results_reach_the_model_as_the_flow_renders_them(smol_tokenizer: Any) -> None:
    shown = flow_messages(Conversation(demo(1), []), "hermes", renders_tools=False)
    assert [m["role"] for m in shown] == ["system", "user", "assistant", "user", "assistant"]
    assert shown[3]["content"] == "<tool_response>\nvalue 1\n</tool_response>"


def test_packed_examples_get_the_same_loss_as_each_alone(tiny_model_dir: Path) -> None:
    from trainer.models import load_policy

    policy = load_policy(tiny_model_dir)
    examples = [
        Example([5, 6, 7, 8, 9], [0, 0, 1, 1, 1]),
        Example([10, 11, 12], [0, 1, 1]),
        Example([3, 4], [0, 1]),
    ]
    rows = pack(examples, capacity=10)
    assert sorted(len(row) for row in rows) == [3]  # all three fit one row of 10 tokens
    packed = packed_batch(examples, rows, pad_token_id=0)
    assert packed.trained_tokens == 3 + 2 + 1
    assert int((packed.labels == IGNORED).sum()) == packed.labels.numel() - 6
    with torch.no_grad():
        alone = sum(float(loss_sum(policy, packed_batch(examples, [[i]], 0))) for i in range(3))
        assert float(loss_sum(policy, packed)) == pytest.approx(alone, rel=1e-4)


def test_an_sft_run_lowers_its_loss_validates_and_checkpoints(
    tiny_model_dir: Path, demos_file: Callable[[str, int], Path], tmp_path: Path
) -> None:
    config = sft_config(
        tiny_model_dir,
        demos_file("train.parquet", 8),
        **{
            "data.val_path": str(demos_file("val.parquet", 2)),
            "trainer.checkpoint_dir": str(tmp_path / "ckpt"),
        },
    )
    reporter = MemoryReporter()
    result = TorchBackend().train(config, reporter)
    assert result.status == "succeeded"
    losses = [metrics[SFT_LOSS] for _, metrics in reporter.metrics if SFT_LOSS in metrics]
    assert len(losses) == 6 and losses[-1] < losses[0] * 0.7
    assert [step for step, metrics in reporter.metrics if VAL_LOSS in metrics] == [6]
    assert [path.name for path in complete_checkpoints(tmp_path / "ckpt")] == ["step_00000006"]
    assert [step for step, *_ in reporter.checkpoints] == [6]


def test_an_rl_run_started_from_an_sft_checkpoint_holds_its_weights_at_step_0(
    tiny_model_dir: Path,
    demos_file: Callable[[str, int], Path],
    rows_file: Callable[..., Path],
    tmp_path: Path,
) -> None:
    sft = sft_config(
        tiny_model_dir,
        demos_file("train.parquet", 4),
        **{"trainer.total_steps": 2, "trainer.checkpoint_dir": str(tmp_path / "sft")},
    )
    TorchBackend().train(sft, MemoryReporter())
    checkpoint = complete_checkpoints(tmp_path / "sft")[-1]
    trained = setup_sft(sft.with_overrides(**{"start_from.checkpoint": str(checkpoint)})).models.policy
    rl = RunConfig.from_preset(
        "grpo",
        **{
            "model.path": str(tiny_model_dir),
            "data.train_path": str(rows_file("rl.parquet", 2, "x")),
            "trainer.device": "cpu",
            "start_from.run": 1,
            "start_from.checkpoint": str(checkpoint),
        },
    )
    run = setup_run(rl)
    for (name, started), (_, saved) in zip(
        run.models.policy.named_parameters(), trained.named_parameters(), strict=True
    ):
        assert torch.equal(started, saved), name
    base = setup_run(rl.with_overrides(**{"start_from.checkpoint": None, "start_from.run": None}))
    assert not all(
        torch.equal(a, b)
        for a, b in zip(base.models.policy.parameters(), run.models.policy.parameters(), strict=True)
    )
    # the KL anchors to the model the run started from, not model.path
    assert run.models.reference is not None
    assert all(
        torch.equal(a, b)
        for a, b in zip(run.models.reference.parameters(), trained.parameters(), strict=True)
    )


def test_a_lora_sft_run_trains_adapters_and_an_rl_run_starts_from_them_merged(
    tiny_model_dir: Path, demos_file: Callable[[str, int], Path], tmp_path: Path
) -> None:
    config = sft_config(
        tiny_model_dir,
        demos_file("train.parquet", 4),
        **{
            "model.lora_rank": 4,
            "trainer.total_steps": 3,
            "trainer.checkpoint_dir": str(tmp_path / "lora"),
            "optim.lr": 5e-2,
        },
    )
    reporter = MemoryReporter()
    TorchBackend().train(config, reporter)
    losses = [metrics[SFT_LOSS] for _, metrics in reporter.metrics]
    assert losses[-1] < losses[0]
    checkpoint = complete_checkpoints(tmp_path / "lora")[-1]
    assert (checkpoint / "policy" / "adapter_config.json").is_file()
    full = sft_config(tiny_model_dir, config.data.train_path, **{"start_from.checkpoint": str(checkpoint)})
    started = setup_sft(full).models.policy
    assert all(p.requires_grad for p in started.parameters())  # merged: every weight trains again


def test_a_conversation_longer_than_max_length_is_cut(
    smol_tokenizer: Any, demos_file: Callable[[str, int], Path], tiny_model_dir: Path
) -> None:
    config = sft_config(tiny_model_dir, demos_file("train.parquet", 2), **{"sft.max_length": 16})
    examples = encode_file(config, load_tokenizer(tiny_model_dir), config.data.train_path)
    assert all(len(example.input_ids) == 16 for example in examples)


def test_an_rl_dataset_is_refused_by_an_sft_run_with_what_it_reads(
    tiny_model_dir: Path, rows_file: Callable[..., Path]
) -> None:
    config = sft_config(tiny_model_dir, rows_file("rl.parquet", 2, "x"))
    with pytest.raises(ValueError, match="no messages column"):
        setup_sft(config)
