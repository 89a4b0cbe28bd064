"""Every route of the site as the access matrix and the hostile-input test call it: team Acme's objects
(the world every route names), the callers, a body for every POST, and a database fingerprint."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.db import connection, transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.webapp.datasets.conftest import contract_row, write_parquet
from trainer.contract import API_ROOT, CLAIMANT_HEADER, encode_floats
from webapp.accounts.models import ApiToken, Role
from webapp.datasets import files
from webapp.datasets.models import Dataset, ImportStatus, RecipeImport
from webapp.experiments.artifacts import artifact_root
from webapp.experiments.demonstrations import DEMONSTRATIONS_JOB, DEMONSTRATIONS_TASK
from webapp.experiments.jobs import Job, JobStatus
from webapp.experiments.models import Experiment, LoggedValue, Run, RunKind, RunStatus, Sweep
from webapp.experiments.run_files import checkpoint_dir
from webapp.ingestion.models import Checkpoint, Trajectory
from webapp.mlflow_api.models import ExperimentTag
from webapp.mlflow_api.trace_reads import ENDPOINTS as TRACE_ENDPOINTS
from webapp.mlflow_api.views import ENDPOINTS
from webapp.playground.models import PlaygroundAnswer, PlaygroundSession
from webapp.results.import_jobs import IMPORT_JOB, IMPORT_TASK
from webapp.results.model_export import EXPORT_JOB, EXPORT_TASK
from webapp.rollouts.models import QueueItem, ReviewQueue
from webapp.tools.models import TeamReward, TeamTool, ToolTrial

PERSONAS = ("anonymous", "outsider", "viewer", "member", "owner")
RUN_TOKENS = ("own run", "other run", "finished run")
# The owner's personal tokens that must not write: one without the write scope, and one a token
# issued over the API before that token was revoked (docs/api.md#tokens).
SCOPED_TOKENS = ("read token", "child of revoked")


def claimant_of(name: str) -> str:
    """The launch id each test run is claimed with (trainer.contract.CLAIMANT_HEADER)."""
    return "claimant-" + name.replace(" ", "-")


def auth_headers(world: World, caller: str) -> dict[str, str]:
    """The test client's headers for ``caller``: its bearer token, and for a run's token the claimant
    id its trainer sends on every call that changes the run."""
    token = world.tokens.get(caller) or world.run_tokens.get(caller)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    if caller in world.run_tokens:
        headers["HTTP_" + CLAIMANT_HEADER.upper().replace("-", "_")] = claimant_of(caller)
    return headers


# Rows that change on every authenticated request, whoever sends it; everything else must not move
# when a request is refused.
VOLATILE_TABLES = frozenset(
    {
        "django_session",
        "accounts_apitoken",
        "axes_accessattempt",
        "axes_accesslog",
        "axes_accessfailurelog",
        "axes_accessattemptexpiration",
    }
)
# staff: a site administrator's (docs/security.md#outbound), which no persona of the matrix is.
LEVELS = ("public", "user", "read", "write", "owner", "staff")
RANK = {"outsider": 0, "viewer": 1, "member": 2, "owner": 3}
NEEDED = {"read": 1, "write": 2, "owner": 3}


@dataclass
class World:
    """Team Acme's objects, which every route names, and the callers."""

    slug: str
    ids: dict[str, Any]
    users: dict[str, Any]
    tokens: dict[str, str]
    run_tokens: dict[str, str]
    parquet: Path
    runs: dict[str, Run] = field(default_factory=dict)


@pytest.fixture(scope="module")
def world(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    """Built once per module inside a transaction that is rolled back at its end; each test's
    requests run in savepoints within it (rolled_back), so every request sees this same world."""
    with django_db_blocker.unblock(), transaction.atomic():
        yield _build_world(tmp_path_factory.mktemp("world"))
        transaction.set_rollback(True)


def _build_world(folder: Path) -> World:
    from django.contrib.auth import get_user_model

    from webapp.accounts.models import Team
    from webapp.ingestion.metrics_store import forget_cached_keys

    forget_cached_keys()
    # No passwords: the clients log in with force_login, and hashing one costs a second of CPU.
    users = {
        persona: get_user_model().objects.create_user(f"matrix-{persona}", None, None) for persona in RANK
    }
    acme = Team.create_with_owner("Matrix Acme", users["owner"])
    acme.add_member(users["member"], Role.MEMBER)
    acme.add_member(users["viewer"], Role.VIEWER)
    Team.create_with_owner("Matrix Other", users["outsider"])
    parquet = write_parquet(folder / "rows.parquet", [contract_row(i) for i in range(4)])
    incoming = Path(shutil.copy(parquet, files.incoming_dir() / "matrix.parquet"))
    dataset, _ = Dataset.from_file(
        acme, incoming, sha256=files.sha256_of(incoming), name="d", source="t", validate_later=False
    )
    dataset.validate()
    tool = TeamTool.objects.create(
        team=acme, name="lookup", parameters={"type": "object"}, kind="http", url="http://127.0.0.1:9/x"
    )
    trial = ToolTrial.objects.create(team=acme, builtin="echo", arguments={"text": "x"})
    reward = TeamReward.objects.create(team=acme, name="matrix_reward", rule="exact")
    recipe_import = RecipeImport.objects.create(team=acme, task="arithmetic", status=ImportStatus.DONE)
    config = {
        "name": "exp",
        "task": "arithmetic",
        "model": {"path": "tiny-test"},
        "data": {"train_path": f"dataset:{dataset.pk}"},
    }
    experiment = Experiment.objects.create(
        team=acme, name="exp", task="arithmetic", preset="grpo", config=_config_json(config), seeds=[1]
    )
    runs = {
        name: Run.objects.create(
            experiment=experiment,
            team=acme,
            seed=i,
            status=RunStatus.QUEUED,
            config={"data": {"train_path": f"dataset:{dataset.pk}"}},
        )
        for i, name in enumerate(RUN_TOKENS)
    }
    run_tokens = {name: run.issue_token() for name, run in runs.items()}
    for name in ("own run", "other run"):
        assert runs[name].claim(f"host:{name}", claimant_of(name))
    runs["finished run"].finish(RunStatus.SUCCEEDED, "done")
    # A checkpoint with its folder where the trainer writes it, and an evaluation of it.
    folder = Path(checkpoint_dir(runs["own run"])) / "step_00000001"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text('{"step": 1}')
    checkpoint = Checkpoint.objects.create(run=runs["own run"], step=1, path=str(folder), size_bytes=11)
    evaluation = Run.objects.create(
        experiment=experiment, team=acme, seed=9, status=RunStatus.SUCCEEDED, kind=RunKind.EVALUATION,
        evaluated_run=runs["own run"], evaluated_step=1, config={"data": {"val_path": f"dataset:{dataset.pk}"}},
    )  # fmt: skip
    trajectory = Trajectory.objects.create(
        run=runs["own run"],
        uid="t0",
        group_id="g0",
        sample_index=0,
        training_step=0,
        total_reward=1.0,
        success=True,
    )
    # A run tag and an experiment tag for the MLflow calls that delete one.
    LoggedValue.set_tags(runs["own run"], {"t": "v"})
    ExperimentTag.objects.create(experiment=experiment, key="k", value="v")
    # The same dataset row a step later: "compare steps" needs two different steps of it.
    Trajectory.objects.create(
        run=runs["own run"],
        uid="t1",
        group_id="g1",
        sample_index=0,
        training_step=1,
        total_reward=0.0,
        success=False,
    )
    sweep = Sweep.objects.create(team=acme, name="sweep", spec={"seeds": [1], "params": []})
    queue = ReviewQueue.objects.create(team=acme, run=runs["own run"], name="queue")
    QueueItem.objects.create(queue=queue, trajectory=trajectory, position=0)
    import_job = Job.objects.create(
        kind=IMPORT_JOB, task=IMPORT_TASK, team=acme, user=users["member"], status=JobStatus.DONE
    )
    demonstrations_job = Job.objects.create(
        kind=DEMONSTRATIONS_JOB,
        task=DEMONSTRATIONS_TASK,
        team=acme,
        user=users["member"],
        status=JobStatus.DONE,
    )
    export_job = Job.objects.create(
        kind=EXPORT_JOB, task=EXPORT_TASK, team=acme, user=users["member"], status=JobStatus.DONE
    )
    session = PlaygroundSession.objects.create(team=acme, experiment=experiment, prompt="2 + 2?")
    PlaygroundAnswer.objects.create(session=session, position=0, label="base model")
    ids = {
        "export_job": export_job.pk,
        "playground_session": session.pk,
        "sweep": sweep.pk,
        "queue": queue.pk,
        "import_job": import_job.pk,
        "demonstrations_job": demonstrations_job.pk,
        "dataset": dataset.pk,
        "tool": tool.pk,
        "trial": trial.pk,
        "experiment": experiment.pk,
        "run": runs["own run"].pk,
        "trajectory": trajectory.pk,
        "uid": "t0",
        "group": "g0",
        "mlflow_run": runs["own run"].mlflow_run_id,
        "finished": runs["finished run"].pk,
        "evaluation": evaluation.pk,
        "checkpoint": checkpoint.pk,
        "reward": reward.pk,
        "recipe_import": recipe_import.pk,
        "viewer_membership": acme.memberships.get(user=users["viewer"]).pk,
        "outbound_target": 10**9,  # a site administrator's: everyone of the matrix is refused first
    }
    issued = {persona: ApiToken.issue(user, "matrix") for persona, user in users.items()}
    issued["read token"] = ApiToken.issue(users["owner"], "matrix read", scopes=["read"])
    parent, _plain = ApiToken.issue(users["owner"], "matrix parent")
    issued["child of revoked"] = ApiToken.issue(users["owner"], "matrix child", parent=parent)
    parent.revoke()
    tokens = {persona: plain for persona, (_row, plain) in issued.items()}
    ids.update({f"token:{persona}": row.pk for persona, (row, _plain) in issued.items()})
    artifact = artifact_root(runs["own run"]) / "reports" / "eval.txt"
    artifact.parent.mkdir(parents=True, exist_ok=True)
    artifact.write_text("an artifact the run page links to\n")
    return World(acme.slug, ids, users, tokens, run_tokens, parquet, runs)


def _config_json(overrides: dict[str, Any]) -> dict[str, Any]:
    from tasks_lib.registry import load_recipes
    from trainer.config import RunConfig

    load_recipes()
    return json.loads(RunConfig.from_mapping(overrides).to_json())


def fingerprint() -> dict[str, str]:
    """An md5 of every row of every table but the volatile ones: equal before and after means untouched."""
    tables = sorted(
        {model._meta.db_table for model in apps.get_models() if model._meta.managed} - VOLATILE_TABLES
    )
    query = " UNION ALL ".join(
        f"SELECT '{t}', md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM {t} x"
        for t in tables
    )
    with connection.cursor() as cursor:
        cursor.execute(query)
        return dict(cursor.fetchall())


def rolled_back(send: Callable[[], Any], *, compare: bool = True) -> tuple[Any, bool]:
    """(response, whether the database changed), with everything the request did undone; without
    ``compare`` the database is not fingerprinted (and reported unchanged)."""
    with transaction.atomic():
        before = fingerprint() if compare else {}
        response = send()
        changed = compare and fingerprint() != before
        transaction.set_rollback(True)
    return response, changed


# -- the site's own pages -------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    level: str  # public, user (any signed-in user), read (viewer+), write (member+), owner, staff
    kwargs: Callable[[World], dict[str, Any]] = lambda w: {}
    query: str = ""
    post: str | None = None  # the level a POST needs; None: the page takes no POST
    data: Callable[[World], dict[str, Any]] = lambda w: {}
    htmx: bool = False
    get: bool = True  # False: POST only (require_POST)
    unavailable: bool = False  # may answer 503 (the health check, with no Celery worker running)
    absent: bool = False  # names an object that does not exist: 404 for everyone allowed


def team(**more: Callable[[World], Any]) -> Callable[[World], dict[str, Any]]:
    return lambda w: {"team_slug": w.slug, **{name: get(w) for name, get in more.items()}}


def _id(name: str) -> Callable[[World], Any]:
    return lambda w: w.ids[name]


PAGES: dict[str, Page] = {
    "home": Page("user"),
    "healthz": Page("public", unavailable=True),
    "favicon": Page("public"),
    "login": Page("public"),
    "logout": Page("public", post="public", get=False),
    "teams": Page("user", post="user", data=lambda w: {"name": "New team"}),
    "api_tokens": Page("user", post="user", data=lambda w: {"name": "ci"}),
    "revoke_api_token": Page("user", kwargs=lambda w: {"pk": 10**9}, post="user", get=False, absent=True),
    "switch_team": Page("read", post="read", get=False, data=lambda w: {"team": w.slug}),
    "dashboard": Page("read", team()),
    "dashboard_running": Page("read", team(), htmx=True),
    "members": Page(
        "read", team(), post="owner", data=lambda w: {"username": "matrix-viewer", "role": "member"}
    ),
    "datasets": Page("read", team()),
    "dataset_upload": Page("read", team(), post="write", get=False),
    "dataset_from_recipe": Page(
        "read", team(), post="write", get=False, data=lambda w: {"task": "arithmetic"}
    ),
    "dataset": Page("read", team(pk=_id("dataset"))),
    "dataset_download": Page("read", team(pk=_id("dataset"))),
    "tools": Page("read", team()),
    "tool_new": Page("write", team(), post="write", data=lambda w: {"name": "x"}),
    "tool": Page("read", team(pk=_id("tool"))),
    "tool_try": Page(
        "read", team(pk=_id("tool")), post="write", get=False, data=lambda w: {"arguments": "{}"}
    ),
    "tool_delete": Page("write", team(pk=_id("tool")), post="write"),  # GET: the confirmation
    "builtin_tool": Page("read", team(name=lambda w: "echo")),
    "builtin_tool_try": Page(
        "read",
        team(name=lambda w: "echo"),
        post="write",
        get=False,
        data=lambda w: {"arguments": '{"text": "x"}'},
    ),
    "tool_trial": Page("read", team(pk=_id("trial")), htmx=True),
    "experiments": Page("read", team()),
    "experiment_new": Page("write", team(), post="write", data=lambda w: {"name": "x"}),
    "experiment": Page("read", team(pk=_id("experiment"))),
    "experiment_launch": Page("read", team(pk=_id("experiment")), post="write", get=False),
    "experiment_evaluate": Page(
        "write",
        team(pk=_id("experiment")),
        post="write",
        data=lambda w: {"dataset": f"dataset:{w.ids['dataset']}", "k": 2, "temperature": 1.0},
    ),
    "checkpoint_download": Page("read", team(run_id=_id("run"), step=lambda w: 1)),
    "checkpoint_registry": Page("read", team(), query="?tag=best&sort=size"),
    "checkpoint_tags": Page(
        "write", team(pk=_id("checkpoint")), post="write", get=False, data=lambda w: {"add": "candidate"}
    ),
    "run": Page("read", team(pk=_id("run"))),
    "run_cancel": Page("read", team(pk=_id("run")), post="write", get=False),
    "run_resume": Page("write", team(pk=_id("run")), post="write"),  # GET: the confirmation
    "compare": Page("read", team()),
    "compare_export": Page("read", team(fmt=lambda w: "csv")),
    "compare_cell": Page("read", team(), query="?task=arithmetic&algorithm=grpo", absent=True),
    "curves": Page("read", team(), query="?run={run}"),
    "curves_data": Page("read", team(), query="?run={run}&key=reward/mean"),
    "run_curves": Page("read", team(run_id=_id("run"))),
    "rollouts": Page("read", team(run_id=_id("run"))),
    "rollouts_at": Page("read", team(run_id=_id("run"), step=lambda w: 0)),
    "trajectory": Page("read", team(run_id=_id("run"), pk=_id("trajectory"))),
    "rollout_group": Page("read", team(run_id=_id("run"), group_id=_id("group"))),
    "run_tools": Page("read", team(run_id=_id("run"))),
    "run_prompts": Page("read", team(run_id=_id("run"))),
    "run_histograms": Page("read", team(run_id=_id("run")), query="?measure=advantage&step=0"),
    "run_time": Page("read", team(run_id=_id("run"))),
    "health_settings": Page(
        "read", team(), post="owner", data=lambda w: {"kl_blowup-enabled": "on", "kl_blowup-threshold": "2"}
    ),
    "notifications": Page("read", team(), post="read"),
    "prompt_compare": Page("read", team(run_id=_id("run"), sample=lambda w: 0)),
    # One run has no second run to set beside it: 404 for everyone allowed.
    "prompt_compare_runs": Page("read", team(), query="?run={run}&sample=0", absent=True),
    "search": Page("read", team(), query="?q=answer&run={run}"),
    "run_retention": Page(
        "read", team(run_id=_id("run")), post="write", get=False, data=lambda w: {"retention": "sample"}
    ),
    "mlflow_browse": Page("public"),
    "mlflow_open": Page("read", query="?run={mlflow_run}"),
    "password_change": Page("user", post="user"),
    "password_change_done": Page("user"),
    "member_create": Page("read", team(), post="owner", get=False, data=lambda w: {"username": "x"}),
    "member_role": Page(
        "read",
        team(pk=lambda w: 10**9),
        post="owner",
        get=False,
        data=lambda w: {"role": "viewer"},
        absent=True,
    ),
    "member_remove": Page("owner", team(pk=lambda w: 10**9), post="owner", absent=True),
    "dataset_map": Page("read", team(pk=_id("dataset")), post="write", get=False),
    "dataset_archive": Page("read", team(pk=_id("dataset")), post="write", get=False),
    "dataset_delete": Page("write", team(pk=_id("dataset")), post="write"),
    "reward_new": Page("write", team(), post="write", data=lambda w: {"name": "x"}),
    "reward": Page("read", team(pk=lambda w: 10**9), absent=True),
    "reward_try": Page("read", team(pk=lambda w: 10**9), post="write", get=False, absent=True),
    "reward_delete": Page("write", team(pk=lambda w: 10**9), post="write", absent=True),
    "demo": Page("read", team(), post="write", get=False),
    "run_edit": Page("read", team(pk=_id("run")), post="write", get=False, data=lambda w: {"name": "x"}),
    "run_artifact": Page("read", team(pk=_id("run"), path=lambda w: "reports/eval.txt")),
    "runs": Page("read", team()),
    "runs_columns": Page("read", team(), post="read", get=False),
    "runs_action": Page("read", team(), post="read", get=False),
    "runs_delete": Page("write", team(), post="write"),
    "runs_compare": Page("read", team(), query="?run={run}"),
    "run_import": Page("read", team(), post="write", data=lambda w: {"experiment": "imports"}),
    "import_job": Page("read", team(pk=_id("import_job"))),
    "dataset_demonstrations": Page("read", team(pk=_id("dataset")), post="write", get=False),
    "demonstrations_job": Page("read", team(pk=_id("demonstrations_job"))),
    "experiment_curves": Page("read", team(experiment_id=_id("experiment"))),
    "curves_layout": Page("read", team(), post="read", get=False),
    "curves_csv": Page("read", team(), query="?run={run}&key=reward/mean"),
    "sweep_new": Page("write", team(), post="write", data=lambda w: {"name": "x"}),
    "sweep": Page("read", team(pk=_id("sweep"))),
    "sweep_cancel": Page("write", team(pk=_id("sweep")), post="write"),
    "run_limit": Page("read", team(), post="owner", get=False, data=lambda w: {"max_active": "3"}),
    "outbound_targets": Page("user", post="staff", data=lambda w: {"rule": "matrix.example:443"}),
    "outbound_target_remove": Page("user", kwargs=lambda w: {"pk": 10**9}, post="staff", get=False),
    "playground": Page(
        "read",
        team(),
        query="?experiment={experiment}",
        post="write",
        data=lambda w: {"experiment": w.ids["experiment"], "model_a": "base", "prompt": "2 + 2?"},
    ),
    "playground_session": Page("read", team(pk=_id("playground_session"))),
    "export_start": Page("read", team(run_id=_id("run"), step=lambda w: 1), post="write", get=False),
    "export_job": Page("read", team(pk=_id("export_job"))),
    "export_download": Page("read", team(pk=_id("export_job")), absent=True),  # its folder: none written
    "trajectory_annotate": Page(
        "read",
        team(run_id=_id("run"), pk=_id("trajectory")),
        post="write",
        get=False,
        data=lambda w: {"label": "wrong"},
    ),
    "review_queue_new": Page(
        "read",
        team(run_id=_id("run")),
        post="write",
        get=False,
        data=lambda w: {"order": "newest", "limit": 5},
    ),
    "rollouts_dataset": Page(
        "read", team(run_id=_id("run")), post="write", get=False, data=lambda w: {"name": "x"}
    ),
    "labels": Page(
        "read", team(), post="write", data=lambda w: {"name": "x", "colour": "#000000", "key": "x"}
    ),
    "review_queues": Page("read", team()),
    "review_queue": Page("read", team(pk=_id("queue"))),
    "review_queue_next": Page("read", team(pk=_id("queue"))),
    "review_queue_dataset": Page("read", team(pk=_id("queue")), post="write", get=False),
}
# Found by the resolver but served by other tables of this module: the JSON API (from its OpenAPI
# schema), the MLflow endpoint (from its ENDPOINTS), and the admin (staff only, every pattern).
DELEGATED_PREFIXES = (API_ROOT.strip("/") + "/", "mlflow/api/", "mlflow/t/", "admin/")


def patterns(resolver: URLResolver | None = None, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    for entry in (resolver or get_resolver()).url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            yield from patterns(entry, route)
        else:
            yield route, entry


def client_for(world: World, persona: str) -> Client:
    client = Client()
    if persona != "anonymous":
        client.force_login(world.users[persona])
    return client


def allowed(level: str, persona: str) -> bool:
    if level == "public":
        return True
    if persona == "anonymous" or level == "staff":
        return False
    return level == "user" or RANK[persona] >= NEEDED[level]


def refusal(level: str, persona: str) -> set[int]:
    """What a caller below the level gets: the login page, a 404 outside the team, a 403 inside it."""
    if persona == "anonymous":
        return {302}
    return {404} if persona == "outsider" and level != "staff" else {403}


def page_url(world: World, name: str, page: Page) -> str:
    return reverse(name, kwargs=page.kwargs(world)) + page.query.format(**world.ids)


# -- the JSON API, from its own schema ------------------------------------------------------------


BODY_METHODS = ("POST", "PATCH")


def operations(client: Client) -> list[tuple[str, str, str, dict[str, str]]]:
    """(method, path, auth scheme, required query parameters filled in) of every API operation."""
    schema = client.get(f"{API_ROOT}/openapi.json").json()
    found = []
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            (security,) = operation["security"]
            query = {
                p["name"]: "1" if p["schema"].get("type") == "integer" else "reward/mean"
                for p in operation.get("parameters", [])
                if p["in"] == "query" and p.get("required")
            }
            found.append((method.upper(), path, next(iter(security)), query))
    return found


# The object each ``{pk}`` of a JSON API path names, by the path's collection.
API_PKS = {
    "/experiments/{pk}": "experiment", "/tools/{pk}": "tool", "/datasets/{pk}": "dataset",
    "/datasets/imports/{pk}": "recipe_import", "/rewards/{pk}": "reward", "/trials/{pk}": "trial",
    "/members/{pk}": "viewer_membership", "/sweeps/{pk}": "sweep", "/evaluations/{pk}": "evaluation",
    "{team_slug}/imports/{pk}": "import_job", "{team_slug}/demonstrations/{pk}": "demonstrations_job",
    "/outbound-targets/{pk}": "outbound_target", "/queues/{pk}": "queue",
    "{team_slug}/playground/{pk}": "playground_session", "{team_slug}/exports/{pk}": "export_job",
}  # fmt: skip


def api_path(world: World, path: str, caller: str = "owner") -> str:
    """The path with Acme's objects filled in; a personal token's own id for /tokens/{pk}."""
    values = {
        "team_slug": world.slug,
        "run_id": world.ids["run"],
        "uid": "t0",
        "split": "train",
        "step": 1,
        "measure": "reward",
        "sample": 0,
    }
    for collection, name in API_PKS.items():
        if collection in path:
            values["pk"] = world.ids[name]
    if "/tokens/{pk}" in path:
        values["pk"] = world.ids.get(f"token:{caller}", 10**9)
    return path.format(**values)


def _trajectory_batch() -> dict[str, Any]:
    return {
        "training_step": 0,
        "trajectories": [{"id": "m1", "group_id": "g", "sample_index": 0, "steps": [{"index": 0}]}],
    }


# One body per POST operation that needs one; a POST operation missing here fails the test.
API_BODIES: dict[str, Callable[[World], Any]] = {
    "/api/runs/{run_id}/claim": lambda w: {"worker": "host:own run", "claimant": claimant_of("own run")},
    "/api/runs/{run_id}/status": lambda w: {"status": "running", "message": "m"},
    "/api/runs/{run_id}/heartbeat": lambda w: {"step": 1, "total_steps": 2, "ts": 1.0},
    "/api/ingest/runs/{run_id}/metrics": lambda w: {
        "points": [{"key": "k", "step": 1, "value": 1.0, "ts": 1.0}]
    },
    "/api/ingest/runs/{run_id}/trajectories": lambda w: _trajectory_batch(),
    "/api/ingest/runs/{run_id}/logs": lambda w: {"seq": 0, "text": "x"},
    "/api/ingest/runs/{run_id}/checkpoints": lambda w: {"step": 1, "path": "/tmp/c"},
    "/api/ingest/runs/{run_id}/token-signals": lambda w: {
        "steps": [
            {
                "trajectory_id": "t0",
                "step_index": 0,
                "advantage": 0.5,
                "token_signals": {"tokens": ["x"], "signals": {"advantage": encode_floats([0.5])}},
            }
        ]
    },
    "/api/t/{team_slug}/experiments": lambda w: {
        "config": {
            "name": "api exp",
            "task": "arithmetic",
            "model": {"path": "tiny-test"},
            "data": {"train_path": f"dataset:{w.ids['dataset']}"},
        }
    },
    "/api/t/{team_slug}/experiments/{pk}/launch": lambda w: None,
    "/api/t/{team_slug}/sweeps": lambda w: {
        "name": "api sweep",
        "config": {
            "task": "arithmetic",
            "model": {"path": "tiny-test"},
            "data": {"train_path": f"dataset:{w.ids['dataset']}"},
        },
        "presets": ["grpo"],
        "seeds": [1],
    },
    "/api/t/{team_slug}/sweeps/{pk}/cancel": lambda w: None,
    "/api/t/{team_slug}/runs/{run_id}/cancel": lambda w: None,
    "/api/t/{team_slug}/runs/{run_id}/fork": lambda w: {"step": 1, "name": "api fork"},
    "/api/t/{team_slug}/runs/{run_id}/resume": lambda w: None,
    "/api/t/{team_slug}/runs/{run_id}/storage": lambda w: {"retention": "sample", "sample_fraction": 0.5},
    "/api/t/{team_slug}/evaluations": lambda w: {"experiment": w.ids["experiment"], "k": 2},
    "/api/t/{team_slug}/experiments/{pk}": lambda w: {"description": "changed"},
    "/api/t/{team_slug}/experiments/{pk}/clone": lambda w: {"name": "exp clone"},
    # A JSON body where a multipart upload belongs: refused with a 400, never a 5xx.
    "/api/t/{team_slug}/datasets": lambda w: {"name": "x"},
    "/api/t/{team_slug}/datasets/from-recipe": lambda w: {"task": "arithmetic", "size": 8},
    "/api/t/{team_slug}/datasets/{pk}/archive": lambda w: {"archived": True},
    "/api/t/{team_slug}/datasets/{pk}/demonstrations": lambda w: {"tools": {}},
    "/api/t/{team_slug}/tools": lambda w: {
        "name": "api_tool",
        "parameters": {"type": "object"},
        "url": "http://127.0.0.1:9/y",
    },
    "/api/t/{team_slug}/tools/{pk}": lambda w: {"description": "changed"},
    "/api/t/{team_slug}/tools/{pk}/try": lambda w: {"arguments": {}},
    "/api/t/{team_slug}/rewards": lambda w: {"name": "api_reward", "rule": "contains"},
    "/api/t/{team_slug}/rewards/{pk}": lambda w: {"description": "changed"},
    "/api/t/{team_slug}/rewards/{pk}/try": lambda w: {"response": "4", "ground_truth": "4"},
    "/api/t/{team_slug}/members": lambda w: {"username": "matrix-outsider", "role": "viewer"},
    "/api/t/{team_slug}/members/{pk}": lambda w: {"role": "member"},
    "/api/t/{team_slug}/imports": lambda w: {"name": "x"},
    "/api/t/{team_slug}/sdk/runs": lambda w: {"id": "matrix-sdk-run", "project": "sdk matrix"},
    "/api/t/{team_slug}/sdk/runs/{run_id}/meta": lambda w: {"summary": {"best": 1}},
    "/api/tokens": lambda w: {"name": "ci", "scopes": ["read"], "expires_in_days": 7},
    "/api/outbound-targets": lambda w: {"rule": "matrix.example:443"},
    "/api/t/{team_slug}/playground": lambda w: {
        "experiment": w.ids["experiment"],
        "models": ["base"],
        "prompt": "2 + 2?",
    },
    "/api/t/{team_slug}/runs/{run_id}/checkpoints/{step}/export": lambda w: {"merge_lora": False},
    "/api/t/{team_slug}/labels": lambda w: {"name": "api label", "colour": "#000000", "key": "z"},
    "/api/t/{team_slug}/runs/{run_id}/trajectories/{uid}/annotations": lambda w: {"label": "wrong"},
    "/api/t/{team_slug}/runs/{run_id}/queues": lambda w: {"order": "newest", "limit": 5},
    "/api/t/{team_slug}/queues/{pk}/dataset": lambda w: {"name": "api promoted"},
    "/api/t/{team_slug}/runs/{run_id}/datasets": lambda w: {"name": "api promoted run"},
}
API_CALLERS = ("anonymous", "outsider", "viewer", "member", "owner", *SCOPED_TOKENS, *RUN_TOKENS)
# Operations only a team's owners may make (a member gets a 403 like a viewer).
OWNER_OPERATIONS = frozenset(
    {
        ("POST", "/api/t/{team_slug}/members"),
        ("PATCH", "/api/t/{team_slug}/members/{pk}"),
        ("DELETE", "/api/t/{team_slug}/members/{pk}"),
    }
)
# Operations only a site administrator may make (docs/security.md#outbound): no persona here is one.
ADMIN_OPERATIONS = frozenset({("POST", "/api/outbound-targets"), ("DELETE", "/api/outbound-targets/{pk}")})


def api_expected(kind: str, method: str, caller: str, path: str = "") -> set[int] | None:
    """The statuses a caller must get; None: allowed (any status but 401/403/404 and 5xx)."""
    if caller in ("anonymous", "child of revoked"):
        return {401}
    if kind == "RunTokenAuth":
        return None if caller == "own run" else {404} if caller == "other run" else {401}
    if caller in RUN_TOKENS:
        return {401}
    if caller == "read token" and method != "GET":
        return {403}
    if (method, path) in ADMIN_OPERATIONS:
        return {403}
    if "{team_slug}" not in path:
        return None  # the caller's own things (its tokens): every signed-in persona has them
    if caller == "outsider":
        return {404}
    if caller == "viewer" and method != "GET":
        return {403}
    if caller == "member" and (method, path) in OWNER_OPERATIONS:
        return {403}
    return None


# -- the MLflow endpoint, from its table of calls ---------------------------------------------------

MLFLOW_BODIES: dict[str, Callable[[World], dict[str, Any]]] = {
    "experiments/get-by-name": lambda w: {"experiment_name": "exp"},
    "experiments/create": lambda w: {"name": "from mlflow"},
    "experiments/get": lambda w: {"experiment_id": str(w.ids["experiment"])},
    "experiments/search": lambda w: {"max_results": 10},
    "runs/create": lambda w: {"experiment_id": str(w.ids["experiment"])},
    "runs/get": lambda w: {"run_id": w.ids["mlflow_run"]},
    "runs/update": lambda w: {"run_id": w.ids["mlflow_run"], "run_name": "renamed"},
    "runs/search": lambda w: {"experiment_ids": [str(w.ids["experiment"])]},
    "logged-models/search": lambda w: {"experiment_ids": [str(w.ids["experiment"])]},
    "runs/log-batch": lambda w: {
        "run_id": w.ids["mlflow_run"],
        "metrics": [{"key": "m", "value": 1.0, "timestamp": 1, "step": 1}],
    },
    "runs/log-metric": lambda w: {"run_id": w.ids["mlflow_run"], "key": "m", "value": 1.0, "timestamp": 1},
    "runs/log-parameter": lambda w: {"run_id": w.ids["mlflow_run"], "key": "p", "value": "v"},
    "runs/set-tag": lambda w: {"run_id": w.ids["mlflow_run"], "key": "t", "value": "v"},
    "metrics/get-history": lambda w: {"run_id": w.ids["mlflow_run"], "metric_key": "m"},
    "runs/delete": lambda w: {"run_id": w.ids["mlflow_run"]},
    "runs/restore": lambda w: {"run_id": w.ids["mlflow_run"]},
    "runs/delete-tag": lambda w: {"run_id": w.ids["mlflow_run"], "key": "t"},
    "runs/log-inputs": lambda w: {
        "run_id": w.ids["mlflow_run"],
        "datasets": [{"dataset": {"name": "d", "digest": "1", "source_type": "local", "source": "{}"}}],
    },
    "runs/outputs": lambda w: {"run_id": w.ids["mlflow_run"], "models": []},
    "experiments/delete": lambda w: {"experiment_id": str(w.ids["experiment"])},
    "experiments/restore": lambda w: {"experiment_id": str(w.ids["experiment"])},
    "experiments/update": lambda w: {"experiment_id": str(w.ids["experiment"]), "new_name": "renamed"},
    "experiments/set-experiment-tag": lambda w: {
        "experiment_id": str(w.ids["experiment"]),
        "key": "k",
        "value": "v",
    },
    "experiments/delete-experiment-tag": lambda w: {"experiment_id": str(w.ids["experiment"]), "key": "k"},
    "logged-models": lambda w: {
        "experiment_id": str(w.ids["experiment"]),
        "source_run_id": w.ids["mlflow_run"],
    },
}
# The trace calls (REST 3.0, webapp/mlflow_api/traces.py): the same callers' rules.
TRACE_BODIES: dict[str, Callable[[World], dict[str, Any]]] = {
    "traces": lambda w: {"trace": {"trace_info": {
        "trace_id": "tr-" + "0" * 32,
        "trace_location": {"mlflow_experiment": {"experiment_id": str(w.ids["experiment"])}},
        "trace_metadata": {"mlflow.sourceRun": w.ids["mlflow_run"]},
    }}},
    "traces/search": lambda w: {"locations": [{"mlflow_experiment": {"experiment_id": str(w.ids["experiment"])}}]},
}  # fmt: skip
# What a run's token may not do: create experiments and runs, or change an experiment.
CREATES = frozenset(
    {"experiments/create", "runs/create"}
    | {f"experiments/{change}" for change in ("delete", "restore", "update")}
    | {"experiments/set-experiment-tag", "experiments/delete-experiment-tag"}
)


def mlflow_calls() -> list[tuple[str, str, tuple[str, Any], Callable[[World], dict[str, Any]]]]:
    """(REST version, call, (method, handler), body) of every call the MLflow endpoint serves."""
    return [("2.0", call, entry, MLFLOW_BODIES[call]) for call, entry in ENDPOINTS.items()] + [
        ("3.0", call, entry, TRACE_BODIES[call]) for call, entry in TRACE_ENDPOINTS.items()
    ]


READS_EXPERIMENTS = frozenset(
    {
        "experiments/get-by-name",
        "experiments/get",
        "experiments/search",
        "runs/search",
        "logged-models/search",
        "traces/search",
    }
)


def mlflow_expected(call: str, method: str, caller: str) -> set[int] | None:
    if caller in ("anonymous", "finished run", "child of revoked"):
        return {401}
    if caller == "outsider":
        return {404}
    if caller in ("viewer", "read token") and method == "POST" and call not in READS_EXPERIMENTS:
        return {403}
    if caller == "other run":
        return {403} if call in CREATES else {404} if call not in READS_EXPERIMENTS else None
    if caller == "own run" and call in CREATES:
        return {403}
    return None
