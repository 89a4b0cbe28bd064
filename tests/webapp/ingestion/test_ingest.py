from __future__ import annotations

import random
from typing import Any

import pytest
from django.db import connection

from tests.webapp.trainer_posts import Trainer, points, trajectory
from trainer.contract import CHECKPOINTS_PATH, CLAIM_PATH, HEARTBEAT_PATH, LOGS_PATH, STATUS_PATH
from webapp.ingestion.metrics_store import rebuild_summaries
from webapp.ingestion.models import (
    Checkpoint,
    LogChunk,
    MetricLatest,
    MetricPoint,
    MetricSummary,
    TextBlob,
    ToolCall,
    Trajectory,
    TrajectoryStep,
)


def _table(name: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT * FROM {name} ORDER BY 1, 2, 3, 4")
        return cursor.fetchall()


def _snapshot() -> dict[str, list[tuple[Any, ...]]]:
    return {t: _table(t) for t in ("results_metricpoint", "results_metricsummary", "results_metriclatest")}


def test_a_batch_of_ten_thousand_gzipped_points_is_stored(trainer: Trainer, run: Any) -> None:
    response = trainer.metrics(points([f"k/{i}" for i in range(20)], range(500)))
    assert response.status_code == 200, response.content
    assert response.json() == {"stored": 10_000, "skipped": 0, "duplicate": False}
    assert MetricPoint.objects.filter(run=run).count() == 10_000
    latest = MetricLatest.objects.get(run=run, key__name="k/3")
    assert (latest.step, latest.value) == (499, 499 * 0.5 + 3)


def test_replaying_a_batch_leaves_the_same_rows(trainer: Trainer) -> None:
    batch = points(["reward/mean", "actor/kl"], range(100))
    assert trainer.metrics(batch, batch_id="same").status_code == 200
    before = _snapshot()
    again = trainer.metrics(batch, batch_id="same")
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert _snapshot() == before


def test_points_replayed_under_a_new_batch_id_are_skipped(trainer: Trainer) -> None:
    assert trainer.metrics(points(["reward/mean"], range(100)), batch_id="a").json()["stored"] == 100
    response = trainer.metrics(points(["reward/mean"], range(50, 150), value=99.0), batch_id="b")
    assert response.json() == {"stored": 50, "skipped": 50, "duplicate": False}
    rows = dict(MetricPoint.objects.filter(key__name="reward/mean").values_list("step", "value"))
    assert rows[60] == 30.0 and rows[120] == 99.0  # the first value logged for a step stays
    top = MetricSummary.objects.get(level=3, bucket=0)
    assert (top.n, top.max_value, top.max_step) == (150, 99.0, 100)


def test_a_batch_of_points_all_stored_before_under_a_new_batch_id_stores_nothing(trainer: Trainer) -> None:
    assert trainer.metrics(points(["reward/mean"], range(100)), batch_id="a").json()["stored"] == 100
    before = _snapshot()
    response = trainer.metrics(points(["reward/mean"], range(100), value=5.0), batch_id="b")
    assert response.status_code == 200 and response.json() == {
        "stored": 0,
        "skipped": 100,
        "duplicate": False,
    }
    assert _snapshot() == before


def test_a_batch_with_a_bad_point_is_rejected_whole(trainer: Trainer) -> None:
    batch = points(["reward/mean"], range(10))
    batch[7]["value"] = "not a number"
    response = trainer.metrics(batch)
    assert response.status_code == 400
    assert "point 7 (key 'reward/mean', step 7)" in response.json()["error"]
    assert MetricPoint.objects.count() == 0 and _snapshot()["results_metricsummary"] == []
    # The batch id was not used up: the corrected batch goes in under the same id.
    batch[7]["value"] = 1.0
    assert trainer.metrics(batch).json()["stored"] == 10


def test_a_step_the_table_cannot_hold_is_named(trainer: Trainer) -> None:
    batch = points(["a"], range(3))
    batch[2]["step"] = 2**31
    response = trainer.metrics(batch)
    assert response.status_code == 400 and "point 2 (key 'a', step 2147483648)" in response.json()["error"]
    assert MetricPoint.objects.count() == 0


def test_nan_values_are_stored_but_left_out_of_the_summaries(trainer: Trainer) -> None:
    batch = points(["actor/pg_loss"], range(4))
    batch[1]["value"] = "NaN"
    assert trainer.metrics(batch, compress=False).status_code == 200
    assert MetricPoint.objects.count() == 4
    assert MetricSummary.objects.get(level=1).n == 3


def test_a_failing_health_check_costs_the_batch_nothing(
    trainer: Trainer, run: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from webapp.monitoring import health

    def broken(*_args: Any) -> None:
        raise RuntimeError("a check's bug")

    monkeypatch.setattr(health, "observe", broken)
    assert trainer.metrics(points(["actor/entropy"], range(3))).status_code == 200
    assert MetricPoint.objects.count() == 3
    run.refresh_from_db()
    assert run.step == 2  # the progress after the failed savepoint is kept too
    assert "health checks of run" in caplog.text


def test_summaries_kept_as_points_arrive_equal_a_rebuild(trainer: Trainer, run: Any) -> None:
    rng = random.Random(7)
    steps = list(range(3000))
    rng.shuffle(steps)
    for n, start in enumerate(range(0, 3000, 700)):
        chunk = [{"key": "r", "step": s, "value": rng.choice([0.0, 1.0, rng.random()]), "ts": 1.0 + s}
                 for s in steps[start : start + 700]]  # fmt: skip
        assert trainer.metrics(chunk, batch_id=f"c{n}").status_code == 200
    incremental = _snapshot()
    rebuild_summaries(run.pk)
    assert _snapshot() == incremental


def test_a_token_for_another_run_is_a_404_and_no_token_a_401(trainer: Trainer, experiment: Any) -> None:
    from webapp.experiments.models import Run

    other = Run.objects.create(experiment=experiment, team=experiment.team)
    other_token = other.issue_token()
    assert trainer.metrics(points(["a"], range(2)), token=other_token).status_code == 404
    response = trainer.client.post(
        f"/api/ingest/runs/{trainer.run_id}/metrics", b"{}", content_type="application/json"
    )
    assert response.status_code == 401 and "error" in response.json()
    assert trainer.metrics(points(["a"], range(2)), token="r1_wrong").status_code == 401
    assert MetricPoint.objects.count() == 0


def test_trajectories_are_stored_with_every_step_once(trainer: Trainer, run: Any) -> None:
    long_response = "think " * 500
    batch = [trajectory(f"s3-p0-s{k}", "s3-p0", float(k % 2), response=long_response) for k in range(4)]
    assert trainer.trajectories(3, batch).json() == {
        "stored": 4,
        "skipped": 0,
        "dropped": 0,
        "duplicate": False,
    }
    assert trainer.trajectories(3, batch).json()["duplicate"] is True
    assert trainer.trajectories(3, batch, batch_id="t2").json() == {
        "stored": 0,
        "skipped": 4,
        "dropped": 0,
        "duplicate": False,
    }
    assert Trajectory.objects.filter(run=run).count() == 4
    assert TrajectoryStep.objects.filter(trajectory__run=run).count() == 8
    assert ToolCall.objects.filter(run=run).count() == 4
    blob = TextBlob.objects.get(sha256=TextBlob.digest(long_response))
    assert blob.compressed and len(bytes(blob.data)) < blob.size and blob.text == long_response
    assert TextBlob.objects.count() == 5  # two prompts, two responses, one tool result: stored once
    winner = Trajectory.objects.get(uid="s3-p0-s1")
    assert winner.success and winner.training_step == 3 and winner.num_tool_calls == 1


def test_status_heartbeat_logs_and_checkpoints_reach_the_run(trainer: Trainer, run: Any) -> None:
    run.enqueue()
    assert trainer.post(CLAIM_PATH, {"worker": "host:1", "claimant": trainer.claimant}).status_code == 200
    assert trainer.post(STATUS_PATH, {"batch_id": "s1", "status": "running"}).status_code == 200
    run.refresh_from_db()
    assert run.status == "running"
    response = trainer.post(HEARTBEAT_PATH, {"step": 5, "total_steps": 10, "ts": 1.0})
    assert response.status_code == 200 and response.json()["cancel_requested"] is False
    run.refresh_from_db()
    assert (run.step, run.total_steps) == (5, 10)
    for _ in range(2):
        assert trainer.post(LOGS_PATH, {"batch_id": "l0", "seq": 0, "text": "hello\n"}).status_code == 200
        assert (
            trainer.post(CHECKPOINTS_PATH, {"batch_id": "c0", "step": 5, "path": "/ckpt/5"}).status_code
            == 200
        )
    assert list(LogChunk.objects.filter(run=run).values_list("text", flat=True)) == ["hello\n"]
    assert Checkpoint.objects.filter(run=run).count() == 1
    assert (
        trainer.post(STATUS_PATH, {"batch_id": "s2", "status": "succeeded", "message": "done"}).status_code
        == 200
    )
    # The token died with the run (docs/security.md#run-tokens): nothing after the final status lands.
    assert trainer.post(STATUS_PATH, {"batch_id": "s3", "status": "failed"}).status_code == 401
    run.refresh_from_db()
    assert (run.status, run.message) == ("succeeded", "done")
    assert trainer.post(HEARTBEAT_PATH, {"step": 6, "total_steps": 10, "ts": 2.0}).status_code == 401


def test_a_verl_key_is_stored_under_ours_as_well(trainer: Trainer, run: Any) -> None:
    batch = points(["critic/score/mean", "val-core/gsm8k/acc/mean@4", "timing_s/gen"], range(3))
    assert trainer.metrics(batch).status_code == 200
    stored = dict(MetricLatest.objects.filter(run=run).values_list("key__name", "value"))
    assert stored["reward/mean"] == stored["critic/score/mean"] == 2 * 0.5
    assert stored["val/gsm8k/acc"] == stored["val-core/gsm8k/acc/mean@4"]
    assert stored["timing/rollout_s"] == stored["timing_s/gen"]
    assert MetricPoint.objects.filter(run=run, key__name="reward/mean").count() == 3
    top = MetricSummary.objects.get(run=run, key__name="reward/mean", level=1)
    assert (top.n, top.max_value) == (3, 1.0)


def test_a_replayed_log_chunk_keeps_the_first_text(trainer: Trainer, run: Any) -> None:
    first = trainer.post(LOGS_PATH, {"batch_id": "l0", "seq": 0, "text": "hello\n"})
    replay = trainer.post(LOGS_PATH, {"batch_id": "l0b", "seq": 0, "text": "changed\n"})
    assert first.json() == {"stored": 1, "duplicate": False}
    assert replay.status_code == 200 and replay.json() == {"stored": 0, "duplicate": True}
    assert list(LogChunk.objects.filter(run=run).values_list("seq", "text")) == [(0, "hello\n")]


def test_the_migration_copies_verl_points_stored_before_under_our_keys(run: Any) -> None:
    import importlib
    from types import SimpleNamespace

    from django.db.migrations.loader import MigrationLoader

    from webapp.ingestion import metrics_store

    migration = importlib.import_module("webapp.results.migrations.0003_verl_points_under_our_keys")
    # The models as that migration sees them (MetricKey was the results app's then).
    apps = MigrationLoader(connection).project_state(migration.Migration.dependencies[0]).apps
    verl = metrics_store.key_ids(["critic/score/mean"])["critic/score/mean"]
    # As ingestion stored them before it mapped verl's keys: only under verl's name.
    MetricPoint.objects.bulk_create(
        [MetricPoint(run=run, key_id=verl, step=s, value=s / 10, ts=1.0 + s) for s in range(3)]
    )
    metrics_store.rebuild_summaries(run.pk)
    for _ in range(2):  # a second pass adds nothing
        migration.copy_under_our_keys(apps, SimpleNamespace(connection=connection))
    ours = MetricPoint.objects.filter(run=run, key__name="reward/mean").order_by("step")
    assert list(ours.values_list("step", "value")) == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert MetricLatest.objects.get(run=run, key__name="reward/mean").value == 0.2
    assert MetricPoint.objects.filter(run=run, key_id=verl).count() == 3


def test_a_checkpoint_is_stored_with_its_size_and_one_the_trainer_deleted_stays_listed_as_deleted(
    trainer: Trainer, run: Any
) -> None:
    for step in (1, 2):
        body = {"batch_id": f"c{step}", "step": step, "path": f"/ck/{step}", "size_bytes": 1000 + step}
        assert trainer.post(CHECKPOINTS_PATH, body).status_code == 200
    gone = {"batch_id": "d1", "step": 1, "path": "/ck/1", "deleted": True}
    assert trainer.post(CHECKPOINTS_PATH, gone).status_code == 200

    rows = Checkpoint.objects.filter(run=run).values_list("step", "size_bytes", "deleted")
    assert list(rows) == [(1, 1001, True), (2, 1002, False)]


def test_deleting_a_run_removes_its_files_once_the_deletion_commits(
    run: Any, settings: Any, tmp_path: Any, django_capture_on_commit_callbacks: Any
) -> None:
    from webapp.experiments.run_files import checkpoint_dir

    settings.VAR_DIR = tmp_path
    folder = tmp_path / "runs" / str(run.pk)
    (folder / "checkpoints" / "step_00000001").mkdir(parents=True)
    (folder / "checkpoints" / "step_00000001" / "trainer_state.json").write_text("{}")
    assert checkpoint_dir(run).startswith(str(folder))
    other = tmp_path / "runs" / str(run.pk + 1)
    other.mkdir()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run.experiment.delete()  # the cascade reaches the run
        assert folder.is_dir()  # nothing goes before the commit
    for callback in callbacks:
        callback()

    assert not folder.exists() and other.is_dir()
