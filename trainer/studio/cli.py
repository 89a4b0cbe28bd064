"""``studio``: Agent-R1 Studio from the shell, through its REST API (docs/cli.md).

Exit codes (for scripts): 0 done; 1 the server refused (its error is printed); 2 a usage mistake;
3 done, but the outcome is a failure (an invalid dataset, a run that failed or was cancelled);
4 the server cannot be reached or the token is missing or refused. ``--json`` prints the API's JSON.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from trainer.contract import REWARD_MEAN
from trainer.studio.client import FINISHED, Settings, StudioClient, StudioError, sha256_of, write_config

EXIT_REFUSED, EXIT_FAILED_OUTCOME, EXIT_UNREACHABLE = 1, 3, 4
BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 60) -> str:
    """The last ``width`` values as block characters, scaled between their minimum and maximum."""
    shown = [v for v in values[-width:] if v == v]  # NaN compares unequal to itself: left out
    if not shown:
        return ""
    low, high = min(shown), max(shown)
    span = high - low
    return "".join(BARS[int((v - low) / span * (len(BARS) - 1)) if span else 0] for v in shown)


class Context:
    def __init__(self, as_json: bool, team: str | None, url: str | None) -> None:
        self.as_json = as_json
        self.settings = Settings.load()
        if team:
            self.settings.team = team
        if url:
            self.settings.url = url

    def client(self) -> StudioClient:
        return StudioClient(self.settings)

    def emit(self, value: Any, text: str | Callable[[], str]) -> None:
        click.echo(json.dumps(value, indent=2) if self.as_json else (text() if callable(text) else text))


pass_context = click.make_pass_decorator(Context)


def _fail(error: StudioError) -> None:
    unreachable = error.status in (0, 401)
    click.echo(f"error: {error}", err=True)
    sys.exit(EXIT_UNREACHABLE if unreachable else EXIT_REFUSED)


class StudioGroup(click.Group):
    """Every StudioError of a command ends it with its exit code and the server's message."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except StudioError as error:
            _fail(error)


@click.group(cls=StudioGroup)
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead of text.")
@click.option("--team", help="The team's slug (default: from `studio login` or STUDIO_TEAM).")
@click.option("--url", help="The server (default: from `studio login` or STUDIO_URL).")
@click.pass_context
def main(ctx: click.Context, as_json: bool, team: str | None, url: str | None) -> None:
    """Agent-R1 Studio from the shell: datasets, experiments, runs, imports."""
    ctx.obj = Context(as_json, team, url)


@main.command()
@click.option("--url", "login_url", required=True, help="The server, e.g. http://127.0.0.1:8000.")
@click.option("--team", "login_team", required=True, help="The team's slug, as in its pages' URLs.")
@click.option("--token", prompt=True, hide_input=True, help="A personal API token (Account → API tokens).")
@pass_context
def login(context: Context, login_url: str, login_team: str, token: str) -> None:
    """Check the token against the server and save it (file readable by you only)."""
    context.settings = Settings(url=login_url, token=token, team=login_team)
    context.client().whoami()
    path = write_config(context.settings)
    context.emit({"config": str(path), "url": login_url, "team": login_team}, f"saved to {path}")


# -- datasets -------------------------------------------------------------------------------------


@main.group()
def datasets() -> None:
    """Upload and list the team's datasets."""


@datasets.command("upload")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", default="", help="Default: the file's name.")
@pass_context
def upload(context: Context, file: Path, name: str) -> None:
    """Upload a parquet file with a progress bar and print its validation.

    Restartable: the file is hashed first, and content the team already has is not sent again."""
    client = context.client()
    size = file.stat().st_size
    quiet = context.as_json
    with tqdm(total=size, unit="B", unit_scale=True, desc="hashing", disable=quiet, file=sys.stderr) as bar:
        digest = sha256_of(file, bar.update)
    found = client.find_dataset(digest)
    if found is None:
        with tqdm(
            total=size, unit="B", unit_scale=True, desc="uploading", disable=quiet, file=sys.stderr
        ) as bar:
            found = client.upload_dataset(file, name, bar.update)
    context.emit(found, lambda: _dataset_text(found))
    if found["status"] not in ("valid",):
        sys.exit(EXIT_FAILED_OUTCOME)


def _dataset_text(dataset: dict[str, Any]) -> str:
    lines = [f"dataset {dataset['id']} {dataset['name']!r}: {dataset['status']}"]
    lines += [f"  {problem.get('message', problem)}" for problem in dataset.get("problems", [])[:10]]
    return "\n".join(lines)


# -- experiments ----------------------------------------------------------------------------------


@main.group()
def experiments() -> None:
    """Create and launch experiments."""


@experiments.command("create")
@click.option("--preset", default="grpo", show_default=True)
@click.option("--task", required=True)
@click.option("--dataset", type=int, required=True, help="The training dataset's id.")
@click.option("--name", default=None, help="Default: task, preset and the time.")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE",
              help="A RunConfig field, e.g. --set rollout.n=4 (the value is read as JSON when it can be).")  # fmt: skip
@click.option("--seed", "seeds", type=int, multiple=True, help="One run per seed.")
@pass_context
def create(context: Context, preset: str, task: str, dataset: int, name: str | None,
           overrides: tuple[str, ...], seeds: tuple[int, ...]) -> None:  # fmt: skip
    """Create an experiment from a preset, a task and a dataset; the rest comes from their defaults."""
    body: dict[str, Any] = {"preset": preset, "task": task, "dataset": dataset, "config": _overrides(overrides),
                            "seeds": list(seeds)}  # fmt: skip
    if name:
        body["name"] = name
    made = context.client().create_experiment(body)
    context.emit(made, f"experiment {made['id']} {made['name']!r}")


def _overrides(pairs: Sequence[str]) -> dict[str, Any]:
    chosen: dict[str, Any] = {}
    for pair in pairs:
        path, sep, raw = pair.partition("=")
        if not sep or not path:
            raise click.BadParameter(f"{pair!r}: write PATH=VALUE", param_hint="--set")
        try:
            chosen[path] = json.loads(raw)
        except json.JSONDecodeError:
            chosen[path] = raw
    return chosen


@experiments.command("launch")
@click.argument("experiment_id", type=int)
@click.option("--watch", "then_watch", is_flag=True, help="Then watch the first run to its end.")
@pass_context
def launch(context: Context, experiment_id: int, then_watch: bool) -> None:
    """Launch one run per seed."""
    runs = context.client().launch(experiment_id)
    context.emit(runs, lambda: "\n".join(f"run {r['id']} {r['name']!r}: {r['status']}" for r in runs))
    if then_watch and runs:
        _watch(context, runs[0]["id"], REWARD_MEAN)


# -- runs -----------------------------------------------------------------------------------------


@main.group()
def runs() -> None:
    """List, watch, read and cancel runs."""


@runs.command("list")
@click.option("--status", default="", help="Only runs of this status.")
@click.option("--experiment", type=int, default=None)
@click.option("--page", type=int, default=1)
@pass_context
def list_runs(context: Context, status: str, experiment: int | None, page: int) -> None:
    """The team's runs, newest first."""
    found = context.client().runs(status=status, experiment=experiment, page=page)
    context.emit(found, lambda: _runs_table(found["items"]))


def _runs_table(items: list[dict[str, Any]]) -> str:
    rows = [f"{'id':>6}  {'status':<10} {'step':>9}  name"]
    rows += [
        f"{r['id']:>6}  {r['status']:<10} {r['step']:>4}/{r['total_steps']:<4}  {r['name']}" for r in items
    ]
    return "\n".join(rows)


@runs.command("watch")
@click.argument("run_id", type=int)
@click.option("--key", default=REWARD_MEAN, show_default=True, help="The metric drawn as it arrives.")
@click.option("--every", default=2.0, show_default=True, help="Seconds between two looks.")
@pass_context
def watch(context: Context, run_id: int, key: str, every: float) -> None:
    """Follow a run to its end, drawing the reward as it arrives; exit 3 unless it succeeded."""
    _watch(context, run_id, key, every)


def _watch(context: Context, run_id: int, key: str, every_s: float = 2.0) -> None:
    run: dict[str, Any] = {}
    values: list[float] = []
    for run, values in context.client().watch(run_id, key, every_s):
        if context.as_json:
            click.echo(json.dumps({"status": run["status"], "step": run["step"], key: values[-1:] or None}))
        else:
            last = f"{values[-1]:.4g}" if values else "-"
            click.echo(f"run {run_id} {run['status']:<10} step {run['step']}/{run['total_steps']}  "
                       f"{key} {last}  {sparkline(values)}")  # fmt: skip
    if run.get("status") != "succeeded":
        sys.exit(EXIT_FAILED_OUTCOME)


@runs.command("logs")
@click.argument("run_id", type=int)
@click.option("--follow", is_flag=True, help="Keep printing what arrives until the run ends.")
@pass_context
def logs(context: Context, run_id: int, follow: bool) -> None:
    """The run's log (its tail; with --follow, everything as it comes)."""
    client = context.client()
    found = client.logs(run_id)
    context.emit(found, found["text"])
    after = found["next_after"]
    while follow and found["status"] not in FINISHED:
        time.sleep(2.0)
        found = client.logs(run_id, after)
        if found["text"]:
            context.emit(found, found["text"])
        after = found["next_after"]


@runs.command("cancel")
@click.argument("run_id", type=int)
@pass_context
def cancel(context: Context, run_id: int) -> None:
    """Cancel a run (a running one is asked to stop)."""
    found = context.client().cancel(run_id)
    context.emit(
        found, f"run {found['id']}: {found['status']}{' (stopping)' if found['cancel_requested'] else ''}"
    )


# -- import ---------------------------------------------------------------------------------------


@main.command("import")
@click.argument("dumps", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--metrics", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A JSONL metrics file (verl's file logger, or {step, key: value} lines).")  # fmt: skip
@click.option("--experiment", default="imports", show_default=True)
@click.option("--name", default="", help="The run's name (default: run-<id>).")
@pass_context
def import_(
    context: Context, dumps: tuple[Path, ...], metrics: Path | None, experiment: str, name: str
) -> None:
    """Import a run trained elsewhere: Agent-R1 or verl {global_step}.jsonl dumps (files or folders)."""
    files = sorted(
        {f for path in dumps for f in ([path] if path.is_file() else path.glob("*.jsonl"))},
        key=lambda p: p.name,
    )
    if not files:
        raise click.BadParameter("no .jsonl files found", param_hint="DUMPS")
    done = context.client().import_run(files, metrics, experiment, name)
    context.emit(done, f"run {done['run']['id']} {done['run']['name']!r}: {done['trajectories']} trajectories "
                       f"over {done['steps']} steps, {done['points']} metric points ({done['format']})")  # fmt: skip
