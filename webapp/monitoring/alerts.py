"""Delivering a health alert (docs/health.md#alerts): in the app (the Notification rows the episode
made), by email to the team's members, and to the team's webhook as JSON that Slack reads (``text``)
with the structured fields beside it.

Each channel of each alert is an AlertDelivery row, sent by a task of its own (so a broken mail
server never holds back the webhook) and retried with backoff on a passing failure; every try, its
error and the outcome are on the row, and a failed delivery shows on the run page. Names in an alert
(a run's, a check's) are data: a newline in a run name can end up in no header.
"""

from __future__ import annotations

import logging
import re
import smtplib
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

import httpx
from django.conf import settings
from django.core.mail import send_mail
from django.urls import reverse

from trainer.tools.allowlist import OutboundRefused
from trainer.tools.http import HttpToolError, post_checked
from webapp.experiments.models import Run
from webapp.experiments.tasks import cancel_run
from webapp.monitoring.models import AlertChannel, AlertChannels, AlertDelivery, HealthAlert
from webapp.tools.models import outbound_policy

logger = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 10.0
SUBJECT_MAX = 150
# Control characters and the Unicode line and paragraph separators: none may reach a header.
_NOT_HEADER_TEXT = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")


class DeliveryFailed(Exception):
    """A try that may work later (the mail server or the webhook away, a 5xx, a 429): retried."""


class DeliveryRefused(Exception):
    """A try that would fail the same way again (a 4xx, a URL the outbound rules close): not retried."""


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


def header_text(text: str, limit: int = SUBJECT_MAX) -> str:
    """``text`` as one line fit for a mail header: control characters (CR and LF among them) become
    spaces, so a name can never start another header or break the Subject."""
    return " ".join(_NOT_HEADER_TEXT.sub(" ", text).split())[:limit]


def slack_text(text: str) -> str:
    """``text`` shown as itself by Slack: its three control characters escaped (Slack's docs)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(alert: HealthAlert) -> dict[str, Any]:
    url = step_url(alert)
    return {
        "text": f"{slack_text(summary(alert))} <{url}|Open step {alert.step}>",
        "team": alert.run.team.slug, "run": alert.run.pk, "run_name": str(alert.run),
        "check": alert.check_name, "episode": alert.episode, "step": alert.step,
        "value": alert.value, "threshold": alert.threshold, "stopped_run": alert.stopped_run, "url": url,
    }  # fmt: skip


def new_deliveries(alert: HealthAlert) -> list[AlertDelivery]:
    """A delivery of the alert per channel its team has (each sent by a task of its own)."""
    channels = AlertChannels.objects.filter(team_id=alert.run.team_id).first()
    if channels is None:
        return []
    wanted = [AlertChannel.EMAIL] if channels.email else []
    wanted += [AlertChannel.WEBHOOK] if channels.webhook_url else []
    made = [AlertDelivery.objects.get_or_create(alert=alert, channel=channel) for channel in wanted]
    return [delivery for delivery, created in made if created]


def stop_run(run: Run, alert: HealthAlert) -> None:
    """The existing cancel path, with the check named as the reason."""
    reason = f"stopped by the health check {alert.check_label!r} at step {alert.step}"
    if run.request_cancel(reason=reason) and not run.is_terminal:
        cancel_run.delay_on_commit(run.pk)


def send(delivery: AlertDelivery, *, last_try: bool) -> None:
    """One try of a delivery; DeliveryFailed (for the task to retry) when it may work later and this
    is not the last try. The outcome and the error are kept on the row either way."""
    if not delivery.start_try():
        return  # sent, failed for good, or being tried by another task
    try:
        _CHANNELS[delivery.channel](delivery.alert)
    except DeliveryFailed as error:
        _settle_failed(delivery, str(error), final=last_try)
        if not last_try:
            raise
    except DeliveryRefused as error:
        _settle_failed(delivery, str(error), final=True)
    else:
        delivery.settle()


def _settle_failed(delivery: AlertDelivery, why: str, *, final: bool) -> None:
    logger.warning(
        "alert %s of run %s: %s delivery try %s failed%s: %s",
        delivery.alert_id,
        delivery.alert.run_id,
        delivery.channel,
        delivery.attempts,
        "" if final else " (retrying)",
        why,
    )
    delivery.settle(why, final=final)


def _email(alert: HealthAlert) -> None:
    addresses = list(alert.run.team.memberships.exclude(user__email="").values_list("user__email", flat=True))
    if not addresses:
        return
    body = f"{summary(alert)}\n\n{step_url(alert)}\n"
    try:
        send_mail(header_text(f"[Agent-R1 Studio] {summary(alert)}"), body, None, addresses)
    except (OSError, smtplib.SMTPException) as error:
        raise DeliveryFailed(f"email: {error}") from None


def _webhook(alert: HealthAlert) -> None:
    channels = AlertChannels.objects.filter(team_id=alert.run.team_id).first()
    if channels is None or not channels.webhook_url:
        raise DeliveryRefused("webhook: the team no longer has a webhook URL")
    try:
        # Checked against the outbound rules and pinned to the address checked (docs/security.md#outbound).
        status, answer = post_checked(
            channels.webhook_url, outbound_policy(), WEBHOOK_TIMEOUT_S, {}, payload(alert)
        )
    except (OutboundRefused, HttpToolError) as error:
        raise DeliveryRefused(f"webhook: {error}") from None
    except (httpx.HTTPError, OSError) as error:
        raise DeliveryFailed(f"webhook: {error}") from None
    if status == 429 or status >= 500:
        raise DeliveryFailed(f"webhook: HTTP {status}")
    if not 200 <= status < 300:
        raise DeliveryRefused(f"webhook: HTTP {status}: {answer.decode('utf-8', errors='replace')[:500]}")


_CHANNELS: dict[str, Callable[[HealthAlert], None]] = {
    AlertChannel.EMAIL: _email,
    AlertChannel.WEBHOOK: _webhook,
}
