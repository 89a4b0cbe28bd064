"""Exporting a checkpoint as a Hugging Face folder (docs/checkpoints.md#export): over REST, as a
job the worker's task does, downloaded as a zip, and reloaded with transformers to the same logits.
The checkpoints' policies are tiny random models with SmolLM2's tokenizer."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from django.test import Client

from tests.webapp.playground.conftest import gsm8k_experiment, saved_checkpoint, tiny_policy, trained_run
from webapp.accounts.models import ApiToken
from webapp.experiments.models import Run
from webapp.results.tasks import export_task

pytestmark = pytest.mark.django_db
__all__ = ["gsm8k_experiment", "tiny_policy", "trained_run"]  # the shared fixtures, used by name
IDS = torch.tensor([[1, 17, 254, 3000, 42, 9]])


@pytest.fixture
def api(personas: dict[str, Any], settings: Any, tmp_path: Path) -> Client:
    settings.EXPORT_DIR = tmp_path / "exports"
    _row, plain = ApiToken.issue(personas["alice"], "t")
    return Client(HTTP_AUTHORIZATION=f"Bearer {plain}")


def logits(folder: Path | Any) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = folder if not isinstance(folder, Path) else AutoModelForCausalLM.from_pretrained(folder)
    with torch.no_grad():
        return model.eval()(IDS).logits


def export(
    api: Client, run: Run, step: int, tmp_path: Path, merge_lora: bool = False
) -> tuple[dict[str, Any], Path]:
    """Start the export, run its task, download the zip; (the job, the unzipped folder)."""
    started = api.post(
        f"/api/t/acme/runs/{run.pk}/checkpoints/{step}/export",
        {"merge_lora": merge_lora},
        content_type="application/json",
    )
    assert started.status_code == 202, started.content
    job_id = started.json()["id"]
    assert api.get(f"/api/t/acme/exports/{job_id}/download").status_code == 409  # not written yet
    export_task(job_id)
    job = api.get(f"/api/t/acme/exports/{job_id}").json()
    assert job["status"] == "done", job["message"]
    download = api.get(f"/api/t/acme/exports/{job_id}/download")
    assert download.status_code == 200 and download["Content-Type"] == "application/zip"
    unzipped = tmp_path / f"unzipped-{job_id}"
    zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content))).extractall(unzipped)
    (folder,) = unzipped.iterdir()
    return job, folder


def test_an_export_reloads_with_transformers_to_the_same_logits(
    api: Client, trained_run: Run, tiny_policy: Path, tmp_path: Path, settings: Any
) -> None:
    job, folder = export(api, trained_run, 2, tmp_path)
    assert Path(job["result"]["path"]).is_relative_to(settings.EXPORT_DIR)
    names = {p.name for p in folder.iterdir()}
    assert {
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "README.md",
    } <= names
    assert not {"pytorch_model.bin", "optimizer.pt"} & names
    assert torch.equal(logits(folder), logits(tiny_policy))
    card = (folder / "README.md").read_text()
    assert "gsm8k play · run" in card and "step 2" in card
    assert '"tools": [\n      "calculator"' in card  # the run's config
    assert "smollm2-135m-instruct" in card


def test_a_lora_checkpoint_exports_merged_on_request_or_as_its_adapter(
    api: Client, trained_run: Run, tiny_policy: Path, tmp_path: Path
) -> None:
    from trainer.models import load_policy, with_lora

    adapted = with_lora(load_policy(tiny_policy), rank=4, alpha=8)
    torch.manual_seed(0)
    for name, weight in adapted.named_parameters():
        if "lora_B" in name:  # B starts at zero: give the adapter something to merge
            weight.data.normal_(std=0.05)
    adapter = tmp_path / "adapter"
    adapted.save_pretrained(adapter)
    saved_checkpoint(trained_run, 3, adapter)
    expected = logits(load_policy(trained_run.checkpoints.get(step=3).path + "/policy"))
    _job, merged = export(api, trained_run, 3, tmp_path, merge_lora=True)
    assert "adapter_config.json" not in {p.name for p in merged.iterdir()}
    assert torch.allclose(logits(merged), expected, atol=1e-5)
    assert not torch.allclose(logits(merged), logits(tiny_policy), atol=1e-3)  # the adapter is in it
    _job, kept = export(api, trained_run, 3, tmp_path, merge_lora=False)
    assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "README.md"} <= {
        p.name for p in kept.iterdir()
    }


def test_an_export_of_a_checkpoint_without_files_or_of_another_team_is_refused(
    api: Client, trained_run: Run, personas: dict[str, Any]
) -> None:
    trained_run.checkpoints.filter(step=1).update(deleted=True)
    gone = api.post(
        f"/api/t/acme/runs/{trained_run.pk}/checkpoints/1/export", {}, content_type="application/json"
    )
    assert gone.status_code == 409 and "no checkpoint of step 1 on disk" in gone.json()["error"]
    _row, plain = ApiToken.issue(personas["charlie"], "t")
    outsider = Client(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert (
        outsider.post(
            f"/api/t/acme/runs/{trained_run.pk}/checkpoints/2/export", {}, content_type="application/json"
        ).status_code
        == 404
    )


@pytest.mark.django_db(transaction=True)
def test_studio_checkpoints_export_writes_the_folder_and_downloads_it(
    personas: dict[str, Any],
    trained_run: Run,
    live_server: Any,
    settings: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from trainer.studio.cli import main
    from webapp.celery import app

    settings.EXPORT_DIR = tmp_path / "exports"
    monkeypatch.setenv("STUDIO_CONFIG", str(tmp_path / "studio.json"))
    monkeypatch.setenv("STUDIO_URL", live_server.url)
    monkeypatch.setenv("STUDIO_TOKEN", ApiToken.issue(personas["alice"], "cli")[1])
    monkeypatch.setenv("STUDIO_TEAM", "acme")
    app.conf.task_always_eager = True  # the export's task runs in the server's thread, no worker
    try:
        result = CliRunner().invoke(
            main, ["checkpoints", "export", str(trained_run.pk), "2", "--download", str(tmp_path / "x.zip")]
        )
    finally:
        app.conf.task_always_eager = False
    assert result.exit_code == 0, result.output
    assert f"run {trained_run.pk} step 2 exported to {settings.EXPORT_DIR}" in result.output
    assert "model.safetensors" in {Path(n).name for n in zipfile.ZipFile(tmp_path / "x.zip").namelist()}


def test_a_failed_exports_page_says_why(client: Client, personas: dict[str, Any]) -> None:
    from webapp.experiments.jobs import Job, JobStatus
    from webapp.results.model_export import EXPORT_JOB, EXPORT_TASK

    failed = {"status": JobStatus.FAILED, "message": "the disk is full <b>"}
    job = Job.objects.create(
        kind=EXPORT_JOB, task=EXPORT_TASK, team=personas["acme"], user=personas["alice"], **failed
    )
    client.force_login(personas["alice"])
    page = client.get(f"/t/acme/exports/{job.pk}/").content.decode()
    assert 'id="export-failed"' in page and "the disk is full &lt;b&gt;" in page
