from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD
from tests.webapp.datasets.conftest import contract_row, write_parquet
from tests.webapp.polling import poll_until
from webapp.accounts.models import ApiToken
from webapp.datasets.models import Dataset, DatasetStatus, ImportStatus, RecipeImport
from webapp.datasets.parquet import compute_stats, read_rows


def _client(username: str) -> Client:
    client = Client()
    assert client.login(username=username, password=PASSWORD)
    return client


def _upload(client: Client, team_slug: str, path: Path, name: str = "") -> Any:
    with path.open("rb") as handle:
        return client.post(reverse("dataset_upload", args=[team_slug]), {"file": handle, "name": name})


def _incoming() -> set[Path]:
    return set((Path(settings.DATASETS_DIR) / "incoming").glob("*"))


def test_an_upload_is_stored_under_its_content_hash_and_waits_for_the_validator(
    personas: dict[str, Any], good_parquet: Path
) -> None:
    acme = personas["acme"]
    response = _upload(_client("bob"), acme.slug, good_parquet, name="Arithmetic")
    dataset = Dataset.objects.get(team=acme)
    assert response.status_code == 302
    assert response["Location"] == reverse("dataset", args=[acme.slug, dataset.pk])
    assert dataset.sha256 == hashlib.sha256(good_parquet.read_bytes()).hexdigest()
    assert dataset.path.read_bytes() == good_parquet.read_bytes()
    assert (dataset.name, dataset.status, dataset.created_by) == (
        "Arithmetic",
        DatasetStatus.PENDING,
        personas["bob"],
    )
    assert list(Dataset.usable_for(acme)) == []  # not usable before the validator has spoken


def test_the_same_content_uploaded_twice_gives_one_dataset(
    personas: dict[str, Any], good_parquet: Path
) -> None:
    acme, client = personas["acme"], _client("alice")
    before = _incoming()
    first = _upload(client, acme.slug, good_parquet, name="first")
    copy = Path(shutil.copy(good_parquet, good_parquet.with_name("same-bytes-other-name.parquet")))
    second = _upload(client, acme.slug, copy, name="second")
    assert Dataset.objects.filter(team=acme).count() == 1
    assert first["Location"] == second["Location"]
    assert Dataset.objects.get(team=acme).name == "first"
    assert _incoming() == before  # the second copy was not kept anywhere


def test_the_same_content_in_another_team_is_that_teams_own_dataset(
    personas: dict[str, Any], good_parquet: Path
) -> None:
    _upload(_client("alice"), personas["acme"].slug, good_parquet)
    _upload(_client("charlie"), personas["other"].slug, good_parquet)
    assert sorted(d.team.slug for d in Dataset.objects.all()) == sorted(
        [personas["acme"].slug, personas["other"].slug]
    )


def test_an_upload_over_the_limit_is_refused_with_a_clear_message(
    personas: dict[str, Any], good_parquet: Path, settings: Any
) -> None:
    settings.UPLOAD_MAX_BYTES = 1000
    before = _incoming()
    response = _upload(_client("alice"), personas["acme"].slug, good_parquet)
    assert response.status_code == 413
    assert "larger than the upload limit of 1000 bytes (STUDIO_UPLOAD_MAX_BYTES)" in response.content.decode()
    assert not Dataset.objects.exists()
    assert _incoming() == before  # the partial file is gone


def test_a_file_just_under_the_limit_is_accepted(
    personas: dict[str, Any], good_parquet: Path, settings: Any
) -> None:
    settings.UPLOAD_MAX_BYTES = good_parquet.stat().st_size
    response = _upload(_client("alice"), personas["acme"].slug, good_parquet)
    assert response.status_code == 302
    assert Dataset.objects.get().size_bytes == good_parquet.stat().st_size


def test_a_viewer_cannot_upload(personas: dict[str, Any], good_parquet: Path) -> None:
    personas["acme"].add_member(personas["charlie"], "viewer")
    response = _upload(_client("charlie"), personas["acme"].slug, good_parquet)
    assert response.status_code == 403
    assert not Dataset.objects.exists()


def test_the_validator_makes_a_good_file_valid_with_its_stats(
    personas: dict[str, Any], good_parquet: Path
) -> None:
    _upload(_client("alice"), personas["acme"].slug, good_parquet)
    dataset = Dataset.objects.get()
    assert dataset.validate() is True
    assert dataset.status == DatasetStatus.VALID
    assert dataset.stats["rows"] == 25
    assert dataset.stats["data_sources"] == {"exact": 25}
    assert sum(dataset.stats["prompt_length"]["counts"]) == 25
    assert [d.pk for d in Dataset.usable_for(personas["acme"])] == [dataset.pk]
    assert Dataset.resolve(personas["acme"], f"dataset:{dataset.pk}") == dataset
    assert Dataset.resolve(personas["other"], f"dataset:{dataset.pk}") is None
    assert dataset.validate() is False  # settled once


def test_a_malformed_file_becomes_invalid_names_row_and_column_and_leaves_no_file(
    personas: dict[str, Any], bad_role_parquet: Path
) -> None:
    _upload(_client("alice"), personas["acme"].slug, bad_role_parquet)
    dataset = Dataset.objects.get()
    dataset.validate()
    assert dataset.status == DatasetStatus.INVALID
    assert dataset.problems[0]["row"] == 3
    assert dataset.problems[0]["column"] == "prompt[1].role"
    assert "unknown role 'wizard'" in dataset.problems[0]["message"]
    assert not dataset.path.exists()
    assert not Dataset.usable_for(personas["acme"]).exists()
    page = _client("alice").get(reverse("dataset", args=[personas["acme"].slug, dataset.pk])).content.decode()
    assert "unknown role &#x27;wizard&#x27;" in page
    assert reverse("dataset_download", args=[personas["acme"].slug, dataset.pk]) not in page


def test_a_file_that_is_not_parquet_is_invalid(personas: dict[str, Any], tmp_path: Path) -> None:
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"PAR1 but not really" * 100)
    _upload(_client("alice"), personas["acme"].slug, junk)
    dataset = Dataset.objects.get()
    dataset.validate()
    assert dataset.status == DatasetStatus.INVALID
    assert "cannot read the parquet file" in dataset.problems[0]["message"]


def test_stats_count_rows_and_sources_and_bin_every_prompt(tmp_path: Path) -> None:
    rows = [contract_row(i) for i in range(10)]
    for row in rows[:4]:
        row["data_source"] = "contains"
    rows[9] = contract_row(9, question="x" * 500)
    stats = compute_stats(write_parquet(tmp_path / "s.parquet", rows, row_group_size=3))
    assert stats["rows"] == 10
    assert stats["data_sources"] == {"exact": 6, "contains": 4}
    histogram = stats["prompt_length"]
    assert sum(histogram["counts"]) == 10
    assert histogram["max"] == len("You are a careful calculator.") + 500
    assert histogram["counts"][-1] == 1  # the long prompt alone in the last bin
    assert len(histogram["edges"]) == len(histogram["counts"]) + 1


def test_a_preview_page_reads_across_row_groups(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "p.parquet", [contract_row(i) for i in range(20)], row_group_size=3)
    rows = read_rows(path, 5, 6)
    assert [row.number for row in rows] == [5, 6, 7, 8, 9, 10]
    assert [row.index for row in rows] == ["5", "6", "7", "8", "9", "10"]
    assert rows[0].messages[1] == {"role": "user", "content": "What is 5 + 5?"}
    assert rows[0].ground_truth == "10"
    assert [row.number for row in read_rows(path, 18, 10)] == [18, 19]


def test_the_preview_is_paginated_on_the_server_and_escapes_text(
    personas: dict[str, Any], good_parquet: Path
) -> None:
    client = _client("bob")
    _upload(client, personas["acme"].slug, good_parquet)
    dataset = Dataset.objects.get()
    dataset.validate()
    url = reverse("dataset", args=[personas["acme"].slug, dataset.pk])
    first = client.get(url).content.decode()
    assert "Rows 0 to 9 of 25" in first
    assert "Is &lt;b&gt;bold&lt;/b&gt; &amp; &lt;script&gt;alert(1)&lt;/script&gt; escaped?" in first
    assert "<script>alert(1)</script>" not in first
    assert "&lt;i&gt;yes&lt;/i&gt;" in first
    assert first.count("<rect ") == len(dataset.histogram_bars()) > 0
    last = client.get(
        url, {"page": 3}, headers={"HX-Request": "true", "HX-Target": "preview"}
    ).content.decode()
    assert last.lstrip().startswith('<section id="preview">')  # the fragment only
    assert "Rows 20 to 24 of 25" in last


def test_the_status_poll_stops_and_reloads_once_validated(
    personas: dict[str, Any], good_parquet: Path
) -> None:
    client = _client("alice")
    _upload(client, personas["acme"].slug, good_parquet)
    dataset = Dataset.objects.get()
    url = reverse("dataset", args=[personas["acme"].slug, dataset.pk])
    htmx = {"HX-Request": "true", "HX-Target": "dataset-status"}
    pending = client.get(url, headers=htmx)
    assert pending.status_code == 200 and 'hx-trigger="every 2s"' in pending.content.decode()
    dataset.validate()
    settled = client.get(url, headers=htmx)
    assert settled.status_code == 286
    assert settled["HX-Refresh"] == "true"


def test_a_valid_dataset_downloads_as_its_file(personas: dict[str, Any], good_parquet: Path) -> None:
    client = _client("alice")
    _upload(client, personas["acme"].slug, good_parquet)
    dataset = Dataset.objects.get()
    url = reverse("dataset_download", args=[personas["acme"].slug, dataset.pk])
    assert client.get(url).status_code == 404  # pending: nobody reads an unchecked file
    dataset.validate()
    response = client.get(url)
    assert b"".join(response.streaming_content) == good_parquet.read_bytes()


def test_only_staff_may_prepare_a_recipe_from_a_server_side_path(personas: dict[str, Any]) -> None:
    response = _client("alice").post(
        reverse("dataset_from_recipe", args=[personas["acme"].slug]),
        {"task": "arithmetic", "input_path": "/etc"},
    )
    assert response.status_code == 400
    assert "Only staff may prepare a recipe from a server-side path." in response.content.decode()
    assert not RecipeImport.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_recipe_is_prepared_on_a_worker_into_valid_datasets(
    personas: dict[str, Any], start_worker: Any
) -> None:
    start_worker()
    acme = personas["acme"]
    response = _client("bob").post(reverse("dataset_from_recipe", args=[acme.slug]), {"task": "arithmetic"})
    assert response.status_code == 302
    recipe_import = RecipeImport.objects.get()
    poll = {"HX-Request": "true", "HX-Target": "recipe-imports"}
    client = _client("bob")
    poll_until(lambda: client.get(reverse("datasets", args=[acme.slug]), headers=poll).status_code == 286)
    recipe_import.refresh_from_db()
    assert recipe_import.status == ImportStatus.DONE, recipe_import.message
    datasets = {d.name: d for d in recipe_import.datasets.all()}
    assert set(datasets) == {"arithmetic train (fixtures)", "arithmetic val (fixtures)"}
    assert all(d.status == DatasetStatus.VALID and d.stats["rows"] > 0 for d in datasets.values())
    assert all(d.team == acme and d.created_by == personas["bob"] for d in datasets.values())
    assert {d.stats["data_sources"].popitem()[0] for d in datasets.values()} == {"arithmetic"}


def test_the_api_prepares_arithmetic_at_its_multiply_level(personas: dict[str, Any]) -> None:
    token = ApiToken.issue(personas["bob"], "tests")[1]
    body = {"task": "arithmetic", "size": 20, "val_size": 4, "level": "multiply"}
    answer = Client().post("/api/t/acme/datasets/from-recipe", body, content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    assert answer.status_code == 202, answer.content
    recipe_import = RecipeImport.objects.get()
    assert recipe_import.run()
    train = recipe_import.datasets.get(name__startswith="arithmetic train")
    assert train.name == "arithmetic train (generated, size 20, seed 0, level multiply)"
    rows = pq.read_table(train.path).to_pylist()
    assert all(re.fullmatch(r"\d{3,4} \* \d{3}", row["extra_info"]["expression"]) for row in rows)
    refused = Client().post("/api/t/acme/datasets/from-recipe", {**body, "task": "lookup"},
                            content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    assert (
        refused.status_code in (400, 422)
        and "Only the arithmetic recipe has levels" in refused.content.decode()
    )
    unknown = Client().post("/api/t/acme/datasets/from-recipe", {**body, "level": "huge"},
                            content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")  # fmt: skip
    assert unknown.status_code == 400 and unknown.json()["field"] == "level"
    assert "huge is not one of the available choices" in unknown.json()["error"]


@pytest.mark.django_db(transaction=True)
def test_a_recipe_on_a_missing_server_path_fails_with_its_reason(
    personas: dict[str, Any], start_worker: Any
) -> None:
    personas["alice"].is_staff = True
    personas["alice"].save()
    start_worker()
    acme = personas["acme"]
    _client("alice").post(
        reverse("dataset_from_recipe", args=[acme.slug]),
        {"task": "arithmetic", "input_path": "/nonexistent/raw"},
    )
    recipe_import = poll_until(lambda: RecipeImport.objects.exclude(status=ImportStatus.PENDING).first())
    assert recipe_import.status == ImportStatus.FAILED
    assert "/nonexistent/raw" in recipe_import.message
    assert not Dataset.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_validation_whose_task_was_lost_is_sent_again_and_settles(
    personas: dict[str, Any], good_parquet: Path, start_worker: Any
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from webapp.celery import app
    from webapp.datasets.tasks import RESEND_PENDING_AFTER, resend_lost_work

    acme = personas["acme"]
    _upload(_client("bob"), acme.slug, good_parquet)
    app.control.purge()  # the broker lost the validation task before any worker took it
    dataset = Dataset.objects.get(team=acme)
    assert resend_lost_work() == ([], [])  # a fresh upload is left to its own task
    Dataset.objects.filter(pk=dataset.pk).update(
        created=timezone.now() - RESEND_PENDING_AFTER - timedelta(seconds=1)
    )
    assert resend_lost_work() == ([dataset.pk], [])
    start_worker()
    settled = poll_until(
        lambda: Dataset.objects.exclude(status=DatasetStatus.PENDING).filter(pk=dataset.pk).first()
    )
    assert settled.status == DatasetStatus.VALID and settled.stats["rows"] > 0
    assert resend_lost_work() == ([], [])


def test_an_uploaded_demonstrations_file_is_valid_previewed_and_fits_every_task(
    personas: dict[str, Any], tmp_path: Path
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    conversation = [
        {"role": "user", "content": "What is k1?"},
        {
            "role": "assistant",
            "content": '<tool_call>{"name": "lookup", "arguments": {"key": "k1"}}</tool_call>',
        },
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "<answer>42</answer>"},
    ]
    path = tmp_path / "demos.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": conversation}] * 4), path)
    _upload(_client("alice"), personas["acme"].slug, path)
    dataset = Dataset.objects.get()
    dataset.validate()
    assert dataset.status == DatasetStatus.VALID, dataset.problems
    assert (dataset.stats["rows"], dataset.stats["data_sources"], dataset.stats["layout"]) == (
        4,
        {},
        "messages",
    )
    assert dataset.task_mismatch("arithmetic") is None
    assert [m["role"] for m in read_rows(dataset.path, 0, 1)[0].messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
