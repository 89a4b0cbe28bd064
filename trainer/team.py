"""A run's team tools and team rewards: built from the specs the run fetched over its own token
(:class:`~trainer.contract.RunSpecs`) and registered for that run only.

:func:`run_scope` puts them in the TOOLS and REWARDS registries' scoped overlays, and the run's
``data.rewards`` mapping in front of the data_source routing table and its ``data.reward_rule``, for
the duration of a ``with`` block: the torch backend trains inside one, and the verl agent loop runs each sample inside one in
its Ray worker (docs/tools.md#team-tools-in-runs). :func:`check_run_tools` is the check that makes a
run whose tool became unavailable fail before training, naming the tool.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from trainer.config_sections import RewardRule
from trainer.contract import RunSpecs, TeamToolSpec
from trainer.registry import RegistryError
from trainer.rewards import DATA_SOURCES, DEFAULT_REWARD_RULE, REWARDS, RewardFn
from trainer.team_rewards import build_reward
from trainer.tools import TOOLS, BaseTool, HttpTool, HttpToolSpec
from trainer.tools.allowlist import OutboundPolicy
from trainer.tools.base import load_tool_class


class UnavailableTool(RuntimeError):
    """A tool the run's config names cannot be used (unknown, not importable, host not allowed)."""


def build_tool(spec: TeamToolSpec, policy: OutboundPolicy | None) -> type[BaseTool]:
    """A BaseTool class for one team tool, described by what the team registered."""
    attrs: dict[str, Any] = {
        "name": spec.name,
        "description": spec.description,
        "parameters": dict(spec.parameters),
    }
    if spec.kind == "python":
        try:
            base = load_tool_class(spec.entry_point)
        except Exception as exc:  # importing runs the module's code: anything may go wrong
            raise UnavailableTool(
                f"tool {spec.name!r}: cannot import {spec.entry_point} on this machine: {type(exc).__name__}: {exc}"
            ) from exc
        # The registered schema is the contract shown in the UI and checked on every call.
        return type(f"TeamTool_{spec.name}", (base,), attrs)
    return type(f"TeamTool_{spec.name}", (HttpTool,), {**attrs, "spec": http_tool_spec(spec, policy)})


def http_tool_spec(spec: TeamToolSpec, policy: OutboundPolicy | None) -> HttpToolSpec:
    """What calls a team HTTP tool's endpoint, from the tool as the run receives it."""
    return HttpToolSpec(
        name=spec.name,
        description=spec.description,
        parameters=dict(spec.parameters),
        url=spec.url,
        method=spec.method,
        timeout_s=spec.timeout_s,
        secret=spec.secret,
        secret_header=spec.secret_header,
        policy=policy,
    )


def outbound_policy(specs: RunSpecs) -> OutboundPolicy:
    """The web app's outbound policy, which every team HTTP tool and remote reward call is checked against."""
    return OutboundPolicy.from_dict(specs.outbound.model_dump())


def build_tools(specs: RunSpecs) -> dict[str, type[BaseTool]]:
    policy = outbound_policy(specs)
    return {spec.name: build_tool(spec, policy) for spec in specs.tools}


def build_rewards(specs: RunSpecs) -> dict[str, RewardFn]:
    policy = outbound_policy(specs)
    return {spec.name: build_reward(spec, policy) for spec in specs.rewards}


def needs_specs(tool_names: Sequence[str], reward_map: Mapping[str, str]) -> bool:
    """Whether a run names tools or rewards that no plugin registers: its team's, fetched over its token."""
    from trainer.plugins import load_plugins

    load_plugins()
    return any(name not in TOOLS for name in tool_names) or any(
        name not in REWARDS for name in reward_map.values()
    )


def check_run_tools(tool_names: Sequence[str]) -> None:
    """Inside :func:`run_scope`: every tool the config names is built in or one of the run's team
    tools; else say which is not."""
    missing = [name for name in tool_names if name not in TOOLS]
    if missing:
        raise UnavailableTool(
            f"tool {', '.join(map(repr, missing))} is not available to this run (deleted, not ready, or "
            "its host is no longer allowed): register it again or remove it from the experiment"
        )


@contextlib.contextmanager
def run_scope(
    specs: RunSpecs | None,
    reward_map: Mapping[str, str] | None = None,
    reward_rule: RewardRule = DEFAULT_REWARD_RULE,
) -> Iterator[None]:
    """The run's team tools and rewards, its data_source → reward mapping and its reward rule
    (``data.reward_rule``), for this block only."""
    specs = specs or RunSpecs()
    try:
        tools, rewards = build_tools(specs), build_rewards(specs)
    except (ValueError, TypeError) as exc:  # a spec this trainer cannot build (a bad schema, a regex)
        raise UnavailableTool(str(exc)) from exc
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(TOOLS.scoped(tools))
            stack.enter_context(REWARDS.scoped(rewards))
        except RegistryError as exc:  # a team name that a recipe installed since took for itself
            raise UnavailableTool(f"a team entry clashes with a built-in one: {exc}") from exc
        stack.enter_context(DATA_SOURCES.mapped(dict(reward_map or {}), reward_rule))
        yield
