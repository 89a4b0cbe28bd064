"""Our verl agent loop driven by a scripted server manager (verl's LLM server is the one mock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.workers.rollout.replica import TokenOutput

from trainer.backends.verl import agent_loop
from trainer.backends.verl.agent_loop import StudioAgentLoop
from trainer.config import RunConfig
from trainer.tools import BaseTool
from trainer.tools.base import ToolResult

RESPONSE_LENGTH = 256
CALL = '<tool_call>\n{"name": "bonus", "arguments": {"text": "hi"}}\n</tool_call>'
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


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


def verl_sample(
    question: str = "What is 2 + 2?", *, uid: str = "prompt-uid-1", session_id: int = 1
) -> dict[str, Any]:
    """A sample as verl's dataset hands it over: numpy values, the prompt as raw_prompt."""
    return {
        "raw_prompt": np.array([{"role": "user", "content": question}], dtype=object),
        "data_source": "contains",
        "reward_model": {"style": "rule", "ground_truth": "4"},
        "extra_info": {"index": np.int64(3)},
        "index": np.int64(3),
        "uid": uid,
        "session_id": session_id,
        "global_steps": 5,
    }
