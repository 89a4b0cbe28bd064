"""Agent flows (Agent-R1's AgentFlowBase layer, docs/algorithms.md#agentflowbase).

A flow runs one episode for one dataset row: it builds each prompt, asks the LLM for a response
(token in, token out), drives the env, and records one :class:`~trainer.mdp.Step` per LLM call.
The row's ``agent_name`` picks the flow (:func:`flow_for_row`); its ``env_kwargs`` override the
run's env defaults.
"""

from __future__ import annotations

import dataclasses
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from trainer.envs import ENVS, AgentEnv, parse_env_kwargs
from trainer.flows.context import CONTEXT_POLICIES
from trainer.llm import Generation, LLMClient, SamplingParams
from trainer.mdp import Message, Step, ToolCallRecord, Trajectory
from trainer.registry import Registry
from trainer.tools import FORMATS

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


@dataclass
class FlowOutput:
    """The steps of one episode, the flow's metrics, and ``info["stop_reason"]``
    ("done", "max_steps", "prompt_too_long" or "response_budget")."""

    steps: list[Step]
    metrics: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)

    def to_trajectory(
        self, row: Mapping[str, Any], *, traj_id: str, group_id: str, rollout_index: int = 0
    ) -> Trajectory:
        """The episode as a Trajectory; ``sample_index`` comes from the row's ``extra_info.index``."""
        extra_info = row.get("extra_info") or {}
        if "index" not in extra_info:
            raise ValueError(
                "row extra_info has no 'index'; every dataset row needs a unique extra_info.index"
            )
        return Trajectory(
            id=traj_id,
            group_id=group_id,
            sample_index=int(extra_info["index"]),
            rollout_index=rollout_index,
            data_source=str(row.get("data_source") or ""),
            steps=self.steps,
            ground_truth=(row.get("reward_model") or {}).get("ground_truth"),
            metrics=dict(self.metrics),
            info=dict(self.info),
        )


def with_tools_in_system(messages: list[Message], tools_text: str) -> list[Message]:
    """``messages`` with ``tools_text`` appended to the system message (one is added when none leads)."""
    if messages and messages[0].get("role") == "system":
        system = {**messages[0], "content": f"{messages[0]['content']}\n\n{tools_text}"}
        return [system, *messages[1:]]
    return [{"role": "system", "content": tools_text}, *messages]


def template_renders_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders ``tools=`` itself."""
    return "tools" in str(getattr(tokenizer, "chat_template", None) or "")


class AgentFlowBase(ABC):
    """Base class of flows; register subclasses with ``@FLOWS.register("agent_name")``."""

    def __init__(
        self,
        llm: LLMClient,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_steps: int,
        max_prompt_length: int,
        context_policy: str = "append",
        window: int = 4,
        env_type: str = "tool",
        env_defaults: Mapping[str, Any] | None = None,
        max_response_length: int | None = None,
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if max_response_length is not None and max_response_length < 1:
            raise ValueError(f"max_response_length must be at least 1, got {max_response_length}")
        if max_prompt_length < 1:
            raise ValueError(f"max_prompt_length must be at least 1, got {max_prompt_length}")
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self.llm = llm
        self.tokenizer = tokenizer
        self.max_steps = max_steps
        self.max_prompt_length = max_prompt_length
        self.context = CONTEXT_POLICIES.get(context_policy)
        self.window = window
        self.env_type = env_type
        self.env_defaults = dict(env_defaults or {})
        self.max_response_length = max_response_length  # the trajectory's model-token budget; None: none
        # Templates such as SmolLM2's ignore ``tools=``; then the tool list goes into the system
        # message in the tool format's own words, or the model would never learn the tools exist.
        self.template_renders_tools = template_renders_tools(tokenizer)
        # Told of each step as soon as it is made: the playground shows an episode while it runs.
        self.on_step: Callable[[Step], None] | None = None

    @abstractmethod
    async def run(self, sampling: SamplingParams, **row: Any) -> FlowOutput:
        """Run one episode for one dataset row."""

    def make_env(self, row: Mapping[str, Any]) -> AgentEnv:
        """A fresh env: the run's defaults, overridden by the row's ``env_kwargs``."""
        row_settings = parse_env_kwargs(row.get("env_kwargs"))
        defaults = dict(self.env_defaults)
        default_type = defaults.pop("env_type", self.env_type)
        env_type = row_settings.pop("env_type", default_type)
        # The run's defaults are settings of its own env type; a row that picks another type
        # (a ToolEnv run with some rows in a custom env) must not hand it the ToolEnv's tools.
        settings = {**defaults, **row_settings} if env_type == default_type else row_settings
        env_class = ENVS.get(env_type)
        try:
            return env_class(**settings)
        except TypeError as exc:
            raise ValueError(f"env {env_type!r} rejected its settings {sorted(settings)}: {exc}") from exc

    def encode_prompt(
        self, messages: list[Message], tools: Sequence[dict[str, Any]] = (), tool_format: str | None = None
    ) -> list[int]:
        """Prompt token ids from the chat template, ending with the assistant generation prompt."""
        if tools and not self.template_renders_tools:
            messages = with_tools_in_system(
                messages, FORMATS.get(tool_format or "hermes").tools_prompt(tools)
            )
        ids = self.tokenizer.apply_chat_template(
            messages, tools=list(tools) or None, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        if not isinstance(ids, list) or not all(isinstance(token, int) for token in ids):
            raise TypeError(
                f"apply_chat_template returned {type(ids).__name__}, expected a list of token ids"
            )
        return cast(list[int], ids)

    def decode(self, token_ids: list[int], *, skip_special_tokens: bool) -> str:
        text = self.tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
        if not isinstance(text, str):
            raise TypeError(f"tokenizer.decode returned {type(text).__name__}, expected str")
        return text

    def budgeted(self, sampling: SamplingParams, steps: Sequence[Step]) -> SamplingParams | None:
        """``sampling`` for the next step, its max_new_tokens capped by what is left of the trajectory's
        response budget (``max_response_length`` model tokens over all steps); None once it is spent."""
        if self.max_response_length is None:
            return sampling
        left = self.max_response_length - sum(len(step.response_ids) for step in steps)
        if left <= 0:
            return None
        return (
            sampling
            if sampling.max_new_tokens <= left
            else dataclasses.replace(sampling, max_new_tokens=left)
        )

    async def generate(
        self, prompt_ids: list[int], sampling: SamplingParams
    ) -> tuple[Generation, str, float]:
        """The generation, its text (special tokens skipped, as the env should see it), and seconds taken."""
        started = time.perf_counter()
        generation = await self.llm.generate(prompt_ids, sampling)
        elapsed = time.perf_counter() - started
        if generation.log_probs and len(generation.log_probs) != len(generation.token_ids):
            raise ValueError(
                f"LLM returned {len(generation.log_probs)} log-probs for {len(generation.token_ids)} tokens"
            )
        return generation, self.decode(generation.token_ids, skip_special_tokens=True), elapsed

    def make_step(
        self,
        prompt_ids: list[int],
        generation: Generation,
        response_text: str,
        *,
        reward: float | None,
        done: bool,
        timings: dict[str, float],
        tool_calls: Sequence[ToolCallRecord] = (),
        info: Mapping[str, Any] | None = None,
    ) -> Step:
        # The mask is all ones: a step's response holds only the model's tokens; tool output
        # reaches the model through the next step's prompt.
        step = Step(
            prompt_ids=list(prompt_ids),
            response_ids=list(generation.token_ids),
            response_mask=[1] * len(generation.token_ids),
            rollout_log_probs=list(generation.log_probs),
            reward=None if reward is None else float(reward),
            done=done,
            info={"finish_reason": generation.finish_reason, **dict(info or {})},
            timings=timings,
            tool_calls=list(tool_calls),
            prompt_text=self.decode(prompt_ids, skip_special_tokens=False),
            response_text=response_text,
        )
        if self.on_step is not None:
            self.on_step(step)
        return step

    def finish(self, steps: list[Step], stop_reason: str) -> FlowOutput:
        """Wrap up an episode: record why it stopped and sum the flow metrics."""
        if steps:
            steps[-1].info["stop_reason"] = stop_reason
        calls = [call for step in steps for call in step.tool_calls]
        metrics = {
            "num_steps": float(len(steps)),
            "tool_calls": float(len(calls)),
            "tool_errors": float(sum(call.error is not None for call in calls)),
            "malformed_calls": float(sum(call.error == "malformed" for call in calls)),
            "response_tokens": float(sum(len(step.response_ids) for step in steps)),
            "generate_s": sum(step.timings.get("generate_s", 0.0) for step in steps),
            "env_s": sum(step.timings.get("env_s", 0.0) for step in steps),
        }
        return FlowOutput(steps=steps, metrics=metrics, info={"stop_reason": stop_reason})


FLOWS: Registry[type[AgentFlowBase]] = Registry("flow (agent_name)")


def flow_for_row(row: Mapping[str, Any], default: str = "agent_env_loop") -> str:
    """The flow name for a row: its ``agent_name``, else ``default`` (another project's name for one of
    ours becomes ours). Unknown names raise, listing the choices."""
    name = str(row.get("agent_name") or default)
    FLOWS.get(name)
    return FLOWS.canonical(name)
