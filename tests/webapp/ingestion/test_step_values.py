"""What ingestion keeps beside the rows so the study pages need not read them all: each training
step's values of the histograms' measures (docs/rollouts.md#histograms) and each metric key's total
(the compare page's generated tokens, docs/runs-and-curves.md#compare-runs). Each is checked against
a direct computation over the stored trajectories and points: after batches into one step, replayed
ids, a resume that supersedes steps, a retention sweep, and the backfill."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.db import transaction

from tests.webapp.trainer_posts import trajectory
from trainer.contract import PERF_GENERATED_TOKENS, REWARD_MEAN, TrajectoryBatch
from webapp.experiments.models import Run
from webapp.ingestion import metrics_store, step_values, storage, tasks, trajectories
from webapp.ingestion.measures import MEASURES
from webapp.ingestion.models import MetricLatest, MetricPoint, StepValues, Trajectory, TrajectoryStep
from webapp.ingestion.supersede import supersede_after
from webapp.results import run_compare
from webapp.retention.models import RetentionKind
from webapp.retention.policy import Retention

Values = dict[tuple[str, int], Counter[float]]  # (measure, training step) → {value: trajectories}


def _wire(step: int, k: int, reward: float) -> dict[str, Any]:
    """Trajectory k of a step: one or two turns, with or without a tool call and an advantage."""
    wire = trajectory(f"s{step}-p{k // 4}-s{k}", f"s{step}-p{k // 4}", reward)
    for turn in wire["steps"]:
        turn["num_response_tokens"] = 7 * k % 30
    if k % 3 == 0:
        wire["steps"] = [{**wire["steps"][1], "index": 0}]  # one turn, no tool call
    if k % 4 == 1:
        wire["steps"][0]["advantage"] = None  # left out of the advantage's histogram
    return wire


def _store(run: Run, step: int, rewards: list[float], batch_id: str, first: int = 0) -> None:
    wires = [_wire(step, first + k, reward) for k, reward in enumerate(rewards)]
    batch = TrajectoryBatch.model_validate({"training_step": step, "trajectories": wires})
    trajectories.store_batch(run, batch, batch_id)


def _direct(run: Run) -> Values:
    """Every measure's finite values per step, from the trajectories and their first steps."""
    advantages = dict(
        TrajectoryStep.objects.filter(run_id=run.pk, index=0).values_list("trajectory_id", "advantage")
    )
    value_of: dict[str, Callable[[Trajectory], float | None]] = {
        "reward": lambda t: t.total_reward,
        "advantage": lambda t: advantages.get(t.pk),
        "length": lambda t: t.response_tokens,
        "turns": lambda t: t.num_steps,
        "tool_calls": lambda t: t.num_tool_calls,
    }
    assert set(value_of) == set(MEASURES)
    found: Values = {}
    for row in Trajectory.objects.filter(run=run):
        for name, value in ((name, get(row)) for name, get in value_of.items()):
            if value is not None and math.isfinite(value):
                found.setdefault((name, row.training_step), Counter())[float(value)] += 1
    return found


def _kept(run: Run) -> Values:
    found: Values = {}
    for row in StepValues.objects.filter(run=run):
        assert row.values == sorted(set(row.values)) and len(row.counts) == len(row.values)
        found[(row.measure, row.training_step)] = Counter(dict(zip(row.values, row.counts, strict=True)))
    return found


def _steps(values: Values) -> set[int]:
    return {step for _measure, step in values}


@pytest.mark.django_db(transaction=True)  # the retention sweep VACUUMs, outside a transaction
def test_each_steps_values_match_its_trajectories_through_batches_a_resume_and_a_retention_sweep(
    run: Run,
) -> None:
    _store(run, 0, [0.0, 1.0, 1.0, 0.5, math.nan, 0.25], "b0")
    _store(run, 1, [1.0, 0.0, 0.0, 1.0, 0.75], "b1")
    _store(run, 1, [0.0, 0.3, 1.0, 1.0], "b2", first=5)  # a second batch into step 1
    _store(run, 1, [0.9, 0.9], "b3", first=5)  # ids stored already: skipped
    _store(run, 2, [1.0, 1.0, 0.0], "b4")
    direct = _direct(run)
    assert _kept(run) == direct and _steps(direct) == {0, 1, 2}
    assert direct[("reward", 1)] == Counter({1.0: 4, 0.0: 3, 0.75: 1, 0.3: 1})
    assert sum(direct[("reward", 0)].values()) == 5  # the NaN reward left out

    with transaction.atomic():  # as the resume's transaction calls it
        supersede_after(run.pk, 0)
    assert _kept(run) == _direct(run) and _steps(_kept(run)) == {0}
    _store(run, 1, [0.0, 0.0, 1.0], "b5", first=20)  # the new attempt's step 1
    assert _kept(run) == _direct(run) and _kept(run)[("reward", 1)] == Counter({0.0: 2, 1.0: 1})

    before = _kept(run)
    tasks.change_retention(run, Retention(RetentionKind.FAILURES, keep_successes=1))
    storage.apply_retention(run.pk)
    assert _kept(run) == _direct(run) != before


def test_the_backfill_computes_what_ingestion_keeps(run: Run) -> None:
    _store(run, 3, [0.0, 1.0, 0.5, 0.5, -2.5], "b0")
    _store(run, 4, [1.0, math.inf, 0.0], "b1")
    kept = _kept(run)
    assert kept == _direct(run) and _steps(kept) == {3, 4}
    StepValues.objects.all().delete()
    step_values.rebuild()  # every run's, as the migration fills them
    assert _kept(run) == kept
    step_values.rebuild(run.pk)
    assert _kept(run) == kept


def _points(key: str, values: dict[int, float]) -> list[dict[str, Any]]:
    return [{"key": key, "step": step, "value": value, "ts": 1.7e9 + step} for step, value in values.items()]


def _direct_total(run: Run) -> float:
    values = MetricPoint.objects.filter(run=run, key__name=PERF_GENERATED_TOKENS).values_list(
        "value", flat=True
    )
    return math.fsum(v for v in values if v < math.inf)


def test_a_keys_total_sums_its_stored_points_and_the_compare_reads_it(run: Run) -> None:
    other = Run.objects.create(experiment=run.experiment, team=run.team, seed=2)
    tokens = PERF_GENERATED_TOKENS
    metrics_store.write_points(run.pk, "m1", _points(tokens, {0: 100, 1: 200, 2: math.nan, 3: math.inf}))
    metrics_store.write_points(run.pk, "m2", _points(tokens, {9: 50, 8: 25}) + _points(REWARD_MEAN, {9: 1}))
    metrics_store.write_points(run.pk, "m3", _points(tokens, {5: 400, 1: 999}))  # step 1 is stored already
    metrics_store.write_points(run.pk, "m3", _points(tokens, {6: 7}))  # a replayed batch id: nothing
    metrics_store.write_points(other.pk, "m1", _points(tokens, {0: math.nan}))
    latest = MetricLatest.objects.get(run=run, key__name=tokens)
    assert latest.total == _direct_total(run) == 775 and (latest.step, latest.value) == (9, 50)
    assert MetricLatest.objects.get(run=run, key__name=REWARD_MEAN).total is None  # no count: no total
    compared = run_compare.compare([run, other])
    assert [column.tokens for column in compared.columns] == [775, None]  # no number: none shown

    with transaction.atomic():
        supersede_after(run.pk, 4)
    assert MetricLatest.objects.get(run=run, key__name=tokens).total == _direct_total(run) == 300
    assert run_compare.compare([run, other]).columns[0].tokens == 300
