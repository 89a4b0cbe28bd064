"""A resumable experiment from the form (docs/resume.md#making-a-run-resumable): trainer.resume and
trainer.save_every are accepted without a checkpoint folder, which each run gets at launch."""

from __future__ import annotations

from typing import Any

from tests.webapp.experiments.test_experiment_form import client_for, form_data
from trainer.config import RunConfig
from webapp.experiments.models import Experiment
from webapp.experiments.run_files import checkpoint_dir


def test_the_form_makes_a_resumable_experiment_whose_runs_checkpoint_in_their_own_folder(
    personas: Any, arithmetic: Any
) -> None:
    asked = form_data(arithmetic, name="resumable", **{"trainer.save_every": "2", "trainer.resume": "on"})
    answer = client_for("alice").post(f"/t/{personas['acme'].slug}/experiments/new/", asked)
    assert answer.status_code == 302, answer.content.decode()[-2000:]
    runs = Experiment.objects.get(name="resumable").launch().runs
    for run in runs:
        trainer = RunConfig.model_validate(run.config).trainer
        assert (trainer.resume, trainer.save_every, trainer.checkpoint_dir) == (True, 2, checkpoint_dir(run))
