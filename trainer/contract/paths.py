"""API paths and headers: every path the trainer calls, under the root where the web app mounts its
JSON API. The web app mounts its routes from these (webapp.api.route) and verl's MLflow client is
pointed at MLFLOW_ROOT.
"""

from __future__ import annotations

__all__ = [
    "API_ROOT",
    "CHECKPOINTS_PATH",
    "CLAIMANT_HEADER",
    "CLAIM_PATH",
    "CONFIG_PATH",
    "DATASET_PATH",
    "HEARTBEAT_PATH",
    "IDEMPOTENCY_HEADER",
    "LOGS_PATH",
    "METRICS_PATH",
    "MLFLOW_ARTIFACT_PATH",
    "MLFLOW_ROOT",
    "OPTIMIZER_FILE",
    "POLICY_FOLDER",
    "SDK_ID_PATTERN",
    "SDK_META_PATH",
    "SDK_OPEN_PATH",
    "SPECS_PATH",
    "STATUS_PATH",
    "TOKEN_SIGNALS_PATH",
    "TRAINER_PATHS",
    "TRAJECTORIES_PATH",
]

API_ROOT = "/api"
# Inside a checkpoint folder (step_*), the policy's weights as a model folder (docs/checkpoints.md):
# what an evaluation scores and what a run that starts from the checkpoint loads.
POLICY_FOLDER = "policy"
# Beside it, the optimiser's state (resumable runs only): what a resume and a fork that keeps the
# optimiser state load (docs/checkpoints.md#fork).
OPTIMIZER_FILE = "optimizer.pt"
MLFLOW_ROOT = "/mlflow"
# A file the SDK's log_artifact puts onto its run, through MLflow's artifact service (run token).
MLFLOW_ARTIFACT_PATH = (
    MLFLOW_ROOT + "/api/2.0/mlflow-artifacts/artifacts/{experiment_id}/{mlflow_run_id}/artifacts/{name}"
)
# The SDK's routes, under a team's API (API_ROOT + "/t/<team>"), personal token (docs/sdk.md).
SDK_OPEN_PATH = "/sdk/runs"
SDK_META_PATH = "/sdk/runs/{run_id}/meta"
SDK_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # a script's own run id (W&B's id=)
_RUN = API_ROOT + "/runs/{run_id}"
_INGEST = API_ROOT + "/ingest/runs/{run_id}"
# The run's life: the trainer claims it, reads it, says how it goes.
CLAIM_PATH = _RUN + "/claim"
CONFIG_PATH = _RUN + "/config"
DATASET_PATH = _RUN + "/dataset/{split}"
STATUS_PATH = _RUN + "/status"
HEARTBEAT_PATH = _RUN + "/heartbeat"
# The team tools and team rewards the run's config names, secrets included (RunSpecs): only for a
# claimed run, over its own token; never stored in the frozen config, a log or a trajectory.
SPECS_PATH = _RUN + "/specs"
# What the run produces.
METRICS_PATH = _INGEST + "/metrics"
TRAJECTORIES_PATH = _INGEST + "/trajectories"
LOGS_PATH = _INGEST + "/logs"
CHECKPOINTS_PATH = _INGEST + "/checkpoints"
# Per-token signals of steps reported before their update ran (verl: docs/verl.md#token-signals).
TOKEN_SIGNALS_PATH = _INGEST + "/token-signals"
TRAINER_PATHS: tuple[str, ...] = (
    CLAIM_PATH,
    CONFIG_PATH,
    DATASET_PATH,
    STATUS_PATH,
    HEARTBEAT_PATH,
    SPECS_PATH,
    METRICS_PATH,
    TRAJECTORIES_PATH,
    LOGS_PATH,
    CHECKPOINTS_PATH,
    TOKEN_SIGNALS_PATH,
)
IDEMPOTENCY_HEADER = "Idempotency-Key"
# Sent with every lifecycle and ingestion call after the claim; the server answers 409 to any other.
CLAIMANT_HEADER = "Studio-Claimant"
