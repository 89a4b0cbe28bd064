"""Helpers to post to the ingestion API like the trainer does (the fixtures that use them:
tests/webapp/conftest.py)."""

from __future__ import annotations

import gzip
import json
from typing import Any

from django.test import Client

from trainer.contract import CLAIM_PATH, CLAIMANT_HEADER, METRICS_PATH, TRAJECTORIES_PATH

CLAIMANT_META = "HTTP_" + CLAIMANT_HEADER.upper().replace(
    "-", "_"
)  # how Django's test client takes the header


class Trainer:
    """Posts to the ingestion API the way trainer.report.http.HttpReporter does (gzip, batch ids,
    its claimant id): with ``claim``, it first claims the run the way the trainer does."""

    def __init__(self, client: Client, run_id: int, token: str, *, claim: bool = True) -> None:
        self.client, self.run_id, self.token = client, run_id, token
        self.claimant = f"test-claimant-{run_id}"
        if claim:
            from webapp.experiments.models import Run

            Run.objects.get(pk=run_id).enqueue()  # a draft is not claimable; a queued one is
            self.post(CLAIM_PATH, {"worker": "test:1", "claimant": self.claimant}, compress=False)

    def post(self, path: str, body: Any, *, compress: bool = True, token: str | None = None) -> Any:
        data = json.dumps(body).encode()
        headers = {"HTTP_AUTHORIZATION": f"Bearer {token or self.token}", CLAIMANT_META: self.claimant}
        if compress:
            data = gzip.compress(data)
            headers["HTTP_CONTENT_ENCODING"] = "gzip"
        return self.client.post(
            path.format(run_id=self.run_id), data, content_type="application/json", **headers
        )

    def metrics(self, points: list[dict[str, Any]], batch_id: str = "b1", **kw: Any) -> Any:
        return self.post(METRICS_PATH, {"batch_id": batch_id, "points": points}, **kw)

    def trajectories(self, step: int, trajectories: list[dict[str, Any]], batch_id: str = "t1") -> Any:
        body = {"batch_id": batch_id, "training_step": step, "trajectories": trajectories}
        return self.post(TRAJECTORIES_PATH, body)


def points(keys: list[str], steps: range, value: Any = None) -> list[dict[str, Any]]:
    return [
        {"key": k, "step": s, "value": float(s * 0.5 + i) if value is None else value, "ts": 1.7e9 + s}
        for s in steps
        for i, k in enumerate(keys)
    ]


def trajectory(
    uid: str, group: str, reward: float, *, response: str = "the answer is 4", **extra: Any
) -> dict[str, Any]:
    return {
        "id": uid,
        "group_id": group,
        "sample_index": int(group.rsplit("p", 1)[-1]) if "p" in group else 0,
        "rollout_index": int(uid.rsplit("s", 1)[-1]) if "s" in uid else 0,
        "data_source": "gsm8k",
        "ground_truth": "4",
        "total_reward": reward,
        "steps": [
            {
                "index": 0,
                "prompt_text": "<|user|>What is 2+2?",
                "response_text": '<tool_call>{"name": "calc", "arguments": {"expr": "2+2"}}</tool_call>',
                "reward": 0.0,
                "advantage": reward - 0.5,
                "tool_calls": [
                    {"name": "calc", "arguments": {"expr": "2+2"}, "result": "4", "latency_s": 0.01}
                ],
            },
            {
                "index": 1,
                "prompt_text": "<|user|>What is 2+2?<|assistant|>calc<|tool|>4",
                "response_text": response,
                "reward": reward,
                "advantage": reward - 0.5,
                "value": 0.25,
                "done": True,
            },
        ],
        **extra,
    }
