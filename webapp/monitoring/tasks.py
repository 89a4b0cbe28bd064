from __future__ import annotations

from celery import shared_task

from webapp.monitoring import alerts
from webapp.monitoring.models import HealthAlert


# Idempotent: each channel is claimed on the alert row before it is used (alerts.deliver), so a
# redelivery after a worker died sends nothing twice.
@shared_task(acks_late=True, reject_on_worker_lost=True)
def deliver_alert(alert_id: int) -> None:
    alert = HealthAlert.objects.select_related("run__team").filter(pk=alert_id).first()
    if alert is None:
        return
    alerts.deliver(alert)
