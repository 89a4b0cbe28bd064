"""A checkpoint as a Hugging Face model folder (docs/checkpoints.md#export).

The folder holds the weights as safetensors, ``config.json``, the tokenizer, ``generation_config.json``
and a ``README.md`` model card. A LoRA checkpoint is exported merged into its base model on request,
else as the adapter (PEFT's own folder) with the tokenizer and card beside it. The folder is written
beside its target and renamed into place, so a half-written export never looks finished.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer.models import ADAPTER_CONFIG, is_adapter, load_policy, load_tokenizer

WEIGHTS_SUFFIX = ".safetensors"


def export_checkpoint(
    policy: Path, tokenizer_path: Path, target: Path, *, merge_lora: bool, card: str
) -> Path:
    """Write ``policy`` (a checkpoint's policy/ folder or a model folder) to ``target`` as a Hugging Face
    folder with ``card`` as its README.md. An existing ``target`` is replaced."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    try:
        _write(policy, tokenizer_path, staging, merge_lora=merge_lora)
        (staging / "README.md").write_text(card, encoding="utf-8")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def _write(policy: Path, tokenizer_path: Path, out: Path, *, merge_lora: bool) -> None:
    adapter = is_adapter(policy)
    if adapter and not merge_lora:
        for name in ("adapter_model.safetensors", ADAPTER_CONFIG):
            shutil.copy2(policy / name, out / name)
    else:
        model = load_policy(policy)  # a LoRA adapter loads merged into its base model
        model.save_pretrained(out, safe_serialization=True)
        model.generation_config.save_pretrained(out)
    # The checkpoint's own tokenizer when it saved one, else the one of the model the run started from.
    source = policy if (policy / "tokenizer_config.json").is_file() else tokenizer_path
    load_tokenizer(source).save_pretrained(out)


def model_card(
    *,
    title: str,
    base_model: str,
    config: Mapping[str, Any],
    datasets: Mapping[str, str],
    scores: Mapping[str, Any],
    merged: bool,
) -> str:
    """A README.md for the export: where it came from, the run's config, data and scores."""
    lines = [
        "---",
        "library_name: "
        + ("peft" if not merged and config.get("model", {}).get("lora_rank") else "transformers"),
        "tags: [agent-r1-studio, reinforcement-learning]",
        "---",
        "",
        f"# {title}",
        "",
        f"Trained with Agent-R1 Studio from `{base_model}`.",
        "",
        "## Data",
        "",
        *[f"- {split}: `{path}`" for split, path in datasets.items() if path],
        "",
        "## Scores",
        "",
        "| metric | value |",
        "|---|---|",
        *[f"| {key} | {value} |" for key, value in sorted(scores.items())],
        "",
        "## Run config",
        "",
        "```json",
        json.dumps(dict(config), indent=2, sort_keys=True, default=str),
        "```",
        "",
    ]
    return "\n".join(lines)


def weight_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*" + WEIGHTS_SUFFIX))
