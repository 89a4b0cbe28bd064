"""End to end: GRPO on SmolLM2-135M-Instruct through the CLI, on CPU, then a resume from its checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainer.contract import TIMING_CHECKPOINT_S
from trainer.models import smollm2_path

REPO = Path(__file__).resolve().parents[3]


def arithmetic_rows(count: int) -> list[dict[str, Any]]:
    rows = []
    for i in range(count):
        a, b = 3 + i, 4 + 2 * i
        rows.append({
            "data_source": "contains",
            "prompt": [{"role": "user", "content": f"What is {a} + {b}? Reply with the number only."}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"index": i, "split": "train"},
        })  # fmt: skip
    return rows


def run_cli(config_path: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "trainer", "run", str(config_path)]
    for item in sets:
        args += ["--set", item]
    # Passive OpenMP waits: on a shared machine, spinning threads that lose their core slow torch 10x.
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "2",
        "OMP_WAIT_POLICY": "PASSIVE",
        "TOKENIZERS_PARALLELISM": "false",
    }
    return subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def events(jsonl: Path, kind: str) -> list[dict[str, Any]]:
    return [line for line in map(json.loads, jsonl.read_text().splitlines()) if line["type"] == kind]


def step_metrics(jsonl: Path) -> list[int]:
    """The steps of the training steps' metric records; a checkpoint's save time comes as a record of
    its own at that step (docs/health.md#time-breakdown)."""
    return [e["step"] for e in events(jsonl, "metrics") if set(e["values"]) != {TIMING_CHECKPOINT_S}]


@pytest.mark.slow
def test_a_two_step_grpo_run_of_smollm2_checkpoints_and_resumes_through_the_cli(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(arithmetic_rows(8)), tmp_path / "train.parquet")
    jsonl = tmp_path / "events.jsonl"
    config = {
        "name": "e2e",
        "task": "contains",  # the rows' data_source; no recipe of that name adds its defaults
        "preset": "grpo",
        "model": {"path": str(smollm2_path())},
        "data": {"train_path": str(tmp_path / "train.parquet"), "max_prompt_length": 256, "max_response_length": 32},
        # 8 new tokens: a non-empty answer is all it checks; each one more is a SmolLM2 forward pass.
        "rollout": {"n": 2, "max_new_tokens": 8, "max_steps": 1},
        "optim": {"lr": 1e-6, "mini_batch_size": 4, "micro_batch_size": 4},
        "trainer": {
            "total_steps": 2, "batch_size": 2, "seed": 1, "device": "cpu", "num_threads": 2,
            "checkpoint_dir": str(tmp_path / "checkpoints"), "resume": True,
        },
        "report": {"jsonl_path": str(jsonl), "console": True},
    }  # fmt: skip
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(config))

    first = run_cli(config_path)
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoint = tmp_path / "checkpoints" / "step_00000002"
    assert (checkpoint / "policy" / "model.safetensors").is_file()
    assert (checkpoint / "policy" / "tokenizer.json").is_file()
    assert step_metrics(jsonl) == [1, 2]
    assert [e["status"] for e in events(jsonl, "status")] == ["running", "succeeded"]
    trajectories = events(jsonl, "trajectories")[0]["trajectories"]
    assert len(trajectories) == 4 and trajectories[0]["steps"][0]["response_text"]

    assert (checkpoint / "optimizer.pt").is_file()  # a resumable run keeps what resuming needs
    second = run_cli(config_path, "trainer.total_steps=3")
    assert second.returncode == 0, second.stderr[-3000:]
    assert step_metrics(jsonl) == [1, 2, 3]  # the step counter continues
    assert (tmp_path / "checkpoints" / "step_00000003" / "policy" / "model.safetensors").is_file()
    # Saved at 2 and 3; then 2 deleted, as the default trainer.keep_checkpoints = 1 keeps the last one only.
    assert [(e["step"], e.get("deleted", False)) for e in events(jsonl, "checkpoint")] == [
        (2, False),
        (3, False),
        (2, True),
    ]
    assert "resumed: continuing at step 3 of 3" in second.stderr
