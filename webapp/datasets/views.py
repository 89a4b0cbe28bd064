from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.text import slugify
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseClientRedirect

from webapp.accounts.access import get_team_for_user
from webapp.accounts.models import Role, Team
from webapp.datasets.access import get_dataset_for_user
from webapp.datasets.demonstrations import form_choices
from webapp.datasets.files import StreamingUploadHandler, too_large_message
from webapp.datasets.forms import RecipeForm, RewardMappingForm, UploadForm
from webapp.datasets.models import Dataset, DatasetInUse, DatasetStatus, ImportStatus, RecipeImport
from webapp.htmx import HtmxHttpRequest, render_poll, swaps, template_for

PREVIEW_ROWS = 10


def recipe_choices() -> list[tuple[str, str]]:
    from tasks_lib.registry import load_recipes

    recipes = load_recipes()
    return [(name, f"{name} — {recipes.get(name).description}") for name in recipes.names()]


def _index_context(request: HtmxHttpRequest, team: Team, **forms: Any) -> dict[str, Any]:
    imports = list(RecipeImport.objects.filter(team=team).prefetch_related("datasets")[:10])
    return {
        "team": team,
        "datasets": Dataset.objects.filter(team=team),
        "imports": imports,
        "imports_pending": any(i.status == ImportStatus.PENDING for i in imports),
        "upload_form": forms.get("upload_form") or UploadForm(),
        "recipe_form": forms.get("recipe_form")
        or RecipeForm(tasks=recipe_choices(), is_staff=request.user.is_staff),
        "max_bytes": settings.UPLOAD_MAX_BYTES,
        "too_large": too_large_message(settings.UPLOAD_MAX_BYTES),
    }


@login_required
def index(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug)
    context = _index_context(request, team)
    if swaps(request, "recipe-imports"):
        # Settled imports add datasets to the page, which the fragment does not hold: reload it.
        done = not context["imports_pending"]
        return render_poll(request, "datasets/index.html#imports", context, done=done, reload=True)
    return render(request, "datasets/index.html", context)


@login_required
@require_POST
@csrf_exempt  # the streaming handler must be installed before the CSRF check reads the body
def upload(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    # Access first: an outsider's upload is refused before a byte of it is read.
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    handler = StreamingUploadHandler(request, max_bytes=settings.UPLOAD_MAX_BYTES)
    request.upload_handlers = [handler]
    try:
        return _checked_upload(request, team, handler)
    finally:
        handler.remove_leftover()  # a failed CSRF check or form leaves the streamed file behind


@csrf_protect
def _checked_upload(request: HtmxHttpRequest, team: Team, handler: StreamingUploadHandler) -> HttpResponse:
    form = UploadForm(request.POST, request.FILES, rejection=handler.rejection)
    if form.is_valid() and form.upload is not None:
        dataset, created = form.save_dataset(team, request.user)
        if not created:
            messages.info(request, "This file was uploaded before; here is the existing dataset.")
        url = dataset_url(dataset)
        return HttpResponseClientRedirect(url) if request.htmx else redirect(url)
    status = 413 if handler.rejection else 400
    context = _index_context(request, team, upload_form=form)
    template = template_for(request, "datasets/index.html", {"upload-form": "upload"})
    return render(request, template, context, status=status)


@login_required
@require_POST
def from_recipe(request: HtmxHttpRequest, team_slug: str) -> HttpResponse:
    team = get_team_for_user(request, team_slug, role=Role.MEMBER)
    form = RecipeForm(request.POST, tasks=recipe_choices(), is_staff=request.user.is_staff)
    if form.is_valid():
        RecipeImport.start(
            team, form.cleaned_data["task"], form.cleaned_data["input_path"], request.user, form.options()
        )
        messages.success(
            request, f"Preparing {form.cleaned_data['task']}; its datasets appear below when ready."
        )
        return redirect("datasets", team_slug=team.slug)
    return render(request, "datasets/index.html", _index_context(request, team, recipe_form=form), status=400)


def dataset_url(dataset: Dataset) -> str:
    from django.urls import reverse

    return reverse("dataset", kwargs={"team_slug": dataset.team.slug, "pk": dataset.pk})


def _mapping_form(dataset: Dataset, data: Any = None) -> RewardMappingForm | None:
    if dataset.status != DatasetStatus.UNMAPPED:
        return None
    from webapp.tools.models import reward_choices

    return RewardMappingForm(data, sources=dataset.unmapped_sources, rewards=reward_choices(dataset.team))


@login_required
def detail(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    dataset = get_dataset_for_user(request, team_slug, pk)
    context: dict[str, Any] = {
        "team": dataset.team,
        "dataset": dataset,
        "mapping_form": _mapping_form(dataset),
        "routing": dataset.routing() if dataset.status != DatasetStatus.PENDING else None,
        "demonstration_tools": form_choices(dataset),
    }
    if swaps(request, "dataset-status"):
        # A settled dataset adds stats and a preview, which the fragment does not hold: reload the page.
        done = dataset.status != DatasetStatus.PENDING
        return render_poll(request, "datasets/detail.html#status", context, done=done, reload=True)
    context.update(_preview_context(dataset, request.GET.get("page")))
    return render(request, template_for(request, "datasets/detail.html", {"preview": "preview"}), context)


def _preview_context(dataset: Dataset, page_param: str | None) -> dict[str, Any]:
    total = int(dataset.stats.get("rows") or 0)
    pages = max(1, math.ceil(total / PREVIEW_ROWS))
    page = min(max(int(page_param), 1), pages) if page_param and page_param.isdigit() else 1
    rows = dataset.rows(page, PREVIEW_ROWS)
    return {
        "rows": rows,
        "page": page,
        "pages": pages,
        "total": total,
        "first": (page - 1) * PREVIEW_ROWS,
        "last": (page - 1) * PREVIEW_ROWS + len(rows) - 1,
        "bars": dataset.histogram_bars(),
        "data_sources": sorted(dataset.stats.get("data_sources", {}).items()),
    }


@login_required
def download(request: HtmxHttpRequest, team_slug: str, pk: int) -> FileResponse:
    dataset = get_dataset_for_user(request, team_slug, pk)
    if not dataset.is_usable:
        raise Http404("Only valid datasets can be downloaded.")
    filename = f"{slugify(dataset.name) or 'dataset'}-{dataset.sha256[:12]}.parquet"
    return FileResponse(dataset.path.open("rb"), as_attachment=True, filename=filename)


@login_required
@require_POST
def map_rewards(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    """The mapping form: a reward for each data_source value no reward knew; then validate again."""
    dataset = get_dataset_for_user(request, team_slug, pk, write=True)
    form = _mapping_form(dataset, request.POST)
    if form is not None and form.is_valid():
        dataset.map_rewards(form.mapping())
        messages.success(request, "Mapping saved; the dataset is being checked again.")
        return redirect(dataset_url(dataset))
    if form is None:
        messages.info(request, f"This dataset is {dataset.get_status_display()}: nothing to map.")
        return redirect(dataset_url(dataset))
    context = {"team": dataset.team, "dataset": dataset, "mapping_form": form, "routing": dataset.routing()}
    context.update(_preview_context(dataset, None))
    return render(request, "datasets/detail.html", context, status=400)


@login_required
@require_POST
def archive(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    dataset = get_dataset_for_user(request, team_slug, pk, write=True)
    dataset.set_archived(request.POST.get("archived") != "0")
    messages.success(
        request, f"{dataset.name} is {'archived' if dataset.archived else 'back in the pickers'}."
    )
    return redirect(dataset_url(dataset))


@login_required
@require_POST
def delete(request: HtmxHttpRequest, team_slug: str, pk: int) -> HttpResponse:
    dataset = get_dataset_for_user(request, team_slug, pk, write=True)
    try:
        dataset.delete_unused()
    except DatasetInUse as exc:
        messages.error(request, str(exc))
        return redirect(dataset_url(dataset))
    messages.success(request, f"Deleted {dataset.name}.")
    return redirect("datasets", team_slug=team_slug)
