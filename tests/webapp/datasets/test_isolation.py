"""Every page and action of the datasets app answers 404 to charlie, who is not in Acme."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD
from webapp.datasets import files
from webapp.datasets.models import Dataset, RecipeImport


def _charlie() -> Client:
    client = Client()
    assert client.login(username="charlie", password=PASSWORD)
    return client


def _acme_dataset(personas: dict[str, Any], source: Path) -> Dataset:
    path = Path(shutil.copy(source, files.incoming_dir() / "isolation.parquet"))
    dataset, _ = Dataset.from_file(
        personas["acme"], path, sha256=files.sha256_of(path), name="acme data", source="test"
    )
    dataset.validate()
    return dataset


def test_charlie_gets_404_on_every_dataset_page(personas: dict[str, Any], good_parquet: Path) -> None:
    dataset = _acme_dataset(personas, good_parquet)
    slug = personas["acme"].slug
    pages = [
        reverse("datasets", args=[slug]),
        reverse("dataset", args=[slug, dataset.pk]),
        reverse("dataset_download", args=[slug, dataset.pk]),
    ]
    client = _charlie()
    assert [client.get(url).status_code for url in pages] == [404] * len(pages)
    own = personas["other"].slug
    assert client.get(reverse("dataset", args=[own, dataset.pk])).status_code == 404
    assert client.get(reverse("dataset_download", args=[own, dataset.pk])).status_code == 404


def test_charlie_gets_404_on_every_dataset_action_and_nothing_is_created(
    personas: dict[str, Any], good_parquet: Path
) -> None:
    slug = personas["acme"].slug
    before = set(files.incoming_dir().iterdir())
    client = _charlie()
    with good_parquet.open("rb") as handle:
        upload = client.post(reverse("dataset_upload", args=[slug]), {"file": handle})
    recipe = client.post(reverse("dataset_from_recipe", args=[slug]), {"task": "arithmetic"})
    assert (upload.status_code, recipe.status_code) == (404, 404)
    assert not Dataset.objects.exists() and not RecipeImport.objects.exists()
    assert set(files.incoming_dir().iterdir()) == before  # his bytes were never written
