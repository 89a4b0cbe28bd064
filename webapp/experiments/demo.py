"""The first-run demo: the arithmetic recipe's datasets and a GRPO experiment on the built-in
SmolLM2-135M-Instruct. `make run` puts it in a Demo team (seed_demo); the empty dashboard starts it
in the user's own team with one click."""

from __future__ import annotations

from typing import Any

from trainer.config import RunConfig
from webapp.accounts.models import Team
from webapp.datasets.models import Dataset, RecipeImport
from webapp.experiments.acceptance import accept
from webapp.experiments.models import Experiment, Run

DEMO_RECIPE = "arithmetic"
DEMO_NAME = "Arithmetic demo (GRPO, SmolLM2-135M)"
# The demo trains on 450 generated problems and validates on 50 held out: the data bench/bench_learning.py
# measures the small-model defaults on (docs/presets.md#how-these-were-chosen). The recipe's fixtures
# (7 and 1 rows) are for tests: a curve over them shows memorising, and a validation of one row 0 or 1.
DEMO_DATA = {"size": 500}


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
    fields = {
        "preset": "grpo",
        "task": DEMO_RECIPE,
        "name": DEMO_NAME,
        "model.path": "smollm2-135m-instruct",
        "data.train_path": datasets["train"].reference,
        "data.val_path": datasets["val"].reference if "val" in datasets else None,
    }
    return accept(team, fields)


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


def start_demo(team: Team, user: Any) -> Run:
    """The demo in ``team``: datasets, experiment and its one run, launched. ValueError says why not."""
    datasets, problem = demo_datasets(team, user)
    if "train" not in datasets:
        raise ValueError(
            f"the {DEMO_RECIPE} recipe could not prepare its datasets: {problem or 'no train split'}"
        )
    return demo_experiment(team, user, datasets).launch().runs[0]
