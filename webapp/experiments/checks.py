"""What a config must hold, beyond RunConfig's own checks, before the web app accepts it for a team:
checked when the experiment is made (the form and the REST API alike), so a config that can never
run is refused with the field to change instead of failing its runs seconds after they start
(docs/datasets.md#create-time-checks).

:func:`with_dataset_rewards` freezes the datasets' data_source → reward mappings into the config.
"""

from __future__ import annotations

from trainer.config import RunConfig
from webapp.accounts.models import Team

Refusals = dict[str, list[str]]


def refusals(team: Team, config: RunConfig) -> Refusals:
    """Field path → what is wrong, for everything the team's config names that cannot be used."""
    from webapp.datasets.models import Dataset
    from webapp.tools.models import (
        REWARDS,
        TOOLS,
        TeamReward,
        TeamTool,
        ToolStatus,
        ToolUnavailable,
        builtin_tools,
    )

    builtin_tools()  # every recipe's tools and rewards registered
    found: Refusals = {}
    for path, reference in (
        ("data.train_path", config.data.train_path),
        ("data.val_path", config.data.val_path),
    ):
        if path == "data.val_path" and not reference:
            continue
        if Dataset.resolve(team, reference) is None:
            found.setdefault(path, []).append(
                f"{reference or '(empty)'} is not a valid dataset of this team: name one as dataset:<id> "
                "(the datasets page lists them)"
            )
    if not config.model.path.strip():
        found["model.path"] = ["no model: set model.path (a built-in model name or a Hugging Face folder)"]
    ready = {tool.name: tool for tool in TeamTool.objects.filter(team=team, status=ToolStatus.READY)}
    for name in config.rollout.tools:
        if name in TOOLS:
            continue
        if name not in ready:
            found.setdefault("rollout.tools", []).append(
                f"tool {name!r} does not exist (or is not ready) in this team"
            )
            continue
        try:
            ready[name].run_spec()  # what the run will be given: refused now if it could not be
        except ToolUnavailable as exc:
            found.setdefault("rollout.tools", []).append(str(exc))
    team_rewards = set(TeamReward.objects.filter(team=team).values_list("name", flat=True))
    for source, reward in config.data.rewards.items():
        if reward not in REWARDS and reward not in team_rewards:
            found.setdefault("data.rewards", []).append(
                f"{source!r} is mapped to the reward {reward!r}, which does not exist in this team"
            )
    return found


def with_dataset_rewards(team: Team, config: RunConfig) -> RunConfig:
    """The config with its datasets' reward mappings under its own ``data.rewards`` (which win)."""
    from webapp.datasets.models import Dataset

    merged: dict[str, str] = {}
    for reference in (config.data.val_path, config.data.train_path):  # train's mapping over val's
        dataset = Dataset.resolve(team, reference)
        if dataset is not None:
            merged.update(dataset.effective_reward_map())
    merged.update(config.data.rewards)
    return config if merged == config.data.rewards else config.with_overrides(**{"data.rewards": merged})
