"""Per-token signals of a real tiny-model run: recorded inside the torch update, stored compactly,
rendered on the trajectory page with the values the update computed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from django.test import Client

from tests.webapp.trainer_posts import Trainer
from trainer.backends.torch import loop, update
from trainer.config import RunConfig
from trainer.contract import TRAJECTORIES_PATH, TrajectoryBatch, TrajectoryWire
from trainer.report.reporters import MemoryReporter
from webapp.ingestion.models import TrajectoryStep
from webapp.ingestion.token_signals import unpack_token_signals


def _rows_file(path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": "contains",
            "prompt": [{"role": "user", "content": f"Write something #{i}"}],
            "reward_model": {"style": "rule", "ground_truth": "a"},
            "extra_info": {"index": i},
        }
        for i in range(2)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


class UpdateSpy:
    """Records, at the seams of the actor update, what each micro-batch computed per token: the rows
    it trained on, the loss's inputs and its per-token outputs, and the entropy pass."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.expected: dict[int, dict[str, list[float]]] = {}
        self._pending: dict[str, torch.Tensor] = {}
        real_micro, real_losses_get = update.actor_micro_loss, update.POLICY_LOSSES.get
        real_entropy = update.log_probs_and_entropy
        real_kl = update.kl_penalty

        def kl(*args: Any, **kw: Any) -> Any:
            value = real_kl(*args, **kw)
            self._pending["kl"] = value.detach()
            return value

        def entropy(*args: Any, **kw: Any) -> Any:
            log_prob, token_entropy = real_entropy(*args, **kw)
            self._pending["entropy"] = token_entropy.detach()
            return log_prob, token_entropy

        def losses_get(name: str) -> Any:
            loss = real_losses_get(name)

            def recorded(inputs: Any, params: Any) -> Any:
                out = loss(inputs, params)
                old, advantages = inputs.old_log_prob, inputs.advantages
                self._pending.update(log_prob=old.detach(), advantage=advantages, **inputs.token_out)
                return out

            return recorded

        def micro(logits: Any, row_ids: list[int], width: int, *args: Any, **kw: Any) -> Any:
            out = real_micro(logits, row_ids, width, *args, **kw)
            for i, row in enumerate(row_ids):  # the last pass over a row wins, as in the update
                self.expected[row] = {k: v[i].float().cpu().tolist() for k, v in self._pending.items()}
            return out

        monkeypatch.setattr(update, "kl_penalty", kl)
        monkeypatch.setattr(update, "log_probs_and_entropy", entropy)
        monkeypatch.setattr(update.POLICY_LOSSES, "get", losses_get)
        monkeypatch.setattr(update, "actor_micro_loss", micro)


def test_a_tiny_runs_token_signals_are_stored_and_shown_as_its_update_computed_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, client: Client, trainer: Trainer, run: Any, personas: Any
) -> None:
    torch.set_num_threads(2)
    config = RunConfig.from_preset(
        "grpo",
        **{
            "model.path": "tiny-test", "data.train_path": str(_rows_file(tmp_path / "train.parquet")),
            "data.max_prompt_length": 256, "rollout.n": 2, "rollout.max_new_tokens": 6,
            "trainer.batch_size": 2, "trainer.total_steps": 1, "trainer.device": "cpu",
            "optim.mini_batch_size": 2, "optim.micro_batch_size": 2,  # two mini-batches: a real π_old
            "algorithm.skip_zero_advantage_groups": False, "report.token_signals": "all",
        },
    )  # fmt: skip
    spy = UpdateSpy(monkeypatch)
    reporter = MemoryReporter()
    loop.train(config, reporter)

    step, trajectories = reporter.trajectories[0]
    # Single-step rollouts: step row t is trajectory t, and every row was trained on.
    assert sorted(spy.expected) == list(range(len(trajectories))) == list(range(4))
    for row, trajectory in enumerate(trajectories):
        (only,) = trajectory.steps
        n = len(only.response_ids)
        expected = {name: values[:n] for name, values in spy.expected[row].items()}
        assert {"advantage", "log_prob", "ratio", "entropy", "clipped"} <= only.token_signals.keys()
        assert only.token_signals == expected  # exactly what the loss was handed and gave back
        assert len(only.token_texts) == n
    assert any(v != 1.0 for t in trajectories for v in t.steps[0].token_signals["ratio"])  # π_old ≠ π_θ

    batch = TrajectoryBatch(
        training_step=step, trajectories=[TrajectoryWire.from_trajectory(t) for t in trajectories]
    )
    assert trainer.post(TRAJECTORIES_PATH, batch.model_dump(mode="json")).status_code == 200
    stored = TrajectoryStep.objects.get(trajectory__run=run, trajectory__uid=trajectories[0].id)
    unpacked = unpack_token_signals(bytes(stored.token_signals))
    assert unpacked.signals == trajectories[0].steps[0].token_signals  # float32 in, float32 out
    assert unpacked.tokens == trajectories[0].steps[0].token_texts

    client.force_login(personas["alice"])
    page = client.get(f"/t/acme/runs/{run.pk}/rollouts/{stored.trajectory_id}/").content.decode()
    data = json.loads(
        re.search(r'<script id="tokens-0" type="application/json">(.*?)</script>', page, re.S).group(1)  # type: ignore[union-attr]
    )
    assert data["tokens"] == unpacked.tokens
    for name, values in unpacked.signals.items():
        assert data["signals"][name] == pytest.approx(values, rel=1e-3, abs=1e-6), name
    assert 'src="/static/js/tokens.js"' in page and '<option value="ratio">' in page


def test_the_sampling_keeps_signals_for_k_trajectories_spread_over_the_batch() -> None:
    config = RunConfig.model_validate({"report": {"token_signals_per_step": 3}})
    assert loop.token_signal_trajectories(config, 12) == [0, 4, 8]
    assert loop.token_signal_trajectories(config, 2) == [0, 1]
    none = RunConfig.model_validate({"report": {"token_signals": "none"}})
    assert loop.token_signal_trajectories(none, 12) == []


def test_a_step_whose_signals_do_not_match_its_tokens_is_refused(trainer: Trainer) -> None:
    from trainer.contract import encode_floats

    step = {"index": 0, "response_text": "ab",
            "token_signals": {"tokens": ["a", "b"], "signals": {"advantage": encode_floats([1.0])}}}  # fmt: skip
    body = {"batch_id": "bad", "training_step": 1,
            "trajectories": [{"id": "t", "group_id": "g", "sample_index": 0, "steps": [step]}]}  # fmt: skip
    response = trainer.post(TRAJECTORIES_PATH, body)
    assert response.status_code in (400, 422)
    assert "1 values for 2 tokens" in response.content.decode()
    assert not TrajectoryStep.objects.exists()
