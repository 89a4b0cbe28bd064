"""The torch generation engine: an :class:`~trainer.llm.LLMClient` that batches concurrent requests.

Many flows ``await generate(...)`` at once (n samples times the batch of prompts, each possibly several steps
deep). The engine queues their requests and runs each wave as one left-padded batch with a KV cache:
identical prompts (the n samples of a group) are prefilled once, rows that hit a stop token leave the
batch, and sampling draws from a seeded ``torch.Generator`` so a run is reproducible.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from trainer.backends.torch.threads import ThreadBudget
from trainer.llm import Generation, SamplingParams


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: SamplingParams
    future: asyncio.Future[Generation]


def sample_next(
    logits: torch.Tensor, sampling: SamplingParams, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row from logits [B, V]; return (tokens [B], their log-probs [B]).

    The log-prob is under the distribution actually sampled from (temperature and top-p applied);
    greedy decoding reports the plain softmax log-prob of the argmax.

    A draw inverts the cumulative distribution at one uniform number per row: the same distribution
    as ``torch.multinomial``, which spends a random number per vocabulary entry (measured: 33 ms a
    call for 16 rows of SmolLM2's 49,152 tokens, a seventh of a decode step; docs/performance.md#generation).
    """
    logits = logits.float()
    if sampling.greedy or sampling.temperature <= 0:
        tokens = logits.argmax(dim=-1)
        return tokens, torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, None]).squeeze(-1)
    if sampling.temperature != 1.0:  # z / 1 is z: no copy of [B, V] logits per token
        logits = logits / sampling.temperature
    if sampling.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already cover top_p; the first always stays.
        drop_sorted = (sorted_probs.cumsum(dim=-1) - sorted_probs) >= sampling.top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    log_normaliser = torch.logsumexp(logits, dim=-1, keepdim=True)
    # float64 sums keep a token of probability 1e-9 drawable after 49,152 additions.
    cumulative = torch.cumsum((logits - log_normaliser).exp_(), dim=-1, dtype=torch.float64)
    draw = torch.rand((logits.shape[0], 1), generator=generator, dtype=torch.float64) * cumulative[:, -1:]
    # right=True: the first token whose cumulative mass exceeds the draw, so never a dropped (p = 0) one.
    tokens = torch.searchsorted(cumulative, draw, right=True).clamp_(max=logits.shape[-1] - 1)
    return tokens.squeeze(-1), (logits.gather(-1, tokens) - log_normaliser).squeeze(-1)


class ReservedCacheLayer(DynamicLayer):
    """A KV cache layer that writes each new token into room reserved up front.

    transformers' DynamicLayer concatenates the whole cache with the new token at every decode step,
    copying it (and faulting in fresh memory) once per layer and token: 22% of a CPU decode step for
    16 rows of SmolLM2 (docs/performance.md#generation). Here the keys and values are views of
    buffers sized for the prompt and every new token; a wave that outgrows them doubles them.
    """

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        batch, heads, _, dim = key_states.shape
        self._key_buffer = key_states.new_empty((batch, heads, self.capacity, dim))
        self._value_buffer = value_states.new_empty((batch, heads, self.capacity, dim))
        self.device = key_states.device
        self.is_initialized = True

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self._key_buffer.shape[-2]:
            self._key_buffer, self._value_buffer = (
                _grown(buffer, max(end, 2 * buffer.shape[-2]), self.length)
                for buffer in (self._key_buffer, self._value_buffer)
            )
        self._key_buffer[:, :, self.length : end] = key_states
        self._value_buffer[:, :, self.length : end] = value_states
        self.length = end
        return self._expose()

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self._key_buffer, self._value_buffer = self._key_buffer[indices], self._value_buffer[indices]
            self._expose()

    def _expose(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Point keys and values (what the base class and attention read) at the used part."""
        keys, values = self._key_buffer[:, :, : self.length], self._value_buffer[:, :, : self.length]
        self.keys, self.values = keys, values
        return keys, values


def _grown(buffer: torch.Tensor, capacity: int, used: int) -> torch.Tensor:
    bigger = buffer.new_empty((*buffer.shape[:2], capacity, buffer.shape[-1]))
    bigger[:, :, :used] = buffer[:, :, :used]
    return bigger


def reserved_cache(capacity: int) -> DynamicCache:
    """A DynamicCache whose layers reserve ``capacity`` positions (see :class:`ReservedCacheLayer`)."""
    cache = DynamicCache()
    cache.layer_class_to_replicate = functools.partial(ReservedCacheLayer, capacity)  # type: ignore[assignment]
    return cache


def _batch_key(sampling: SamplingParams) -> SamplingParams:
    return dataclasses.replace(sampling, max_new_tokens=1)


class TorchGenerationEngine:
    """Token-in/token-out generation for flows, batched across concurrent callers.

    Callers that register with :meth:`track` let the engine start a batch as soon as every live
    flow is waiting on it; untracked callers are batched with whoever queued before the engine ran,
    and a flow busy in slow tool I/O holds the others back by at most ``max_wait_s``. A wave runs on
    the event loop's thread, so tool I/O still in flight resumes when the wave ends.
    """

    def __init__(
        self,
        model: Any,
        *,
        stop_token_ids: Sequence[int],
        pad_token_id: int,
        device: torch.device | str = "cpu",
        seed: int = 0,
        max_batch_size: int = 64,
        max_wait_s: float = 0.05,
        threads: ThreadBudget | None = None,
    ) -> None:
        if not stop_token_ids:
            raise ValueError("stop_token_ids must hold at least the tokenizer's EOS id")
        self.model = model
        self.stop_token_ids = tuple(dict.fromkeys(int(t) for t in stop_token_ids))
        self.pad_token_id = int(pad_token_id)
        self.device = torch.device(device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(seed)
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.threads = threads  # decided again before each batch, in the thread that runs it
        self._pending: list[_Request] = []
        self._active = 0
        self._arrived: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self.stats = {"batches": 0, "requests": 0, "generated_tokens": 0}
        self.busy_s = 0.0  # wall time spent generating, so a step can tell it from env and tool time

    # -- asyncio side -------------------------------------------------------------------------

    @contextlib.contextmanager
    def track(self) -> Iterator[None]:
        """Mark one flow as live for the duration of the block (see the class docstring)."""
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            self._notify()

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if not prompt_ids:
            raise ValueError("prompt_ids is empty: a prompt needs at least one token")
        if sampling.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be ≥ 1, got {sampling.max_new_tokens}")
        loop = asyncio.get_running_loop()
        request = _Request(list(prompt_ids), sampling, loop.create_future())
        self._pending.append(request)
        self._notify()
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._serve())
        return await request.future

    def _notify(self) -> None:
        if self._arrived is not None:
            self._arrived.set()

    async def _serve(self) -> None:
        self._arrived = asyncio.Event()
        while self._pending:
            await self._wait_for_wave()
            batch = self._take_batch()
            try:
                # On the event loop's own thread, not a worker: libgomp throttles its threads' spin
                # once a second thread runs torch work, and that costs a third of a decode step
                # (docs/performance.md#cpu-threads). Flows are all waiting on this wave anyway.
                results = self.generate_batch(
                    [r.prompt_ids for r in batch],
                    batch[0].sampling,
                    [r.sampling.max_new_tokens for r in batch],
                )
            except Exception as exc:  # every waiting flow sees the failure, not a hang
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)
                continue
            for request, result in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(result)
            # Let the flows that just got results run their env step and queue their next prompt.
            await asyncio.sleep(0)

    async def _wait_for_wave(self) -> None:
        if self._arrived is None:
            return
        await asyncio.sleep(0)
        while len(self._pending) < min(self._active, self.max_batch_size):
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), self.max_wait_s)
            except TimeoutError:
                return

    def _take_batch(self) -> list[_Request]:
        # Requests that differ only in max_new_tokens share a batch: a flow caps its last steps by
        # what is left of its trajectory's response budget, and each row stops at its own cap.
        key = _batch_key(self._pending[0].sampling)
        batch = [r for r in self._pending if _batch_key(r.sampling) == key][: self.max_batch_size]
        taken = {id(r) for r in batch}
        self._pending = [r for r in self._pending if id(r) not in taken]
        return batch

    # -- torch side ---------------------------------------------------------------------------

    def generate_batch(
        self, prompts: list[list[int]], sampling: SamplingParams, max_new_tokens: Sequence[int] | None = None
    ) -> list[Generation]:
        """Generate for every prompt at once (blocking). Safe to call directly, without asyncio.

        ``max_new_tokens`` caps each row on its own; by default every row gets ``sampling``'s.
        """
        limits = (
            list(max_new_tokens) if max_new_tokens is not None else [sampling.max_new_tokens] * len(prompts)
        )
        if self.threads is not None:
            self.threads.refresh()
        was_training = self.model.training
        self.model.eval()
        started = time.perf_counter()
        try:
            # inference_mode rather than no_grad: no version counters or view tracking on the cache and
            # activations; nothing made here outlives the call except plain Python lists.
            with torch.inference_mode():
                results = self._decode(prompts, sampling, limits)
        finally:
            self.model.train(was_training)
            self.busy_s += time.perf_counter() - started
        self.stats["batches"] += 1
        self.stats["requests"] += len(prompts)
        self.stats["generated_tokens"] += sum(len(g.token_ids) for g in results)
        return results

    def _prefill(
        self, prompts: list[list[int]], new_tokens: int
    ) -> tuple[DynamicCache, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run each distinct prompt once; return (cache, last logits, attention mask, next position) per
        row. The cache reserves room for ``new_tokens`` more."""
        unique: dict[tuple[int, ...], int] = {}
        row_to_unique = [unique.setdefault(tuple(p), len(unique)) for p in prompts]
        width = max(len(p) for p in unique)
        ids = torch.full((len(unique), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(unique), width), dtype=torch.long)
        for i, prompt in enumerate(unique):
            ids[i, width - len(prompt) :] = torch.tensor(
                prompt
            )  # left padding: every prompt ends at column -1
            mask[i, width - len(prompt) :] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        cache = reserved_cache(width + new_tokens)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        index = torch.tensor(row_to_unique, device=self.device)
        if len(unique) != len(prompts):
            cache.batch_select_indices(index)
        return cache, out.logits[index, -1], mask[index], positions[index, -1] + 1

    def _decode(
        self, prompts: list[list[int]], sampling: SamplingParams, limits: list[int]
    ) -> list[Generation]:
        cache, logits, mask, position = self._prefill(prompts, max(limits))
        stop_ids = torch.tensor(self.stop_token_ids, device=self.device)
        alive = torch.arange(len(prompts), device=self.device)  # original row of each batch row
        row_limits = torch.tensor(limits, device=self.device)
        tokens: list[list[int]] = [[] for _ in prompts]
        log_probs: list[list[float]] = [[] for _ in prompts]
        for step in range(max(limits)):
            next_tokens, next_log_probs = sample_next(logits, sampling, self.generator)
            for row, token, log_prob in zip(
                alive.tolist(), next_tokens.tolist(), next_log_probs.tolist(), strict=True
            ):
                tokens[row].append(token)
                log_probs[row].append(log_prob)
            keep = ~torch.isin(next_tokens, stop_ids) & (row_limits[alive] > step + 1)
            if not bool(keep.any()):
                break
            if not bool(keep.all()):
                # Finished rows leave the batch, so the tail of a wave costs only what is still running.
                index = keep.nonzero().squeeze(-1)
                cache.batch_select_indices(index)
                alive, mask, position, next_tokens = (
                    alive[index],
                    mask[index],
                    position[index],
                    next_tokens[index],
                )
            mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=1)
            out = self.model(
                input_ids=next_tokens[:, None],
                attention_mask=mask,
                position_ids=position[:, None],
                cache=cache,
                use_cache=True,
            )
            logits, position = out.logits[:, -1], position + 1
        stops = set(self.stop_token_ids)
        return [
            Generation(token_ids=t, log_probs=lp, finish_reason="stop" if t and t[-1] in stops else "length")
            for t, lp in zip(tokens, log_probs, strict=True)
        ]
