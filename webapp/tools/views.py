from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from trainer.tools import BaseTool
from webapp.accounts.access import get_team_for_user, is_site_admin
from webapp.accounts.models import Role, Team
from webapp.confirm import confirm_delete
from webapp.htmx import HtmxHttpRequest, render_poll, swaps, template_for
from webapp.tools.access import (
    get_builtin_for_user,
    get_reward_for_user,
    get_tool_for_user,
    get_trial_for_user,
)
from webapp.tools.forms import RewardForm, RewardTryForm, ToolForm, TryForm
from webapp.tools.models import (
    TeamReward,
    TeamTool,
    ToolStatus,
    ToolTrial,
    builtin_rewards,
    builtin_tools,
    outbound_policy,
)
from webapp.tools.outbound_views import allow_asked


@login_required
def index(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    context = {
        "team": team,
        "builtins": builtin_tools(),
        "tools": TeamTool.objects.filter(team=team),
        "rewards": TeamReward.objects.filter(team=team),
        "builtin_rewards": builtin_rewards(),
    }
    return render(request, "tools/index.html", context)


@login_required
def new(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    form = ToolForm(request.POST or None, team=team, is_staff=request.user.is_staff)
    return _register_page(request, team, form, TeamTool, "tool", "tools/new.html")


def _register_page(
    request: HtmxHttpRequest,
    team: Team,
    form: ToolForm | RewardForm,
    model: type[TeamTool] | type[TeamReward],
    page: str,
    template: str,
) -> HttpResponse:
    """The page that registers a tool or a reward: a valid form registers it and goes to its page
    (htmx: the whole page, not the form's place); otherwise the form again, with its errors."""
    if request.method == "POST":
        allow_asked(request, note=f"for a {page} of the team {team.name}")
    if request.method == "POST" and form.is_valid():
        made = model.register(team, request.user, **form.registration())
        messages.success(request, f"Registered the {page} {made.name}.")
        url = reverse(page, args=[team.slug, made.pk])
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    context = {
        "team": team,
        "form": form,
        "allowlist": [str(rule) for rule in outbound_policy().rules],
        "is_admin": is_site_admin(request.user),
    }
    template = template_for(request, template, {f"{page}-form": "form"})
    return render(request, template, context, status=400 if form.is_bound else 200)


def _detail_context(
    team: Team, described: TeamTool | type[BaseTool], trial: ToolTrial | None, form: TryForm | None
) -> dict[str, Any]:
    tool = described if isinstance(described, TeamTool) else None
    trials = ToolTrial.objects.filter(team=team)
    trials = trials.filter(tool=tool) if tool else trials.filter(builtin=described.name, tool=None)
    try_url = (
        reverse("tool_try", args=[team.slug, tool.pk])
        if tool
        else reverse("builtin_tool_try", args=[team.slug, described.name])
    )
    return {
        "team": team,
        "tool": tool,
        "builtin": None if tool else described,
        "name": described.name,
        "description": described.description,
        "schema": json.dumps(described.parameters, indent=2),
        "form": form or TryForm(parameters=described.parameters),
        "trial": trial,
        "trials": trials[:5],
        "try_url": try_url,
    }


def _shown_trial(request: HtmxHttpRequest, team: Team) -> ToolTrial | None:
    """The trial named by ?trial= (after a try without htmx), only if it is this team's."""
    trial_id = request.GET.get("trial", "")
    return ToolTrial.objects.filter(team=team, pk=int(trial_id)).first() if trial_id.isdigit() else None


@login_required
def detail(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    tool = get_tool_for_user(request, team_slug, pk)
    context = _detail_context(tool.team, tool, _shown_trial(request, tool.team), None)
    if swaps(request, "tool-status"):
        done = tool.status != ToolStatus.PENDING
        return render_poll(request, "tools/detail.html#status", context, done=done, reload=True)
    return render(request, "tools/detail.html", context)


@login_required
def builtin_detail(request: HtmxHttpRequest, team_slug: str, name: str) -> HttpResponse:
    team, tool = get_builtin_for_user(request, team_slug, name)
    return render(
        request, "tools/detail.html", _detail_context(team, tool, _shown_trial(request, team), None)
    )


@login_required
@require_POST
def try_tool(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    tool = get_tool_for_user(request, team_slug, pk, write=True)
    form = TryForm(request.POST, parameters=tool.parameters)
    if form.is_valid() and tool.is_ready:
        trial = ToolTrial.start(tool.team, request.user, form.cleaned_data["arguments"], tool=tool)
        return _trial_started(request, tool.team, tool, trial, form)
    if not tool.is_ready:
        form.add_error(None, f"This tool is not ready ({tool.get_status_display()}).")
    return _try_rejected(request, tool.team, tool, form)


@login_required
@require_POST
def try_builtin(request: HtmxHttpRequest, team_slug: str, name: str) -> HttpResponse:
    team, tool = get_builtin_for_user(request, team_slug, name, write=True)
    form = TryForm(request.POST, parameters=tool.parameters)
    if form.is_valid():
        trial = ToolTrial.start(team, request.user, form.cleaned_data["arguments"], builtin=tool.name)
        return _trial_started(request, team, tool, trial, form)
    return _try_rejected(request, team, tool, form)


def _trial_started(
    request: HtmxHttpRequest,
    team: Team,
    described: TeamTool | type[BaseTool],
    trial: ToolTrial,
    form: TryForm,
) -> HttpResponse:
    if swaps(request, "try"):
        return render(request, "tools/detail.html#try", _detail_context(team, described, trial, form))
    return redirect(_trial_page(trial))


def _try_rejected(
    request: HtmxHttpRequest, team: Team, described: TeamTool | type[BaseTool], form: TryForm
) -> HttpResponse:
    template = template_for(request, "tools/detail.html", {"try": "try"})
    return render(request, template, _detail_context(team, described, None, form), status=400)


def _trial_page(trial: ToolTrial) -> str:
    if trial.team_reward is not None:
        page = reverse("reward", args=[trial.team.slug, trial.team_reward.pk])
    elif trial.tool is not None:
        page = reverse("tool", args=[trial.team.slug, trial.tool.pk])
    else:
        page = reverse("builtin_tool", args=[trial.team.slug, trial.builtin])
    return f"{page}?trial={trial.pk}"


@login_required
def trial(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    trial = get_trial_for_user(request, team_slug, pk)
    if not swaps(request, "trial"):
        return redirect(_trial_page(trial))
    context = {"team": trial.team, "trial": trial}
    return render_poll(request, "tools/detail.html#trial", context, done=trial.is_done)


@login_required
@require_http_methods(["GET", "POST"])
def delete(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    tool = get_tool_for_user(request, team_slug, pk, write=True)
    return _deleted(request, tool, f"the tool {tool.name}", reverse("tool", args=[team_slug, pk]))


def _deleted(request: HtmxHttpRequest, found: TeamTool | TeamReward, what: str, back: str) -> HttpResponse:
    """GET: ask first; POST: delete a team's tool or reward and go back to the tools page, saying
    ``what`` went."""
    if request.method != "POST":
        return confirm_delete(
            request,
            found.team,
            title=f"Delete {what}?",
            consequence="Runs that have started keep what they were given; new experiments that name "
            "it are refused.",
            button=f"Delete {what}",
            back=back,
        )
    found.delete()
    messages.success(request, f"Deleted {what}.")
    return redirect("tools", team_slug=found.team.slug)


# -- team rewards ---------------------------------------------------------------------------------


@login_required
def reward_new(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    form = RewardForm(request.POST or None, team=team)
    return _register_page(request, team, form, TeamReward, "reward", "tools/reward_new.html")


def _reward_context(
    reward: TeamReward, trial: ToolTrial | None, form: RewardTryForm | None
) -> dict[str, Any]:
    trials = ToolTrial.objects.filter(team=reward.team, team_reward=reward)[:5]
    return {
        "team": reward.team,
        "reward": reward,
        "trial": trial,
        "trials": trials,
        "form": form or RewardTryForm(),
        "try_url": reverse("reward_try", args=[reward.team.slug, reward.pk]),
    }


@login_required
def reward_detail(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    reward = get_reward_for_user(request, team_slug, pk)
    return render(
        request, "tools/reward_detail.html", _reward_context(reward, _shown_trial(request, reward.team), None)
    )


@login_required
@require_POST
def reward_try(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    reward = get_reward_for_user(request, team_slug, pk, write=True)
    form = RewardTryForm(request.POST)
    if not form.is_valid():
        template = "tools/reward_detail.html#try" if request.htmx else "tools/reward_detail.html"
        return render(request, template, _reward_context(reward, None, form), status=400)
    trial = ToolTrial.start(reward.team, request.user, form.arguments(), team_reward=reward)
    if request.htmx:
        return render(request, "tools/reward_detail.html#try", _reward_context(reward, trial, form))
    return redirect(_trial_page(trial))


@login_required
@require_http_methods(["GET", "POST"])
def reward_delete(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    reward = get_reward_for_user(request, team_slug, pk, write=True)
    back = reverse("reward", args=[team_slug, pk])
    return _deleted(request, reward, f"the reward {reward.name}", back)
