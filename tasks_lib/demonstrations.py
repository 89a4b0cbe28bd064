"""Demonstrations without a human (docs/demonstrations.md): each row's tool calls, from its recipe's
rule, run against the real tools through the row's own ToolEnv; the conversations whose final answer
the task's reward scores right are written in the chat-messages contract (trainer.contract.messages).

``tool_map`` says which tool runs each recipe tool's calls (``{"lookup": "team_kv"}``: a team tool in
place of the recipe's); the written conversation names the tool that ran. Team tools must be in the
TOOLS registry when this runs (the web app's job enters the team's scope, as a run does).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tasks_lib.demo_rules import DemoRule, Plan
from tasks_lib.registry import TASKS, load_recipes
from trainer.contract import PASS_THRESHOLD
from trainer.contract.messages import MESSAGES_KEY, TOOLS_KEY, conversation_problems
from trainer.envs import parse_env_kwargs
from trainer.envs.base import prompt_messages
from trainer.envs.tool_env import ToolEnv
from trainer.mdp import Action, Message
from trainer.rewards import RewardError, score_step

Row = Mapping[str, Any]
Progress = Callable[[int, int], None]

# Why a row was dropped: the keys of :attr:`Outcome.dropped`, in the words the job's page shows.
NO_RULE = "its task's recipe has no demonstration rule"
RULE_SKIPPED = "the rule has nothing for this row"
NOT_TOOL_ENV = "the row's env is not a tool env"
TOOL_FAILED = "a tool call failed"
NO_ANSWER = "the tool results did not give the answer"
WRONG_ANSWER = "the task's reward scored the answer wrong"
REWARD_FAILED = "the reward could not be computed"


@dataclass
class Outcome:
    """The conversations kept, and how many rows were dropped for each reason."""

    conversations: list[list[Message]] = field(default_factory=list)
    tools: list[list[dict[str, Any]]] = field(default_factory=list)  # the schemas offered, per conversation
    dropped: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # one detail per reason (the first)

    def drop(self, reason: str, detail: str = "") -> None:
        self.dropped[reason] += 1
        if detail:
            self.examples.setdefault(reason, detail[:300])

    def summary(self) -> dict[str, Any]:
        return {"kept": len(self.conversations), "dropped": dict(self.dropped), "examples": self.examples}


class Dropped(Exception):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason, self.detail = reason, detail


def rules_by_data_source() -> dict[str, DemoRule]:
    recipes = load_recipes()
    rules = {}
    for name in recipes.names():
        recipe = TASKS.get(name)
        if recipe.demonstrate is not None:
            rules[recipe.data_source] = recipe.demonstrate
    return rules


def recipe_tools(rows: Iterable[Row]) -> list[str]:
    """The recipe tools the rules call for these rows: what a tool map may replace."""
    rules = rules_by_data_source()
    names: dict[str, None] = {}
    for row in rows:
        rule = rules.get(str(row.get("data_source") or ""))
        plan = rule(row) if rule else None
        names.update((call.tool, None) for call in (plan.calls if plan else ()))
    return list(names)


def _env_for(row: Row, tool_map: Mapping[str, str]) -> tuple[ToolEnv, dict[str, Any]]:
    """The row's ToolEnv with mapped tools, and the row with its tools_kwargs renamed to match."""
    settings = parse_env_kwargs(row.get("env_kwargs"))
    if settings.pop("env_type", "tool") != "tool":
        raise Dropped(NOT_TOOL_ENV)
    tools = [tool_map.get(name, name) for name in settings.pop("tools", [])]
    info = dict(row.get("extra_info") or {})
    kwargs = dict(info.get("tools_kwargs") or {})
    info["tools_kwargs"] = {tool_map.get(name, name): value for name, value in kwargs.items()}
    env = ToolEnv(tools=tools, tool_format=settings.get("tool_format", "hermes"))
    return env, {**row, "extra_info": info}


async def _converse(row: Row, plan: Plan, tool_map: Mapping[str, str]) -> tuple[list[Message], ToolEnv]:
    env, mapped_row = _env_for(row, tool_map)
    env.reset(**mapped_row)
    messages = prompt_messages(row)
    results = []
    for planned in plan.calls:
        name = tool_map.get(planned.tool, planned.tool)
        text = env.format.render_call(name, dict(planned.arguments))
        _, _, _, info = await env.step(Action(text=text))
        record = info["tool_calls"][0]
        if record.error is not None:
            raise Dropped(TOOL_FAILED, f"{name}: {record.result}")
        results.append(record.result)
        messages += [{"role": "assistant", "content": text}, {"role": "tool", "content": record.result}]
    answer = plan.answer(results)
    if answer is None:
        raise Dropped(NO_ANSWER, " | ".join(results)[:300])
    return [*messages, {"role": "assistant", "content": answer}], env


def _check_answer(row: Row, answer: str) -> None:
    truth = (row.get("reward_model") or {}).get("ground_truth")
    try:
        score, details = score_step(str(row.get("data_source")), answer, truth, row.get("extra_info") or {})
    except RewardError as error:
        raise Dropped(REWARD_FAILED, str(error)) from None
    if float(details.get("acc", score)) < PASS_THRESHOLD:
        raise Dropped(WRONG_ANSWER, answer)


def demonstrate(
    row: Row, rules: Mapping[str, DemoRule], tool_map: Mapping[str, str], outcome: Outcome
) -> None:
    """One row: its verified conversation into ``outcome``, or the reason it was dropped."""
    rule = rules.get(str(row.get("data_source") or ""))
    try:
        if rule is None:
            raise Dropped(NO_RULE, str(row.get("data_source")))
        plan = rule(row)
        if plan is None:
            raise Dropped(RULE_SKIPPED)
        messages, env = asyncio.run(_converse(row, plan, tool_map))
        _check_answer(row, messages[-1]["content"])
    except Dropped as dropped:
        outcome.drop(dropped.reason, dropped.detail)
        return
    problems = conversation_problems(messages)
    if problems:  # a rule that wrote an empty answer, say: never written as a demonstration
        outcome.drop(NO_ANSWER, problems[0])
        return
    outcome.conversations.append(messages)
    outcome.tools.append(env.tool_schemas)


def generate(
    rows: Iterable[Row], *, tool_map: Mapping[str, str] | None = None, progress: Progress | None = None
) -> Outcome:
    """Every row's demonstration (see the module's docstring); ``progress(done, total)`` as it goes."""
    rows = list(rows)
    rules, outcome = rules_by_data_source(), Outcome()
    for done, row in enumerate(rows, start=1):
        demonstrate(row, rules, dict(tool_map or {}), outcome)
        if progress is not None:
            progress(done, len(rows))
    return outcome


def write(outcome: Outcome, path: Path) -> Path:
    """The kept conversations as a parquet file: ``messages`` and ``tools`` (JSON-encoded schemas)."""
    if not outcome.conversations:
        raise ValueError("no demonstration was kept: nothing to write")
    table = pa.table(
        {
            MESSAGES_KEY: outcome.conversations,
            TOOLS_KEY: [json.dumps(tools, ensure_ascii=False) for tools in outcome.tools],
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return path
