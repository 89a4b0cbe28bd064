"""Export a checkpoint as a Hugging Face folder, as a job (docs/checkpoints.md#export).

The request queues the job; a worker writes the folder under STUDIO_EXPORT_DIR (the admin's setting)
with the model card built here from the run's config, data and scores; the folder is then served as
a zip stream. Only a folder under STUDIO_EXPORT_DIR is ever served, whatever a job's result says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings

from trainer.config import RunConfig
from trainer.contract import POLICY_FOLDER
from webapp.datasets.models import Dataset
from webapp.experiments.jobs import Job, JobKind, JobRefused
from webapp.experiments.models import Run
from webapp.experiments.run_files import checkpoint_folder

EXPORT_JOB = "export"
EXPORT_TASK = "webapp.results.tasks.export_task"
EXPORTS_PER_MEMBER = 2
EXPORT = JobKind(EXPORT_JOB, EXPORT_TASK, most=EXPORTS_PER_MEMBER)


def start(run: Run, step: int, user: Any, *, merge_lora: bool) -> Job:
    """The export's job, queued: JobRefused when the checkpoint's files are gone, TooManyJobs past
    the member's limit."""
    checkpoint = run.checkpoints.filter(step=step, deleted=False).first()
    if checkpoint is None or checkpoint_folder(checkpoint) is None:
        raise JobRefused(f"run {run.pk} has no checkpoint of step {step} on disk")
    options = {"step": step, "merge_lora": merge_lora}
    job = Job.start(EXPORT, run.team, user=user, run=run, options=options)
    job.enqueue()
    return job


def export_folder(job: Job) -> Path | None:
    """The finished export's folder, when it is still there and under STUDIO_EXPORT_DIR."""
    path = job.result.get("path")
    if job.kind != EXPORT_JOB or not path:
        return None
    folder = Path(path).resolve()
    root = Path(settings.EXPORT_DIR).resolve()
    return folder if folder.is_dir() and folder.is_relative_to(root) else None


def work(job: Job) -> dict[str, Any]:
    """The job's work: write the folder, then say where it is and what it holds."""
    from trainer.export import export_checkpoint
    from trainer.models import resolve_model_path

    run, step, merge = job.run, int(job.options["step"]), bool(job.options.get("merge_lora"))
    if run is None:
        raise JobRefused("the run is gone")
    checkpoint = run.checkpoints.filter(step=step, deleted=False).first()
    folder = checkpoint_folder(checkpoint) if checkpoint is not None else None
    if checkpoint is None or folder is None or not (folder / POLICY_FOLDER).is_dir():
        raise JobRefused(f"the checkpoint of step {step} has no files left")
    config = RunConfig.model_validate(run.config)
    target = (
        Path(settings.EXPORT_DIR) / run.team.slug / f"run-{run.pk}-step-{step}{'-merged' if merge else ''}"
    )
    job.progress("writing the Hugging Face folder")
    export_checkpoint(
        folder / POLICY_FOLDER,
        resolve_model_path(config.model.path),
        target,
        merge_lora=merge,
        card=card(run, step, config, checkpoint.metrics, merged=merge),
    )
    files = sorted(p for p in target.rglob("*") if p.is_file())
    return {
        "path": str(target),
        "files": [p.relative_to(target).as_posix() for p in files],
        "bytes": sum(p.stat().st_size for p in files),
        "step": step,
        "merged": merge,
    }


def card(run: Run, step: int, config: RunConfig, metrics: dict[str, Any], *, merged: bool) -> str:
    """The README.md model card: the run's config, the datasets by name, the checkpoint's scores and
    the run's last metrics."""
    from trainer.export import model_card

    datasets = {}
    for split, reference in (("train", config.data.train_path), ("validation", config.data.val_path)):
        dataset = Dataset.resolve(run.team, reference)
        datasets[split] = dataset.name if dataset is not None else str(reference or "")
    latest = run.latest_metrics.select_related("key")
    scores = {**{m.key.name: m.value for m in latest}, **metrics}
    return model_card(
        title=f"{run.experiment.name} · run {run.pk} · step {step}",
        base_model=config.model.path,
        config=config.model_dump(mode="json"),
        datasets=datasets,
        scores=scores,
        merged=merged,
    )
