"""Generate demonstrations of a dataset as a job (docs/demonstrations.md, docs/api.md#jobs).

The request checks the tool map and queues the job; a Celery worker reads the dataset's rows, runs
each row's tool calls from its recipe's rule against the real tools — the team's among them, in the
scope a run's trainer uses (trainer.team.run_scope) — and adopts the verified conversations as a
new dataset derived from the source. The result says how many rows were kept and dropped, and why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks_lib import demonstrations
from trainer.team import UnavailableTool, run_scope
from webapp.datasets.demonstrations import adopt, check_tool_map, source_rows
from webapp.datasets.models import Dataset
from webapp.experiments.jobs import Job, JobKind, JobRefused
from webapp.tools.models import ToolUnavailable, specs_for_run

DEMONSTRATIONS_JOB = "demonstrations"
DEMONSTRATIONS_TASK = "webapp.experiments.tasks.demonstrations_task"
JOBS_PER_MEMBER = 2
DEMONSTRATIONS = JobKind(DEMONSTRATIONS_JOB, DEMONSTRATIONS_TASK, most=JOBS_PER_MEMBER)
PHASE = "running the tool calls"


def start(dataset: Dataset, user: Any, tool_map: Mapping[str, str]) -> Job:
    """The generation's job, queued. DemonstrationsRefused for a bad map, TooManyJobs past the
    member's limit."""
    chosen = check_tool_map(dataset, tool_map)
    options = {"dataset": dataset.pk, "dataset_name": dataset.name, "tool_map": chosen}
    job = Job.start(DEMONSTRATIONS, dataset.team, user=user, options=options)
    job.enqueue()
    return job


def run(job: Job) -> dict[str, Any]:
    """The job's work: generate, adopt the kept conversations as a dataset, count what was dropped."""
    source = Dataset.objects.filter(pk=job.options["dataset"], team=job.team).first()
    if source is None or not source.is_usable:
        raise JobRefused("the source dataset is gone or no longer usable")
    tool_map = dict(job.options.get("tool_map") or {})
    rows = source_rows(source)
    job.progress(PHASE, 0, len(rows))

    def progress(done: int, total: int) -> None:
        if done == total or done % 10 == 0:  # one UPDATE per ten rows is enough for the page's bar
            job.progress(PHASE, done, total)

    try:
        with run_scope(specs_for_run(job.team, list(tool_map.values()), [])):
            outcome = demonstrations.generate(rows, tool_map=tool_map, progress=progress)
    except (ToolUnavailable, UnavailableTool) as error:
        raise JobRefused(str(error)) from None
    summary = outcome.summary()
    if outcome.conversations:
        summary["dataset"] = adopt(source, outcome, job.user).pk
    return summary
