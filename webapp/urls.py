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
from webapp.experiments import evaluations
from webapp.experiments import views as experiments
from webapp.results import experiment_page, run_page
from webapp.results import views as results
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
    path("t/<slug:team_slug>/", include("webapp.results.urls")),
    path("t/<slug:team_slug>/", include("webapp.rollouts.urls")),
    path("t/<slug:team_slug>/", include("webapp.monitoring.urls")),
    path("t/<slug:team_slug>/", include("webapp.experiments.urls")),
    path("t/<slug:team_slug>/", include("webapp.playground.urls")),
    path("admin/", admin.site.urls),
]
