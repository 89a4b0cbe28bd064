"""Runs a script logs through the ``studio`` SDK (docs/sdk.md#how-a-run-reaches-the-server).

The SDK opens its run here once (``studio.init``, or ``studio sync`` for a folder logged offline):
an external run, made or resumed by the id the script gave (or the SDK drew), with a fresh run token
and claimant id. Everything the run then produces travels through the ingestion routes with that
token, exactly as a launched trainer's reports do; only what W&B calls the run's metadata (its
config, group, job type, tags and summary) is stored here, as the params and tags an MLflow client
logs (``LoggedValue``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from django.db import transaction

from trainer.contract import new_claimant_id
from webapp.accounts.models import Team
from webapp.experiments.models import Experiment, LoggedKind, LoggedValue, Run

# The tags the SDK's fields are kept under; a summary key ``k`` is the tag ``summary.k``.
CLIENT_ID_TAG = "studio.id"
GROUP_TAG = "studio.group"
JOB_TYPE_TAG = "studio.job_type"
SUMMARY_PREFIX = "summary."
KEY_MAX = 250  # LoggedValue.key's length
Resume = Literal["allow", "must", "never"]


class ResumeRefused(Exception):
    """``status`` is the HTTP answer: 404 (resume="must", no such run), 409 (resume="never" and the
    id is taken, or the run has ended)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Meta:
    """What the SDK knows about its run besides its reports."""

    config: dict[str, Any]
    summary: dict[str, Any]
    tags: list[str]
    group: str = ""
    job_type: str = ""


@dataclass(frozen=True)
class Opened:
    run: Run
    token: str
    claimant: str
    resumed: bool


def open_run(
    team: Team,
    user: Any,
    *,
    project: str,
    name: str,
    client_id: str,
    resume: Resume,
    worker: str,
    meta: Meta,
) -> Opened:
    """The team's run of ``client_id`` (made in experiment ``project`` when new), taken by a new
    claimant with a new token; its metadata stored. ResumeRefused as ``resume`` says."""
    with transaction.atomic():
        # Race: two processes opening one id at once would both make a run; the team's row lock
        # lets one make it and the other find it.
        Team.objects.select_for_update().filter(pk=team.pk).first()
        found = find_run(team, client_id)
        if found is not None and resume == "never":
            raise ResumeRefused(f"run id {client_id!r} is taken (run {found.pk}); resume='never'", 409)
        if found is None and resume == "must":
            raise ResumeRefused(f"no run has the id {client_id!r}; resume='must'", 404)
        if found is None:
            experiment, _ = Experiment.create_external(team, project, user)
            run = Run.create_external(experiment, name, None)
            LoggedValue.set_tags(run, {CLIENT_ID_TAG: client_id})
        else:
            run = found
        claimant = new_claimant_id()
        if not run.take_external(worker, claimant):
            raise ResumeRefused(
                f"run {run.pk} ({client_id!r}) is {run.status}: an ended run takes no writes", 409
            )
        if found is not None and name and name != run.name:
            run.rename(name)
        store_meta(run, meta)
        token = run.issue_token()
    return Opened(run, token, claimant, resumed=found is not None)


def find_run(team: Team, client_id: str) -> Run | None:
    """The team's run the SDK opened with ``client_id``."""
    tagged = LoggedValue.objects.filter(kind=LoggedKind.TAG, key=CLIENT_ID_TAG, value=client_id)
    return Run.objects.filter(team=team, pk__in=tagged.values("run_id")).select_related("experiment").first()


def store_meta(run: Run, meta: Meta) -> None:
    """Config as params (a param keeps its first value, as on MLflow), the rest as tags; the
    tags the script gave join the run's labels, which the runs table filters by."""
    LoggedValue.log_params(run, {key[:KEY_MAX]: value for key, value in flat_strings(meta.config).items()})
    tags = {SUMMARY_PREFIX + key: value for key, value in flat_strings(meta.summary).items()}
    if meta.group:
        tags[GROUP_TAG] = meta.group
    if meta.job_type:
        tags[JOB_TYPE_TAG] = meta.job_type
    LoggedValue.set_tags(run, {key[:KEY_MAX]: value for key, value in tags.items()})
    labels = list(dict.fromkeys([*run.labels, *meta.tags]))
    if labels != run.labels:
        Run.objects.filter(pk=run.pk).update(labels=labels)
        run.labels = labels


def flat_strings(values: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested config as dotted keys, each value as text (a string as is, anything else as JSON)."""
    flat: dict[str, str] = {}
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flat_strings(value, path + "."))
        else:
            flat[path] = value if isinstance(value, str) else json.dumps(value, default=str)
    return flat
