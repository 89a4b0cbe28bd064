"""What docs/security.md promises that the access matrix and the hostile-input test do not cover:
server paths and unregistered tasks refused with the field, exports that no spreadsheet or Markdown
renderer runs, lock-outs after failed logins and unknown bearer tokens, and the security headers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD
from trainer.config import RunConfig
from trainer.contract import CONFIG_PATH
from webapp.accounts.models import ApiToken
from webapp.experiments.models import Experiment, Run
from webapp.results.export import csv_cell, markdown_cell

ROOT = Path(__file__).resolve().parents[2]


def _create(client: Client, token: str, config: dict[str, Any], seeds: list[int] | None = None) -> Any:
    body = {"config": config, "seeds": seeds or [1]}
    return client.post(
        "/api/t/acme/experiments", json.dumps(body), content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )  # fmt: skip


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"report": {"jsonl_path": "/var/lib/studio/../../tmp/owned.jsonl"}}, "config.report.jsonl_path"),
        ({"model": {"path": "/etc"}}, "config.model.path"),
        ({"model": {"path": "../../../etc"}}, "config.model.path"),
        ({"task": "no-such-task"}, "config.task"),
    ],
)
def test_a_config_naming_server_paths_or_an_unknown_task_is_refused_with_its_field(
    client: Client, personas: Any, overrides: dict[str, Any], field: str
) -> None:
    token = ApiToken.issue(personas["bob"], "tests")[1]
    config = json.loads(RunConfig.from_preset("grpo", name="paths", task="gsm8k").to_json())
    for key, value in overrides.items():
        config[key] = {**config[key], **value} if isinstance(value, dict) else value
    response = _create(client, token, config)
    assert response.status_code == 400, response.content
    assert (response.json()["code"], response.json().get("field")) == ("invalid", field)
    assert not Experiment.objects.exists()


def test_seeds_beyond_the_cap_are_refused(client: Client, personas: Any) -> None:
    token = ApiToken.issue(personas["bob"], "tests")[1]
    config = json.loads(RunConfig.from_preset("grpo", name="many", task="gsm8k").to_json())
    response = _create(client, token, config, seeds=list(range(1000)))
    assert response.status_code == 400 and response.json()["field"] == "seeds"
    assert not Experiment.objects.exists()


@pytest.mark.parametrize(
    "text, cell",
    [
        ('=HYPERLINK("http://evil","x")', '\'=HYPERLINK("http://evil","x")'),
        ("+cmd|' /C calc'!A0", "'+cmd|' /C calc'!A0"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("-1.5", "-1.5"),
        ("+3e-2", "+3e-2"),
        ("gsm8k", "gsm8k"),
    ],
)
def test_a_csv_cell_a_spreadsheet_would_run_starts_with_an_apostrophe(text: str, cell: str) -> None:
    assert csv_cell(text) == cell


def test_markdown_cells_carry_no_raw_html_or_table_breaks() -> None:
    cell = markdown_cell('<img src=x onerror="alert(1)"> | [a](javascript:x)\nnext')
    assert "<" not in cell and ">" not in cell and "\n" not in cell
    assert cell == '&lt;img src=x onerror="alert(1)"&gt; \\| \\[a\\](javascript:x) next'


def test_failed_logins_lock_the_account_out_even_for_the_right_password(
    client: Client, personas: Any, settings: Any
) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    answers = [client.post(reverse("login"), {"username": "alice", "password": "guess"}) for _ in range(3)]
    # The form again with its error, until the failure that reaches the limit locks the pair out.
    assert [answer.status_code for answer in answers] == [200, 200, 429]
    right = client.post(reverse("login"), {"username": "alice", "password": PASSWORD})
    assert right.status_code == 429 and int(right["Retry-After"]) > 0
    assert "_auth_user_id" not in client.session
    other = Client().post(reverse("login"), {"username": "bob", "password": PASSWORD})
    assert other.status_code == 302  # the lock-out is per username and address, not the site's


def test_unknown_bearer_tokens_lock_out_those_guesses_not_the_good_tokens_sent_from_their_address(
    client: Client, personas: Any, settings: Any
) -> None:
    """The finding: ten bad tokens from one address locked out every token from it, run tokens too."""
    settings.AXES_FAILURE_LIMIT = 3
    good = ApiToken.issue(personas["alice"], "tests")[1]
    experiment = Experiment.objects.create(team=personas["acme"], name="e", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=1, config={"seed": 1})
    run_token = run.issue_token()

    def get(token: str, path: str = "/api/t/acme/experiments") -> Any:
        return client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")

    answers = [get(guess) for guess in ("a" * 40, "b" * 40, "c" * 40)]
    assert [answer.status_code for answer in answers] == [401, 401, 429]
    locked = get("d" * 40, CONFIG_PATH.format(run_id=run.pk))  # guesses stay locked out on every route
    assert locked.status_code == 429 and locked.json()["code"] == "throttled"
    assert int(locked["Retry-After"]) > 0
    mlflow = get("e" * 40, "/mlflow/api/2.0/mlflow/experiments/get?experiment_id=0")
    assert mlflow.status_code == 429 and mlflow.json()["error_code"] == "REQUEST_LIMIT_EXCEEDED"
    # The good tokens of the same address go on: a person's, and a trainer's run token.
    assert get(good).status_code == 200
    assert get(run_token, CONFIG_PATH.format(run_id=run.pk)).status_code == 200
    searched = client.post(
        "/mlflow/api/2.0/mlflow/experiments/search", "{}", content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {good}",
    )  # fmt: skip
    assert searched.status_code == 200


def test_a_personal_tokens_lock_out_is_its_own_and_a_live_run_token_has_none(
    client: Client, personas: Any, settings: Any
) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    alice_row, alice = ApiToken.issue(personas["alice"], "tests")
    bob = ApiToken.issue(personas["bob"], "tests")[1]
    experiment = Experiment.objects.create(team=personas["acme"], name="e", task="gsm8k", preset="grpo")
    run = Run.objects.create(experiment=experiment, team=experiment.team, seed=1, config={"seed": 1})
    run_token = run.issue_token()

    def get(token: str, path: str = "/api/t/acme/experiments") -> Any:
        return client.get(path, HTTP_AUTHORIZATION=f"Bearer {token}")

    # Mangled copies of Alice's token (its hint, a wrong rest) lock her token out at this address...
    mangled = [alice[: alice_row.HINT_LENGTH] + c * 34 for c in "xyz"]
    assert [get(token).status_code for token in mangled] == [401, 401, 429]
    assert get(alice).status_code == 429
    # ... and no one else's; forged run tokens never lock out a live run's own.
    assert get(bob).status_code == 200
    forged = [f"r{run.pk}_{c * 43}" for c in "xyzw"]
    assert [get(t, CONFIG_PATH.format(run_id=run.pk)).status_code for t in forged] == [401, 401, 429, 429]
    assert get(run_token, CONFIG_PATH.format(run_id=run.pk)).status_code == 200


def test_pages_carry_a_csp_and_signed_in_answers_are_private(client: Client, personas: Any) -> None:
    anonymous = client.get(reverse("login"))
    policy = anonymous["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]
    assert client.login(username="alice", password=PASSWORD)
    page = client.get(reverse("dashboard", args=["acme"]))
    assert page.status_code == 200 and "private" in page["Cache-Control"]


def _settings_with(env: dict[str, str], *names: str) -> list[Any]:
    code = f"import json, webapp.settings as s; print(json.dumps([getattr(s, n, None) for n in {names!r}]))"
    clean = {k: v for k, v in os.environ.items() if k != "STUDIO_PUBLIC_URL"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_https_public_url_turns_on_secure_cookies_and_hsts() -> None:
    names = ("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_HSTS_SECONDS", "SECURE_PROXY_SSL_HEADER")
    assert _settings_with({"STUDIO_PUBLIC_URL": "https://studio.example.com"}, *names) == [
        True, True, 31_536_000, ["HTTP_X_FORWARDED_PROTO", "https"],
    ]  # fmt: skip
    assert not any(_settings_with({"STUDIO_PUBLIC_URL": "http://127.0.0.1:8000"}, *names))
