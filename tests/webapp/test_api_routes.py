"""The trainer's routes are mounted from trainer.contract's paths, not spelled again in webapp/."""

from __future__ import annotations

import re
from pathlib import Path

from django.test import Client
from django.urls import resolve

from trainer.contract import API_ROOT, TRAINER_PATHS

WEBAPP = Path(__file__).resolve().parents[2] / "webapp"


def test_the_apis_trainer_routes_are_exactly_the_contracts_paths(client: Client) -> None:
    schema = client.get(f"{API_ROOT}/openapi.json").json()
    served = {
        path for path in schema["paths"] if "{run_id}" in path and not path.startswith(f"{API_ROOT}/t/")
    }
    assert served == set(TRAINER_PATHS)
    for path in TRAINER_PATHS:
        # Ninja turns {int:run_id} into Django's <int:run_id>: the route Django matches is the contract's.
        expected = re.sub(r"\{(\w+_id)\}", r"<int:\1>", path).replace("{", "<").replace("}", ">").lstrip("/")
        assert resolve(path.format(run_id=7, split="train")).route == expected


def test_no_trainer_path_is_typed_in_the_webapp() -> None:
    # The old spellings: routes relative to a router prefix, and the ingestion prefix itself.
    typed = re.compile(r"""["']/(\{int:run_id\}|ingest/|runs/\{)""")
    found = [
        f"{source.relative_to(WEBAPP)}:{number}"
        for source in WEBAPP.rglob("*.py")
        for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1)
        if typed.search(line)
    ]
    assert found == []
