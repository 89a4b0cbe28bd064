"""Import the Agent-R1 paper's reported results (docs/tasks.md#reported-results, Qwen3-4B) as a labelled reference set.

Shown beside our own numbers on the comparison page and in its exports, never mixed into them.
Running it again updates the same rows.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand
from django.db import transaction

from webapp.results.models import ReferenceResult

SOURCE = "Agent-R1 paper (arXiv 2511.14460), Qwen3-4B, reported"
COLUMNS = [
    ("gsm8k", "acc"),
    ("hotpotqa", "acc"),
    ("alfworld", "success_seen"),
    ("alfworld", "success_unseen"),
    ("webshop", "score"),
    ("webshop", "success"),
]
# method as the paper names it, our preset (blank: no training), then one value per COLUMNS entry.
ROWS: list[tuple[str, str, tuple[float, ...]]] = [
    ("ReAct (no training)", "", (53.1, 25.8, 7.14, 2.98, 51.58, 23.8)),
    ("GRPO", "grpo", (83.3, 59.4, 81.29, 74.58, 65.83, 44.2)),
    ("PPO", "ppo", (78.1, 56.7, 76.42, 72.38, 70.18, 46.0)),
    ("REINFORCE", "reinforce", (78.9, 52.8, 73.84, 69.57, 63.41, 41.8)),
    ("RLOO", "rloo", (81.6, 55.2, 79.08, 73.46, 68.02, 45.1)),
]


class Command(BaseCommand):
    help = "Import the Agent-R1 paper's reported task x algorithm results as a reference set."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        count = 0
        for method, algorithm, values in ROWS:
            for (task, metric), value in zip(COLUMNS, values, strict=True):
                ReferenceResult.objects.update_or_create(
                    source=SOURCE,
                    method=method,
                    task=task,
                    metric=metric,
                    defaults={"algorithm": algorithm, "value": value},
                )
                count += 1
        self.stdout.write(f"{count} reference results from {SOURCE}")
