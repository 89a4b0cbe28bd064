"""The official client runs one battery (tests/webapp/mlflow_api/battery.py) against our endpoint and
against MLflow's own server of the same version, started here; the answers, ids and times
normalised, must be the same but for the differences named below, each with its reason
(docs/mlflow.md#how-close-to-mlflow).

MLflow's server is tests/webapp/mlflow_server.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.webapp.mlflow_api.battery import Battery, run_battery

pytestmark = pytest.mark.slow

# Calls whose answers differ on purpose, and why (docs/mlflow.md#how-close-to-mlflow).
KNOWN_DIFFERENCES: dict[str, str] = {}
SAME_AT_LEAST = 0.95


def _battery(uri: str) -> dict[str, Any]:
    from mlflow import MlflowClient, set_tracking_uri

    set_tracking_uri(uri)  # the artifact and trace calls follow the global URI
    battery = Battery(MlflowClient(tracking_uri=uri))
    run_battery(battery)
    return battery.normalised()


def test_the_official_client_gets_mlflows_own_answers_from_our_endpoint(
    tracking: Callable[[str], str], tokens: dict[str, str], mlflow_server: str, tmp_path: Path
) -> None:
    ours = _battery(tracking(tokens["alice"]))
    theirs = _battery(mlflow_server)

    assert ours.keys() == theirs.keys()
    different = {name for name in theirs if ours[name] != theirs[name]}
    report = "\n".join(
        f"{name}:\n  ours   {ours[name]}\n  MLflow {theirs[name]}" for name in sorted(different)
    )
    (tmp_path / "differences.txt").write_text(report)
    print(f"battery: {len(theirs) - len(different)} of {len(theirs)} calls answer the same")
    print(report)
    assert different == set(KNOWN_DIFFERENCES), report
    assert len(theirs) - len(different) >= SAME_AT_LEAST * len(theirs)
