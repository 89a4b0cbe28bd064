"""Our flows, envs, tools and rewards inside verl's rollout: an ``AgentLoopBase`` subclass.

verl trains one row per trajectory: the first prompt, then every turn's model tokens (mask 1) with
the tool/env tokens between turns (mask 0). Our flows rebuild each step's prompt from the env's
messages, so :class:`ServerManagerLLM` keeps the trajectory's running token sequence and sends the
server *that* sequence plus the new observation tokens, never a re-tokenised copy of earlier
responses: what verl trains on is exactly what vLLM conditioned on. The observation tokens of a
step are the tail of the flow's next prompt after the end-of-turn token that closed the previous
response. This needs prompts that only grow (``rollout.context_policy: append``); a flow whose next
prompt drops earlier context is refused with a clear error.

Step rewards travel as follows: each step's reward sits on its last model token of ``rm_scores``
(:class:`StepRewardOutput`), ``reward_score`` is their sum R(τ), and ``extra_fields["turn_scores"]``
lists them. Each step's anchor id (``Step.anchor_id``: GiGPO's observation groups, the id the torch
backend groups by too) sits on the step's model tokens of ``agent_r1_anchor_ids``. Each finished
trajectory (steps, tool calls, rewards) goes to the webapp through our reporter, built from the
job's environment (:mod:`.worker`). The run's team
tools and rewards reach this Ray worker the same way: fetched once per process over the run's token
and registered around each sample only (:func:`.worker.run_specs`, docs/tools.md#team-tools-in-runs).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml
from pydantic import PrivateAttr
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from trainer.backends.verl.estimators import ANCHOR_FIELD
from trainer.backends.verl.signals import trajectory_id
from trainer.backends.verl.worker import run_specs, trajectory_reporter
from trainer.config import RunConfig
from trainer.flows import FLOWS
from trainer.llm import Generation, SamplingParams
from trainer.mdp import Trajectory
from trainer.models import load_generation_config
from trainer.rollout import make_flow, score_trajectory, stop_token_ids
from trainer.team import run_scope

logger = logging.getLogger(__name__)

AGENT_LOOP_CLASS = "trainer.backends.verl.agent_loop.StudioAgentLoop"


class ContextNotAppendOnlyError(ValueError):
    """A flow's next prompt does not extend the previous one, so the turns cannot form one verl row."""


class ServerManagerLLM:
    """Our :class:`~trainer.llm.LLMClient` over verl's server manager, for one trajectory.

    ``sequence`` is the trajectory so far (prompt, then responses and observations); ``mask`` and
    ``log_probs`` cover everything after the first prompt; ``spans`` are each generation's
    [start, end) in response coordinates.
    """

    def __init__(
        self,
        server_manager: Any,
        sampling_params: Mapping[str, Any],
        *,
        response_length: int,
        stop_token_ids: frozenset[int],
        request_id: str | None = None,
    ) -> None:
        self.server_manager = server_manager
        self.sampling_params = dict(sampling_params)
        self.response_length = response_length
        self.stop_token_ids = stop_token_ids
        # One request id per trajectory: verl routes it to the same server (prefix cache hits).
        self.request_id = request_id or uuid.uuid4().hex
        self.sequence: list[int] = []
        self.prompt_length = 0
        self.mask: list[int] = []
        self.log_probs: list[float] = []
        self.spans: list[tuple[int, int]] = []
        self.last_prompt: list[int] = []  # the flow's own previous prompt (its re-rendered chat)
        self.num_preempted = -1

    @property
    def response_used(self) -> int:
        return len(self.sequence) - self.prompt_length

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Generation:
        if not self.sequence:
            self.sequence = list(prompt_ids)
            self.prompt_length = len(prompt_ids)
        else:
            observation = self.observation_tokens(prompt_ids)
            self._append(observation, model=False)
        self.last_prompt = list(prompt_ids)
        budget = min(sampling.max_new_tokens, self.response_length - self.response_used)
        if budget <= 0:
            # The trajectory's response budget (data.max_response_length) is spent: an empty answer.
            return Generation(token_ids=[], finish_reason="length")
        params = {**self.sampling_params, "max_tokens": budget}
        output = await self.server_manager.generate(
            request_id=self.request_id, prompt_ids=list(self.sequence), sampling_params=params
        )
        tokens = list(output.token_ids)
        log_probs = list(output.log_probs) if output.log_probs else [0.0] * len(tokens)
        if output.num_preempted is not None:
            self.num_preempted = max(self.num_preempted, 0) + int(output.num_preempted)
        start = self.response_used
        self._append(tokens, model=True, log_probs=log_probs)
        self.spans.append((start, self.response_used))
        stopped = bool(tokens) and tokens[-1] in self.stop_token_ids
        return Generation(
            token_ids=tokens, log_probs=log_probs, finish_reason="stop" if stopped else "length"
        )

    def observation_tokens(self, prompt_ids: list[int]) -> list[int]:
        """The tokens the flow's next prompt adds after the last response.

        The flow re-rendered the chat, so the last response appears in ``prompt_ids`` re-tokenised;
        what follows its end-of-turn token is the observation (and the next generation prompt).
        """
        previous = self.last_prompt
        if prompt_ids[: len(previous)] != previous:
            raise ContextNotAppendOnlyError(
                "the flow's next prompt does not extend the previous one; the verl backend trains one "
                "row per trajectory and needs rollout.context_policy append"
            )
        ended_with_stop = bool(self.spans and self.spans[-1][1] > self.spans[-1][0]) and (
            self.sequence[-1] in self.stop_token_ids
        )
        for position in range(len(previous), len(prompt_ids)):
            if prompt_ids[position] in self.stop_token_ids:
                # The template closed the turn here; if the model's own stop token closed it too,
                # that token is already in the sequence.
                return list(prompt_ids[position + 1 :] if ended_with_stop else prompt_ids[position:])
        raise ContextNotAppendOnlyError(
            "the flow's next prompt has no end-of-turn token after the previous response; cannot find "
            "where the observation starts"
        )

    def _append(self, tokens: list[int], *, model: bool, log_probs: list[float] | None = None) -> None:
        self.sequence.extend(tokens)
        self.mask.extend([1 if model else 0] * len(tokens))
        self.log_probs.extend(log_probs if log_probs is not None else [0.0] * len(tokens))


class StepRewardOutput(AgentLoopOutput):
    """An AgentLoopOutput whose ``rm_scores`` hold each step's reward on the step's last model token,
    and whose :data:`~.estimators.ANCHOR_FIELD` holds each step's anchor id on the step's tokens.

    verl's own output puts ``reward_score`` on the last token only; R(τ) is the same either way, but
    step-level estimators need to know where each step's reward was earned, and GiGPO which steps
    start from the same observation.
    """

    _step_rewards: list[tuple[int, float]] = PrivateAttr(default_factory=list)
    _step_anchors: list[tuple[int, int, int]] = PrivateAttr(default_factory=list)  # start, end, id

    def as_dict(self) -> dict[str, Any]:
        output = super().as_dict()
        if self._step_rewards and "rm_scores" in output:
            scores = output["rm_scores"].zero_()
            for position, reward in self._step_rewards:
                scores[position] += reward
        anchors = torch.zeros_like(output["response_mask"], dtype=torch.int64)
        for start, end, anchor in self._step_anchors:
            anchors[start:end] = anchor
        output[ANCHOR_FIELD] = anchors
        return output


def build_output(llm: ServerManagerLLM, trajectory: Trajectory, *, pad_token_id: int) -> StepRewardOutput:
    """The trajectory as one verl row: the first prompt, every turn after it, rewards per step."""
    response = llm.sequence[llm.prompt_length :][: llm.response_length]
    mask = llm.mask[: len(response)]
    log_probs = llm.log_probs[: len(response)]
    rewards = [float(step.reward or 0.0) for step in trajectory.steps]
    if not response:
        # verl cannot train an empty response; one masked pad token carries no gradient.
        response, mask, log_probs = [pad_token_id], [0], [0.0]
    output = StepRewardOutput(
        prompt_ids=llm.sequence[: llm.prompt_length],
        response_ids=response,
        response_mask=mask,
        response_logprobs=log_probs,
        reward_score=sum(rewards),
        num_turns=1 + 2 * len(trajectory.steps),
        metrics=AgentLoopMetrics(
            generate_sequences=float(trajectory.metrics.get("generate_s", 0.0)),
            tool_calls=float(trajectory.metrics.get("env_s", 0.0)),
            num_preempted=llm.num_preempted,
        ),
        extra_fields={
            "turn_scores": rewards,
            "tool_rewards": [
                float(call.reward) for step in trajectory.steps for call in step.tool_calls if call.reward
            ],
            "reward_extra_info": _reward_details(trajectory),
        },
    )
    output._step_rewards = _reward_positions(llm.spans, rewards, len(response))
    output._step_anchors = [
        (start, min(end, len(response)), step.anchor_id)
        for (start, end), step in zip(llm.spans, trajectory.steps, strict=False)
        if start < len(response)
    ]
    return output


def _reward_positions(
    spans: list[tuple[int, int]], rewards: list[float], length: int
) -> list[tuple[int, float]]:
    """Each step's reward at its last model token (a step with no tokens: the token before it)."""
    positions = []
    for (start, end), reward in zip(spans, rewards, strict=False):
        position = min(max(end - 1, start - 1, 0), length - 1)
        positions.append((position, reward))
    return positions


def _reward_details(trajectory: Trajectory) -> dict[str, float]:
    """The reward function's extra numbers (acc, f1, ...) of the final answer, for verl's val metrics."""
    for step in reversed(trajectory.steps):
        details = step.info.get("reward_details") or {}
        if details:
            return {key: float(value) for key, value in details.items() if isinstance(value, int | float)}
    return {}


# -- the agent loop --------------------------------------------------------------------------------


class StudioAgentLoop(AgentLoopBase):
    """Runs one of our flows (``flow``, from the agent-loop YAML) for one verl sample.

    ``run_config_path`` is the run's RunConfig as JSON on shared storage: the flow settings (max
    steps, env type, tools, context policy) come from it, the sampling settings from verl.
    """

    def __init__(self, *args: Any, flow: str, run_config_path: str, **kwargs: Any) -> None:
        kwargs.pop("name", None)  # the YAML entry's own name, passed along by hydra.instantiate
        kwargs.pop("tools", None)  # verl's tool list; our flows bring their own tools
        super().__init__(*args, **kwargs)
        self.flow = flow
        self.run_config = load_run_config(run_config_path)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        row = plain_row(kwargs)
        row["agent_name"] = self.flow
        llm = ServerManagerLLM(
            self.server_manager,
            sampling_params,
            response_length=int(self.rollout_config.response_length),
            stop_token_ids=turn_end_tokens(self.tokenizer),
        )
        with run_scope(
            run_specs(self.run_config), self.run_config.data.rewards, self.run_config.data.reward_rule
        ):
            flow = make_flow(row, llm, self.tokenizer, self.run_config)
            output = await flow.run(self.sampling(sampling_params), **row)
            trajectory = output.to_trajectory(
                row,
                traj_id=trajectory_id(row.get("uid", uuid.uuid4().hex), row.get("session_id", 0)),
                group_id=str(row.get("uid", "")),
                rollout_index=int(row.get("session_id", 0)),
            )
            score_trajectory(trajectory, row)
        report_trajectory(int(row.get("global_steps", 0) or 0), trajectory)
        tokenizer: Any = self.tokenizer
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        return build_output(llm, trajectory, pad_token_id=int(pad))

    def sampling(self, sampling_params: Mapping[str, Any]) -> SamplingParams:
        temperature = float(sampling_params.get("temperature", 1.0))
        return SamplingParams(
            temperature=temperature,
            top_p=float(sampling_params.get("top_p", 1.0)),
            max_new_tokens=self.run_config.rollout.max_new_tokens,
            greedy=temperature == 0,
        )


@functools.cache
def turn_end_tokens(tokenizer: Any) -> frozenset[int]:
    """:func:`trainer.rollout.stop_token_ids` for verl's tokenizer, which verl loads from the model's
    local folder: the generation config lies beside it."""
    folder = getattr(tokenizer, "name_or_path", "") or ""
    generation_config = load_generation_config(folder) if Path(folder).is_dir() else None
    return frozenset(stop_token_ids(tokenizer, generation_config))


def plain_row(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """verl's sample fields (numpy arrays and scalars inside) as plain Python, prompt under ``prompt``."""
    row = {key: _plain(value) for key, value in kwargs.items()}
    if "prompt" not in row and "raw_prompt" in row:
        row["prompt"] = row["raw_prompt"]
    return row


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        return _plain(value.tolist())
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


@functools.cache
def load_run_config(path: str) -> RunConfig:
    return RunConfig.from_json(Path(path).read_text(encoding="utf-8"))


def write_agent_loop_config(path: str | Path, run_config_path: str | Path) -> Path:
    """The YAML verl reads at ``agent.agent_loop_config_path``: every flow name, and every other project's
    name for one (FLOW_ALIASES: verl's tool_agent, Agent-R1's hotpotqa_agent, ...), → :class:`StudioAgentLoop`."""
    names = [*FLOWS.names(), *FLOWS.aliases()]
    entries = [
        {
            "name": name,
            "_target_": AGENT_LOOP_CLASS,
            "flow": FLOWS.canonical(name),
            "run_config_path": str(run_config_path),
        }
        for name in names
    ]
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump(entries, sort_keys=False), encoding="utf-8")
    return target


# -- where trajectories go -------------------------------------------------------------------------


def report_trajectory(step: int, trajectory: Trajectory) -> None:
    reporter = trajectory_reporter()
    if reporter is None:
        return
    trajectory.info.setdefault("reported_at", time.time())
    # Reporters never raise for a server that is away; anything else must not kill the rollout.
    try:
        reporter.log_trajectories(step, [trajectory])
    except Exception:
        logger.exception("could not report trajectory %s", trajectory.id)
