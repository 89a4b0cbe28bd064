"""The product's pages: one route table for the site, and one for a team's pages under
/t/<team_slug>/, grouped by the app that serves them (the REST API mounts in webapp/routers.py)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, reverse_lazy
from django.views.generic import RedirectView

from trainer.contract import API_ROOT, MLFLOW_ROOT
from webapp import healthz
from webapp.accounts import views as accounts
from webapp.datasets import views as datasets
from webapp.experiments import artifacts as run_artifacts
from webapp.experiments import demonstration_views, evaluations, sweep_views
from webapp.experiments import views as experiments
from webapp.monitoring import views as monitoring
from webapp.playground import views as playground
from webapp.results import (
    checkpoints,
    experiment_page,
    export_views,
    import_views,
    registry_views,
    run_page,
    sweep_page,
)
from webapp.results import views as results
from webapp.rollouts import review_views as review
from webapp.rollouts import views as rollouts
from webapp.routers import api
from webapp.tools import outbound_views
from webapp.tools import views as tools

team_patterns = [
    path("", results.dashboard, name="dashboard"),
    path("members/", accounts.members, name="members"),
    path("members/new/", accounts.member_create, name="member_create"),
    path("members/<int:pk>/role/", accounts.member_role, name="member_role"),
    path("members/<int:pk>/remove/", accounts.member_remove, name="member_remove"),
    path("datasets/", datasets.index, name="datasets"),
    path("datasets/upload/", datasets.upload, name="dataset_upload"),
    path("datasets/from-recipe/", datasets.from_recipe, name="dataset_from_recipe"),
    path("datasets/<int:pk>/", datasets.detail, name="dataset"),
    path("datasets/<int:pk>/download/", datasets.download, name="dataset_download"),
    path("datasets/<int:pk>/map/", datasets.map_rewards, name="dataset_map"),
    path("datasets/<int:pk>/archive/", datasets.archive, name="dataset_archive"),
    path("datasets/<int:pk>/delete/", datasets.delete, name="dataset_delete"),
    path("tools/", tools.index, name="tools"),
    path("tools/new/", tools.new, name="tool_new"),
    path("tools/<int:pk>/", tools.detail, name="tool"),
    path("tools/<int:pk>/try/", tools.try_tool, name="tool_try"),
    path("tools/<int:pk>/delete/", tools.delete, name="tool_delete"),
    path("tools/builtin/<str:name>/", tools.builtin_detail, name="builtin_tool"),
    path("tools/builtin/<str:name>/try/", tools.try_builtin, name="builtin_tool_try"),
    path("tools/trials/<int:pk>/", tools.trial, name="tool_trial"),
    path("demo/", experiments.demo, name="demo"),
    path("tools/rewards/new/", tools.reward_new, name="reward_new"),
    path("tools/rewards/<int:pk>/", tools.reward_detail, name="reward"),
    path("tools/rewards/<int:pk>/try/", tools.reward_try, name="reward_try"),
    path("tools/rewards/<int:pk>/delete/", tools.reward_delete, name="reward_delete"),
    path("experiments/", experiments.index, name="experiments"),
    path("experiments/new/", experiments.new, name="experiment_new"),
    path("experiments/<int:pk>/", experiment_page.detail, name="experiment"),
    path("experiments/<int:pk>/launch/", experiments.launch, name="experiment_launch"),
    path("experiments/<int:pk>/evaluate/", evaluations.evaluate, name="experiment_evaluate"),
    path("runs/<int:pk>/", run_page.run_detail, name="run"),
    path("runs/<int:pk>/cancel/", experiments.cancel, name="run_cancel"),
    path("runs/<int:pk>/resume/", run_page.run_resume, name="run_resume"),
    path("runs/<int:pk>/edit/", run_page.run_edit, name="run_edit"),
    path("runs/<int:pk>/artifacts/<path:path>", run_artifacts.download, name="run_artifact"),
    path("compare/", results.index, name="compare"),
    # runs table, curves, checkpoints, exports, imports, sweeps (webapp/results)
    path("runs/", results.runs, name="runs"),
    path("runs/columns/", results.runs_columns, name="runs_columns"),
    path("runs/actions/", results.runs_action, name="runs_action"),
    path("runs/delete/", results.runs_delete, name="runs_delete"),
    path("runs/compare/", results.runs_compare, name="runs_compare"),
    path("runs/import/", import_views.import_run, name="run_import"),
    path("runs/import/<int:pk>/", import_views.import_job, name="import_job"),
    path("dashboard/running/", results.dashboard_running, name="dashboard_running"),
    path("compare/export.<str:fmt>", results.compare_export, name="compare_export"),
    path("compare/cell/", results.compare_cell, name="compare_cell"),
    path("curves/", results.curves, name="curves"),
    path("curves.json", results.curves_data, name="curves_data"),
    path("curves.csv", results.curves_csv, name="curves_csv"),
    path("curves/layout/", results.curves_layout, name="curves_layout"),
    path("experiments/<int:experiment_id>/curves/", results.experiment_curves, name="experiment_curves"),
    path("runs/<int:run_id>/curves/", results.run_curves, name="run_curves"),
    path("runs/<int:run_id>/tools/", results.tools, name="run_tools"),
    path("runs/<int:run_id>/prompts/", results.prompts, name="run_prompts"),
    path(
        "runs/<int:run_id>/checkpoints/<int:step>/download/", checkpoints.download, name="checkpoint_download"
    ),
    path("runs/<int:run_id>/checkpoints/<int:step>/export/", export_views.export_start, name="export_start"),
    path("exports/<int:pk>/", export_views.export_job, name="export_job"),
    path("exports/<int:pk>/download/", export_views.export_download, name="export_download"),
    path("runs/<int:run_id>/retention/", run_page.run_retention, name="run_retention"),
    path("sweeps/<int:pk>/", sweep_page.sweep_detail, name="sweep"),
    path("checkpoints/", registry_views.registry, name="checkpoint_registry"),
    path("checkpoints/<int:pk>/tags/", registry_views.checkpoint_tags, name="checkpoint_tags"),
    # the rollout viewer and review (webapp/rollouts)
    path("runs/<int:run_id>/rollouts/", rollouts.rollouts, name="rollouts"),
    path("runs/<int:run_id>/histograms/", rollouts.run_histograms, name="run_histograms"),
    path("runs/<int:run_id>/rollouts/at/<int:step>/", rollouts.rollouts_at, name="rollouts_at"),
    path("runs/<int:run_id>/rollouts/<int:pk>/", rollouts.trajectory, name="trajectory"),
    path("runs/<int:run_id>/groups/<str:group_id>/", rollouts.group, name="rollout_group"),
    path("runs/<int:run_id>/prompts/<int:sample>/compare/", rollouts.prompt_compare, name="prompt_compare"),
    path("runs/prompts/compare/", rollouts.prompt_compare_runs, name="prompt_compare_runs"),
    path("search/", rollouts.search, name="search"),
    path("runs/<int:run_id>/rollouts/<int:pk>/annotate/", review.annotate, name="trajectory_annotate"),
    path("runs/<int:run_id>/rollouts/queue/", review.queue_new, name="review_queue_new"),
    path("runs/<int:run_id>/rollouts/dataset/", review.rollouts_dataset, name="rollouts_dataset"),
    path("labels/", review.labels, name="labels"),
    path("queues/", review.queue_list, name="review_queues"),
    path("queues/<int:pk>/", review.queue_detail, name="review_queue"),
    path("queues/<int:pk>/next/", review.queue_next, name="review_queue_next"),
    path("queues/<int:pk>/dataset/", review.queue_dataset, name="review_queue_dataset"),
    # health checks and notifications (webapp/monitoring)
    path("runs/<int:run_id>/time.json", monitoring.run_time, name="run_time"),
    path("health/", monitoring.health_settings, name="health_settings"),
    path("notifications/", monitoring.notifications, name="notifications"),
    # sweeps and demonstrations (webapp/experiments)
    path("sweeps/new/", sweep_views.sweep_new, name="sweep_new"),
    path("sweeps/<int:pk>/cancel/", sweep_views.sweep_cancel, name="sweep_cancel"),
    path("experiments/limit/", sweep_views.run_limit, name="run_limit"),
    path("datasets/<int:pk>/demonstrations/", demonstration_views.generate, name="dataset_demonstrations"),
    path("demonstrations/<int:pk>/", demonstration_views.job, name="demonstrations_job"),
    # the playground (webapp/playground)
    path("playground/", playground.playground, name="playground"),
    path("playground/<int:pk>/", playground.session, name="playground_session"),
]

urlpatterns = [
    path("", accounts.home, name="home"),
    path("healthz", healthz.healthz, name="healthz"),
    path(API_ROOT.strip("/") + "/", api.urls),
    path(MLFLOW_ROOT.strip("/") + "/", include("webapp.mlflow_api.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "account/password/",
        auth_views.PasswordChangeView.as_view(success_url=reverse_lazy("password_change_done")),
        name="password_change",
    ),
    path("account/password/done/", auth_views.PasswordChangeDoneView.as_view(), name="password_change_done"),
    path(
        "favicon.ico",
        RedirectView.as_view(url="/" + settings.STATIC_URL.lstrip("/") + "favicon.svg", permanent=True),
        name="favicon",
    ),
    path("teams/", accounts.teams, name="teams"),
    path("account/tokens/", accounts.api_tokens, name="api_tokens"),
    path("account/tokens/<int:pk>/revoke/", accounts.revoke_api_token, name="revoke_api_token"),
    path("teams/switch/", accounts.switch_team, name="switch_team"),
    path("outbound/", outbound_views.targets, name="outbound_targets"),
    path("outbound/<int:pk>/remove/", outbound_views.remove, name="outbound_target_remove"),
    path("t/<slug:team_slug>/", include(team_patterns)),
    path("admin/", admin.site.urls),
]
