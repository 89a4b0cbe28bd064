"""The `studio` command line against a live server, a real Celery worker and the tiny model: log in,
upload a dataset with a progress bar, create an experiment from a preset, a task and the dataset,
launch it, watch it to its end, then import a verl dump (docs/cli.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tasks_lib.registry import TASKS, PrepareOptions, load_recipes
from trainer.studio.cli import BARS, main, sparkline
from webapp.accounts.models import ApiToken
from webapp.datasets.models import Dataset
from webapp.experiments.models import Run, RunStatus, Sweep, TeamRunLimit
from webapp.ingestion.models import Trajectory

pytestmark = pytest.mark.slow

# The tiny run of test_launching.tiny_config, as `--set` options.
TINY = {
    "executor": "local", "model.path": "tiny-test", "data.val_path": None, "data.max_prompt_length": 1024,
    "rollout.n": 2, "rollout.max_new_tokens": 8, "rollout.max_steps": 2, "rollout.tools": ["calculator"],
    "trainer.total_steps": 2, "trainer.batch_size": 2, "optim.mini_batch_size": 4, "trainer.save_every": 0,
    "trainer.num_threads": 1, "resources.cpus": 1,
}  # fmt: skip


def test_sparkline_scales_values_between_their_extremes() -> None:
    assert sparkline([0.0, 0.5, 1.0]) == BARS[0] + BARS[3] + BARS[-1]
    assert sparkline([2.0, 2.0]) == BARS[0] * 2 and sparkline([]) == ""


def test_the_cli_uploads_creates_launches_and_watches_a_run_to_its_end(
    personas: Any, launch_env: Any, start_worker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start_worker()
    load_recipes()
    train = TASKS.get("arithmetic").prepare(None, tmp_path / "arith", PrepareOptions())["train"]
    monkeypatch.setenv("STUDIO_CONFIG", str(tmp_path / "studio.json"))
    for name in ("STUDIO_URL", "STUDIO_TOKEN", "STUDIO_TEAM"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    token = ApiToken.issue(personas["alice"], "cli")[1]

    def studio(*args: str, code: int = 0) -> Any:
        result = runner.invoke(main, list(args), catch_exceptions=False)
        assert result.exit_code == code, (args, result.output, result.stderr)
        return result

    studio("login", "--url", launch_env.url, "--team", "acme", "--token", token)
    assert json.loads((tmp_path / "studio.json").read_text())["team"] == "acme"
    assert (tmp_path / "studio.json").stat().st_mode & 0o077 == 0

    uploaded = studio("datasets", "upload", str(train), "--name", "arith train")
    assert "uploading" in uploaded.stderr and "100%" in uploaded.stderr
    dataset = Dataset.objects.get(name="arith train")
    assert f"dataset {dataset.pk} 'arith train': valid" in uploaded.stdout
    # Restartable: the same file again is found by its hash, not sent.
    again = studio("--json", "datasets", "upload", str(train))
    assert json.loads(again.stdout)["id"] == dataset.pk and "uploading" not in again.stderr

    sets = [arg for path, value in TINY.items() for arg in ("--set", f"{path}={json.dumps(value)}")]
    created = studio("--json", "experiments", "create", "--preset", "grpo", "--task", "arithmetic",
                     "--dataset", str(dataset.pk), "--seed", "1", *sets)  # fmt: skip
    experiment = json.loads(created.stdout)
    assert experiment["config"]["model"]["path"] == "tiny-test"
    (run,) = json.loads(studio("--json", "experiments", "launch", str(experiment["id"])).stdout)

    watched = studio("runs", "watch", str(run["id"]), "--every", "0.3")
    finished = Run.objects.get(pk=run["id"])
    assert finished.status == RunStatus.SUCCEEDED, finished.message
    last = watched.stdout.strip().splitlines()[-1]
    assert last.startswith(f"run {run['id']} succeeded") and "step 2/2" in last
    assert any(bar in last for bar in BARS)  # the reward, drawn
    listed = json.loads(studio("--json", "runs", "list").stdout)
    assert [r["id"] for r in listed["items"]] == [run["id"]]
    assert Trajectory.objects.filter(run=finished).count() == 8

    dump = tmp_path / "dump" / "1.jsonl"
    dump.parent.mkdir()
    dump.write_text(json.dumps({"input": "2+2?", "output": "4", "gts": "4", "score": 1.0, "step": 1}) + "\n")
    imported = json.loads(studio("--json", "import", str(dump.parent), "--name", "outside").stdout)
    assert imported["format"] == "verl" and Run.objects.get(pk=imported["run"]["id"]).is_external
    # An external run lists the steps it stored, no total.
    (line,) = [row for row in studio("runs", "list").stdout.splitlines() if row.endswith("outside")]
    assert line.split()[2] == "1"

    # A sweep from a YAML grid plus options, over the launched experiment's config. The team's limit
    # of 0 active runs keeps its runs waiting in line, so nothing trains.
    TeamRunLimit.set(personas["acme"], 0)
    grid = tmp_path / "grid.yaml"
    grid.write_text("name: lr sweep\nparams:\n  - path: optim.lr\n    values: [1.0e-5, 3.0e-5]\n")
    made = json.loads(studio("--json", "sweep", "create", str(grid), "--from-experiment", str(experiment["id"]),
                             "--param", "algorithm.kl_coef=0,0.1", "--seed", "3").stdout)  # fmt: skip
    sweep = Sweep.objects.get(pk=made["id"])
    cells = [e.config for e in sweep.cells.order_by("pk")]
    assert [(c["optim"]["lr"], c["algorithm"]["kl_coef"]) for c in cells] == [
        (1e-5, 0), (1e-5, 0.1), (3e-5, 0), (3e-5, 0.1)
    ]  # fmt: skip
    assert {c["model"]["path"] for c in cells} == {"tiny-test"} and set(
        sweep.runs().values_list("seed", flat=True)
    ) == {3}
    assert str(made["id"]) in studio("sweep", "list").stdout
    shown = studio("sweep", "show", str(made["id"])).stdout
    assert "kl_coef=0.1" in shown and shown.count("seed 3: queued") == 4 and "in line)" in shown
    cancelled = studio("sweep", "cancel", str(made["id"])).stdout
    assert cancelled.count("seed 3: cancelled") == 4
    assert set(sweep.runs().values_list("status", flat=True)) == {RunStatus.CANCELLED}
    taken = studio(
        "sweep", "create", "--name", "lr sweep", "--from-experiment", str(experiment["id"]), code=1
    )
    assert "error:" in taken.stderr  # the name is taken: the server's refusal, printed
    refused = studio("runs", "cancel", "999999", code=1)
    assert "not found" in refused.stderr
