"""``studio import``: the Agent-R1/verl dumps command (cli.py's, the default) beside
``studio import tensorboard DIR`` and ``studio import mlflow --tracking-uri URI`` (docs/importers.md)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click
from tqdm import tqdm

from trainer.studio import tensorboard_source
from trainer.studio.import_target import ImportTarget, SourceRun, Written, import_one
from trainer.studio.mlflow_source import MlflowSource

DUMPS = "dumps"
# One pending run: (its source tag, how to read it).
Pending = tuple[str, Callable[[], SourceRun]]


class ImportGroup(click.Group):
    """`studio import FILES…` still imports dumps: a first argument that names no subcommand goes to
    the dumps command."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = [DUMPS, *args]
        return super().parse_args(ctx, args)


def import_group(dumps: click.Command) -> click.Group:
    group = ImportGroup(
        "import",
        help="Import runs trained elsewhere: Agent-R1/verl dumps (the default), TensorBoard logs, an MLflow server.",
    )
    group.add_command(dumps, DUMPS)
    group.add_command(tensorboard)
    group.add_command(mlflow)
    return group


@click.command()
@click.argument("logdir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--experiment", default="tensorboard", show_default=True, help="The experiment the runs go to.")
@click.pass_obj
def tensorboard(context: Any, logdir: Path, experiment: str) -> None:
    """Import TensorBoard logs: every folder of LOGDIR with event files becomes a run (scalars,
    hparams, text, histograms). Resumable: a run imported before is skipped, an unfinished one completed."""
    folders = tensorboard_source.run_folders(logdir)
    if not folders:
        raise click.BadParameter("no TensorBoard event files (*tfevents*) under it", param_hint="LOGDIR")
    pending = [
        (tensorboard_source.source_of(f), _reader(tensorboard_source.read_run, logdir, f)) for f in folders
    ]
    _report(context, _import(context, experiment, pending))


@click.command()
@click.option("--tracking-uri", required=True, help="The MLflow server, e.g. http://127.0.0.1:5000.")
@click.option(
    "--experiment", "experiments", multiple=True, help="An experiment's name (repeat; default: all)."
)
@click.option(
    "--token",
    "source_token",
    envvar="STUDIO_IMPORT_MLFLOW_TOKEN",
    default="",
    help="The MLflow server's token, if it needs one (never your Studio token: it goes to that server).",
)
@click.pass_obj
def mlflow(context: Any, tracking_uri: str, experiments: tuple[str, ...], source_token: str) -> None:
    """Import an MLflow server's runs: params, tags, every metric's full history and the artifacts,
    into an experiment of the same name. Resumable like `import tensorboard`."""
    source = MlflowSource(tracking_uri, source_token)
    done: list[dict[str, Any]] = []
    for found in source.experiments(experiments):
        runs = list(source.runs(str(found["experiment_id"])))
        pending = [(source.source_of(r), _reader(source.read_run, r)) for r in runs]
        done += _import(context, found["name"], pending)
    _report(context, done)


def _reader(read: Callable[..., SourceRun], *args: Any) -> Callable[[], SourceRun]:
    return lambda: read(*args)


def _import(context: Any, experiment: str, pending: Sequence[Pending]) -> list[dict[str, Any]]:
    """Each pending run into the experiment, with a progress bar: what became of each."""
    target = ImportTarget(context.settings)
    experiment_id = target.experiment_id(experiment)
    done: list[Written] = []
    bar = tqdm(pending, unit="run", desc=experiment, disable=context.as_json, file=sys.stderr)
    for source, read in bar:
        done.append(import_one(target, experiment_id, source, read))
        bar.set_postfix(points=sum(w.points for w in done))
    return [{"experiment": experiment, **vars(w)} for w in done]


def _report(context: Any, done: list[dict[str, Any]]) -> None:
    lines = [
        f"{'skipped (imported before)' if w['skipped'] else 'imported'}: {w['experiment']} / {w['name']} "
        f"({w['points']} points)"
        for w in done
    ]
    context.emit({"runs": done}, "\n".join(lines) or "nothing to import")
