"""The first-run demo: a Demo team with the built-in recipes' datasets and one experiment
(arithmetic, GRPO, SmolLM2-135M-Instruct) ready to launch with one click. Run by `make run`;
does nothing once the Demo team exists."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from trainer.config import RunConfig
from webapp.accounts.models import Team
from webapp.datasets.models import Dataset, RecipeImport
from webapp.experiments import services

logger = logging.getLogger(__name__)
DEMO_TEAM = "Demo"
DEMO_RECIPES = ("arithmetic", "gsm8k", "hotpotqa", "webshop", "alfworld")


class Command(BaseCommand):
    help = "Create the Demo team, its datasets and a ready-to-launch arithmetic GRPO experiment (once)."

    def handle(self, *args: Any, **options: Any) -> None:
        admin = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
        if admin is None or Team.objects.filter(name=DEMO_TEAM).exists():
            return
        team = Team.create_with_owner(DEMO_TEAM, admin)
        datasets = {recipe: self._import(team, recipe, admin) for recipe in DEMO_RECIPES}
        arithmetic = datasets["arithmetic"]
        if "train" in arithmetic:
            self._demo_experiment(team, admin, arithmetic)
        self.stdout.write(
            f"Demo team ready: {sum(len(d) for d in datasets.values())} datasets, one experiment."
        )

    def _import(self, team: Team, recipe: str, user: Any) -> dict[str, Dataset]:
        recipe_import = RecipeImport.start(team, recipe, "", user)
        recipe_import.run()  # here and now; the queued task finds it done and does nothing
        if recipe_import.status != "done":
            # ALFWorld's engine is an optional (GPL) install; the demo goes on without it.
            self.stdout.write(f"  {recipe}: no demo dataset ({recipe_import.message})")
            return {}
        return {d.name.split()[1]: d for d in recipe_import.datasets.all() if d.is_usable}

    def _demo_experiment(self, team: Team, user: Any, datasets: dict[str, Dataset]) -> None:
        from tasks_lib.registry import load_recipes
        from trainer.models import smollm2_path

        smollm2_path()  # convert the packaged model now, so the first click trains at once
        load_recipes()  # the arithmetic recipe's defaults sit under the values below
        # Nothing but what names the demo: the settings are the ones the New-experiment form starts
        # from, the preset's for a model of SmolLM2's size under the recipe's (docs/presets.md).
        overrides = {
            "task": "arithmetic",
            "name": "Arithmetic demo (GRPO, SmolLM2-135M)",
            "model.path": "smollm2-135m-instruct",
            "data.train_path": datasets["train"].reference,
            "data.val_path": datasets["val"].reference if "val" in datasets else None,
        }
        config = RunConfig.from_preset("grpo", **overrides)
        services.create_experiment(team, user, config, [1], description="The first run: one click on Launch.")
