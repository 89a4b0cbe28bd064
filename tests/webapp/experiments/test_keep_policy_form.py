"""The experiment form's keep-policy (docs/checkpoints.md#keep-policies): stored with the experiment,
the runs' trainer left to keep every checkpoint, and a metric the runs never report refused on its field."""

from __future__ import annotations

from typing import Any

from tests.webapp.experiments.test_experiment_form import client_for, form_data
from trainer.config import RunConfig
from webapp.experiments.models import Experiment
from webapp.retention.models import CheckpointKeepPolicy


def test_the_forms_keep_policy_is_stored_and_a_metric_never_reported_is_refused_on_its_field(
    personas: Any, arithmetic: Any
) -> None:
    client = client_for("alice")
    url = f"/t/{personas['acme'].slug}/experiments/new/"
    refused = client.post(url, form_data(arithmetic, keep_best_metric="sft/loss"))
    assert refused.status_code == 200
    assert "is an SFT run's" in " ".join(refused.context["form"].errors["keep_best_metric"])
    zero = client.post(url, form_data(arithmetic, keep_last="0"))
    assert zero.context["form"].errors["keep_last"] == ["Ensure this value is greater than or equal to 1."]
    assert '<details id="keep-policy" open>' in zero.content.decode()  # the folded section shows the error
    saved = client.post(
        url, form_data(arithmetic, keep_last="2", keep_best_metric="reward/mean", keep_every="10")
    )
    assert saved.status_code == 302
    experiment = Experiment.objects.get(name="arith grpo")
    policy = CheckpointKeepPolicy.objects.get(experiment=experiment)
    assert (policy.keep_last, policy.keep_best_metric, policy.keep_every) == (2, "reward/mean", 10)
    assert RunConfig.model_validate(experiment.config).trainer.keep_checkpoints is None


def test_a_clone_keeps_its_sources_keep_policy_and_the_experiment_page_says_it(
    personas: Any, arithmetic: Any
) -> None:
    import json

    from webapp.accounts.models import ApiToken

    client = client_for("alice")
    slug = personas["acme"].slug
    client.post(f"/t/{slug}/experiments/new/", form_data(arithmetic, keep_last="3"))
    source = Experiment.objects.get(name="arith grpo")
    page = client.get(f"/t/{slug}/experiments/{source.pk}/").content.decode()
    assert 'id="keep-policy"' in page and "keep the last 3" in page and "0 deleted" in page
    form = client.get(f"/t/{slug}/experiments/new/?clone={source.pk}").context["form"]
    assert form["keep_last"].value() == 3
    token = ApiToken.issue(personas["alice"], "t")[1]
    cloned = client.post(
        f"/api/t/{slug}/experiments/{source.pk}/clone", json.dumps({"name": "api clone"}),
        content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip
    assert cloned.status_code == 201, cloned.content
    assert CheckpointKeepPolicy.objects.get(experiment_id=cloned.json()["id"]).keep_last == 3
    assert RunConfig.model_validate(cloned.json()["config"]).trainer.keep_checkpoints is None
