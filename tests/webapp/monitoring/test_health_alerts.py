"""Health checks judged as metrics arrive: one alert per episode, in the app, by email and to the
team's webhook (a real loopback HTTP receiver), and a run stopped by a check."""

from __future__ import annotations

import email
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core import mail

from tests.webapp.trainer_posts import Trainer
from trainer.contract import ACTOR_KL, ACTOR_PG_LOSS
from webapp.celery import app
from webapp.experiments.models import RunStatus
from webapp.monitoring.models import (
    AlertChannels,
    AlertDelivery,
    DeliveryStatus,
    HealthAlert,
    HealthRule,
    Notification,
    RunHealth,
)
from webapp.monitoring.tasks import ALERT_RETRIES


class Receiver:
    """A webhook endpoint on 127.0.0.1 that keeps every JSON body posted to it and answers the
    statuses in ``failures`` first (one per request), then 200."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.failures: list[int] = []
        bodies, failures = self.bodies, self.failures

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(failures.pop(0) if failures else 200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    found = Receiver()
    settings.TOOL_ALLOWLIST = [found.url.rsplit("/", 1)[0] + "/"]  # the outbound rule that lets it through
    yield found
    found.close()


@pytest.fixture
def eager(django_capture_on_commit_callbacks: Any) -> Iterator[Callable[..., Any]]:
    """Celery tasks run in this process when their transaction commits (the outbox is this process's)."""
    app.conf.task_always_eager = True
    yield lambda: django_capture_on_commit_callbacks(execute=True)
    app.conf.task_always_eager = False


def kl(steps: range, value: float) -> list[dict[str, Any]]:
    return [{"key": ACTOR_KL, "step": s, "value": value, "ts": 1.7e9 + s} for s in steps]


def test_each_episode_alerts_once_in_the_app_by_email_and_to_the_webhook(
    trainer: Trainer, run: Any, personas: Any, receiver: Receiver, eager: Callable[..., Any]
) -> None:
    AlertChannels.objects.create(team=personas["acme"], webhook_url=receiver.url, email=True)
    batches = [kl(range(1, 4), 0.01), kl(range(4, 7), 5.0), kl(range(7, 10), 6.0),
               kl(range(10, 13), 0.01), kl(range(13, 16), 5.0)]  # fmt: skip
    for number, batch in enumerate(batches):
        with eager():
            assert trainer.metrics(batch, batch_id=f"b{number}").status_code == 200
    with eager():  # a replay of the batch that opened the first episode
        assert trainer.metrics(batches[1], batch_id="b1").json()["duplicate"]
    alerts = list(HealthAlert.objects.filter(run=run).order_by("episode"))
    assert [(a.check_name, a.episode, a.step) for a in alerts] == [("kl_blowup", 1, 6), ("kl_blowup", 2, 15)]
    sent = AlertDelivery.objects.filter(alert__in=alerts, status=DeliveryStatus.SENT, attempts=1, error="")
    assert sent.count() == 4  # two channels, two episodes, one try each
    assert [(body["check"], body["step"]) for body in receiver.bodies] == [
        ("kl_blowup", 6),
        ("kl_blowup", 15),
    ]
    assert (
        "KL blow-up" in receiver.bodies[0]["text"]
        and f"/runs/{run.pk}/rollouts/at/6/" in receiver.bodies[0]["url"]
    )
    assert len(mail.outbox) == 2 and sorted(mail.outbox[0].to) == ["alice@example.com", "bob@example.com"]
    assert Notification.objects.filter(alert__run=run).count() == 4  # two members, two episodes
    state = RunHealth.objects.get(run=run, check_name="kl_blowup")
    assert (state.firing, state.since_step, state.episodes) == (True, 15, 2)


def test_a_nan_anywhere_fires_a_check_set_to_stop_cancels_the_run_and_a_disabled_one_is_silent(
    trainer: Trainer, run: Any, personas: Any, eager: Callable[..., Any]
) -> None:
    HealthRule.objects.create(team=personas["acme"], check_name="non_finite", threshold=0.0, stop_run=True)
    HealthRule.objects.create(team=personas["acme"], check_name="kl_blowup", enabled=False, threshold=1.0)
    run.refresh_from_db()
    points = [{"key": ACTOR_PG_LOSS, "step": 3, "value": "NaN", "ts": 1.7e9}, *kl(range(1, 4), 5.0)]
    with eager():
        assert trainer.metrics(points).status_code == 200
    alert = HealthAlert.objects.get(run=run)  # none from the disabled KL check
    assert (alert.check_name, alert.step, alert.value, alert.stopped_run) == ("non_finite", 3, 1.0, True)
    run.refresh_from_db()
    assert run.cancel_requested and "NaN or Inf" in run.cancel_reason
    run.finish(RunStatus.CANCELLED, "SIGTERM")
    run.refresh_from_db()
    assert run.message == run.cancel_reason
    assert not RunHealth.objects.filter(run=run, check_name="kl_blowup").exists()


def test_a_newline_in_the_run_name_is_data_the_alert_still_goes_out_on_every_channel(
    trainer: Trainer, run: Any, personas: Any, receiver: Receiver, eager: Callable[..., Any], client: Any
) -> None:
    """The finding: a member renamed the run through MLflow with a newline; the email step then failed
    on the Subject header, the webhook was never sent and nothing was recorded."""
    from webapp.accounts.models import ApiToken

    AlertChannels.objects.create(team=personas["acme"], webhook_url=receiver.url, email=True)
    token = ApiToken.issue(personas["bob"], "mlflow")[1]
    renamed = client.post(
        "/mlflow/api/2.0/mlflow/runs/update",
        json.dumps({"run_id": run.mlflow_run_id, "run_name": "grpo\r\nBcc: eve@example.com\x0bx"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )
    assert renamed.status_code == 200, renamed.content
    with eager():
        assert trainer.metrics(kl(range(1, 4), 5.0)).status_code == 200
    (message,) = mail.outbox
    assert "\n" not in message.subject and "\r" not in message.subject and "\x0b" not in message.subject
    assert "grpo Bcc: eve@example.com x" in message.subject and message.bcc == []
    sent = email.message_from_string(message.message().as_string())
    assert "Bcc" not in sent and " ".join(str(sent["Subject"]).split()) == message.subject
    assert receiver.bodies[0]["run_name"] == "grpo\r\nBcc: eve@example.com\x0bx"  # JSON carries it as data
    assert set(AlertDelivery.objects.values_list("channel", "status")) == {
        ("email", "sent"),
        ("webhook", "sent"),
    }


def test_a_webhook_that_fails_for_a_while_is_retried_until_it_answers(
    trainer: Trainer, run: Any, personas: Any, receiver: Receiver, eager: Callable[..., Any]
) -> None:
    AlertChannels.objects.create(team=personas["acme"], webhook_url=receiver.url)
    receiver.failures.extend([503, 429])
    with eager():
        assert trainer.metrics(kl(range(1, 4), 5.0)).status_code == 200
    delivery = AlertDelivery.objects.get()
    assert (delivery.channel, delivery.status, delivery.attempts) == ("webhook", DeliveryStatus.SENT, 3)
    assert len(receiver.bodies) == 3 and delivery.error == ""


def test_a_delivery_that_never_succeeds_is_recorded_failed_and_shows_on_the_run_page(
    trainer: Trainer, run: Any, personas: Any, receiver: Receiver, eager: Callable[..., Any], client: Any
) -> None:
    AlertChannels.objects.create(team=personas["acme"], webhook_url=receiver.url)
    receiver.failures.extend([500] * (ALERT_RETRIES + 5))
    with eager():
        assert trainer.metrics(kl(range(1, 4), 5.0)).status_code == 200
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.error) == (
        DeliveryStatus.FAILED,
        ALERT_RETRIES + 1,
        "webhook: HTTP 500",
    )
    assert len(receiver.bodies) == ALERT_RETRIES + 1
    client.force_login(personas["bob"])
    page = client.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert 'id="alert-deliveries"' in page and "webhook: HTTP 500" in page
    assert f"failed after {ALERT_RETRIES + 1} tries" in page


def test_a_webhook_answering_4xx_is_not_retried(
    trainer: Trainer, run: Any, personas: Any, receiver: Receiver, eager: Callable[..., Any]
) -> None:
    AlertChannels.objects.create(team=personas["acme"], webhook_url=receiver.url)
    receiver.failures.append(404)
    with eager():
        assert trainer.metrics(kl(range(1, 4), 5.0)).status_code == 200
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 1)
    assert delivery.error.startswith("webhook: HTTP 404") and len(receiver.bodies) == 1


def test_alerts_delivered_before_the_delivery_log_keep_their_outcome_as_deliveries(run: Any) -> None:
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    before = [("monitoring", "0001_moved_from_results")]
    MigrationExecutor(connection).migrate(before)
    old = MigrationExecutor(connection).loader.project_state(before[0]).apps
    old.get_model("monitoring", "HealthAlert").objects.create(
        run_id=run.pk,
        check_name="kl_blowup",
        episode=1,
        step=2,
        value=9.0,
        threshold=1.0,
        email_sent_at=timezone.now(),
        webhook_sent_at=timezone.now(),
        delivery_error="webhook: HTTP 500",
    )
    forward = MigrationExecutor(connection)
    forward.migrate(forward.loader.graph.leaf_nodes())
    delivered = AlertDelivery.objects.filter(alert__run=run)
    assert sorted(delivered.values_list("channel", "status", "error")) == [
        ("email", "sent", ""),
        ("webhook", "failed", "webhook: HTTP 500"),
    ]
