"""The first-run demos. `make run` puts a ready arithmetic GRPO experiment on the built-in
SmolLM2-135M-Instruct in a Demo team (seed_demo). The empty dashboard's one click starts the
tool-learning demo in the user's own team (docs/sft.md#the-demos-numbers): the lookup recipe, whose
answers exist only behind its tool, a short SFT on demonstrations generated from its rows against the
real tool, then GRPO from the SFT run's checkpoint, started when that run succeeds."""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction

from tasks_lib import demonstrations
from tasks_lib.lookup import warm_start
from tasks_lib.lookup.warm_start import DEMONSTRATED_ROWS
from trainer.config import RunConfig
from webapp.accounts.models import Team
from webapp.datasets.demonstrations import adopt, source_rows
from webapp.datasets.models import Dataset, RecipeImport
from webapp.experiments.acceptance import Refused, accept
from webapp.experiments.models import Experiment, Run, RunKind, RunStatus

logger = logging.getLogger(__name__)

DEMO_RECIPE = "arithmetic"
DEMO_NAME = "Arithmetic demo (GRPO, SmolLM2-135M)"
# The demo trains on 450 generated problems and validates on 50 held out: the data bench/bench_learning.py
# measures the small-model defaults on (docs/presets.md#how-these-were-chosen). The recipe's fixtures
# (7 and 1 rows) are for tests: a curve over them shows memorising, and a validation of one row 0 or 1.
DEMO_DATA = {"size": 500}

TOOL_DEMO_RECIPE = "lookup"
TOOL_DEMO_DATA = {"size": 500}
SFT_DEMO_NAME = "Lookup demo 1/2: SFT on demonstrations (SmolLM2-135M)"
RL_DEMO_NAME = "Lookup demo 2/2: GRPO from the SFT checkpoint (SmolLM2-135M)"
# The settings bench/bench_tool_learning.py measures (docs/sft.md#the-demos-numbers); the demo also
# validates every 10 steps, so its curve shows the rise.
SFT_SETTINGS = warm_start.SFT_SETTINGS
RL_SETTINGS = {**warm_start.RL_SETTINGS, "trainer.val_every": 10}


def import_recipe(
    team: Team, recipe: str, user: Any, options: dict[str, Any] | None = None
) -> tuple[dict[str, Dataset], str]:
    """A recipe's splits as datasets of ``team`` (its fixtures; with ``options``, what PrepareOptions
    make), prepared here and now: ({split: dataset}, and the import's message when it failed). The
    same content twice gives the same datasets."""
    recipe_import = RecipeImport.start(team, recipe, "", user, options)
    recipe_import.run()  # the queued task finds it done and does nothing
    if recipe_import.status != "done":
        return {}, recipe_import.message
    return {split: d for split, d in recipe_import.splits().items() if d.is_usable}, ""


def demo_config(team: Team, datasets: dict[str, Dataset]) -> RunConfig:
    """The demo's config, accepted for ``team`` as any experiment's is (acceptance.Refused otherwise)."""
    # Nothing but what names the demo: the settings are the ones the New-experiment form starts
    # from, the preset's for a model of SmolLM2's size under the recipe's (docs/presets.md).
    return accept(team, demo_fields(DEMO_RECIPE, DEMO_NAME, datasets))


def demo_fields(recipe: str, name: str, datasets: dict[str, Dataset]) -> dict[str, Any]:
    """What names a demo experiment: its recipe, its name, the model and its datasets."""
    return {
        "preset": "grpo",
        "task": recipe,
        "name": name,
        "model.path": "smollm2-135m-instruct",
        "data.train_path": datasets["train"].reference,
        "data.val_path": datasets["val"].reference if "val" in datasets else None,
    }


def demo_experiment(team: Team, user: Any, datasets: dict[str, Dataset]) -> Experiment:
    """The team's demo experiment; made once (clicking the demo again reuses it)."""
    existing = Experiment.objects.filter(team=team, name=DEMO_NAME).first()
    if existing is not None:
        return existing
    config = demo_config(team, datasets)
    return Experiment.create(team, user, config, [1], description="The first run: one click on Launch.")


def demo_datasets(team: Team, user: Any) -> tuple[dict[str, Dataset], str]:
    """The demo's train and val datasets in ``team`` (see :func:`import_recipe`)."""
    return import_recipe(team, DEMO_RECIPE, user, DEMO_DATA)


# -- the tool-learning demo: SFT, then GRPO from its checkpoint ------------------------------------


def demonstrations_of(train: Dataset, user: Any) -> Dataset:
    """Demonstrations of the first DEMONSTRATED_ROWS training rows, generated against the real tool."""
    existing = Dataset.objects.filter(derived_from=train, team=train.team).first()
    if existing is not None and existing.is_usable:
        return existing
    outcome = demonstrations.generate(source_rows(train)[:DEMONSTRATED_ROWS])
    if not outcome.conversations:
        raise ValueError(f"no demonstration of {train.name} was verified: {outcome.summary()['dropped']}")
    return adopt(train, outcome, user)


def start_demo(team: Team, user: Any) -> Run:
    """The tool-learning demo in ``team``: the lookup datasets, their demonstrations and the SFT
    experiment, launched; its GRPO follows when the SFT run succeeds. ValueError says why not."""
    datasets, problem = import_recipe(team, TOOL_DEMO_RECIPE, user, TOOL_DEMO_DATA)
    if "train" not in datasets:
        raise ValueError(
            f"the {TOOL_DEMO_RECIPE} recipe could not prepare its datasets: {problem or 'no train split'}"
        )
    experiment = Experiment.objects.filter(team=team, name=SFT_DEMO_NAME).first()
    if experiment is None:
        demos = demonstrations_of(datasets["train"], user)
        fields = demo_fields(TOOL_DEMO_RECIPE, SFT_DEMO_NAME, {"train": demos})
        config = accept(team, {**fields, "sft.enabled": True, **SFT_SETTINGS})
        description = (
            "A short SFT on demonstrations of the lookup tool; GRPO starts from it when it succeeds."
        )
        experiment = Experiment.create(team, user, config, [1], description=description)
    return experiment.launch().runs[0]


def continue_demo(sender: Any, run: Run, **signal_args: Any) -> None:
    """When the demo's SFT run succeeds (webapp.experiments.signals.run_finished): GRPO on the
    lookup task from its last checkpoint, once, after the commit that ended the run."""
    if run.kind == RunKind.SFT and run.experiment.name == SFT_DEMO_NAME:
        transaction.on_commit(lambda: _start_rl_after(run.pk))


def _start_rl_after(run_pk: int) -> None:
    run = Run.objects.select_related("experiment", "team").filter(pk=run_pk).first()
    if run is None or run.status != RunStatus.SUCCEEDED:
        return
    team = run.team
    if Experiment.objects.filter(team=team, name=RL_DEMO_NAME).exists():
        return
    datasets, _ = import_recipe(team, TOOL_DEMO_RECIPE, run.experiment.created_by, TOOL_DEMO_DATA)
    fields = {
        **demo_fields(TOOL_DEMO_RECIPE, RL_DEMO_NAME, datasets),
        "start_from.run": run.pk,
        **RL_SETTINGS,
    }
    try:
        config = accept(team, fields)
    except Refused as refused:  # the trainer's status report must not fail for it: say so in the log
        logger.warning("the demo's GRPO could not start from run %s: %s", run.pk, refused)
        return
    note = f"GRPO from the checkpoint of the demo's SFT run {run.pk}: tool use and reward rise together."
    Experiment.create(team, run.experiment.created_by, config, [1], description=note).launch()
