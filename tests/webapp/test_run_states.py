from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from webapp.experiments.models import Experiment, Run, RunStatus


@pytest.fixture
def run(personas: Any) -> Run:
    experiment = Experiment.objects.create(
        team=personas["acme"], name="gsm8k grpo", task="gsm8k", preset="grpo"
    )
    return Run.objects.create(experiment=experiment, team=personas["acme"], seed=1)


def test_a_run_walks_the_happy_path(run: Run) -> None:
    assert run.enqueue()
    assert run.mark_starting("pgid:123")
    assert run.claim("host:1", "host-1")
    assert run.heartbeat(step=1, total_steps=10)
    assert (run.status, run.step, run.total_steps) == (RunStatus.RUNNING, 1, 10)
    assert run.finish(RunStatus.SUCCEEDED)
    assert run.status == RunStatus.SUCCEEDED and run.finished_at is not None


def test_the_step_counter_moves_forward_only(run: Run) -> None:
    """Step 6's metrics arrive before the beat that ends it; the beat for step 5, resent meanwhile,
    must not take the counter back (the runs table once showed 6, then 5, then 6)."""
    run.enqueue()
    run.mark_starting("pgid:123")
    run.claim("host:1", "host-1")
    assert run.heartbeat(step=5, total_steps=6)
    run.note_progress(6)
    assert run.heartbeat(step=5, total_steps=6)
    assert Run.objects.get(pk=run.pk).step == 6 and run.step == 6


def test_enqueue_twice_enqueues_once(run: Run) -> None:
    assert run.enqueue()
    assert not Run.objects.get(pk=run.pk).enqueue()


def test_only_one_process_claims_a_run(run: Run) -> None:
    run.enqueue()
    assert run.claim("host:1", "host-1")
    assert not Run.objects.get(pk=run.pk).claim("host:2", "host-2")
    assert Run.objects.get(pk=run.pk).claimed_by == "host:1"


def test_the_first_terminal_state_wins(run: Run) -> None:
    run.enqueue()
    run.claim("host:1", "host-1")
    assert run.finish(RunStatus.SUCCEEDED)
    assert not Run.objects.get(pk=run.pk).finish(RunStatus.FAILED, "reaper")
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED


def test_finish_refuses_a_non_terminal_status(run: Run) -> None:
    with pytest.raises(ValueError, match="terminal status"):
        run.finish(RunStatus.RUNNING)


def test_cancelling_a_queued_run_ends_it_at_once(run: Run) -> None:
    run.enqueue()
    assert run.request_cancel()
    assert run.status == RunStatus.CANCELLED
    assert not run.mark_starting("pgid:1")


def test_cancelling_a_running_run_only_asks(run: Run) -> None:
    run.enqueue()
    run.claim("host:1", "host-1")
    assert run.request_cancel()
    assert run.status == RunStatus.RUNNING and run.cancel_requested


def test_a_silent_run_is_stalled_and_a_heartbeat_revives_it(run: Run) -> None:
    run.enqueue()
    run.claim("host:1", "host-1")
    Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
    assert list(Run.silent_since(60)) == [run]
    assert run.mark_stalled("no heartbeat for 10 minutes", 60)
    assert run.status == RunStatus.STALLED
    assert run.heartbeat(step=2)
    assert run.status == RunStatus.RUNNING


def test_a_fresh_heartbeat_prevents_stalling(run: Run) -> None:
    run.enqueue()
    run.claim("host:1", "host-1")
    run.heartbeat(step=1)
    assert not run.mark_stalled("no heartbeat", 60)
    assert run.status == RunStatus.RUNNING


def test_a_run_token_finds_its_run_and_only_the_hash_is_kept(run: Run) -> None:
    token = run.issue_token()
    assert Run.for_token(token) == run
    assert token not in str(Run.objects.filter(pk=run.pk).values().get())
    assert Run.for_token(token + "x") is None
    assert Run.for_token("") is None


def test_a_cancelled_run_ends_cancelled_by_the_user_who_asked(run: Run, personas: Any) -> None:
    run.enqueue()
    run.claim("host:1", "host-1")
    assert run.request_cancel(by=personas["bob"])
    assert run.request_cancel(by=personas["alice"])  # the request stands; bob keeps his name on it
    # However the process ended (the trainer's SIGTERM report, a vanished process group), the user shows.
    assert run.finish(RunStatus.CANCELLED, "the training process disappeared (killed?) without an exit code")
    assert (run.status, run.message, run.cancelled_by) == (
        RunStatus.CANCELLED,
        "cancelled by bob",
        personas["bob"],
    )


def test_a_queued_run_cancelled_by_a_user_says_so(run: Run, personas: Any) -> None:
    run.enqueue()
    assert run.request_cancel(by=personas["alice"])
    assert (run.status, run.message) == (RunStatus.CANCELLED, "cancelled by alice before it started")


def test_a_run_nobody_cancelled_keeps_the_executors_message(run: Run) -> None:
    run.enqueue()
    run.claim("host:1", "host-1")
    assert run.finish(RunStatus.CANCELLED, "cancelled while the Ray job was still waiting for resources")
    assert run.message == "cancelled while the Ray job was still waiting for resources"
