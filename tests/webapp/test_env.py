from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp import env


@pytest.fixture(autouse=True)
def only_the_products_variables_stay_known() -> Iterator[None]:
    """These tests read made-up variables; they must not stay in KNOWN_VARS, which test_compose
    compares with docs/deployment.md (both may run in one process)."""
    known = dict(env.KNOWN_VARS)
    yield
    env.KNOWN_VARS.clear()
    env.KNOWN_VARS.update(known)


def test_integers_are_parsed_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_T_INT", "42")
    assert env.integer("STUDIO_T_INT", 1) == 42
    monkeypatch.setenv("STUDIO_T_INT", "0")
    with pytest.raises(ImproperlyConfigured, match="STUDIO_T_INT must be at least 1, got 0"):
        env.integer("STUDIO_T_INT", 1, minimum=1)


@pytest.mark.parametrize("raw, expected", [("1", True), ("yes", True), ("off", False), ("", False)])
def test_booleans_accept_the_usual_spellings(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("STUDIO_T_BOOL", raw)
    assert env.boolean("STUDIO_T_BOOL", not expected) is expected


def test_a_bad_boolean_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_T_BOOL", "maybe")
    with pytest.raises(ImproperlyConfigured, match="STUDIO_T_BOOL must be one of"):
        env.boolean("STUDIO_T_BOOL", False)


def test_a_bad_choice_lists_the_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_T_CHOICE", "LOUD")
    with pytest.raises(ImproperlyConfigured, match="STUDIO_T_CHOICE must be one of DEBUG, INFO; got 'LOUD'"):
        env.choice("STUDIO_T_CHOICE", ("DEBUG", "INFO"), "INFO")


def test_urls_must_have_an_allowed_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STUDIO_T_URL", "http://example.com")
    with pytest.raises(ImproperlyConfigured, match="STUDIO_T_URL must be a URL starting with redis://"):
        env.url("STUDIO_T_URL", ("redis",))


def test_the_server_answers_to_the_host_trainers_reach_it_at() -> None:
    # A fresh interpreter: settings are read once per process.
    env = {**os.environ, "STUDIO_PUBLIC_URL": "http://web:8000", "STUDIO_ALLOWED_HOSTS": "studio.example.com"}
    code = "from django.conf import settings; print(settings.ALLOWED_HOSTS)"
    env["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['studio.example.com', 'web']"
