"""SFT experiments and start_from (docs/sft.md#start-from): the acceptance resolves a run and step to
the checkpoint's folder or refuses what could not start, launches record the kind and the lineage, and
the runs table and run page show the chain."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD
from tests.webapp.experiments.test_evaluations import FILES, saved_checkpoint
from trainer.config import RunConfig
from webapp.datasets import files
from webapp.datasets.models import Dataset
from webapp.experiments.acceptance import Refused, accept
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus

CONVERSATION = [
    {"role": "user", "content": "What is k1?"},
    {"role": "assistant", "content": '<tool_call>{"name": "lookup", "arguments": {"key": "k1"}}</tool_call>'},
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "<answer>42</answer>"},
]


def adopted(team: Any, path: Path, name: str) -> str:
    dataset, _ = Dataset.from_file(
        team, path, sha256=files.sha256_of(path), name=name, source="t", validate_later=False
    )
    assert dataset.validate(), dataset.problems
    return dataset.reference


@pytest.fixture
def demos(personas: Any) -> str:
    path = files.incoming_dir() / "demos.parquet"
    pq.write_table(pa.Table.from_pylist([{"messages": CONVERSATION}] * 4), path)
    return adopted(personas["acme"], path, "demos")


@pytest.fixture
def rows(personas: Any) -> str:
    from tests.webapp.datasets.conftest import contract_row, write_parquet

    return adopted(
        personas["acme"],
        write_parquet(files.incoming_dir() / "rows.parquet", [contract_row(i) for i in range(4)]),
        "rows",
    )


def fields(train: str, **changes: Any) -> dict[str, Any]:
    return {
        "name": "exp",
        "task": "arithmetic",
        "model.path": "tiny-test",
        "data.train_path": train,
        **changes,
    }


def sft_run(team: Any, user: Any, demos: str, *, steps: tuple[int, ...] = (2, 4)) -> Run:
    config = accept(team, fields(demos, name="sft", **{"sft.enabled": True}))
    experiment = Experiment.create(team, user, config, [1])
    run = Run.objects.create(
        experiment=experiment, team=team, status=RunStatus.SUCCEEDED, name="sft · seed 1",
        kind=RunKind.SFT, config=json.loads(config.to_json()),
    )  # fmt: skip
    for step in steps:
        saved_checkpoint(run, step, FILES)
    return run


def test_an_rl_config_starts_from_the_latest_checkpoint_of_an_sft_run_and_its_runs_keep_the_lineage(
    personas: Any, demos: str, rows: str
) -> None:
    parent = sft_run(personas["acme"], personas["alice"], demos)
    config = accept(personas["acme"], fields(rows, **{"start_from.run": parent.pk}))
    assert config.start_from.step == 4
    assert config.start_from.checkpoint is not None and config.start_from.checkpoint.endswith("step_00000004")
    chosen = accept(personas["acme"], fields(rows, **{"start_from.run": parent.pk, "start_from.step": 2}))
    assert chosen.start_from.checkpoint is not None and chosen.start_from.checkpoint.endswith("step_00000002")

    experiment = Experiment.create(personas["acme"], personas["alice"], config, [1])
    (run,) = experiment.launch().runs
    assert (run.kind, run.started_from, run.started_from_step) == (RunKind.TRAINING, parent, 4)
    assert RunConfig.model_validate(run.config).start_from.checkpoint == config.start_from.checkpoint

    client = Client()
    assert client.login(username="alice", password=PASSWORD)
    page = client.get(reverse("run", args=[personas["acme"].slug, run.pk])).content.decode()
    assert "Started from" in page and reverse("run", args=[personas["acme"].slug, parent.pk]) in page
    parent_page = client.get(reverse("run", args=[personas["acme"].slug, parent.pk])).content.decode()
    assert (
        "Runs started from it" in parent_page
        and reverse("run", args=[personas["acme"].slug, run.pk]) in parent_page
    )
    # The lineage column is one the column chooser offers (the defaults fit 1,024 px).
    chosen = "?col=name&col=status&col=started_from"
    table = client.get(reverse("runs", args=[personas["acme"].slug]) + chosen).content.decode()
    assert f"← run {parent.pk}" in table


def test_an_sft_experiment_launches_runs_of_kind_sft(personas: Any, demos: str) -> None:
    config = accept(personas["acme"], fields(demos, **{"sft.enabled": True}))
    (run,) = Experiment.create(personas["acme"], personas["alice"], config, [1]).launch().runs
    assert run.kind == RunKind.SFT and run.started_from is None
    assert not run.is_judged


@pytest.mark.parametrize(
    ("changes", "path", "words"),
    [
        ({"start_from.run": "other"}, "start_from.run", "is not a run of this team"),
        (
            {"start_from.run": "parent", "model.path": "smollm2-135m-instruct"},
            "start_from.run",
            "trained tiny-test",
        ),
        ({"start_from.run": "parent", "start_from.step": 3}, "start_from.step", "one of 2, 4"),
        ({"start_from.run": "bare"}, "start_from.step", "no checkpoint at all"),
        ({"start_from.checkpoint": "/tmp"}, "start_from.checkpoint", "set start_from.run"),
        ({"sft.enabled": True}, "data.train_path", "an SFT run trains on demonstrations"),
    ],
)
def test_a_start_that_could_not_happen_is_refused_on_its_field(
    personas: Any, demos: str, rows: str, changes: dict[str, Any], path: str, words: str
) -> None:
    parent = sft_run(personas["acme"], personas["alice"], demos)
    bare = Run.objects.create(
        experiment=parent.experiment, team=personas["acme"], name="b", config=parent.config
    )
    outsider = Run.objects.create(
        experiment=parent.experiment, team=personas["other"], name="o", config=parent.config
    )
    runs = {"parent": parent.pk, "other": outsider.pk, "bare": bare.pk}
    resolved = {
        key: runs.get(value, value) if key == "start_from.run" else value for key, value in changes.items()
    }
    with pytest.raises(Refused) as refused:
        accept(personas["acme"], fields(rows, **resolved))
    assert [p for p, _ in refused.value.problems] == [path]
    assert words in refused.value.problems[0][1]


def test_a_deleted_checkpoint_is_not_started_from(personas: Any, demos: str, rows: str) -> None:
    parent = sft_run(personas["acme"], personas["alice"], demos, steps=(2,))
    parent.checkpoints.update(deleted=True)
    with pytest.raises(Refused, match="no checkpoint at all still saved"):
        accept(personas["acme"], fields(rows, **{"start_from.run": parent.pk}))
