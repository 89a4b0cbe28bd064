"""`studio mcp` driven by the `mcp` SDK's own client against a live server (docs/mcp.md): over stdio
(the client spawns `studio mcp`) and over streamable HTTP on loopback. The agent sees its team's runs
and rollouts only, and a read-only token is refused a write."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.webapp.polling import poll_until
from tests.webapp.trainer_posts import trajectory
from tests.xdist_workers import free_port
from trainer.contract import TrajectoryBatch
from webapp.accounts.models import ApiToken, Scope
from webapp.experiments.models import Experiment, Run, RunStatus
from webapp.ingestion import trajectories
from webapp.rollouts.models import Annotation

STUDIO = str(Path(sys.executable).parent / "studio")
ROOT = Path(__file__).resolve().parents[2]  # this checkout's code, whichever one the venv installed


@pytest.fixture
def world(live_server: Any, personas: dict[str, Any]) -> dict[str, Any]:
    """Acme's run with four rollouts at step 3, and a run of the other team."""
    acme = Experiment.objects.create(team=personas["acme"], name="acme exp")
    ours = Run.objects.create(experiment=acme, team=acme.team, name="acme-run", status=RunStatus.RUNNING)
    wires = [trajectory(f"t{i}", f"p{i // 2}", float(i % 2)) for i in range(4)]
    batch = TrajectoryBatch.model_validate({"training_step": 3, "trajectories": wires})
    trajectories.store_batch(ours, batch, "b1")
    other = Experiment.objects.create(team=personas["other"], name="other exp")
    theirs = Run.objects.create(experiment=other, team=other.team, name="secret-run")
    return {"url": live_server.url, "ours": ours, "theirs": theirs}


def studio_env(world: dict[str, Any], token: str, tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "STUDIO_URL": world["url"],
        "STUDIO_TEAM": "acme",
        "STUDIO_TOKEN": token,
        "STUDIO_CONFIG": str(tmp_path / "none.json"),
        "PYTHONPATH": str(ROOT),
    }


async def call(session: ClientSession, tool: str, **arguments: Any) -> tuple[bool, Any]:
    """(whether the tool failed, its JSON answer or its error text)."""
    result = await session.call_tool(tool, arguments, read_timeout_seconds=timedelta(seconds=60))
    text = result.content[0].text if result.content else ""  # type: ignore[union-attr]
    return result.isError, (text if result.isError else json.loads(text))


async def over_stdio(env: dict[str, str], world: dict[str, Any]) -> dict[str, Any]:
    params = StdioServerParameters(command=STUDIO, args=["mcp"], env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        ours, theirs = world["ours"].pk, world["theirs"].pk
        return {
            "tools": {tool.name for tool in (await session.list_tools()).tools},
            "runs": await call(session, "list_runs"),
            "rollouts": await call(session, "get_rollouts", run_id=ours, step=3, success=True),
            "trajectory": await call(session, "get_trajectory", run_id=ours, trajectory_id="t1"),
            "theirs": await call(session, "get_run", run_id=theirs),
            "health": await call(session, "get_health", run_id=ours),
            "compare": await call(session, "compare_runs", run_ids=[ours, theirs]),
            "cancel": await call(session, "cancel_run", run_id=ours),
            "label": await call(
                session, "label_trajectory", run_id=ours, trajectory_id="t1", label="correct"
            ),
        }


def test_an_agent_lists_runs_reads_rollouts_and_a_read_only_token_cannot_write(
    world: dict[str, Any], personas: dict[str, Any], tmp_path: Path
) -> None:
    token = ApiToken.issue(personas["bob"], "agent", scopes=[Scope.READ])[1]
    seen = asyncio.run(over_stdio(studio_env(world, token, tmp_path), world))

    assert {"list_runs", "get_rollouts", "search_trajectories", "compare_runs", "cancel_run"} <= seen["tools"]
    failed, runs = seen["runs"]
    assert not failed and [r["name"] for r in runs["runs"]] == ["acme-run"]  # the other team's is unseen
    failed, rollouts = seen["rollouts"]
    assert not failed and rollouts["count"] == 2 and {t["id"] for t in rollouts["items"]} == {"t1", "t3"}
    failed, one = seen["trajectory"]
    assert not failed and one["steps"][0]["tool_calls"][0]["name"] == "calc"
    failed, message = seen["theirs"]
    assert failed and "not found" in message
    failed, health = seen["health"]
    assert not failed and health["checks"] and not any(check["firing"] for check in health["checks"])
    failed, message = seen["compare"]
    assert failed and "not found" in message  # comparing with another team's run reveals nothing
    failed, message = seen["cancel"]
    assert failed and "read" in message.lower()
    failed, message = seen["label"]
    assert failed and "read" in message.lower() and not Annotation.objects.exists()
    world["ours"].refresh_from_db()
    assert world["ours"].status == RunStatus.RUNNING and not world["ours"].cancel_requested


@contextlib.contextmanager
def http_server(env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [STUDIO, "mcp", "--transport", "http", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        poll_until(lambda: _listening(port, proc))
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _listening(port: int, proc: subprocess.Popen[bytes]) -> bool:
    assert proc.poll() is None, f"studio mcp exited ({proc.returncode})"
    try:
        httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=2)
    except httpx.HTTPError:
        return False
    return True


async def over_http(url: str, run_id: int) -> dict[str, Any]:
    async with streamable_http_client(url) as (read, write, _), ClientSession(read, write) as session:
        await session.initialize()
        return {
            "runs": await call(session, "list_runs", query="ACME"),
            "search": await call(session, "search_trajectories", query="answer", run_ids=[run_id]),
            "label": await call(
                session,
                "label_trajectory",
                run_id=run_id,
                trajectory_id="t1",
                label="wrong",
                note="off by one",
            ),
            "fork": await call(session, "fork_run", run_id=run_id, changes={"optim.lr": 5e-7}),
            "cancel": await call(session, "cancel_run", run_id=run_id),
        }


def test_over_streamable_http_a_member_token_searches_and_cancels(
    world: dict[str, Any], personas: dict[str, Any], tmp_path: Path
) -> None:
    token = ApiToken.issue(personas["bob"], "agent")[1]
    with http_server(studio_env(world, token, tmp_path)) as url:
        seen = asyncio.run(over_http(url, world["ours"].pk))
    failed, runs = seen["runs"]
    assert not failed and [r["id"] for r in runs["runs"]] == [world["ours"].pk]
    failed, hits = seen["search"]
    assert not failed and len(hits["hits"]) == 4 and all("answer" in h["snippet"] for h in hits["hits"])
    failed, labelled = seen["label"]
    assert not failed and labelled["label"] == "wrong"
    assert Annotation.objects.get(trajectory__uid="t1").note == "off by one"
    failed, message = seen["fork"]
    # The fork reached the REST API, which refuses this bare experiment's config in its own words.
    assert failed and "config.task: unknown task" in message
    failed, cancelled = seen["cancel"]
    assert not failed and cancelled["cancel_requested"]
