from __future__ import annotations

import json
import re
from collections.abc import Container
from typing import Any
from urllib.parse import urlsplit

import jsonschema
from django import forms
from django.db.models import QuerySet

from trainer.tools import TOOLS, check_tool_definition, one_string_parameter
from trainer.tools.base import ENTRY_POINT, argument_error
from webapp.accounts.models import Team
from webapp.form_kit import model_form_field
from webapp.tools.models import (
    MAX_TIMEOUT_S,
    RULE_CHOICES,
    RewardKind,
    TeamReward,
    TeamTool,
    ToolKind,
    builtin_rewards,
    builtin_tools,
)
from webapp.tools.outbound import parse_target, refusal_of

EXAMPLE_SCHEMA = one_string_parameter("query", "What to look up.")
_HTTP_FIELDS = ("url", "method", "timeout_s", "secret_header", "secret")


class OutboundUrlMixin:
    """A form with a URL that the outbound rules must allow: an error for a refused URL, and the
    ``host:port`` an administrator could allow for it (the page's "allow this" button)."""

    missing_target: str | None = None

    def url_error(self, url: str) -> str | None:
        refusal = refusal_of(url)
        if refusal is None:
            return None
        self.missing_target = refusal.target
        return f"{refusal.message}."


def secret_header_fields(model: type[TeamTool | TeamReward]) -> tuple[forms.Field, forms.CharField]:
    """The header name (as ``model`` stores it) and value an HTTP tool or remote reward sends with every
    call. A form sent back for another field's error keeps what was typed, in the same page that carried
    it; once saved, the secret is never shown again."""
    header = model_form_field(model, "secret_header", label="Secret header name")
    value = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=True),
        label="Secret header value",
        help_text="Sent with every call; stored encrypted and never shown again.",
    )
    return header, value


def clean_team_name(
    name: str,
    *,
    noun: str,
    builtins: Container[str],
    teams_own: QuerySet[TeamTool] | QuerySet[TeamReward],
    editing: TeamTool | TeamReward | None,
) -> str:
    """A team tool's or reward's name: a valid function name, no built-in one's, and not taken by another
    of ``teams_own`` (``editing``, the one being changed, keeps its own)."""
    try:
        check_tool_definition(name, {"type": "object"})
    except ValueError as exc:
        raise forms.ValidationError(str(exc).replace("tool name", f"{noun} name")) from None
    if name in builtins:
        raise forms.ValidationError(f"{name!r} is a built-in {noun}; choose another name.")
    others = teams_own.filter(name=name)
    if editing is not None:
        others = others.exclude(pk=editing.pk)
    if others.exists():
        raise forms.ValidationError(f"This team already has a {noun} named {name!r}.")
    return name


class ToolForm(OutboundUrlMixin, forms.Form):
    name = forms.CharField(
        max_length=64, help_text="Letters, digits, '_' or '-': the function name the model calls."
    )
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    parameters = forms.JSONField(
        label="Arguments (JSON Schema)",
        initial=EXAMPLE_SCHEMA,
        widget=forms.Textarea(attrs={"rows": 8, "class": "code"}),
        help_text="A JSON Schema of type object; every call's arguments are checked against it.",
    )
    kind = forms.ChoiceField(choices=ToolKind.choices, initial=ToolKind.HTTP, widget=forms.RadioSelect)
    url = forms.URLField(max_length=500, required=False, label="URL", assume_scheme="http")
    method = forms.ChoiceField(
        choices=[("POST", "POST (JSON body)"), ("GET", "GET (query string)")], initial="POST"
    )
    timeout_s = forms.FloatField(
        label="Timeout (seconds)", initial=10.0, min_value=0.1, max_value=MAX_TIMEOUT_S
    )
    secret_header, secret = secret_header_fields(TeamTool)
    entry_point = forms.CharField(
        max_length=200,
        required=False,
        help_text="package.module:Class, a BaseTool subclass installed on the workers.",
    )

    def __init__(
        self, *args: Any, team: Team, is_staff: bool, editing: TeamTool | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.team = team
        self.is_staff = is_staff
        self.editing = editing  # the tool being changed: its own name is not taken

    def clean_name(self) -> str:
        builtin_tools()  # the registry is complete only once every recipe is loaded
        own = TeamTool.objects.filter(team=self.team)
        name = self.cleaned_data["name"].strip()
        return clean_team_name(name, noun="tool", builtins=TOOLS, teams_own=own, editing=self.editing)

    def clean_parameters(self) -> dict[str, Any]:
        value = self.cleaned_data["parameters"]
        if not isinstance(value, dict):
            raise forms.ValidationError("Expected a JSON object (a JSON Schema with type 'object').")
        try:
            check_tool_definition("schema", value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc).removeprefix("tool 'schema': ")) from None
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("kind") == ToolKind.PYTHON:
            self._clean_python(cleaned)
        elif cleaned.get("kind") == ToolKind.HTTP:
            self._clean_http(cleaned)
        return cleaned

    def _clean_python(self, cleaned: dict[str, Any]) -> None:
        if not self.is_staff:
            self.add_error("kind", "Only staff can register python tools.")
            return
        if not ENTRY_POINT.match(cleaned.get("entry_point") or ""):
            self.add_error("entry_point", "Give the class as package.module:Class.")

    def _clean_http(self, cleaned: dict[str, Any]) -> None:
        url = cleaned.get("url") or ""
        if not url:
            self.add_error("url", "An HTTP tool needs the URL it is served at.")
        elif urlsplit(url).scheme not in ("http", "https"):
            self.add_error("url", "The URL must start with http:// or https://.")
        elif (refusal := self.url_error(url)) is not None:
            self.add_error("url", refusal)

    def registration(self) -> dict[str, Any]:
        """The fields TeamTool.register takes, only those the chosen kind uses."""
        data = self.cleaned_data
        fields = {
            "name": data["name"],
            "description": data["description"],
            "parameters": data["parameters"],
            "kind": data["kind"],
        }
        if data["kind"] == ToolKind.HTTP:
            fields.update({key: data[key] for key in _HTTP_FIELDS})
        else:
            fields["entry_point"] = data["entry_point"]
        return fields


def argument_problem(parameters: dict[str, Any], arguments: Any) -> str | None:
    """Why ``arguments`` fail the schema, in the words the trainer uses at run time (None: they pass)."""
    return argument_error(jsonschema.Draft202012Validator(parameters), arguments)


class TryForm(forms.Form):
    arguments = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 5, "class": "code"}),
        help_text="A JSON object matching the schema.",
    )

    def __init__(self, *args: Any, parameters: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parameters = parameters
        if not self.is_bound:
            self.initial["arguments"] = json.dumps(example_arguments(parameters), indent=2)

    def clean_arguments(self) -> dict[str, Any]:
        try:
            arguments = json.loads(self.cleaned_data["arguments"])
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None
        problem = argument_problem(self.parameters, arguments)
        if problem is not None:
            raise forms.ValidationError(f"The arguments do not match the schema: {problem}")
        return dict(arguments)


def example_arguments(parameters: dict[str, Any]) -> dict[str, Any]:
    """A starting point for the try-it box: each property with an empty value of its type."""
    empty: dict[str, Any] = {
        "string": "",
        "integer": 0,
        "number": 0,
        "boolean": False,
        "array": [],
        "object": {},
    }
    properties = parameters.get("properties") or {}
    return {
        name: empty.get(str(spec.get("type")), "") if isinstance(spec, dict) else ""
        for name, spec in properties.items()
    }


class RewardForm(OutboundUrlMixin, forms.Form):
    """A team reward: a rule kind (with an optional format bonus) or a remote endpoint (docs/rewards.md)."""

    name = forms.CharField(
        max_length=64, help_text="Letters, digits, '_' or '-': how datasets and runs name it."
    )
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), required=False)
    data_source = forms.CharField(
        max_length=200,
        required=False,
        help_text="Datasets whose rows have this data_source are scored by it (unless mapped otherwise).",
    )
    kind = forms.ChoiceField(choices=RewardKind.choices, initial=RewardKind.RULE, widget=forms.RadioSelect)
    rule = forms.ChoiceField(
        choices=RULE_CHOICES,
        initial="exact",
        help_text="Rule kinds: how a response is compared with the ground truth.",
    )
    tolerance = forms.FloatField(
        initial=0.0,
        min_value=0.0,
        required=False,
        help_text="numeric: the largest difference still counted right.",
    )
    pattern = model_form_field(
        TeamReward,
        "pattern",
        label="Extract (regex)",
        help_text="regex: the first group (or the whole match) of the last match is compared.",
    )
    format_pattern = model_form_field(
        TeamReward,
        "format_pattern",
        label="Format bonus regex",
        help_text="A response matching it earns the bonus below on top of the rule's score.",
    )
    format_bonus = forms.FloatField(initial=0.0, required=False)
    url = forms.URLField(
        max_length=500,
        required=False,
        label="URL",
        assume_scheme="http",
        help_text='Receives a POST of {"data_source", "response", "ground_truth", "extra_info"}; '
        'answers {"score": x}.',
    )
    timeout_s = forms.FloatField(
        label="Timeout (seconds)", initial=10.0, min_value=0.1, max_value=MAX_TIMEOUT_S
    )
    retries = forms.IntegerField(
        initial=1, min_value=0, max_value=5, help_text="Tries again after a timeout or a 5xx."
    )
    secret_header, secret = secret_header_fields(TeamReward)

    def __init__(self, *args: Any, team: Team, editing: TeamReward | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.team = team
        self.editing = editing  # the reward being changed: its own name is not taken

    def clean_name(self) -> str:
        own = TeamReward.objects.filter(team=self.team)
        name = self.cleaned_data["name"].strip()
        return clean_team_name(
            name, noun="reward", builtins=builtin_rewards(), teams_own=own, editing=self.editing
        )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        for key in ("tolerance", "format_bonus"):
            cleaned[key] = cleaned.get(key) or 0.0
        for key in ("pattern", "format_pattern"):
            try:
                re.compile(cleaned.get(key) or "")
            except re.error as exc:
                self.add_error(key, f"Not a valid regular expression: {exc}")
        if (
            cleaned.get("kind") == RewardKind.RULE
            and cleaned.get("rule") == "regex"
            and not cleaned.get("pattern")
        ):
            self.add_error("pattern", "The regex rule needs the pattern that extracts the answer.")
        if cleaned.get("kind") == RewardKind.REMOTE:
            url = cleaned.get("url") or ""
            if not url:
                self.add_error("url", "A remote reward needs the URL of its endpoint.")
            elif (refusal := self.url_error(url)) is not None:
                self.add_error("url", refusal)
        return cleaned

    def registration(self) -> dict[str, Any]:
        data = self.cleaned_data
        keys = ["name", "description", "data_source", "kind"]
        keys += (
            ["url", "timeout_s", "retries", "secret_header", "secret"]
            if data["kind"] == RewardKind.REMOTE
            else []
        )
        keys += (
            ["rule", "tolerance", "pattern", "format_pattern", "format_bonus"]
            if data["kind"] == RewardKind.RULE
            else []
        )
        return {key: data[key] for key in keys}


class RewardTryForm(forms.Form):
    response = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}), help_text="A model response to score."
    )
    ground_truth = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "class": "code"}),
        help_text="The row's reward_model.ground_truth as JSON (a plain word is read as text).",
    )
    extra_info = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "class": "code"}),
        required=False,
        initial="{}",
        help_text="The row's extra_info as a JSON object.",
    )

    def clean_ground_truth(self) -> Any:
        raw = self.cleaned_data["ground_truth"]
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw

    def clean_extra_info(self) -> dict[str, Any]:
        raw = self.cleaned_data.get("extra_info") or "{}"
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Expected a JSON object.")
        return value

    def arguments(self) -> dict[str, Any]:
        return {key: self.cleaned_data[key] for key in ("response", "ground_truth", "extra_info")}


class OutboundTargetForm(forms.Form):
    """A target a site administrator allows (docs/security.md#outbound); the page and the API share it."""

    rule = forms.CharField(
        max_length=300,
        help_text="host:port (tools.internal:8080), a URL prefix (https://api.example.com/v1/) or a network "
        "on a port (93.184.216.0/24:443).",
    )
    note = forms.CharField(max_length=200, required=False, help_text="Why it is allowed, for the record.")

    def clean_rule(self) -> str:
        try:
            return str(parse_target(self.cleaned_data["rule"]))
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None
