"""AgentEnvLoop: the generic step-level agent loop (REFERENCE §2)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from trainer.envs import AgentEnv
from trainer.flows.base import FLOWS, AgentFlowBase, FlowOutput
from trainer.llm import SamplingParams
from trainer.mdp import Action, Step


@FLOWS.register("agent_env_loop")
class AgentEnvLoop(AgentFlowBase):
    """Reset the env, then up to ``max_steps`` times: stop if the response budget is spent, build the
    prompt from the env's messages through the context policy, stop if it exceeds
    ``max_prompt_length``, generate (at most what is left of the budget), step the env, record the
    step, stop when the env says done.
    """

    async def run(self, sampling: SamplingParams, **row: Any) -> FlowOutput:
        env = self.make_env(row)
        try:
            return await self._episode(env, sampling, row)
        finally:
            env.close()

    async def _episode(self, env: AgentEnv, sampling: SamplingParams, row: Mapping[str, Any]) -> FlowOutput:
        observation = env.reset(**row)
        steps: list[Step] = []
        for step_index in range(self.max_steps):
            step_sampling = self.budgeted(sampling, steps)
            if step_sampling is None:
                return self.finish(steps, "response_budget")
            messages = self.context(observation.messages, self.window)
            prompt_ids = self.encode_prompt(messages, observation.tools, observation.info.get("tool_format"))
            if len(prompt_ids) > self.max_prompt_length:
                return self.finish(steps, "prompt_too_long")
            generation, text, generate_s = await self.generate(prompt_ids, step_sampling)
            started = time.perf_counter()
            observation, reward, done, env_info = await env.step(
                Action(text=text, token_ids=generation.token_ids)
            )
            env_s = time.perf_counter() - started
            info = {key: value for key, value in env_info.items() if key != "tool_calls"}
            info.update(step_index=step_index, context_messages=len(messages))
            steps.append(
                self.make_step(
                    prompt_ids,
                    generation,
                    text,
                    reward=reward,
                    done=done,
                    timings={"generate_s": generate_s, "env_s": env_s},
                    tool_calls=env_info.get("tool_calls", ()),
                    info=info,
                )
            )
            if done:
                return self.finish(steps, "done")
        return self.finish(steps, "max_steps")
