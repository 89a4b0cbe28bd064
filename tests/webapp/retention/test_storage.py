"""Retention policies at ingestion and afterwards, and what a run's trajectories take
(docs/rollouts.md#retention, docs/rollouts.md#storage)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.webapp.trainer_posts import Trainer, trajectory
from webapp.ingestion import storage, tasks
from webapp.ingestion.models import TextBlob, ToolCall, Trajectory, TrajectoryStep
from webapp.retention.models import RetentionKind, RunStorage
from webapp.retention.policy import Retention, kept, sample_limit, uid_hash

pytestmark = pytest.mark.usefixtures("quick_passwords")


def _batch(step: int, rewards: list[float], prefix: str = "") -> list[dict[str, Any]]:
    return [
        trajectory(
            f"{prefix}s{step}-p{k // 2}-s{k}",
            f"s{step}-p{k // 2}",
            reward,
            response=f"reply {prefix}{step} {k}",
        )
        for k, reward in enumerate(rewards)
    ]


def _counters_match_the_tables(run: Any) -> RunStorage:
    counters = RunStorage.objects.get(pk=run.pk)
    measured = storage.run_sizes(run.pk)
    assert counters.kept == Trajectory.objects.filter(run=run).count()
    assert (counters.trajectory_bytes, counters.step_bytes, counters.token_signal_bytes, counters.tool_call_bytes) == (
        measured.trajectory_bytes, measured.step_bytes, measured.token_signal_bytes, measured.tool_call_bytes,
    )  # fmt: skip
    assert counters.trajectory_bytes > 0 and counters.step_bytes > 0 and counters.tool_call_bytes > 0
    return counters


def test_a_policy_is_applied_as_trajectories_arrive_and_what_it_drops_is_counted(
    trainer: Trainer, run: Any, client: Client, personas: Any, django_capture_on_commit_callbacks: Any
) -> None:
    RunStorage.objects.create(run=run, retention=RetentionKind.FAILURES, keep_successes=1)
    first = trainer.trajectories(0, _batch(0, [1.0, 0.0, 1.0, 0.0, 1.0]), batch_id="a").json()
    assert (first["stored"], first["dropped"]) == (3, 2)  # both failures and one of three successes
    chosen = kept(
        Retention(RetentionKind.FAILURES, 1), [f"s0-p{k // 2}-s{k}" for k in (0, 2, 4)], [True] * 3, 0
    )
    expected = {f"s0-p{k // 2}-s{k}" for k, keep in zip((0, 2, 4), chosen, strict=True) if keep} | {
        "s0-p0-s1",
        "s0-p1-s3",
    }
    assert set(Trajectory.objects.filter(run=run).values_list("uid", flat=True)) == expected
    # The step has its success already: a later batch of the same step adds only failures.
    later = trainer.trajectories(0, _batch(0, [1.0, 0.0], prefix="b"), batch_id="b").json()
    assert (later["stored"], later["dropped"]) == (1, 1)
    assert trainer.trajectories(0, _batch(0, [1.0, 0.0], prefix="b"), batch_id="b").json()["duplicate"]
    counters = _counters_match_the_tables(run)
    assert (counters.received, counters.kept) == (7, 4) and counters.text_bytes > 0
    # What a dropped trajectory would have referred to was never stored.
    dropped = {f"reply 0 {k}" for k in (0, 2, 4) if f"s0-p{k // 2}-s{k}" not in expected} | {"reply b0 0"}
    assert not TextBlob.objects.filter(sha256__in=[TextBlob.digest(text) for text in dropped]).exists()

    client.force_login(personas["alice"])
    page = client.get(f"/t/acme/runs/{run.pk}/").content.decode()
    assert "Kept 4 of 7 trajectories" in page and 'id="retention-form"' in page
    team_page = client.get("/t/acme/").content.decode()
    assert 'id="team-storage"' in team_page and "kept 4 of 7" in team_page

    with django_capture_on_commit_callbacks() as queued:
        response = client.post(
            f"/t/acme/runs/{run.pk}/retention/",
            {"retention": "sample", "sample_fraction": "0.5", "keep_successes": "1"},
        )
    assert response.status_code == 302
    changed = RunStorage.objects.get(pk=run.pk)
    assert (changed.retention, changed.sample_fraction, changed.applying) == ("sample", 0.5, True)
    assert len(queued) == 1  # the apply_retention task, sent once the change commits
    refused = client.post(
        f"/t/acme/runs/{run.pk}/retention/", {"retention": "sample", "sample_fraction": "2"}
    )
    assert refused.status_code == 302 and RunStorage.objects.get(pk=run.pk).sample_fraction == 0.5
    said = client.get(refused["Location"]).content.decode()
    assert "Retention not changed: Sample fraction: Ensure this value is less than or equal to 1.0." in said


def test_a_sample_is_drawn_by_the_uid_hash_so_a_replay_decides_the_same() -> None:
    uids = [f"t{i}" for i in range(400)]
    policy = Retention(RetentionKind.SAMPLE, sample_fraction=0.25)
    decided = kept(policy, uids, [True] * 400, 0)
    assert decided == kept(policy, list(uids), [False] * 400, 0)
    assert 60 < sum(decided) < 140
    assert all(keep == (uid_hash(uid) < sample_limit(0.25)) for uid, keep in zip(uids, decided, strict=True))


@pytest.mark.django_db(transaction=True)
def test_changing_the_policy_deletes_what_it_drops_its_texts_and_reclaims_the_space(
    trainer: Trainer, run: Any
) -> None:
    for step in range(2):
        assert (
            trainer.trajectories(step, _batch(step, [1.0, 1.0, 0.0, 1.0]), batch_id=f"b{step}").status_code
            == 200
        )
    assert Trajectory.objects.filter(run=run).count() == 8
    texts_before = TextBlob.objects.count()
    tasks.change_retention(run, Retention(RetentionKind.FAILURES, keep_successes=1))
    storage.apply_retention(run.pk)  # the task's body: deletes, measures, sweeps texts, VACUUMs

    left = set(Trajectory.objects.filter(run=run).values_list("uid", flat=True))
    expected = set()
    for step in range(2):
        uids = [f"s{step}-p{k // 2}-s{k}" for k in range(4)]
        successes = [True, True, False, True]
        expected |= {
            uid
            for uid, keep in zip(
                uids, kept(Retention(RetentionKind.FAILURES, 1), uids, successes, 0), strict=True
            )
            if keep
        }
    assert (
        left == expected and len(left) == 4
    )  # per step: its failure and one success, the one ingestion would keep
    assert TrajectoryStep.objects.exclude(trajectory__uid__in=left).filter(trajectory__run=run).count() == 0
    assert ToolCall.objects.filter(run=run).count() == 4
    responses = {f"reply {uid.split('-')[0][1:]} {uid.rsplit('s', 1)[1]}" for uid in left}
    stored = set(TextBlob.objects.values_list("sha256", flat=True))
    assert {TextBlob.digest(r) for r in responses} <= stored
    assert TextBlob.objects.count() == texts_before - 4  # the dropped ones' responses went, shared texts stay
    counters = _counters_match_the_tables(run)
    assert (counters.received, counters.kept, counters.applying) == (8, 4, False)

    # A policy only drops: keeping everything again brings nothing back.
    tasks.change_retention(run, Retention(RetentionKind.ALL))
    storage.apply_retention(run.pk)
    assert Trajectory.objects.filter(run=run).count() == 4
