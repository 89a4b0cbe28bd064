"""Per-token signals of a verl run for the trajectory page (docs/verl.md#token-signals).

A verl trajectory is reported by the rollout worker that ran it, before its update. The per-token
values come later, from two places:

- verl's driver: the old-log-prob pass leaves each token's entropy in TransferQueue, the reference
  pass its reference log-prob, and the advantage step (our hook,
  :func:`trainer.backends.verl.estimators.with_step_inputs`) the advantages. Once the advantages
  exist, :func:`report_token_signals` sends, for the trajectories the run keeps signals of, each
  step's tokens with its advantage, log_prob (under the rollout policy), entropy and KL to the
  reference, and marks those rows in TransferQueue (:data:`KEPT_FIELD`).
- the actor workers: the importance ratio and the clip decision exist only inside the update.
  Our policy loss hands them to :func:`report_update_signals` (through
  :func:`trainer.backends.verl.losses.verl_ppo_loss`), which sends them for the marked rows of each
  micro-batch, without the tokens: the webapp adds them to what the driver sent.

Both key a step by our trajectory id and the step's index.
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
from trainer.backends.verl.worker import trajectory_reporter
from trainer.contract import TOKEN_SIGNALS_MAX_TOKENS, StepSignalsWire, TokenSignalsWire
from trainer.report.reporters import Reporter
from trainer.report.token_signals import kept_trajectories

logger = logging.getLogger(__name__)

# What the driver reads from TransferQueue for the kept rows (the advantage step's batch lacks them).
FETCHED = ("responses", "entropy")  # responses first: the one that is always there
# The field the driver adds to each training row in TransferQueue, 1 on the rows whose signals the
# run keeps: the actor workers get every field of their rows and send the update's signals of these.
KEPT_FIELD = "agent_r1_token_signals"
# What the actor update computes per token that the driver cannot (trainer.algos.losses token_out).
UPDATE_SIGNALS = ("ratio", "clipped")

Fetch = Callable[[Sequence[str], Sequence[str]], Mapping[str, Tensor]]
Mark = Callable[[Sequence[str], Tensor], None]
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


def kept_rows(settings: Mapping[str, Any], batch_size: int) -> list[int]:
    """The rows of a training batch whose signals the run keeps (the torch backend's rule)."""
    return kept_trajectories(
        settings.get(SIGNALS_KEY), int(settings.get(SIGNALS_PER_STEP_KEY, 4)), batch_size
    )


def step_signals(
    batch: Mapping[str, Tensor],
    batch_keys: Sequence[str],
    kept: Sequence[int],
    *,
    kl_kind: str,
    fetch: Fetch,
    decode: Decode,
) -> list[StepSignalsWire]:
    """Each step's signals of the ``kept`` rows of one training batch (``batch``: verl's
    advantage-step tensors, [B, R] each, ``advantages`` filled in), in row order and, within a row,
    step order.

    A step is one run of mask-1 tokens (as for the estimators); its index counts the row's runs.
    """
    if not kept:
        return []
    kept = list(kept)
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
        for index, (start, end) in _steps(mask[position]):
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


def update_signals(data: Any, captured: Mapping[str, Tensor]) -> list[StepSignalsWire]:
    """The update's per-token signals (``captured``: :data:`UPDATE_SIGNALS`, [b, R] as verl's loss
    pads the micro-batch) of each step of the marked rows of one actor micro-batch, without tokens.

    ``data`` is the micro-batch as verl's engine hands it to the loss: every TransferQueue field of
    its rows, so the ``uid`` and ``session_id`` that name the trajectory and :data:`KEPT_FIELD`.
    """
    if not captured or not has_field(data, KEPT_FIELD):
        return []
    kept = (data[KEPT_FIELD].reshape(-1) > 0).nonzero().flatten().tolist()
    if not kept:
        return []
    mask = data.select("response_mask").to_padded_tensor()["response_mask"] > 0
    uids, sessions = _listed(data, "uid"), _listed(data, "session_id")
    out: list[StepSignalsWire] = []
    for row in kept:
        for index, (start, end) in _steps(mask[row]):
            signals = {name: value[row, start:end].float().tolist() for name, value in captured.items()}
            out.append(
                StepSignalsWire(
                    trajectory_id=trajectory_id(uids[row], sessions[row]),
                    step_index=index,
                    token_signals=TokenSignalsWire.of(None, signals),
                )
            )
    return out


def _listed(data: Any, name: str) -> list[Any]:
    """A TensorDict field of one value per row (a tensor, or a stack of Python values as TransferQueue
    keeps strings and numbers) as a list; indexing the TensorDict would give a stack's values as a
    tensordict LinkedList instead."""
    return list(data.get(name).tolist())


def _steps(mask: Tensor) -> list[tuple[int, tuple[int, int]]]:
    """(index, (start, end)) of each step of a row that the wire can carry (TokenSignalsWire)."""
    return [
        (index, (start, end))
        for index, (start, end) in enumerate(_runs(mask))
        if end - start <= TOKEN_SIGNALS_MAX_TOKENS
    ]


def has_field(data: Any, name: str) -> bool:
    """Whether a TensorDict has the field ``name`` (it refuses `in`; its keys() do not)."""
    return name in data.keys()  # noqa: SIM118


def _field(batch: Mapping[str, Tensor], name: str) -> Tensor | None:
    return batch[name] if has_field(batch, name) else None


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
    mark: Mark,
) -> int:
    """Send the kept steps' signals of one training batch and mark the kept rows for the actor
    workers (``mark``: 1 on kept rows, in ``batch_keys`` order); the number of steps sent. Never
    raises: the trajectory page losing a batch's colours must not stop training."""
    if reporter is None or algorithm is None:
        return 0
    settings = algorithm.get(ALGORITHM_KEY) or {}
    try:
        kept = kept_rows(settings, len(batch_keys))
        steps = step_signals(
            batch,
            batch_keys,
            kept,
            kl_kind=str(algorithm.get("kl_penalty", "low_var_kl")),
            fetch=fetch,
            decode=token_decoder(str(settings.get(TOKENIZER_KEY, ""))),
        )
        if steps:
            reporter.log_token_signals(steps)
        if kept:
            flags = torch.zeros(len(batch_keys), dtype=torch.int8)
            flags[kept] = 1
            mark(batch_keys, flags)
        return len(steps)
    except Exception:
        logger.exception("per-token signals of a training batch could not be sent")
        return 0


def report_update_signals(reporter: Reporter | None, data: Any, captured: Mapping[str, Tensor]) -> int:
    """Send what one actor micro-batch's update computed per token for its marked rows; the number
    of steps sent. Never raises (as :func:`report_token_signals`)."""
    if reporter is None:
        return 0
    try:
        steps = update_signals(data, captured)
        if steps:
            reporter.log_token_signals(steps)
        return len(steps)
    except Exception:
        logger.exception("per-token signals of an actor update could not be sent")
        return 0


def run_reporter() -> Reporter | None:
    """This Ray worker process's reporter to the run (the agent loop's, built from the job's environment)."""
    return trajectory_reporter()


@functools.cache
def token_decoder(tokenizer_path: str) -> Decode:
    """Each token's text, with the run's tokenizer (loaded once per process)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    return lambda ids: tokenizer.batch_decode([[token] for token in ids])
