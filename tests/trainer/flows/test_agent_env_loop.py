"""AgentEnvLoop and the single-step flow with SmolLM2's real tokenizer and a scripted LLM.

The scripted LLM is the one seam faked here: it answers with fixed texts, tokenised for real.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from trainer.envs import ENVS, AgentEnv
from trainer.flows import FLOWS, FlowOutput, flow_for_row
from trainer.llm import Generation, SamplingParams
from trainer.mdp import Action, Observation, Trajectory
from trainer.registry import RegistryError
from trainer.tools import FORMATS, TOOLS

SYSTEM = "You are a careful assistant."
QUESTION = "Echo the word ping, then tell me what you got."
SAMPLING = SamplingParams(max_new_tokens=64)


class ScriptedLLM:
    """Answers each generate() call with the next scripted text, tokenised with the real tokenizer."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.prompts: list[list[int]] = []
        self.responses: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if not self.replies:
            raise AssertionError("the flow asked for more responses than were scripted")
        self.prompts.append(list(prompt_ids))
        reply = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False)
        ids = [*reply, self.tokenizer.eos_token_id]
        self.responses.append(ids)
        return Generation(token_ids=ids, log_probs=[-0.5] * len(ids))


def echo_call(text: str) -> str:
    return f'<tool_call>\n{{"name": "echo", "arguments": {{"text": "{text}"}}}}\n</tool_call>'


def make_row(**extra: Any) -> dict[str, Any]:
    return {
        "data_source": "exact",
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
        "reward_model": {"style": "rule", "ground_truth": "ping"},
        "extra_info": {"index": 7},
        **extra,
    }


def run_flow(
    tokenizer: Any, replies: list[str], row: dict[str, Any], **settings: Any
) -> tuple[FlowOutput, ScriptedLLM]:
    llm = ScriptedLLM(tokenizer, replies)
    settings = {"max_steps": 5, "max_prompt_length": 4096, "env_defaults": {"tools": ["echo"]}, **settings}
    flow = FLOWS.get(flow_for_row(row, "agent_env_loop"))(llm, tokenizer, **settings)
    return asyncio.run(flow.run(SAMPLING, **row)), llm


def expected_ids(tokenizer: Any, messages: list[dict[str, str]], tools: bool = True) -> list[int]:
    """What the prompt must be: SmolLM2's template ignores tools=, so they go in the system message."""
    if tools:
        tools_text = FORMATS.get("hermes").tools_prompt([TOOLS.get("echo")().schema()])
        messages = [{"role": "system", "content": f"{SYSTEM}\n\n{tools_text}"}, *messages[1:]]
    return tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )


def test_a_tool_call_then_an_answer_makes_two_steps_with_the_right_prompts(smol_tokenizer: Any) -> None:
    out, llm = run_flow(smol_tokenizer, [echo_call("ping"), "I got ping."], make_row())
    first, second = out.steps
    history = make_row()["prompt"]
    assert first.prompt_ids == llm.prompts[0] == expected_ids(smol_tokenizer, history)
    after_tool = [
        *history,
        {"role": "assistant", "content": echo_call("ping")},
        {"role": "user", "content": "<tool_response>\nping\n</tool_response>"},
    ]
    assert second.prompt_ids == llm.prompts[1] == expected_ids(smol_tokenizer, after_tool)
    assert "<tool_response>\nping\n</tool_response>" in second.prompt_text
    assert (first.reward, first.done, [c.result for c in first.tool_calls]) == (0.0, False, ["ping"])
    assert (second.reward, second.done, second.response_text, second.tool_calls) == (
        None,
        True,
        "I got ping.",
        [],
    )
    for step, response in zip(out.steps, llm.responses, strict=True):
        assert step.response_ids == response
        assert step.response_mask == [1] * len(response)
        assert step.rollout_log_probs == [-0.5] * len(response)
        assert set(step.timings) == {"generate_s", "env_s"}
    assert out.info == {"stop_reason": "done"} and second.info["stop_reason"] == "done"
    assert {k: out.metrics[k] for k in ("num_steps", "tool_calls", "tool_errors", "malformed_calls")} == {
        "num_steps": 2.0,
        "tool_calls": 1.0,
        "tool_errors": 0.0,
        "malformed_calls": 0.0,
    }


def test_it_counts_malformed_calls_in_the_flow_metrics(smol_tokenizer: Any) -> None:
    out, _ = run_flow(smol_tokenizer, ['<tool_call>{"name": "echo", </tool_call>', "done"], make_row())
    assert (out.metrics["malformed_calls"], out.metrics["tool_errors"], out.metrics["num_steps"]) == (
        1.0,
        1.0,
        2.0,
    )
    assert "malformed tool call" in out.steps[1].prompt_text


def test_it_stops_when_the_next_prompt_is_too_long(smol_tokenizer: Any) -> None:
    first_length = len(expected_ids(smol_tokenizer, make_row()["prompt"]))
    out, llm = run_flow(
        smol_tokenizer, [echo_call("ping"), "never asked"], make_row(), max_prompt_length=first_length + 5
    )
    assert len(out.steps) == 1 and len(llm.prompts) == 1
    assert out.info["stop_reason"] == "prompt_too_long" == out.steps[0].info["stop_reason"]


def test_it_makes_no_step_when_the_first_prompt_is_too_long(smol_tokenizer: Any) -> None:
    first_length = len(expected_ids(smol_tokenizer, make_row()["prompt"]))
    out, llm = run_flow(smol_tokenizer, ["never asked"], make_row(), max_prompt_length=first_length - 1)
    assert (out.steps, llm.prompts, out.info["stop_reason"], out.metrics["num_steps"]) == (
        [],
        [],
        "prompt_too_long",
        0.0,
    )


class CappedLLM(ScriptedLLM):
    """A scripted LLM that, like a real one, generates at most ``max_new_tokens`` (and records them)."""

    def __init__(self, tokenizer: Any, replies: list[str]) -> None:
        super().__init__(tokenizer, replies)
        self.caps: list[int] = []

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        self.caps.append(sampling.max_new_tokens)
        generation = await super().generate(prompt_ids, sampling)
        ids = generation.token_ids[: sampling.max_new_tokens]
        return Generation(token_ids=ids, log_probs=generation.log_probs[: len(ids)])


@pytest.mark.parametrize("extra", [0, 5])
def test_the_response_budget_caps_each_step_and_ends_the_trajectory(smol_tokenizer: Any, extra: int) -> None:
    call = echo_call("ping")
    length = len(smol_tokenizer.encode(call, add_special_tokens=False)) + 1  # and the EOS
    budget = length + extra  # one whole step, then what is left
    llm = CappedLLM(smol_tokenizer, [call] * 5)
    flow = FLOWS.get("agent_env_loop")(
        llm, smol_tokenizer, max_steps=5, max_prompt_length=4096, env_defaults={"tools": ["echo"]},
        max_response_length=budget,
    )  # fmt: skip

    out = asyncio.run(flow.run(SAMPLING, **make_row()))

    assert sum(len(step.response_ids) for step in out.steps) == budget
    # The second call may only fill the budget (its cut-off tool call is a malformed one); then no more.
    assert llm.caps == [min(SAMPLING.max_new_tokens, budget), extra][: 2 if extra else 1]
    assert out.info["stop_reason"] == "response_budget"


def test_it_stops_after_max_steps(smol_tokenizer: Any) -> None:
    out, llm = run_flow(
        smol_tokenizer, [echo_call("a"), echo_call("b"), echo_call("c")], make_row(), max_steps=2
    )
    assert len(out.steps) == 2 and len(llm.prompts) == 2
    assert out.info["stop_reason"] == "max_steps"
    assert [step.done for step in out.steps] == [False, False]


def test_a_sliding_window_drops_old_turns_from_the_prompt(smol_tokenizer: Any) -> None:
    replies = [echo_call("alpha"), echo_call("bravo"), echo_call("charlie"), "finished"]
    windowed, _ = run_flow(
        smol_tokenizer, list(replies), make_row(), context_policy="sliding_window", window=1
    )
    appended, _ = run_flow(smol_tokenizer, list(replies), make_row(), context_policy="append")
    last = windowed.steps[-1]
    assert SYSTEM in last.prompt_text and QUESTION in last.prompt_text and "charlie" in last.prompt_text
    assert "alpha" not in last.prompt_text and "bravo" not in last.prompt_text
    assert last.info["context_messages"] == 4
    assert all(word in appended.steps[-1].prompt_text for word in ("alpha", "bravo", "charlie"))


def test_agent_name_routes_a_row_to_the_single_step_flow(smol_tokenizer: Any) -> None:
    row = make_row(agent_name="single_step")
    out, llm = run_flow(smol_tokenizer, [echo_call("ping")], row)
    (step,) = out.steps
    # No env: the tool call is the final answer, and the prompt offers no tools.
    assert (step.reward, step.done, step.tool_calls) == (None, True, [])
    assert step.prompt_ids == llm.prompts[0] == expected_ids(smol_tokenizer, row["prompt"], tools=False)
    assert flow_for_row(make_row(), "agent_env_loop") == "agent_env_loop"


def test_it_rejects_an_unknown_agent_name_listing_the_flows() -> None:
    with pytest.raises(RegistryError, match="choose one of: agent_env_loop, single_step"):
        flow_for_row(make_row(agent_name="react"), "agent_env_loop")


def test_row_env_kwargs_override_the_env_defaults(smol_tokenizer: Any) -> None:
    row = make_row(env_kwargs='{"tools": ["echo"], "max_tool_calls_per_step": 1}')
    out, _ = run_flow(
        smol_tokenizer,
        [echo_call("a") + echo_call("b"), "done"],
        row,
        env_defaults={"tools": [], "max_tool_calls_per_step": 4},
    )
    assert '"name": "echo"' in out.steps[0].prompt_text
    assert [call.error for call in out.steps[0].tool_calls] == [None, "too_many_calls"]
    assert out.metrics["tool_errors"] == 1.0


class CountdownEnv(AgentEnv):
    """Ends after ``turns`` steps with reward 1; records that it was closed."""

    closed: list[bool] = []

    def __init__(self, turns: int) -> None:
        super().__init__(turns=turns)
        self.left = turns

    def reset(self, **row: Any) -> Observation:
        return Observation(messages=list(row["prompt"]))

    async def step(self, action: Action) -> tuple[Observation, float | None, bool, dict[str, Any]]:
        self.left -= 1
        return (
            Observation(messages=[{"role": "user", "content": f"{self.left} left"}]),
            1.0,
            self.left == 0,
            {},
        )

    def close(self) -> None:
        CountdownEnv.closed.append(True)


def test_row_env_kwargs_choose_the_env_type(smol_tokenizer: Any, temp_register: Any) -> None:
    temp_register(ENVS, "countdown", CountdownEnv)
    CountdownEnv.closed.clear()
    out, _ = run_flow(
        smol_tokenizer, ["one", "two"], make_row(env_kwargs={"env_type": "countdown", "turns": 2})
    )
    assert [(step.reward, step.done) for step in out.steps] == [(1.0, False), (1.0, True)]
    assert "1 left" in out.steps[1].prompt_text
    assert CountdownEnv.closed == [True]


def test_it_names_the_env_setting_it_does_not_know(smol_tokenizer: Any) -> None:
    with pytest.raises(ValueError, match=r"env 'tool' rejected its settings \['max_turns', 'tools'\]"):
        run_flow(smol_tokenizer, ["x"], make_row(env_kwargs={"max_turns": 3}))


def test_a_flow_trajectory_survives_a_json_round_trip(smol_tokenizer: Any) -> None:
    row = make_row()
    out, _ = run_flow(smol_tokenizer, [echo_call("ping") + "<tool_call>bad</tool_call>", "I got ping."], row)
    trajectory = out.to_trajectory(row, traj_id="t-1", group_id="g-1", rollout_index=2)
    assert (trajectory.sample_index, trajectory.ground_truth, trajectory.data_source) == (7, "ping", "exact")
    restored = Trajectory.from_json(trajectory.to_json())
    assert restored == trajectory
    assert [call.error for call in restored.steps[0].tool_calls] == [None, "malformed"]


def test_a_trajectory_needs_the_rows_index() -> None:
    with pytest.raises(ValueError, match=r"extra_info\.index"):
        FlowOutput(steps=[], metrics={}).to_trajectory({"extra_info": {}}, traj_id="t", group_id="g")
