from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_delete


class ExperimentsConfig(AppConfig):
    name = "webapp.experiments"
    label = "experiments"

    def ready(self) -> None:
        # A signal, not Run.delete(): queryset and cascade deletes never call a model's delete().
        from webapp.experiments import registrations
        from webapp.experiments.demo import continue_demo
        from webapp.experiments.lifecycle import close_attempt
        from webapp.experiments.models import Run
        from webapp.experiments.services import delete_run_files
        from webapp.experiments.signals import run_finished

        post_delete.connect(delete_run_files, sender=Run, dispatch_uid="delete_run_files")
        registrations.register()
        run_finished.connect(continue_demo, dispatch_uid="continue_demo")
        run_finished.connect(close_attempt, dispatch_uid="close_run_attempt")
