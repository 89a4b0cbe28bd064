"""What a run's life tells the apps above experiments, which it does not import
(docs/architecture.md#layers)."""

from __future__ import annotations

from django.dispatch import Signal

# Sent with ``run`` once a transition ended it (the call that made it, never a later one that found
# it ended). An evaluation that did not succeed has what its stored batches scored kept then
# (webapp/ingestion/evaluation_scores.py, docs/evaluations.md#a-run-that-ends-early).
run_finished = Signal()
