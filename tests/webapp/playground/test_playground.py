"""The playground's requests (docs/playground.md): what may be asked, one session at a time per
member, team isolation, and how answers show (escaped, with the limit that stopped them). No model is
loaded here; tests/webapp/playground/test_playground_run.py runs one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from tests.webapp.datasets.conftest import contract_row, write_parquet
from webapp.accounts.models import ApiToken
from webapp.datasets import files
from webapp.datasets.models import Dataset
from webapp.experiments.jobs import JobStatus
from webapp.experiments.models import Experiment, Run
from webapp.playground import services
from webapp.playground.models import AnswerStatus, PlaygroundSession
from webapp.playground.services import Ask, PlaygroundRefused

pytestmark = pytest.mark.django_db


def bearer(user: Any) -> dict[str, str]:
    _row, plain = ApiToken.issue(user, "t")
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


def test_a_second_session_while_the_first_runs_is_refused_clearly(
    personas: dict[str, Any], trained_run: Run
) -> None:
    experiment = trained_run.experiment
    first = services.start(
        experiment, personas["alice"], Ask(choices=["base", f"{trained_run.pk}:2"], prompt="2+2?")
    )
    with pytest.raises(PlaygroundRefused, match="previous playground session is still running"):
        services.start(experiment, personas["alice"], Ask(choices=["base"], prompt="3+3?"))
    # Another member is not held back by alice's session.
    services.start(experiment, personas["bob"], Ask(choices=["base"], prompt="3+3?"))
    answer = Client().post(
        "/api/t/acme/playground",
        {"experiment": experiment.pk, "models": ["base"], "prompt": "3+3?"},
        content_type="application/json",
        **bearer(personas["alice"]),
    )
    assert answer.status_code == 400
    assert "still running" in answer.json()["error"]
    first.job.status = JobStatus.DONE
    first.job.save()
    assert services.start(experiment, personas["alice"], Ask(choices=["base"], prompt="3+3?")).pk


def test_a_session_holds_the_chosen_models_the_prompt_and_the_tools(
    personas: dict[str, Any], trained_run: Run
) -> None:
    session = services.start(
        trained_run.experiment,
        personas["alice"],
        Ask(
            choices=[f"{trained_run.pk}:1", "base"], prompt="  What is 6 * 7?  ", ground_truth="42", tools=[]
        ),
    )
    assert [(a.run_id, a.step, a.status) for a in session.answers.all()] == [
        (trained_run.pk, 1, AnswerStatus.QUEUED),
        (None, None, AnswerStatus.QUEUED),
    ]
    assert (session.prompt, session.ground_truth, session.tools) == ("What is 6 * 7?", "42", [])
    assert '"tools": []' in session.row["env_kwargs"]
    assert session.budget["time_s"] > 0 and session.budget["max_total_tokens"] > 0
    assert session.job is not None and session.job.status == JobStatus.QUEUED


@pytest.mark.parametrize(
    "ask, field",
    [
        (Ask(choices=[]), "models"),
        (Ask(choices=["base", "1:1", "2:2"], prompt="x"), "models"),
        (Ask(choices=["999:1"], prompt="x"), "models"),
        (Ask(choices=["base"], prompt="x", tools=["search"]), "tools"),
        (Ask(choices=["base"], prompt="   "), "prompt"),
        (Ask(choices=["base"], row_index=0), "row_index"),  # the experiment names no usable dataset
    ],
)
def test_what_the_experiment_does_not_have_is_refused_on_its_field(
    personas: dict[str, Any], gsm8k_experiment: Experiment, ask: Ask, field: str
) -> None:
    with pytest.raises(PlaygroundRefused) as refused:
        services.start(gsm8k_experiment, personas["alice"], ask)
    assert refused.value.field == field
    assert not PlaygroundSession.objects.exists()


def test_a_deleted_checkpoint_is_not_offered(personas: dict[str, Any], trained_run: Run) -> None:
    trained_run.checkpoints.filter(step=1).update(deleted=True)
    values = [value for value, _label in services.model_choices(trained_run.experiment)]
    assert values == ["base", f"{trained_run.pk}:2"]


def test_a_dataset_row_brings_its_prompt_and_ground_truth(
    personas: dict[str, Any], gsm8k_experiment: Experiment, tmp_path: Path
) -> None:
    parquet = write_parquet(tmp_path / "rows.parquet", [contract_row(i) for i in range(3)])
    incoming = files.incoming_dir() / "rows.parquet"
    incoming.write_bytes(parquet.read_bytes())
    dataset, _ = Dataset.from_file(
        personas["acme"],
        incoming,
        sha256=files.sha256_of(incoming),
        name="rows",
        source="t",
        validate_later=False,
    )
    dataset.validate()
    gsm8k_experiment.config = {
        **gsm8k_experiment.config,
        "data": {**gsm8k_experiment.config["data"], "train_path": dataset.reference},
    }
    gsm8k_experiment.save()
    session = services.start(gsm8k_experiment, personas["alice"], Ask(choices=["base"], row_index=2))
    assert (session.prompt, session.ground_truth, session.source) == ("What is 2 + 2?", "4", "rows row 2")
    with pytest.raises(PlaygroundRefused, match="rows 0 to 2"):
        services.start(gsm8k_experiment, personas["bob"], Ask(choices=["base"], row_index=3))


def test_another_teams_sessions_and_experiments_are_not_found(
    personas: dict[str, Any], trained_run: Run
) -> None:
    session = services.start(trained_run.experiment, personas["alice"], Ask(choices=["base"], prompt="2+2?"))
    outsider = Client()
    outsider.force_login(personas["charlie"])
    assert outsider.get(reverse("playground_session", args=["acme", session.pk])).status_code == 404
    assert outsider.get(reverse("playground", args=["acme"])).status_code == 404
    api = Client()
    assert api.get(f"/api/t/acme/playground/{session.pk}", **bearer(personas["charlie"])).status_code == 404
    asked = api.post(
        f"/api/t/{personas['other'].slug}/playground",
        {"experiment": trained_run.experiment.pk, "models": ["base"], "prompt": "x"},
        content_type="application/json",
        **bearer(personas["charlie"]),
    )
    assert asked.status_code == 404  # Acme's experiment, asked for under charlie's own team
    member = Client()
    member.force_login(personas["bob"])
    assert member.get(reverse("playground_session", args=["acme", session.pk])).status_code == 200


def test_model_output_is_shown_escaped_with_the_limit_that_stopped_it(
    personas: dict[str, Any], trained_run: Run
) -> None:
    session = services.start(
        trained_run.experiment, personas["alice"], Ask(choices=["base"], prompt="<b>hi</b>")
    )
    session.answers.update(
        status=AnswerStatus.DONE,
        stop_reason="response_budget",
        steps=[
            {
                "index": 0,
                "response": "<script>alert(1)</script>",
                "tokens": 9,
                "tool_calls": [
                    {
                        "name": "calculator",
                        "arguments": {"expression": "<i>1</i>"},
                        "result": "<img src=x onerror=alert(2)>",
                        "error": None,
                    }
                ],
                "reward": None,
            }
        ],
    )
    client = Client()
    client.force_login(personas["alice"])
    page = client.get(reverse("playground_session", args=["acme", session.pk])).content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "<b>hi</b>" not in page
    assert f"stopped at its token budget ({session.budget['max_total_tokens']} tokens)" in page
    rest = Client().get(f"/api/t/acme/playground/{session.pk}", **bearer(personas["alice"])).json()
    assert rest["answers"][0]["stop_reason"] == "response_budget"
    assert rest["answers"][0]["steps"][0]["tool_calls"][0]["name"] == "calculator"


def test_the_nav_and_each_checkpoint_row_link_the_playground(
    personas: dict[str, Any], trained_run: Run
) -> None:
    client = Client()
    client.force_login(personas["alice"])
    page = client.get(reverse("run", args=["acme", trained_run.pk])).content.decode()
    playground = reverse("playground", args=["acme"])
    assert f'href="{playground}"' in page
    assert f"{playground}?experiment={trained_run.experiment_id}&amp;model={trained_run.pk}:2" in page
    form = client.get(
        f"{playground}?experiment={trained_run.experiment_id}&model={trained_run.pk}:2"
    ).content.decode()
    assert f'<option value="{trained_run.pk}:2" selected>' in form
