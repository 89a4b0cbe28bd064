"""Training backends, in one registry: ``torch`` (single process, the embedded default) and ``verl``
(Ray + vLLM on GPUs). Each declares what it refuses, what its launch needs and how its library spells
our metric keys (:class:`~trainer.backend_protocol.Backend`); importing this registry imports neither
torch nor verl.
"""

from __future__ import annotations

from trainer.backend_protocol import BACKENDS, Backend, ClusterNeeds, Job, LaunchEnv, canonical_key
from trainer.backends.torch import TorchBackend
from trainer.backends.verl import VerlBackend

BACKENDS.add(TorchBackend.name, TorchBackend())
BACKENDS.add(VerlBackend.name, VerlBackend())

__all__ = ["BACKENDS", "Backend", "ClusterNeeds", "Job", "LaunchEnv", "canonical_key"]
