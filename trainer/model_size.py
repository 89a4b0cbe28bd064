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
