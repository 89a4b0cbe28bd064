"""What ingestion tells the apps above it, which it does not import (docs/architecture.md#layers)."""

from __future__ import annotations

from django.dispatch import Signal

# Sent inside a metric batch's transaction once its points are stored (not for a replayed batch), with
# ``run`` and ``points`` (under our keys: trainer.backends.canonical_key). A receiver must not raise:
# it would fail the batch. The health checks judge the batch here (docs/health.md#at-ingestion).
metrics_stored = Signal()
