"""The first-run demo team: a Demo team with the built-in recipes' datasets and one experiment
(arithmetic, GRPO, SmolLM2-135M-Instruct) ready to launch with one click. Run by `make run`;
does nothing once the Demo team exists."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from webapp.accounts.models import Team
from webapp.experiments.demo import DEMO_RECIPE, demo_datasets, demo_experiment, import_recipe

DEMO_TEAM = "Demo"
DEMO_RECIPES = ("arithmetic", "gsm8k", "hotpotqa", "webshop", "alfworld")


class Command(BaseCommand):
    help = "Create the Demo team, its datasets and a ready-to-launch arithmetic GRPO experiment (once)."

    def handle(self, *args: Any, **options: Any) -> None:
        admin = get_user_model().objects.filter(is_superuser=True).order_by("pk").first()
        if admin is None or Team.objects.filter(name=DEMO_TEAM).exists():
            return
        team = Team.create_with_owner(DEMO_TEAM, admin)
        datasets = {}
        for recipe in DEMO_RECIPES:
            # Every recipe's fixtures to look at; the demo's own task, the data its run learns from.
            imported = (
                demo_datasets(team, admin) if recipe == DEMO_RECIPE else import_recipe(team, recipe, admin)
            )
            datasets[recipe], problem = imported
            if problem:
                # ALFWorld's engine is an optional (GPL) install; the demo goes on without it.
                self.stdout.write(f"  {recipe}: no demo dataset ({problem})")
        if "train" in datasets[DEMO_RECIPE]:
            from trainer.models import smollm2_path

            smollm2_path()  # convert the packaged model now, so the first click trains at once
            demo_experiment(team, admin, datasets[DEMO_RECIPE])
        self.stdout.write(
            f"Demo team ready: {sum(len(d) for d in datasets.values())} datasets, one experiment."
        )
