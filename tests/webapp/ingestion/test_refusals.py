"""One bad record never holds back the others (docs/security.md#refusals), and NaN never costs data."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

from trainer.mdp import Step, Trajectory
from trainer.report.client import RunApiClient
from trainer.report.http import HttpReporter
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion.metrics_store import forget_cached_keys
from webapp.ingestion.models import Checkpoint, LogChunk, MetricPoint
from webapp.ingestion.models import Trajectory as StoredTrajectory


def _trajectory(k: int) -> Trajectory:
    step = Step(prompt_ids=[1], response_ids=[2], response_mask=[1], prompt_text="q\x00", response_text="a",
                reward=1.0, done=True, timings={"gen_s": math.nan})  # fmt: skip
    return Trajectory(
        id=f"t{k}", group_id="g", sample_index=0, rollout_index=k, data_source="gsm8k",
        metrics={"acc": math.nan, "f1": math.inf}, steps=[step],
    )  # fmt: skip


def test_a_refused_batch_is_dropped_and_counted_and_nan_anywhere_loses_nothing(
    live_server: Any, transactional_db: Any, personas: Any, tmp_path: Path
) -> None:
    forget_cached_keys()
    experiment = Experiment.objects.create(team=personas["acme"], name="nan", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=personas["acme"], seed=0)
    run.enqueue()
    token = run.issue_token()
    with RunApiClient(live_server.url, run.pk, token) as client:
        assert client.claim("host:1", "claimant-1")
    spool = tmp_path / "spool"
    spool.mkdir()
    # A batch left by an older trainer that the server refuses (a step past the integer column): it
    # comes first in the spool, as a poisoned batch would.
    bad = {"batch_id": "bad", "points": [{"key": "reward/mean", "step": 2**31, "value": 1.0, "ts": 1.0}]}
    (spool / "000000000000.metrics.0bad.json.gz").write_bytes(gzip.compress(json.dumps(bad).encode()))
    reporter = HttpReporter(
        live_server.url, run.pk, token, claimant="claimant-1", spool_dir=spool, flush_interval_s=0.1
    )
    for step in range(6):
        reporter.log_metrics(step, {"reward/mean": step / 5, "actor/pg_loss": math.nan})
    reporter.log_trajectories(5, [_trajectory(k) for k in range(2)])
    reporter.log_checkpoint(5, "/tmp/ckpt-5", {"val/acc": math.nan})
    reporter.log_text("after the NaN\n")
    reporter.set_status("succeeded")
    reporter.close(timeout=60)

    assert (reporter.undelivered(), reporter.rejected) == (0, 1)
    assert [p.name for p in (spool / "rejected").iterdir()] == ["000000000000.metrics.0bad.json.gz"]
    run.refresh_from_db()
    assert (run.status, run.refused_records) == (RunStatus.SUCCEEDED, 1)
    assert "step" in run.last_refusal and "2147483647" in run.last_refusal
    assert MetricPoint.objects.filter(run=run, key__name="reward/mean").count() == 6
    assert all(math.isnan(p.value) for p in MetricPoint.objects.filter(run=run, key__name="actor/pg_loss"))
    stored = StoredTrajectory.objects.get(run=run, uid="t0")
    assert stored.metrics == {"acc": None, "f1": None}
    assert stored.steps.get().timings == {"gen_s": None}
    assert Checkpoint.objects.get(run=run).metrics == {"val/acc": None}
    assert LogChunk.objects.get(run=run).text == "after the NaN\n"
