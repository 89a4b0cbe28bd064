"""A valid dataset's reward mapping is changed on its page: checked again with it, and refused with
nothing changed when it would leave a data source unscored (docs/datasets.md#mapping)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.test import Client

from tests.webapp.experiments.test_dataset_pickers import TICKETS_SOURCE, tickets
from webapp.accounts.models import Role
from webapp.datasets.models import DatasetStatus


def test_a_valid_datasets_mapping_is_changed_on_its_page_and_checked_again(
    client: Client, personas: Any, tmp_path: Path
) -> None:
    dataset = tickets(personas["acme"], tmp_path)
    client.force_login(personas["bob"])
    page = client.get(f"/t/acme/datasets/{dataset.pk}/").content.decode()
    assert 'class="mapping-form"' in page and "Save and check again" in page
    assert '<option value="exact" selected>' in page  # the saved choice
    response = client.post(f"/t/acme/datasets/{dataset.pk}/map/", {"source_0": "contains"})
    assert response.status_code == 302
    dataset.refresh_from_db()
    assert dataset.reward_map == {TICKETS_SOURCE: "contains"} and dataset.status == DatasetStatus.PENDING
    dataset.validate()  # what the queued check does
    assert dataset.status == DatasetStatus.VALID
    assert [item["reward"] for item in dataset.routing()["data_sources"]] == ["contains"]


def test_a_mapping_that_leaves_a_data_source_unscored_is_refused_and_nothing_changes(
    client: Client, personas: Any, tmp_path: Path
) -> None:
    dataset = tickets(personas["acme"], tmp_path)
    client.force_login(personas["bob"])
    response = client.post(f"/t/acme/datasets/{dataset.pk}/map/", {"source_0": ""}, follow=True)
    assert response.status_code == 400
    page = response.content.decode()
    assert "Choose a reward: nothing else scores this data source." in page
    assert "The mapping was not saved" in page
    dataset.refresh_from_db()
    assert dataset.status == DatasetStatus.VALID and dataset.reward_map == {TICKETS_SOURCE: "exact"}
    assert dataset.path.exists()


def test_viewers_see_no_mapping_form_and_cannot_change_it(
    client: Client, personas: Any, tmp_path: Path
) -> None:
    acme = personas["acme"]
    acme.add_member(personas["charlie"], Role.VIEWER)
    dataset = tickets(acme, tmp_path)
    client.force_login(personas["charlie"])
    page = client.get(f"/t/acme/datasets/{dataset.pk}/").content.decode()
    assert 'class="mapping-form"' not in page and "Delete…" not in page and ">Archive<" not in page
    assert client.post(f"/t/acme/datasets/{dataset.pk}/map/", {"source_0": "contains"}).status_code == 403
    dataset.refresh_from_db()
    assert dataset.reward_map == {TICKETS_SOURCE: "exact"}
