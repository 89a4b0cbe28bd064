"""How flows reach the model: token-in / token-out, like verl's server manager.

A backend (torch locally, vLLM through verl on a cluster) provides an :class:`LLMClient`.
Flows build prompt token ids themselves and ask for a completion; many flows may await
``generate`` at once and the backend is free to batch their requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    greedy: bool = False  # validation decoding


@dataclass
class Generation:
    token_ids: list[int]
    log_probs: list[float] = field(default_factory=list)  # one per token, under the sampling distribution
    finish_reason: str = "stop"  # "stop" | "length"


class LLMClient(Protocol):
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation: ...
