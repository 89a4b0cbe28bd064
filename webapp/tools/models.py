"""The tool registry: the trainer's built-in tools plus each team's own tools, and the team's rewards.

A team tool is either ``http`` (an endpoint the outbound rules of webapp/tools/outbound.py allow,
called through the trainer's HttpTool, with an optional secret header stored encrypted) or ``python`` (a ``module:Class``
BaseTool subclass already installed on the workers; staff only). No code is ever accepted from the
browser: a python tool names code that an administrator installed.

A team reward (:class:`TeamReward`) is a rule kind with an optional format bonus, or a remote HTTP
endpoint on an allow-listed host (docs/rewards.md). A run receives the specs of the tools and rewards
its config names, secrets decrypted, over its own token (:func:`specs_for_run`); they never enter
the frozen config.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

from django.db import models
from django.db.models import Q
from django.utils import timezone

from trainer.contract import OutboundRules, RunSpecs, TeamRewardSpec, TeamToolSpec
from trainer.mdp import ToolCallRecord
from trainer.rewards import REWARDS
from trainer.team import http_tool_spec
from trainer.team_rewards import build_reward
from trainer.tools import TOOLS, BaseTool, HttpTool, HttpToolSpec, run_tool_call
from trainer.tools.allowlist import check_url
from trainer.tools.base import load_tool_class
from webapp.accounts.models import Team
from webapp.celery import enqueue_on_commit
from webapp.guarded import guarded_update
from webapp.records import CreatedRecord, WorkRecord
from webapp.tools import crypto
from webapp.tools.outbound import outbound_policy, url_refusal  # (and registers its OutboundTarget model)

# The tasks this module queues, by name (webapp.celery.enqueue_on_commit): webapp/tools/tasks.py
# imports this module.
CHECK_ENTRY_POINT_TASK = "webapp.tools.tasks.check_entry_point"
RUN_TRIAL_TASK = "webapp.tools.tasks.run_trial"
MAX_TIMEOUT_S = 120.0
BUILTIN_TRY_TIMEOUT_S = 30.0


def builtin_tools() -> list[type[BaseTool]]:
    """The trainer's TOOLS registry with every recipe and plugin loaded, sorted by name."""
    from tasks_lib.registry import load_recipes

    load_recipes()  # loads the entry-point plugins too; recipes register their tools on import
    return [TOOLS.get(name) for name in TOOLS.names()]


def builtin_rewards() -> list[str]:
    """Reward functions every run has: the trainer's and the recipes'."""
    from tasks_lib.registry import load_recipes

    load_recipes()
    return REWARDS.names()


load_entry_point = load_tool_class  # the trainer imports a python tool the same way at run start


class ToolKind(models.TextChoices):
    HTTP = "http", "HTTP endpoint"
    PYTHON = "python", "Python class on the workers (staff only)"


class ToolStatus(models.TextChoices):
    PENDING = "pending", "checking on a worker"
    READY = "ready"
    FAILED = "failed"


class ToolUnavailable(ValueError):
    """A tool or reward a run names cannot be used: the message names it and says why."""


class SecretHolder(models.Model):
    """A tool or reward that sends a secret header with every call. The secret is stored encrypted
    (webapp.tools.crypto), set only through the registration form and decrypted for a run."""

    # Fernet token (crypto.encrypt); the plain secret is never stored.
    secret_encrypted = models.TextField(blank=True)

    class Meta:
        abstract = True

    def keep_secret(self, secret: str) -> None:
        """Store ``secret`` encrypted; a blank one keeps the stored secret (forms never show it again)."""
        if secret:
            self.secret_encrypted = crypto.encrypt(secret)

    def plain_secret(self) -> str | None:
        """The stored secret, decrypted; None without one. crypto.SecretUnreadable under another key."""
        return crypto.decrypt(self.secret_encrypted) if self.secret_encrypted else None

    def secret_for_run(self, named: str) -> str | None:
        """The plain secret for a run; ToolUnavailable, naming the tool or reward, when unreadable."""
        try:
            return self.plain_secret()
        except crypto.SecretUnreadable as exc:
            raise ToolUnavailable(f"{named}: {exc}") from None


class TeamTool(SecretHolder, CreatedRecord):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=64, help_text="The function name the model calls.")
    description = models.TextField(blank=True)
    parameters = models.JSONField(help_text="JSON Schema (type object) of the arguments.")
    kind = models.CharField(max_length=10, choices=ToolKind.choices)
    url = models.CharField(max_length=500, blank=True)
    method = models.CharField(max_length=4, choices=[("POST", "POST"), ("GET", "GET")], default="POST")
    timeout_s = models.FloatField(default=10.0)
    secret_header = models.CharField(max_length=100, default="X-Tool-Secret")
    entry_point = models.CharField(max_length=200, blank=True, help_text="python kind: package.module:Class")
    status = models.CharField(max_length=10, choices=ToolStatus.choices, default=ToolStatus.READY)
    status_message = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="tool_name_unique_per_team")]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def register(cls, team: Team, user: Any, *, secret: str = "", **fields: Any) -> TeamTool:
        """Create the tool; a python tool is checked for importability on a worker before use."""
        tool = cls(team=team, created_by=user, **fields)
        tool.keep_secret(secret)
        tool.status = ToolStatus.PENDING if tool.kind == ToolKind.PYTHON else ToolStatus.READY
        tool.save()
        if tool.kind == ToolKind.PYTHON:
            enqueue_on_commit(CHECK_ENTRY_POINT_TASK, tool.pk)
        return tool

    def change(self, *, secret: str = "", **fields: Any) -> None:
        """Save new definition fields (a form's registration); a blank secret keeps the stored one.
        A python tool's entry point is checked again before use."""
        for name, value in fields.items():
            setattr(self, name, value)
        self.keep_secret(secret)
        self.status = ToolStatus.PENDING if self.kind == ToolKind.PYTHON else ToolStatus.READY
        self.status_message = ""
        self.save()
        if self.kind == ToolKind.PYTHON:
            enqueue_on_commit(CHECK_ENTRY_POINT_TASK, self.pk)

    @property
    def is_ready(self) -> bool:
        return self.status == ToolStatus.READY

    @property
    def target(self) -> str:
        return f"{self.method} {self.url}" if self.kind == ToolKind.HTTP else self.entry_point

    def run_spec(self) -> TeamToolSpec:
        """What a run receives (secret decrypted); ToolUnavailable when it cannot be used any more."""
        if not self.is_ready:
            raise ToolUnavailable(f"tool {self.name!r} is not ready ({self.get_status_display()})")
        if self.kind == ToolKind.PYTHON:
            return TeamToolSpec(
                name=self.name,
                description=self.description,
                parameters=self.parameters,
                kind="python",
                entry_point=self.entry_point,
            )
        if (refusal := url_refusal(self.url)) is not None:
            raise ToolUnavailable(f"tool {self.name!r} is no longer allowed: {refusal}")
        return self._http_spec(self.secret_for_run(f"tool {self.name!r}"))

    def _http_spec(self, secret: str | None) -> TeamToolSpec:
        return TeamToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            kind="http",
            url=self.url,
            method=self.method,  # type: ignore[arg-type]
            timeout_s=self.timeout_s,
            secret=secret,
            secret_header=self.secret_header,
        )

    def to_spec(self) -> HttpToolSpec:
        """The trainer's description of this HTTP tool, secret decrypted; refuses hosts no longer allowed."""
        if self.kind != ToolKind.HTTP:
            raise ValueError(f"tool {self.name!r} is a {self.kind} tool, not an HTTP one")
        policy = outbound_policy()
        check_url(self.url, policy)  # OutboundRefused (a PermissionError): the rules changed since
        # As a run builds it (trainer.team), so the try-it page calls the endpoint as a run would.
        return http_tool_spec(self._http_spec(self.plain_secret()), policy)

    def build(self) -> BaseTool:
        """A ready-to-run tool instance, described by what the team registered."""
        if self.kind == ToolKind.HTTP:
            return HttpTool(self.to_spec())
        tool = load_entry_point(self.entry_point)()
        # The registered schema is the contract shown in the UI and checked on every call.
        tool.name, tool.description, tool.parameters = self.name, self.description, self.parameters
        return tool

    def check_entry_point(self) -> bool:
        """Import the python tool's class here (on a worker) and record whether that worked."""
        try:
            load_entry_point(self.entry_point)
        except Exception as exc:
            # Importing a module runs its code: any exception means "not usable", with its message.
            return self._settle(
                ToolStatus.FAILED, f"cannot import {self.entry_point}: {type(exc).__name__}: {exc}"
            )
        return self._settle(ToolStatus.READY, f"imported on worker {socket.gethostname()}")

    def _settle(self, status: str, message: str) -> bool:
        # Race: a redelivered check task; only the first pending → settled counts.
        return guarded_update(self, Q(status=ToolStatus.PENDING), status=status, status_message=message)


def tool_choices(team: Team) -> list[tuple[str, str]]:
    """Tools an experiment can offer its agent: the built-in ones and the team's ready tools."""
    choices = [(tool.name, f"{tool.name} (built-in)") for tool in builtin_tools()]
    ready = TeamTool.objects.filter(team=team, status=ToolStatus.READY)
    return choices + [(tool.name, f"{tool.name} ({tool.kind})") for tool in ready]


class RewardKind(models.TextChoices):
    RULE = "rule", "Rule (computed by the trainer)"
    REMOTE = "remote", "Remote HTTP endpoint"


RULE_CHOICES = [
    ("exact", "exact match after normalisation"),
    ("numeric", "numeric, within a tolerance"),
    ("contains", "the answer appears in the response"),
    ("regex", "extract with a regex, then compare"),
    ("f1", "token F1"),
]


class TeamReward(SecretHolder, CreatedRecord):
    """A team's reward function for a data_source, defined through a form (docs/rewards.md)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="rewards")
    name = models.CharField(max_length=64, help_text="How datasets and runs name it.")
    description = models.TextField(blank=True)
    data_source = models.CharField(
        max_length=200, blank=True, help_text="Datasets with this data_source use it unless mapped otherwise."
    )
    kind = models.CharField(max_length=10, choices=RewardKind.choices, default=RewardKind.RULE)
    rule = models.CharField(max_length=10, choices=RULE_CHOICES, default="exact")
    tolerance = models.FloatField(default=0.0)
    pattern = models.CharField(max_length=500, blank=True)
    format_pattern = models.CharField(max_length=500, blank=True)
    format_bonus = models.FloatField(default=0.0)
    url = models.CharField(max_length=500, blank=True)
    timeout_s = models.FloatField(default=10.0)
    retries = models.PositiveSmallIntegerField(default=1)
    secret_header = models.CharField(max_length=100, default="X-Reward-Secret")

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="reward_name_unique_per_team")]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def register(cls, team: Team, user: Any, *, secret: str = "", **fields: Any) -> TeamReward:
        reward = cls(team=team, created_by=user, **fields)
        reward.keep_secret(secret)
        reward.save()
        return reward

    def change(self, *, secret: str = "", **fields: Any) -> None:
        """Save new definition fields (a form's registration); a blank secret keeps the stored one."""
        for name, value in fields.items():
            setattr(self, name, value)
        self.keep_secret(secret)
        self.save()

    @property
    def summary(self) -> str:
        if self.kind == RewardKind.REMOTE:
            return f"POST {self.url}"
        text = dict(RULE_CHOICES)[self.rule]
        if self.rule == "numeric":
            text += f" (± {self.tolerance:g})"
        if self.rule == "regex":
            text += f" ({self.pattern})"
        if self.format_pattern:
            text += f", +{self.format_bonus:g} for the format {self.format_pattern}"
        return text

    def run_spec(self) -> TeamRewardSpec:
        if self.kind == RewardKind.REMOTE and (refusal := url_refusal(self.url)) is not None:
            raise ToolUnavailable(f"reward {self.name!r} is no longer allowed: {refusal}")
        secret = self.secret_for_run(f"reward {self.name!r}")
        # The row's fields bear the wire's names; only the secret is stored otherwise (encrypted).
        stored = {name: getattr(self, name) for name in TeamRewardSpec.model_fields if name != "secret"}
        return TeamRewardSpec(**stored, secret=secret)

    def score(
        self, response: str, ground_truth: Any, extra_info: dict[str, Any]
    ) -> tuple[float, dict[str, Any]]:
        """One scoring, as a run would do it (the try-it page): (score, the other numbers)."""
        result = build_reward(self.run_spec(), outbound_policy())(
            response,
            ground_truth,
            extra_info,
            **({"data_source": self.data_source} if self.kind == RewardKind.REMOTE else {}),
        )
        if isinstance(result, dict):
            return float(result["score"]), {k: v for k, v in result.items() if k != "score"}
        return float(result), {}


def reward_choices(team: Team) -> list[tuple[str, str]]:
    """Rewards a data_source can be mapped to: the built-in ones and the team's."""
    team_rewards = TeamReward.objects.filter(team=team)
    return [(name, f"{name} (built-in)") for name in builtin_rewards()] + [
        (reward.name, f"{reward.name} (team: {reward.summary})") for reward in team_rewards
    ]


def specs_for_run(team: Team, tool_names: list[str], reward_names: list[str]) -> RunSpecs:
    """The team tools and rewards a run's config names, for that run's trainer; ToolUnavailable names
    the first that cannot be used (deleted, not ready, host no longer allowed)."""
    builtin_tools()  # the registries are complete only once every recipe is loaded
    wanted_tools = [name for name in tool_names if name not in TOOLS]
    found_tools = {tool.name: tool for tool in TeamTool.objects.filter(team=team, name__in=wanted_tools)}
    missing = [name for name in wanted_tools if name not in found_tools]
    if missing:
        raise ToolUnavailable(f"tool {missing[0]!r} no longer exists in the team")
    wanted_rewards = [name for name in reward_names if name not in REWARDS]
    found_rewards = {r.name: r for r in TeamReward.objects.filter(team=team, name__in=wanted_rewards)}
    missing = [name for name in wanted_rewards if name not in found_rewards]
    if missing:
        raise ToolUnavailable(f"reward {missing[0]!r} no longer exists in the team")
    return RunSpecs(
        tools=[found_tools[name].run_spec() for name in wanted_tools],
        rewards=[found_rewards[name].run_spec() for name in wanted_rewards],
        outbound=OutboundRules.model_validate(outbound_policy().to_dict()),
    )


class TrialStatus(models.TextChoices):
    PENDING = "pending", "running"
    DONE = "done"


class ToolTrial(WorkRecord):
    """One "try it" call of a tool, run by a Celery worker through the trainer's run_tool_call."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="tool_trials")
    tool = models.ForeignKey(TeamTool, null=True, blank=True, on_delete=models.CASCADE, related_name="trials")
    # A team reward's try: arguments hold {response, ground_truth, extra_info}; reward holds the score.
    team_reward = models.ForeignKey(
        TeamReward, null=True, blank=True, on_delete=models.CASCADE, related_name="trials"
    )
    builtin = models.CharField(max_length=64, blank=True, help_text="Name of the built-in tool tried.")
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=TrialStatus.choices, default=TrialStatus.PENDING)
    result = models.TextField(blank=True, help_text="The observation the model would see.")
    error = models.CharField(max_length=20, blank=True, help_text="ToolCallRecord.error, blank on success.")
    reward = models.FloatField(null=True, blank=True)
    latency_s = models.FloatField(null=True, blank=True)

    def __str__(self) -> str:
        return f"try {self.tool_name} ({self.status})"

    @property
    def tool_name(self) -> str:
        if self.team_reward is not None:
            return self.team_reward.name
        return self.tool.name if self.tool is not None else self.builtin

    @property
    def is_done(self) -> bool:
        return self.status == TrialStatus.DONE

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    @classmethod
    def start(
        cls,
        team: Team,
        user: Any,
        arguments: dict[str, Any],
        *,
        tool: TeamTool | None = None,
        builtin: str = "",
        team_reward: TeamReward | None = None,
    ) -> ToolTrial:
        trial = cls.objects.create(
            team=team,
            tool=tool,
            builtin=builtin,
            arguments=arguments,
            created_by=user,
            team_reward=team_reward,
        )
        enqueue_on_commit(RUN_TRIAL_TASK, trial.pk)
        return trial

    def _build(self) -> tuple[BaseTool, float]:
        if self.tool is not None:
            # A little over the tool's own timeout, so HttpTool's message (with the URL) wins.
            return self.tool.build(), self.tool.timeout_s + 1.0
        builtin_tools()
        return TOOLS.get(self.builtin)(), BUILTIN_TRY_TIMEOUT_S

    def run(self) -> bool:
        if self.is_done:
            return False
        record = ToolCallRecord(name=self.tool_name, arguments=self.arguments)
        if self.team_reward is not None:
            return self.finish(self._score(record))
        try:
            tool, timeout_s = self._build()
        except Exception as exc:
            # Loading a tool (a decrypt, an import, a host check) can fail in many ways; all are the answer.
            record.error, record.result = "execution", f"Error: cannot load tool {self.tool_name!r}: {exc}"
        else:
            asyncio.run(run_tool_call(record, {record.name: tool}, timeout_s=timeout_s))
        return self.finish(record)

    def _score(self, record: ToolCallRecord) -> ToolCallRecord:
        from trainer.rewards import RewardError

        arguments = self.arguments
        started = time.perf_counter()
        try:
            score, details = self.team_reward.score(  # type: ignore[union-attr]
                str(arguments.get("response", "")),
                arguments.get("ground_truth"),
                dict(arguments.get("extra_info") or {}),
            )
        except (RewardError, ToolUnavailable, ValueError) as exc:
            record.error, record.result = "reward_error", f"Error: {exc}"
        else:
            record.reward, record.result = score, json.dumps({"score": score, **details}, default=str)
        record.latency_s = time.perf_counter() - started
        return record

    def finish(self, record: ToolCallRecord) -> bool:
        # Race: a redelivered trial task; the first result stays.
        return guarded_update(
            self,
            Q(status=TrialStatus.PENDING),
            status=TrialStatus.DONE,
            result=record.result,
            error=record.error or "",
            reward=record.reward,
            latency_s=record.latency_s,
            finished_at=timezone.now(),
        )
