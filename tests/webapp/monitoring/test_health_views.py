"""The health pages: the team's settings, the run page's panel and time breakdown, the runs table's
badge, the member's alert list; an evaluation, which no check judges."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client
from django.urls import reverse

from tests.webapp.trainer_posts import Trainer
from trainer.contract import (
    ACTOR_KL,
    EVAL_ACC,
    EVAL_PASS_AT_1,
    EVAL_PASS_AT_K,
    REWARD_MEAN,
    ROLLOUT_ZERO_VARIANCE_GROUPS,
    TIMING_GENERATE_S,
    TIMING_REWARD_S,
    TIMING_STEP_S,
    TOOLS_CALL_RATE,
    TOOLS_MALFORMED_RATE,
)
from webapp.experiments.models import Run, RunKind
from webapp.ingestion.models import MetricPoint
from webapp.monitoring.checks import all_checks
from webapp.monitoring.models import AlertChannels, HealthAlert, HealthRule, Notification, RunHealth


def test_owners_set_thresholds_and_a_webhook_the_outbound_rules_allow(
    client: Client, personas: Any, settings: Any
) -> None:
    settings.TOOL_ALLOWLIST = ["hooks.example.com:443"]
    client.force_login(personas["alice"])
    url = reverse("health_settings", args=[personas["acme"].slug])
    form = {f"{check.name}-enabled": "on" for check in all_checks()} | {
        "kl_blowup-threshold": "2.5",
        "kl_blowup-stop": "on",
    }

    refused = client.post(url, {**form, "webhook_url": "http://10.0.0.1:8080/hook"})
    assert refused.status_code == 400 and "is not allowed" in refused.content.decode()
    assert not HealthRule.objects.exists()

    assert (
        client.post(url, {**form, "webhook_url": "https://hooks.example.com/x", "email": "on"}).status_code
        == 302
    )
    rule = HealthRule.objects.get(team=personas["acme"], check_name="kl_blowup")
    assert (rule.enabled, rule.threshold, rule.stop_run) == (True, 2.5, True)
    assert (
        HealthRule.objects.get(team=personas["acme"], check_name="entropy_collapse").threshold == 0.05
    )  # blank: default
    channels = AlertChannels.objects.get(team=personas["acme"])
    assert (channels.webhook_url, channels.email) == ("https://hooks.example.com/x", True)


def test_the_run_page_the_runs_table_and_the_alert_list_show_a_firing_check(
    client: Client, trainer: Trainer, run: Any, personas: Any
) -> None:
    slug = personas["acme"].slug
    points = [{"key": ACTOR_KL, "step": s, "value": 5.0, "ts": 1.7e9 + s} for s in (1, 2, 3)]
    points += [{"key": k, "step": 3, "value": v, "ts": 1.7e9} for k, v in
               ((TIMING_STEP_S, 2.0), (TIMING_GENERATE_S, 1.25), (TIMING_REWARD_S, 0.25))]  # fmt: skip
    assert trainer.metrics(points).status_code == 200
    client.force_login(personas["bob"])

    page = client.get(reverse("run", args=[slug, run.pk])).content.decode()
    assert 'data-check="kl_blowup" class="firing"' in page
    assert reverse("rollouts_at", args=[slug, run.pk, 3]) in page
    assert "1 firing" in client.get(reverse("runs", args=[slug])).content.decode()

    timing = client.get(reverse("run_time", args=[slug, run.pk])).json()
    assert timing["steps"] == [3]
    assert timing["series"] == {TIMING_GENERATE_S: [1.25], TIMING_REWARD_S: [0.25], "waiting": [0.5]}

    alerts = client.get(reverse("notifications", args=[slug])).content.decode()
    assert "KL blow-up" in alerts and "new" in alerts
    client.post(reverse("notifications", args=[slug]))
    assert not Notification.objects.filter(user=personas["bob"], read_at__isnull=True).exists()
    assert Notification.objects.filter(user=personas["alice"], read_at__isnull=True).count() == 1


def test_an_evaluation_is_never_health_checked_and_its_page_shows_what_it_scored(
    client: Client, trainer: Trainer, run: Any, personas: Any
) -> None:
    config = {"data": {"val_path": "dataset:999"}, "rollout": {"n": 4, "temperature": 1.0}}
    Run.objects.filter(pk=run.pk).update(kind=RunKind.EVALUATION, total_steps=2, config=config)
    # What an evaluation reports: every group of k samples alike (the zero-variance check's trigger)
    # and a KL that would fire on a training run; then its scores at the last batch.
    points = [{"key": k, "step": s, "value": v, "ts": 1.7e9 + s} for s in (1, 2)
              for k, v in ((ROLLOUT_ZERO_VARIANCE_GROUPS, 1.0), (ACTOR_KL, 5.0), (REWARD_MEAN, 0.25))]  # fmt: skip
    points += [{"key": k, "step": 2, "value": v, "ts": 1.7e9} for k, v in
               ((EVAL_ACC, 0.375), (EVAL_PASS_AT_1, 0.375), (EVAL_PASS_AT_K, 0.75))]  # fmt: skip
    assert trainer.metrics(points).status_code == 200
    assert MetricPoint.objects.filter(run=run).count() == len(points)  # stored, not judged
    assert not RunHealth.objects.filter(run=run).exists() and not HealthAlert.objects.exists()

    client.force_login(personas["bob"])
    slug = personas["acme"].slug
    page = client.get(reverse("run", args=[slug, run.pk])).content.decode()
    assert 'id="health"' not in page and 'id="time-breakdown"' not in page and 'id="run-reward"' not in page
    assert 'id="evaluation-acc">0.375</dd>' in page and 'id="evaluation-pass">0.375 · 0.75</dd>' in page
    assert "k = 4 per prompt" in page and "dataset:999" in page
    assert re.search(r'id="run-progress">.*batch 2 of 2</dd>', page)
    table = client.get(reverse("runs", args=[slug])).content.decode()
    row = re.search(rf'<tr data-run="{run.pk}">(.*?)</tr>', table, re.S)
    assert row and 'class="badge kind-evaluation">evaluation<' in row[1]
    assert "health-ok" not in row[1] and "firing" not in row[1]


def test_tools_dropped_while_reward_rose_fires_after_the_runs_warm_up_and_the_run_page_says_so(
    client: Client, trainer: Trainer, run: Any, personas: Any
) -> None:
    config = {"name": "r1", "rollout": {"tools": ["lookup"], "tool_warmup_steps": 5}}
    Run.objects.filter(pk=run.pk).update(config=config)
    # Malformed calls in the warm-up only; then the calls fade from every rollout to none as reward rises.
    points = [{"key": TOOLS_MALFORMED_RATE, "step": s, "value": 0.9, "ts": 1.7e9 + s} for s in range(1, 6)]
    points += [{"key": k, "step": s, "value": v, "ts": 1.7e9 + s} for s in range(6, 26)
               for k, v in ((TOOLS_CALL_RATE, 1.0 - (s - 6) / 19), (REWARD_MEAN, 0.1 + s / 50))]  # fmt: skip
    assert trainer.metrics(points).status_code == 200

    health = {h.check_name: h for h in RunHealth.objects.filter(run=run)}
    assert health["tools_dropped_reward_rose"].firing and health["tool_avoidance"].firing
    assert "malformed_tool_calls" not in health or not health["malformed_tool_calls"].firing
    client.force_login(personas["bob"])
    page = client.get(reverse("run", args=[personas["acme"].slug, run.pk])).content.decode()
    assert 'data-check="tools_dropped_reward_rose" class="firing"' in page
    assert "The policy stopped using its tools while its reward rose" in page
