"""Our flows inside verl's AgentLoopBase, token in / token out through a fake server manager."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.workers.rollout.replica import TokenOutput

from trainer.backends.verl import agent_loop
from trainer.backends.verl.agent_loop import StudioAgentLoop, write_agent_loop_config
from trainer.config import RunConfig
from trainer.flows import FLOWS
from trainer.report import JsonlReporter, MemoryReporter, read_jsonl
from trainer.tools import TOOLS, BaseTool
from trainer.tools.base import ToolResult

RESPONSE_LENGTH = 256
CALL = '<tool_call>\n{"name": "bonus", "arguments": {"text": "hi"}}\n</tool_call>'


class BonusTool(BaseTool):
    """Echoes its text and pays a step reward of 0.25."""

    name = "bonus"
    description = "Return the text; earns a small reward."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    async def execute(self, args: dict[str, Any], **ctx: Any) -> ToolResult:
        return ToolResult(text=f"echo: {args['text']}", reward=0.25)


class ScriptedServer:
    """verl's server manager with canned responses; records what it was asked to continue."""

    def __init__(self, tokenizer: Any, texts: list[str]) -> None:
        end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.responses = [[*tokenizer.encode(text, add_special_tokens=False), end] for text in texts]
        self.prompts: list[list[int]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kw: Any
    ) -> TokenOutput:
        self.prompts.append(list(prompt_ids))
        tokens = self.responses[len(self.prompts) - 1][: sampling_params["max_tokens"]]
        return TokenOutput(token_ids=tokens, log_probs=[-0.5] * len(tokens))


class TinyModelServer:
    """verl's server manager over a real tiny model: sampled token in / token out."""

    def __init__(self, model_dir: Path) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
        self.generator = torch.Generator().manual_seed(0)

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **kw: Any
    ) -> TokenOutput:
        ids = torch.tensor([prompt_ids])
        tokens: list[int] = []
        log_probs: list[float] = []
        with torch.no_grad():
            for _ in range(min(sampling_params["max_tokens"], 12)):
                logits = self.model(torch.cat([ids, torch.tensor([tokens], dtype=torch.long)], dim=1)).logits[
                    0, -1
                ]
                probs = torch.softmax(logits / sampling_params["temperature"], dim=-1)
                token = int(torch.multinomial(probs, 1, generator=self.generator))
                tokens.append(token)
                log_probs.append(float(torch.log(probs[token])))
        return TokenOutput(token_ids=tokens, log_probs=log_probs)


def make_loop(tmp_path: Path, tokenizer: Any, server: Any, **settings: Any) -> StudioAgentLoop:
    config = RunConfig.from_preset(
        "grpo",
        **{
            "backend": "verl",
            "executor": "ray",
            "resources.gpus_per_node": 1,
            "trainer.batch_size": 1,
            "optim.mini_batch_size": 8,
            "rollout.tools": ["bonus"],
            "rollout.max_steps": 3,
            "rollout.max_new_tokens": 64,
            **settings,
        },
    )
    config_file = tmp_path / "run_config.json"
    config_file.write_text(config.to_json(), encoding="utf-8")
    agent_loop.load_run_config.cache_clear()
    trainer_config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 1024, "response_length": RESPONSE_LENGTH}},
            "data": {},
        }
    )
    return StudioAgentLoop(
        trainer_config=DictConfigWrap(trainer_config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=object,
        data_config=DictConfigWrap(OmegaConf.create({})),
        flow="agent_env_loop",
        run_config_path=str(config_file),
        name="agent_env_loop",
    )


def verl_sample(question: str = "What is 2 + 2?") -> dict[str, Any]:
    """A sample as verl's dataset hands it over: numpy values, the prompt as raw_prompt."""
    return {
        "raw_prompt": np.array([{"role": "user", "content": question}], dtype=object),
        "data_source": "contains",
        "reward_model": {"style": "rule", "ground_truth": "4"},
        "extra_info": {"index": np.int64(3)},
        "index": np.int64(3),
        "uid": "prompt-uid-1",
        "session_id": 1,
        "global_steps": 5,
    }


@pytest.fixture
def reporter() -> Any:
    memory = MemoryReporter()
    agent_loop.set_reporter(memory)
    yield memory
    agent_loop.set_reporter(None)


@pytest.fixture
def bonus_tool(temp_register: Any) -> None:
    temp_register(TOOLS, "bonus", BonusTool)


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def test_a_tool_calling_trajectory_becomes_one_verl_row_with_tool_tokens_masked(
    tmp_path: Path, smol_tokenizer: Any, reporter: MemoryReporter, bonus_tool: None
) -> None:
    server = ScriptedServer(smol_tokenizer, [CALL, "The answer is 4"])
    loop = make_loop(tmp_path, smol_tokenizer, server)
    output = asyncio.run(loop.run(dict(SAMPLING), **verl_sample()))

    first, second = server.responses
    assert output.prompt_ids == server.prompts[0]
    response, mask = output.response_ids, output.response_mask
    observation = response[len(first) : len(response) - len(second)]
    assert response[: len(first)] == first and response[len(response) - len(second) :] == second
    assert mask == [1] * len(first) + [0] * len(observation) + [1] * len(second)
    assert "echo: hi" in smol_tokenizer.decode(observation)
    # The second call continued the trajectory's own tokens, not a re-tokenised copy of the first answer.
    assert server.prompts[1] == output.prompt_ids + response[: len(response) - len(second)]
    assert output.response_logprobs == [-0.5] * len(first) + [0.0] * len(observation) + [-0.5] * len(second)

    # Step rewards: the tool's 0.25, then the reward function's 1.0 for the final answer.
    assert output.extra_fields["turn_scores"] == [0.25, 1.0]
    assert output.reward_score == 1.25
    scores = output.as_dict()["rm_scores"]
    assert scores[len(first) - 1].item() == 0.25 and scores[len(response) - 1].item() == 1.0
    assert scores.sum().item() == 1.25
    assert output.num_turns == 5

    [(step, [trajectory])] = reporter.trajectories
    assert step == 5 and trajectory.group_id == "prompt-uid-1" and trajectory.rollout_index == 1
    assert [s.reward for s in trajectory.steps] == [0.25, 1.0]
    assert [call.name for call in trajectory.steps[0].tool_calls] == ["bonus"]
    assert trajectory.steps[0].tool_calls[0].result == "echo: hi"


def test_the_trajectory_reaches_a_jsonl_reporter(
    tmp_path: Path, smol_tokenizer: Any, bonus_tool: None
) -> None:
    jsonl = JsonlReporter(tmp_path / "events.jsonl")
    agent_loop.set_reporter(jsonl)
    try:
        server = ScriptedServer(smol_tokenizer, [CALL, "4"])
        asyncio.run(make_loop(tmp_path, smol_tokenizer, server).run(dict(SAMPLING), **verl_sample()))
    finally:
        agent_loop.set_reporter(None)
        jsonl.close()
    [event] = read_jsonl(tmp_path / "events.jsonl")
    steps = event["trajectories"][0]["steps"]
    assert [s["reward"] for s in steps] == [0.25, 1.0]
    assert steps[0]["tool_calls"][0]["name"] == "bonus"


def test_a_sliding_window_flow_is_refused_with_a_clear_error(
    tmp_path: Path, smol_tokenizer: Any, reporter: MemoryReporter, bonus_tool: None
) -> None:
    # RunConfig refuses a sliding window on verl (VerlBackend.problems); the agent loop's own guard
    # still stops any flow whose prompts do not grow, here the same policy in a config checked as torch's.
    server = ScriptedServer(smol_tokenizer, [CALL, CALL.replace("hi", "there"), "4"])
    settings = {"rollout.context_policy": "sliding_window", "rollout.window": 1, "backend": "torch",
                "resources.gpus_per_node": 0}  # fmt: skip
    loop = make_loop(tmp_path, smol_tokenizer, server, **settings)
    with pytest.raises(agent_loop.ContextNotAppendOnlyError, match="context_policy append"):
        asyncio.run(loop.run(dict(SAMPLING), **verl_sample()))


def test_the_response_budget_ends_the_episode(
    tmp_path: Path, smol_tokenizer: Any, reporter: MemoryReporter, bonus_tool: None
) -> None:
    server = ScriptedServer(smol_tokenizer, [CALL, CALL, CALL])
    loop = make_loop(
        tmp_path, smol_tokenizer, server, **{"data.max_response_length": 40, "rollout.max_new_tokens": 30}
    )
    loop.rollout_config.response_length = 40
    output = asyncio.run(loop.run(dict(SAMPLING), **verl_sample()))
    assert len(output.response_ids) <= 40
    assert len(output.response_ids) == len(output.response_mask)


def test_a_real_tiny_model_samples_through_the_server_manager(
    tmp_path: Path, smol_tokenizer: Any, tiny_model_dir: Path, reporter: MemoryReporter, bonus_tool: None
) -> None:
    server = TinyModelServer(tiny_model_dir)
    output = asyncio.run(make_loop(tmp_path, smol_tokenizer, server).run(dict(SAMPLING), **verl_sample()))
    [(_, [trajectory])] = reporter.trajectories
    generated = [token for step in trajectory.steps for token in step.response_ids]
    model_tokens = [t for t, m in zip(output.response_ids, output.response_mask, strict=True) if m == 1]
    assert model_tokens == generated and len(generated) > 0
    assert all(lp <= 0.0 for lp in output.response_logprobs or [])
    assert output.reward_score == sum(step.reward or 0.0 for step in trajectory.steps)


def test_the_agent_loop_yaml_lists_every_flow(tmp_path: Path) -> None:
    path = write_agent_loop_config(tmp_path / "loops.yaml", tmp_path / "run_config.json")
    entries = yaml.safe_load(path.read_text())
    assert [entry["name"] for entry in entries] == FLOWS.names()
    assert {entry["_target_"] for entry in entries} == {"trainer.backends.verl.agent_loop.StudioAgentLoop"}
    assert all(entry["flow"] == entry["name"] for entry in entries)
