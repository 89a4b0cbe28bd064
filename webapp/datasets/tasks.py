from __future__ import annotations

from datetime import timedelta

import pyarrow as pa
from celery import shared_task
from django.utils import timezone

from webapp.datasets.models import (
    PREPARE_RECIPE_TASK,
    VALIDATE_DATASET_TASK,
    Dataset,
    DatasetStatus,
    ImportStatus,
    RecipeImport,
)

# Validation of the largest allowed upload takes well under a minute; anything still pending after
# this long lost its task (a worker died, the broker was flushed) and is sent again.
RESEND_PENDING_AFTER = timedelta(minutes=10)


@shared_task(name=VALIDATE_DATASET_TASK)
def validate_dataset(dataset_id: int) -> None:
    """Run the shared validator on an uploaded file; big files are why this is not in the request."""
    dataset = Dataset.objects.filter(pk=dataset_id).first()
    if dataset is None:
        return
    try:
        dataset.validate()
    finally:
        # Arrow's allocator keeps freed buffers for reuse; a long-lived worker would hold the
        # largest file's peak for ever (docs/reliability.md#parquet-memory).
        pa.default_memory_pool().release_unused()


@shared_task(name=PREPARE_RECIPE_TASK)
def prepare_recipe(import_id: int) -> None:
    recipe_import = RecipeImport.objects.filter(pk=import_id).select_related("team", "created_by").first()
    if recipe_import is None:
        return
    recipe_import.run()


@shared_task
def resend_lost_work() -> tuple[list[int], list[int]]:
    """Periodic: validations and recipe imports still pending long after upload are sent again.

    Both tasks settle their object with a guarded UPDATE, so a late original delivery racing the
    resent one is harmless: the second to finish changes nothing.
    """
    cutoff = timezone.now() - RESEND_PENDING_AFTER
    datasets = list(
        Dataset.objects.filter(status=DatasetStatus.PENDING, created__lt=cutoff).values_list("pk", flat=True)
    )
    imports = list(
        RecipeImport.objects.filter(status=ImportStatus.PENDING, created__lt=cutoff).values_list(
            "pk", flat=True
        )
    )
    for dataset_id in datasets:
        validate_dataset.delay(dataset_id)
    for import_id in imports:
        prepare_recipe.delay(import_id)
    return datasets, imports
