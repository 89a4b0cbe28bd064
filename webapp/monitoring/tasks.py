from __future__ import annotations

from typing import Any

from celery import shared_task

from webapp.monitoring import alerts
from webapp.monitoring.models import AlertDelivery

# Tries of an alert delivery after its first: up to 5 s, 10 s, 20 s ... apart (Celery's jittered
# backoff), the wait capped at 10 minutes: at most about 20 minutes for a mail server or webhook to return.
ALERT_RETRIES = 8


# Not acks_late: a try is claimed on the delivery row (AlertDelivery.start_try), so a redelivered task
# never sends twice; a worker killed mid-try leaves that delivery "sending", on the run page.
@shared_task(
    bind=True,
    autoretry_for=(alerts.DeliveryFailed,),
    retry_backoff=5,
    retry_backoff_max=600,
    max_retries=ALERT_RETRIES,
)
def send_alert(self: Any, delivery_id: int) -> None:
    delivery = AlertDelivery.objects.select_related("alert__run__team").filter(pk=delivery_id).first()
    if delivery is None:
        return
    alerts.send(delivery, last_try=self.request.retries >= ALERT_RETRIES)
