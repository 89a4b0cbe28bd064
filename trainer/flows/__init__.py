"""Flows: AgentFlowBase, the FLOWS registry ("agent_env_loop", "single_step") and context policies."""

from __future__ import annotations

from trainer.flows.base import FLOWS, AgentFlowBase, FlowOutput, flow_for_row
from trainer.flows.context import CONTEXT_POLICIES, ContextPolicy, append_only, sliding_window
from trainer.flows.loop import AgentEnvLoop
from trainer.flows.single_step import SingleStepFlow

# The flow names of Agent-R1's recipes and verl's agent loops, so their datasets' agent_name column
# runs as it is (docs/datasets.md#agent-names). Agent-R1's env-specific flows are our env loop: the
# row's env_kwargs (or the run's env settings) pick the env and its tools.
FLOW_ALIASES = {
    "single_step_agent": "single_step",  # Agent-R1's default for rows without an agent_name
    "gsm8k_tool": "agent_env_loop",
    "hotpotqa_agent": "agent_env_loop",
    "alfworld_agent": "agent_env_loop",
    "webshop_agent": "agent_env_loop",
    "single_turn_agent": "single_step",  # verl
    "tool_agent": "agent_env_loop",  # verl
}
for _alias, _target in FLOW_ALIASES.items():
    FLOWS.alias(_alias, _target)

__all__ = [
    "CONTEXT_POLICIES",
    "FLOWS",
    "FLOW_ALIASES",
    "AgentEnvLoop",
    "AgentFlowBase",
    "ContextPolicy",
    "FlowOutput",
    "SingleStepFlow",
    "append_only",
    "flow_for_row",
    "sliding_window",
]
