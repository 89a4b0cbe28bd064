from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from webapp import health
from webapp.accounts import views as accounts
from webapp.datasets import views as datasets
from webapp.experiments import views as experiments
from webapp.results import views as results
from webapp.tools import views as tools

team_patterns = [
    path("", results.dashboard, name="dashboard"),
    path("members/", accounts.members, name="members"),
    path("datasets/", datasets.index, name="datasets"),
    path("tools/", tools.index, name="tools"),
    path("experiments/", experiments.index, name="experiments"),
    path("compare/", results.index, name="compare"),
]

urlpatterns = [
    path("", accounts.home, name="home"),
    path("healthz", health.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("teams/", accounts.teams, name="teams"),
    path("teams/switch/", accounts.switch_team, name="switch_team"),
    path("t/<slug:team_slug>/", include(team_patterns)),
    path("admin/", admin.site.urls),
]
