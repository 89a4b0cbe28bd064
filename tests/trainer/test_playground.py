"""The playground's agent loop within its budgets (docs/playground.md#budgets): SmolLM2's real
tokenizer, the real flow, env and echo tool; the LLM is scripted to call the tool forever."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainer.config import RunConfig
from trainer.llm import Generation, SamplingParams
from trainer.playground import TIME_BUDGET, Budget, play

LOOPING_CALL = '<tool_call>\n{"name": "echo", "arguments": {"text": "again"}}\n</tool_call>'


class LoopingLLM:
    """Answers every call with the same tool call: a prompt that loops."""

    def __init__(self, tokenizer: Any, reply: str = LOOPING_CALL) -> None:
        self.ids = [*tokenizer.encode(reply, add_special_tokens=False), tokenizer.eos_token_id]
        self.calls = 0

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        self.calls += 1
        return Generation(token_ids=self.ids[: sampling.max_new_tokens])


def row(ground_truth: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {
        "data_source": "exact",
        "prompt": [{"role": "user", "content": "Echo <b>again</b> and again."}],
        "extra_info": {"index": 0},
        "env_kwargs": json.dumps({"env_type": "tool", "tools": ["echo"]}),
    }
    if ground_truth is not None:
        found["reward_model"] = {"style": "rule", "ground_truth": ground_truth}
    return found


def config() -> RunConfig:
    return RunConfig.from_mapping({"rollout": {"tools": ["echo"]}, "data": {"max_prompt_length": 4096}})


def run(tokenizer: Any, budget: Budget, **kwargs: Any) -> tuple[Any, list[dict[str, Any]], LoopingLLM]:
    llm = LoopingLLM(tokenizer, kwargs.pop("reply", LOOPING_CALL))
    seen: list[dict[str, Any]] = []
    result = play(
        kwargs.pop("the_row", row()),
        llm=llm,
        tokenizer=tokenizer,
        config=config(),
        budget=budget,
        on_step=seen.append,
    )
    return result, seen, llm


def test_a_looping_prompt_stops_at_its_step_limit_with_each_tool_call_shown(smol_tokenizer: Any) -> None:
    result, seen, llm = run(smol_tokenizer, Budget(max_steps=3, max_total_tokens=10_000))
    assert result.stop_reason == "max_steps"
    assert llm.calls == 3
    assert [step["index"] for step in seen] == [0, 1, 2]  # each step handed over as it came
    call = seen[0]["tool_calls"][0]
    assert (call["name"], call["arguments"], call["result"], call["error"]) == (
        "echo",
        '{"text": "again"}',
        "again",
        None,
    )
    assert result.reward is None  # no ground truth: nothing to score


def test_a_looping_prompt_stops_at_its_token_budget(smol_tokenizer: Any) -> None:
    per_call = len(LoopingLLM(smol_tokenizer).ids)
    result, seen, llm = run(smol_tokenizer, Budget(max_steps=50, max_total_tokens=2 * per_call))
    assert result.stop_reason == "response_budget"
    assert (result.response_tokens, len(seen), llm.calls) == (2 * per_call, 2, 2)


def test_a_spent_time_budget_stops_before_the_next_llm_call(smol_tokenizer: Any) -> None:
    result, seen, llm = run(smol_tokenizer, Budget(max_steps=50, time_s=0))
    assert (result.stop_reason, llm.calls, seen) == (TIME_BUDGET, 0, [])


@pytest.mark.parametrize("truth, reward", [("ping", 1.0), ("pong", 0.0)])
def test_a_ground_truth_scores_the_answer_with_the_rows_reward(
    smol_tokenizer: Any, truth: str, reward: float
) -> None:
    result, _seen, _llm = run(smol_tokenizer, Budget(max_steps=3), the_row=row(truth), reply="ping")
    assert (result.stop_reason, result.reward) == ("done", reward)
