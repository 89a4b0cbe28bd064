"""Histograms over steps (docs/rollouts.md#histograms): the SQL bins against a count in Python, the
heat-map, each bin's link listing exactly its trajectories, and team isolation."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client

from webapp.ingestion import step_values
from webapp.ingestion.measures import MEASURES
from webapp.ingestion.models import TextBlob, Trajectory, TrajectoryStep
from webapp.rollouts import histograms
from webapp.rollouts.viewer import RolloutFilter

STEPS, PER_STEP = 4, 37
# Values on the bins' edges and either side of them: where a computed edge would disagree with a count.
EDGY_REWARDS = [0.0, 0.05, 0.1, 0.15, 0.3, 0.5, 0.7, 1.0, 1.0 - 1e-12]


@pytest.fixture
def seeded(run: Any) -> dict[str, dict[str, float]]:
    """STEPS x PER_STEP trajectories with varied measures; returns {uid: {measure: value}}."""
    rng = random.Random(7)
    text = next(iter(TextBlob.store_many(["x"]).values()))
    values: dict[str, dict[str, float]] = {}
    rows, firsts = [], []
    for step in range(STEPS):
        for k in range(PER_STEP):
            uid = f"s{step}-{k}"
            reward = EDGY_REWARDS[k] if k < len(EDGY_REWARDS) else rng.random()
            measures = {
                "reward": reward,
                "advantage": round(rng.gauss(0, 1), 3),
                "length": rng.randint(3, 400),
                "turns": rng.randint(1, 6),
                "tool_calls": rng.choice([0, 0, 1, 2, 5]),
            }
            values[uid] = measures
            rows.append(
                Trajectory(
                    run=run,
                    uid=uid,
                    group_id=f"g{step}-{k // 8}",
                    sample_index=k // 8,
                    training_step=step,
                    total_reward=reward,
                    success=reward > 0.5,
                    response_tokens=measures["length"],
                    num_steps=measures["turns"],
                    num_tool_calls=measures["tool_calls"],
                )
            )
    # Left out of every histogram: a reward that is not a number.
    rows.append(
        Trajectory(
            run=run,
            uid="nan",
            group_id="g",
            sample_index=0,
            training_step=1,
            total_reward=math.nan,
            success=False,
        )
    )
    Trajectory.objects.bulk_create(rows)
    for t in Trajectory.objects.filter(run=run).exclude(uid="nan"):
        firsts.append(
            TrajectoryStep(
                trajectory=t,
                run=run,
                index=0,
                prompt_id=text,
                response_id=text,
                advantage=values[t.uid]["advantage"],
            )
        )
    TrajectoryStep.objects.bulk_create(firsts)
    step_values.rebuild(run.pk)  # rows made here, not by ingestion: their steps' values as it keeps them
    return values


def _python_counts(values: list[float], edges: list[float]) -> list[int]:
    return [sum(low <= v < below for v in values) for low, below in itertools.pairwise(edges)]


@pytest.mark.parametrize("measure", list(MEASURES))
def test_a_steps_histogram_counts_what_python_counts_and_each_bin_lists_exactly_its_rollouts(
    client: Client, personas: Any, run: Any, seeded: dict[str, dict[str, float]], measure: str
) -> None:
    step = 2
    found = histograms.step_histogram(run.pk, measure, step)
    at_step = {uid: v[measure] for uid, v in seeded.items() if uid.startswith(f"s{step}-")}
    edges = [b.low for b in found.bins] + [found.bins[-1].below]
    assert edges == histograms.edges(min(at_step.values()), max(at_step.values()), MEASURES[measure].integer)
    assert [b.count for b in found.bins] == _python_counts(list(at_step.values()), edges)
    assert found.total == PER_STEP  # every value in exactly one bin, the largest too

    client.force_login(personas["bob"])  # a member
    for bin_, url in found.links(f"/t/acme/runs/{run.pk}/rollouts/"):
        if not bin_.count:
            continue
        query = {key: value[0] for key, value in parse_qs(urlparse(url).query).items()}
        response = client.get(urlparse(url).path, {**query, "page": 1})
        listed = {t.uid for t in response.context["page"].paginator.object_list}
        assert listed == {uid for uid, v in at_step.items() if bin_.low <= v < bin_.below}
        assert len(listed) == bin_.count


def test_the_heat_map_bins_every_step_on_one_set_of_value_bins(
    run: Any, seeded: dict[str, dict[str, float]]
) -> None:
    heat = histograms.heat_map(run.pk, "length")
    every = [v["length"] for v in seeded.values()] + [0]  # the NaN-reward trajectory's length
    assert heat.edges == histograms.edges(min(every), max(every), integer=True)
    assert heat.steps == [(s, s) for s in range(STEPS)]  # few steps: one column each
    for step, column in enumerate(heat.counts):
        at_step = [v["length"] for uid, v in seeded.items() if uid.startswith(f"s{step}-")]
        at_step += [0] if step == 1 else []
        assert column == _python_counts(at_step, heat.edges)
    rewards = histograms.heat_map(run.pk, "reward")
    assert sum(map(sum, rewards.counts)) == STEPS * PER_STEP  # the NaN reward is left out


def test_many_steps_share_columns_of_equal_width(run: Any) -> None:
    Trajectory.objects.bulk_create(
        Trajectory(
            run=run,
            uid=f"t{s}",
            group_id=f"g{s}",
            sample_index=0,
            training_step=s,
            total_reward=s % 3,
            success=False,
        )
        for s in range(0, 1000, 3)
    )
    step_values.rebuild(run.pk)
    heat = histograms.heat_map(run.pk, "reward")
    width = math.ceil(999 / histograms.STEP_COLUMNS)
    assert len(heat.steps) <= histograms.STEP_COLUMNS and heat.steps[0] == (0, width - 1)
    assert heat.steps[-1][1] == 999 and sum(map(sum, heat.counts)) == len(range(0, 1000, 3))


def test_integer_edges_are_whole_numbers_and_the_largest_value_has_a_bin() -> None:
    assert histograms.edges(0, 3, integer=True) == [0, 1, 2, 3, 4]
    assert histograms.edges(1, 400, integer=True, bins=20)[:3] == [1, 21, 41]
    top = histograms.edges(0.0, 1.0, integer=False)
    assert len(top) == histograms.BINS + 1 and top[-1] > 1.0 and top[-2] < 1.0
    assert histograms.edges(0.5, 0.5, integer=False) == [0.5, math.nextafter(0.5, math.inf)]
    last = histograms.Bin(0.95, math.nextafter(1.0, math.inf), 2, integer=False, last=True)
    assert last.label == "[0.95, 1]"  # it holds the largest value
    assert histograms.Bin(3, 6, 1, integer=True).label == "3 to 5"


def test_the_histograms_page_draws_both_and_stays_inside_the_team(
    client: Client, personas: Any, run: Any, seeded: dict[str, dict[str, float]]
) -> None:
    client.force_login(personas["bob"])
    page = client.get(f"/t/acme/runs/{run.pk}/histograms/", {"measure": "turns", "step": 1})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="heat-map"' in html and 'id="histogram-data"' in html and "Turns at step 1" in html
    assert f"/t/acme/runs/{run.pk}/rollouts/?step=1&amp;measure=turns&amp;measure_min=" in html
    assert (
        page.context["step"] == 1 and page.context["histogram"].total == PER_STEP + 1
    )  # and the NaN reward's
    default = client.get(f"/t/acme/runs/{run.pk}/histograms/")
    assert default.context["step"] == STEPS - 1 and default.context["measure"] == "reward"
    outsider = Client()
    outsider.force_login(personas["charlie"])
    assert outsider.get(f"/t/acme/runs/{run.pk}/histograms/").status_code in (403, 404)
    assert outsider.get(f"/t/other/runs/{run.pk}/histograms/").status_code == 404


def test_the_value_range_filter_refuses_an_unknown_measure(client: Client, personas: Any, run: Any) -> None:
    client.force_login(personas["alice"])
    page = client.get(f"/t/acme/runs/{run.pk}/rollouts/", {"measure": "height", "measure_min": 1})
    assert page.status_code == 200 and "measure" in page.context["form"].errors


def test_the_value_range_reaches_a_trajectory_from_its_steps_as_search_does(
    run: Any, seeded: dict[str, dict[str, float]]
) -> None:
    for measure in ("advantage", "length"):
        within = RolloutFilter(measure=measure, measure_min=0.5, measure_below=200).conditions("trajectory__")
        steps = TrajectoryStep.objects.filter(within, run=run)  # one first step per trajectory here
        assert steps.count() == sum(0.5 <= v[measure] < 200 for v in seeded.values())
