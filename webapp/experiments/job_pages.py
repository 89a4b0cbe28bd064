"""What a page does when its button starts a job (docs/api.md#jobs): open the job's page, or go back
with the reason when the job is refused."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from webapp.experiments.jobs import Job, JobRefused, TooManyJobs


def start_and_follow(
    request: HttpRequest,
    start: Callable[[], Job],
    job_page: str,
    *,
    back: HttpResponse,
    refused: tuple[type[Exception], ...] = (),
) -> HttpResponse:
    """Start the job and redirect to its page (the URL name ``job_page``). Input the job cannot take
    (JobRefused or one of ``refused``) or the member's limit (TooManyJobs) answers ``back``, with the
    reason shown there."""
    refusals: tuple[type[Exception], ...] = (JobRefused, TooManyJobs, *refused)
    try:
        job = start()
    except refusals as refusal:
        messages.error(request, str(refusal))
        return back
    return redirect(job_page, team_slug=job.team.slug, pk=job.pk)
