"""Datasets a real run can learn from, made in the browser; archived and deleted; fitting the task."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.test import Client

from tests.webapp.experiments.conftest import dataset_from_recipe
from trainer.config import RunConfig
from webapp.datasets.models import Dataset, RecipeImport
from webapp.datasets.picker import DatasetPicker
from webapp.experiments.models import Experiment
from webapp.experiments.views import form_choices


def test_a_recipe_dataset_is_made_with_the_size_seed_and_validation_rows_asked_for(
    client: Client, personas: Any, django_capture_on_commit_callbacks: Any
) -> None:
    client.force_login(personas["alice"])
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            "/t/acme/datasets/from-recipe/", {"task": "arithmetic", "size": 40, "val_size": 10, "seed": 3}
        )
    assert response.status_code == 302
    recipe_import = RecipeImport.objects.get()
    assert recipe_import.options == {"seed": 3, "from_package": False, "size": 40, "val_fraction": 0.25}
    assert recipe_import.run()
    sizes = {d.name.split()[1]: d.stats["rows"] for d in recipe_import.datasets.all()}
    assert sizes == {"train": 30, "val": 10}
    refused = client.post(
        "/t/acme/datasets/from-recipe/",
        {"task": "hotpotqa", "size": 10, "val_size": 10, "from_package": "on"},
    )
    assert refused.status_code == 400 and RecipeImport.objects.count() == 1
    assert (
        "smaller than the size" in refused.content.decode()
        and "Only the gsm8k recipe" in refused.content.decode()
    )


def test_gsm8k_is_made_from_the_packaged_real_items(personas: Any) -> None:
    recipe_import = RecipeImport.objects.create(team=personas["acme"], task="gsm8k",
                                                options={"from_package": True, "val_fraction": 0.2})  # fmt: skip
    assert recipe_import.run(), recipe_import.message
    rows = {d.name.split()[1]: d.stats["rows"] for d in recipe_import.datasets.all()}
    assert rows == {"train": 80, "val": 20, "test": 100}


def test_archived_datasets_leave_the_pickers_and_only_unused_ones_can_be_deleted(
    client: Client, personas: Any, tmp_path: Path
) -> None:
    team = personas["acme"]
    arithmetic = dataset_from_recipe(team, "arithmetic", tmp_path)
    hotpot = dataset_from_recipe(team, "hotpotqa", tmp_path)
    client.force_login(personas["bob"])
    train = arithmetic["train"]
    assert str(train.pk) in dict(
        form_choices(team, DatasetPicker.for_task(team, "arithmetic"))["train_dataset"]
    )
    client.post(f"/t/acme/datasets/{train.pk}/archive/", {"archived": "1"})
    train.refresh_from_db()
    assert train.archived and str(train.pk) not in dict(
        form_choices(team, DatasetPicker.for_task(team, "arithmetic"))["train_dataset"]
    )
    # The form lists only what fits the task: HotpotQA rows are not offered to a GSM8K experiment.
    assert str(hotpot["train"].pk) not in dict(
        form_choices(team, DatasetPicker.for_task(team, "gsm8k"))["train_dataset"]
    )
    assert str(hotpot["train"].pk) in dict(
        form_choices(team, DatasetPicker.for_task(team, "hotpotqa"))["train_dataset"]
    )
    config = RunConfig.from_preset(
        "grpo", name="uses it", task="arithmetic", **{"data.train_path": train.reference}
    )
    Experiment.create(team, personas["alice"], config, [1])
    response = client.post(f"/t/acme/datasets/{train.pk}/delete/", follow=True)
    assert "archive it instead" in response.content.decode() and Dataset.objects.filter(pk=train.pk).exists()
    val = arithmetic["val"]
    path = val.path
    client.post(f"/t/acme/datasets/{val.pk}/delete/")
    assert not Dataset.objects.filter(pk=val.pk).exists() and not path.exists()
    client.force_login(personas["charlie"])
    assert client.post(f"/t/acme/datasets/{train.pk}/delete/").status_code == 404


def test_the_form_refuses_a_dataset_another_tasks_reward_scores(
    client: Client, personas: Any, tmp_path: Path
) -> None:
    hotpot = dataset_from_recipe(personas["acme"], "hotpotqa", tmp_path)
    client.force_login(personas["alice"])
    response = client.post("/t/acme/experiments/new/", {
        "name": "mismatch", "task": "gsm8k", "preset": "grpo", "train_dataset": hotpot["train"].pk,
        "model_choice": "tiny-test", "seeds": "1",
    })  # fmt: skip
    assert response.status_code == 200
    assert "scored by the hotpotqa reward, not gsm8k" in response.content.decode()
