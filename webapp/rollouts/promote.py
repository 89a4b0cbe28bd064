"""Rollouts promoted to a dataset (docs/annotations.md#save-as-dataset): the prompts of chosen
trajectories, with their ground truth or a reviewer's corrected answer, as a new parquet of the data
contract, derived from the run's training dataset and linked back to the rollouts."""

from __future__ import annotations

import copy
import tempfile
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from webapp.datasets import files
from webapp.datasets.models import Dataset
from webapp.experiments.models import Run
from webapp.ingestion.models import Trajectory
from webapp.rollouts.models import Annotation, PromotedRollout
from webapp.rollouts.questions import user_question
from webapp.rollouts.viewer import first_prompts

PROMOTE_MAX = 10_000


class PromoteRefused(ValueError):
    """Nothing to save, or too much; the message says why."""


def source_dataset(run: Run) -> Dataset | None:
    """The dataset the run trained on, when the team still has it."""
    reference = (run.config or {}).get("data", {}).get("train_path")
    return Dataset.resolve(run.team, reference) if isinstance(reference, str) else None


def corrections(trajectory_ids: Sequence[int]) -> dict[int, tuple[datetime, str]]:
    """{trajectory: (when, the newest corrected answer a reviewer gave it or one of its steps)}."""
    rows = (
        Annotation.objects.filter(trajectory_id__in=list(trajectory_ids))
        .exclude(corrected_answer="")
        .order_by("updated", "pk")
        .values_list("trajectory_id", "updated", "corrected_answer")
    )
    return {pk: (when, answer) for pk, when, answer in rows}  # later rows win: the newest answer


def newest_correction(
    trajectories: Sequence[Trajectory], answers: dict[int, tuple[datetime, str]]
) -> str | None:
    """The newest answer given to any rollout of one prompt (docs/annotations.md#save-as-dataset), not
    the first rollout's: two reviewers of two rollouts of the prompt, the later one wins."""
    given = [answers[t.pk] for t in trajectories if t.pk in answers]
    return max(given, key=lambda when_answer: when_answer[0])[1] if given else None


def corrected_truth(original: Any, answer: str) -> Any:
    """The reviewer's answer in the shape of the original ground truth: a list stays a list."""
    return [answer] if isinstance(original, list) else answer


def _source_rows(source: Dataset, indexes: set[int]) -> dict[int, dict[str, Any]]:
    rows: dict[int, dict[str, Any]] = {}
    for batch in pq.ParquetFile(source.path).iter_batches():
        for row in batch.to_pylist():
            index = (row.get("extra_info") or {}).get("index")
            if index in indexes:
                rows[index] = row
    return rows


def _row_from_rollout(trajectory: Trajectory, prompt: str) -> dict[str, Any]:
    """A contract row rebuilt from the rollout itself when the run's dataset is gone: the question the
    model was asked as the one user message."""
    return {
        "data_source": trajectory.data_source,
        "prompt": [{"role": "user", "content": user_question(prompt)}],
        "reward_model": {"style": "rule", "ground_truth": trajectory.ground_truth},
        "extra_info": {"index": trajectory.sample_index, "split": "train"},
    }


def promoted_rows(
    run: Run, trajectory_ids: Sequence[int], *, corrected_only: bool
) -> tuple[list[dict[str, Any]], list[tuple[int, bool]]]:
    """The rows (one per dataset row of the chosen trajectories) and (trajectory, corrected) links."""
    chosen = list(
        Trajectory.objects.filter(run=run, pk__in=list(trajectory_ids))
        .defer("info", "metrics")
        .order_by("sample_index", "-training_step", "id")
    )
    answers = corrections([t.pk for t in chosen])
    by_row: dict[int, list[Trajectory]] = {}
    for trajectory in chosen:
        by_row.setdefault(trajectory.sample_index, []).append(trajectory)
    if corrected_only:
        by_row = {i: ts for i, ts in by_row.items() if any(t.pk in answers for t in ts)}
    source = source_dataset(run)
    originals = _source_rows(source, set(by_row)) if source else {}
    prompts = first_prompts(run, [i for i in by_row if i not in originals])
    rows, links = [], []
    for index, trajectories in by_row.items():
        row = copy.deepcopy(originals.get(index)) or _row_from_rollout(
            trajectories[0], prompts.get(index, "")
        )
        answer = newest_correction(trajectories, answers)
        if answer is not None:
            truth = row["reward_model"].get("ground_truth")
            row["reward_model"] = {**row["reward_model"], "ground_truth": corrected_truth(truth, answer)}
        rows.append(row)
        links += [(t.pk, answer is not None) for t in trajectories]
    return rows, links


def promote(
    run: Run, trajectory_ids: Sequence[int], *, name: str, user: Any, corrected_only: bool = False
) -> Dataset:
    """Save the chosen trajectories' prompts as a dataset of the run's team, validated at once."""
    if len(trajectory_ids) > PROMOTE_MAX:
        raise PromoteRefused(f"at most {PROMOTE_MAX} trajectories are saved at once")
    rows, links = promoted_rows(run, trajectory_ids, corrected_only=corrected_only)
    if not rows:
        raise PromoteRefused("no trajectory to save" + (" has a corrected answer" if corrected_only else ""))
    source = source_dataset(run)
    with tempfile.TemporaryDirectory(dir=files.incoming_dir()) as out:
        path = Path(out) / "promoted.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        dataset, _ = Dataset.from_file(
            run.team,
            path,
            sha256=files.sha256_of(path),
            name=name.strip() or f"{run} — {len(rows)} promoted prompts",
            source=f"promoted from {len(links)} rollouts of run {run.pk} ({run})",
            user=user,
            validate_later=False,
        )
    if source is not None:
        Dataset.objects.filter(pk=dataset.pk, derived_from__isnull=True).update(
            derived_from=source, reward_map=source.reward_map
        )
        dataset.refresh_from_db()
    dataset.validate()
    PromotedRollout.objects.bulk_create(
        [PromotedRollout(dataset=dataset, run=run, trajectory_id=pk, corrected=c) for pk, c in links],
        ignore_conflicts=True,
    )
    dataset.refresh_from_db()
    return dataset
