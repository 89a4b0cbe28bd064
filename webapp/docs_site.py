"""Build the documentation site: ``python -m webapp.docs_site`` (what ``make docs`` runs).

The REST API page is rendered from the OpenAPI schema, so the schema is written from the code into
``docs/openapi.json`` first (git ignores it), then MkDocs builds ``mkdocs.yml`` with ``--strict``:
a broken link, a missing anchor or a page left out of the navigation fails the build.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "docs" / "openapi.json"
DEFAULT_SITE = ROOT / "var" / "site"


def write_schema(path: Path = SCHEMA) -> None:
    """The schema the running server serves at /api/openapi.json, from the same code."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from webapp.routers import api  # the routers are mounted there

    path.write_text(json.dumps(api.get_openapi_schema(), indent=1, sort_keys=True) + "\n", encoding="utf-8")


def build(site_dir: Path = DEFAULT_SITE) -> subprocess.CompletedProcess[str]:
    """Run MkDocs; the result carries its output (the warnings that failed a strict build)."""
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "--quiet"]
    command += ["--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site_dir)]
    # Material prints a banner about MkDocs 2 on every build; it is not a warning about our pages.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--site-dir", type=Path, default=DEFAULT_SITE, help="where the site is written")
    args = parser.parse_args(argv)
    write_schema()
    result = build(args.site_dir)
    sys.stderr.write(result.stdout + result.stderr)
    if result.returncode == 0:
        print(f"documentation site written to {args.site_dir}/index.html")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
