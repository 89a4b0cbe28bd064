"""Names ``model.path`` may hold instead of a folder, and a model's size read from its ``config.json``.

No torch and no weights: RunConfig's presets pick their defaults by the size (docs/presets.md), and the
web app checks the names, without loading a model. :mod:`trainer.models` provides the models these
names stand for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Names model.path may hold instead of a folder: models trainer.models provides offline.
SMOLLM2_ALIASES = frozenset({"smollm2", "smollm2-135m-instruct", "SmolLM2-135M-Instruct"})
TINY_TEST_ALIAS = "tiny-test"  # a tiny random model with SmolLM2's tokenizer: smoke runs in seconds
OFFLINE_MODELS = SMOLLM2_ALIASES | {TINY_TEST_ALIAS}
SMOLLM2_PARAMETERS = 134_515_008
TINY_TEST_PARAMETERS = 3_227_968


def parameter_count(path: str) -> int | None:
    """About how many parameters the model at ``model.path`` has, from its ``config.json`` alone (no
    weights are read, nothing is converted); None when the path is neither an alias nor a readable
    folder with the usual decoder fields. Presets pick their defaults by it (docs/presets.md)."""
    if path in SMOLLM2_ALIASES:
        return SMOLLM2_PARAMETERS
    if path == TINY_TEST_ALIAS:
        return TINY_TEST_PARAMETERS
    if not path:
        return None
    try:
        config = json.loads((Path(path).expanduser() / "config.json").read_text(encoding="utf-8"))
        return decoder_parameters(config)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def decoder_parameters(config: dict[str, Any]) -> int:
    """Parameters of a Llama-style decoder described by a Hugging Face ``config.json`` (embeddings,
    attention with grouped KV heads, a gated MLP; norms and biases are too small to matter here)."""
    config = config.get("text_config", config)  # multimodal configs nest the language model's
    hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
    vocab, intermediate = int(config["vocab_size"]), int(config["intermediate_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings", True) else 2)
    return embeddings + layers * (attention + 3 * hidden * intermediate)


# -- checkpoint sizes (docs/checkpoints.md#sizes) ----------------------------------------------------

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
ADAM_MOMENT_BYTES = 8  # AdamW's two fp32 moments per trained weight
FP32_MASTER_BYTES = 4  # and an fp32 master copy of each trained bf16 weight (trainer/backends/torch/optim.py)
# The offline models' config.json fields that decoder_parameters reads (trainer.models builds them).
SMOLLM2_SHAPE = {
    "hidden_size": 576,
    "num_hidden_layers": 30,
    "intermediate_size": 1536,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
}
TINY_TEST_SHAPE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "vocab_size": 49152,
}


def model_shape(path: str) -> dict[str, Any] | None:
    """The decoder's config.json fields for ``model.path``; None when unknown or unreadable."""
    if path in SMOLLM2_ALIASES:
        return SMOLLM2_SHAPE
    if path == TINY_TEST_ALIAS:
        return TINY_TEST_SHAPE
    try:
        config = json.loads((Path(path).expanduser() / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    shape = config.get("text_config", config) if isinstance(config, dict) else None
    return shape if isinstance(shape, dict) else None


def lora_parameters(shape: dict[str, Any], rank: int) -> int:
    """Parameters of rank-``rank`` LoRA adapters on every linear layer of the decoder (PEFT's
    "all-linear": attention and MLP, not the LM head): rank * (inputs + outputs) per layer."""
    hidden, layers = int(shape["hidden_size"]), int(shape["num_hidden_layers"])
    intermediate, heads = int(shape["intermediate_size"]), int(shape["num_attention_heads"])
    kv_heads = int(shape.get("num_key_value_heads") or heads)
    head_dim = int(shape.get("head_dim") or hidden // heads)
    attention = 2 * (hidden + heads * head_dim) + 2 * (hidden + kv_heads * head_dim)
    return rank * layers * (attention + 3 * (hidden + intermediate))


def checkpoint_bytes(
    path: str, *, dtype: str, lora_rank: int = 0, critic: bool = False, resumable: bool = False
) -> int | None:
    """About how many bytes one checkpoint of a torch run takes (docs/checkpoints.md): the policy's
    weights (a LoRA run's adapters only), the critic's, and with ``resumable`` the optimizer's state;
    None when the model's size is unknown."""
    parameters, shape = parameter_count(path), model_shape(path)
    if parameters is None:
        return None
    if lora_rank and shape is None:
        return None
    trained_policy = lora_parameters(shape, lora_rank) if lora_rank and shape else parameters
    trained = trained_policy + (parameters if critic else 0)
    weight_bytes = DTYPE_BYTES.get(dtype, 4)
    optimizer = ADAM_MOMENT_BYTES + (FP32_MASTER_BYTES if weight_bytes < 4 else 0)
    return trained * weight_bytes + (trained * optimizer if resumable else 0)
