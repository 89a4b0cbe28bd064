"""Team rewards defined through forms: registered, refused with a message, tried like tools."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from tests.webapp.tools.conftest import ToolServer
from webapp.tools.models import TeamReward, ToolTrial


def test_a_rule_reward_is_registered_and_tried_as_a_run_would_score(client: Client, personas: Any) -> None:
    client.force_login(personas["bob"])
    response = client.post("/t/acme/tools/rewards/new/", {
        "name": "lab_answer", "data_source": "lab_qa", "kind": "rule", "rule": "regex",
        "pattern": r"ANSWER:\s*(\w+)", "format_pattern": r"^<think>", "format_bonus": "0.2",
        "timeout_s": "10", "retries": "1", "secret_header": "X-Reward-Secret",
    })  # fmt: skip
    reward = TeamReward.objects.get(team=personas["acme"], name="lab_answer")
    assert response.status_code == 302 and reward.summary.startswith("extract with a regex")
    trial = ToolTrial.objects.create(
        team=reward.team, team_reward=reward,
        arguments={"response": "<think>hm</think> ANSWER: Blue", "ground_truth": "blue", "extra_info": {}},
    )  # fmt: skip
    assert trial.run()
    trial.refresh_from_db()
    assert trial.reward == 1.2 and json.loads(trial.result) == {"score": 1.2, "acc": 1.0, "format": 1.0}
    page = client.get(f"/t/acme/tools/rewards/{reward.pk}/?trial={trial.pk}").content.decode()
    assert "lab_answer" in page and "1.2" in page
    assert "lab_answer" in client.get("/t/acme/tools/").content.decode()


def test_bad_rewards_are_refused_with_the_field_to_fix(client: Client, personas: Any, settings: Any) -> None:
    client.force_login(personas["alice"])
    base = {
        "kind": "rule",
        "rule": "exact",
        "timeout_s": "10",
        "retries": "1",
        "secret_header": "X-Reward-Secret",
    }
    cases = [
        ({"name": "gsm8k"}, "is a built-in reward"),
        ({"name": "bad_re", "rule": "regex", "pattern": "(unclosed"}, "Not a valid regular expression"),
        ({"name": "no_pattern", "rule": "regex"}, "needs the pattern"),
        (
            {"name": "far", "kind": "remote", "url": "http://evil.example.com/score"},
            "evil.example.com:80/score is not allowed",
        ),
    ]
    for change, words in cases:
        response = client.post("/t/acme/tools/rewards/new/", {**base, **change, "secret": "typed-7f3"})
        assert response.status_code == 400 and words in response.content.decode(), change
        # Sent back for another field's error, the form keeps the secret typed in the same page.
        assert 'name="secret" value="typed-7f3"' in response.content.decode(), change
    assert not TeamReward.objects.exists()
    client.force_login(personas["charlie"])
    assert client.get("/t/acme/tools/rewards/new/").status_code == 404


def test_a_remote_reward_is_tried_against_its_endpoint_with_its_secret(
    personas: Any, settings: Any, tool_server: ToolServer
) -> None:
    reward = TeamReward.register(personas["acme"], personas["alice"], secret="shh", name="remote_judge",
                                 kind="remote", url=tool_server.url + "/judge", timeout_s=2, retries=0)  # fmt: skip
    assert "shh" not in reward.secret_encrypted
    trial = ToolTrial.objects.create(team=reward.team, team_reward=reward,
                                     arguments={"response": "42", "ground_truth": "42", "extra_info": {"index": 1}})  # fmt: skip
    trial.run()
    trial.refresh_from_db()
    [call] = tool_server.calls
    assert call["body"] == {
        "data_source": "",
        "response": "42",
        "ground_truth": "42",
        "extra_info": {"index": 1},
    }
    assert call["headers"]["X-Reward-Secret"] == "shh"
    # The loopback tool endpoint answers {"text", "reward", "info"}: no score, so the try says so.
    assert trial.error == "reward_error" and "expected" in trial.result
