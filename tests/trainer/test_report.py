"""Reporters: the JSONL file, and the HTTP reporter against a real HTTP server on loopback."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from loopback import RUN_ID, TOKEN, LoopbackServer, Recorded, Recorder, free_port, wait_until

from trainer.contract import (
    CLAIMANT_HEADER,
    IDEMPOTENCY_HEADER,
    MetricBatch,
    StatusUpdate,
    TrajectoryBatch,
    TrajectoryWire,
)
from trainer.mdp import Step, ToolCallRecord, Trajectory
from trainer.report.client import RunApiClient
from trainer.report.http import HttpReporter
from trainer.report.reporters import (
    ConsoleReporter,
    JsonlReporter,
    MemoryReporter,
    MultiReporter,
    Reporter,
    read_jsonl,
)
from trainer.report.retry import POLICY, PermanentHttpError, RetryPolicy


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def server(recorder: Recorder) -> Iterator[LoopbackServer]:
    running = LoopbackServer(recorder).start()
    yield running
    running.stop()


@pytest.fixture
def down_server(recorder: Recorder) -> Iterator[LoopbackServer]:
    """A server on a port where nothing listens yet: call start() to bring it up."""
    stopped = LoopbackServer(recorder, free_port())
    yield stopped
    stopped.stop()


def make_reporter(url: str, spool: Path, **kwargs: Any) -> HttpReporter:
    options: dict[str, Any] = {
        "spool_dir": spool,
        "flush_interval_s": 3600.0,  # batches are cut by count and by close() unless a test says otherwise
        "heartbeat_interval_s": 3600.0,
        "backoff_initial_s": 0.02,
        "backoff_max_s": 0.1,
        "request_timeout_s": 5.0,
        "close_timeout_s": 20.0,
    }
    options.update(kwargs)
    return HttpReporter(url, RUN_ID, TOKEN, **options)


def a_trajectory(index: int = 0) -> Trajectory:
    call = ToolCallRecord(name="calculator", arguments={"expr": "2+2"}, result="4", latency_s=0.01)
    bad = ToolCallRecord(name="", arguments="{not json", error="malformed")
    return Trajectory(
        id=f"traj-{index}",
        group_id="prompt-1",
        sample_index=3,
        rollout_index=index,
        data_source="gsm8k",
        ground_truth="4",
        steps=[
            Step(
                prompt_ids=[1, 2, 3],
                response_ids=[4, 5],
                response_mask=[1, 1],
                rollout_log_probs=[-0.5, -0.25],
                reward=None,
                prompt_text="What is 2+2?",
                response_text='<tool_call>{"name": "calculator"}</tool_call>',
                tool_calls=[call, bad],
                info={"tuple": (1, 2)},
                advantage=0.5,
            ),
            Step(
                prompt_ids=[1, 2, 3, 6],
                response_ids=[7],
                response_mask=[1],
                reward=1.0,
                done=True,
                prompt_text="...",
                response_text="4",
            ),
        ],
        metrics={"num_steps": 2},
    )


# -- wire schema ----------------------------------------------------------------------------------


def test_a_trajectory_becomes_its_wire_model_with_texts_and_tool_calls() -> None:
    wire = TrajectoryWire.from_trajectory(a_trajectory())

    assert [s.index for s in wire.steps] == [0, 1]
    assert wire.steps[0].response_text.startswith("<tool_call>")
    assert [c.error for c in wire.steps[0].tool_calls] == [None, "malformed"]
    assert wire.steps[0].tool_calls[0].arguments == {"expr": "2+2"}
    assert wire.steps[0].info == {"tuple": [1, 2]}
    assert wire.steps[0].num_prompt_tokens == 3 and wire.steps[0].num_response_tokens == 2
    assert wire.steps[0].prompt_ids is None  # token ids only on request
    assert wire.total_reward == 1.0
    assert wire.steps[1].reward == 1.0 and wire.steps[1].done


def test_a_trajectory_carries_token_ids_when_asked() -> None:
    wire = TrajectoryWire.from_trajectory(a_trajectory(), include_token_ids=True)

    assert wire.steps[0].prompt_ids == [1, 2, 3]
    assert wire.steps[0].rollout_log_probs == [-0.5, -0.25]


def test_a_nan_metric_survives_the_wire() -> None:
    batch = MetricBatch.model_validate(
        {"points": [{"key": "actor/pg_loss", "step": 1, "value": math.nan, "ts": 0.0}]}
    )

    again = MetricBatch.model_validate_json(batch.model_dump_json())

    assert math.isnan(again.points[0].value)


# -- JSONL, console, memory, multi -----------------------------------------------------------------


def test_the_jsonl_reporter_writes_one_line_per_event_in_order(tmp_path: Path) -> None:
    path = tmp_path / "out" / "run.jsonl"
    reporter = JsonlReporter(path)
    reporter.set_status("running")
    reporter.log_metrics(1, {"reward/mean": 0.5, "actor/pg_loss": math.nan})
    reporter.log_trajectories(1, [a_trajectory()])
    reporter.heartbeat(1, 10)
    reporter.log_text("hello\n")
    reporter.log_checkpoint(1, "/ckpt/step-1", {"reward/mean": 0.5})
    reporter.close()

    lines = read_jsonl(path)
    assert [line["type"] for line in lines] == [
        "status",
        "metrics",
        "trajectories",
        "heartbeat",
        "log",
        "checkpoint",
    ]
    assert lines[0]["status"] == "running"
    assert lines[1]["step"] == 1 and lines[1]["values"] == {"reward/mean": 0.5, "actor/pg_loss": "NaN"}
    batch = TrajectoryBatch.model_validate({k: v for k, v in lines[2].items() if k not in ("type", "ts")})
    assert batch.training_step == 1 and batch.trajectories[0].steps[1].response_text == "4"
    assert lines[3]["step"] == 1 and lines[3]["total_steps"] == 10
    assert lines[4]["text"] == "hello\n"
    assert lines[5]["path"] == "/ckpt/step-1"
    assert all(isinstance(line["ts"], float) for line in lines)


def test_the_jsonl_reporter_appends_to_an_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    for step in (1, 2):
        with JsonlReporter(path) as reporter:
            reporter.log_metrics(step, {"reward/mean": float(step)})

    assert [line["step"] for line in read_jsonl(path)] == [1, 2]


def test_the_console_reporter_logs_a_summary_line_per_step(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="trainer.console"):
        ConsoleReporter().log_metrics(3, {"reward/mean": 0.25, "val/gsm8k/acc": 0.5, "timing/update_s": 9.0})

    assert "step 3" in caplog.text
    assert "reward/mean=0.25" in caplog.text and "val/gsm8k/acc=0.5" in caplog.text
    assert "timing/update_s" not in caplog.text


def test_the_multi_reporter_closes_every_reporter_even_when_one_fails() -> None:
    class Broken(MemoryReporter):
        def close(self) -> None:
            raise OSError("disk gone")

    first, last = Broken(), MemoryReporter()
    multi = MultiReporter([first, last])
    multi.log_metrics(1, {"reward/mean": 1.0})

    with pytest.raises(OSError, match="disk gone"):
        multi.close()
    assert last.closed
    assert first.series("reward/mean") == last.series("reward/mean") == [(1, 1.0)]


def test_every_reporter_is_a_reporter() -> None:
    assert issubclass(HttpReporter, Reporter) and issubclass(JsonlReporter, Reporter)


# -- HTTP reporter ----------------------------------------------------------------------------------


def test_it_batches_metrics_by_count_and_gzips_bodies_that_decode_to_the_schema(
    server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    reporter = make_reporter(server.url, tmp_path / "spool", max_batch_points=6)
    for step in range(5):
        reporter.log_metrics(step, {"a": step, "b": step * 2, "c": step * 3})
    reporter.close()

    posts = recorder.posts("/metrics")
    assert all(r.path == f"/api/ingest/runs/{RUN_ID}/metrics" for r in posts)
    assert all(r.headers["Content-Encoding"] == "gzip" for r in posts)
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in posts)
    batches = [MetricBatch.model_validate(r.body) for r in posts]
    assert [len(b.points) for b in batches] == [6, 6, 3]
    assert [(p.step, p.key) for b in batches for p in b.points] == [
        (step, key) for step in range(5) for key in "abc"
    ]
    assert [r.headers[IDEMPOTENCY_HEADER] for r in posts] == [b.batch_id for b in batches]
    assert len({b.batch_id for b in batches}) == 3
    assert reporter.undelivered() == 0


def test_it_flushes_a_partial_batch_after_the_flush_interval(
    server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    reporter = make_reporter(server.url, tmp_path / "spool", flush_interval_s=0.05)
    reporter.log_metrics(1, {"reward/mean": 0.5})

    wait_until(lambda: len(recorder.posts("/metrics")) == 1, "the time-based flush")
    assert MetricBatch.model_validate(recorder.posts("/metrics")[0].body).points[0].value == 0.5
    reporter.close()


def test_it_sends_every_kind_of_event_to_its_endpoint_in_order(
    server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    reporter = make_reporter(server.url, tmp_path / "spool", max_trajectories_per_batch=2)
    reporter.set_status("running")
    reporter.log_metrics(1, {"reward/mean": 0.5})
    reporter.log_text("line one\n")
    reporter.log_trajectories(1, [a_trajectory(i) for i in range(3)])
    reporter.log_checkpoint(1, "/ckpt/1", {"reward/mean": 0.5})
    reporter.set_status("succeeded", progress=1.0)
    reporter.close()

    kinds = [r.path.rsplit("/", 1)[1] for r in recorder.requests]
    assert kinds == ["status", "metrics", "logs", "trajectories", "trajectories", "checkpoints", "status"]
    statuses = [StatusUpdate.model_validate(r.body) for r in recorder.posts("/status")]
    assert [(s.status, s.progress) for s in statuses] == [("running", None), ("succeeded", 1.0)]
    trajectories = [TrajectoryBatch.model_validate(r.body) for r in recorder.posts("/trajectories")]
    assert [[t.id for t in b.trajectories] for b in trajectories] == [["traj-0", "traj-1"], ["traj-2"]]
    assert trajectories[0].trajectories[0].steps[0].tool_calls[1].error == "malformed"
    assert recorder.posts("/logs")[0].body["text"] == "line one\n"
    assert recorder.posts("/checkpoints")[0].body["path"] == "/ckpt/1"
    assert all(r.body["batch_id"] == r.headers[IDEMPOTENCY_HEADER] for r in recorder.requests)


def test_it_sends_heartbeats_without_spooling_them(
    server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    reporter = make_reporter(server.url, tmp_path / "spool")
    reporter.heartbeat(3, 10)

    wait_until(lambda: len(recorder.posts("/heartbeat")) == 1, "the heartbeat")
    beat = recorder.posts("/heartbeat")[0]
    assert (beat.body["step"], beat.body["total_steps"]) == (3, 10)
    assert beat.headers["Authorization"] == f"Bearer {TOKEN}"
    reporter.close()


def test_batches_spooled_while_the_server_is_away_are_replayed_in_order_when_it_returns(
    down_server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    reporter = make_reporter(down_server.url, spool, max_batch_points=1)
    for step in range(5):
        reporter.log_metrics(step, {"reward/mean": step / 10})
    reporter.set_status("running", "after five metrics")

    assert reporter.undelivered() == 6  # nothing could be sent; everything waits on disk
    down_server.start()
    reporter.close()

    assert reporter.undelivered() == 0
    kinds = [r.path.rsplit("/", 1)[1] for r in recorder.requests]
    assert kinds == ["metrics"] * 5 + ["status"]
    steps = [MetricBatch.model_validate(r.body).points[0].step for r in recorder.posts("/metrics")]
    assert steps == [0, 1, 2, 3, 4]
    keys = [r.headers[IDEMPOTENCY_HEADER] for r in recorder.requests]
    assert len(set(keys)) == 6  # each batch delivered exactly once


def test_a_later_process_replays_what_an_earlier_one_left_in_the_spool_first(
    down_server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    earlier = make_reporter(down_server.url, spool, max_batch_points=1)
    earlier.log_metrics(0, {"reward/mean": 0.0})
    earlier.log_metrics(1, {"reward/mean": 0.1})
    earlier.close(timeout=0.2)  # the server is away: the batches stay on disk
    assert earlier.undelivered() == 2
    left_ids = [p.name.split(".")[2] for p in sorted(spool.glob("*.json.gz"))]

    down_server.start()
    later = make_reporter(down_server.url, spool, max_batch_points=1)
    later.log_metrics(2, {"reward/mean": 0.2})
    later.close()

    posts = recorder.posts("/metrics")
    assert [MetricBatch.model_validate(r.body).points[0].step for r in posts] == [0, 1, 2]
    assert [r.headers[IDEMPOTENCY_HEADER] for r in posts[:2]] == left_ids


def test_a_batch_retried_after_a_server_error_keeps_its_idempotency_key(
    server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    seen: set[str] = set()

    def fail_first_try(request: Recorded) -> tuple[int, dict[str, str]]:
        key = request.headers[IDEMPOTENCY_HEADER]
        if key in seen:
            return 200, {}
        seen.add(key)
        return 503, {}  # as if the server stored it and then fell over before answering

    recorder.answer = fail_first_try
    reporter = make_reporter(server.url, tmp_path / "spool", max_batch_points=1)
    reporter.log_metrics(1, {"reward/mean": 0.1})
    reporter.log_metrics(2, {"reward/mean": 0.2})
    reporter.close()

    posts = recorder.posts("/metrics")
    keys = [r.headers[IDEMPOTENCY_HEADER] for r in posts]
    assert len(posts) == 4 and keys[0] == keys[1] and keys[2] == keys[3] and keys[0] != keys[2]
    assert [r.body["batch_id"] for r in posts] == keys
    assert posts[0].raw == posts[1].raw  # the replay is the very same body
    assert reporter.undelivered() == 0


def test_it_waits_as_told_by_a_429_and_then_delivers(
    server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    answers = iter([(429, {"Retry-After": "0"}), (200, {})])
    recorder.answer = lambda request: next(answers)
    reporter = make_reporter(server.url, tmp_path / "spool")
    reporter.set_status("running")
    reporter.close()

    assert len(recorder.posts("/status")) == 2
    assert reporter.undelivered() == 0


def test_a_batch_the_server_refuses_is_set_aside_and_the_rest_still_go(
    server: LoopbackServer, recorder: Recorder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder.answer = lambda request: (422, {}) if request.body.get("message") == "bad" else (200, {})
    spool = tmp_path / "spool"
    reporter = make_reporter(server.url, spool)
    reporter.set_status("running", "bad")
    reporter.set_status("running", "good")
    with caplog.at_level(logging.ERROR, logger="trainer.report"):
        reporter.close()

    assert [r.body["message"] for r in recorder.posts("/status")] == ["bad", "good"]  # one try each
    rejected = list((spool / "rejected").iterdir())
    assert len(rejected) == 1 and ".status." in rejected[0].name
    assert reporter.undelivered() == 0
    assert "refused" in caplog.text and "422" in caplog.text


def test_close_gives_up_at_its_deadline_and_leaves_the_batches_on_disk(
    down_server: LoopbackServer, tmp_path: Path
) -> None:
    reporter = make_reporter(down_server.url, tmp_path / "spool")
    reporter.set_status("failed", "boom")
    reporter.close(timeout=0.3)

    assert reporter.undelivered() == 1


# -- reads: config and dataset -----------------------------------------------------------------------


def test_the_api_client_downloads_a_split_with_the_bearer_token(
    server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    payload = b"PAR1" + bytes(range(256)) * 100 + b"PAR1"
    recorder.files[f"/api/runs/{RUN_ID}/dataset/train"] = payload

    with RunApiClient(server.url, RUN_ID, TOKEN) as api:
        train = api.download_dataset("train", tmp_path / "data")
        val = api.download_dataset("val", tmp_path / "data")

    assert train is not None and train.read_bytes() == payload
    assert val is None  # the run has no val split
    assert not list((tmp_path / "data").glob("*.part"))


def test_the_api_client_fails_at_once_on_a_wrong_token(server: LoopbackServer, tmp_path: Path) -> None:
    with RunApiClient(server.url, RUN_ID, "wrong") as api, pytest.raises(PermanentHttpError) as error:
        api.fetch_config_json()

    assert error.value.status_code == 401


# -- one retry policy -----------------------------------------------------------------------------


def test_the_claim_outlasts_a_server_answering_503_as_long_as_the_reporter_would(
    server: LoopbackServer, recorder: Recorder, tmp_path: Path
) -> None:
    # The old claim gave up after 5 tries (about 7.5 s); one policy now bounds it by time, like the
    # reporter's own retries (docs/reliability.md#retries).
    recorder.answer = lambda request: (503, {}) if len(recorder.posts("/claim")) <= 12 else (200, {})
    fast = RetryPolicy(initial_s=0.01, max_s=0.02, give_up_after_s=POLICY.give_up_after_s)
    with RunApiClient(server.url, RUN_ID, TOKEN, retry=fast) as api:
        assert api.claim("host:1", "claimant-1")
    claims = recorder.posts("/claim")
    assert len(claims) == 13 and {c.body["claimant"] for c in claims} == {"claimant-1"}

    recorder.answer = lambda request: (409, {})  # another process owns the run: no retry changes that
    with RunApiClient(server.url, RUN_ID, TOKEN, retry=fast) as api:
        assert not api.claim("host:2", "claimant-2")
    assert len(recorder.posts("/claim")) == 14

    reporter = make_reporter(server.url, tmp_path / "spool", claimant="claimant-1")
    reporter.set_status("running", "training")
    reporter.close(timeout=5)
    (status,) = recorder.posts("/status")
    headers = {name.lower(): value for name, value in status.headers.items()}
    assert headers[CLAIMANT_HEADER.lower()] == "claimant-1"  # every later call carries the claimant
