"""The wire models refuse or normalise what Postgres cannot store (docs/security.md#limits)."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from trainer.contract import (
    INT4_MAX,
    JSON_MAX_DEPTH,
    CheckpointRecord,
    Heartbeat,
    LogChunk,
    MetricBatch,
    StepWire,
    ToolCallWire,
    TrajectoryBatch,
    TrajectoryWire,
)


def trajectory(**fields: object) -> dict[str, object]:
    return {"id": "t0", "group_id": "g0", "sample_index": 0, **fields}


def test_nan_and_infinity_in_json_fields_become_null_and_metric_points_keep_them() -> None:
    wire = TrajectoryWire.model_validate(
        trajectory(
            metrics={"acc": math.nan, "f1": math.inf, "ok": 0.5},
            info={"loss": -math.inf, "nested": [math.nan, {"x": math.inf}]},
            steps=[{"index": 0, "timings": {"gen": math.nan}, "rollout_log_probs": [-math.inf, -0.5]}],
        )
    )
    assert wire.metrics == {"acc": None, "f1": None, "ok": 0.5}
    assert wire.info == {"loss": None, "nested": [None, {"x": None}]}
    assert (wire.steps[0].timings, wire.steps[0].rollout_log_probs) == ({"gen": None}, [None, -0.5])
    checkpoint = CheckpointRecord(step=1, path="/x", metrics={"val/acc": math.nan})
    assert checkpoint.metrics == {"val/acc": None}
    batch = MetricBatch.model_validate_json(
        '{"points": [{"key": "actor/pg_loss", "step": 1, "value": "NaN", "ts": 1.0}]}'
    )
    assert math.isnan(batch.points[0].value)
    # What travels is plain JSON: the trainer's own serialisation parses back on the server.
    assert json.loads(TrajectoryBatch(training_step=0, trajectories=[wire]).model_dump_json())


def test_nul_characters_in_text_become_the_replacement_character() -> None:
    step = StepWire(index=0, prompt_text="a\x00b", response_text="\x00", info={"k\x00": "v\x00"})
    assert (step.prompt_text, step.response_text, step.info) == ("a\ufffdb", "\ufffd", {"k\ufffd": "v\ufffd"})
    assert LogChunk(seq=0, text="line\x00").text == "line\ufffd"


def test_identifiers_with_nul_or_over_their_column_are_refused_with_the_field() -> None:
    with pytest.raises(ValidationError, match=r"id\n  Value error, must not contain NUL"):
        TrajectoryWire.model_validate(trajectory(id="a\x00"))
    with pytest.raises(ValidationError, match=r"group_id\n  String should have at most 200 characters"):
        TrajectoryWire.model_validate(trajectory(group_id="g" * 201))
    with pytest.raises(ValidationError, match="data_source"):
        TrajectoryWire.model_validate(trajectory(data_source="d" * 101))
    with pytest.raises(ValidationError, match="batch_id"):
        MetricBatch(batch_id="b" * 65, points=[])
    with pytest.raises(ValidationError, match="key"):
        MetricBatch.model_validate({"points": [{"key": "a\x00", "step": 0, "value": 1.0, "ts": 0.0}]})


def test_model_written_text_is_cut_to_its_column() -> None:
    call = ToolCallWire(name="n" * 500, error="e" * 500)
    assert (len(call.name), len(call.error or "")) == (200, 100)
    assert len(StepWire(index=0, anchor="a" * 300).anchor or "") == 200


@pytest.mark.parametrize("value", [INT4_MAX + 1, 2**63, -1])
def test_integers_outside_an_integer_column_are_refused(value: int) -> None:
    with pytest.raises(ValidationError):
        Heartbeat(step=value, total_steps=1, ts=0.0)
    with pytest.raises(ValidationError):
        TrajectoryWire.model_validate(trajectory(sample_index=value))
    with pytest.raises(ValidationError):
        MetricBatch.model_validate({"points": [{"key": "k", "step": value, "value": 1.0, "ts": 0.0}]})
    assert Heartbeat(step=INT4_MAX, total_steps=INT4_MAX, ts=0.0).step == INT4_MAX


def test_two_steps_with_one_index_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"steps\[1\]\.index 0 appears twice"):
        TrajectoryWire.model_validate(trajectory(steps=[{"index": 0}, {"index": 0}]))


def test_json_nested_deeper_than_the_limit_is_refused() -> None:
    deep: object = "leaf"
    for _ in range(JSON_MAX_DEPTH + 2):
        deep = [deep]
    with pytest.raises(ValidationError, match="nested deeper than"):
        TrajectoryWire.model_validate(trajectory(info={"deep": deep}))
