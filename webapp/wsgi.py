from __future__ import annotations

import os
from pathlib import Path

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
application = get_wsgi_application()


def warm_up() -> None:
    """Do, as a web worker starts, what its first requests would otherwise pay for: import the task
    recipes (the math libraries they bring take ~2 s on an idle core), every view and the REST API's
    schemas (the URLconf, ~2 s), and compile our page templates. On a loaded machine each costs ten
    times as much; the experiment form and every dataset page need them all
    (docs/benchmarks.md#pages-under-load)."""
    from django.conf import settings
    from django.template.loader import get_template
    from django.urls import get_resolver

    from tasks_lib.registry import load_recipes

    load_recipes()
    get_resolver().url_patterns  # noqa: B018 (the property imports the URLconf and the views)
    pages = Path(settings.BASE_DIR) / "templates"
    for template in sorted(pages.rglob("*.html")):
        get_template(template.relative_to(pages).as_posix())


warm_up()
