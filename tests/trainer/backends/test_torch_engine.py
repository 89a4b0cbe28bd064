"""The torch generation engine: batched, KV-cached, seeded sampling behind the LLMClient protocol."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import torch

from trainer.backends.torch.engine import TorchGenerationEngine, sample_next
from trainer.llm import SamplingParams
from trainer.models import load_policy, load_tokenizer

QUESTIONS = ["Hi", "What is two plus three, exactly?", "Name one colour of the rainbow, please, in one word."]


@pytest.fixture(scope="module")
def policy(sharp_tiny_model_dir: Path) -> Any:
    return load_policy(sharp_tiny_model_dir)


@pytest.fixture(scope="module")
def prompts(sharp_tiny_model_dir: Path) -> list[list[int]]:
    tokenizer = load_tokenizer(sharp_tiny_model_dir)
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True, return_dict=False
        )
        for q in QUESTIONS
    ]


def make_engine(policy: Any, *, seed: int = 0, stop: tuple[int, ...] = (2,)) -> TorchGenerationEngine:
    return TorchGenerationEngine(policy, stop_token_ids=stop, pad_token_id=2, seed=seed)


def test_it_matches_hf_greedy_generation_for_prompts_of_different_lengths(
    policy: Any, prompts: list[list[int]]
) -> None:
    assert len({len(p) for p in prompts}) == len(prompts)  # left padding really happens
    generations = make_engine(policy).generate_batch(prompts, SamplingParams(greedy=True, max_new_tokens=12))
    for prompt, generation in zip(prompts, generations, strict=True):
        expected = policy.generate(
            torch.tensor([prompt]), max_new_tokens=12, do_sample=False, eos_token_id=2, pad_token_id=2
        )[0, len(prompt) :].tolist()
        assert generation.token_ids == expected
        assert len(generation.log_probs) == len(generation.token_ids)


def test_it_reports_the_log_probs_a_full_forward_gives(policy: Any, prompts: list[list[int]]) -> None:
    generation = make_engine(policy).generate_batch(prompts[:1], SamplingParams(max_new_tokens=6))[0]
    sequence = torch.tensor([prompts[0] + generation.token_ids])
    with torch.no_grad():
        log_probs = policy(sequence).logits[0].log_softmax(-1)
    start = len(prompts[0]) - 1
    expected = [float(log_probs[start + i, token]) for i, token in enumerate(generation.token_ids)]
    assert generation.log_probs == pytest.approx(expected, abs=1e-4)


def test_it_stops_at_a_stop_token_and_keeps_it(policy: Any, prompts: list[list[int]]) -> None:
    free = make_engine(policy).generate_batch(prompts[:1], SamplingParams(greedy=True, max_new_tokens=8))[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 8
    stop_at = free.token_ids[3]
    stopped = make_engine(policy, stop=(2, stop_at)).generate_batch(
        prompts[:1], SamplingParams(greedy=True, max_new_tokens=8)
    )[0]
    assert stopped.token_ids == free.token_ids[: free.token_ids.index(stop_at) + 1]
    assert stopped.finish_reason == "stop"


def test_it_reproduces_samples_from_the_same_seed(policy: Any, prompts: list[list[int]]) -> None:
    sampling = SamplingParams(temperature=1.0, max_new_tokens=10)
    first = make_engine(policy, seed=7).generate_batch(prompts, sampling)
    again = make_engine(policy, seed=7).generate_batch(prompts, sampling)
    other = make_engine(policy, seed=8).generate_batch(prompts, sampling)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert [g.token_ids for g in first] != [g.token_ids for g in other]


def test_it_batches_concurrent_flows_into_one_wave(policy: Any, prompts: list[list[int]]) -> None:
    engine = make_engine(policy)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=4)

    async def flow(prompt: list[int]) -> int:
        with engine.track():
            await asyncio.sleep(0)  # flows reach the engine at different loop iterations
            return len((await engine.generate(prompt, sampling)).token_ids)

    async def main() -> list[int]:
        return list(await asyncio.gather(*(flow(p) for p in prompts * 3)))

    lengths = asyncio.run(main())
    assert len(lengths) == 9 and all(1 <= n <= 4 for n in lengths)
    assert engine.stats["batches"] == 1
    assert engine.stats["requests"] == 9


def test_flows_with_different_token_caps_share_a_wave_and_each_stops_at_its_own(
    policy: Any, prompts: list[list[int]]
) -> None:
    # A flow near the end of its response budget asks for fewer tokens than the others.
    engine = make_engine(policy, stop=(-1,))  # no stop token: every row runs to its cap

    async def flow(prompt: list[int], cap: int) -> int:
        with engine.track():
            return len(
                (await engine.generate(prompt, SamplingParams(greedy=True, max_new_tokens=cap))).token_ids
            )

    async def main() -> list[int]:
        return list(await asyncio.gather(*(flow(p, cap) for p, cap in zip(prompts, (2, 7, 4), strict=True))))

    assert asyncio.run(main()) == [2, 7, 4]
    assert engine.stats["batches"] == 1


def test_it_hands_a_model_failure_to_every_waiting_flow(prompts: list[list[int]]) -> None:
    class Broken(torch.nn.Module):
        def forward(self, **kwargs: Any) -> Any:
            raise RuntimeError("out of memory")

    engine = make_engine(Broken())

    async def main() -> list[Any]:
        sampling = SamplingParams(max_new_tokens=2)
        return list(
            await asyncio.gather(*(engine.generate(p, sampling) for p in prompts), return_exceptions=True)
        )

    results = asyncio.run(main())
    assert all(isinstance(r, RuntimeError) and "out of memory" in str(r) for r in results)


def test_it_rejects_an_empty_prompt(policy: Any) -> None:
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        asyncio.run(make_engine(policy).generate([], SamplingParams()))


def test_top_p_keeps_only_the_nucleus() -> None:
    logits = torch.tensor([[3.0, 2.0, 1.0, -5.0]]).repeat(200, 1)
    generator = torch.Generator().manual_seed(0)
    tokens, log_probs = sample_next(logits, SamplingParams(temperature=1.0, top_p=0.5), generator)
    # p = softmax = [0.66, 0.24, 0.09, ...]: the first token alone covers 0.5, so it is always drawn, with certainty.
    assert tokens.tolist() == [0] * 200
    assert torch.allclose(log_probs, torch.zeros(200))
    tokens, log_probs = sample_next(logits, SamplingParams(temperature=1.0, top_p=0.8), generator)
    assert set(tokens.tolist()) == {0, 1}
    nucleus = torch.tensor([3.0, 2.0]).log_softmax(-1)
    assert torch.allclose(log_probs, nucleus[tokens])


def test_temperature_scales_the_sampling_distribution() -> None:
    logits = torch.tensor([[2.0, 0.0]])
    _, log_prob = sample_next(
        logits, SamplingParams(temperature=0.5, top_p=1.0), torch.Generator().manual_seed(1)
    )
    tokens, _ = sample_next(logits, SamplingParams(temperature=0.5), torch.Generator().manual_seed(1))
    assert torch.allclose(log_prob, (logits / 0.5).log_softmax(-1)[0, tokens])
