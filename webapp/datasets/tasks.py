from __future__ import annotations

from celery import shared_task

from webapp.datasets.models import Dataset, RecipeImport


@shared_task
def validate_dataset(dataset_id: int) -> None:
    """Run the shared validator on an uploaded file; big files are why this is not in the request."""
    dataset = Dataset.objects.filter(pk=dataset_id).first()
    if dataset is None:
        return
    dataset.validate()


@shared_task
def prepare_recipe(import_id: int) -> None:
    recipe_import = RecipeImport.objects.filter(pk=import_id).select_related("team", "created_by").first()
    if recipe_import is None:
        return
    recipe_import.run()
