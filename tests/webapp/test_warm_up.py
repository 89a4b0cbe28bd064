"""A web worker does before its first request what made the first experiment form or dataset page it
served take seconds (tens of seconds on a loaded machine): docs/benchmarks.md#pages-under-load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import sys
import webapp.wsgi
from django.template import engines
cached = engines["django"].engine.template_loaders[0].loaders[0].get_template_cache
print(sorted(name for name in ("tasks_lib.sources", "webapp.urls", "webapp.experiments.views") if name in sys.modules))
print(len(cached))
"""


def test_a_web_worker_loads_the_recipes_the_views_and_the_templates_as_it_starts() -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "webapp.settings", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    modules, templates = done.stdout.splitlines()[-2:]
    assert modules == "['tasks_lib.sources', 'webapp.experiments.views', 'webapp.urls']"
    assert int(templates) >= len(list((ROOT / "templates").rglob("*.html")))
