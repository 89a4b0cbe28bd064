"""A team HTTP tool gets called after SFT (docs/sft.md#start-from): the tool is registered through the
REST API, demonstrations are generated on it, SmolLM2-135M is fine-tuned on them and an RL run started
from that checkpoint calls the tool in every rollout — counted by the tool's own server and shown by
the run's tool analytics. Both runs are the real trainer CLI against the live test server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from django.test import Client

from tests.webapp.datasets.conftest import KeyValueServer, api, lookup_dataset
from tests.webapp.tools.test_team_tools_in_runs import claimed_run, train_in_process
from trainer.config import RunConfig
from webapp.accounts.models import ApiToken
from webapp.datasets import files
from webapp.datasets.models import Dataset, DatasetStatus
from webapp.experiments import demonstrations
from webapp.experiments.acceptance import accept
from webapp.experiments.models import Run, RunKind, RunStatus
from webapp.ingestion.models import ToolCall, Trajectory

pytestmark = pytest.mark.slow

TOOL = "kv_lookup"
SMOLLM2 = "smollm2"  # the real SmolLM2-135M: a random tiny model does not learn to copy the key
# Measured: 5 steps at 3e-4 leave SmolLM2 answering without the tool; these teach it the call
# (docs/sft.md#start-from).
SFT = {"trainer.total_steps": 6, "trainer.batch_size": 4, "optim.lr": 5e-4, "sft.max_length": 512}


def register_tool(client: Client, token: str, server: KeyValueServer) -> None:
    tool = {"name": TOOL, "description": "Our key-value store.", "url": server.url,
            "parameters": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}  # fmt: skip
    answer = api(client, "post", "/api/t/acme/tools", token, tool)
    assert answer.status_code == 201, answer.content


def generated_demonstrations(source: Dataset, user: Any) -> Dataset:
    """The job's work done here (no worker): the lookup rule's calls run on the team tool."""
    summary = demonstrations.run(demonstrations.start(source, user, {"lookup": TOOL}))
    assert summary["kept"] == source.stats["rows"], summary
    return Dataset.objects.get(pk=summary["dataset"])


def rows_on_the_team_tool(source: Dataset, tmp_path: Path) -> Dataset:
    """The lookup rows, their env offering the team tool instead of the recipe's own."""
    rows = pq.read_table(source.path).to_pylist()
    for row in rows:
        row["env_kwargs"] = json.dumps({"env_type": "tool", "tools": [TOOL]})
        row["extra_info"].pop("tools_kwargs", None)
    path = tmp_path / "lookup-on-kv.parquet"
    pq.write_table(pq.read_table(source.path).from_pylist(rows), path)
    dataset, _ = Dataset.from_file(
        source.team, path, sha256=files.sha256_of(path), name=path.stem, source="test", validate_later=False
    )
    dataset.validate()
    assert dataset.status == DatasetStatus.VALID, dataset.problems
    return dataset


def common(name: str, train: Dataset) -> dict[str, Any]:
    return {
        "name": name, "task": "lookup", "model.path": SMOLLM2, "data.train_path": train.reference,
        "data.val_path": None, "data.shuffle": False, "trainer.device": "cpu", "trainer.num_threads": 1,
    }  # fmt: skip


def trained(personas: Any, fields: dict[str, Any], live_server: Any, monkeypatch: pytest.MonkeyPatch) -> Run:
    run, token = claimed_run(personas, accept(personas["acme"], RunConfig.from_preset("grpo", **fields)))
    assert train_in_process(run, token, live_server, monkeypatch) == 0
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    return run


def test_an_rl_run_after_sft_calls_a_team_http_tool_registered_through_the_api_in_every_rollout(
    personas: Any, live_server: Any, kv_server: KeyValueServer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    token = ApiToken.issue(personas["alice"], "tests")[1]
    client = Client()
    register_tool(client, token, kv_server)
    source = lookup_dataset(personas["acme"], tmp_path, missing_key=False)
    demos = generated_demonstrations(source, personas["alice"])
    assert len(kv_server.keys) == source.stats["rows"]

    sft = trained(
        personas, {**common("sft on kv", demos), "sft.enabled": True, **SFT}, live_server, monkeypatch
    )
    assert sft.kind == RunKind.SFT and sft.checkpoints.exists()
    kv_server.keys.clear()
    rl = trained(personas, {
        **common("rl on kv", rows_on_the_team_tool(source, tmp_path)), "start_from.run": sft.pk,
        "rollout.tools": [TOOL], "rollout.n": 2, "trainer.batch_size": 2, "optim.mini_batch_size": 4,
        "rollout.max_new_tokens": 64, "rollout.max_steps": 2, "rollout.temperature": 0.1,
        "trainer.total_steps": 1,
    }, live_server, monkeypatch)  # fmt: skip
    assert rl.started_from == sft

    trajectories = Trajectory.objects.filter(run=rl)
    assert trajectories.count() == 4
    for trajectory in trajectories:
        called = ToolCall.objects.filter(trajectory=trajectory, name=TOOL, error=None)
        said = [step.response.text for step in trajectory.steps.order_by("index")]
        assert called.exists(), f"trajectory {trajectory.pk} never called {TOOL}: {said}"
    calls = ToolCall.objects.filter(run=rl, name=TOOL).count()
    assert len(kv_server.keys) == calls >= trajectories.count()
    answer = api(client, "get", f"/api/t/acme/runs/{rl.pk}/tools", token)
    assert answer.status_code == 200
    [stats] = [s for s in answer.json() if s["tool"] == TOOL]
    assert stats["total"]["calls"] == calls and stats["total"]["error_rate"] == 0.0
