"""Per-token signals sent after their trajectories (verl's driver, docs/verl.md#token-signals): written
onto the stored steps, held until a late trajectory arrives, replay-safe, counted in the run's storage."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.utils import timezone

from tests.webapp.trainer_posts import Trainer
from trainer.contract import TOKEN_SIGNALS_PATH, StepSignalsWire, TokenSignalsWire
from webapp.ingestion.models import PendingTokenSignals, TrajectoryStep
from webapp.ingestion.tasks import give_up_waiting_signals_task
from webapp.ingestion.token_signals import PENDING_SIGNALS_GRACE, PENDING_SIGNALS_STEPS, unpack_token_signals
from webapp.retention.models import RunStorage

pytestmark = pytest.mark.django_db


def trajectory(uid: str, steps: int = 2) -> dict[str, Any]:
    return {
        "id": uid,
        "group_id": "g",
        "sample_index": 0,
        "total_reward": 1.0,
        "steps": [
            {
                "index": k,
                "prompt_text": f"prompt {k}",
                "response_text": f"answer {k} of {uid}",
                "num_response_tokens": 3,
            }
            for k in range(steps)
        ],
    }


def signals(uid: str, index: int, advantage: float = 0.5) -> dict[str, Any]:
    wire = StepSignalsWire(
        trajectory_id=uid,
        step_index=index,
        advantage=advantage,
        token_signals=TokenSignalsWire.of(
            ["an", "swer", "<b>"], {"advantage": [advantage] * 3, "kl": [0.01, 0.02, 0.03]}
        ),
    )
    return wire.model_dump(mode="json")


def send(trainer: Trainer, steps: list[dict[str, Any]], batch_id: str) -> dict[str, Any]:
    response = trainer.post(TOKEN_SIGNALS_PATH, {"batch_id": batch_id, "steps": steps})
    assert response.status_code == 200, response.content
    return response.json()


def stored(run: Any, uid: str, index: int) -> TrajectoryStep:
    return TrajectoryStep.objects.get(run=run, trajectory__uid=uid, index=index)


def test_signals_are_written_onto_the_stored_steps_and_shown(
    trainer: Trainer, run: Any, client: Client, personas: Any
) -> None:
    assert trainer.trajectories(1, [trajectory("a"), trajectory("b")]).status_code == 200
    before = RunStorage.objects.get(pk=run.pk).token_signal_bytes

    result = send(trainer, [signals("a", 1, 0.25), signals("b", 0, -1.5), signals("a", 7)], "s1")

    assert result == {"stored": 2, "waiting": 0, "missing": 1, "duplicate": False}  # "a" has no step 7
    step = stored(run, "a", 1)
    assert step.advantage == 0.25
    unpacked = unpack_token_signals(bytes(step.token_signals))
    assert unpacked.tokens == ["an", "swer", "<b>"]
    assert unpacked.signals["kl"] == pytest.approx([0.01, 0.02, 0.03])
    assert stored(run, "a", 0).token_signals is None and stored(run, "b", 0).advantage == -1.5
    assert RunStorage.objects.get(pk=run.pk).token_signal_bytes > before

    client.force_login(personas["alice"])
    page = client.get(f"/t/acme/runs/{run.pk}/rollouts/{step.trajectory_id}/").content.decode()
    assert '<option value="kl">' in page and '<option value="ratio">' not in page
    assert "&lt;b&gt;" in page and "<b>" not in page.split('id="tokens-1"', 1)[1].split("</script>", 1)[0]


def test_a_replayed_batch_changes_nothing_and_a_step_sent_twice_keeps_the_last(
    trainer: Trainer, run: Any
) -> None:
    assert send(trainer, [signals("a", 0, 1.0), signals("a", 0, 0.25)], "s0")["waiting"] == 1
    trainer.trajectories(1, [trajectory("a")])
    assert stored(run, "a", 0).advantage == 0.25
    send(trainer, [signals("a", 0, 0.5), signals("a", 0, 0.25)], "s1")
    assert send(trainer, [signals("a", 0, 9.0)], "s1")["duplicate"] is True
    assert stored(run, "a", 0).advantage == 0.25


def test_signals_that_arrive_before_their_trajectory_wait_for_it(trainer: Trainer, run: Any) -> None:
    assert send(trainer, [signals("late", 1, 0.75)], "s1") == {
        "stored": 0, "waiting": 1, "missing": 0, "duplicate": False,
    }  # fmt: skip
    assert PendingTokenSignals.objects.filter(run=run).count() == 1

    assert trainer.trajectories(1, [trajectory("late")]).status_code == 200

    step = stored(run, "late", 1)
    assert step.advantage == 0.75
    assert unpack_token_signals(bytes(step.token_signals)).tokens == ["an", "swer", "<b>"]
    assert not PendingTokenSignals.objects.filter(run=run).exists()
    assert RunStorage.objects.get(pk=run.pk).token_signal_bytes > 0


def test_signals_whose_trajectory_never_comes_are_given_up_as_the_run_moves_on(
    trainer: Trainer, run: Any
) -> None:
    send(trainer, [signals("lost", 0)], "s1")  # its rollout worker died, say
    trainer.trajectories(PENDING_SIGNALS_STEPS, [trajectory("x")], batch_id="t1")
    send(trainer, [signals("x", 0)], "s2")
    assert PendingTokenSignals.objects.filter(run=run, trajectory_uid="lost").exists()  # not yet

    trainer.trajectories(PENDING_SIGNALS_STEPS + 1, [trajectory("y")], batch_id="t2")
    send(trainer, [signals("y", 0)], "s3")
    assert not PendingTokenSignals.objects.filter(run=run).exists()


def test_signals_whose_trajectory_never_comes_are_given_up_by_beat_with_no_other_batch(
    trainer: Trainer, run: Any
) -> None:
    send(trainer, [signals("lost", 0), signals("late", 0)], "s1")  # and nothing more comes: the run ended
    waited = timezone.now() - PENDING_SIGNALS_GRACE - timedelta(minutes=1)
    PendingTokenSignals.objects.filter(run=run, trajectory_uid="lost").update(received=waited)
    schedule = {entry["task"] for entry in django_settings.CELERY_BEAT_SCHEDULE.values()}
    assert give_up_waiting_signals_task.name in schedule

    assert give_up_waiting_signals_task.apply().get() == 1  # what beat's periodic run does

    assert list(PendingTokenSignals.objects.filter(run=run).values_list("trajectory_uid", flat=True)) == [
        "late"
    ]


def test_bad_signals_are_refused_with_the_reason(trainer: Trainer, run: Any) -> None:
    trainer.trajectories(1, [trajectory("a")])
    bad = signals("a", 0)
    bad["token_signals"]["tokens"] = ["one"]  # three values for one token
    response = trainer.post(TOKEN_SIGNALS_PATH, {"batch_id": "s1", "steps": [bad]})
    assert response.status_code == 400
    assert "has 3 values for 1 tokens" in response.content.decode()
    assert stored(run, "a", 0).token_signals is None


def test_deleting_the_run_deletes_its_waiting_signals(trainer: Trainer, run: Any) -> None:
    send(trainer, [signals("late", 0)], "s1")
    run.delete()
    assert not PendingTokenSignals.objects.exists()


def update_signals(uid: str, index: int, ratio: float = 1.1, count: int = 3) -> dict[str, Any]:
    """What verl's actor workers send: the update's ratio and clip decision, without the tokens."""
    wire = StepSignalsWire(
        trajectory_id=uid,
        step_index=index,
        token_signals=TokenSignalsWire.of(
            None, {"ratio": [ratio] * count, "clipped": [0.0, 1.0, 0.0][:count]}
        ),
    )
    return wire.model_dump(mode="json")


def signal_names(run: Any, uid: str, index: int) -> dict[str, list[float]]:
    step = stored(run, uid, index)
    assert step.token_signals is not None
    unpacked = unpack_token_signals(bytes(step.token_signals))
    assert unpacked.tokens == ["an", "swer", "<b>"]
    return unpacked.signals


ALL_FOUR = ["advantage", "clipped", "kl", "ratio"]


def test_the_updates_signals_add_to_the_drivers_whichever_comes_first(
    trainer: Trainer, run: Any, client: Client, personas: Any
) -> None:
    trainer.trajectories(1, [trajectory("a"), trajectory("b")])
    # The driver's first (the usual order), then the worker's: added, the advantage kept.
    send(trainer, [signals("a", 0, 0.25)], "d1")
    assert send(trainer, [update_signals("a", 0)], "w1") == {
        "stored": 1, "waiting": 0, "missing": 0, "duplicate": False,
    }  # fmt: skip
    assert sorted(signal_names(run, "a", 0)) == ALL_FOUR
    assert stored(run, "a", 0).advantage == 0.25
    # The worker's first: it waits for the tokens, then both are written.
    assert send(trainer, [update_signals("b", 1)], "w2")["waiting"] == 1
    assert stored(run, "b", 1).token_signals is None
    assert send(trainer, [signals("b", 1, -0.5)], "d2")["stored"] == 1
    assert sorted(signal_names(run, "b", 1)) == ALL_FOUR
    assert not PendingTokenSignals.objects.filter(run=run).exists()
    # A later epoch's ratio replaces the earlier one; the other signals stay.
    send(trainer, [update_signals("a", 0, ratio=0.8)], "w3")
    values = signal_names(run, "a", 0)
    assert values["ratio"] == pytest.approx([0.8] * 3) and values["kl"] == pytest.approx([0.01, 0.02, 0.03])

    client.force_login(personas["alice"])
    page = client.get(f"/t/acme/runs/{run.pk}/rollouts/{stored(run, 'a', 0).trajectory_id}/").content.decode()
    assert '<option value="ratio">' in page and '<option value="clipped">' in page


def test_both_senders_wait_together_for_a_late_trajectory(trainer: Trainer, run: Any) -> None:
    send(trainer, [update_signals("late", 0), update_signals("late", 1)], "w1")
    send(trainer, [signals("late", 0, 0.75)], "d1")
    assert PendingTokenSignals.objects.filter(run=run).count() == 2  # step 0 merged, step 1 still waiting
    send(trainer, [signals("late", 1, -0.25)], "d2")

    trainer.trajectories(1, [trajectory("late")])

    assert sorted(signal_names(run, "late", 0)) == ALL_FOUR
    assert sorted(signal_names(run, "late", 1)) == ALL_FOUR
    assert (stored(run, "late", 0).advantage, stored(run, "late", 1).advantage) == (0.75, -0.25)
    assert not PendingTokenSignals.objects.filter(run=run).exists()


def test_update_signals_whose_tokens_never_come_wait_and_are_given_up(trainer: Trainer, run: Any) -> None:
    send(trainer, [update_signals("a", 0)], "w1")
    trainer.trajectories(1, [trajectory("a")], batch_id="t1")  # its driver's send was lost, say
    assert stored(run, "a", 0).token_signals is None
    assert PendingTokenSignals.objects.filter(run=run, trajectory_uid="a").exists()

    trainer.trajectories(PENDING_SIGNALS_STEPS + 2, [trajectory("y")], batch_id="t2")
    send(trainer, [signals("y", 0)], "d1")
    assert not PendingTokenSignals.objects.filter(run=run).exists()


def test_update_signals_that_do_not_count_the_steps_tokens_are_refused(trainer: Trainer, run: Any) -> None:
    trainer.trajectories(1, [trajectory("a")])
    send(trainer, [signals("a", 0)], "d1")
    assert send(trainer, [update_signals("a", 0, count=2)], "w1")["missing"] == 1
    assert sorted(signal_names(run, "a", 0)) == ["advantage", "kl"]

    uneven = update_signals("a", 0)
    uneven["token_signals"]["signals"]["clipped"] = TokenSignalsWire.of(None, {"clipped": [0.0]}).signals[
        "clipped"
    ]
    response = trainer.post(TOKEN_SIGNALS_PATH, {"batch_id": "w2", "steps": [uneven]})
    assert response.status_code == 400
    assert "all of one length" in response.content.decode()


def test_a_body_of_many_steps_is_answered_at_once_and_stored_by_a_worker(trainer: Trainer, run: Any) -> None:
    """The finding: 10,000 waiting token-signal steps held a web thread 4.7 s. Past SIGNALS_INLINE_STEPS
    the request only queues a job (no worker runs here, so nothing can have been stored in it)."""
    from webapp.experiments.jobs import Job, JobStatus
    from webapp.ingestion.api import SIGNALS_INLINE_STEPS
    from webapp.ingestion.tasks import store_token_signals_task

    assert trainer.trajectories(1, [trajectory("a")]).status_code == 200
    many = [signals("a", 0)] + [signals(f"late-{i}", 0) for i in range(SIGNALS_INLINE_STEPS)]
    answer = trainer.post(TOKEN_SIGNALS_PATH, {"batch_id": "big", "steps": many})
    assert answer.status_code == 202, answer.content
    job = Job.objects.get(pk=answer.json()["job"])
    assert job.status == JobStatus.QUEUED and stored(run, "a", 0).token_signals is None
    store_token_signals_task(job.pk)  # what the worker does
    job.refresh_from_db()
    assert (job.status, job.result["stored"], job.result["waiting"]) == ("done", 1, SIGNALS_INLINE_STEPS)
    assert stored(run, "a", 0).advantage == 0.5 and not job.folder.exists()
    store_token_signals_task(job.pk)  # a redelivered task: the job is claimed, nothing happens twice
    assert PendingTokenSignals.objects.filter(run=run).count() == SIGNALS_INLINE_STEPS


def test_a_body_of_more_steps_than_one_may_carry_is_413_before_anything_is_stored(
    trainer: Trainer, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding: a 400,000-step body took 17.9 s before its 400."""
    from webapp.ingestion import api as ingest

    monkeypatch.setattr(ingest, "SIGNALS_MAX_STEPS", 3)
    answer = trainer.post(TOKEN_SIGNALS_PATH, {"steps": [signals(f"t{i}", 0) for i in range(4)]})
    assert answer.status_code == 413 and "at most 3" in answer.json()["error"]
    assert not PendingTokenSignals.objects.exists()
    run.refresh_from_db()
    assert run.refused_records == 1  # the run page counts it, as every refused report


def test_a_large_body_refused_by_its_worker_is_counted_on_the_run_and_jobs_past_the_limit_are_429(
    trainer: Trainer, run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from webapp.experiments.jobs import Job, JobStatus
    from webapp.ingestion import api as ingest
    from webapp.ingestion.tasks import store_token_signals_task

    monkeypatch.setattr(ingest, "SIGNALS_INLINE_BYTES", 100)  # every body goes to a worker
    monkeypatch.setattr(ingest, "SIGNALS_MAX_STEPS", 1)
    body = {"steps": [signals("a", 0), signals("b", 0)]}
    job = Job.objects.get(pk=trainer.post(TOKEN_SIGNALS_PATH, body).json()["job"])
    store_token_signals_task(job.pk)
    job.refresh_from_db()
    run.refresh_from_db()
    assert job.status == JobStatus.FAILED and "at most 1" in job.message
    assert run.refused_records == 1 and "at most 1" in run.last_refusal
    for _ in range(ingest.SIGNALS_JOBS_PER_RUN):
        assert trainer.post(TOKEN_SIGNALS_PATH, body).status_code == 202
    refused = trainer.post(TOKEN_SIGNALS_PATH, body)
    assert refused.status_code == 429 and "jobs are running or queued already" in refused.json()["error"]
