"""The single-step flow: one prompt, one response, scored by the reward function (no env, no tools)."""

from __future__ import annotations

from typing import Any

from trainer.envs import prompt_messages
from trainer.flows.base import FLOWS, AgentFlowBase, FlowOutput
from trainer.llm import SamplingParams


@FLOWS.register("single_step")
class SingleStepFlow(AgentFlowBase):
    """Plain RLHF-style generation: the row's prompt as is; ``max_steps`` and the env settings are unused."""

    async def run(self, sampling: SamplingParams, **row: Any) -> FlowOutput:
        prompt_ids = self.encode_prompt(prompt_messages(row))
        if len(prompt_ids) > self.max_prompt_length:
            return self.finish([], "prompt_too_long")
        # A fresh trajectory's budget holds at least one token (checked in __init__), never None here.
        generation, text, generate_s = await self.generate(
            prompt_ids, self.budgeted(sampling, []) or sampling
        )
        step = self.make_step(
            prompt_ids,
            generation,
            text,
            reward=None,
            done=True,
            timings={"generate_s": generate_s},
            info={"step_index": 0},
        )
        return self.finish([step], "done")
