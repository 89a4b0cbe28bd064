"""A run's team tools and rewards: registered for that run only, routed, and called through the one
outbound helper that checks the allowlist."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from trainer.contract import REWARD_ERRORS, OutboundRules, RunSpecs, TeamRewardSpec, TeamToolSpec
from trainer.flows import FLOWS
from trainer.mdp import Step, ToolCallRecord, Trajectory
from trainer.registry import Registry, RegistryError
from trainer.rewards import (
    DATA_SOURCES,
    REWARDS,
    RewardError,
    UnroutedDataSource,
    route,
    score_step,
)
from trainer.rollout import rollout_metrics, score_trajectory
from trainer.team import UnavailableTool, check_run_tools, run_scope
from trainer.team_rewards import rule_score
from trainer.tools import TOOLS, run_tool_call


class Endpoint:
    """A loopback endpoint that counts its calls: /tool answers a tool, /score a reward, /slow stalls."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.release = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                endpoint.calls.append({"path": self.path, "body": body, "headers": dict(self.headers)})
                if self.path == "/slow":
                    endpoint.release.wait(5)
                answer: Any = (
                    {"text": f"found {body.get('query')}"}
                    if self.path == "/tool"
                    else {"score": float("4" in body.get("response", "")), "pred": 4}
                )
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
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    server = Endpoint()
    server.thread.start()
    yield server
    server.close()


def allowing(endpoint: Endpoint) -> OutboundRules:
    """The outbound policy a run receives when STUDIO_TOOL_ALLOWLIST names this endpoint."""
    return OutboundRules(rules=[endpoint.url.removeprefix("http://")])


def tool_spec(url: str, **changes: Any) -> TeamToolSpec:
    fields: dict[str, Any] = {
        "name": "team_lookup", "description": "Look it up.", "kind": "http", "url": url,
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
        "secret": "s3cr3t-value", "timeout_s": 2.0,
    }  # fmt: skip
    return TeamToolSpec(**{**fields, **changes})


def test_a_scoped_entry_exists_only_inside_its_block_and_its_own_thread() -> None:
    registry: Registry[int] = Registry("number")
    registry.add("one", 1)
    seen: list[bool] = []
    with registry.scoped({"two": 2}):
        assert registry.get("two") == 2 and "two" in registry and registry.names() == ["one", "two"]
        worker = threading.Thread(target=lambda: seen.append("two" in registry))
        worker.start()
        worker.join()

        async def in_a_task() -> int:
            return registry.get("two")

        assert asyncio.run(in_a_task()) == 2  # asyncio tasks started inside the block see it
    assert seen == [False] and "two" not in registry and registry.names() == ["one"]
    with pytest.raises(RegistryError, match="already registered"), registry.scoped({"one": 3}):
        pass


def test_other_projects_flow_names_stand_for_ours() -> None:
    assert FLOWS.canonical("tool_agent") == "agent_env_loop" and FLOWS.get("single_turn_agent") is FLOWS.get(
        "single_step"
    )
    assert {"hotpotqa_agent", "alfworld_agent", "webshop_agent", "gsm8k_tool", "single_step_agent"} <= set(
        FLOWS.aliases()
    )


def test_routing_goes_mapping_then_name_then_exact_then_longest_prefix(temp_register: Any) -> None:
    from tasks_lib.registry import load_recipes

    load_recipes()
    assert route("openai/gsm8k").reward == "verl_gsm8k"  # verl's own name: verl's rule by default
    assert route("openai/gsm8k", rule="lenient").reward == "gsm8k"
    assert (route("aime2025").reward, route("aime2025").rule) == ("verl_math_dapo", "names starting 'aime'")
    assert route("alfworld_valid_unseen").reward == "alfworld"
    assert route("searchR1_nq", rule="lenient").reward == "search_r1"
    assert route("hiyouga/geometry3k").reward is None and "image" in route("hiyouga/geometry3k").message
    assert "sandbox" in route("codeforces").message and "map it" in route("codeforces").message
    assert route("my_own_task").reward is None
    assert route("openai/gsm8k", {"openai/gsm8k": "exact"}).reward == "exact"
    with DATA_SOURCES.mapped({"my_own_task": "contains"}):
        assert score_step("my_own_task", "it is 4", "4") == (1.0, {})
    with pytest.raises(UnroutedDataSource, match="map it to a reward function"):
        score_step("my_own_task", "it is 4", "4")


@pytest.mark.parametrize(
    ("rule", "response", "truth", "options", "expected"),
    [
        ("exact", "The Eiffel tower!", ["eiffel tower"], {}, 1.0),
        ("numeric", "so about 3.14159", "3.14", {"tolerance": 0.01}, 1.0),
        ("numeric", "so about 3.2", "3.14", {"tolerance": 0.01}, 0.0),
        ("contains", "I think it was Paris, France", {"target": ["paris"]}, {}, 1.0),
        ("regex", "reasoning... ANSWER: Blue Whale", "blue whale", {"pattern": r"ANSWER:\s*(.+)"}, 1.0),
        ("f1", "the big red barn", "red barn", {}, 0.8),
    ],
)
def test_each_rule_kind_scores_as_documented(
    rule: str, response: str, truth: Any, options: dict[str, Any], expected: float
) -> None:
    assert rule_score(rule, response, truth, **options) == pytest.approx(expected)


def test_a_team_rule_reward_with_a_format_bonus_scores_inside_its_run_only() -> None:
    spec = TeamRewardSpec(
        name="team_qa", kind="rule", rule="exact", pattern="", format_pattern=r"^<answer>", format_bonus=0.1
    )
    with run_scope(RunSpecs(rewards=[spec]), {"qa_v2": "team_qa"}):
        assert score_step("qa_v2", "<answer>", "<answer>") == (1.1, {"acc": 1.0, "format": 1.0})
        assert score_step("qa_v2", "nope", "yes")[0] == 0.0
    assert "team_qa" not in REWARDS


def test_a_team_http_tool_is_called_with_its_secret_and_only_on_an_allowed_host(endpoint: Endpoint) -> None:
    specs = RunSpecs(tools=[tool_spec(endpoint.url + "/tool")], outbound=allowing(endpoint))
    with run_scope(specs):
        check_run_tools(["team_lookup", "echo"])
        tool = TOOLS.get("team_lookup")()
        record = asyncio.run(
            run_tool_call(ToolCallRecord("team_lookup", {"query": "x"}), {"team_lookup": tool}, timeout_s=5)
        )
    assert record.error is None and record.result == "found x"
    assert endpoint.calls[0]["headers"]["X-Tool-Secret"] == "s3cr3t-value"
    assert "team_lookup" not in TOOLS and "s3cr3t" not in repr(specs)
    with pytest.raises(UnavailableTool, match="'team_lookup' is not available"):
        check_run_tools(["team_lookup"])
    # A host taken off the allowlist is refused at call time, before anything is sent.
    refusing = OutboundRules(rules=["tools.internal:8080"])
    with run_scope(RunSpecs(tools=[tool_spec(endpoint.url + "/tool")], outbound=refusing)):
        tool = TOOLS.get("team_lookup")()
        record = asyncio.run(
            run_tool_call(ToolCallRecord("team_lookup", {"query": "y"}), {"team_lookup": tool}, timeout_s=5)
        )
    assert record.error == "execution" and "is not allowed" in record.result and len(endpoint.calls) == 1


def test_a_python_tool_that_no_longer_imports_fails_the_run_scope_naming_it() -> None:
    spec = TeamToolSpec(name="gone_tool", kind="python", entry_point="no_such_package.tools:Gone",
                        parameters={"type": "object", "properties": {}})  # fmt: skip
    with (
        pytest.raises(UnavailableTool, match="'gone_tool': cannot import no_such_package"),
        run_scope(RunSpecs(tools=[spec])),
    ):
        pass


def test_a_remote_reward_scores_and_one_that_times_out_is_a_reward_error_not_a_crash(
    endpoint: Endpoint,
) -> None:
    good = TeamRewardSpec(name="remote_ok", kind="remote", url=endpoint.url + "/score", secret="rw-secret")
    slow = TeamRewardSpec(
        name="remote_slow", kind="remote", url=endpoint.url + "/slow", timeout_s=0.3, retries=1
    )
    specs = RunSpecs(rewards=[good, slow], outbound=allowing(endpoint))
    with run_scope(specs, {"qa_remote": "remote_ok", "qa_slow": "remote_slow"}):
        assert score_step("qa_remote", "it is 4", "4") == (1.0, {"pred": 4})
        sent = endpoint.calls[-1]
        assert sent["body"] == {
            "data_source": "qa_remote",
            "response": "it is 4",
            "ground_truth": "4",
            "extra_info": {},
        }
        assert sent["headers"]["X-Reward-Secret"] == "rw-secret"
        with pytest.raises(RewardError, match=r"timed out after 0.3 s \(2 tries\)"):
            score_step("qa_slow", "4", "4")
        trajectory = Trajectory(id="t", group_id="g", sample_index=0, steps=[
            Step(prompt_ids=[1], response_ids=[2], response_mask=[1], rollout_log_probs=[0.0], reward=None,
                 done=True, response_text="4")])  # fmt: skip
        started = time.perf_counter()
        score_trajectory(trajectory, {"data_source": "qa_slow", "extra_info": {"index": 0}})
    assert trajectory.steps[0].reward == 0.0 and "timed out" in trajectory.steps[0].info["reward_error"]
    assert time.perf_counter() - started < 3
    assert rollout_metrics([trajectory])[REWARD_ERRORS] == 1.0
