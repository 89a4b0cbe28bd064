"""Environments: AgentEnv, the ENVS registry, and ToolEnv (registered as "tool")."""

from __future__ import annotations

from trainer.envs.base import ENVS, AgentEnv, parse_env_kwargs, prompt_messages
from trainer.envs.tool_env import ToolEnv

__all__ = ["ENVS", "AgentEnv", "ToolEnv", "parse_env_kwargs", "prompt_messages"]
