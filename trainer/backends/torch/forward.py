"""The forward passes of the update: hidden states, logits, log-probs and entropy at the response
positions only, for plain, shared-prefix and packed micro-batches (docs/performance.md).

Shapes: a micro-batch sees b rows and its own longest response Tm; a packed one has N
response-predicting positions in all; H is the hidden size, V the vocabulary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache

from trainer.backends.torch.batch import Inputs, PackedInputs, SharedPrefixInputs

if TYPE_CHECKING:
    from trainer.models import ValueHeadModel


def response_hidden(decoder: Any, inputs: Inputs) -> torch.Tensor:
    """Final hidden states [b, Tm, H] at the positions that predict each row's response tokens.

    ``decoder`` is a transformers base model (the policy's ``get_decoder()``, the critic's backbone).
    """
    if isinstance(inputs, PackedInputs):
        return to_rows(packed_hidden(decoder, inputs), inputs)
    if isinstance(inputs, SharedPrefixInputs):
        return _shared_prefix_hidden(decoder, inputs)
    hidden = decoder(input_ids=inputs.input_ids, use_cache=False).last_hidden_state
    return hidden.gather(1, inputs.positions[..., None].expand(-1, -1, hidden.shape[-1]))


def packed_hidden(decoder: Any, inputs: PackedInputs) -> torch.Tensor:
    """Final hidden states [N, H] at the N response-predicting positions of a packed micro-batch."""
    dtype = decoder.dtype
    # An additive mask in the model's dtype: what both SDPA and eager attention take as given.
    mask = torch.zeros(inputs.attention_mask.shape, dtype=dtype, device=inputs.attention_mask.device)
    mask = mask.masked_fill(~inputs.attention_mask, torch.finfo(dtype).min)
    hidden = decoder(
        input_ids=inputs.input_ids, attention_mask=mask, position_ids=inputs.position_ids, use_cache=False
    ).last_hidden_state
    return hidden[inputs.pack, inputs.offset]


def to_rows(flat: torch.Tensor, inputs: PackedInputs) -> torch.Tensor:
    """[N, ...] per response-predicting position -> [b, Tm, ...] per row, zero past each response."""
    out = flat.new_zeros((len(inputs.rows), inputs.width, *flat.shape[1:]))
    return out.index_put((inputs.row, inputs.column), flat)


def _shared_prefix_hidden(decoder: Any, inputs: SharedPrefixInputs) -> torch.Tensor:
    # Prompts once, keeping their KV cache; the cache is then indexed out to the rows (autograd sums
    # the rows' gradients back into each prompt) and the responses run on top of it.
    cache = DynamicCache()
    prompts = decoder(
        input_ids=inputs.prompt_ids, attention_mask=inputs.prompt_mask, cache=cache, use_cache=True
    )
    last = prompts.last_hidden_state[torch.arange(len(inputs.prompt_lengths)), inputs.prompt_lengths - 1]
    first = last[inputs.row_prompt][:, None]  # predicts each row's first response token
    if inputs.width == 1:
        return first
    cache.batch_select_indices(inputs.row_prompt)
    rows = len(inputs.row_prompt)
    mask = torch.cat(
        [inputs.prompt_mask[inputs.row_prompt], inputs.prompt_mask.new_ones(rows, inputs.width - 1)], 1
    )
    positions = inputs.prompt_lengths[inputs.row_prompt][:, None] + torch.arange(
        inputs.width - 1, device=mask.device
    )
    rest = decoder(
        input_ids=inputs.response_ids[:, :-1],
        attention_mask=mask,
        position_ids=positions,
        cache=cache,
        use_cache=True,
    ).last_hidden_state
    return torch.cat([first, rest], dim=1)


def response_logits(model: Any, inputs: Inputs) -> torch.Tensor:
    """Logits [b, Tm, V] at the response-predicting positions only.

    The decoder runs over the whole sequence, but the LM head (the largest matmul for a small model
    with a big vocabulary) only over response positions. Models whose logits are ``lm_head(hidden)``
    (Llama, Qwen2, Mistral, SmolLM, ...) are supported this way.
    """
    if isinstance(inputs, PackedInputs):  # the head on real positions only, not on padding
        return to_rows(packed_logits(model, inputs), inputs)
    return model.get_output_embeddings()(response_hidden(model.get_decoder(), inputs))


def packed_logits(model: Any, inputs: PackedInputs) -> torch.Tensor:
    """Logits [N, V] at the N response-predicting positions of a packed micro-batch, flat.

    The log-probs are taken on these and only then spread to rows (``packed=`` of
    :func:`token_log_probs` and :func:`log_probs_and_entropy`): a [b, Tm, V] tensor would be mostly
    padding, and every vocabulary-sized pass over it costs (docs/performance.md#flat-log-probs).
    """
    return model.get_output_embeddings()(packed_hidden(model.get_decoder(), inputs))


def micro_logits(model: Any, inputs: Inputs) -> tuple[torch.Tensor, PackedInputs | None]:
    """The logits the log-probs are taken on: flat [N, V] with the packed inputs, else [b, Tm, V]."""
    if isinstance(inputs, PackedInputs):
        return packed_logits(model, inputs), inputs
    return response_logits(model, inputs), None


def response_values(critic: ValueHeadModel, inputs: Inputs) -> torch.Tensor:
    """Critic values [b, Tm] at each response token's decision point."""
    return critic.value_head(response_hidden(critic.backbone, inputs)).squeeze(-1)


def token_log_probs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float, *, packed: PackedInputs | None = None
) -> torch.Tensor:
    """log π(target) [b, Tm] under the tempered distribution the rollout sampled from.

    ``logits`` are [b, Tm, V], or with ``packed`` the flat [N, V] of :func:`packed_logits` (then the
    result is 0 past each response).
    """
    logits = logits.float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    flat_targets = targets if packed is None else targets[packed.row, packed.column]
    log_prob = logits.gather(-1, flat_targets[..., None]).squeeze(-1) - logits.logsumexp(dim=-1)
    return log_prob if packed is None else to_rows(log_prob, packed)


def log_probs_and_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    *,
    entropy_grad: bool,
    packed: PackedInputs | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(target), entropy), both [b, Tm], from already tempered fp32 logits [b, Tm, V] (or the
    flat [N, V] of :func:`packed_logits` with ``packed``; then both are 0 past each response).

    One logsumexp serves both: H = lse(z) - Σ softmax(z)·z with softmax(z) = exp(z - lse(z)). Over a
    49k vocabulary that pass costs about as much as the LM head itself. Without ``entropy_grad`` the
    entropy is a metric only and stays out of the graph, and :class:`TargetLogProb` computes both.
    """
    if packed is not None:
        targets = targets[packed.row, packed.column]
    if entropy_grad:
        lse = logits.logsumexp(dim=-1)
        log_prob = logits.gather(-1, targets[..., None]).squeeze(-1) - lse
        entropy = lse - (torch.exp(logits - lse[..., None]) * logits).sum(-1)
    else:
        log_prob, entropy = TargetLogProb.apply(logits, targets)
    if packed is not None:
        return to_rows(log_prob, packed), to_rows(entropy, packed)
    return log_prob, entropy


class TargetLogProb(torch.autograd.Function):
    """(log softmax(z)[target], entropy of softmax(z)) over the last dimension; the entropy has no
    gradient. The same values as autograd's composition, with one vocabulary-sized buffer in each
    direction where autograd's logsumexp, gather, exp and add allocate several
    (docs/performance.md#flat-log-probs)."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        lse = logits.logsumexp(dim=-1)
        log_prob = logits.gather(-1, targets[..., None]).squeeze(-1) - lse
        probs = torch.sub(logits, lse[..., None]).exp_()
        entropy = lse - probs.mul_(logits).sum(-1)
        ctx.save_for_backward(logits, lse, targets)
        ctx.mark_non_differentiable(entropy)
        return log_prob, entropy

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor, _entropy_grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits, lse, targets = ctx.saved_tensors
        # d(z_t - lse(z))/dz = onehot(t) - softmax(z)
        grad_logits = torch.sub(logits, lse[..., None]).exp_().mul_(-grad[..., None])
        return grad_logits.scatter_add_(-1, targets[..., None], grad[..., None]), None
