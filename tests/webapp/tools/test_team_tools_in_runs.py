"""Team tools and team rewards inside real runs, on both backends.

The torch run is the real trainer CLI (`python -m trainer run --run-id N`'s main) against the live
test server, in this process so that a test flow can make the model's first answer a tool call (a
random tiny model never writes one). The verl run is our agent loop inside verl's AgentLoopBase with
the scripted server manager (verl's LLM server, the one mock), fetching the run's specs with the run
token from the environment, as a Ray worker does. Tool and reward endpoints are loopback servers
that count their calls.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.db import connection

from trainer.config import RunConfig
from trainer.contract import API_ENV, CLAIMANT_ENV, REWARD_ERRORS, RUN_ID_ENV, TOKEN_ENV
from trainer.flows import FLOWS, AgentEnvLoop
from webapp.datasets.models import Dataset
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus
from webapp.experiments.run_files import checkpoint_dir
from webapp.ingestion.models import MetricKey, MetricPoint, TextBlob, ToolCall, Trajectory
from webapp.tools.models import TeamReward, TeamTool

pytestmark = pytest.mark.slow

SECRET = "tool-secret-7f3a9c"
REWARD_SECRET = "reward-secret-51be"
CALL = '<tool_call>\n{"name": "team_lookup", "arguments": {"query": "capital of France"}}\n</tool_call>'


class Endpoints:
    """/lookup answers the tool; /score a reward (1 when the response holds "Paris"); /slow never in time."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.release = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                outer.calls.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                if self.path == "/slow":
                    outer.release.wait(10)
                answer = (
                    {"text": "Paris is the capital of France."} if self.path == "/lookup"
                    else {"score": float("Paris" in body.get("response", ""))}
                )  # fmt: skip
                payload = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def count(self, path: str) -> int:
        return sum(call["path"] == path for call in self.calls)


@pytest.fixture
def endpoints() -> Iterator[Endpoints]:
    server = Endpoints()
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.httpd.shutdown()
    server.httpd.server_close()
    thread.join()


class LookupFirst(AgentEnvLoop):
    """The env loop, with the first answer of every episode replaced by a call of the team tool."""

    async def generate(self, prompt_ids: list[int], sampling: Any) -> Any:
        generation, text, elapsed = await super().generate(prompt_ids, sampling)
        if not getattr(self, "called", False):
            self.called = True
            text = CALL
        return generation, text, elapsed


@pytest.fixture
def lookup_flow(temp_register_flow: Any) -> str:
    return temp_register_flow("lookup_first", LookupFirst)


@pytest.fixture
def temp_register_flow() -> Iterator[Any]:
    added: list[str] = []

    def register(name: str, flow: Any) -> str:
        FLOWS.add(name, flow)
        added.append(name)
        return name

    yield register
    for name in added:
        FLOWS.unregister(name)


def team_dataset(team: Any, tmp_path: Path, data_sources: list[str], agent_name: str) -> Dataset:
    table = pa.Table.from_pylist([
        {"data_source": source, "prompt": [{"role": "user", "content": f"Question {i}: the capital of France?"}],
         "reward_model": {"style": "rule", "ground_truth": "Paris"}, "extra_info": {"index": i},
         "agent_name": agent_name}
        for i, source in enumerate(data_sources)
    ])  # fmt: skip
    path = tmp_path / f"{'-'.join(data_sources)}.parquet"
    pq.write_table(table, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    dataset, _ = Dataset.from_file(
        team, path, sha256=digest, name=path.stem, source="test", validate_later=False
    )
    dataset.validate()
    return dataset


def register_team_parts(personas: Any, endpoints: Endpoints, settings: Any) -> None:
    settings.TOOL_ALLOWLIST = [*settings.TOOL_ALLOWLIST, endpoints.url.removeprefix("http://")]
    team, alice = personas["acme"], personas["alice"]
    TeamTool.register(
        team, alice, secret=SECRET, name="team_lookup", description="Look a fact up.", kind="http",
        parameters={"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        url=endpoints.url + "/lookup", method="POST", timeout_s=5.0, secret_header="X-Tool-Secret",
    )  # fmt: skip
    TeamReward.register(
        team, alice, name="team_capital", data_source="capital_qa", kind="rule", rule="contains"
    )
    TeamReward.register(team, alice, secret=REWARD_SECRET, name="team_remote", kind="remote",
                        url=endpoints.url + "/score", timeout_s=5.0, retries=0)  # fmt: skip
    TeamReward.register(team, alice, name="team_slow", kind="remote", url=endpoints.url + "/slow",
                        timeout_s=0.3, retries=0)  # fmt: skip


def claimed_run(personas: Any, config: RunConfig) -> tuple[Run, str]:
    from webapp.experiments.acceptance import accept

    team = personas["acme"]
    config = accept(team, config)  # the datasets' reward mappings frozen in, as for any experiment
    experiment = Experiment.objects.create(
        team=team, name=config.name, task=config.task, config=json.loads(config.to_json())
    )
    run = Run.objects.create(
        experiment=experiment, team=team, seed=1, executor="local",
        kind=RunKind.SFT if config.sft.enabled else RunKind.TRAINING,
        started_from_id=config.start_from.run, started_from_step=config.start_from.step,
    )  # fmt: skip
    # Its checkpoints where the server looks for them, as a launch puts them (so a run can start from one)
    run.freeze_config(
        json.loads(config.with_overrides(**{"trainer.checkpoint_dir": checkpoint_dir(run)}).to_json())
    )
    run.enqueue()  # queued; no launch task is sent: this test is the trainer
    return run, run.issue_token()


def secret_in_database(secret: str) -> list[str]:
    """Every table whose rows hold ``secret`` as text, and every stored text (texts may be compressed)."""
    found = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT count(*) FROM "{table}" AS row WHERE row::text LIKE %s', [f"%{secret}%"])
            if cursor.fetchone()[0]:
                found.append(table)
    found += [f"text {blob.sha256}" for blob in TextBlob.objects.all() if secret in blob.text]
    return found


def torch_config(name: str, dataset: Dataset, flow: str, tools: list[str]) -> RunConfig:
    return RunConfig.from_preset("grpo", **{
        "name": name, "task": "arithmetic", "model.path": "tiny-test",
        "data.train_path": dataset.reference, "data.val_path": None, "data.shuffle": False,
        "rollout.agent_name": flow, "rollout.tools": tools, "rollout.n": 2, "rollout.max_new_tokens": 4,
        "rollout.max_steps": 2, "trainer.total_steps": 1, "trainer.batch_size": 2, "optim.mini_batch_size": 4,
        "trainer.num_threads": 1, "trainer.device": "cpu",
    })  # fmt: skip


def train_in_process(run: Run, token: str, live_server: Any, monkeypatch: pytest.MonkeyPatch) -> int:
    from trainer.cli import main

    monkeypatch.setenv(TOKEN_ENV, token)
    return main(["run", "--run-id", str(run.pk), "--api", live_server.url])


def test_a_torch_run_calls_the_team_tool_scores_with_team_rewards_and_keeps_no_secret(
    personas: Any, live_server: Any, settings: Any, endpoints: Endpoints, lookup_flow: str,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    register_team_parts(personas, endpoints, settings)
    # Row 0's data_source has a team rule reward registered for it; row 1's is mapped to the slow one.
    train = team_dataset(personas["acme"], tmp_path, ["capital_qa", "capital_slow"], lookup_flow)
    assert train.status == "unmapped" and train.unmapped_sources == ["capital_slow"]
    assert train.map_rewards({"capital_slow": "team_slow"})
    train.refresh_from_db()
    train.validate()  # the task the mapping sent goes to a broker no worker serves here
    assert train.is_usable
    config = torch_config("team parts on torch", train, lookup_flow, ["team_lookup"])
    run, token = claimed_run(personas, config)
    assert run.config["data"]["rewards"] == {"capital_qa": "team_capital", "capital_slow": "team_slow"}
    assert SECRET not in json.dumps(run.config)

    assert train_in_process(run, token, live_server, monkeypatch) == 0
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.message
    calls = ToolCall.objects.filter(run=run, name="team_lookup")
    # Every episode (2 prompts x 2 samples) called the tool once; the endpoint counted each call, with the secret.
    assert calls.count() == endpoints.count("/lookup") == Trajectory.objects.filter(run=run).count() == 4
    assert all(
        call["headers"]["X-Tool-Secret"] == SECRET for call in endpoints.calls if call["path"] == "/lookup"
    )
    assert {call.error for call in calls} == {None}
    assert calls[0].result.text == "Paris is the capital of France."  # the rollouts show what it answered
    # The slow remote reward timed out on its row's two final answers: counted, scored 0, the run went on.
    key = MetricKey.objects.get(name=REWARD_ERRORS)
    assert dict(MetricPoint.objects.filter(run=run, key=key).values_list("step", "value")) == {1: 2.0}
    assert endpoints.count("/slow") == 2
    slow = Trajectory.objects.filter(run=run, data_source="capital_slow")
    assert slow.count() == 2 and all(t.total_reward == 0.0 for t in slow)
    assert secret_in_database(SECRET) == []


def test_the_verl_agent_loop_fetches_the_runs_team_tool_and_remote_reward_over_its_token(
    personas: Any, live_server: Any, settings: Any, endpoints: Endpoints, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from transformers import AutoTokenizer

    from tests.conftest import SMOL_GGUF, smollm2_dir
    from tests.trainer.backends.verl.scripted_loop import SAMPLING, ScriptedServer, make_loop, verl_sample
    from trainer.backends.verl import worker

    register_team_parts(personas, endpoints, settings)
    team = personas["acme"]
    train = team_dataset(team, tmp_path, ["capital_remote"], "tool_agent")
    assert train.map_rewards({"capital_remote": "team_remote"})
    train.refresh_from_db()
    train.validate()
    config = RunConfig.from_preset("grpo", **{
        "name": "team parts on verl", "task": "arithmetic", "backend": "verl", "executor": "ray",
        "model.path": "tiny-test", "data.train_path": train.reference, "resources.gpus_per_node": 1,
        "trainer.batch_size": 1, "optim.mini_batch_size": 8, "rollout.tools": ["team_lookup"],
        "rollout.max_steps": 3, "rollout.max_new_tokens": 64,
    })  # fmt: skip
    run, token = claimed_run(personas, config)
    assert run.claim("ray-worker:1", "driver-1")  # the driver claimed it; the Ray workers only read
    environment = {
        API_ENV: live_server.url,
        RUN_ID_ENV: str(run.pk),
        TOKEN_ENV: token,
        CLAIMANT_ENV: "driver-1",
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    worker.set_reporter(None)
    worker.set_run_specs(None)
    tokenizer = AutoTokenizer.from_pretrained(str(smollm2_dir()), gguf_file=SMOL_GGUF)
    server = ScriptedServer(tokenizer, [CALL, "The capital is Paris."])
    frozen = RunConfig.model_validate(run.config)
    loop = make_loop(tmp_path, tokenizer, server, **{"rollout.tools": ["team_lookup"],
                                                     "data.rewards": frozen.data.rewards})  # fmt: skip
    sample = {**verl_sample("The capital of France?"), "data_source": "capital_remote",
              "reward_model": {"style": "rule", "ground_truth": "Paris"}, "agent_name": "tool_agent"}  # fmt: skip
    try:
        output = asyncio.run(loop.run(dict(SAMPLING), **sample))
        reporter = worker.trajectory_reporter()
        assert reporter is not None
        reporter.close()  # the worker's reporter flushes at exit
    finally:
        worker.set_reporter(None)
        worker.set_run_specs(None)
    assert output.extra_fields["turn_scores"] == [0.0, 1.0] and output.reward_score == 1.0
    assert endpoints.count("/lookup") == 1 and endpoints.count("/score") == 1
    assert endpoints.calls[0]["headers"]["X-Tool-Secret"] == SECRET
    assert endpoints.calls[1]["headers"]["X-Reward-Secret"] == REWARD_SECRET
    [trajectory] = Trajectory.objects.filter(run=run)
    [call] = ToolCall.objects.filter(run=run)
    assert (call.name, call.error, trajectory.total_reward) == ("team_lookup", None, 1.0)
    assert secret_in_database(SECRET) == [] and secret_in_database(REWARD_SECRET) == []


def test_a_run_whose_tool_was_deleted_fails_before_training_naming_the_tool(
    personas: Any, live_server: Any, settings: Any, endpoints: Endpoints, lookup_flow: str,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    register_team_parts(personas, endpoints, settings)
    train = team_dataset(personas["acme"], tmp_path, ["capital_qa"], lookup_flow)
    run, token = claimed_run(personas, torch_config("tool gone", train, lookup_flow, ["team_lookup"]))
    TeamTool.objects.filter(name="team_lookup").delete()
    assert train_in_process(run, token, live_server, monkeypatch) == 1
    run.refresh_from_db()
    assert (
        run.status == RunStatus.FAILED
        and "'team_lookup'" in run.message
        and "no longer exists" in run.message
    )
    assert not Trajectory.objects.filter(run=run).exists() and endpoints.calls == []
