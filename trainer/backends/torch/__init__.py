"""The torch backend: single process, Hugging Face transformers, CPU or one GPU (the embedded default)."""

from __future__ import annotations

from trainer.backends.torch.engine import TorchGenerationEngine
from trainer.backends.torch.loop import TrainResult, train

__all__ = ["TorchGenerationEngine", "TrainResult", "train"]
