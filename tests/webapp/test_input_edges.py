"""Edges of input the hostile-input test does not reach: a prompt that is not UTF-8, JSON bodies past Django's form limit, a model folder that is a
symlink out of STUDIO_MODELS_DIR, and the test ports two xdist workers are handed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.conf import settings as django_settings
from django.test import Client

from tasks_lib import validate
from tests.tasks_lib.test_validate import good_row, only
from tests.xdist_workers import PORT_SLICE, free_port
from trainer.config import RunConfig
from webapp.accounts.models import ApiToken
from webapp.experiments.acceptance import Refused, confined, model_folder


def _with_prompt(tmp_path: Path, prompt: pa.Array) -> Path:
    table = pa.Table.from_pylist([good_row(0), good_row(1)])
    table = table.set_column(table.schema.get_field_index("prompt"), "prompt", prompt)
    path = tmp_path / "prompts.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("kind", ["binary", "string"])
def test_a_prompt_that_is_not_utf8_gets_a_message_saying_so(tmp_path: Path, kind: str) -> None:
    raw = pa.array([b"What is 2 + 3?", b"What is \xff + 3?"], pa.binary())
    prompt = raw if kind == "binary" else raw.view(pa.string())  # a foreign writer's unchecked text
    # Row 0's prompt is plain text, "a string" rightly; row 1's bytes are not text at all.
    problem = only([p for p in validate(_with_prompt(tmp_path, prompt)) if p.row == 1])
    assert (problem.row, problem.column) == (1, "prompt")
    assert "not valid UTF-8" in str(problem) and "is a string" not in str(problem)


def test_a_json_body_past_djangos_form_limit_is_read_and_answered_in_the_api_shape(
    client: Client, personas: Any
) -> None:
    token = ApiToken.issue(personas["bob"], "tests")[1]
    config = json.loads(RunConfig.from_preset("grpo", name="big", task="gsm8k").to_json())
    body = json.dumps({"config": config, "seeds": [1], "description": "d" * 3_000_000})
    assert len(body) > django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    answer = client.post(
        "/api/t/acme/experiments", body, content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    assert answer["Content-Type"].startswith("application/json"), answer.content[:200]
    assert answer.status_code in (400, 422) and "description" in json.dumps(answer.json()), answer.json()


def test_a_body_past_the_apis_own_limit_is_a_413_that_says_the_limit(client: Client, personas: Any) -> None:
    from webapp.ingestion.middleware import MAX_COMPRESSED_BYTES

    token = ApiToken.issue(personas["bob"], "tests")[1]
    answer = client.post(
        "/api/t/acme/experiments", b"{}", content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}", CONTENT_LENGTH=str(MAX_COMPRESSED_BYTES + 1),
    )  # fmt: skip
    assert answer.status_code == 413
    assert answer.json()["code"] == "too_large" and str(MAX_COMPRESSED_BYTES) in answer.json()["error"]


def test_a_symlink_in_the_models_folder_that_points_outside_it_is_refused(
    tmp_path: Path, settings: Any
) -> None:
    models, outside = tmp_path / "models", tmp_path / "outside"
    (models / "smol").mkdir(parents=True)
    outside.mkdir()
    (models / "escape").symlink_to(outside, target_is_directory=True)
    (models / "alias").symlink_to(models / "smol", target_is_directory=True)
    settings.MODELS_DIR = models
    assert model_folder("escape") is None and model_folder(str(models / "escape")) is None
    assert model_folder("alias") == model_folder("smol") == os.path.realpath(models / "smol")
    config = RunConfig.from_preset("grpo", name="symlink", task="gsm8k").with_overrides(
        **{"model.path": "escape"}
    )
    with pytest.raises(Refused) as refused:
        confined(config)
    assert refused.value.problems[0][0] == "model.path"


def test_two_xdist_workers_are_never_handed_the_same_port(monkeypatch: pytest.MonkeyPatch) -> None:
    import tests.xdist_workers as ports

    handed: dict[str, set[int]] = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setattr(ports, "_next_port", [])
        handed[worker] = {free_port() for _ in range(20)}
    assert len(handed["gw0"]) == len(handed["gw1"]) == 20 and not handed["gw0"] & handed["gw1"]
    low, high = min(handed["gw0"] | handed["gw1"]), max(handed["gw0"] | handed["gw1"])
    assert high - low < 3 * PORT_SLICE and high < 32_768  # below the kernel's ephemeral range
