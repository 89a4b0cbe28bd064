"""The files verl and Agent-R1 write, uploaded as they are in a real browser, routed as the dataset page
says, and trained on for 2 steps through the real Celery worker (all five runs launched together)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks_lib.registry import TASKS, PrepareOptions, load_recipes
from tests.webapp.polling import poll_until
from trainer.config import RunConfig
from webapp.datasets.models import Dataset, DatasetStatus
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion.models import MetricKey, MetricPoint, Trajectory

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

VERL_INSTRUCTION = ' Let\'s think step by step and output the final answer after "####".'


def verl_gsm8k(path: Path) -> Path:
    """verl's examples/data_preprocess/gsm8k.py row shape, from the packaged real GSM8K items."""
    from tasks_lib.gsm8k.data import package_records
    from tasks_lib.gsm8k.reward import ground_truth_answer

    rows = [
        {"data_source": "openai/gsm8k",
         "prompt": [{"role": "user", "content": item["question"] + VERL_INSTRUCTION}],
         "ability": "math",
         "reward_model": {"style": "rule", "ground_truth": ground_truth_answer(item["answer"])},
         "extra_info": {"split": "train", "index": i, "answer": item["answer"], "question": item["question"]}}
        for i, item in enumerate(package_records()[:8])
    ]  # fmt: skip
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def agent_r1(task: str, path: Path, tmp: Path, data_source: str, agent_name: str, truth: Any = None) -> Path:
    """Agent-R1's processed-data shape (its recipes' data_preprocess): their data_source and agent_name,
    env_kwargs as a JSON string; the rows themselves from our recipe's fixtures."""
    written = TASKS.get(task).prepare(None, tmp / task, PrepareOptions())
    rows = pq.read_table(written["train"]).to_pylist()[:6]
    for row in rows:
        row["data_source"], row["agent_name"] = data_source, agent_name
        assert isinstance(row["env_kwargs"], str) and json.loads(row["env_kwargs"]) is not None
        if truth is not None:
            row["reward_model"] = {"style": "rule", "ground_truth": truth(row)}
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def native_files(tmp_path: Path) -> dict[str, tuple[Path, str, str, str | None, str]]:
    """name → (file, task, data_source, agent_name, the reward and flow the page should show)."""
    load_recipes()
    return {
        "verl gsm8k": (verl_gsm8k(tmp_path / "verl_gsm8k.parquet"), "gsm8k", "openai/gsm8k", None, "verl_gsm8k"),
        "agent-r1 gsm8k": (agent_r1("gsm8k", tmp_path / "r1_gsm8k.parquet", tmp_path, "openai/gsm8k", "gsm8k_tool"),
                           "gsm8k", "openai/gsm8k", "gsm8k_tool", "verl_gsm8k"),
        "agent-r1 hotpotqa": (agent_r1("hotpotqa", tmp_path / "r1_hotpot.parquet", tmp_path, "hotpotqa_distractor",
                                       "hotpotqa_agent"), "hotpotqa", "hotpotqa_distractor", "hotpotqa_agent", "hotpotqa"),
        "agent-r1 alfworld": (agent_r1("alfworld", tmp_path / "r1_alfworld.parquet", tmp_path, "alfworld_train",
                                       "alfworld_agent", truth=lambda row: {"success": None}),
                              "alfworld", "alfworld_train", "alfworld_agent", "alfworld"),
        "agent-r1 webshop": (agent_r1("webshop", tmp_path / "r1_webshop.parquet", tmp_path, "webshop_small_train",
                                      "webshop_agent"), "webshop", "webshop_small_train", "webshop_agent", "webshop"),
    }  # fmt: skip


def two_steps(name: str, task: str, dataset: Dataset) -> RunConfig:
    return RunConfig.from_preset("grpo", **{
        "name": name, "task": task, "model.path": "tiny-test", "data.train_path": dataset.reference,
        "data.val_path": None, "rollout.n": 2, "rollout.max_new_tokens": 8, "rollout.max_steps": 2,
        "trainer.total_steps": 2, "trainer.batch_size": 2, "optim.mini_batch_size": 4,
        "trainer.num_threads": 1, "resources.cpus": 1,
    })  # fmt: skip


def test_verl_and_agent_r1_files_are_accepted_routed_and_trained_as_they_are(
    personas: dict[str, Any], login: Any, live_server: Any, start_worker: Any, tmp_path: Path,
    settings: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("STUDIO_PUBLIC_URL", live_server.url)
    settings.PUBLIC_URL = live_server.url
    start_worker()
    team = personas["acme"]
    page = login("alice")
    datasets = {}
    files = native_files(tmp_path)
    for name, (path, _task, source, agent, reward) in files.items():
        page.goto(f"{live_server.url}/t/{team.slug}/datasets/")
        page.set_input_files("#upload-form input[name=file]", str(path))
        page.fill("#upload-form input[name=name]", name)
        page.click("#upload-form button[type=submit]")
        page.wait_for_url(re.compile(r"/datasets/\d+/$"))
        page.wait_for_selector("#preview")  # once the worker has validated it
        row = page.locator(f".routing-sources tr[data-source='{source}']")
        assert row.locator("[data-reward]").inner_text() == reward, name
        agent_row = page.locator(f".routing-agents tr[data-agent='{agent or '(none)'}']")
        expected_flow = "agent_env_loop" if agent else "the run's rollout.agent_name"
        assert agent_row.locator("[data-flow]").inner_text() == expected_flow, name
        datasets[name] = Dataset.objects.get(name=name)
        assert datasets[name].status == DatasetStatus.VALID
    page.screenshot(path=str(tmp_path / "routing.png"))

    runs = []
    for name, (_path, task, *_rest) in files.items():
        experiment = Experiment.create(team, personas["alice"], two_steps(name, task, datasets[name]), [1])
        runs += experiment.launch().runs
    finished = poll_until(lambda: all(r.is_terminal for r in Run.objects.filter(pk__in=[r.pk for r in runs])))
    assert finished
    reward = MetricKey.objects.get(name="reward/mean")
    for run in Run.objects.filter(pk__in=[r.pk for r in runs]):
        assert run.status == RunStatus.SUCCEEDED, (run.name, run.message)
        assert set(MetricPoint.objects.filter(run=run, key=reward).values_list("step", flat=True)) == {1, 2}
        assert Trajectory.objects.filter(run=run, training_step=2).count() == 4


def test_a_file_with_an_unknown_data_source_gets_one_grouped_problem_a_mapping_form_then_is_valid(
    personas: dict[str, Any], login: Any, live_server: Any, start_worker: Any, tmp_path: Path
) -> None:
    from webapp.tools.models import TeamReward

    start_worker()
    team = personas["acme"]
    TeamReward.register(team, personas["alice"], name="lab_exact", kind="rule", rule="exact")
    rows = [{"data_source": "my_lab_qa", "prompt": [{"role": "user", "content": f"Question {i}?"}],
             "reward_model": {"style": "rule", "ground_truth": str(i)}, "extra_info": {"index": i}}
            for i in range(30)]  # fmt: skip
    path = tmp_path / "lab.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    page = login("bob")
    page.goto(f"{live_server.url}/t/{team.slug}/datasets/")
    page.set_input_files("#upload-form input[name=file]", str(path))
    page.click("#upload-form button[type=submit]")
    page.wait_for_url(re.compile(r"/datasets/\d+/$"))
    form = page.locator("form.mapping-form")
    form.wait_for()
    [problem] = page.locator(".problems tbody tr").all()
    cells = problem.locator("td").all_inner_texts()
    assert (
        cells[:2] == ["rows 0\u201329 (30 rows)", "data_source"]
        and "'my_lab_qa'" in cells[2]
        and "map it" in cells[2]
    )
    page.screenshot(path=str(tmp_path / "mapping.png"), full_page=True)
    form.locator("select").select_option("lab_exact")
    form.locator("button[type=submit]").click()
    page.wait_for_selector("#preview")
    dataset = Dataset.objects.get()
    assert dataset.status == DatasetStatus.VALID and dataset.reward_map == {"my_lab_qa": "lab_exact"}
    assert dataset.path.exists() and dataset.problems == []
    row = page.locator(".routing-sources tr[data-source='my_lab_qa']")
    assert (
        row.locator("[data-reward]").inner_text() == "lab_exact"
        and "mapped on the dataset" in row.inner_text()
    )
