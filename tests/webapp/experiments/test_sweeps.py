"""Sweeps: a grid expands into one experiment per cell and one run per seed, refused whole when any
cell could never run; the team's limit keeps the runs past it queued, in line, until others end."""

from __future__ import annotations

from typing import Any

import pytest

from tests.webapp.polling import poll_until
from webapp.experiments import services, sweeps
from webapp.experiments.models import Run, RunStatus, TeamRunLimit
from webapp.experiments.waiting_line import places_in_line
from webapp.results import analytics


def tiny_spec(datasets: dict[str, Any], **grid: Any) -> sweeps.SweepSpec:
    """The tiny model for one step, validating on two rows: a cell's run takes a few seconds."""
    config = {
        "task": "arithmetic",
        "model.path": "tiny-test",
        "data.train_path": f"dataset:{datasets['train'].pk}",
        "data.val_path": f"dataset:{datasets['val'].pk}",
        "data.val_max_samples": 2,
        "data.max_prompt_length": 1024,
        "rollout.n": 2,
        "rollout.max_new_tokens": 8,
        "rollout.max_steps": 2,
        "rollout.tools": ["calculator"],
        "trainer.total_steps": 1,
        "trainer.batch_size": 2,
        "optim.mini_batch_size": 4,
        "trainer.num_threads": 1,
        "resources.cpus": 1,
    }
    return sweeps.SweepSpec.model_validate({"name": "tiny", "config": config, **grid})


def test_a_grid_becomes_one_experiment_per_cell_and_one_queued_run_per_seed(
    personas: Any, arithmetic: Any
) -> None:
    spec = tiny_spec(
        arithmetic, presets=["grpo", "rloo"], seeds=[1, 2], params=[{"path": "optim.lr", "values": [1e-5, 3e-5]}],
        tasks=[{"task": "arithmetic"}],
    )  # fmt: skip
    sweep = sweeps.create_sweep(personas["acme"], personas["alice"], spec)
    cells = list(sweep.cells.order_by("pk"))
    assert [(c.preset, c.config["optim"]["lr"]) for c in cells] == [
        ("grpo", 1e-5), ("grpo", 3e-5), ("rloo", 1e-5), ("rloo", 3e-5)
    ]  # fmt: skip
    assert cells[0].cell == {"preset": "grpo", "task": "arithmetic", "params": {"optim.lr": 1e-5}}
    assert cells[2].config["algorithm"]["estimator"] != cells[0].config["algorithm"]["estimator"]
    runs = sweep.runs()
    assert runs.count() == 8 and set(runs.values_list("status", flat=True)) == {RunStatus.QUEUED}
    assert sorted(set(runs.values_list("seed", flat=True))) == [1, 2]
    assert sweep.status == RunStatus.QUEUED


def test_a_grid_over_the_limit_or_with_a_cell_that_cannot_run_is_refused_whole(
    personas: Any, arithmetic: Any
) -> None:
    team, alice = personas["acme"], personas["alice"]
    too_big = tiny_spec(arithmetic, presets=["grpo", "rloo"], seeds=list(range(17)),
                        params=[{"path": "optim.lr", "values": [1e-5, 2e-5]}])  # fmt: skip
    with pytest.raises(sweeps.SweepRefused, match="the grid has 68 runs; at most 64"):
        sweeps.create_sweep(team, alice, too_big)
    # The arithmetic rows are scored by arithmetic's reward, not gsm8k's: that cell could never learn.
    mismatched = tiny_spec(arithmetic, tasks=[{"task": "arithmetic"}, {"task": "gsm8k"}])
    with pytest.raises(sweeps.SweepRefused, match=r"cell grpo · gsm8k:.*arithmetic") as refused:
        sweeps.create_sweep(team, alice, mismatched)
    assert refused.value.status == 422 and refused.value.problems[0][0] == "config.data.train_path"
    assert not team.sweeps.exists() and not Run.objects.filter(team=team).exists()


def test_with_a_limit_of_one_the_second_run_waits_queued_until_the_first_ends(
    personas: Any, arithmetic: Any
) -> None:
    team = personas["acme"]
    TeamRunLimit.set(team, 1)
    sweep = sweeps.create_sweep(team, personas["alice"], tiny_spec(arithmetic, seeds=[1, 2, 3]))
    first, second, third = sweep.runs().order_by("pk")
    assert first.mark_starting("")  # the launcher started the first (its executor is not asked here)
    services.start_run(second)  # the second's launch task: no place, it waits
    second.refresh_from_db()
    assert second.status == RunStatus.QUEUED and second.held_at is not None
    assert places_in_line(team.pk) == {second.pk: 1, third.pk: 2}
    assert services.next_in_line(team.pk) == []
    first.finish(RunStatus.FAILED, "gone")
    assert services.next_in_line(team.pk) == [second.pk]  # the reaper / start_next starts it next
    assert second.pk in services.requeue_lost_launches()


@pytest.mark.slow
def test_a_sweep_of_two_presets_by_two_seeds_trains_through_the_worker_and_fills_the_table(
    personas: Any, arithmetic: Any, launch_env: Any, start_worker: Any, client: Any
) -> None:
    team = personas["acme"]
    start_worker()
    sweep = sweeps.create_sweep(
        team, personas["alice"], tiny_spec(arithmetic, presets=["grpo", "rloo"], seeds=[1, 2])
    )
    runs = list(sweep.runs().order_by("pk"))
    poll_until(
        lambda: all(run.is_terminal for run in Run.objects.filter(pk__in=[r.pk for r in runs])), every_s=0.5
    )
    finished = list(sweep.runs().order_by("starting_at"))
    assert [r.status for r in finished] == [RunStatus.SUCCEEDED] * 4, [r.message for r in finished]
    assert sweep.status == RunStatus.SUCCEEDED
    # The default limit (2): no run started while two others were still going.
    for run in finished:
        going = [o for o in finished if o.pk != run.pk and o.starting_at < run.starting_at < o.finished_at]
        assert len(going) < 2, (run.pk, [o.pk for o in going])
    assert any(run.held_at is not None for run in finished)  # the later ones waited their turn
    matrix = analytics.comparison(team, runs=finished)
    assert matrix.algorithms == ["grpo", "rloo"] and matrix.tasks == ["arithmetic"]
    assert all(c.count == 2 for c in matrix.cells.values())
    client.force_login(personas["alice"])
    page = client.get(f"/t/{team.slug}/sweeps/{sweep.pk}/").content.decode()
    assert page.count("status-succeeded") >= 4 and 'id="sweep-matrix"' in page


def test_the_rest_api_creates_reads_and_cancels_a_sweep(personas: Any, arithmetic: Any, client: Any) -> None:
    from webapp.accounts.models import ApiToken

    team, alice = personas["acme"], personas["alice"]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {ApiToken.issue(alice, 'ci')[1]}"}
    base = f"/api/t/{team.slug}/sweeps"
    body = tiny_spec(arithmetic, presets=["grpo", "rloo"]).model_dump()
    created = client.post(base, body, content_type="application/json", **headers)
    assert created.status_code == 201, created.content
    sweep = created.json()
    assert [c["preset"] for c in sweep["cells"]] == ["grpo", "rloo"] and sweep["status"] == "queued"
    assert sweep["queued_places"] == {
        str(c["runs"][0]["id"]): i for i, c in enumerate(sweep["cells"], start=1)
    }
    again = client.post(base, body, content_type="application/json", **headers)
    assert again.status_code == 409 and again.json()["field"] == "name"
    cancelled = client.post(f"{base}/{sweep['id']}/cancel", **headers).json()
    assert cancelled["status"] == "cancelled"
    assert {r["message"] for c in cancelled["cells"] for r in c["runs"]} == {
        "cancelled by alice before it started"
    }
    assert client.get(f"{base}/{sweep['id']}", **headers).json()["status"] == "cancelled"
