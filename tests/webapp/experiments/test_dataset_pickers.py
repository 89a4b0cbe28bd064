"""The New-experiment form's dataset pickers: they list exactly what the acceptance function accepts
for the chosen task, preselect what the task's recipe prepared (else nothing) and say why the team's
other datasets are not listed."""

from __future__ import annotations

import hashlib
import itertools
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tasks_lib.registry import load_recipes
from tests.webapp.datasets.conftest import contract_row, write_parquet
from tests.webapp.experiments.conftest import dataset_from_recipe
from tests.webapp.experiments.test_experiment_form import client_for
from webapp.accounts.models import Team
from webapp.datasets.models import Dataset
from webapp.experiments.acceptance import Refused, accept
from webapp.experiments.demo import import_recipe
from webapp.experiments.forms import SFT_FIELD

TICKETS_SOURCE = "my_company/tickets"


def adopt(team: Team, path: Path, name: str) -> Dataset:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    dataset, _ = Dataset.from_file(
        team, path, sha256=digest, name=name, source="upload", validate_later=False
    )
    dataset.validate()
    return dataset


def tickets(team: Team, tmp_path: Path) -> Dataset:
    """An upload whose data_source no reward knew, mapped on its page to the built-in "exact"."""
    rows = [{**contract_row(i), "data_source": TICKETS_SOURCE} for i in range(4)]
    dataset = adopt(team, write_parquet(tmp_path / "tickets.parquet", rows), "tickets.parquet")
    assert dataset.status == "unmapped"
    dataset.map_rewards({TICKETS_SOURCE: "exact"})
    dataset.validate()  # what the queued validation does
    assert dataset.is_usable, dataset.problems
    return dataset


def select(page: str, name: str) -> str:
    found = re.search(rf'<select name="{name}".*?</select>', page, re.S)
    assert found, name
    return found.group(0)


def listed(page: str, name: str) -> list[str]:
    return [value for value in re.findall(r'<option value="([^"]*)"', select(page, name)) if value]


def selected(page: str, name: str) -> str:
    found = re.search(r'<option value="([^"]*)"[^>]*selected', select(page, name))
    return found.group(1) if found else ""


def hint(page: str, name: str) -> str:
    found = re.search(rf'id="field-{name}".*?<small class="muted">(.*?)</small>', page, re.S)
    assert found, name
    return found.group(1)


def form_page(team: Team, task: str, *, sft: bool = False) -> str:
    # What the form's task select and SFT box send when they refresh the pickers.
    ticked = f"&{SFT_FIELD}=on" if sft else ""
    return client_for("alice").get(f"/t/{team.slug}/experiments/new/?task={task}{ticked}").content.decode()


def demonstrations(team: Team, tmp_path: Path) -> Dataset:
    """A demonstrations file (an SFT run's training data): fits every task, but only an SFT run."""
    conversation = [{"role": "user", "content": "What is k1?"}, {"role": "assistant", "content": "42"}]
    path = tmp_path / "demos.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": conversation}] * 4), path)
    dataset = adopt(team, path, "demos.parquet")
    assert dataset.is_usable and dataset.holds_demonstrations, dataset.problems
    return dataset


def test_the_pickers_list_exactly_the_datasets_the_acceptance_function_accepts(
    personas: Any, tmp_path: Path
) -> None:
    acme = personas["acme"]
    for task in ("arithmetic", "gsm8k", "hotpotqa"):
        dataset_from_recipe(acme, task, tmp_path)
    tickets(acme, tmp_path)
    demonstrations(acme, tmp_path)
    for task, sft in itertools.product(load_recipes().names(), (False, True)):
        shown = set(listed(form_page(acme, task, sft=sft), "train_dataset"))
        accepted = set()
        for dataset in Dataset.offered_to(acme):
            fields = {
                "task": task,
                "model.path": "tiny-test",
                "data.train_path": dataset.reference,
                SFT_FIELD: sft,
            }
            try:
                accept(acme, fields)
            except Refused as refused:
                assert "data.train_path" in refused.by_path(), refused  # only the dataset may be refused
                continue
            accepted.add(str(dataset.pk))
        assert shown == accepted, (task, sft)


def test_the_form_preselects_the_tasks_recipe_datasets_never_the_newest_upload(
    personas: Any, tmp_path: Path
) -> None:
    acme, alice = personas["acme"], personas["alice"]
    prepared, problem = import_recipe(acme, "arithmetic", alice)
    assert not problem and {"train", "val"} <= set(prepared)
    newest = tickets(acme, tmp_path)  # uploaded after: fits every task (its reward is no task's)
    page = form_page(acme, "arithmetic")
    assert str(newest.pk) in listed(page, "train_dataset")
    assert selected(page, "train_dataset") == str(prepared["train"].pk)
    assert selected(page, "val_dataset") == str(prepared["val"].pk)
    # GSM8K's recipe prepared nothing here: nothing is chosen for the user, and the hint says why the
    # arithmetic datasets are not listed.
    page = form_page(acme, "gsm8k")
    assert selected(page, "train_dataset") == "" and selected(page, "val_dataset") == ""
    assert str(prepared["train"].pk) not in listed(page, "train_dataset")
    for name in ("train_dataset", "val_dataset"):
        assert "2 do not fit the task gsm8k" in hint(page, name)
        assert f"{prepared['train'].name}: scored by the arithmetic reward" in hint(page, name)


def test_a_task_switch_refills_the_pickers_with_their_hint(personas: Any, tmp_path: Path) -> None:
    acme = personas["acme"]
    arithmetic = dataset_from_recipe(acme, "arithmetic", tmp_path)
    arithmetic["val"].set_archived(True)
    response = client_for("alice").get(
        f"/t/{acme.slug}/experiments/new/?task=hotpotqa&preset=grpo",
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="id_task",
    )
    page = response.content.decode()
    train = re.search(r'<div [^>]*id="field-train_dataset" hx-swap-oob="true">.*?</div>', page, re.S)
    assert train and listed(train.group(0), "train_dataset") == []
    assert (
        "1 do not fit the task hotpotqa (arithmetic train: scored by the arithmetic reward)" in train.group(0)
    )
    assert "1 archived (arithmetic val)" in train.group(0)


def test_a_sent_form_naming_a_misfit_gets_the_acceptance_functions_refusal(
    personas: Any, tmp_path: Path
) -> None:
    from tests.webapp.experiments.test_experiment_form import form_data

    acme = personas["acme"]
    arithmetic = dataset_from_recipe(acme, "arithmetic", tmp_path)
    data = form_data(arithmetic, task="gsm8k")
    response = client_for("alice").post(f"/t/{acme.slug}/experiments/new/", data)
    errors = response.context["form"].errors
    assert "rows are scored by the arithmetic reward, not gsm8k's" in " ".join(errors["train_dataset"])


def test_the_form_reads_the_datasets_in_as_many_queries_however_many_there_are(
    personas: Any, tmp_path: Path
) -> None:
    """The form was slow under load with many datasets: each one read the team's rewards and tools
    again (docs/datasets.md#create-time-checks)."""
    acme = personas["acme"]
    client = client_for("alice")

    def queries_with(count: int) -> int:
        for index in range(Dataset.objects.filter(team=acme).count(), count):
            rows = [contract_row(index * 10 + i) for i in range(3)]
            adopt(acme, write_parquet(tmp_path / f"upload-{index}.parquet", rows), f"upload {index}")
        client.get(f"/t/{acme.slug}/experiments/new/?task=arithmetic")
        with CaptureQueriesContext(connection) as queries:
            page = client.get(f"/t/{acme.slug}/experiments/new/?task=arithmetic").content.decode()
        assert len(listed(page, "train_dataset")) == count
        return len(queries)

    few = queries_with(2)
    assert queries_with(12) == few


def test_ticking_sft_lists_the_demonstrations_and_says_why_rl_rows_are_not(
    personas: Any, tmp_path: Path
) -> None:
    acme = personas["acme"]
    rows = dataset_from_recipe(acme, "arithmetic", tmp_path)["train"]
    demos = demonstrations(acme, tmp_path)
    rl = form_page(acme, "arithmetic")
    assert str(demos.pk) not in listed(rl, "train_dataset")
    assert "hold demonstrations, for an SFT run (demos.parquet)" in hint(rl, "train_dataset")
    sft = form_page(acme, "arithmetic", sft=True)
    assert listed(sft, "train_dataset") == [str(demos.pk)]
    assert "hold RL rows, not demonstrations" in hint(sft, "train_dataset") and rows.name in hint(
        sft, "train_dataset"
    )
