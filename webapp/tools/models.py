"""The tool registry: the trainer's built-in tools plus each team's own tools.

A team tool is either ``http`` (an endpoint STUDIO_TOOL_ALLOWLIST allows, called through the trainer's
HttpTool, with an optional secret header stored encrypted) or ``python`` (a ``module:Class``
BaseTool subclass already installed on the workers; staff only). No code is ever accepted from the
browser: a python tool names code that an administrator installed.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import re
import socket
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from trainer.mdp import ToolCallRecord
from trainer.tools import TOOLS, BaseTool, HttpTool, HttpToolSpec, run_tool_call
from trainer.tools.allowlist import OutboundPolicy, OutboundRefused, check_url
from webapp.accounts.models import Team
from webapp.tools import crypto

logger = logging.getLogger(__name__)

ENTRY_POINT = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
MAX_TIMEOUT_S = 120.0
BUILTIN_TRY_TIMEOUT_S = 30.0


def builtin_tools() -> list[type[BaseTool]]:
    """The trainer's TOOLS registry with every recipe and plugin loaded, sorted by name."""
    from tasks_lib.registry import load_recipes

    load_recipes()  # loads the entry-point plugins too; recipes register their tools on import
    return [TOOLS.get(name) for name in TOOLS.names()]


def outbound_policy() -> OutboundPolicy:
    """STUDIO_TOOL_ALLOWLIST with the product's own service endpoints closed (docs/security.md#outbound)."""
    return OutboundPolicy.from_texts(settings.TOOL_ALLOWLIST, settings.SERVICE_ENDPOINTS)


def url_refusal(url: str) -> str | None:
    """Why a team tool may not call ``url`` (None: the rules allow it; the address is checked per call)."""
    try:
        check_url(url, outbound_policy())
    except OutboundRefused as refused:
        return str(refused)
    return None


def load_entry_point(entry_point: str) -> type[BaseTool]:
    """Import ``module:Class``; it must be a BaseTool subclass."""
    if not ENTRY_POINT.match(entry_point):
        raise ValueError(f"{entry_point!r} is not of the form package.module:Class")
    module_name, _, attribute = entry_point.partition(":")
    tool_class = getattr(importlib.import_module(module_name), attribute)
    if not (isinstance(tool_class, type) and issubclass(tool_class, BaseTool)):
        raise TypeError(f"{entry_point} is not a subclass of trainer.tools.BaseTool")
    return tool_class


class ToolKind(models.TextChoices):
    HTTP = "http", "HTTP endpoint"
    PYTHON = "python", "Python class on the workers (staff only)"


class ToolStatus(models.TextChoices):
    PENDING = "pending", "checking on a worker"
    READY = "ready"
    FAILED = "failed"


class TeamTool(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=64, help_text="The function name the model calls.")
    description = models.TextField(blank=True)
    parameters = models.JSONField(help_text="JSON Schema (type object) of the arguments.")
    kind = models.CharField(max_length=10, choices=ToolKind.choices)
    url = models.CharField(max_length=500, blank=True)
    method = models.CharField(max_length=4, choices=[("POST", "POST"), ("GET", "GET")], default="POST")
    timeout_s = models.FloatField(default=10.0)
    secret_header = models.CharField(max_length=100, default="X-Tool-Secret")
    # Fernet token (crypto.encrypt); the plain secret is never stored.
    secret_encrypted = models.TextField(blank=True)
    entry_point = models.CharField(max_length=200, blank=True, help_text="python kind: package.module:Class")
    status = models.CharField(max_length=10, choices=ToolStatus.choices, default=ToolStatus.READY)
    status_message = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="tool_name_unique_per_team")]

    def __str__(self) -> str:
        return self.name

    @classmethod
    def register(cls, team: Team, user: Any, *, secret: str = "", **fields: Any) -> TeamTool:
        """Create the tool; a python tool is checked for importability on a worker before use."""
        from webapp.tools.tasks import check_entry_point

        tool = cls(team=team, created_by=user, **fields)
        tool.secret_encrypted = crypto.encrypt(secret) if secret else ""
        tool.status = ToolStatus.PENDING if tool.kind == ToolKind.PYTHON else ToolStatus.READY
        tool.save()
        if tool.kind == ToolKind.PYTHON:
            check_entry_point.delay_on_commit(tool.pk)
        return tool

    @property
    def is_ready(self) -> bool:
        return self.status == ToolStatus.READY

    @property
    def target(self) -> str:
        return f"{self.method} {self.url}" if self.kind == ToolKind.HTTP else self.entry_point

    def to_spec(self) -> HttpToolSpec:
        """The trainer's description of this HTTP tool, secret decrypted; refuses hosts no longer allowed."""
        if self.kind != ToolKind.HTTP:
            raise ValueError(f"tool {self.name!r} is a {self.kind} tool, not an HTTP one")
        policy = outbound_policy()
        check_url(self.url, policy)  # OutboundRefused (a PermissionError): the rules changed since
        secret = crypto.decrypt(self.secret_encrypted) if self.secret_encrypted else None
        return HttpToolSpec(
            name=self.name, description=self.description, parameters=self.parameters, url=self.url,
            method=self.method, timeout_s=self.timeout_s, secret=secret, secret_header=self.secret_header,
            policy=policy,
        )  # fmt: skip

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
        changed = TeamTool.objects.filter(pk=self.pk, status=ToolStatus.PENDING).update(
            status=status, status_message=message
        )
        self.refresh_from_db()
        return changed == 1


def tool_choices(team: Team) -> list[tuple[str, str]]:
    """Tools an experiment can offer its agent: the built-in ones and the team's ready tools."""
    choices = [(tool.name, f"{tool.name} (built-in)") for tool in builtin_tools()]
    ready = TeamTool.objects.filter(team=team, status=ToolStatus.READY)
    return choices + [(tool.name, f"{tool.name} ({tool.kind})") for tool in ready]


class TrialStatus(models.TextChoices):
    PENDING = "pending", "running"
    DONE = "done"


class ToolTrial(models.Model):
    """One "try it" call of a tool, run by a Celery worker through the trainer's run_tool_call."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="tool_trials")
    tool = models.ForeignKey(TeamTool, null=True, blank=True, on_delete=models.CASCADE, related_name="trials")
    builtin = models.CharField(max_length=64, blank=True, help_text="Name of the built-in tool tried.")
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=TrialStatus.choices, default=TrialStatus.PENDING)
    result = models.TextField(blank=True, help_text="The observation the model would see.")
    error = models.CharField(max_length=20, blank=True, help_text="ToolCallRecord.error, blank on success.")
    reward = models.FloatField(null=True, blank=True)
    latency_s = models.FloatField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"try {self.tool_name} ({self.status})"

    @property
    def tool_name(self) -> str:
        return self.tool.name if self.tool is not None else self.builtin

    @property
    def is_done(self) -> bool:
        return self.status == TrialStatus.DONE

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    @classmethod
    def start(cls, team: Team, user: Any, arguments: dict[str, Any], *, tool: TeamTool | None = None, builtin: str = "") -> ToolTrial:  # fmt: skip
        from webapp.tools.tasks import run_trial

        trial = cls.objects.create(
            team=team, tool=tool, builtin=builtin, arguments=arguments, created_by=user
        )
        run_trial.delay_on_commit(trial.pk)
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
        try:
            tool, timeout_s = self._build()
        except Exception as exc:
            # Loading a tool (a decrypt, an import, a host check) can fail in many ways; all are the answer.
            record.error, record.result = "execution", f"Error: cannot load tool {self.tool_name!r}: {exc}"
        else:
            asyncio.run(run_tool_call(record, {record.name: tool}, timeout_s=timeout_s))
        return self.finish(record)

    def finish(self, record: ToolCallRecord) -> bool:
        # Race: a redelivered trial task; the first result stays.
        changed = ToolTrial.objects.filter(pk=self.pk, status=TrialStatus.PENDING).update(
            status=TrialStatus.DONE, result=record.result, error=record.error or "", reward=record.reward,
            latency_s=record.latency_s, finished_at=timezone.now(),
        )  # fmt: skip
        self.refresh_from_db()
        return changed == 1
