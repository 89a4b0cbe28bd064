"""Flows: AgentFlowBase, the FLOWS registry ("agent_env_loop", "single_step") and context policies."""

from __future__ import annotations

from trainer.flows.base import FLOWS, AgentFlowBase, FlowOutput, flow_for_row
from trainer.flows.context import CONTEXT_POLICIES, ContextPolicy, append_only, sliding_window
from trainer.flows.loop import AgentEnvLoop
from trainer.flows.single_step import SingleStepFlow

__all__ = [
    "CONTEXT_POLICIES",
    "FLOWS",
    "AgentEnvLoop",
    "AgentFlowBase",
    "ContextPolicy",
    "FlowOutput",
    "SingleStepFlow",
    "append_only",
    "flow_for_row",
    "sliding_window",
]
