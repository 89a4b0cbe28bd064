"""Real Chromium on review (docs/annotations.md): a member labels 20 steps with the keyboard, builds a
queue of the lowest-reward rollouts of a step, a second member finishes it, and the queue is saved as
a dataset that the evaluation form offers at once."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.webapp.datasets.conftest import contract_row, write_parquet
from tests.webapp.trainer_posts import trajectory
from trainer.contract import TrajectoryBatch
from webapp.ingestion import trajectories

pytestmark = [pytest.mark.browser, pytest.mark.usefixtures("quick_passwords")]

SHOTS = Path("var/shots/annotate")


@pytest.fixture
def reviewed_run(transactional_db: Any, personas: Any, tmp_path: Path) -> Any:
    """A run trained on a dataset of 10 rows: at step 40 one two-step rollout of each (rewards 0 .. 0.9)."""
    from webapp.datasets import files
    from webapp.datasets.models import Dataset
    from webapp.experiments.models import Experiment, Run

    parquet = write_parquet(tmp_path / "rows.parquet", [contract_row(i) for i in range(10)])
    incoming = Path(shutil.copy(parquet, files.incoming_dir() / "review-source.parquet"))
    source, _ = Dataset.from_file(
        personas["acme"],
        incoming,
        sha256=files.sha256_of(incoming),
        name="arith",
        source="t",
        validate_later=False,
    )
    source.validate()
    experiment = Experiment.objects.create(
        team=personas["acme"], name="review", task="arithmetic", preset="grpo"
    )
    run = Run.objects.create(
        experiment=experiment,
        team=personas["acme"],
        seed=1,
        name="review run",
        config={"data": {"train_path": f"dataset:{source.pk}"}},
    )
    batch = [trajectory(f"s40-p{p}-s0", f"s40-p{p}", p / 10) for p in range(10)]
    parsed = TrajectoryBatch.model_validate({"training_step": 40, "trajectories": batch})
    trajectories.store_batch(run, parsed, "b40")
    return run


def _shots(page: Any, name: str, folder: Path = SHOTS, full_page: bool = True) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for width in (1440, 1024):
        page.set_viewport_size({"width": width, "height": 900})
        page.screenshot(path=str(folder / f"{name}-{width}.png"), full_page=full_page)


def _label_with_key(page: Any, key: str, item: str) -> None:
    page.keyboard.press(key)
    page.locator(f"{item} .annotate-status").filter(has_text="saved: ").wait_for()


def test_label_steps_by_keyboard_queue_the_worst_finish_as_a_second_member_and_save_a_dataset(
    signed_in: Callable[[str], Any], live_server: Any, reviewed_run: Any
) -> None:
    from webapp.datasets.models import Dataset
    from webapp.ingestion.models import Trajectory
    from webapp.rollouts.models import Annotation

    run, base = reviewed_run, f"{live_server.url}/t/acme/runs/{reviewed_run.pk}"
    page = signed_in("alice")
    for t in Trajectory.objects.filter(run=run).order_by("sample_index"):
        page.goto(f"{base}/rollouts/{t.pk}/")
        page.keyboard.press("j")  # from the whole trajectory to step 0
        _label_with_key(page, "2", "#step-0")  # wrong; the mark moves on to step 1
        _label_with_key(page, "5", "#step-1")  # format only
    assert Annotation.objects.filter(step_index__isnull=False, author__username="alice").count() == 20
    assert page.locator("#step-1").get_attribute("aria-current") == "true"
    _shots(page, "trajectory")

    page.goto(f"{base}/rollouts/?step=40&label=format+only")
    assert "10 trajectories" in page.inner_text("#rollout-table")
    page.fill("#review-these input[name=name]", "worst of step 40")
    page.select_option("#review-these select[name=order]", "lowest reward")
    page.fill("#review-these input[name=limit]", "4")
    page.select_option("#review-these select[name=assignees]", ["bob"])
    _shots(page, "rollouts")
    page.click("#review-these button[type=submit]")
    page.wait_for_url("**/queues/*/")
    assert "0 / 4 done" in page.inner_text("#queue-progress")

    page.click("#start-review")
    page.wait_for_url("**?queue=*")
    assert "item 1 of 4" in page.inner_text(".queue-bar")
    page.fill("#whole-trajectory input[name=corrected_answer]", "42")
    page.click("#whole-trajectory button[type=submit]")
    page.locator("#whole-trajectory .annotate-status").filter(has_text="saved").wait_for()
    page.keyboard.press("k")  # the mark left the form's field: back to the whole trajectory
    _label_with_key(page, "2", "#whole-trajectory")

    page = signed_in("bob")
    page.goto(f"{live_server.url}/t/acme/queues/")
    page.click("a:has-text('worst of step 40')")
    page.click("#start-review")
    page.wait_for_url("**?queue=*")
    for item in (2, 3, 4):
        assert f"item {item} of 4" in page.inner_text(".queue-bar")
        _label_with_key(page, "1", "#whole-trajectory")
        if item == 2:
            _shots(page, "queue-item")
        here = page.url
        page.keyboard.press("n")
        # The next item's URL also has ?queue=: wait for the page to leave this one.
        page.wait_for_url(lambda url, here=here: url != here)
    page.wait_for_url("**/queues/*/")
    assert "4 / 4 done" in page.inner_text("#queue-progress") and "Every item is done" in page.content()
    _shots(page, "queue")

    page.fill("#save-dataset input[name=name]", "reviewed step 40")
    page.click("#save-dataset button[type=submit]")
    page.wait_for_url("**/datasets/*/")
    dataset = Dataset.objects.get(name="reviewed step 40")
    rows = pq.read_table(dataset.path).to_pylist()
    assert [(r["extra_info"]["index"], r["reward_model"]["ground_truth"]) for r in rows] == [
        (0, "42"),
        (1, "2"),
        (2, "4"),
        (3, "6"),
    ]
    _shots(page, "dataset")
    page.goto(f"{live_server.url}/t/acme/experiments/{run.experiment_id}/evaluate/")
    assert "reviewed step 40" in page.inner_text("body")


def test_a_label_key_shows_the_badge_at_once_and_the_rollout_list_shows_it_on_going_back(
    signed_in: Callable[[str], Any], live_server: Any, reviewed_run: Any
) -> None:
    run = reviewed_run
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/runs/{run.pk}/rollouts/?step=40")
    row = page.locator("#rollout-table tbody tr").first
    uid = row.locator("td:nth-child(3) a").inner_text()
    row.locator("td:nth-child(3) a").click()
    page.wait_for_url("**/rollouts/*/")
    page.evaluate("window.notReloaded = true")  # gone if the page reloads
    page.keyboard.press("j")
    _label_with_key(page, "2", "#step-0")
    page.keyboard.press("k")
    page.keyboard.press("k")
    _label_with_key(page, "3", "#whole-trajectory")
    assert page.locator("#step-0 .label-badges").inner_text() == "wrong · alice"
    assert page.locator("#whole-trajectory .label-badges").inner_text() == "reward hacking · alice"
    assert page.evaluate("window.notReloaded === true")
    _shots(page, "label-badge", Path("var/shots/leftovers"), full_page=False)

    page.go_back()  # the list the user came from, not a copy from before the labels
    page.wait_for_url("**/rollouts/?step=40")
    labelled = page.locator("#rollout-table tbody tr").filter(has_text=uid)
    assert sorted(labelled.locator(".label-badge").all_inner_texts()) == ["reward hacking", "wrong"]
    _shots(page, "rollout-list-labels", Path("var/shots/leftovers"), full_page=False)


def test_label_keys_typed_in_a_row_label_one_item_each(
    signed_in: Callable[[str], Any], live_server: Any, reviewed_run: Any
) -> None:
    from webapp.ingestion.models import Trajectory
    from webapp.rollouts.models import Annotation

    run = reviewed_run
    first = Trajectory.objects.filter(run=run).order_by("sample_index").first()
    page = signed_in("alice")
    page.goto(f"{live_server.url}/t/acme/runs/{run.pk}/rollouts/{first.pk}/")
    for key in ("2", "1", "5"):  # no wait between keys: the next key must not wait for the server
        page.keyboard.press(key)
    for item in ("#whole-trajectory", "#step-0", "#step-1"):
        page.locator(f"{item} .annotate-status").filter(has_text="saved: ").wait_for()
    given = Annotation.objects.filter(trajectory=first, author__username="alice")
    assert {(a.step_index, a.label.name) for a in given} == {
        (None, "wrong"),
        (0, "correct"),
        (1, "format only"),
    }
