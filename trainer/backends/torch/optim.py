"""AdamW for the torch backend, with fp32 master weights when the model's weights are bfloat16.

bfloat16 keeps 8 bits of mantissa, so an update smaller than about 1/256 of a weight rounds away
whole: at lr 1e-6 a weight of 0.02 would never move. With ``model.dtype: bfloat16`` the model holds
and computes in bf16 while :class:`MasterWeightAdamW` keeps an fp32 copy of every trained weight,
accumulates the gradients in fp32, steps the copies and writes them back rounded, the way mixed
precision training does it (verl's FSDP keeps fp32 weights and computes in bf16 alike).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn


def adamw(params: Iterable[nn.Parameter], *, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """AdamW over the trainable ``params``: plain when they are fp32, else over fp32 master copies.

    Both use the fused kernel (CPU and CUDA both have one): per-tensor Python loops cost about a
    second per step for a 135M model on CPU.
    """
    trainable = [p for p in params if p.requires_grad]
    if all(p.dtype == torch.float32 for p in trainable):
        return torch.optim.AdamW(trainable, lr=lr, weight_decay=weight_decay, fused=True)
    return MasterWeightAdamW(trainable, lr=lr, weight_decay=weight_decay)


class MasterWeightAdamW(torch.optim.AdamW):
    """AdamW whose parameters are fp32 masters of the model's low-precision ``model_params``.

    Each backward adds the model's gradient into its master's ``grad`` in fp32 and frees the model's
    own, so gradient accumulation over micro-batches loses nothing to bf16. Clip the gradients of
    :attr:`param_groups` (the masters), not the model's. The masters travel in :meth:`state_dict`, so
    a resumed run continues from the exact fp32 weights rather than their rounded copies.
    """

    def __init__(self, model_params: list[nn.Parameter], *, lr: float, weight_decay: float) -> None:
        self.model_params = model_params
        self.masters = [p.detach().float().clone() for p in model_params]
        super().__init__(self.masters, lr=lr, weight_decay=weight_decay, fused=True)
        for param, master in zip(model_params, self.masters, strict=True):
            param.register_post_accumulate_grad_hook(_accumulate_into(master))

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = super().step(closure)
        for param, master in zip(self.model_params, self.masters, strict=True):
            param.copy_(master)
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "master_weights": [m.clone() for m in self.masters]}

    @torch.no_grad()
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        masters = state.pop("master_weights", None)
        super().load_state_dict(state)
        if masters is None:
            return  # written by a plain AdamW: the masters stay the loaded (rounded) weights
        for param, master, saved in zip(self.model_params, self.masters, masters, strict=True):
            master.copy_(saved)
            param.copy_(master)


def _accumulate_into(master: torch.Tensor) -> Any:
    def hook(param: torch.Tensor) -> None:
        if param.grad is None:
            return
        if master.grad is None:
            master.grad = param.grad.float()
        else:
            master.grad.add_(param.grad)
        param.grad = None

    return hook
