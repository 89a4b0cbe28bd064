"""``studio``: Agent-R1 Studio from the shell, through its REST API (docs/cli.md).

Exit codes (for scripts): 0 done; 1 the server refused (its error is printed); 2 a usage mistake;
3 done, but the outcome is a failure (an invalid dataset, a run that failed or was cancelled);
4 the server cannot be reached or the token is missing or refused. ``--json`` prints the API's JSON.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from trainer.config import RunConfig, section_model
from trainer.contract import REWARD_MEAN
from trainer.studio import import_cli, mcp_cli
from trainer.studio.cli_context import (
    EXIT_FAILED_OUTCOME,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    Context,
    dataset_text,
    pass_context,
    set_pairs,
)
from trainer.studio.client import FINISHED, Settings, StudioError, sha256_of, write_config
from trainer.studio.review_cli import COMMANDS as REVIEW_COMMANDS
from trainer.studio.study import COMMANDS as STUDY_COMMANDS
from trainer.studio.sync import sync

CONFIG_SECTIONS = [name for name in RunConfig.model_fields if section_model(RunConfig, name)]
# How --set names a field (docs/cli.md#field-paths); the server names a path it does not know, and the
# known paths it may mean.
SET_HELP = (
    "PATH is a config field's dotted path, section.field: rollout.tools, rollout.n, optim.lr, "
    f"trainer.total_steps (the sections: {', '.join(CONFIG_SECTIONS)}; top-level fields such as "
    "backend and executor have none). VALUE is read as JSON when it "
    """can be, else as text: --set rollout.n=4, --set 'rollout.tools=["calculator"]'. Repeat for more."""
)
BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 60) -> str:
    """The last ``width`` values as block characters, scaled between their minimum and maximum."""
    shown = [v for v in values[-width:] if v == v]  # NaN compares unequal to itself: left out
    if not shown:
        return ""
    low, high = min(shown), max(shown)
    span = high - low
    return "".join(BARS[int((v - low) / span * (len(BARS) - 1)) if span else 0] for v in shown)


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
    """Agent-R1 Studio from the shell: datasets, experiments, runs, sweeps, imports."""
    ctx.obj = Context(as_json, team, url)


for _command in STUDY_COMMANDS:  # compare, histogram, prompt (docs/cli.md#compare-and-histograms)
    main.add_command(_command)
for _command in REVIEW_COMMANDS:  # label, queue, export (docs/annotations.md#rest-and-cli)
    main.add_command(_command)


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
    context.emit(found, lambda: dataset_text(found))
    if found["status"] not in ("valid",):
        sys.exit(EXIT_FAILED_OUTCOME)


# -- experiments ----------------------------------------------------------------------------------


@main.group()
def experiments() -> None:
    """Create and launch experiments."""


@experiments.command("create")
@click.option("--preset", default="grpo", show_default=True)
@click.option("--task", required=True)
@click.option("--dataset", type=int, required=True, help="The training dataset's id.")
@click.option("--name", default=None, help="Default: task, preset and the time.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="PATH=VALUE",
    help=SET_HELP,
)
@click.option("--seed", "seeds", type=int, multiple=True, help="One run per seed.")
@pass_context
def create(
    context: Context,
    preset: str,
    task: str,
    dataset: int,
    name: str | None,
    overrides: tuple[str, ...],
    seeds: tuple[int, ...],
) -> None:
    """Create an experiment from a preset, a task and a dataset; the rest comes from their defaults."""
    body: dict[str, Any] = {
        "preset": preset,
        "task": task,
        "dataset": dataset,
        "config": set_pairs(overrides),
        "seeds": list(seeds),
    }
    if name:
        body["name"] = name
    made = context.client().create_experiment(body)
    context.emit(made, f"experiment {made['id']} {made['name']!r}")


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
    """List, watch, read, cancel and resume runs."""


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
    rows += [f"{r['id']:>6}  {r['status']:<10} {steps_text(r):>9}  {r['name']}" for r in items]
    return "\n".join(rows)


def steps_text(run: dict[str, Any]) -> str:
    """``step/total`` for a launched run; the steps stored alone for an external one (logged
    through MLflow or imported: no total is known)."""
    if run.get("external") or not run.get("total_steps"):
        return str(run["step"])
    return f"{run['step']}/{run['total_steps']}"


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
            click.echo(
                f"run {run_id} {run['status']:<10} step {steps_text(run)}  {key} {last}  {sparkline(values)}"
            )
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


@runs.command("fork")
@click.argument("run_id", type=int)
@click.option("--step", type=int, default=None, help="The checkpoint's step; default: the latest one.")
@click.option("--set", "overrides", multiple=True, metavar="PATH=VALUE", help=SET_HELP)
@click.option("--name", default=None, help="Default: '… · fork of run N at step S'.")
@click.option("--keep-optimizer", is_flag=True, help="Keep the checkpoint's optimiser state too.")
@click.option("--launch/--no-launch", "then_launch", default=True, show_default=True)
@pass_context
def fork(
    context: Context,
    run_id: int,
    step: int | None,
    overrides: tuple[str, ...],
    name: str | None,
    keep_optimizer: bool,
    then_launch: bool,
) -> None:
    """A new experiment from a run's checkpoint with anything changed (docs/checkpoints.md#fork), launched."""
    config = set_pairs(overrides)
    if keep_optimizer:
        config["start_from.optimizer"] = True
    body: dict[str, Any] = {"step": step, "config": config}
    if name:
        body["name"] = name
    client = context.client()
    made = client.fork(run_id, body)
    launched = client.launch(made["id"]) if then_launch else []
    context.emit(
        {"experiment": made, "runs": launched},
        lambda: "\n".join(
            [f"experiment {made['id']} {made['name']!r}"]
            + [f"run {r['id']} {r['name']!r}: {r['status']}" for r in launched]
        ),
    )


@runs.command("resume")
@click.argument("run_id", type=int)
@pass_context
def resume(context: Context, run_id: int) -> None:
    """Resume a failed, cancelled or stalled run from its newest checkpoint (docs/resume.md)."""
    found = context.client().resume(run_id)
    context.emit(
        found,
        f"run {run_id}: {found['run']['status']}, attempt {found['attempt']} continues from its checkpoint "
        f"of step {found['resumed_from_step']}",
    )


# -- sweeps ---------------------------------------------------------------------------------------


@main.group()
def sweep() -> None:
    """Create, list, show and cancel sweeps: grids of presets x tasks x seeds x hyperparameters."""


@sweep.command("create")
@click.argument("grid", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", default=None, help="The sweep's name (required unless the grid file has one).")
@click.option(
    "--from-experiment",
    "base",
    type=int,
    default=None,
    help="Every cell starts from this experiment's config.",
)
@click.option("--preset", "presets", multiple=True, help="A preset axis value (repeat for more).")
@click.option("--task", "tasks", multiple=True, help="A task axis value (repeat for more).")
@click.option(
    "--param",
    "params",
    multiple=True,
    metavar="PATH=V1,V2,...",
    help="A hyperparameter axis, e.g. --param optim.lr=1e-5,3e-5 (at most two).",
)
@click.option("--seed", "seeds", type=int, multiple=True, help="One run per seed in every cell.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="PATH=VALUE",
    help="A config field every cell shares (over the base experiment's and the file's). " + SET_HELP,
)
@pass_context
def sweep_create(
    context: Context,
    grid: Path | None,
    name: str | None,
    base: int | None,
    presets: tuple[str, ...],
    tasks: tuple[str, ...],
    params: tuple[str, ...],
    seeds: tuple[int, ...],
    overrides: tuple[str, ...],
) -> None:
    """Create and launch a sweep, from a JSON or YAML grid file (the REST API's body) and/or options;
    options add to the file (axes) or override it (name, seeds, config fields)."""
    client = context.client()
    spec = _grid_file(grid) if grid else {}
    base_config = client.experiment(base)["config"] if base is not None else {}
    spec["config"] = sweep_config(base_config, spec.get("config") or {}, set_pairs(overrides))
    spec["presets"] = [*spec.get("presets", []), *presets]
    spec["tasks"] = [{"task": t} if isinstance(t, str) else t for t in [*spec.get("tasks", []), *tasks]]
    spec["params"] = [*spec.get("params", []), *(_axis(param) for param in params)]
    if len(spec["params"]) > 2:
        raise click.BadParameter("a sweep has at most two hyperparameters", param_hint="--param")
    if seeds:
        spec["seeds"] = list(seeds)
    if name:
        spec["name"] = name
    if not spec.get("name"):
        raise click.BadParameter("name the sweep (--name, or name in the grid file)", param_hint="--name")
    made = client.create_sweep(spec)
    context.emit(made, lambda: _sweep_text(made))


def sweep_config(base: dict[str, Any], *layers: dict[str, Any]) -> dict[str, Any]:
    """The cells' shared config by dotted path: the base experiment's, then each layer over it (the
    experiment's own name is not a cell's)."""
    from trainer.config import flatten_paths

    merged = flatten_paths(base)
    merged.pop("name", None)
    for layer in layers:
        merged.update(flatten_paths(layer))
    return merged


def _grid_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))  # JSON is YAML too
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise click.BadParameter(f"{path}: {error}", param_hint="GRID") from None
    if not isinstance(loaded, dict):
        raise click.BadParameter(
            f"{path}: the grid file holds one object (name, config, presets, ...)", param_hint="GRID"
        )
    return loaded


def _axis(text: str) -> dict[str, Any]:
    path, sep, raw = text.partition("=")
    if not sep or not path or not raw:
        raise click.BadParameter(f"{text!r}: write PATH=V1,V2,...", param_hint="--param")
    values = []
    for item in raw.split(","):
        try:
            values.append(json.loads(item))
        except json.JSONDecodeError:
            values.append(item)
    return {"path": path, "values": values}


@sweep.command("list")
@click.option("--page", type=int, default=1)
@pass_context
def sweep_list(context: Context, page: int) -> None:
    """The team's sweeps, newest first."""
    found = context.client().sweeps(page)
    rows = [f"{'id':>6}  {'status':<10} name"] + [
        f"{s['id']:>6}  {s['status']:<10} {s['name']}" for s in found["items"]
    ]
    context.emit(found, "\n".join(rows))


@sweep.command("show")
@click.argument("sweep_id", type=int)
@pass_context
def sweep_show(context: Context, sweep_id: int) -> None:
    """The grid: each cell's runs with their status, step and result."""
    client = context.client()
    found = client.sweep(sweep_id)

    def text() -> str:
        runs = [run for cell in found["cells"] for run in cell["runs"] if run["step"] > 0]
        rewards = {run["id"]: client.curve(run["id"], REWARD_MEAN)["value"][-1:] for run in runs}
        return _sweep_text(found, {pk: values[0] for pk, values in rewards.items() if values})

    context.emit(found, text)


@sweep.command("cancel")
@click.argument("sweep_id", type=int)
@pass_context
def sweep_cancel(context: Context, sweep_id: int) -> None:
    """Cancel every active run of the sweep (queued ones at once, running ones are asked to stop)."""
    found = context.client().cancel_sweep(sweep_id)
    context.emit(found, lambda: _sweep_text(found))


def _sweep_text(found: dict[str, Any], rewards: dict[int, float] | None = None) -> str:
    """The sweep, a line per cell and per run: status, place in line, step, last reward/mean."""
    rewards = rewards or {}
    places = {int(pk): place for pk, place in found.get("queued_places", {}).items()}
    lines = [f"sweep {found['id']} {found['name']!r}: {found['status']}"]
    for cell in found.get("cells", []):
        values = " ".join(f"{path}={value}" for path, value in cell["params"].items())
        lines.append(
            f"  {cell['preset']} · {cell['task']}{'  ' + values if values else ''}  (experiment {cell['experiment_id']})"
        )
        for run in cell["runs"]:
            waiting = f" (#{places[run['id']]} in line)" if run["id"] in places else ""
            reward = f"  {REWARD_MEAN} {rewards[run['id']]:.4g}" if run["id"] in rewards else ""
            message = f"  {run['message']}" if run.get("message") else ""
            lines.append(
                f"    run {run['id']} seed {run['seed']}: {run['status']}{waiting}  "
                f"step {steps_text(run)}{reward}{message}"
            )
    return "\n".join(lines)


# -- import ---------------------------------------------------------------------------------------


@click.command("import")
@click.argument("dumps", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--metrics",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A JSONL metrics file (verl's file logger, or {step, key: value} lines).",
)
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
    context.emit(
        done,
        f"run {done['run']['id']} {done['run']['name']!r}: {done['trajectories']} trajectories "
        f"over {done['steps']} steps, {done['points']} metric points ({done['format']})",
    )


@main.group()
def checkpoints() -> None:
    """A run's checkpoints."""


@checkpoints.command("export")
@click.argument("run_id", type=int)
@click.argument("step", type=int)
@click.option("--merge-lora", is_flag=True, help="Merge a LoRA checkpoint into its base model.")
@click.option(
    "--download",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also save the folder as a zip here.",
)
@pass_context
def checkpoint_export(
    context: Context, run_id: int, step: int, merge_lora: bool, download: Path | None
) -> None:
    """Export a checkpoint as a Hugging Face folder on the server (and download it as a zip)."""
    client = context.client()
    job = client.export_checkpoint(run_id, step, merge_lora)
    saved = f", saved as {download} ({client.download_export(job['id'], download)} bytes)" if download else ""
    context.emit(job, f"run {run_id} step {step} exported to {job['result']['path']}{saved}")


main.add_command(import_cli.import_group(import_))  # docs/importers.md
main.add_command(mcp_cli.mcp)  # docs/mcp.md
main.add_command(sync)  # `studio sync`: run folders the SDK kept (docs/sdk.md#offline-and-sync)
