"""The trainer's own HttpReporter, posting to the live test server: everything arrives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainer.contract import StepSignalsWire, TokenSignalsWire
from trainer.mdp import Step, ToolCallRecord, Trajectory
from trainer.report.client import RunApiClient
from trainer.report.http import HttpReporter
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion.metrics_store import forget_cached_keys
from webapp.ingestion.models import Checkpoint, LogChunk, MetricLatest, MetricPoint, ToolCall, TrajectoryStep
from webapp.ingestion.models import Trajectory as StoredTrajectory
from webapp.ingestion.token_signals import unpack_token_signals


def _trajectory(step: int, k: int) -> Trajectory:
    call = ToolCallRecord(name="calc", arguments={"expr": "2+2"}, result="4", latency_s=0.02)
    return Trajectory(
        id=f"train-{step}-p0-s{k}",
        group_id=f"train-{step}-p0",
        sample_index=3,
        rollout_index=k,
        data_source="gsm8k",
        ground_truth="4",
        steps=[
            Step(prompt_ids=[1, 2], response_ids=[3], response_mask=[1], prompt_text="2+2?",
                 response_text="<tool_call>calc</tool_call>", reward=0.0, tool_calls=[call]),
            Step(prompt_ids=[1, 2, 3, 4], response_ids=[5, 6], response_mask=[1, 1], prompt_text="2+2? 4",
                 response_text="4", reward=float(k), done=True, advantage=k - 0.5),
        ],
    )  # fmt: skip


def test_the_http_reporter_delivers_everything_to_the_live_server(
    live_server: Any, transactional_db: Any, personas: Any, tmp_path: Path
) -> None:
    forget_cached_keys()
    experiment = Experiment.objects.create(team=personas["acme"], name="e2e", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=personas["acme"], seed=0)
    run.enqueue()
    token = run.issue_token()
    with RunApiClient(live_server.url, run.pk, token) as client:
        assert client.claim("host:1", "claimant-1")
    reporter = HttpReporter(
        live_server.url, run.pk, token, claimant="claimant-1", spool_dir=tmp_path / "spool", flush_interval_s=0.1,
        heartbeat_interval_s=0.1, max_batch_points=50,
    )  # fmt: skip
    reporter.set_status("running", "training")
    for step in range(30):
        reporter.log_metrics(
            step, {"reward/mean": step / 30, "actor/kl": 0.01 * step, "actor/pg_loss": float("nan")}
        )
        reporter.heartbeat(step, 30)
    reporter.log_trajectories(29, [_trajectory(29, k) for k in range(2)])
    reporter.log_token_signals(
        [StepSignalsWire(trajectory_id="train-29-p0-s1", step_index=1, advantage=0.5,
                         token_signals=TokenSignalsWire.of(["4", "."], {"advantage": [0.5, 0.5]}))]
    )  # fmt: skip
    reporter.log_text("step 29 done\n")
    reporter.log_checkpoint(29, "/tmp/ckpt-29", {"reward/mean": 0.97})
    reporter.set_status("succeeded", "finished")
    reporter.close(timeout=60)
    assert reporter.undelivered() == 0 and not (tmp_path / "spool" / "rejected").exists()
    run.refresh_from_db()
    assert (run.status, run.message, run.claimed_by) == (RunStatus.SUCCEEDED, "finished", "host:1")
    assert MetricPoint.objects.filter(run=run).count() == 90
    assert MetricLatest.objects.get(run=run, key__name="reward/mean").step == 29
    assert StoredTrajectory.objects.filter(run=run, training_step=29).count() == 2
    assert TrajectoryStep.objects.filter(trajectory__run=run).count() == 4
    signalled = TrajectoryStep.objects.get(trajectory__run=run, trajectory__uid="train-29-p0-s1", index=1)
    assert unpack_token_signals(bytes(signalled.token_signals)).signals == {"advantage": [0.5, 0.5]}
    assert ToolCall.objects.filter(run=run, name="calc").count() == 2
    assert LogChunk.objects.get(run=run).text == "step 29 done\n"
    assert Checkpoint.objects.get(run=run).path == "/tmp/ckpt-29"
