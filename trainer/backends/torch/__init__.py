"""The torch backend: single process, Hugging Face transformers, CPU or one GPU (the embedded default).

Importing this package needs no torch: :mod:`.backend` declares the backend, whose ``train`` imports
the training loop (:mod:`.loop`) only when called.
"""

from __future__ import annotations

from trainer.backends.torch.backend import TorchBackend

__all__ = ["TorchBackend"]
