"""Per-token signals of a verl run for the trajectory page (docs/verl.md#token-signals).

A verl trajectory is reported by the rollout worker that ran it, before its update. The per-token
values come later, in verl's driver: the old-log-prob pass leaves each token's entropy in
TransferQueue, the reference pass its reference log-prob, and the advantage step (our hook,
:func:`trainer.backends.verl.estimators.with_step_inputs`) the advantages. Once the advantages
exist, :func:`report_token_signals` sends, for the trajectories the run keeps signals of, each step's
advantage, log_prob (under the rollout policy), entropy and KL to the reference, keyed by our
trajectory id and the step's index; the webapp writes them onto the stored step.

The importance ratio and the clip decision exist only inside the FSDP workers' update, which hands
the driver aggregates: a verl run records those two on the torch backend only.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from trainer.algos.losses import kl_penalty
from trainer.backends.verl.command import ALGORITHM_KEY, SIGNALS_KEY, SIGNALS_PER_STEP_KEY, TOKENIZER_KEY
from trainer.contract import TOKEN_SIGNALS_MAX_TOKENS, StepSignalsWire, TokenSignalsWire
from trainer.report.reporters import Reporter
from trainer.report.token_signals import kept_trajectories

logger = logging.getLogger(__name__)

# What the driver reads from TransferQueue for the kept rows (the advantage step's batch lacks them).
FETCHED = ("responses", "entropy")  # responses first: the one that is always there

Fetch = Callable[[Sequence[str], Sequence[str]], Mapping[str, Tensor]]
Decode = Callable[[list[int]], list[str]]


def trajectory_id(uid: Any, session_id: Any) -> str:
    """Our id of the trajectory verl runs as sample ``session_id`` of prompt ``uid`` (the agent loop
    reports it under this id; the driver finds it again from the row's TransferQueue key)."""
    return f"{uid}-s{session_id}"


def trajectory_id_of_key(batch_key: str) -> str:
    """The trajectory id of a training row from its TransferQueue key, ``{uid}_{session_id}_{index}``
    in verl's v1 trainer (a uid may hold underscores; the last two fields cannot)."""
    uid, session_id, _ = batch_key.rsplit("_", 2)
    return trajectory_id(uid, session_id)


def step_signals(
    batch: Mapping[str, Tensor],
    batch_keys: Sequence[str],
    settings: Mapping[str, Any],
    *,
    kl_kind: str,
    fetch: Fetch,
    decode: Decode,
) -> list[StepSignalsWire]:
    """Each step's signals of the kept rows of one training batch (``batch``: verl's advantage-step
    tensors, [B, R] each, ``advantages`` filled in), in row order and, within a row, step order.

    A step is one run of mask-1 tokens (as for the estimators); its index counts the row's runs.
    """
    kept = kept_trajectories(
        settings.get(SIGNALS_KEY), int(settings.get(SIGNALS_PER_STEP_KEY, 4)), len(batch_keys)
    )
    if not kept:
        return []
    keys = [batch_keys[row] for row in kept]
    try:
        fetched = fetch(keys, FETCHED)
    except Exception:  # verl's bypass mode (old log-probs = rollout log-probs) stores no entropy
        fetched = fetch(keys, FETCHED[:1])
    mask = batch["response_mask"][kept] > 0
    per_token: dict[str, Tensor] = {"advantage": batch["advantages"][kept]}
    rollout, old, ref = (
        _field(batch, name) for name in ("rollout_log_probs", "old_log_probs", "ref_log_prob")
    )
    sampled = rollout if rollout is not None else old
    if sampled is not None:
        per_token["log_prob"] = sampled[kept]
    if "entropy" in fetched:
        per_token["entropy"] = fetched["entropy"]
    if old is not None and ref is not None:
        per_token["kl"] = kl_penalty(old[kept], ref[kept], kl_kind)
    responses = fetched["responses"]
    out: list[StepSignalsWire] = []
    for position, key in enumerate(keys):
        for index, (start, end) in enumerate(_runs(mask[position])):
            if end - start > TOKEN_SIGNALS_MAX_TOKENS:
                continue  # longer than the wire carries for one step (TokenSignalsWire)
            tokens = decode(responses[position, start:end].tolist())
            signals = {name: value[position, start:end].float().tolist() for name, value in per_token.items()}
            advantage = sum(signals["advantage"]) / max(len(signals["advantage"]), 1)
            out.append(
                StepSignalsWire(
                    trajectory_id=trajectory_id_of_key(key),
                    step_index=index,
                    advantage=advantage,
                    token_signals=TokenSignalsWire.of(tokens, signals),
                )
            )
    return out


def _field(batch: Mapping[str, Tensor], name: str) -> Tensor | None:
    # A TensorDict refuses `in` and .get without a default: its keys() do not.
    return batch[name] if name in batch.keys() else None  # noqa: SIM118


def _runs(mask: Tensor) -> list[tuple[int, int]]:
    """(start, end) of each run of True in a [R] mask, in order."""
    edges = torch.diff(torch.nn.functional.pad(mask.int(), (1, 1)))
    starts = (edges == 1).nonzero().flatten().tolist()
    ends = (edges == -1).nonzero().flatten().tolist()
    return list(zip(starts, ends, strict=True))


def report_token_signals(
    reporter: Reporter | None,
    batch: Mapping[str, Tensor],
    batch_keys: Sequence[str],
    algorithm: Mapping[str, Any] | None,
    *,
    fetch: Fetch,
) -> int:
    """Send the kept steps' signals of one training batch; the number sent. Never raises: the
    trajectory page losing a batch's colours must not stop training."""
    if reporter is None or algorithm is None:
        return 0
    settings = algorithm.get(ALGORITHM_KEY) or {}
    try:
        steps = step_signals(
            batch,
            batch_keys,
            settings,
            kl_kind=str(algorithm.get("kl_penalty", "low_var_kl")),
            fetch=fetch,
            decode=token_decoder(str(settings.get(TOKENIZER_KEY, ""))),
        )
        if steps:
            reporter.log_token_signals(steps)
        return len(steps)
    except Exception:
        logger.exception("per-token signals of a training batch could not be sent")
        return 0


@functools.cache
def token_decoder(tokenizer_path: str) -> Decode:
    """Each token's text, with the run's tokenizer (loaded once per process)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    return lambda ids: tokenizer.batch_decode([[token] for token in ids])
