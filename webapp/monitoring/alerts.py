"""Delivering a health alert (docs/health.md#alerts): in the app (the Notification rows the episode
made), by email to the team's members, and to the team's webhook as JSON that Slack reads (``text``)
with the structured fields beside it. Each alert is delivered once: a channel is claimed on the alert
row before it is used, so a redelivered task skips what was sent.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urljoin

import httpx
import tenacity
from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from trainer.report.retry import POLICY, PermanentHttpError, RetryableHttpError
from trainer.tools.allowlist import OutboundRefused
from trainer.tools.http import HttpToolError, post_checked
from webapp.experiments.models import Run
from webapp.experiments.tasks import cancel_run
from webapp.guarded import guarded_update
from webapp.monitoring.models import AlertChannels, HealthAlert
from webapp.tools.models import outbound_policy

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 10.0
WEBHOOK_ATTEMPTS = 5  # with POLICY's backoff: about 8 s of retrying before the alert records the failure


def step_url(alert: HealthAlert) -> str:
    """The rollouts of the step where the episode began, as an absolute URL."""
    run = alert.run
    path = reverse("rollouts_at", kwargs={"team_slug": run.team.slug, "run_id": run.pk, "step": alert.step})
    return urljoin(str(settings.PUBLIC_URL), path)


def summary(alert: HealthAlert) -> str:
    label = alert.check_label
    stopped = " The run was stopped." if alert.stopped_run else ""
    return (
        f"{label} on run {alert.run} (#{alert.run.pk}) since step {alert.step}: "
        f"{alert.value:.4g} against the threshold {alert.threshold:.4g}.{stopped}"
    )


def payload(alert: HealthAlert) -> dict[str, Any]:
    url = step_url(alert)
    return {
        "text": f"{summary(alert)} <{url}|Open step {alert.step}>",
        "team": alert.run.team.slug, "run": alert.run.pk, "run_name": str(alert.run),
        "check": alert.check_name, "episode": alert.episode, "step": alert.step,
        "value": alert.value, "threshold": alert.threshold, "stopped_run": alert.stopped_run, "url": url,
    }  # fmt: skip


def stop_run(run: Run, alert: HealthAlert) -> None:
    """The existing cancel path, with the check named as the reason."""
    reason = f"stopped by the health check {alert.check_label!r} at step {alert.step}"
    if run.request_cancel(reason=reason) and not run.is_terminal:
        cancel_run.delay_on_commit(run.pk)


def deliver(alert: HealthAlert) -> None:
    channels = AlertChannels.objects.filter(team=alert.run.team).first()
    if channels is None:
        return
    if channels.email and _claim(alert, "email_sent_at"):
        _email(alert)
    if channels.webhook_url and _claim(alert, "webhook_sent_at"):
        _webhook(alert, channels.webhook_url)


def _claim(alert: HealthAlert, field: str) -> bool:
    # Race: the task delivered twice (a redelivery after a worker died); the first claim sends.
    return guarded_update(alert, Q(**{f"{field}__isnull": True}), **{field: timezone.now()})


def _email(alert: HealthAlert) -> None:
    addresses = list(alert.run.team.memberships.exclude(user__email="").values_list("user__email", flat=True))
    if not addresses:
        return
    body = f"{summary(alert)}\n\n{step_url(alert)}\n"
    try:
        send_mail(f"[Agent-R1 Studio] {summary(alert)[:120]}", body, None, addresses)
    except OSError as error:
        _record_failure(alert, f"email: {error}")


def _webhook(alert: HealthAlert, url: str) -> None:
    retrying = POLICY.retrying(stop=tenacity.stop_after_attempt(WEBHOOK_ATTEMPTS))
    try:
        retrying(_post_once, url, payload(alert))
    except (
        RetryableHttpError,
        PermanentHttpError,
        httpx.HTTPError,
        OutboundRefused,
        HttpToolError,
        OSError,
    ) as error:
        _record_failure(alert, f"webhook: {error}")


def _post_once(url: str, body: dict[str, Any]) -> None:
    # Checked against the outbound rules and pinned to the address checked (docs/security.md#outbound).
    status, answer = post_checked(url, outbound_policy(), WEBHOOK_TIMEOUT_S, {}, body)
    if status == 429 or status >= 500:
        raise RetryableHttpError(status, None)
    if not 200 <= status < 300:
        raise PermanentHttpError(status, answer.decode("utf-8", errors="replace"))


def _record_failure(alert: HealthAlert, why: str) -> None:
    logger.warning("alert %s of run %s not delivered: %s", alert.pk, alert.run_id, why)
    HealthAlert.objects.filter(pk=alert.pk).update(delivery_error=why[:2000])
