"""bf16 weights with fp32 master copies: updates too small for bf16 still add up."""

from __future__ import annotations

import torch
from torch import nn

from trainer.backends.torch.optim import MasterWeightAdamW, adamw


def step_many(weight: nn.Parameter, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        weight.float().sum().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def test_master_weights_keep_updates_that_bf16_weights_round_away() -> None:
    # Adam moves a weight by about lr per step; 1 - 1e-4 is 1.0 again in bf16 (8-bit mantissa).
    ours, plain = (nn.Parameter(torch.ones(4, dtype=torch.bfloat16)) for _ in range(2))
    optimizer = adamw([ours], lr=1e-4, weight_decay=0.0)

    step_many(ours, optimizer, 100)
    step_many(plain, torch.optim.AdamW([plain], lr=1e-4, weight_decay=0.0), 100)

    assert isinstance(optimizer, MasterWeightAdamW)
    assert torch.equal(plain, torch.ones(4, dtype=torch.bfloat16))  # a hundred steps lost
    master = optimizer.param_groups[0]["params"][0]
    assert torch.allclose(master, torch.full((4,), 0.99), atol=1e-4)
    assert torch.equal(ours, master.to(torch.bfloat16)) and bool((ours < 1.0).all())


def test_fp32_weights_get_the_plain_fused_adamw() -> None:
    optimizer = adamw([nn.Parameter(torch.ones(2))], lr=1e-3, weight_decay=0.0)
    assert type(optimizer) is torch.optim.AdamW


def test_a_resumed_optimizer_continues_from_the_exact_masters() -> None:
    weight = nn.Parameter(torch.ones(4, dtype=torch.bfloat16))
    optimizer = adamw([weight], lr=1e-4, weight_decay=0.0)
    step_many(weight, optimizer, 10)
    saved = optimizer.state_dict()

    resumed_weight = nn.Parameter(weight.detach().clone())  # the bf16 checkpoint: rounded
    resumed = adamw([resumed_weight], lr=1e-4, weight_decay=0.0)
    resumed.load_state_dict(saved)

    assert torch.equal(resumed.param_groups[0]["params"][0], optimizer.param_groups[0]["params"][0])
    step_many(weight, optimizer, 5)
    step_many(resumed_weight, resumed, 5)
    assert torch.equal(resumed.param_groups[0]["params"][0], optimizer.param_groups[0]["params"][0])
