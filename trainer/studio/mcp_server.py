"""``studio mcp``: a Model Context Protocol server for coding agents (docs/mcp.md).

Every tool is one or a few calls of the REST API with the user's own token (StudioClient), so an
agent sees exactly what that token sees: its team's runs only, and a read-only token reads only
(the server answers 403 and the tool reports it as an error). Nothing here touches a database.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mcp.server.fastmcp import FastMCP
from mcp.types import ToolAnnotations

from trainer.config import flatten_paths
from trainer.contract import REWARD_MEAN
from trainer.studio.client import StudioClient

SERVER_NAME = "agent-r1-studio"
DEFAULT_POINTS = 200
MAX_POINTS = 1000
MAX_PAGE_SIZE = 100
COMPARED_KEYS = 30
INSTRUCTIONS = (
    "Agent-R1 Studio: RL training runs of LLM agents. Runs have metrics (reward/mean, ...), health "
    "checks, and rollouts (trajectories of steps with tool calls) per training step. Start with "
    "list_runs, then get_run, get_metrics, get_health, get_rollouts or search_trajectories."
)
READ = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
WRITE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, openWorldHint=False)


def thin(steps: list[int], values: list[float], most: int) -> dict[str, list[Any]]:
    """At most ``most`` points, evenly spread, the last one always kept (the latest value)."""
    if len(steps) <= most:
        return {"step": steps, "value": values}
    stride = len(steps) / most
    chosen = sorted({int(i * stride) for i in range(most - 1)} | {len(steps) - 1})
    return {"step": [steps[i] for i in chosen], "value": [values[i] for i in chosen]}


def _run_line(run: dict[str, Any]) -> dict[str, Any]:
    keep = ("id", "name", "status", "experiment_id", "step", "total_steps", "external", "created", "message")
    return {key: run.get(key) for key in keep}


class StudioTools:
    """The tools, each a method whose docstring is what the agent reads."""

    def __init__(self, client: StudioClient) -> None:
        self.client = client

    # -- reads ------------------------------------------------------------------------------------

    def list_runs(
        self, query: str = "", status: str = "", experiment_id: int | None = None, page: int = 1
    ) -> dict[str, Any]:
        """The team's runs, newest first, 50 a page. `query`: text the run's name holds; `status`:
        draft, queued, starting, running, stalled, succeeded, failed or cancelled."""
        found = self.client.runs(q=query, status=status, experiment=experiment_id, page=page)
        return {"count": found["count"], "page": page, "runs": [_run_line(r) for r in found["items"]]}

    def get_run(self, run_id: int) -> dict[str, Any]:
        """One run: status, its config (the RunConfig it trains with), params and tags, and the
        latest value of every metric key."""
        run = self.client.run(run_id)
        run.pop("storage", None)
        latest = self.client.call("GET", self.client.team_path(f"/runs/{run_id}/metrics"))
        run["latest_metrics"] = {
            item["key"]: {"step": item["step"], "value": item["value"]} for item in latest
        }
        return run

    def get_metrics(
        self,
        run_id: int,
        keys: list[str],
        step_min: int | None = None,
        step_max: int | None = None,
        max_points: int = DEFAULT_POINTS,
    ) -> dict[str, Any]:
        """Metric curves of a run, downsampled to at most `max_points` points per key (spikes kept
        by the server's min/max buckets). Key names: see get_run's latest_metrics."""
        most = max(2, min(max_points, MAX_POINTS))
        params: dict[str, Any] = {"keys": ",".join(keys)}
        params.update({k: v for k, v in (("lo", step_min), ("hi", step_max)) if v is not None})
        series = self.client.team_call("GET", f"/runs/{run_id}/metrics/curve", params=params)["series"]
        return {s["key"]: thin(s["step"], s["value"], most) for s in series}

    def get_health(self, run_id: int) -> dict[str, Any]:
        """The RL health checks of a run (reward collapse, entropy, KL, ...): whether each fires,
        since which step, its latest value and threshold, and what firing means."""
        return {"checks": self.client.call("GET", self.client.team_path(f"/runs/{run_id}/health"))}

    def get_rollouts(
        self,
        run_id: int,
        step: int | None = None,
        success: bool | None = None,
        reward_min: float | None = None,
        reward_max: float | None = None,
        tool_errors: bool | None = None,
        data_source: str = "",
        page: int = 1,
        page_size: int = 20,
    ) -> dict[str, Any]:
        """The trajectories (rollouts) of a run, newest training step first, filtered and paged: by
        training `step`, success, reward range, whether a tool call failed, data source. Read one
        with every step and tool call with get_trajectory."""
        filters = {
            "step": step,
            "success": success,
            "reward_min": reward_min,
            "reward_max": reward_max,
            "tool_errors": tool_errors,
            "data_source": data_source,
            "page": page,
            "page_size": max(1, min(page_size, MAX_PAGE_SIZE)),
        }
        chosen = {k: v for k, v in filters.items() if v not in (None, "")}
        return self.client.team_call("GET", f"/runs/{run_id}/trajectories", params=chosen)

    def get_trajectory(self, run_id: int, trajectory_id: str) -> dict[str, Any]:
        """One trajectory with every step: prompt, response, reward, tool calls and their results."""
        return self.client.team_call("GET", f"/runs/{run_id}/trajectories/{trajectory_id}")

    def search_trajectories(
        self, query: str, run_ids: list[int], step: int | None = None, success: bool | None = None
    ) -> dict[str, Any]:
        """Full-text search of the runs' responses, tool arguments and tool results (web syntax:
        words, "quoted phrases", or, -word), newest step first, at most 50 hits per run."""
        hits: list[dict[str, Any]] = []
        for run_id in run_ids:
            params = {k: v for k, v in (("q", query), ("step", step), ("success", success)) if v is not None}
            hits += self.client.call("GET", self.client.team_path(f"/runs/{run_id}/search"), params=params)
        return {"hits": hits}

    def compare_runs(self, run_ids: list[int], keys: list[str] | None = None) -> dict[str, Any]:
        """Runs side by side: status and step, the config fields whose values differ, and the latest
        value of each metric key (default: reward/mean and the keys every run has, at most 30)."""
        runs = [self.get_run(run_id) for run_id in run_ids]
        configs = [flatten_paths(run.get("config") or {}) for run in runs]
        paths = sorted({path for config in configs for path in config})
        differing = {
            path: [config.get(path) for config in configs]
            for path in paths
            if len({repr(config.get(path)) for config in configs}) > 1
        }
        shared = set.intersection(*(set(run["latest_metrics"]) for run in runs)) if runs else set()
        chosen = keys or [REWARD_MEAN, *sorted(shared - {REWARD_MEAN})][:COMPARED_KEYS]
        return {
            "runs": [_run_line(run) for run in runs],
            "config_differences": differing,
            "latest": {key: [_latest(run, key) for run in runs] for key in chosen},
        }

    # -- writes (a token that may write, the member role) --------------------------------------

    def launch_experiment(self, experiment_id: int) -> dict[str, Any]:
        """Launch an experiment: one run per seed. Needs a token that may write."""
        return {"runs": [_run_line(run) for run in self.client.launch(experiment_id)]}

    def cancel_run(self, run_id: int) -> dict[str, Any]:
        """Cancel a run (a running one is asked to stop). Needs a token that may write."""
        found = self.client.cancel(run_id)
        return {**_run_line(found), "cancel_requested": found["cancel_requested"]}

    def fork_run(
        self,
        run_id: int,
        step: int | None = None,
        changes: dict[str, Any] | None = None,
        name: str | None = None,
    ) -> dict[str, Any]:
        """Fork a run's checkpoint (its latest when no step) into a new experiment with ``changes``
        (RunConfig fields such as optim.lr) over its config; launch it with launch_experiment. Needs a
        token that may write (docs/checkpoints.md#fork)."""
        body: dict[str, Any] = {"step": step, "config": changes or {}}
        if name:
            body["name"] = name
        return self.client.fork(run_id, body)

    def label_trajectory(
        self,
        run_id: int,
        trajectory_id: str,
        label: str,
        step: int | None = None,
        note: str = "",
        corrected_answer: str = "",
    ) -> dict[str, Any]:
        """Label a trajectory (or one of its steps) with a label of the team's set, a note and a
        corrected answer. Needs a token that may write (docs/annotations.md)."""
        body = {"step": step, "label": label, "note": note, "corrected_answer": corrected_answer}
        return self.client.annotate(run_id, trajectory_id, body)

    def tools(self) -> Sequence[tuple[Callable[..., Any], ToolAnnotations]]:
        reads = (
            self.list_runs,
            self.get_run,
            self.get_metrics,
            self.get_health,
            self.get_rollouts,
            self.get_trajectory,
            self.search_trajectories,
            self.compare_runs,
        )
        return [
            *((tool, READ) for tool in reads),
            *(
                (tool, WRITE)
                for tool in (self.launch_experiment, self.cancel_run, self.fork_run, self.label_trajectory)
            ),
        ]


def _latest(run: dict[str, Any], key: str) -> float | None:
    found = run["latest_metrics"].get(key)
    return found["value"] if found else None


def build_server(client: StudioClient, host: str = "127.0.0.1", port: int = 8765) -> FastMCP:
    """The MCP server with every tool; ``host`` and ``port`` serve streamable HTTP only."""
    server = FastMCP(SERVER_NAME, instructions=INSTRUCTIONS, host=host, port=port, log_level="WARNING")
    for tool, hints in StudioTools(client).tools():
        server.add_tool(tool, annotations=hints)
    return server
