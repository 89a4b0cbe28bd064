"""Every delete asks first: its link opens a page that says what goes, and only its button deletes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.test import Client

from tests.webapp.experiments.test_dataset_pickers import tickets
from trainer.config import RunConfig
from webapp.accounts.models import Membership
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment
from webapp.tools.models import TeamReward, TeamTool


def test_deleting_a_dataset_asks_first_and_says_when_it_cannot(
    client: Client, personas: Any, tmp_path: Path
) -> None:
    acme = personas["acme"]
    dataset = tickets(acme, tmp_path)
    client.force_login(personas["bob"])
    page = client.get(f"/t/acme/datasets/{dataset.pk}/delete/").content.decode()
    assert "Delete tickets.parquet?" in page and 'id="confirm-delete"' in page
    assert Dataset.objects.filter(pk=dataset.pk).exists()
    config = RunConfig.from_preset(
        "grpo", name="uses it", task="arithmetic", **{"data.train_path": dataset.reference}
    )
    Experiment.create(acme, personas["bob"], config, [1])
    page = client.get(f"/t/acme/datasets/{dataset.pk}/delete/").content.decode()
    assert "is used by experiments or runs: archive it instead" in page and 'id="confirm-delete"' not in page


def test_deleting_a_tool_a_reward_or_a_member_asks_first(client: Client, personas: Any) -> None:
    acme = personas["acme"]
    tool = TeamTool.objects.create(team=acme, name="lookup", parameters={"type": "object"}, kind="http",
                                   url="http://127.0.0.1:9/x")  # fmt: skip
    reward = TeamReward.objects.create(team=acme, name="strict", rule="exact")
    bob = Membership.objects.get(team=acme, user=personas["bob"])
    client.force_login(personas["alice"])
    asks = {
        f"/t/acme/tools/{tool.pk}/delete/": "Delete the tool lookup?",
        f"/t/acme/tools/rewards/{reward.pk}/delete/": "Delete the reward strict?",
        f"/t/acme/members/{bob.pk}/remove/": "Remove bob from Acme?",
    }
    for url, question in asks.items():
        response = client.get(url)
        assert response.status_code == 200 and question in response.content.decode(), url
    assert TeamTool.objects.filter(pk=tool.pk).exists() and TeamReward.objects.filter(pk=reward.pk).exists()
    assert Membership.objects.filter(pk=bob.pk).exists()
    for url in asks:
        assert client.post(url).status_code == 302
    assert (
        not TeamTool.objects.filter(pk=tool.pk).exists()
        and not TeamReward.objects.filter(pk=reward.pk).exists()
    )
    assert not Membership.objects.filter(pk=bob.pk).exists()
