"""Labels and annotations on trajectories and steps, review queues, and rollouts saved as a dataset
(docs/annotations.md), through the pages a member uses."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from django.test import Client

from tests.webapp.datasets.conftest import contract_row, write_parquet
from tests.webapp.trainer_posts import Trainer, trajectory
from webapp.accounts.models import Role
from webapp.datasets import files
from webapp.datasets.models import Dataset, DatasetStatus
from webapp.ingestion.models import Trajectory
from webapp.rollouts import labelling
from webapp.rollouts.models import Annotation, PromotedRollout, QueueItem, ReviewQueue


@pytest.fixture
def rollouts(trainer: Trainer) -> dict[str, Trajectory]:
    """Six rollouts of three prompts over two training steps; rewards 0.0 .. 0.5 (uid sN-pP-sK)."""
    for step in (1, 2):
        trainer.trajectories(
            step,
            [
                trajectory(f"s{step}-p{p}-s{k}", f"s{step}-p{p}", (step - 1) * 0.3 + p * 0.1 + k * 0.05)
                for p in range(3)
                for k in range(2)
            ],
            f"t{step}",
        )
    return {t.uid: t for t in Trajectory.objects.all()}


def _member(personas: dict[str, Any], name: str) -> Client:
    client = Client()
    client.force_login(personas[name])
    return client


def _annotate(client: Client, t: Trajectory, **fields: Any) -> Any:
    url = f"/t/acme/runs/{t.run_id}/rollouts/{t.pk}/annotate/"
    return client.post(url, fields, HTTP_ACCEPT="application/json")


def test_a_member_labels_a_trajectory_and_a_step_and_the_rollout_list_shows_and_filters_them(
    personas: dict[str, Any], rollouts: dict[str, Trajectory], run: Any
) -> None:
    alice, bob = _member(personas, "alice"), _member(personas, "bob")
    first, second = rollouts["s1-p0-s0"], rollouts["s1-p1-s0"]
    saved = _annotate(alice, first, label="wrong", note="adds badly").json()
    assert saved["label"] == "wrong" and "wrong · alice" in saved["given"] and "adds badly" in saved["given"]
    assert _annotate(alice, first, label="correct").status_code == 200  # her second word replaces the first
    assert _annotate(bob, first, label="reward hacking").status_code == 200
    step_saved = _annotate(alice, second, step="1", label="malformed tool call", corrected_answer="5")
    assert "malformed tool call · alice" in step_saved.json()["given"]
    assert _annotate(alice, second, step="7", label="wrong").json()["error"] == "the trajectory has no step 7"
    assert _annotate(alice, second, label="no such label").status_code == 400
    found = {
        (a.trajectory.uid, a.step_index, a.author.username): a.label.name for a in Annotation.objects.all()
    }
    assert found == {
        ("s1-p0-s0", None, "alice"): "correct",
        ("s1-p0-s0", None, "bob"): "reward hacking",
        ("s1-p1-s0", 1, "alice"): "malformed tool call",
    }
    plain = alice.post(
        f"/t/acme/runs/{run.pk}/rollouts/{first.pk}/annotate/", {"step": "0", "label": "wrong"}
    )
    assert plain.status_code == 302 and plain["Location"].endswith(f"/rollouts/{first.pk}/#step-0")

    listed = alice.get(f"/t/acme/runs/{run.pk}/rollouts/")
    assert "no-store" in listed["Cache-Control"]  # Back after labelling shows the labels given since
    listing = listed.content.decode()
    assert "<th>Labels</th>" in listing and "malformed tool call" in listing and "reward hacking" in listing
    only = alice.get(f"/t/acme/runs/{run.pk}/rollouts/", {"label": "reward hacking"}).content.decode()
    assert "s1-p0-s0" in only and "s1-p1-s0" not in only and "1 trajectory" in only
    none = alice.get(f"/t/acme/runs/{run.pk}/rollouts/", {"label": "(none)"}).content.decode()
    assert "10 trajectories" in none and "s1-p0-s0</a>" not in none
    # A filter changed in place (htmx swaps the table) carries the review forms' new query with it.
    swapped = alice.get(
        f"/t/acme/runs/{run.pk}/rollouts/",
        {"step": 2},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="rollout-table",
    ).content.decode()
    assert f"/t/acme/runs/{run.pk}/rollouts/queue/?step=2" in swapped and "<h1>" not in swapped
    page = alice.get(f"/t/acme/runs/{run.pk}/rollouts/{second.pk}/").content.decode()
    assert 'data-key="3" data-name="reward hacking"' in page and "js/annotate.js" in page
    assert "corrected answer <code>5</code>" in page


def test_a_team_adds_labels_with_a_colour_and_a_key_and_keeps_them_to_itself(
    personas: dict[str, Any], rollouts: dict[str, Trajectory], run: Any
) -> None:
    alice = _member(personas, "alice")
    made = alice.post("/t/acme/labels/", {"name": "lazy", "colour": "#123abc", "key": "l"})
    assert made.status_code == 302
    refused = alice.post(
        "/t/acme/labels/", {"name": "skip", "colour": "#123abc", "key": "j"}
    ).content.decode()
    assert "the key is one character, not one of" in refused
    taken = alice.post("/t/acme/labels/", {"name": "other", "colour": "#123abc", "key": "1"}).content.decode()
    assert "already has a label" in taken
    assert [label.name for label in labelling.team_labels(personas["acme"])][-1] == "lazy"
    assert "lazy" not in [label.name for label in labelling.team_labels(personas["other"])]
    assert _annotate(alice, rollouts["s1-p0-s0"], label="lazy").status_code == 200
    # Team Other's owner neither reaches Acme's trajectories nor its labels.
    charlie = _member(personas, "charlie")
    assert _annotate(charlie, rollouts["s1-p0-s0"], label="correct").status_code == 404
    assert charlie.get("/t/acme/labels/").status_code == 404
    assert charlie.get("/t/acme/queues/").status_code == 404


def test_viewers_read_labels_and_queues_but_cannot_label_or_build_queues(
    personas: dict[str, Any], rollouts: dict[str, Trajectory], run: Any, django_user_model: Any
) -> None:
    dave = django_user_model.objects.create_user("dave")
    personas["acme"].add_member(dave, Role.VIEWER)
    personas["dave"] = dave
    viewer, alice = _member(personas, "dave"), _member(personas, "alice")
    target = rollouts["s1-p0-s0"]
    assert _annotate(alice, target, label="wrong").status_code == 200
    assert _annotate(viewer, target, label="correct").status_code == 403
    assert (
        viewer.post(f"/t/acme/runs/{run.pk}/rollouts/queue/", {"order": "newest", "limit": 5}).status_code
        == 403
    )
    assert viewer.post("/t/acme/labels/", {"name": "x", "colour": "#000000", "key": "x"}).status_code == 403
    page = viewer.get(f"/t/acme/runs/{run.pk}/rollouts/{target.pk}/").content.decode()
    assert "wrong · alice" in page and "annotate-form" not in page
    listing = viewer.get(f"/t/acme/runs/{run.pk}/rollouts/").content.decode()
    assert "Review these" not in listing and "wrong" in listing
    assert Annotation.objects.count() == 1


def test_a_queue_of_the_lowest_rewards_of_a_step_counts_progress_and_shows_agreement(
    personas: dict[str, Any], rollouts: dict[str, Trajectory], run: Any
) -> None:
    alice, bob = _member(personas, "alice"), _member(personas, "bob")
    built = alice.post(
        f"/t/acme/runs/{run.pk}/rollouts/queue/?step=2",
        {
            "name": "worst of step 2",
            "order": "lowest reward",
            "limit": 3,
            "reviews_wanted": 2,
            "assignees": ["bob"],
        },
    )
    queue = ReviewQueue.objects.get()
    assert built["Location"] == f"/t/acme/queues/{queue.pk}/"
    assert [i.trajectory.uid for i in QueueItem.objects.filter(queue=queue)] == [
        "s2-p0-s0",
        "s2-p0-s1",
        "s2-p1-s0",
    ]
    assert list(queue.assignees.values_list("username", flat=True)) == ["bob"]
    page = alice.get(f"/t/acme/queues/{queue.pk}/").content.decode()
    assert "0 / 3 done" in page
    first = alice.get(f"/t/acme/queues/{queue.pk}/next/")
    assert first["Location"] == f"/t/acme/runs/{run.pk}/rollouts/{rollouts['s2-p0-s0'].pk}/?queue={queue.pk}"
    in_queue = alice.get(first["Location"]).content.decode()
    assert "item 1 of 3" in in_queue and "0 / 3 done" in in_queue
    _annotate(alice, rollouts["s2-p0-s0"], label="wrong")
    _annotate(bob, rollouts["s2-p0-s0"], label="wrong")
    _annotate(alice, rollouts["s2-p0-s1"], label="wrong")
    _annotate(bob, rollouts["s2-p0-s1"], label="correct")
    _annotate(alice, rollouts["s2-p1-s0"], label="correct")
    page = alice.get(f"/t/acme/queues/{queue.pk}/").content.decode()
    assert "2 / 3 done" in page and "2 / 2 agree: wrong" in page and "1 / 2 agree: " in page
    assert "alice 3 · bob 2" in page
    # Alice has labelled everything; Bob still has the third item to give.
    assert alice.get(f"/t/acme/queues/{queue.pk}/next/")["Location"] == f"/t/acme/queues/{queue.pk}/"
    assert bob.get(f"/t/acme/queues/{queue.pk}/next/")["Location"].startswith(
        f"/t/acme/runs/{run.pk}/rollouts/{rollouts['s2-p1-s0'].pk}/"
    )
    listing = alice.get("/t/acme/queues/").content.decode()
    assert "worst of step 2" in listing and "2 / 3 done" in listing


def test_a_queue_from_a_search_holds_the_matching_failures(
    personas: dict[str, Any], trainer: Trainer, run: Any
) -> None:
    trainer.trajectories(
        1,
        [
            trajectory("s1-p0-s0", "s1-p0", 0.0, response="Traceback (most recent call last): boom"),
            trajectory("s1-p1-s0", "s1-p1", 1.0, response="Traceback but it passed"),
            trajectory("s1-p2-s0", "s1-p2", 0.0, response="a quiet failure"),
        ],
    )
    alice = _member(personas, "alice")
    alice.post(
        f"/t/acme/runs/{run.pk}/rollouts/queue/?q=Traceback&success=no", {"order": "newest", "limit": 50}
    )
    assert [i.trajectory.uid for i in QueueItem.objects.all()] == ["s1-p0-s0"]
    nothing = alice.post(f"/t/acme/runs/{run.pk}/rollouts/queue/?q=giraffe", {"order": "newest", "limit": 50})
    assert ReviewQueue.objects.count() == 1 and nothing.status_code == 302


def _source_dataset(team: Any, folder: Path) -> Dataset:
    rows = [contract_row(i, question=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(3)]
    parquet = write_parquet(folder / "source.parquet", rows)
    incoming = Path(shutil.copy(parquet, files.incoming_dir() / "source.parquet"))
    dataset, _ = Dataset.from_file(
        team, incoming, sha256=files.sha256_of(incoming), name="source", source="t", validate_later=False
    )
    dataset.validate()
    return dataset


def test_a_queue_saved_as_a_dataset_keeps_the_contract_takes_corrected_answers_and_links_back(
    personas: dict[str, Any], rollouts: dict[str, Trajectory], run: Any, tmp_path: Path
) -> None:
    source = _source_dataset(personas["acme"], tmp_path)
    run.config = {**run.config, "data": {"train_path": f"dataset:{source.pk}"}}
    run.save(update_fields=["config"])
    alice = _member(personas, "alice")
    alice.post(f"/t/acme/runs/{run.pk}/rollouts/queue/?step=1", {"order": "lowest reward", "limit": 4})
    queue = ReviewQueue.objects.get()
    _annotate(alice, rollouts["s1-p1-s0"], label="wrong", corrected_answer="3")
    saved = alice.post(f"/t/acme/queues/{queue.pk}/dataset/", {"name": "reviewed"})
    dataset = Dataset.objects.get(name="reviewed")
    assert saved["Location"] == f"/t/acme/datasets/{dataset.pk}/"
    assert dataset.status == DatasetStatus.VALID and dataset.derived_from == source
    assert dataset in Dataset.offered_to(personas["acme"])  # the experiment and evaluation pickers list it
    rows = pq.read_table(dataset.path).to_pylist()
    assert [(r["extra_info"]["index"], r["reward_model"]["ground_truth"]) for r in rows] == [
        (0, "0"),
        (1, "3"),
    ]
    assert rows[0]["prompt"] == contract_row(0, question="What is 0 + 0?")["prompt"]
    links = PromotedRollout.objects.filter(dataset=dataset)
    assert sorted((link.trajectory.uid, link.corrected) for link in links) == [
        ("s1-p0-s0", False),
        ("s1-p0-s1", False),
        ("s1-p1-s0", True),
        ("s1-p1-s1", True),
    ]
    assert alice.get(f"/t/acme/datasets/{dataset.pk}/download/").status_code == 200

    only = alice.post(f"/t/acme/queues/{queue.pk}/dataset/", {"name": "corrected", "corrected_only": "on"})
    assert only.status_code == 302
    assert pq.read_table(Dataset.objects.get(name="corrected").path).to_pylist()[0]["reward_model"] == {
        "style": "rule",
        "ground_truth": "3",
    }


def test_a_prompt_saved_as_a_dataset_takes_the_newest_corrected_answer_of_any_of_its_rollouts(
    personas: dict[str, Any], rollouts: dict[str, Trajectory], run: Any
) -> None:
    bob, alice = _member(personas, "bob"), _member(personas, "alice")
    _annotate(bob, rollouts["s2-p1-s0"], label="wrong", corrected_answer="5")
    _annotate(alice, rollouts["s1-p1-s1"], label="wrong", corrected_answer="6")  # later, on another rollout
    ticked = [rollouts["s2-p1-s0"].pk, rollouts["s1-p1-s1"].pk]
    alice.post(f"/t/acme/runs/{run.pk}/rollouts/dataset/", {"name": "newest", "trajectory": ticked})
    (row,) = pq.read_table(Dataset.objects.get(name="newest").path).to_pylist()
    assert row["reward_model"]["ground_truth"] == "6"


def test_ticked_rollouts_of_a_run_without_its_dataset_are_rebuilt_from_the_rollouts(
    personas: dict[str, Any], rollouts: dict[str, Trajectory], run: Any
) -> None:
    alice = _member(personas, "alice")
    ticked = [rollouts["s2-p2-s0"].pk, rollouts["s2-p2-s1"].pk]
    alice.post(f"/t/acme/runs/{run.pk}/rollouts/dataset/", {"name": "ticked", "trajectory": ticked})
    dataset = Dataset.objects.get(name="ticked")
    assert dataset.status == DatasetStatus.VALID and dataset.derived_from is None
    (row,) = pq.read_table(dataset.path).to_pylist()
    assert row["prompt"] == [{"role": "user", "content": "What is 2+2?"}]
    assert row["reward_model"]["ground_truth"] == "4" and row["extra_info"]["index"] == 2
    nothing = alice.post(f"/t/acme/runs/{run.pk}/rollouts/dataset/?step=99", {"name": "empty"})
    assert nothing.status_code == 302 and not Dataset.objects.filter(name="empty").exists()
