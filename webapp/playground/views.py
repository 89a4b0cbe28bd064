"""The playground pages (docs/playground.md): the form, and a session's answers side by side, polled
while the worker fills them in step by step."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role
from webapp.experiments.models import Experiment
from webapp.htmx import HtmxHttpRequest, render_poll, swaps
from webapp.playground import services
from webapp.playground.access import get_session_for_user
from webapp.playground.forms import PlaygroundForm
from webapp.playground.models import PlaygroundSession

RECENT = 20


@login_required
def playground(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    """Pick an experiment, then its models, a prompt or row, and its tools; POST starts a session."""
    team = get_team_for_user(request, team_slug)
    experiments = Experiment.objects.filter(team=team, external=False).order_by("-created")
    chosen = str(request.POST.get("experiment") or request.GET.get("experiment") or "")
    experiment = experiments.filter(pk=int(chosen)).first() if chosen.isdigit() else None
    form = None
    if experiment is not None:
        initial = {"model_a": request.GET.get("model") or services.BASE_MODEL}
        form = PlaygroundForm(experiment, request.POST or None, initial=initial)
        if request.method == "POST":
            get_team_for_user(request, team_slug, role=Role.MEMBER)
            if form.is_valid():
                try:
                    session = services.start(experiment, request.user, form.ask())
                except services.PlaygroundRefused as refused:
                    form.add_error(refused.field or None, str(refused))
                else:
                    return redirect("playground_session", team_slug=team.slug, pk=session.pk)
    sessions = PlaygroundSession.objects.filter(team=team, created_by=request.user.pk).select_related(
        "experiment", "job"
    )[:RECENT]
    context = {
        "team": team,
        "experiments": experiments,
        "experiment": experiment,
        "form": form,
        "sessions": sessions,
    }
    return render(request, "playground/index.html", context, status=400 if form and form.errors else 200)


@login_required
def session(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """One session: the prompt, then each model's steps, tool calls and reward, side by side."""
    found = get_session_for_user(request, team_slug, pk)
    context = {"team": found.team, "session": found, "answers": list(found.answers.all())}
    if swaps(request, "answers"):
        return render_poll(request, "playground/session.html#answers", context, done=found.is_finished)
    return render(request, "playground/session.html", context)
